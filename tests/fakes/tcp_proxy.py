"""A TCP proxy a test can stop and start: a service outage without touching the shared server.

``stop()`` closes the listener and cuts every open connection (as a crashed or restarted
server would); ``start()`` listens again on the same port. ``lose_next_reply()`` lets the
next command through and cuts its connection instead of passing the reply back: the write
happened, the client cannot know it (as a ``CLIENT KILL`` or a network cut at that moment).
``hold_next_command(marker)`` keeps the next command holding ``marker`` from the server until
``release()``, however long its client waits (a server paused past the client's read timeout:
the command is executed when the pause ends, after the client gave up).
"""

from __future__ import annotations

import asyncio
import contextlib


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._pipes: set[asyncio.Task[None]] = set()
        self.port = 0
        self.accepted = 0
        self._lose_reply = False
        self.replies_lost = 0
        self._hold: tuple[bytes, asyncio.Event] | None = None
        self._released = asyncio.Event()
        self.held = asyncio.Event()  # a held command has arrived
        self.held_answered = asyncio.Event()  # the server answered it, once released

    def lose_next_reply(self) -> None:
        """The next reply from the server is dropped and its connection cut."""
        self._lose_reply = True

    def hold_next_command(self, marker: bytes) -> None:
        """The next command whose bytes hold ``marker`` waits here until ``release()``, then
        goes on to the server, even if its client has hung up meanwhile."""
        self._released = asyncio.Event()
        self._hold = (marker, self._released)
        self.held.clear()
        self.held_answered.clear()

    def release(self) -> None:
        self._released.set()

    @property
    def url_host(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._handle, "127.0.0.1", self.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Refuse new connections and cut the open ones."""
        server, self._server = self._server, None
        if server is not None:
            server.close()  # no new connections from here on
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()
        for task in list(self._pipes):
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)
        if server is not None:
            await server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self._writers.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.transport.abort()
            return
        if self._server is None or writer not in self._writers:  # stopped meanwhile
            writer.transport.abort()
            up_writer.transport.abort()
            return
        self._writers.add(up_writer)
        released: list[bool] = []  # a held command of this connection went to the server
        pipes = [
            asyncio.create_task(self._requests(reader, up_writer, released)),
            asyncio.create_task(self._replies(up_reader, writer, released)),
        ]
        self._pipes.update(pipes)
        try:
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pipes:
                task.cancel()
            await asyncio.gather(*pipes, return_exceptions=True)
            self._pipes.difference_update(pipes)
            for w in (writer, up_writer):
                self._writers.discard(w)
                w.transport.abort()

    async def _replies(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, released: list[bool]
    ) -> None:
        """Server to client; a reply to lose ends the pipe (and so the connection) unsent."""
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                if released:
                    self.held_answered.set()
                if self._lose_reply:
                    self._lose_reply = False
                    self.replies_lost += 1
                    return
                writer.write(data)
                await writer.drain()

    async def _requests(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, released: list[bool]
    ) -> None:
        """Client to server; a held command waits for ``release()``, then for its answer
        (its client may have hung up: the connection ends only after the server answered)."""
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                hold = self._hold
                if hold is not None and hold[0] in data:
                    self._hold = None
                    self.held.set()
                    await hold[1].wait()
                    released.append(True)
                writer.write(data)
                await writer.drain()
                if released:
                    await self.held_answered.wait()
