"""SQLite specifics: the file, the audit trail, the migration from schema 1, query plans
and thread hops. The behaviour every backend shares is in the contract suites."""

from __future__ import annotations

import asyncio
import re
import sqlite3
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.confirm.model import AuditEvent, ExecState, Instance, Status, Vote
from gateway.storage.sqlite import schema
from gateway.storage.sqlite.confirmations import SqliteConfirmationStore
from gateway.storage.sqlite.schema import SCHEMA_VERSION
from tests.confirm.records import T0, full_record, make
from tests.support import count_hops

V1_SCHEMA = Path(__file__).with_name("sqlite_schema_v1.sql")
V1_COLUMNS = (
    "id, session_key, channel, chat_id, requester, is_group, tool_call, summary, details,"
    " risk, approvers, four_eyes, created_at, expires_at, status, decided_by, decided_at,"
    " decided_via, reason, feedback, prompt_refs"
)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteConfirmationStore]:
    s = await SqliteConfirmationStore.open(tmp_path / "c.db")
    yield s
    await s.close()


async def test_the_store_writes_no_events_of_its_own(store: SqliteConfirmationStore) -> None:
    # One audit trail: what the service records with add_event, in its order.
    await store.create(make("AUD1"))
    await store.finish("AUD1", Status.REJECTED, by="bob", via="card", reason="no", now=T0 + 1)
    assert await store.events("AUD1") == []
    await store.add_event(AuditEvent(confirmation_id="AUD1", at=T0, kind="requested"))
    await store.add_event(AuditEvent(confirmation_id="GONE", at=T0, kind="requested"))
    assert [e.kind for e in await store.events("AUD1")] == ["requested"]
    assert await store.events("GONE") == []


async def test_trail_is_append_only_until_purged_and_file_is_wal(tmp_path: Path) -> None:
    path = tmp_path / "wal.db"
    store = await SqliteConfirmationStore.open(path)
    await store.create(make("WAL1"))
    await store.finish("WAL1", Status.EXPIRED, by=None, via="timeout", reason=None, now=T0 + 1)
    await store.add_event(AuditEvent(confirmation_id="WAL1", at=T0, kind="requested"))
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            conn.execute("UPDATE confirmation_events SET kind = 'decided'")
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            conn.execute("DELETE FROM confirmation_events")
        assert await store.purge(before=T0 + 2) == 1
        assert conn.execute("SELECT COUNT(*) FROM confirmation_events").fetchone()[0] == 0
    finally:
        conn.close()
        await store.close()


