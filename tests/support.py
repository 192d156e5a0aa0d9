"""Helpers shared by end-to-end tests that drive a real Gateway."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import sqlite3
import time
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

from channels.base import Channel
from config.settings import Settings
from gateway.app import Gateway
from gateway.bus import InboundMessage, OutboundKind, OutboundMessage
from gateway.confirm.model import Confirmation, ExecState, Status
from gateway.confirm.service import ConfirmationService
from gateway.storage.inbox import MemoryInbox
from gateway.texts import Stage


class RecordingChannel(Channel):
    """A real Channel that records what the gateway sends, in order, for tests of the core.

    Two ways to wait: ``wait_for`` (and ``wait_prompt`` / ``wait_text``) return the first
    match among everything sent, old or new; ``next`` reads on like a conversation, from
    just after the message it last returned (``skip_sent`` moves it past all sent so far).
    """

    name: ClassVar[str] = "rec"

    def __init__(self) -> None:
        self.sent: list[OutboundMessage] = []
        self._read = 0  # how far ``next`` has read
        self._new = asyncio.Event()

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def send(self, msg: OutboundMessage) -> None:
        self.sent.append(msg)
        self._new.set()

    async def wait_for(
        self, predicate: Callable[[OutboundMessage], bool], *, within: float = 10.0
    ) -> OutboundMessage:
        """The first sent message (old or new) that matches."""
        return await self._wait(lambda: next((m for m in self.sent if predicate(m)), None), within)

    async def wait_prompt(self, nth: int = 1, *, within: float = 10.0) -> Confirmation:
        """The ``nth`` confirmation prompt sent to the chat."""

        def is_nth(m: OutboundMessage) -> bool:
            prompts = [x for x in self.sent if x.kind is OutboundKind.CONFIRMATION]
            return len(prompts) >= nth and m is prompts[nth - 1]

        msg = await self.wait_for(is_nth, within=within)
        assert msg.confirmation is not None
        return msg.confirmation

    async def wait_text(self, fragment: str, *, within: float = 10.0) -> OutboundMessage:
        return await self.wait_for(
            lambda m: m.kind is OutboundKind.TEXT and fragment in m.text, within=within
        )

    async def next(
        self, kind: OutboundKind | None = None, contains: str | None = None, timeout: float = 10
    ) -> OutboundMessage:
        """The next unread message of ``kind`` containing ``contains``; those before it are read."""

        def unread_match() -> OutboundMessage | None:
            while self._read < len(self.sent):
                msg = self.sent[self._read]
                self._read += 1
                if (kind is None or msg.kind is kind) and (
                    contains is None or contains in msg.text
                ):
                    return msg
            return None

        return await self._wait(unread_match, timeout)

    def skip_sent(self) -> None:
        """Let ``next`` read on from the next message sent, past all sent so far."""
        self._read = len(self.sent)

    def texts(self) -> list[str]:
        return [m.text for m in self.sent if m.kind is OutboundKind.TEXT]

    def kinds(self) -> list[tuple[str, str | None]]:
        return [(m.kind.value, m.confirmation.id if m.confirmation else None) for m in self.sent]

    async def _wait(
        self, find: Callable[[], OutboundMessage | None], within: float
    ) -> OutboundMessage:
        deadline = time.monotonic() + within
        while (found := find()) is None:
            left = deadline - time.monotonic()
            if left <= 0:
                shown = "\n".join(f"  {m.kind.value}: {m.text[:120]!r}" for m in self.sent)
                raise AssertionError(f"no matching message; sent so far:\n{shown}")
            # One loop: no send can land between find() and clear().
            self._new.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._new.wait(), timeout=left)
        return found


async def wait_pending(gw: Gateway, count: int = 1, *, within: float = 5.0) -> list[Confirmation]:
    """Poll the real confirmation service until ``count`` confirmations are pending."""
    assert gw.confirmations is not None
    deadline = time.monotonic() + within
    while True:
        found = await gw.confirmations.list(status=Status.PENDING)
        if len(found) >= count:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"expected {count} pending confirmation(s), found {found}")
        await asyncio.sleep(0.02)


async def wait_status(
    gw: Gateway, confirmation_id: str, status: Status, *, within: float = 5.0
) -> Confirmation:
    """Poll until the confirmation reaches ``status``."""
    assert gw.confirmations is not None
    deadline = time.monotonic() + within
    while True:
        found = await gw.confirmations.get(confirmation_id)
        if found is not None and found.status is status:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{confirmation_id} did not become {status}: {found}")
        await asyncio.sleep(0.02)


async def wait_record(
    gw: Gateway,
    confirmation_id: str,
    check: Callable[[Confirmation], bool],
    *,
    what: str,
    within: float = 5.0,
) -> Confirmation:
    """Poll until the stored record passes ``check`` (its refs, its execution, ...)."""
    assert gw.confirmations is not None
    deadline = time.monotonic() + within
    while True:
        found = await gw.confirmations.get(confirmation_id)
        if found is not None and check(found):
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{confirmation_id}: timed out waiting for {what}: {found}")
        await asyncio.sleep(0.02)


class ShiftedClock:
    """Now as a gateway built with ``clock=`` reads it: the wall clock plus an offset the
    test moves, so a confirmation's deadline passes when the test says (``pass_deadline``),
    not when a loaded machine gets there. Keep the configured timeout long."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


async def pass_deadline(
    service: ConfirmationService, clock: ShiftedClock, confirmation_id: str
) -> None:
    """Let a pending confirmation's deadline pass, as if its timeout had gone by: the
    clock moves one second past its ``expires_at`` (``pass_time``)."""
    record = await service.get(confirmation_id)
    assert record is not None, confirmation_id
    await pass_time(service, clock, record.expires_at - clock() + 1.0, [confirmation_id])


