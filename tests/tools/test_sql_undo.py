"""Undo of an approved SQL change (issue 24, item 3), through the whole gateway, on SQLite,
PostgreSQL and MariaDB.

``/sql`` and ``撤销 K7Q2`` go bus -> intercept -> command agent -> runner -> policy -> the
held call -> a person's ``确认`` -> the executor -> the SQL tools against the real
database. The test's own connection reads the rows and plays the colleague who changes
them in between. PostgreSQL and MariaDB skip when unreachable (fail with
GATEWAY_TEST_REQUIRE_SERVICES=1).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from config.settings import Settings
from gateway import texts
from gateway.app import Gateway, build
from gateway.bus import InboundMessage, OutboundKind
from gateway.confirm.model import Confirmation, ExecState, Status, ToolCall
from gateway.confirm.replies import parse_undo
from tests.services import MARIADB_URL, POSTGRES_URL, mask_url, require_service
from tests.support import RecordingChannel, wait_record, wait_status

_ids = itertools.count(1)

DATABASES = [
    "sqlite",
    pytest.param("postgresql", marks=pytest.mark.services),
    pytest.param("mariadb", marks=pytest.mark.services),
]

ROWS = [
    (1, "Alice 爱丽丝", Decimal("120.50"), None),
    (2, "Bob", Decimal("80.00"), "vip"),
    (3, "Carol", Decimal("45.25"), None),
    (4, "Dave", Decimal("300.00"), "late"),
]


class Chat:
    """One gateway on a database, a group chat to talk to it, a table of the test's own."""

    def __init__(self, gw: Gateway, channel: RecordingChannel, engine: AsyncEngine) -> None:
        self.gw = gw
        self.channel = channel
        self.engine = engine
        self.table = f"undo_{uuid.uuid4().hex[:10]}"

    async def say(self, text: str, *, sender: str = "alice") -> None:
        await self.gw.bus.publish_inbound(
            InboundMessage(
                channel=RecordingChannel.name,
                chat_id="room",
                sender_id=sender,
                text=text,
                message_id=f"m{next(_ids)}",
            )
        )

    async def run(self, sql: str) -> None:
        async with self.engine.begin() as conn:
            await conn.exec_driver_sql(sql)

    async def rows(self) -> list[tuple[Any, ...]]:
        async with self.engine.connect() as conn:
            result = await conn.exec_driver_sql(f"SELECT * FROM {self.table} ORDER BY id")
            return [tuple(r) for r in result.fetchall()]

    def prompts(self) -> int:
        return len([m for m in self.channel.sent if m.kind is OutboundKind.CONFIRMATION])

    async def held(self, text: str) -> Confirmation:
        """Say ``text``; the confirmation it must wait for (the chat's next prompt)."""
        nth = self.prompts() + 1
        await self.say(text)
        return await self.channel.wait_prompt(nth, within=10)

    async def approved(self, c: Confirmation, *, by: str = "alice") -> Confirmation:
        """``确认 <id>``; the record once its run has ended."""
        await self.say(f"确认 {c.id}", sender=by)
        await wait_status(self.gw, c.id, Status.APPROVED)
        return await wait_record(
            self.gw,
            c.id,
            lambda r: r.execution.state in (ExecState.SUCCEEDED, ExecState.FAILED),
            what="the run's end",
            within=10,
        )

    async def events(self, c: Confirmation) -> list[str]:
        return [e.kind for e in await self.gw.store.events(c.id)]


Start = Callable[..., Awaitable[Chat]]