async def test_refuses_a_newer_schema(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(RuntimeError, match="schema 99"):
        await SqliteConfirmationStore.open(path)


def _v1_file(path: Path) -> None:
    """A file as the schema 1 gateway left it: a pending, an approved and a rejected
    record, with the events that store wrote itself."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(V1_SCHEMA.read_text(encoding="utf-8"))
    conn.execute("PRAGMA user_version = 1")
    rows = [
        ("P001", "pending", None, None, None, None),
        ("A002", "approved", "bob", T0 + 2, "card", None),
        ("R003", "rejected", "bob", T0 + 3, "text", "no"),
    ]
    for n, (cid, status, by, at, via, reason) in enumerate(rows):
        conn.execute(
            f"INSERT INTO confirmations ({V1_COLUMNS}) VALUES"
            " (?, 'console:alice', 'console', 'alice', 'alice', 0,"
            ' \'{"name":"sql_modify","args":{"sql":"DELETE FROM t"},"call_id":"c"}\','
            " 'DELETE t', '{\"rows\":3}', 'high', '[\"ou_boss\"]', 1, ?, ?, ?, ?, ?, ?, ?, 0,"
            ' \'{"console":"7"}\')',
            (cid, T0 + n, T0 + n + 300, status, by, at, via, reason),
        )
        conn.execute(
            "INSERT INTO confirmation_events (id, at, status, actor, via, reason)"
            " VALUES (?, ?, 'pending', 'alice', 'console', NULL)",
            (cid, T0 + n),
        )
        if status != "pending":
            conn.execute(
                "INSERT INTO confirmation_events (id, at, status, actor, via, reason)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (cid, at, status, by, via, reason),
            )
    conn.close()


async def test_migrates_a_schema_1_file(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    _v1_file(path)
    store = await SqliteConfirmationStore.open(path)
    try:
        pending = await store.get("P001")
        assert pending is not None and pending.status is Status.PENDING
        assert pending.execution.state is ExecState.WAITING
        assert (pending.risk.value, pending.approvers, pending.four_eyes) == (
            "high",
            ("ou_boss",),
            True,
        )
        assert dict(pending.prompt_refs) == {"console": "7"}
        assert (pending.owner, pending.idempotent, pending.continuation) == (None, False, None)
        # Whether an approved call of schema 1 ran is not known: told, never run again.
        approved = await store.get("A002")
        assert approved is not None and approved.execution.state is ExecState.INTERRUPTED
        assert approved.execution.finished_at == T0 + 2
        assert approved.execution.result is not None and "schema 1" in approved.execution.result
        assert await store.claim("A002", instance="i", now=T0 + 9, lease=15) is None
        rejected = await store.get("R003")
        assert rejected is not None and rejected.execution.state is ExecState.SKIPPED
        # The old status rows became the trail's requested / decided events.
        events = await store.events("R003")
        assert [(e.kind, e.actor, e.at) for e in events] == [
            ("requested", "alice", T0 + 2),
            ("decided", "bob", T0 + 3),
        ]
        assert events[1].detail == {"status": "rejected", "via": "text", "reason": "no"}
        # Creation order and the cursor carry over; the file works as a new one.
        assert [c.id for c in await store.list()] == ["R003", "A002", "P001"]
        assert [c.id for c in await store.list_pending("console:alice")] == ["P001"]
        await store.create(full_record("NEW1"))
        assert [c.id for c in await store.list(limit=1)] == ["NEW1"]
        assert [c.id for c in await store.list_unsettled(instance="x")] == []
    finally:
        await store.close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        assert "confirmations_v1" not in tables and "confirmations_status_created" not in tables
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()
    again = await SqliteConfirmationStore.open(path)  # reopening a schema 2 file: no change
    try:
        assert await again.get("NEW1") == full_record("NEW1")
    finally:
        await again.close()


async def _statements(store: SqliteConfirmationStore, calls: Callable[[], Any]) -> list[str]:
    """The SQL the store runs (parameters bound) during ``calls()``."""
    seen: list[str] = []
    await store._db.run(lambda conn: conn.set_trace_callback(seen.append))
    try:
        await calls()
    finally:
        await store._db.run(lambda conn: conn.set_trace_callback(None))
    return seen


async def test_queries_use_indexes_whatever_the_backlog(tmp_path: Path) -> None:
    # Issue 12: with many pending records SQLite picked the (status, created_at) index for
    # one session's pending list and walked the whole backlog. No ANALYZE here, as in
    # production: the plans must hold without statistics.
    path = tmp_path / "plans.db"
    store = await SqliteConfirmationStore.open(path)
    try:
        for n in range(300):
            await store.create(make(f"B{n:03d}", session=f"x:{n % 7}", created_at=T0 + n))
        await store.create(make("MINE", session="webchat:new", owner="i1"))
        await store.finish("MINE", Status.APPROVED, by="a", via="t", reason=None, now=T0 + 1)
        await store.heartbeat(
            Instance(id="i1", pid=1, host="h", started_at=T0, seen_at=T0), lease=15
        )

        async def calls() -> None:
            await store.list_pending("webchat:new")
            await store.count(Status.PENDING)
            await store.list_unsettled(instance="i1")
            await store.list_approved_waiting()
            await store.page(status=Status.PENDING, limit=10, cursor="200")
            await store.page(session_key="x:3", limit=10)
            await store.claim("MINE", instance="i1", now=T0 + 2, lease=15)

        statements = await _statements(store, calls)
    finally:
        await store.close()
    conn = sqlite3.connect(path)
    try:
        plans = {
            sql: [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}")] for sql in statements
        }
    finally:
        conn.close()
    assert len(plans) == 7
    for sql, steps in plans.items():
        assert not any(s.startswith("SCAN confirmations") and "INDEX" not in s for s in steps), (
            sql,
            steps,
        )
        assert not any("TEMP B-TREE" in s for s in steps if "UNION" not in s), (sql, steps)
    pending = next(steps for sql, steps in plans.items() if "'webchat:new'" in sql)
    assert pending == [
        "SEARCH confirmations USING INDEX confirmations_pending_by_session (session_key=?)"
    ]
    count = next(steps for sql, steps in plans.items() if "count(*)" in sql)
    assert count == ["SEARCH confirmations USING COVERING INDEX confirmations_status (status=?)"]


async def test_one_thread_hop_per_store_operation(store: SqliteConfirmationStore) -> None:
    # A hop comes back to the loop through call_soon_threadsafe; aiosqlite took 12 for the
    # decision part of a round trip (create, list_pending, finish), one per statement.
    loop = asyncio.get_running_loop()
    hops = 0
    original = loop.call_soon_threadsafe

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal hops
        hops += 1
        return original(*args, **kwargs)

    loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
    try:
        await store.create(make("HOP1", session="webchat:hop"))
        await store.list_pending("webchat:hop")
        await store.finish("HOP1", Status.APPROVED, by="a", via="t", reason=None, now=T0 + 1)
        await store.claim("HOP1", instance="i", now=T0 + 2, lease=15)
        await store.start_execution("HOP1", instance="i", now=T0 + 3)
        await store.finish_execution(
            "HOP1", instance="i", state=ExecState.SUCCEEDED, result="ok", now=T0 + 4
        )
    finally:
        del loop.call_soon_threadsafe
    assert hops == 6


async def test_no_hop_for_a_session_with_nothing_pending(tmp_path: Path) -> None:
    # Issue 14: every inbound message asks list_pending first; most sessions have nothing
    # pending, and the hop was part of bench/ingest.py's µs per message.
    path = tmp_path / "c.db"
    first = await SqliteConfirmationStore.open(path)
    await first.create(make("LEFT", session="webchat:left"))  # pending when the file reopens
    await first.create(make("DONE", session="webchat:done"))
    await first.finish("DONE", Status.REJECTED, by="a", via="t", reason=None, now=T0 + 1)
    await first.close()
    store = await SqliteConfirmationStore.open(path)
    loop = asyncio.get_running_loop()
    hops = count_hops(loop)
    try:
        assert await store.list_pending("webchat:never") == []
        assert hops[0] == 0
        assert [c.id for c in await store.list_pending("webchat:left")] == ["LEFT"]
        assert hops[0] == 1
        # Ended before this handle opened: not asked for.
        assert await store.list_pending("webchat:done") == []
        assert hops[0] == 1
        await store.finish("LEFT", Status.APPROVED, by="a", via="t", reason=None, now=T0 + 1)
        assert await store.list_pending("webchat:left") == []  # asked once more, then known
        assert await store.list_pending("webchat:left") == []
        assert hops[0] == 3
    finally:
        del loop.call_soon_threadsafe
        await store.close()


async def test_a_record_created_while_its_session_is_read_is_not_forgotten(
    store: SqliteConfirmationStore,
) -> None:
    # The read is queued on the store's thread before the insert, so it finds nothing; the
    # session must still be asked next time.
    await store.create(make("OLD1", session="webchat:race"))
    await store.finish("OLD1", Status.REJECTED, by="a", via="t", reason=None, now=T0 + 1)
    reading = asyncio.create_task(store.list_pending("webchat:race"))
    await asyncio.sleep(0)  # the read is on its way to the thread
    await store.create(make("NEW1", session="webchat:race"))
    assert await reading == []
    assert [c.id for c in await store.list_pending("webchat:race")] == ["NEW1"]


_CLAIMER = """
import asyncio, sys
from pathlib import Path
from gateway.storage.sqlite.confirmations import SqliteConfirmationStore

async def main(path, go, me):
    store = await SqliteConfirmationStore.open(path)
    print("ready", file=sys.stderr, flush=True)  # stdout has the log
    while not Path(go).exists():  # the start line: every process opened, then all at once
        await asyncio.sleep(0.005)
    got = await asyncio.gather(*(
        store.claim("PROC", instance=f"{me}-{n}", now=%r, lease=15.0) for n in range(50)
    ))
    await store.close()
    print("won", sum(c is not None for c in got), file=sys.stderr, flush=True)

asyncio.run(main(*sys.argv[1:]))
"""


async def test_four_processes_of_fifty_claimers_one_winner(tmp_path: Path) -> None:
    # Separate processes, separate connections, one file: the claim is SQLite's one
    # UPDATE ... WHERE under its write lock, so of 200 claimers exactly one wins.
    path, go = tmp_path / "procs.db", tmp_path / "go"
    store = await SqliteConfirmationStore.open(path)
    await store.create(make("PROC"))
    await store.finish("PROC", Status.APPROVED, by="a", via="t", reason=None, now=T0 + 1)
    script = _CLAIMER % (T0 + 2,)
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            script,
            str(path),
            str(go),
            f"p{n}",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            cwd=Path(__file__).resolve().parents[2],
        )
        for n in range(4)
    ]
    try:
        for p in procs:
            assert p.stderr is not None
            assert await asyncio.wait_for(p.stderr.readline(), 30) == b"ready\n"
        go.touch()
        outs = [(await asyncio.wait_for(p.communicate(), 60))[1].decode() for p in procs]
    finally:
        for p in procs:
            if p.returncode is None:
                p.kill()
                await p.wait()
    assert [p.returncode for p in procs] == [0, 0, 0, 0]
    wins = [int(out.split()[-1]) for out in outs]
    assert sum(wins) == 1, outs
    final = await store.get("PROC")
    await store.close()
    assert final is not None and final.execution.attempts == 1
    winner = wins.index(1)
    assert final.execution.claimed_by is not None
    assert final.execution.claimed_by.startswith(f"p{winner}-")


async def test_a_schema_2_file_gains_the_votes_and_keeps_its_records(tmp_path: Path) -> None:
    """Issue 25: schema 3 adds ``approvals`` and ``votes``; a schema 2 file's records read
    as needing one decision, and a pending one still takes it."""
    path = tmp_path / "v2.db"
    # The tables as a schema 2 gateway made them: no vote columns.
    v2_tables = re.sub(r"\n\s+(approvals|votes) .*", "", schema._TABLES)
    v2_tables = v2_tables.replace("continuation TEXT,", "continuation TEXT")
    assert "approvals" not in v2_tables
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(v2_tables)
    conn.execute(
        "INSERT INTO confirmations (id, session_key, channel, chat_id, requester, is_group,"
        " tool_call, summary, risk, created_at, expires_at, status) VALUES ('V2P1',"
        " 'console:alice', 'console', 'alice', 'alice', 0,"
        ' \'{"name":"sql_modify","args":{"sql":"DELETE FROM t"},"call_id":"c"}\','
        " 'DELETE t', 'medium', ?, ?, 'pending')",
        (T0, T0 + 300),
    )
    conn.execute("PRAGMA user_version = 2")
    conn.close()
    store = await SqliteConfirmationStore.open(path)
    try:
        old = await store.get("V2P1")
        assert old is not None and (old.approvals, old.votes) == (0, ())
        done, changed = await store.finish(
            "V2P1", Status.APPROVED, by="bob", via="text", reason=None, now=T0 + 1
        )
        assert changed and done is not None and done.status is Status.APPROVED
        await store.create(make("V3P2", approvals=2))
        voted, _ = await store.vote("V3P2", Vote(actor="bob", person="bob", at=T0 + 1, via="text"))
        assert voted is not None and [v.actor for v in voted.votes] == ["bob"]
    finally:
        await store.close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
    finally:
        conn.close()
