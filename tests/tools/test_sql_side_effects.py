"""No effect before approval (issue 22, item 6): through the whole gateway, on real databases.

``/sql`` goes bus -> command agent -> runner -> policy -> SQL tools against the local
PostgreSQL / MariaDB (and SQLite), and a second connection of the test's own is the
session a statement would harm. PostgreSQL and MariaDB skip when unreachable, or fail with
GATEWAY_TEST_REQUIRE_SERVICES=1.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from config.settings import Settings
from gateway.app import Gateway, build
from gateway.bus import InboundMessage, OutboundKind
from gateway.confirm.model import Confirmation, Status
from tests.services import MARIADB_URL, POSTGRES_URL, mask_url, require_service
from tests.support import RecordingChannel, wait_status

_ids = itertools.count(1)


class Chat:
    """One gateway on a database, a chat to talk to it, and connections of the test's own."""

    def __init__(self, gw: Gateway, channel: RecordingChannel, engine: AsyncEngine) -> None:
        self.gw = gw
        self.channel = channel
        self.engine = engine  # the test's own connections: victims and lock probes

    async def say(self, text: str) -> None:
        await self.gw.bus.publish_inbound(
            InboundMessage(
                channel=RecordingChannel.name,
                chat_id="room",
                sender_id="alice",
                text=text,
                message_id=f"m{next(_ids)}",
            )
        )

    async def held(self, statement: str, nth: int = 1) -> Confirmation:
        """Send ``/sql statement``; the confirmation it must wait for (the chat's ``nth``)."""
        await self.say(f"/sql {statement}")
        return await self.channel.wait_prompt(nth, within=5)

    async def scalar(self, sql: str) -> Any:
        async with self.engine.connect() as conn:
            return (await conn.exec_driver_sql(sql)).scalar_one()


Start = Callable[..., Awaitable[Chat]]


@pytest.fixture
async def start(make_settings: Callable[..., Settings], tmp_path: Path) -> AsyncIterator[Start]:
    """``chat = await start("postgresql" | "mariadb" | "sqlite", **[tools.sql] settings)``"""
    opened: list[tuple[Gateway, AsyncEngine]] = []

    async def run(kind: str, **sql: Any) -> Chat:
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
            tools={"sql": {"url": url, "statement_timeout_seconds": 1.0, **sql}},
            confirmation={"store": "memory", "timeout_seconds": 30},
        )
        gw = await build(settings, serve_http=False)
        channel = RecordingChannel()
        gw.channels.add(channel)
        await gw.start()
        opened.append((gw, engine))
        return Chat(gw, channel, engine)

    yield run
    for gw, engine in opened:
        await gw.stop()
        await engine.dispose()


async def backend_pid(conn: AsyncConnection) -> int:
    return int((await conn.exec_driver_sql("SELECT pg_backend_pid()")).scalar_one())


async def alive(conn: AsyncConnection) -> bool:
    try:
        return (await conn.exec_driver_sql("SELECT 1")).scalar_one() == 1
    except SQLAlchemyError:
        return False


@pytest.mark.services
async def test_query_calling_pg_terminate_backend_is_held_and_kills_nobody(start: Start) -> None:
    chat = await start("postgresql")
    async with chat.engine.connect() as victim:
        pid = await backend_pid(victim)
        held = await chat.held(f"SELECT pg_terminate_backend({pid})")
        assert held.tool_call.name == "sql_query"
        assert held.details["functions_not_allowed"] == ["pg_terminate_backend"]
        assert "pg_terminate_backend" in held.details["policy_rule"]
        assert await alive(victim)
        await chat.say("取消")
        await wait_status(chat.gw, held.id, Status.REJECTED)
        assert await alive(victim)


@pytest.mark.services
async def test_a_grant_on_one_held_query_does_not_release_the_next(start: Start) -> None:
    chat = await start("postgresql")
    key = uuid.uuid4().int % 2**31
    first = await chat.held(f"SELECT pg_advisory_xact_lock({key})")
    await chat.say("确认 30分钟")  # approve, and don't ask again for 30 minutes
    # A held call is given no grant at all (views.grant_offered, GrantBook.give): the
    # approval runs it once and says so.
    await chat.channel.wait_text("no grant covers it")
    await chat.channel.wait_text("sql_query 已执行")
    await wait_status(chat.gw, first.id, Status.APPROVED)
    async with chat.engine.connect() as victim:
        pid = await backend_pid(victim)
        second = await chat.held(f"SELECT pg_terminate_backend({pid})", nth=2)
        assert second.tool_call.args["sql"].endswith(f"({pid})")
        assert await alive(victim)


