"""Cluster-wide live views across real processes (issue 13, item 5; issue 23, item 2).

Two ``gateway serve`` processes (replicas A and B) on one real Redis under a key prefix of
their own, each with its own data dir. Alice chats in a web chat room on A, Bob has the
same room open on B; the admin SSE feed is read on both. A decision taken through B's admin
API shows on A at once — the card's final state in the room, ``confirmation.resolved`` on
the feed — and the result of the call B runs shows on both. The room is stored in Redis:
both tabs read one history, each line once, in the same order, whichever replica posted it.
Each change is counted once, by the replica that made it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.admin.test_api import read_event
from tests.services import REDIS_URL
from tests.webchat.support import ServeProcess, next_frame, order_exists

pytestmark = pytest.mark.services

ROOM = "views"
Frame = dict[str, Any]


@pytest.fixture
def replicas(tmp_path: Path, prefix: str) -> Iterator[tuple[ServeProcess, ServeProcess]]:
    env = {
        "GATEWAY_CONFIRMATION__STORE": "redis",
        "GATEWAY_CONFIRMATION__REDIS_URL": REDIS_URL,
        "GATEWAY_CONFIRMATION__REDIS_PREFIX": prefix,
    }
    started: list[ServeProcess] = []
    try:
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            process = ServeProcess(tmp_path=tmp_path / name, env=env)
            started.append(process)
            process.start()
        yield started[0], started[1]
    finally:
        for process in started:
            process.stop()


@asynccontextmanager
async def tab(
    http: aiohttp.ClientSession, user: str
) -> AsyncIterator[aiohttp.ClientWebSocketResponse]:
    async with http.ws_connect(f"/ws?session={ROOM}&user={user}") as ws:
        await next_frame(ws, lambda f: f["type"] == "hello")
        yield ws


async def frames_until(
    ws: aiohttp.ClientWebSocketResponse, last: Callable[[Frame], bool]
) -> list[Frame]:
    """The room's message frames up to and including the first that matches ``last``."""
    seen: list[Frame] = []

    def collect(frame: Frame) -> bool:
        if frame.get("type") == "message":
            seen.append(frame)
        return frame.get("type") == "message" and last(frame)

    await next_frame(ws, collect, timeout=20)
    return seen


async def events_until(
    events: aiohttp.ClientResponse, last: Callable[[Frame], bool]
) -> list[tuple[str, str, bool, str]]:
    """SSE events as (event, id, remote, status) up to the first that matches ``last``."""
    seen: list[tuple[str, str, bool, str]] = []
    while True:
        event = await read_event(events, timeout=20)
        data = event["data"]
        seen.append((event["event"], data["id"], data["remote"], data["status"]))
        if last(event):
            return seen


async def poll(http: aiohttp.ClientSession, **params: object) -> list[Frame]:
    async with http.get(
        f"/api/chat/{ROOM}/messages", params={k: str(v) for k, v in params.items()}
    ) as resp:
        assert resp.status == 200, await resp.text()
        return list((await resp.json())["messages"])


def is_update(cid: str) -> Callable[[Frame], bool]:
    return lambda f: f["kind"] == "confirmation_update" and f["confirmation"]["id"] == cid


def is_result(cid: str) -> Callable[[Frame], bool]:
    return lambda f: f["kind"] == "text" and f["text"].startswith(f"✔️ [{cid}]")


def is_done(cid: str) -> Callable[[Frame], bool]:
    return lambda f: is_update(cid)(f) and f["card"]["stage"] == "done"


def cards(frames: list[Frame], cid: str) -> list[tuple[str, str]]:
    """What a tab was shown of confirmation ``cid``: (kind, its card's stage or the text),
    in order."""
    shown = []
    for f in frames:
        c = f.get("confirmation")
        if c is not None and c["id"] == cid:
            shown.append((f["kind"], f["card"]["stage"]))
        elif f["kind"] == "text" and f"[{cid}]" in f["text"]:
            shown.append(("text", f["text"]))
    return shown


