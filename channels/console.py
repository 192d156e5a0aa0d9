"""A terminal chat through the same bus and confirmation path (``gateway chat``).

On a terminal, lines are read with prompt_toolkit (channels.console_prompt): line editing,
history, and the prompt shows "thinking…" while a turn runs.

Otherwise (``gateway chat < script.txt``, a pipe) stdin is a script: one message a line,
each sent once the answer to the one before it is in — its turn ended, or it asked for a
confirmation, whose reply is then the next line. At the end of the input the chat ends.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, TextIO

import structlog

from channels.base import Channel
from gateway import texts
from gateway.bus import (
    InboundMessage,
    MessageBus,
    OutboundKind,
    OutboundMessage,
    PublishResult,
)
from gateway.confirm.model import Status
from gateway.runtime import BackgroundTasks

if TYPE_CHECKING:
    from prompt_toolkit.input import Input
    from prompt_toolkit.output import Output

    from channels.console_prompt import PromptReader

log = structlog.get_logger(__name__)


class ConsoleChannel(Channel):
    """Reads lines from stdin as one user; prints everything for ``console:<user>``."""

    name: ClassVar[str] = "console"

    def __init__(
        self,
        *,
        bus: MessageBus,
        user: str = "local",
        stdin: TextIO | None = None,
        stdout: TextIO | None = None,
        on_eof: Callable[[], None] | None = None,
        interactive: bool | None = None,
        history_file: Path | None = None,
        prompt_io: tuple[Input, Output] | None = None,
    ) -> None:
        """``interactive`` None: prompt_toolkit when stdin and stdout are terminals (or
        ``prompt_io`` is given, as tests do); plain line reading otherwise."""
        self.bus = bus
        self.user = user
        self.stdin = stdin or sys.stdin
        self._stdout = stdout
        self.on_eof = on_eof
        if interactive is None:
            interactive = prompt_io is not None or (
                stdin is None and stdout is None and sys.stdin.isatty() and sys.stdout.isatty()
            )
        self.interactive = interactive
        self._history_file = history_file
        self._prompt_io = prompt_io
        self._reader: PromptReader | None = None
        # What the gateway is doing for this chat, shown in the prompt.
        self._turns = 0
        self._activity: str | None = None
        self._tasks = BackgroundTasks("console")
        self._ids = itertools.count(1)
        # Message ids are remembered across restarts (duplicate drop, the inbox): a new
        # run must not reuse the last run's "console-1", or its first lines are dropped.
        self._run_id = uuid.uuid4().hex[:12]
        self._lines: asyncio.Queue[str | None] = asyncio.Queue()
        self._reader_fd: int | None = None
        self._buffer = b""
        # Script mode: the turns of lines sent and not ended, and what was said since the
        # last line; ``_answered`` is set when the next line may go.
        self._unanswered: set[str] = set()
        self._intercepted = False
        self._asked = False
        self._updated = False
        self._told = False
        self._answered = asyncio.Event()

    @property
    def chat_id(self) -> str:
        return self.user

    @property
    def stdout(self) -> TextIO:
        # Looked up at each write: under prompt_toolkit, sys.stdout is patched to print
        # above the prompt line.
        return self._stdout or sys.stdout

    @property
    def activity(self) -> str | None:
        """``texts.CONSOLE_THINKING`` / ``CONSOLE_RUNNING`` while busy, None when idle or
        waiting for the person's decision."""
        return self._activity

    def on_turn(self, msg: InboundMessage, running: bool) -> None:
        """The agent loop started or finished a turn (any chat; only ours counts)."""
        if msg.channel != self.name or msg.chat_id != self.chat_id:
            return
        self._turns += 1 if running else -1
        self._set_activity(texts.CONSOLE_THINKING if self._turns > 0 else None)
        if not running and msg.message_id is not None:
            self._unanswered.discard(msg.message_id)
            self._check_answered()

    def _check_answered(self) -> None:
        """The last line is answered: its turn ended, it asked the person, or (a reply the
        confirmation service took) the person was told why it decided nothing."""
        told = self._intercepted and self._told and not self._updated
        if not self._unanswered or self._asked or told:
            self._answered.set()

    def _set_activity(self, activity: str | None) -> None:
        self._activity = activity
        if self._reader is not None:
            self._reader.refresh()

    async def start(self) -> None:
        if self.interactive:
            from channels.console_prompt import PromptReader

            io = self._prompt_io
            self._reader = PromptReader(
                activity=lambda: self._activity,
                history_file=self._history_file,
                input=io[0] if io else None,
                output=io[1] if io else None,
            )
            self._tasks.spawn(self._run_prompt(), name="console-prompt")
            self._tasks.spawn(self._run(), name="console-input")
            self._print(texts.CONSOLE_BANNER)
            return
        loop = asyncio.get_running_loop()
        fd = self.stdin.fileno()
        try:
            # add_reader keeps stdin off a thread: a thread blocked in readline() would
            # keep the process alive after shutdown.
            loop.add_reader(fd, self._on_readable, fd)
        except PermissionError:
            # A regular file or /dev/null (`gateway chat < script.txt`): epoll refuses
            # it, and reading it never blocks.
            while self._take(os.read(fd, 65536)):
                pass
        else:
            self._reader_fd = fd
        self._tasks.spawn(self._run(), name="console-input")
        self._print(texts.CONSOLE_BANNER)

    def _on_readable(self, fd: int) -> None:
        if not self._take(os.read(fd, 65536)):
            asyncio.get_running_loop().remove_reader(fd)
            self._reader_fd = None

    def _take(self, chunk: bytes) -> bool:
        """Queue the complete lines of ``chunk``; False at the end of the input."""
        if not chunk:
            if self._buffer:  # a last line without its newline
                self._lines.put_nowait(self._buffer.decode("utf-8", errors="replace"))
                self._buffer = b""
            self._lines.put_nowait(None)
            return False
        self._buffer += chunk
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            self._lines.put_nowait(line.decode("utf-8", errors="replace"))
        return True

    async def _run(self) -> None:
        while True:
            line = await self._lines.get()
            if line is None:
                self._ended()
                return
            await self._publish(line)

    async def _run_prompt(self) -> None:
        assert self._reader is not None
        with self._reader.printing_above():
            while True:
                # Straight back to the prompt; _run publishes. Between two prompts the
                # terminal is in cooked mode, where a Ctrl-D typed then (while a slow
                # publish was awaited here) was an EOF nobody read: the chat never ended.
                line = await self._reader.read()
                self._lines.put_nowait(line)  # None at Ctrl-D or Ctrl-C: the chat ends
                if line is None:
                    return

    def _ended(self) -> None:
        if self.on_eof is not None:
            self.on_eof()

    async def _publish(self, line: str) -> None:
        text = line.strip()
        if not text:
            return
        message_id = f"console-{self._run_id}-{next(self._ids)}"
        script = not self.interactive
        if script:
            self._answered.clear()
            self._intercepted = self._asked = self._updated = self._told = False
            self._unanswered.add(message_id)  # before: its turn may end before we resume
        result = await self.bus.publish_inbound(
            InboundMessage(
                channel=self.name,
                chat_id=self.chat_id,
                sender_id=self.user,
                sender_name=self.user,
                text=text,
                message_id=message_id,
            )
        )
        if script:
            if result is not PublishResult.QUEUED:
                self._unanswered.discard(message_id)  # no turn will run for it
            self._intercepted = result is PublishResult.INTERCEPTED
            self._check_answered()
            await self._answered.wait()

    def _print(self, text: str) -> None:
        self.stdout.write(text + "\n")
        self.stdout.flush()

    async def send(self, msg: OutboundMessage) -> None:
        if msg.kind is OutboundKind.CONFIRMATION:
            self._print("\n" + msg.text + "\n")
            self._set_activity(None)  # the turn waits for the person, not the gateway
            self._asked = True  # a script's next line is the reply
            self._check_answered()
            return
        self._print(f"bot> {msg.text}")
        counted = msg.confirmation is not None and msg.confirmation.status is Status.PENDING
        if msg.kind is OutboundKind.CONFIRMATION_UPDATE and counted:
            return  # a vote counted (approvals = N): the call still waits
        if msg.kind is OutboundKind.CONFIRMATION_UPDATE:
            self._updated = True  # decided: the turn goes on, its result is the answer
        elif msg.reply_to is None:
            self._told = True
        self._check_answered()
        if msg.kind is OutboundKind.CONFIRMATION_UPDATE and self._turns > 0:
            approved = msg.confirmation is not None and msg.confirmation.status is Status.APPROVED
            self._set_activity(texts.CONSOLE_RUNNING if approved else texts.CONSOLE_THINKING)

    async def stop(self) -> None:
        if self._reader_fd is not None:
            asyncio.get_running_loop().remove_reader(self._reader_fd)
            self._reader_fd = None
        await self._tasks.cancel()
