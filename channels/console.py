"""A terminal chat through the same bus and confirmation path (``gateway chat``)."""

from __future__ import annotations

import asyncio
import itertools
import sys
from collections.abc import Callable
from typing import ClassVar, TextIO

import structlog

from channels.base import Channel
from gateway import texts
from gateway.bus import InboundMessage, MessageBus, OutboundKind, OutboundMessage
from gateway.runtime import BackgroundTasks

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
    ) -> None:
        self.bus = bus
        self.user = user
        self.stdin = stdin or sys.stdin
        self.stdout = stdout or sys.stdout
        self.on_eof = on_eof
        self._tasks = BackgroundTasks("console")
        self._ids = itertools.count(1)
        self._lines: asyncio.Queue[str | None] = asyncio.Queue()
        self._reader_fd: int | None = None
        self._buffer = b""

    @property
    def chat_id(self) -> str:
        return self.user

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        fd = self.stdin.fileno()
        # add_reader keeps stdin off a thread: a thread blocked in readline() would keep
        # the process alive after shutdown.
        loop.add_reader(fd, self._on_readable, fd)
        self._reader_fd = fd
        self._tasks.spawn(self._run(), name="console-input")
        self._print(texts.CONSOLE_BANNER)

    def _on_readable(self, fd: int) -> None:
        import os

        chunk = os.read(fd, 65536)
        if not chunk:
            self._lines.put_nowait(None)
            asyncio.get_running_loop().remove_reader(fd)
            self._reader_fd = None
            return
        self._buffer += chunk
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            self._lines.put_nowait(line.decode("utf-8", errors="replace"))

    async def _run(self) -> None:
        while True:
            line = await self._lines.get()
            if line is None:
                if self.on_eof is not None:
                    self.on_eof()
                return
            text = line.strip()
            if not text:
                continue
            await self.bus.publish_inbound(
                InboundMessage(
                    channel=self.name,
                    chat_id=self.chat_id,
                    sender_id=self.user,
                    sender_name=self.user,
                    text=text,
                    message_id=f"console-{next(self._ids)}",
                )
            )

    def _print(self, text: str) -> None:
        self.stdout.write(text + "\n")
        self.stdout.flush()

    async def send(self, msg: OutboundMessage) -> None:
        if msg.kind is OutboundKind.CONFIRMATION:
            self._print("\n" + msg.text + "\n")
        else:
            self._print(f"bot> {msg.text}")

    async def stop(self) -> None:
        if self._reader_fd is not None:
            asyncio.get_running_loop().remove_reader(self._reader_fd)
            self._reader_fd = None
        await self._tasks.cancel()