def counted(metrics: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in metrics.splitlines():
        found = re.fullmatch(rf"{name}\{{(.*)\}} (\S+)", line)
        if found and ",".join(sorted(found.group(1).split(","))) == want:
            return float(found.group(2))
    return 0.0


async def test_a_decision_on_b_shows_on_a_at_once_and_b_s_result_shows_on_both(
    replicas: tuple[ServeProcess, ServeProcess],
) -> None:
    a, b = replicas
    async with (
        aiohttp.ClientSession(base_url=a.url) as on_a,
        aiohttp.ClientSession(base_url=b.url) as on_b,
        on_a.get("/api/events") as events_a,
        on_b.get("/api/events") as events_b,
        tab(on_a, "alice") as alice,
        tab(on_b, "bob") as bob,
    ):
        await alice.send_json({"type": "message", "text": "/sql DELETE FROM orders WHERE id = 3"})
        card = await next_frame(alice, lambda f: f.get("kind") == "confirmation", timeout=20)
        cid = card["confirmation"]["id"]
        # The card asked on A shows on B too, for Bob to decide there if he may.
        shown_b = await frames_until(bob, lambda f: f["kind"] == "confirmation")

        async with on_b.post(
            f"/api/confirmations/{cid}/decision", json={"decision": "approve", "actor": "oncall"}
        ) as resp:
            assert resp.status == 200, await resp.text()

        # On A, where it was asked: the card approved, then done with B's result on it.
        shown_a = [card, *await frames_until(alice, is_done(cid))]
        # On B, which took the approval and ran the call: the card asked on A, approved,
        # done; and the result line said by the command's resumed turn, here.
        shown_b += await frames_until(bob, is_result(cid))

        # A marker that both tabs show, so everything before it has arrived: if any of
        # the above were told twice, the second copy would come before the marker.
        await alice.send_json({"type": "message", "text": "/sql DELETE FROM orders WHERE id = 4"})
        shown_a += await frames_until(alice, lambda f: f["kind"] == "confirmation")
        marker = shown_a[-1]["confirmation"]["id"]
        async with on_b.post(
            f"/api/confirmations/{marker}/decision", json={"decision": "reject", "actor": "oncall"}
        ) as resp:
            assert resp.status == 200, await resp.text()
        shown_a += await frames_until(alice, is_update(marker))
        shown_b += await frames_until(bob, is_update(marker))

        result_b = next(f["text"] for f in shown_b if is_result(cid)(f))
        assert "1 行 / 1 row" in result_b
        # The same card in both tabs, each step once: asked, approved, done with the
        # result; then the result line B's resumed turn said, on A too (posted on B).
        steps = [
            ("confirmation", "pending"),
            ("confirmation_update", "approved"),
            ("confirmation_update", "done"),
            ("text", result_b),
        ]
        assert cards(shown_a, cid) == cards(shown_b, cid) == steps
        # One room: the same lines, once each, in the same order, on both replicas (A's
        # first line, Alice's own, was passed over while waiting for the card).
        lines_a = [(f["seq"], f["kind"], f["text"]) for f in shown_a]
        lines_b = [(f["seq"], f["kind"], f["text"]) for f in shown_b]
        assert lines_a == lines_b[1:] and [s for s, _, _ in lines_b] == sorted(
            {s for s, _, _ in lines_b}
        )
        done_a = next(f for f in shown_a if is_done(cid)(f))
        assert "DELETE: 1 行 / 1 row" in done_a["card"]["outcome"]

        def is_marker_end(event: Frame) -> bool:
            return event["event"] == "confirmation.resolved" and event["data"]["id"] == marker

        seen_a = await events_until(events_a, is_marker_end)
        seen_b = await events_until(events_b, is_marker_end)
    # Each change once per replica: A made the requests; B made both decisions and, having
    # taken the approval, ran the call.
    assert seen_a == [
        ("confirmation.requested", cid, False, "pending"),
        ("confirmation.resolved", cid, True, "approved"),
        ("confirmation.executed", cid, True, "approved"),
        ("confirmation.requested", marker, False, "pending"),
        ("confirmation.resolved", marker, True, "rejected"),
    ]
    assert [(e, i, r) for e, i, r, _ in seen_b] == [
        ("confirmation.requested", cid, True),
        ("confirmation.resolved", cid, False),
        ("confirmation.executed", cid, False),
        ("confirmation.requested", marker, True),
        ("confirmation.resolved", marker, False),
    ]
    # B ran it, once (each replica here has its own demo database).
    assert not order_exists(b.data_dir, 3) and order_exists(a.data_dir, 3)

    # Counted where it happened: A asked, B decided.
    async with aiohttp.ClientSession() as http:
        metrics_a = await (await http.get(f"{a.url}/metrics")).text()
        metrics_b = await (await http.get(f"{b.url}/metrics")).text()
    approved = {"outcome": "approved", "via": "admin"}
    assert counted(metrics_a, "gateway_confirmations_resolved_total", **approved) == 0
    assert counted(metrics_b, "gateway_confirmations_resolved_total", **approved) == 1
    requested = {"tool": "sql_modify"}
    assert counted(metrics_a, "gateway_confirmations_requested_total", **requested) == 2
    assert counted(metrics_b, "gateway_confirmations_requested_total", **requested) == 0
    for process in (a, b):
        assert process.stop() == 0
        assert process.error_lines() == []


async def test_a_line_posted_on_b_shows_once_in_a_tab_on_a_and_in_its_long_poll(
    replicas: tuple[ServeProcess, ServeProcess],
) -> None:
    a, b = replicas
    async with (
        aiohttp.ClientSession(base_url=a.url) as on_a,
        aiohttp.ClientSession(base_url=b.url) as on_b,
        tab(on_a, "alice") as alice,
    ):
        # A long poll on A, in the empty room: it returns with the line posted on B.
        polling = asyncio.create_task(poll(on_a, wait=20))
        async with on_b.post(
            f"/api/chat/{ROOM}/messages", json={"user": "bob", "text": "/help"}
        ) as resp:
            assert resp.status == 202, await resp.text()
            posted = await resp.json()
        polled = await asyncio.wait_for(polling, 30)
        assert polled[0]["seq"] == posted["seq"] and polled[0]["user"] == "bob"

        # In the tab on A: Bob's line, then the answer B gave; then Alice's own marker line,
        # so anything told twice would have come before it.
        shown = await frames_until(alice, lambda f: f["user"] is None)
        await alice.send_json({"type": "message", "text": "marker"})
        shown += await frames_until(alice, lambda f: f["text"] == "marker")
    assert [(f["user"], f["text"]) for f in shown][:1] == [("bob", "/help")]
    assert [f["seq"] for f in shown] == sorted({f["seq"] for f in shown})  # once, in order
    assert [f["user"] for f in shown] == ["bob", None, "alice"]
