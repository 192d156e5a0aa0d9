"""The web chat's WebSocket: one per browser tab, joined to one room.

On connect the tab gets a ``hello`` and the room's history after ``after``; then it
sends ``message``, ``decide`` (with an optional session ``grant``: the card's grant
button) and ``ping`` frames. JSON that is nested too deep or holds a lone surrogate is
answered with an ``error`` frame (the socket stays open); a frame that is not JSON, or not
this protocol, closes the socket with the reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import structlog
from aiohttp import WSCloseCode, WSMsgType, web

from channels.webchat.limits import OverLimit, SlowDown
from channels.webchat.rest import int_param, over_limit_response
from channels.webchat.rooms import Room, Socket
from gateway import texts
from gateway.bus import SenderIdentity
from gateway.confirm.model import Answer, Decision, GrantAsk
from gateway.http.identity import client_address
from gateway.http.jsonapi import ApiError, JsonInputError, parse_json
from gateway.storage.confirmations import StoreUnavailableError

if TYPE_CHECKING:
    from channels.webchat.host import ChatHost

log = structlog.get_logger(__name__)

MAX_REASON_LENGTH = 500
# Ids are 4-5 Crockford characters; anything much longer is not an id.
MAX_ID_LENGTH = 16


class FrameError(Exception):
    """A WebSocket frame that is not our protocol: the socket is closed with this reason."""


class ChatSockets:
    """``GET /ws?session=ROOM&user=NAME[&after=SEQ]``."""

    def __init__(self, channel: ChatHost) -> None:
        self.channel = channel

    async def websocket(self, request: web.Request) -> web.StreamResponse:
        channel = self.channel
        settings = channel.settings
        room = channel.room_from(request)
        user, identity = channel.sender(request, request.query.get("user"))
        after = int_param(request, "after", default=0)
        if len(room.sockets) >= settings.max_sockets_per_session:
            raise ApiError(429, "too many open connections in this session")
        address = client_address(request)
        # Refused before the upgrade, with the cap's name: each open socket holds a file
        # descriptor, and a thousand idle ones starved /healthz and webhooks (issue 22).
        try:
            with channel.open_sockets.hold(address):
                return await self._open(request, room, user, identity, address, after)
        except OverLimit as exc:
            return over_limit_response(
                exc, what="websocket", request=request, log_line=channel.refused_log
            )

    async def _open(
        self,
        request: web.Request,
        room: Room,
        user: str,
        identity: SenderIdentity,
        address: str,
        after: int,
    ) -> web.StreamResponse:
        channel = self.channel
        settings = channel.settings
        ws = web.WebSocketResponse(
            heartbeat=30.0,
            # A frame holds one message; far bigger than the text limit is not ours.
            max_msg_size=max(65536, settings.max_text_length * 4 + 4096),
        )
        await ws.prepare(request)
        sock = Socket(ws=ws, user=user, identity=identity, address=address)
        hello = {
            "type": "hello",
            "session": room.name,
            "user": user,
            # verified: named by the login proxy; otherwise the page says names are typed.
            "identity": identity.value,
            "now": channel.clock(),
            "max_text_length": settings.max_text_length,
            "last_seq": room.last_seq,
        }
        try:
            await channel.send_frame(sock, hello)
            # Until nothing is left: what came while the tab caught up is sent too, and the
            # room's sends that were under way skip what it got here (Socket.seen).
            seen = after
            while backlog := room.after(seen):
                for entry in backlog:
                    await channel.send_frame(sock, channel.message_frame(entry, user, identity))
                seen = sock.seen = backlog[-1].seq
        except (ConnectionError, TimeoutError):
            # The tab went away while catching up: nothing to clean up yet.
            log.info("webchat.gone_during_backlog", room=room.name, user=user)
            return ws
        room.sockets.add(sock)
        if channel.metrics is not None:
            channel.metrics.webchat_sockets.inc()
        log.info("webchat.connected", room=room.name, user=user)
        try:
            await self._read_frames(room, sock)
        except (ConnectionError, TimeoutError) as exc:
            # Replying to a tab that just closed: the tab's problem, not the gateway's.
            log.info("webchat.reply_failed", room=room.name, error=type(exc).__name__)
        finally:
            room.sockets.discard(sock)
            if channel.metrics is not None:
                channel.metrics.webchat_sockets.dec()
            log.info("webchat.disconnected", room=room.name, user=user)
        return ws

    async def _read_frames(self, room: Room, sock: Socket) -> None:
        ws = sock.ws
        async for frame in ws:
            if frame.type is WSMsgType.TEXT:
                try:
                    await self._on_frame(room, sock, frame.data)
                except FrameError as exc:
                    # A client that does not speak the protocol: tell it why and hang up.
                    log.info("webchat.bad_frame", room=room.name, error=str(exc))
                    await ws.close(code=WSCloseCode.UNSUPPORTED_DATA, message=str(exc).encode())
                    return
            elif frame.type is WSMsgType.BINARY:
                log.info("webchat.bad_frame", room=room.name, error="binary")
                await ws.close(
                    code=WSCloseCode.UNSUPPORTED_DATA, message=b"binary frames are not supported"
                )
                return
            elif frame.type is WSMsgType.ERROR:
                log.info("webchat.socket_error", room=room.name, error=str(ws.exception()))
                return

    async def _on_frame(self, room: Room, sock: Socket, raw: str) -> None:
        channel = self.channel
        try:
            data = parse_json(raw, max_depth=channel.max_json_depth)
        except JsonInputError as exc:
            if not _json_but_refused(exc):
                raise FrameError("frame is not JSON") from exc
            # JSON we will not take (a page can send a lone surrogate a person pasted):
            # said to the tab, which stays open; the room and this socket go on.
            log.info("webchat.unreadable_frame", room=room.name, error=str(exc))
            error = texts.WEBCHAT_UNREADABLE_FRAME.format(error=exc)
            await channel.send_frame(sock, {"type": "error", "error": error})
            return
        if not isinstance(data, dict):
            raise FrameError("frame must be a JSON object")
        kind = data.get("type")
        if kind == "message":
            text = data.get("text")
            if not isinstance(text, str):
                raise FrameError("message.text must be a string")
            checked = text.strip()
            if not checked:
                return  # nothing to say, nothing to answer
            limit = channel.settings.max_text_length
            if len(checked) > limit:
                # Shown to the person in the page: their words, not an API error.
                error = texts.MESSAGE_TOO_LONG.format(limit=limit)
                await channel.send_frame(sock, {"type": "error", "error": error})
                return
            try:
                await channel.accept(room, sock.user, checked, sock.identity, address=sock.address)
            except StoreUnavailableError as exc:
                # Not stored, so not taken (invariant 9): this tab is told to send it again.
                log.warning("webchat.not_stored", room=room.name, error=str(exc))
                error = texts.STORE_UNAVAILABLE_MESSAGE
                await channel.send_frame(sock, {"type": "error", "error": error})
            except SlowDown as exc:
                # Said to this tab only: the room does not need to read it.
                log.info("webchat.rate_limited", user=sock.user, retry_after=exc.retry_after)
                error = texts.WEBCHAT_SLOW_DOWN.format(limit=exc.limit, seconds=exc.retry_after)
                await channel.send_frame(sock, {"type": "error", "error": error})
        elif kind == "decide":
            await self._on_decide(room, sock, data)
        elif kind == "again":
            await self._on_again(room, sock, data)
        elif kind == "ping":
            await channel.send_frame(sock, {"type": "pong", "now": channel.clock()})
        else:
            raise FrameError("unknown frame type: use message, decide, again or ping")

    async def _on_decide(self, room: Room, sock: Socket, data: dict[str, Any]) -> None:
        channel = self.channel
        cid, decision, reason = data.get("id"), data.get("decision"), data.get("reason")
        if not isinstance(cid, str) or not 0 < len(cid) <= MAX_ID_LENGTH:
            raise FrameError("decide.id must be a confirmation id")
        if decision not in ("approve", "reject"):
            raise FrameError("decide.decision must be approve or reject")
        if reason is not None and not isinstance(reason, str):
            raise FrameError("decide.reason must be a string")
        reason = (reason or "").strip()[:MAX_REASON_LENGTH] or None
        grant = _grant_ask(data.get("grant"), decision)
        if sock.identity is SenderIdentity.SELF_DECLARED:
            message = texts.WEBCHAT_UNVERIFIED_DECISION
            frame = {"type": "decision", "id": cid, "outcome": "forbidden", "message": message}
            await channel.send_frame(sock, frame)
            return
        current = await channel.confirmations.get(cid)
        # Only this room's confirmations: a web user must not reach another chat's by id.
        if current is None or current.session_key != channel.session_key(room):
            await channel.send_frame(
                sock,
                {
                    "type": "decision",
                    "id": cid,
                    "outcome": "not_found",
                    "message": texts.unknown_id(cid),
                },
            )
            return
        # The cards' one path: with a grant, a counted approval also gives it, told in chat.
        result = await channel.confirmations.answer(
            Answer(
                confirmation_id=current.id,
                decision=Decision(decision),
                actor=sock.user,
                via="web",
                reason=reason,
                grant=grant,
            )
        )
        await channel.send_frame(
            sock,
            {
                "type": "decision",
                "id": current.id,
                "outcome": result.outcome.value,
                "message": result.message,
            },
        )

    async def _on_again(self, room: Room, sock: Socket, data: dict[str, Any]) -> None:
        """重新发起 / Ask again on an ended card: the service judges (only the requester,
        once); the answer frame says what came of it, the cards' updates the rest."""
        channel = self.channel
        cid = data.get("id")
        if not isinstance(cid, str) or not 0 < len(cid) <= MAX_ID_LENGTH:
            raise FrameError("again.id must be a confirmation id")
        if sock.identity is SenderIdentity.SELF_DECLARED:
            message = texts.WEBCHAT_UNVERIFIED_DECISION
            await channel.send_frame(
                sock, {"type": "again", "id": cid, "done": False, "message": message}
            )
            return
        current = await channel.confirmations.get(cid)
        # Only this room's calls, as for a decision.
        if current is None or current.session_key != channel.session_key(room):
            message = texts.unknown_id(cid)
            await channel.send_frame(
                sock, {"type": "again", "id": cid, "done": False, "message": message}
            )
            return
        result = await channel.confirmations.ask_again(current.id, actor=sock.user, via="web")
        frame = {"type": "again", "id": current.id, "done": result.done, "message": result.message}
        await channel.send_frame(sock, frame)