@pytest.mark.services
async def test_delete_preview_does_not_run_its_where_while_waiting(start: Start) -> None:
    chat = await start("postgresql")
    table = f"orders_{uuid.uuid4().hex[:10]}"
    async with chat.engine.begin() as conn:
        await conn.exec_driver_sql(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY)")
        await conn.exec_driver_sql(f"INSERT INTO {table} (id) VALUES (1), (2)")
    try:
        async with chat.engine.connect() as victim:
            pid = await backend_pid(victim)
            held = await chat.held(
                f"DELETE FROM {table} WHERE id = 1 AND pg_terminate_backend({pid})"
            )
            assert held.details["rows_affected"] is None  # not counted: the COUNT would kill
            assert "cannot preview" in held.details["warning"]
            assert "pg_terminate_backend" in held.details["warning"]
            assert await alive(victim)
            prompt = await chat.channel.next(OutboundKind.CONFIRMATION)
            assert "无法预览" in prompt.text
            await chat.say("取消")
            await wait_status(chat.gw, held.id, Status.REJECTED)
            assert await alive(victim)
        assert await chat.scalar(f"SELECT count(*) FROM {table}") == 2
    finally:
        async with chat.engine.begin() as conn:
            await conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")


@pytest.mark.services
async def test_an_advisory_lock_does_not_outlive_the_query(start: Start) -> None:
    # The operator allowed the function: it runs by itself, and its session lock must
    # go with the call, not stay on the pooled connection for the next one.
    chat = await start("postgresql", allowed_functions=["pg_advisory_lock"])
    key = uuid.uuid4().int % 2**31
    await chat.say(f"/sql SELECT pg_advisory_lock({key})")
    await chat.channel.wait_text("sql_query:")
    assert not [m for m in chat.channel.sent if m.kind is OutboundKind.CONFIRMATION]
    async with chat.engine.connect() as other:
        got = (await other.exec_driver_sql(f"SELECT pg_try_advisory_lock({key})")).scalar_one()
        assert got is True
        await other.exec_driver_sql(f"SELECT pg_advisory_unlock({key})")


@pytest.mark.parametrize(
    ("kind", "take", "probe"),
    [
        pytest.param(
            "postgresql",
            "SELECT pg_advisory_lock({key})",
            "SELECT pg_try_advisory_lock({key}) AND pg_advisory_unlock({key})",
            marks=pytest.mark.services,
        ),
        pytest.param(
            "mariadb",
            "SELECT GET_LOCK('gateway-test-{key}', 0)",
            "SELECT IS_FREE_LOCK('gateway-test-{key}')",
            marks=pytest.mark.services,
        ),
    ],
)
async def test_a_session_lock_is_released_before_the_connection_is_reused(
    start: Start, kind: str, take: str, probe: str
) -> None:
    # Approved (or allowed), the call runs; what it left in the session must not stay on
    # the pooled connection. run() is what an approved call runs.
    chat = await start(kind)
    key = uuid.uuid4().int % 2**31
    tool = chat.gw.registry.get("sql_query")
    assert tool is not None
    await tool.run(tool.parse_args({"sql": take.format(key=key)}))
    assert await chat.scalar(probe.format(key=key)) in (True, 1)


@pytest.mark.services
async def test_an_approved_get_lock_does_not_outlive_the_query(start: Start) -> None:
    chat = await start("mariadb")
    name = f"gateway-test-{uuid.uuid4().hex}"
    held = await chat.held(f"SELECT GET_LOCK('{name}', 0)")
    assert held.details["functions_not_allowed"] == ["get_lock"]
    await chat.say("确认")
    await chat.channel.wait_text("sql_query 已执行")
    assert await chat.scalar(f"SELECT IS_FREE_LOCK('{name}')") == 1


@pytest.mark.parametrize(
    "kind",
    [
        "sqlite",
        pytest.param("postgresql", marks=pytest.mark.services),
        pytest.param("mariadb", marks=pytest.mark.services),
    ],
)
async def test_a_long_query_is_stopped_by_the_statement_timeout(start: Start, kind: str) -> None:
    chat = await start(kind)
    # A billion rows to count, on every backend (MariaDB caps recursion at 1000 rows).
    endless = (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000) "
        "SELECT count(*) FROM c a, c b, c d"
    )
    await chat.say(f"/sql {endless}")
    failed = await chat.channel.wait_text("执行失败", within=15)
    assert "statement_timeout_seconds" in failed.text
    assert "1 s" in failed.text
    assert "Error" not in failed.text  # a sentence, not the exception's class name
    # The connection it ran on is back in the pool, usable, and without the limit.
    await chat.say("/sql SELECT 41 + 1")
    await chat.channel.wait_text("42")