async def pass_time(
    service: ConfirmationService, clock: ShiftedClock, seconds: float, confirmation_ids: list[str]
) -> None:
    """``seconds`` go by: the clock moves on, and the service's deadline timer is handed
    each listed call again from its stored ``expires_at`` (``Deadlines.arm``; a time that
    has passed fires at once), all in one step, as its loop timer would have them by then.
    The expiries then take the path a real timeout takes. Each call must be pending and
    waiting for its deadline in this process.
    """
    records = [await service.get(cid) for cid in confirmation_ids]
    for cid, record in zip(confirmation_ids, records, strict=True):
        assert record is not None and record.status is Status.PENDING, record
        assert cid in service.deadlines, f"{cid} has no deadline armed"
    clock.offset += max(0.0, seconds)
    for record in records:  # no await in between: armed at one instant
        assert record is not None
        service.deadlines.arm(record.id, record.expires_at)


def order_ids(settings: Settings) -> list[int]:
    """Ids left in the demo database's orders table."""
    with sqlite3.connect(settings.data_dir / "demo.db") as conn:
        return [row[0] for row in conn.execute("SELECT id FROM orders ORDER BY id")]


class FailingInbox(MemoryInbox):
    """A real memory inbox whose first ``failures`` puts raise, as a full disk would.

    ``stored`` lists the keys it did store, in order.
    """

    def __init__(self, failures: int = 1) -> None:
        super().__init__()
        self.failures = failures
        self.stored: list[tuple[str, str | None]] = []

    async def put(self, msg: InboundMessage) -> bool:
        if self.failures:
            self.failures -= 1
            raise OSError("disk full")
        fresh = await super().put(msg)
        if fresh:
            self.stored.append((msg.channel, msg.message_id))
        return fresh


def count_hops(loop: asyncio.AbstractEventLoop) -> list[int]:
    """Thread hops back to ``loop`` (``call_soon_threadsafe`` calls), counted until
    ``del loop.call_soon_threadsafe``."""
    hops = [0]
    original = loop.call_soon_threadsafe

    def counting(*args: Any, **kwargs: Any) -> Any:
        hops[0] += 1
        return original(*args, **kwargs)

    loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
    return hops


# How a record gets to each stage of its life (gateway/texts.stage): its status, then
# (approved) how its run ended, and the ledger's result.
_STAGE_PATHS: dict[Stage, tuple[Status, ExecState | None, str | None]] = {
    Stage.APPROVED: (Status.APPROVED, None, None),
    Stage.DONE: (Status.APPROVED, ExecState.SUCCEEDED, "DELETE: 1 行 / 1 row"),
    Stage.FAILED: (Status.APPROVED, ExecState.FAILED, "no such table: orders"),
    Stage.INTERRUPTED: (Status.APPROVED, ExecState.INTERRUPTED, None),
    Stage.REJECTED: (Status.REJECTED, None, None),
    Stage.EXPIRED: (Status.EXPIRED, None, None),
    Stage.CANCELLED: (Status.CANCELLED, None, None),
}


def at_stage(c: Confirmation, stage: Stage, *, by: str = "bob") -> Confirmation:
    """``c`` (pending) taken to ``stage``, as the store would have it."""
    if stage is Stage.PENDING:
        return c
    status, state, result = _STAGE_PATHS[stage]
    decider = None if status in (Status.EXPIRED, Status.CANCELLED) else by
    via = "timeout" if status is Status.EXPIRED else "text" if decider else "system"
    done = c.finished(status, by=decider, at=c.created_at + 5, via=via, reason=None)
    if state is None:
        return done
    execution = dataclasses.replace(done.execution, state=state, result=result)
    return dataclasses.replace(done, execution=execution)


@contextlib.contextmanager
def demo_db_locked(settings: Settings) -> Iterator[None]:
    """Another writer holds the demo database: an approved change waits in ``running``
    (SQLite's busy timeout) until this ends."""
    conn = sqlite3.connect(settings.data_dir / "demo.db", isolation_level=None)
    try:
        conn.execute("BEGIN EXCLUSIVE")
        yield
        conn.execute("ROLLBACK")
    finally:
        conn.close()


def drop_demo_orders(settings: Settings) -> None:
    """The orders table goes away (behind the gateway's back): a change to it fails when
    it runs, after it was asked and approved."""
    with sqlite3.connect(settings.data_dir / "demo.db") as conn:
        conn.execute("DROP TABLE orders")


def ctrl_c_delivered() -> None:
    """``preexec_fn`` of a child on a pty (pexpect): Ctrl-C reaches it as SIGINT even when
    the test run itself was started with SIGINT ignored (``nohup``, a background job of a
    script), a disposition the child would otherwise inherit and keep."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


# The read(2) system call's number, by machine (/proc/PID/syscall's first field).
_READ_SYSCALL = {"x86_64": "0", "aarch64": "63"}


def wait_reading_input(pid: int, timeout: float = 30.0) -> None:
    """Until process ``pid`` is blocked reading its standard input.

    A Ctrl-C that lands between a prompt being printed and the read that follows is caught
    (Python's handler sets a flag) but not acted on until the read returns: ``input()``
    waits on, and the test times out. Found by the suite on a loaded machine. Where the
    machine's read number is not known here, it returns at once.
    """
    number = _READ_SYSCALL.get(os.uname().machine)
    if number is None:
        return
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(f"/proc/{pid}/syscall", encoding="ascii") as f:
                fields = f.read().split()
        except OSError:
            fields = []
        if fields[:2] == [number, "0x0"]:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"process {pid} never read its input: {fields}")
        time.sleep(0.01)
