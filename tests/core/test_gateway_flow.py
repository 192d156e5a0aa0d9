"""The whole core composed by gateway.app: command agent, policy, SQL tools, confirmations.

Messages go in through the real bus and come out through the real channel manager into a
recording channel (a real Channel subclass; the seam under test is the core, not a platform).
"""

from __future__ import annotations

import asyncio
import socket
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import structlog

from config.settings import Settings
from gateway.app import Gateway, build
from gateway.bus import InboundMessage, OutboundKind
from gateway.confirm.events import ConfirmationEvent
from gateway.confirm.model import Confirmation, Risk, Status, ToolCall
from gateway.tools.base import tool
from tests.support import RecordingChannel, ShiftedClock, pass_deadline


class Chat:
    def __init__(self, gw: Gateway, channel: RecordingChannel) -> None:
        self.gw = gw
        self.channel = channel
        self.n = 0

    async def say(
        self, text: str, *, user: str = "alice", chat: str = "c1", group: bool = False
    ) -> None:
        self.n += 1
        await self.gw.bus.publish_inbound(
            InboundMessage(
                channel="rec",
                chat_id=chat,
                sender_id=user,
                text=text,
                message_id=f"m{self.n}",
                is_group=group,
            )
        )


@pytest.fixture
async def chat(make_settings: Callable[..., Settings]) -> AsyncIterator[Chat]:
    settings = make_settings(confirmation={"store": "memory", "timeout_seconds": 30})
    gw = await build(settings, serve_http=False)
    rec = RecordingChannel()
    gw.channels.add(rec)
    async with gw:
        yield Chat(gw, rec)


def rows(settings: Settings, where: str = "1=1") -> int:
    db = settings.data_dir / "demo.db"
    with sqlite3.connect(db) as conn:
        return int(conn.execute(f"SELECT COUNT(*) FROM orders WHERE {where}").fetchone()[0])


async def test_sql_delete_waits_for_confirm_then_runs(chat: Chat) -> None:
    await chat.say("/sql DELETE FROM orders WHERE id = 3")
    prompt = await chat.channel.next(OutboundKind.CONFIRMATION)
    conf = prompt.confirmation
    assert conf is not None
    assert conf.details["kind"] == "DELETE"
    assert conf.details["tables"] == ["orders"]
    assert conf.details["rows_affected"] == 1
    assert conf.details["statement"] == "DELETE FROM orders WHERE id = 3"
    for shown in (
        conf.id,
        "DELETE FROM orders WHERE id = 3",
        "影响行数 Rows affected: 1",
        "Time left",
    ):
        assert shown in prompt.text
    # Held: while nobody has decided, another chat still sees the row (a barrier: the
    # agent has answered a later message, no timing involved).
    await chat.say("/sql SELECT customer FROM orders WHERE id = 3", chat="other")
    answer = await chat.channel.next(contains="Carol")
    assert answer.chat_id == "other"
    assert rows(chat.gw.settings, "id = 3") == 1
    await chat.say("确认")
    await chat.channel.next(contains="DELETE: 1 行 / 1 row")
    assert rows(chat.gw.settings, "id = 3") == 0


async def test_sql_delete_cancel_keeps_row(chat: Chat) -> None:
    await chat.say("/sql DELETE FROM orders WHERE id = 4")
    await chat.channel.next(OutboundKind.CONFIRMATION)
    await chat.say("取消")
    update = await chat.channel.next(OutboundKind.CONFIRMATION_UPDATE)
    assert update.confirmation is not None and update.confirmation.status is Status.REJECTED
    # One turn at a time per session: once the next command in this chat is answered,
    # the rejected turn is over, and it ran nothing.
    await chat.say("/sql SELECT customer FROM orders WHERE id = 4")
    await chat.channel.next(contains="Dave")
    assert rows(chat.gw.settings, "id = 4") == 1


async def test_delete_without_where_is_critical(chat: Chat) -> None:
    await chat.say("/sql DELETE FROM orders")
    prompt = await chat.channel.next(OutboundKind.CONFIRMATION)
    assert prompt.confirmation is not None
    assert prompt.confirmation.risk is Risk.CRITICAL
    assert prompt.confirmation.details["rows_affected"] == 8
    await chat.say("取消")


