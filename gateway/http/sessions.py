"""The admin page's sign-in: server-side sessions, and the limit on login attempts.

The login form turns a person's name (and the admin token, when one is set) into a random
session id in the page's cookie; the session itself (who, until when) is stored here, so
logging out ends it at once everywhere, a copied cookie included. Stores hold a keyed hash
of the id, never the id: reading the store does not give a cookie, and changing the admin
token ends every session. With the Redis store the sessions are shared by every replica (a
load balancer may send the next request anywhere); otherwise they live in the process and
a restart logs everyone out (one process owns a SQLite data dir).
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog
from aiohttp import web
from cachetools import TTLCache

if TYPE_CHECKING:
    pass

log = structlog.get_logger(__name__)

MAX_COOKIE_LENGTH = 100  # a session id is 43 characters: longer is not one of ours


@dataclass(frozen=True, slots=True)
class AdminSession:
    """A signed-in person: the name they decide as, and when the session ends."""

    name: str
    expires_at: float


class SessionStore(ABC):
    """Where sessions live, by key (a hash of the cookie), each until its expiry."""

    @abstractmethod
    async def add(self, key: str, session: AdminSession, *, now: float) -> None:
        """Store a session; past the store's limit the oldest ones end."""

    @abstractmethod
    async def get(self, key: str, *, now: float) -> AdminSession | None: ...

    @abstractmethod
    async def remove(self, key: str) -> None: ...

    async def close(self) -> None:  # noqa: B027 - optional hook
        pass


class MemorySessionStore(SessionStore):
    """Sessions of this process: a restart ends them all."""

    def __init__(self, *, limit: int) -> None:
        self.limit = limit
        self._sessions: dict[str, AdminSession] = {}

    async def add(self, key: str, session: AdminSession, *, now: float) -> None:
        for old in [k for k, s in self._sessions.items() if s.expires_at <= now]:
            del self._sessions[old]
        while len(self._sessions) >= self.limit:  # the oldest login ends first
            del self._sessions[next(iter(self._sessions))]
        self._sessions[key] = session

    async def get(self, key: str, *, now: float) -> AdminSession | None:
        found = self._sessions.get(key)
        return found if found is not None and found.expires_at > now else None

    async def remove(self, key: str) -> None:
        self._sessions.pop(key, None)


class AdminSessions:
    """Log in, look up and log out the admin page's sessions."""

    def __init__(
        self,
        *,
        store: SessionStore,
        admin_token: str | None,
        seconds: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.seconds = seconds
        self.clock = clock
        self._secret = (admin_token or "").encode("utf-8", "surrogatepass")

    def _key(self, session_id: str) -> str:
        mac = hmac.new(self._secret, session_id.encode("utf-8", "surrogatepass"), hashlib.sha256)
        return mac.hexdigest()

    async def login(self, name: str) -> str:
        """A new session for ``name``: the cookie's value."""
        session_id = secrets.token_urlsafe(32)
        now = self.clock()
        session = AdminSession(name=name, expires_at=now + self.seconds)
        await self.store.add(self._key(session_id), session, now=now)
        return session_id

    async def find(self, cookie: str) -> AdminSession | None:
        if not cookie or len(cookie) > MAX_COOKIE_LENGTH:
            return None
        return await self.store.get(self._key(cookie), now=self.clock())

    async def logout(self, cookie: str) -> None:
        if cookie and len(cookie) <= MAX_COOKIE_LENGTH:
            await self.store.remove(self._key(cookie))


ADMIN_SESSIONS = web.AppKey("admin_sessions", AdminSessions)

WINDOW_SECONDS = 60.0
MAX_CLIENTS_TRACKED = 10_000


class LoginLimiter:
    """At most ``attempts`` wrong logins per client address in a minute.

    Counted per process (a replica behind a load balancer counts its own). The table of
    addresses is bounded: the least recently seen are forgotten first.
    """

    def __init__(self, *, attempts: int, clock: Callable[[], float] = time.time) -> None:
        self.attempts = attempts
        self.clock = clock
        self._failures: TTLCache[str, tuple[float, ...]] = TTLCache(
            maxsize=MAX_CLIENTS_TRACKED, ttl=WINDOW_SECONDS, timer=clock
        )

    def _recent(self, client: str) -> tuple[float, ...]:
        since = self.clock() - WINDOW_SECONDS
        return tuple(t for t in self._failures.get(client, ()) if t > since)

    def retry_after(self, client: str) -> int | None:
        """Seconds until ``client`` may try again, or None if it may now."""
        recent = self._recent(client)
        if len(recent) < self.attempts:
            return None
        return max(1, math.ceil(recent[-self.attempts] + WINDOW_SECONDS - self.clock()))

    def failed(self, client: str) -> None:
        """Count a wrong login; the one that reaches the limit is logged, once."""
        recent = (*self._recent(client), self.clock())
        self._failures[client] = recent
        if len(recent) == self.attempts:
            log.warning(
                "admin.login_limited",
                client=client[:100],
                attempts=self.attempts,
                retry_after=self.retry_after(client),
            )