def _grant_ask(grant: object, decision: object) -> GrantAsk | None:
    """The grant a card asks for: its button (``{"scope": "session", "minutes": 30}``), or
    the shape its reader chose (``"pin": "scope" | "args"``, ``"single_use": true``; the
    lengths a shape may have are GrantBook's to refuse, as on every path)."""
    if grant is None:
        return None
    if decision != "approve":
        raise FrameError("decide.grant goes only with approve")
    if not isinstance(grant, dict) or grant.get("scope") != "session":
        raise FrameError('decide.grant must be {"scope": "session", "minutes": N}')
    minutes = grant.get("minutes")
    if type(minutes) is not int:  # not a bool, a float or a string
        raise FrameError("decide.grant.minutes must be a whole number")
    pin = grant.get("pin", "scope")
    if pin not in ("scope", "args"):
        raise FrameError('decide.grant.pin must be "scope" or "args"')
    single_use = grant.get("single_use", False)
    if type(single_use) is not bool:
        raise FrameError("decide.grant.single_use must be true or false")
    return GrantAsk(
        "session", minutes, pin="args" if pin == "args" else "scope", single_use=single_use
    )


def _json_but_refused(exc: JsonInputError) -> bool:
    """JSON nested too deep or holding a lone surrogate, as opposed to text that is not JSON.

    ``parse_json`` raises one error type for all three; its messages say which (its tests
    pin them). Two subclasses in gateway.http.jsonapi would make this an isinstance check.
    """
    message = str(exc)
    return "nested deeper than" in message or "lone surrogate" in message