async def test_unparseable_sql_is_refused_without_asking(chat: Chat) -> None:
    await chat.say("/sql DELETE FROM WHERE")
    msg = await chat.channel.next()
    assert msg.kind is OutboundKind.TEXT
    assert "parse" in msg.text
    assert await chat.gw.confirmations.list(status=Status.PENDING) == []


async def test_select_runs_without_confirmation(chat: Chat) -> None:
    await chat.say("/sql SELECT customer FROM orders WHERE id = 1")
    msg = await chat.channel.next()
    assert msg.kind is OutboundKind.TEXT
    assert "Alice" in msg.text


async def test_pending_session_does_not_block_another(chat: Chat) -> None:
    await chat.say("/sql DELETE FROM orders WHERE id = 5", chat="a")
    await chat.channel.next(OutboundKind.CONFIRMATION)
    await chat.say("/sql SELECT customer FROM orders WHERE id = 2", chat="b")
    msg = await chat.channel.next(contains="Bob")
    assert msg.chat_id == "b"


async def test_new_command_while_pending_rejects_and_is_answered(chat: Chat) -> None:
    await chat.say("/sql DELETE FROM orders WHERE id = 6")
    await chat.channel.next(OutboundKind.CONFIRMATION)
    await chat.say("/sql SELECT customer FROM orders WHERE id = 6")
    update = await chat.channel.next(OutboundKind.CONFIRMATION_UPDATE)
    assert update.confirmation is not None
    assert update.confirmation.status is Status.REJECTED
    assert update.confirmation.feedback
    # The message was not lost: the agent answered it after the rejection.
    await chat.channel.next(contains="Frank")
    assert rows(chat.gw.settings, "id = 6") == 1


async def test_group_member_cannot_approve(chat: Chat) -> None:
    await chat.say("/sql DELETE FROM orders WHERE id = 7", group=True)
    await chat.channel.next(OutboundKind.CONFIRMATION)
    await chat.say("确认", user="mallory", group=True)
    told = await chat.channel.next(contains="仅发起人或审批人")
    assert told.chat_id == "c1"
    assert rows(chat.gw.settings, "id = 7") == 1
    await chat.say("确认", user="alice", group=True)
    await chat.channel.next(contains="DELETE: 1 行 / 1 row")
    assert rows(chat.gw.settings, "id = 7") == 0


async def test_shutdown_cancels_pending_and_tells_chat(
    make_settings: Callable[..., Settings],
) -> None:
    gw = await build(make_settings(), serve_http=False)
    rec = RecordingChannel()
    gw.channels.add(rec)
    await gw.start()
    await gw.bus.publish_inbound(
        InboundMessage(
            channel="rec",
            chat_id="c1",
            sender_id="alice",
            text="/sql DELETE FROM orders WHERE id = 8",
            message_id="x1",
        )
    )
    await rec.next(OutboundKind.CONFIRMATION)
    await gw.stop()
    updates = [m for m in rec.sent if m.kind is OutboundKind.CONFIRMATION_UPDATE]
    assert len(updates) == 1
    assert updates[0].confirmation is not None
    assert updates[0].confirmation.status is Status.CANCELLED
    assert rows(gw.settings, "id = 8") == 1


HELD = asyncio.Event()


@tool(requires_confirmation=True, risk="high")
async def slow_restart(name: str) -> str:
    """Restart a service that takes its time (test plugin: waits for HELD)."""
    await HELD.wait()
    return f"restarted {name}"


