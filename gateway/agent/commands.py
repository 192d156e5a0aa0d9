"""The command agent: works with no model. ``/sql``, ``/pending``, ``/help``."""

from __future__ import annotations

from gateway import texts
from gateway.bus import InboundMessage
from gateway.confirm.ids import new_call_id
from gateway.confirm.model import Confirmation, ToolCall
from gateway.confirm.replies import parse_undo
from gateway.confirm.service import ConfirmationService
from gateway.texts import several as several_texts
from gateway.tools.executor import Say
from gateway.tools.runner import ToolOutcome, ToolRunner, TurnContext
from gateway.tools.sql_analysis import analyze_sql
from gateway.tools.sql_undo import ask_undo


class CommandAgent:
    """Slash commands through the same policy and confirmation path as a model would use."""

    def __init__(
        self, *, runner: ToolRunner, confirmations: ConfirmationService, sql_dialect: str = "sqlite"
    ) -> None:
        self.runner = runner
        self.confirmations = confirmations
        self.sql_dialect = sql_dialect

    async def handle(self, msg: InboundMessage, turn: TurnContext) -> None:
        await self._dispatch(msg.text.strip(), turn)

    async def resume(self, confirmation: Confirmation, say: Say) -> None:
        """Go on from an ended call: an approved one runs and its result line is posted
        (rejected, expired and cancelled calls were told by the confirmation update)."""
        await self.runner.settle(confirmation, say, report=True)

    async def _dispatch(self, text: str, turn: TurnContext) -> None:
        if not text:
            return
        undo_of = parse_undo(text)
        if undo_of is not None:
            outcome = await ask_undo(self.runner, self.confirmations, undo_of, turn)
            if outcome is not None:
                await self._report(outcome, "sql_undo", turn)
            return
        command, _, rest = text.partition(" ")
        command = command.lower()
        if command == "/sql":
            return await self._sql(rest.strip(), turn)
        if command == "/pending":
            pending = await self.confirmations.list_pending(turn.session_key)
            await turn.say(several_texts.pending_list(pending, self.confirmations.clock()))
            return
        if command in ("/help", "/start", "help", "帮助"):
            await turn.say(texts.HELP_NO_MODEL)
            return
        if command.startswith("/"):
            await turn.say(texts.UNKNOWN_COMMAND.format(command=command))
            return
        await turn.say(texts.HELP_NO_MODEL)

    async def _sql(self, statement: str, turn: TurnContext) -> None:
        if not statement:
            await turn.say("用法 usage: /sql <statement>")
            return
        analysis = analyze_sql(statement, self.sql_dialect)
        name = "sql_query" if analysis.read_only else "sql_modify"
        outcome = await self.runner.invoke(
            ToolCall(name=name, args={"sql": statement}, call_id=new_call_id()), turn
        )
        await self._report(outcome, name, turn)

    async def _report(self, outcome: ToolOutcome, name: str, turn: TurnContext) -> None:
        if outcome.status == "ok":
            cid = outcome.confirmation.id if outcome.confirmation else None
            await turn.say(texts.tool_result(name, outcome.output, cid))
        elif outcome.status == "error" and outcome.decision is not None:
            # Refusals before the policy were already said by the runner.
            await turn.say(texts.tool_failed(name, outcome.output))
        elif outcome.status == "unknown_tool":
            await turn.say(texts.tool_failed(name, outcome.output))
        # waiting: the prompt is out, and ``resume`` goes on once the call has ended;
        # rejected / expired / cancelled were announced by the confirmation update.