@pytest.fixture
async def start(make_settings: Callable[..., Settings], tmp_path: Path) -> AsyncIterator[Start]:
    opened: list[Chat] = []

    async def run(kind: str, **overrides: Any) -> Chat:
        url = {
            "postgresql": POSTGRES_URL,
            "mariadb": MARIADB_URL,
            "sqlite": f"sqlite+aiosqlite:///{tmp_path / 'tools.db'}",
        }[kind]
        engine = create_async_engine(url)
        try:
            async with engine.connect() as conn:
                await conn.exec_driver_sql("SELECT 1")
        except (OSError, SQLAlchemyError) as exc:
            await engine.dispose()
            require_service(f"{kind} at {mask_url(url)}", exc)
        settings = make_settings(
            tools={"sql": {"url": url, "statement_timeout_seconds": 5.0}},
            confirmation={
                "store": "memory",
                "timeout_seconds": 60,
                **overrides.pop("confirmation", {}),
            },
            **overrides,
        )
        gw = await build(settings, serve_http=False)
        channel = RecordingChannel()
        gw.channels.add(channel)
        await gw.start()
        chat = Chat(gw, channel, engine)
        opened.append(chat)
        await chat.run(
            f"CREATE TABLE {chat.table} (id INTEGER PRIMARY KEY, customer VARCHAR(50) NOT NULL,"
            " amount NUMERIC(10, 2) NOT NULL, note VARCHAR(20))"
        )
        values = ", ".join(
            f"({i}, '{c}', {a}, {'NULL' if n is None else repr(n)})" for i, c, a, n in ROWS
        )
        await chat.run(f"INSERT INTO {chat.table} VALUES {values}")
        return chat

    yield run
    for chat in opened:
        await chat.gw.stop()
        async with chat.engine.begin() as conn:
            await conn.exec_driver_sql(f"DROP TABLE IF EXISTS {chat.table}")
        await chat.engine.dispose()