async def test_a_stop_waiting_on_a_running_call_says_so(
    make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys
    import types

    import gateway.app

    module = types.ModuleType("gw_slow_plugin")
    module.slow_restart = slow_restart  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "gw_slow_plugin", module)
    monkeypatch.setattr(gateway.app, "SLOW_STOP_STEP_SECONDS", 0.05)
    settings = make_settings(
        tools={"plugins": ["gw_slow_plugin"]},
        confirmation={"store": "memory", "stop_timeout_seconds": 0.5},
    )
    gw = await build(settings, serve_http=False)
    rec = RecordingChannel()
    gw.channels.add(rec)
    await gw.start()
    turn = gw.loop.turn_for(InboundMessage(channel="rec", chat_id="c1", sender_id="alice", text=""))
    await gw.runner.invoke(ToolCall(name="slow_restart", args={"name": "db"}, call_id="c-1"), turn)
    await rec.next(OutboundKind.CONFIRMATION)
    await gw.bus.publish_inbound(
        InboundMessage(channel="rec", chat_id="c1", sender_id="alice", text="确认", message_id="r1")
    )
    while not gw.executor.running:
        await asyncio.sleep(0.01)
    with structlog.testing.capture_logs() as logs:
        await gw.stop()
    waiting = [e["step"] for e in logs if e["event"] == "gateway.stop_waiting"]
    assert waiting.count("running calls") == 1


CALLS: list[dict[str, Any]] = []


@tool(requires_confirmation=True, risk="high")
def restart_service(name: str) -> str:
    """Restart a service (test plugin; records its calls)."""
    CALLS.append({"name": name})
    return f"restarted {name}"


async def test_plugin_tool_runs_only_after_approval(make_settings: Callable[..., Settings]) -> None:
    import sys
    import types

    module = types.ModuleType("gw_test_plugin")
    module.restart_service = restart_service  # type: ignore[attr-defined]
    sys.modules["gw_test_plugin"] = module
    CALLS.clear()
    settings = make_settings(
        tools={"plugins": ["gw_test_plugin"]},
        confirmation={"store": "memory"},
    )
    clock = ShiftedClock()  # the first call's deadline passes when the test says
    gw = await build(settings, serve_http=False, clock=clock)
    rec = RecordingChannel()
    gw.channels.add(rec)
    async with gw:
        assert gw.confirmations is not None
        turn = gw.loop.turn_for(
            InboundMessage(channel="rec", chat_id="c1", sender_id="alice", text="")
        )
        call = ToolCall(name="restart_service", args={"name": "db"}, call_id="c-1")
        # Asked: the turn ends waiting; the call's outcome goes on from the stored record.
        ended = _ended(gw)
        # Timeout: never runs.
        asked = await gw.runner.invoke(call, turn)
        assert asked.status == "waiting" and asked.confirmation is not None
        prompt = await rec.next(OutboundKind.CONFIRMATION)
        assert prompt.confirmation is not None
        await pass_deadline(gw.confirmations, clock, prompt.confirmation.id)
        assert (await ended.get()).status is Status.EXPIRED
        assert CALLS == []
        # Rejected: never runs.
        rec.skip_sent()
        await gw.runner.invoke(call, turn)
        await rec.next(OutboundKind.CONFIRMATION)
        await gw.bus.publish_inbound(
            InboundMessage(
                channel="rec", chat_id="c1", sender_id="alice", text="取消", message_id="r1"
            )
        )
        assert (await ended.get()).status is Status.REJECTED
        assert CALLS == []
        # Approved: runs exactly once, and the chat reads its result.
        rec.skip_sent()
        await gw.runner.invoke(call, turn)
        await rec.next(OutboundKind.CONFIRMATION)
        await gw.bus.publish_inbound(
            InboundMessage(
                channel="rec", chat_id="c1", sender_id="alice", text="确认", message_id="r2"
            )
        )
        assert (await ended.get()).status is Status.APPROVED
        result = await rec.next(OutboundKind.TEXT)
        while "restarted db" not in result.text:
            result = await rec.next(OutboundKind.TEXT)
        assert CALLS == [{"name": "db"}]
    del sys.modules["gw_test_plugin"]


