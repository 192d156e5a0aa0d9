"""The least a web chat server must do, for bench/ingest.py to compare ``gateway serve`` with.

Same REST shape as the gateway's web chat: ``POST /api/chat/{room}/messages`` with
``{"user", "text"}`` -> 202 ``{"message_id", "seq"}`` (the message's place in the room); the
answer ("bot" and a fixed text) goes into the room at once;
``GET /api/chat/{room}/messages?after=N&wait=S`` long-polls for entries after sequence
number N. No agent, bus, store, limits or logging.

Run: .venv/bin/python bench/bare_chat.py [--port 0]   (prints "listening on URL")
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
from typing import Any

from aiohttp import web

ANSWER = "可用命令 / commands: /help /pending /sql"


class Room:
    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self.changed = asyncio.Event()

    def add(self, user: str, text: str) -> None:
        self.entries.append({"seq": len(self.entries) + 1, "user": user, "text": text})
        self.changed.set()
        self.changed = asyncio.Event()


def make_app() -> web.Application:
    rooms: dict[str, Room] = {}
    ids = itertools.count(1)

    async def post(request: web.Request) -> web.Response:
        room = rooms.setdefault(request.match_info["room"], Room())
        data = await request.json()
        room.add(str(data["user"]), str(data["text"]))
        seq = len(room.entries)
        room.add("bot", ANSWER)
        return web.json_response({"message_id": f"m{next(ids)}", "seq": seq}, status=202)

    async def get(request: web.Request) -> web.Response:
        room = rooms.setdefault(request.match_info["room"], Room())
        after = int(request.query.get("after", 0))
        wait = float(request.query.get("wait", 0))
        if len(room.entries) <= after and wait > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(room.changed.wait(), wait)
        messages = room.entries[after:]
        return web.json_response({"messages": messages, "last_seq": len(room.entries)})

    app = web.Application()
    app.router.add_post("/api/chat/{room}/messages", post)
    app.router.add_get("/api/chat/{room}/messages", get)
    return app


async def serve(port: int) -> None:
    runner = web.AppRunner(make_app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    sockets = site._server.sockets if site._server else []  # type: ignore[union-attr]
    print(f"listening on http://127.0.0.1:{sockets[0].getsockname()[1]}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--port", type=int, default=0)
    asyncio.run(serve(ap.parse_args().port))


if __name__ == "__main__":
    main()