def values(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Rows as comparable values (SQLite gives floats for NUMERIC, the others Decimals)."""
    return [(int(i), c, Decimal(str(a)).quantize(Decimal("0.01")), n) for i, c, a, n in rows]


@pytest.mark.parametrize("kind", DATABASES)
@pytest.mark.parametrize(
    ("statement", "rows"),
    [
        ("DELETE FROM {t} WHERE amount > 50", 3),
        ("UPDATE {t} SET amount = amount * 2, note = 'x' WHERE id IN (2, 3)", 2),
        (
            "INSERT INTO {t} (id, customer, amount, note) VALUES (7, 'Erin', 1.10, NULL), "
            "(8, 'Frank', 2.20, 'new')",
            2,
        ),
    ],
    ids=["delete", "update", "insert"],
)
async def test_undo_restores_the_exact_rows(
    start: Start, kind: str, statement: str, rows: int
) -> None:
    chat = await start(kind)
    before = values(await chat.rows())
    change = await chat.held("/sql " + statement.format(t=chat.table))
    assert change.details["undo"]["undoable"] is True
    done = await chat.approved(change)
    assert done.execution.state is ExecState.SUCCEEDED, done.execution.result
    changed = values(await chat.rows())
    assert changed != before
    # The result line offers the undo, with the reply that does it.
    await chat.channel.wait_text(f"撤销 {change.id}")

    undo = await chat.held(f"撤销 {change.id}")
    assert undo.tool_call.name == "sql_undo"
    assert undo.tool_call.args == {"confirmation_id": change.id}
    assert undo.details["undo_of"] == change.id
    # Its own preview: the rows it restores.
    assert undo.details["rows_affected"] == rows
    assert undo.details["effects"][0]["total"] == rows
    assert len(undo.details["effects"][0]["rows"]) == rows
    # Held like any call: nothing is restored before a person approves.
    assert values(await chat.rows()) == changed
    ran = await chat.approved(undo)
    assert ran.execution.state is ExecState.SUCCEEDED, ran.execution.result
    assert values(await chat.rows()) == before
    await chat.channel.wait_text(f"已撤销 {change.id}")
    assert {"undo_offered", "undo_asked", "undo_done"} <= set(await chat.events(change))


@pytest.mark.parametrize("kind", DATABASES)
async def test_undo_after_a_later_change_refuses_and_names_the_keys(
    start: Start, kind: str
) -> None:
    chat = await start(kind)
    change = await chat.held(f"/sql UPDATE {chat.table} SET amount = 0 WHERE id IN (1, 2, 3)")
    await chat.approved(change)
    # A colleague changes rows 2 and 3 afterwards; row 1 is as the change left it.
    await chat.run(f"UPDATE {chat.table} SET note = 'edited' WHERE id IN (2, 3)")
    after_colleague = values(await chat.rows())

    undo = await chat.held(f"undo {change.id}")
    ran = await chat.approved(undo)
    assert ran.execution.state is ExecState.FAILED
    assert ran.execution.result is not None
    assert "2, 3" in ran.execution.result and "撤销被拒绝" in ran.execution.result
    line = await chat.channel.wait_text("撤销被拒绝")
    assert "2, 3" in line.text
    # Nothing was restored, not even row 1.
    assert values(await chat.rows()) == after_colleague
    assert "undo_refused" in await chat.events(change)


@pytest.mark.parametrize("kind", DATABASES)
async def test_a_table_without_a_key_says_not_undoable_on_the_card(start: Start, kind: str) -> None:
    chat = await start(kind)
    bare = f"nokey_{uuid.uuid4().hex[:8]}"
    await chat.run(f"CREATE TABLE {bare} (a INTEGER, b INTEGER)")
    try:
        await chat.run(f"INSERT INTO {bare} VALUES (1, 1), (2, 2)")
        change = await chat.held(f"/sql DELETE FROM {bare} WHERE a = 1")
        assert change.details["undo"]["undoable"] is False
        prompt = next(m for m in reversed(chat.channel.sent) if m.kind is OutboundKind.CONFIRMATION)
        assert "不可撤销" in prompt.text and "no primary or unique key" in prompt.text
        done = await chat.approved(change)
        assert done.execution.result is not None
        assert "cannot be undone" in done.execution.result
        await chat.say(f"撤销 {change.id}")
        await chat.channel.wait_text(f"nothing kept to undo {change.id}")
    finally:
        await chat.run(f"DROP TABLE IF EXISTS {bare}")


@pytest.mark.parametrize("kind", ["sqlite"])
async def test_a_change_is_undone_once(start: Start, kind: str) -> None:
    chat = await start(kind)
    change = await chat.held(f"/sql DELETE FROM {chat.table} WHERE id = 4")
    await chat.approved(change)
    first = await chat.held(f"撤销 {change.id}")
    second = await chat.held(f"撤销 {change.id}")  # asked twice before either ran
    assert (await chat.approved(first)).execution.state is ExecState.SUCCEEDED
    ran = await chat.approved(second)
    assert ran.execution.state is ExecState.FAILED
    assert ran.execution.result is not None and first.id in ran.execution.result
    assert values(await chat.rows()) == values([tuple(r) for r in ROWS])
    # And asked again afterwards, the chat hears it was undone already.
    await chat.say(f"撤销 {change.id}")
    await chat.channel.wait_text(f"was undone by {first.id}")


@pytest.mark.parametrize("kind", ["sqlite"])
async def test_only_the_requester_or_an_approver_asks_for_an_undo(start: Start, kind: str) -> None:
    chat = await start(kind)
    change = await chat.held(f"/sql DELETE FROM {chat.table} WHERE id = 4")
    await chat.approved(change)
    prompts = chat.prompts()
    await chat.say(f"撤销 {change.id}", sender="mallory")
    await chat.channel.wait_text("only the requester or an approver")
    assert chat.prompts() == prompts


@pytest.mark.parametrize("kind", DATABASES)
async def test_a_two_column_unique_key_finds_the_rows_again(start: Start, kind: str) -> None:
    # No primary key: a UNIQUE key of NOT NULL columns is the key the undo uses.
    chat = await start(kind)
    table = f"regions_{uuid.uuid4().hex[:8]}"
    await chat.run(
        f"CREATE TABLE {table} (region VARCHAR(8) NOT NULL, n INTEGER NOT NULL,"
        f" total NUMERIC(8, 2), UNIQUE (region, n))"
    )
    try:
        await chat.run(f"INSERT INTO {table} VALUES ('eu', 1, 1.50), ('eu', 2, 2.50), ('us', 1, 3)")
        read = f"SELECT region, n, total FROM {table} ORDER BY region, n"
        async with chat.engine.connect() as conn:
            before = [tuple(r) for r in (await conn.exec_driver_sql(read)).fetchall()]
        change = await chat.held(f"/sql UPDATE {table} SET total = 0 WHERE n = 1")
        assert change.details["undo"]["undoable"] is True
        await chat.approved(change)
        undo = await chat.held(f"撤销 {change.id}")
        assert (await chat.approved(undo)).execution.state is ExecState.SUCCEEDED
        async with chat.engine.connect() as conn:
            after = [tuple(r) for r in (await conn.exec_driver_sql(read)).fetchall()]
        assert [(r, n, Decimal(str(t))) for r, n, t in after] == [
            (r, n, Decimal(str(t))) for r, n, t in before
        ]
    finally:
        await chat.run(f"DROP TABLE IF EXISTS {table}")


@pytest.mark.parametrize("kind", ["sqlite"])
async def test_an_undo_is_asked_four_eyes_when_its_change_was(start: Start, kind: str) -> None:
    chat = await start(
        kind, confirmation={"approvers": ["bob"]}, policy={"four_eyes_risks": ["medium"]}
    )
    change = await chat.held(f"/sql DELETE FROM {chat.table} WHERE id = 2")
    assert change.four_eyes
    await chat.approved(change, by="bob")
    undo = await chat.held(f"撤销 {change.id}")
    assert undo.four_eyes and undo.requester == "alice"
    await chat.say(f"确认 {undo.id}")  # the requester may not approve her own undo
    await chat.channel.wait_for(
        lambda m: m.kind is not OutboundKind.CONFIRMATION and m.text == texts.FOUR_EYES
    )
    assert (await chat.gw.confirmations.get(undo.id)).status is Status.PENDING  # type: ignore[union-attr]
    assert len(values(await chat.rows())) == 3
    ran = await chat.approved(undo, by="bob")
    assert ran.execution.state is ExecState.SUCCEEDED
    assert len(values(await chat.rows())) == 4


@pytest.mark.parametrize("kind", ["sqlite"])
async def test_an_undo_called_from_another_chat_does_not_run(start: Start, kind: str) -> None:
    # A model may call sql_undo itself, in any chat: who asks is checked when it runs too.
    chat = await start(kind)
    change = await chat.held(f"/sql DELETE FROM {chat.table} WHERE id = 1")
    await chat.approved(change)
    elsewhere = InboundMessage(
        channel=RecordingChannel.name, chat_id="other", sender_id="eve", text="undo it"
    )
    outcome = await chat.gw.runner.invoke(
        ToolCall("sql_undo", {"confirmation_id": change.id}, "call_eve"),
        chat.gw.loop.turn_for(elsewhere),
    )
    assert outcome.status == "waiting" and outcome.confirmation is not None
    undo = outcome.confirmation
    await chat.gw.bus.publish_inbound(
        InboundMessage(
            channel=RecordingChannel.name,
            chat_id="other",
            sender_id="eve",
            text=f"确认 {undo.id}",
            message_id="m-eve",
        )
    )
    ran = await wait_record(
        chat.gw, undo.id, lambda r: r.execution.state.is_final, what="the undo's end"
    )
    assert ran.execution.state is ExecState.FAILED
    assert ran.execution.result is not None and "only the requester" in ran.execution.result
    assert len(await chat.rows()) == 3  # still deleted
    assert "undo_refused" in await chat.events(change)


@pytest.mark.parametrize(
    ("text", "target"),
    [
        ("撤销 K7Q2", "K7Q2"),
        ("undo k7q2", "K7Q2"),
        ("UNDO K7Q2.", "K7Q2"),
        ("撤销", None),
        ("undo", None),
        ("请撤销 K7Q2", None),
        ("撤销 K7Q2 吧", None),
        ("undo K7Q2 and K8Q3", None),
        ("don't undo K7Q2", None),
        ("撤销 token", None),
    ],
)
def test_the_undo_reply_is_exact(text: str, target: str | None) -> None:
    assert parse_undo(text) == target


@pytest.mark.parametrize("kind", ["sqlite"])
async def test_an_undo_request_never_rejects_what_is_pending(start: Start, kind: str) -> None:
    # reject_with_feedback (the default): other text from someone who may decide rejects
    # the pending call. "撤销 K7Q2" is a request for a new call, not that text.
    chat = await start(kind)
    change = await chat.held(f"/sql DELETE FROM {chat.table} WHERE id = 1")
    await chat.approved(change)
    pending = await chat.held(f"/sql DELETE FROM {chat.table} WHERE id = 2")
    undo = await chat.held(f"撤销 {change.id}")
    assert undo.tool_call.name == "sql_undo"
    again = await chat.gw.confirmations.get(pending.id)
    assert again is not None and again.status is Status.PENDING


async def test_a_change_is_undone_after_a_restart_on_the_sqlite_store(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    # The snapshot lives with the record, in the store: the next process finds both.
    url = f"sqlite+aiosqlite:///{tmp_path / 'tools.db'}"
    settings = make_settings(
        tools={"sql": {"url": url}}, confirmation={"store": "sqlite", "timeout_seconds": 60}
    )
    engine = create_async_engine(url)

    async def started() -> Chat:
        gw = await build(settings, serve_http=False)
        channel = RecordingChannel()
        gw.channels.add(channel)
        await gw.start()
        chat = Chat(gw, channel, engine)
        chat.table = "kept"
        return chat

    first = await started()
    try:
        await first.run("CREATE TABLE kept (id INTEGER PRIMARY KEY, v VARCHAR(10))")
        await first.run("INSERT INTO kept VALUES (1, 'a'), (2, 'b')")
        change = await first.held("/sql DELETE FROM kept WHERE id = 2")
        await first.approved(change)
    finally:
        await first.gw.stop()
    second = await started()
    try:
        undo = await second.held(f"撤销 {change.id}")
        assert (await second.approved(undo)).execution.state is ExecState.SUCCEEDED
        assert await second.rows() == [(1, "a"), (2, "b")]
    finally:
        await second.gw.stop()
        await engine.dispose()


@pytest.mark.parametrize("kind", DATABASES)
async def test_a_batch_is_undone_whole_last_statement_first(start: Start, kind: str) -> None:
    # The same row changed twice in one call: undone in reverse, it ends as it began.
    chat = await start(kind)
    before = values(await chat.rows())
    t = chat.table
    change = await chat.held(
        f"/sql UPDATE {t} SET amount = 1 WHERE id = 1; UPDATE {t} SET amount = 2 WHERE id = 1; "
        f"DELETE FROM {t} WHERE id = 3; INSERT INTO {t} VALUES (9, 'Ivan', 9.99, NULL)"
    )
    assert change.details["undo"]["undoable"] is True
    done = await chat.approved(change)
    assert done.execution.state is ExecState.SUCCEEDED, done.execution.result
    undo = await chat.held(f"撤销 {change.id}")
    assert undo.details["rows_affected"] == 4
    assert (await chat.approved(undo)).execution.state is ExecState.SUCCEEDED
    assert values(await chat.rows()) == before


@pytest.mark.parametrize("kind", ["sqlite"])
async def test_an_undo_needs_as_many_approvals_as_its_change(start: Start, kind: str) -> None:
    # The rule names sql_modify only: the undo still needs the two approvers it needed.
    chat = await start(
        kind,
        confirmation={"approvers": ["bob", "carol"]},
        policy={"rules": [{"name": "two", "tool": "sql_modify", "approvals": 2}]},
    )
    change = await chat.held(f"/sql DELETE FROM {chat.table} WHERE id = 2")
    assert change.approvals == 2
    await chat.say(f"确认 {change.id}", sender="bob")
    await chat.approved(change, by="carol")
    undo = await chat.held(f"撤销 {change.id}")
    assert undo.approvals == 2 and undo.four_eyes
    await chat.say(f"确认 {undo.id}", sender="bob")
    await wait_record(chat.gw, undo.id, lambda r: len(r.votes) == 1, what="bob's vote")
    assert len(values(await chat.rows())) == 3  # one approval of two: nothing restored
    ran = await chat.approved(undo, by="carol")
    assert ran.execution.state is ExecState.SUCCEEDED
    assert len(values(await chat.rows())) == 4