async def test_pending_confirmation_survives_a_crash(
    make_settings: Callable[..., Settings],
) -> None:
    """A pending row left by a crashed process is still decidable after restart, and runs."""
    from gateway.storage.sqlite.confirmations import SqliteConfirmationStore

    settings = make_settings(confirmation={"store": "sqlite", "timeout_seconds": 30})
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    # What a crashed gateway leaves behind: the demo DB and a pending confirmation.
    # Building makes the demo DB; this gateway never held anything, so stopping it
    # cancels nothing.
    first = await build(settings, serve_http=False)
    await first.stop()
    store = await SqliteConfirmationStore.open(Path(settings.data_dir) / "confirmations.db")
    now = time.time()
    await store.create(
        Confirmation(
            id="AB12",
            session_key="rec:c1",
            channel="rec",
            chat_id="c1",
            requester="alice",
            is_group=False,
            tool_call=ToolCall("sql_modify", {"sql": "DELETE FROM orders WHERE id = 2"}, "c9"),
            summary="DELETE orders",
            created_at=now,
            expires_at=now + 30,
        )
    )
    await store.close()

    second = await build(settings, serve_http=False)
    rec = RecordingChannel()
    second.channels.add(rec)
    async with second:
        await second.bus.publish_inbound(
            InboundMessage(
                channel="rec", chat_id="c1", sender_id="alice", text="确认 AB12", message_id="z"
            )
        )
        update = await rec.next(OutboundKind.CONFIRMATION_UPDATE)
        assert update.confirmation is not None and update.confirmation.status is Status.APPROVED
        await rec.next(contains="DELETE: 1 行 / 1 row")
    assert rows(settings, "id = 2") == 0


async def test_a_failed_build_closes_what_it_opened(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    from config.settings import ConfigError
    from gateway.storage.sqlite.confirmations import SqliteConfirmationStore

    store = await SqliteConfirmationStore.open(tmp_path / "given.db")
    settings = make_settings(tools={"plugins": ["tests.plugins.not_there"]})
    with pytest.raises(ConfigError, match=r"tests\.plugins\.not_there"):
        await build(settings, serve_http=False, store=store)
    # The store it was handed (and would have owned) is closed again.
    with pytest.raises(ValueError, match="no active connection"):
        await store.get("AB12")


async def test_a_failed_start_stops_what_it_started(
    make_settings: Callable[..., Settings],
) -> None:
    from config.settings import ConfigError
    from gateway.storage.sqlite.confirmations import SqliteConfirmationStore

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        settings = make_settings(
            server={"port": port}, confirmation={"store": "sqlite"}, channels={"webchat": {}}
        )
        gw = await build(settings)
        with pytest.raises(ConfigError, match=f"cannot listen on 127.0.0.1:{port}"):
            await gw.start()
    assert not gw.ready
    assert gw.stopped.is_set()
    assert isinstance(gw.store, SqliteConfirmationStore)
    with pytest.raises(ValueError, match="no active connection"):
        await gw.store.get("AB12")


async def test_a_database_error_is_one_sentence_and_the_raw_text_stays_in_the_trail(
    chat: Chat,
) -> None:
    """A driver's text ("…(Background on this error at: https://sqlalche.me/e/…)") reached
    the chat (issue 26): the chat reads the kind of failure, the audit trail the raw text."""
    await chat.say("/sql SELECT * FROM no_such_orders")
    msg = await chat.channel.next(contains="数据库未执行")
    assert "表或列不存在" in msg.text and "a table or column it names does not exist" in msg.text
    for raw in ("sqlalche.me", "OperationalError", "no such table"):
        assert raw not in msg.text

    await chat.say("/sql UPDATE orders SET no_such_column = 1 WHERE id = 2")
    prompt = await chat.channel.next(OutboundKind.CONFIRMATION)
    assert prompt.confirmation is not None
    await chat.say("确认")
    msg = await chat.channel.next(contains="数据库未执行")
    assert "表或列不存在" in msg.text and "no such column" not in msg.text
    events = await chat.gw.confirmations.store.events(prompt.confirmation.id)
    finished = next(e for e in events if e.kind == "finished")
    assert "表或列不存在" in finished.detail["result"]
    assert "no such column: no_such_column" in finished.detail["error"]


def _ended(gw: Gateway) -> asyncio.Queue[Confirmation]:
    """The records of ``gw``'s confirmations as they end, in order."""
    assert gw.confirmations is not None
    seen: asyncio.Queue[Confirmation] = asyncio.Queue()

    def listener(event: ConfirmationEvent) -> None:
        if event.kind == "resolved":
            seen.put_nowait(event.confirmation)

    gw.confirmations.subscribe(listener)
    return seen
