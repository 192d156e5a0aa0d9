"""docs/deploy.md's nginx and Caddy examples, as written, in front of a real ``gateway serve``.

The proxy's configuration is the doc's fenced ``nginx`` or ``caddy`` block (ports, users
and TLS swapped for loopback ones), the gateway's is the doc's ``toml`` block: what an
operator copies is what is tested. Through it, a visitor cannot decide by typing an approver's
name, the signed-in approver can, a client cannot choose its own user header, and a
duplicated header from the proxy's address is refused.

nginx and Caddy are Debian's packages (scripts/test.sh installs them): without one its
tests skip, unless GATEWAY_TEST_REQUIRE_SERVICES=1.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from multidict import CIMultiDict

from gateway import texts
from tests.services import require_service
from tests.webchat.support import ServeProcess, next_frame, wait_until

DEPLOY_MD = Path(__file__).resolve().parents[2] / "docs" / "deploy.md"
SECTION = "## Behind a TLS reverse proxy"
PUBLIC = "chat.example.com"
TOKEN = "proxy-test-admin-token-0123456789abcdef"
USERS = {"alice": "alice-pw", "bob": "bob-pw", "mallory": "mallory-pw"}
DELETE_3 = "/sql DELETE FROM orders WHERE id = 3"


def doc_block(language: str) -> str:
    """The first ```language block of the reverse proxy section of docs/deploy.md."""
    text = DEPLOY_MD.read_text(encoding="utf-8")
    section = text[text.index(SECTION) :]
    section = section[: section.index("\n## ", len(SECTION))]
    found = re.search(rf"^```{language}\n(.*?)^```$", section, flags=re.M | re.S)
    assert found is not None, f"docs/deploy.md has no ```{language} block under {SECTION!r}"
    return found.group(1)


def substitute(text: str, replacements: dict[str, str]) -> str:
    """Each replacement must apply: a doc that changed shape fails here, not quietly."""
    for old, new in replacements.items():
        assert old in text, f"the doc's nginx block no longer has {old!r}"
        text = text.replace(old, new)
    return text


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def nginx_conf(block: str, *, prefix: Path, port: int, upstream: int, htpasswd: Path) -> str:
    """The doc's block inside a complete nginx.conf that runs in ``prefix``, in the foreground."""
    block = substitute(
        block,
        {
            "listen 443 ssl;": f"listen 127.0.0.1:{port};",
            "listen 80;": f"listen 127.0.0.1:{free_port()};",
            "127.0.0.1:8080": f"127.0.0.1:{upstream}",
            "/etc/nginx/chat-gateway.htpasswd": str(htpasswd),
        },
    )
    block, certificates = re.subn(r"^\s*ssl_certificate(_key)?\s.*\n", "", block, flags=re.M)
    assert certificates == 2, "the doc's nginx block no longer names its certificate and key"
    temp = "\n".join(
        f"    {kind}_temp_path {prefix / kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    # As root, nginx's workers would run as nobody and could not read the test's files.
    user = "user root;\n" if os.geteuid() == 0 else ""
    return (
        f"{user}daemon off;\nworker_processes 1;\npid {prefix / 'nginx.pid'};\n"
        f"error_log {prefix / 'error.log'} warn;\n"
        "events { worker_connections 64; }\n"
        f"http {{\n    access_log off;\n{temp}\n{block}\n}}\n"
    )


# Caddy's basicauth takes bcrypt hashes; these are of USERS' passwords at cost 4 (what
# `caddy hash-password` prints costs 14: a second of CPU per request).
BCRYPT = {
    "alice": "$2b$04$/3MCMns3FzoUCzMmaZob.e9aCS87f2VQk.fuC2efsktkwBInt0hQ6",
    "bob": "$2b$04$pwTs6X1efAbBO0/HihG3.O6xl3oNivkXqUT57V.DEW/zvP93CLxUG",
    "mallory": "$2b$04$8ZQa6EbJbuKh5RDYrdMa6es6N6yhPOT8Gq/jC3vAvjlzDsJBhLYvS",
}


def caddyfile(block: str, *, storage: Path, port: int, upstream: int) -> str:
    """The doc's block as a site on a loopback port over plain HTTP, Caddy's admin API off."""
    [example] = [line for line in block.splitlines() if "$2a$14$" in line]
    users = "\n".join(f"        {u} {h}" for u, h in BCRYPT.items())
    block = substitute(
        block,
        {
            f"{PUBLIC} {{": f"http://{PUBLIC}:{port} {{\n    bind 127.0.0.1",
            example: users,
            "127.0.0.1:8080": f"127.0.0.1:{upstream}",
        },
    )
    return f"{{\n    admin off\n    storage file_system {storage}\n}}\n\n{block}"


@dataclass
class Stack:
    gateway: ServeProcess
    proxy: str  # http://127.0.0.1:PORT, the reverse proxy

    def session(self, user: str | None = None, **headers: str) -> aiohttp.ClientSession:
        """A browser on the internet: it asks for chat.example.com, signed in as ``user``."""
        if user is not None:
            headers["Authorization"] = aiohttp.encode_basic_auth(user, USERS[user])
        return aiohttp.ClientSession(base_url=self.proxy, headers={"Host": PUBLIC, **headers})


def find_binary(name: str, package: str) -> str:
    binary = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    if binary is None:
        require_service(f"{name} (Debian package {package})", FileNotFoundError("not on PATH"))
    return binary


def proxy_command(kind: str, work: Path, *, port: int, upstream: int) -> list[str]:
    """Write the proxy's configuration from the doc's block; the command that runs it."""
    work.mkdir()
    if kind.startswith("nginx"):
        binary = find_binary("nginx", "nginx")
        htpasswd = work / "htpasswd"
        htpasswd.write_text("".join(f"{u}:{{PLAIN}}{p}\n" for u, p in USERS.items()))
        conf = work / "nginx.conf"
        block = doc_block("nginx")
        if kind == NGINX_HOST_ONLY:
            block = without_forwarding_headers(block)
        conf.write_text(
            nginx_conf(block, prefix=work, port=port, upstream=upstream, htpasswd=htpasswd)
        )
        return [binary, "-p", str(work), "-c", str(conf), "-e", str(work / "error.log")]
    binary = find_binary("caddy", "caddy")
    conf = work / "Caddyfile"
    block = doc_block("caddy")
    conf.write_text(caddyfile(block, storage=work / "data", port=port, upstream=upstream))
    return [binary, "run", "--adapter", "caddyfile", "--config", str(conf)]


# An operator who left the forwarding headers out (as this doc's example once did): the
# public Host the proxy passes on still says the request is not local.
NGINX_HOST_ONLY = "nginx-host-only"


def without_forwarding_headers(block: str) -> str:
    kept = [line for line in block.splitlines() if "X-Forwarded-For" not in line]
    kept = [line for line in kept if "X-Forwarded-Proto" not in line]
    assert len(kept) == len(block.splitlines()) - 2, "the doc's nginx block changed shape"
    return "\n".join(kept)


@pytest.fixture(scope="module", params=["nginx", NGINX_HOST_ONLY, "caddy"])
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    kind: str = request.param
    tmp = tmp_path_factory.mktemp(kind)
    (tmp / "gateway.toml").write_text(doc_block("toml"), encoding="utf-8")
    settings = tomllib.loads(doc_block("toml"))["server"]
    assert PUBLIC in settings["allowed_hosts"] and settings["trusted_user_header"]
    port = free_port()
    gateway = ServeProcess(
        tmp_path=tmp,
        env={"GATEWAY_ADMIN__TOKEN": TOKEN, "GATEWAY_CONFIRMATION__APPROVERS": '["alice"]'},
    )
    gateway.start()
    try:
        upstream = int(gateway.url.rsplit(":", 1)[1])
        command = proxy_command(kind, tmp / kind, port=port, upstream=upstream)
        # Caddy keeps its files under $HOME and $XDG_*: the test's own directory.
        home = {
            "HOME": str(tmp / kind),
            "XDG_DATA_HOME": str(tmp / kind / "data"),
            "XDG_CONFIG_HOME": str(tmp / kind / "config"),
        }
        log = tmp / kind / "output.log"
        with log.open("wb") as output:
            proc = subprocess.Popen(
                command, env={**os.environ, **home}, stdout=output, stderr=subprocess.STDOUT
            )
        try:
            wait_listening(port, proc, log)
            yield Stack(gateway=gateway, proxy=f"http://127.0.0.1:{port}")
        finally:
            proc.terminate()
            proc.wait(10)
    finally:
        gateway.stop()


def wait_listening(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                why = "\n".join(
                    p.read_text() for p in (log, log.with_name("error.log")) if p.exists()
                )
                raise AssertionError(f"the proxy did not start on port {port}:\n{why}") from None
        time.sleep(0.02)


async def ask(stack: Stack, room: str, user: str) -> str:
    """``user``, signed in at the proxy, asks for DELETE_3 in ``room``; the pending id."""
    async with stack.session(user) as http, http.ws_connect(f"/ws?session={room}") as ws:
        hello = await next_frame(ws, lambda f: f["type"] == "hello")
        assert (hello["user"], hello["identity"]) == (user, "verified")
        await ws.send_json({"type": "message", "text": DELETE_3})
        card = await next_frame(ws, is_confirmation)
        cid: str = card["confirmation"]["id"]
        return cid


def is_confirmation(frame: dict[str, Any]) -> bool:
    return frame.get("type") == "message" and frame.get("kind") == "confirmation"


async def status_of(stack: Stack, cid: str) -> str:
    """Read through the proxy, as an operator's script would (its Bearer token passes)."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with stack.session(**headers) as http, http.get(f"/api/confirmations/{cid}") as resp:
        assert resp.status == 200, await resp.text()
        status: str = (await resp.json())["confirmation"]["status"]
        return status


async def room_says(http: aiohttp.ClientSession, room: str, after: int, text: str) -> int:
    """Long-poll the room (REST) until an entry with ``text``; its seq."""
    for _ in range(20):
        url = f"/api/chat/{room}/messages?after={after}&wait=5"
        async with http.get(url) as resp:
            body = await resp.json()
        for message in body["messages"]:
            if message["text"] == text:
                seq: int = message["seq"]
                return seq
        after = body["last_seq"]
    raise AssertionError(f"the room never said {text!r}")


async def test_a_visitor_typing_the_approvers_name_cannot_decide(stack: Stack) -> None:
    cid = await ask(stack, "visit", "bob")
    async with stack.session() as visitor:
        # The page and its socket are behind the sign-in.
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await visitor.ws_connect("/ws?session=visit&user=alice")
        assert refused.value.status == 401
        # The REST chat is not: it takes the typed name, but the name decides nothing.
        async with visitor.get("/api/chat/visit/messages?user=alice") as resp:
            [card] = [m for m in (await resp.json())["messages"] if m["kind"] == "confirmation"]
            assert card["can_decide"]["approve"]["allowed"] is False
        body = {"user": "alice", "text": f"确认 {cid}"}
        async with visitor.post("/api/chat/visit/messages", json=body) as resp:
            assert resp.status == 202
            seq = (await resp.json())["seq"]
        await room_says(visitor, "visit", seq, texts.WEBCHAT_UNVERIFIED_DECISION)
    # Signed in as someone else, typing alice's name changes nothing: a card click counts
    # for mallory, who may not decide.
    async with (
        stack.session("mallory") as http,
        http.ws_connect("/ws?session=visit&user=alice") as ws,
    ):
        hello = await next_frame(ws, lambda f: f["type"] == "hello")
        assert (hello["user"], hello["identity"]) == ("mallory", "verified")
        card = await next_frame(ws, is_confirmation)
        assert card["can_decide"]["approve"]["allowed"] is False
        await ws.send_json({"type": "decide", "id": cid, "decision": "approve"})
        answer = await next_frame(ws, lambda f: f["type"] == "decision")
        assert answer["outcome"] != "decided"
    assert await status_of(stack, cid) == "pending"


async def test_the_signed_in_approver_decides(stack: Stack) -> None:
    cid = await ask(stack, "signed", "bob")
    async with (
        stack.session("alice") as http,
        http.ws_connect("/ws?session=signed&user=someone") as ws,
    ):
        hello = await next_frame(ws, lambda f: f["type"] == "hello")
        assert (hello["user"], hello["identity"]) == ("alice", "verified")
        card = await next_frame(ws, is_confirmation)
        assert card["can_decide"]["approve"]["allowed"] is True
        await ws.send_json({"type": "decide", "id": cid, "decision": "approve"})
        answer = await next_frame(ws, lambda f: f["type"] == "decision")
        assert answer["outcome"] == "decided"
    assert await status_of(stack, cid) == "approved"


async def test_the_client_cannot_choose_its_user_header(stack: Stack) -> None:
    cid = await ask(stack, "forged", "bob")
    forged = {"X-Forwarded-User": "alice"}
    # Signed in: the proxy's value replaces the client's.
    async with (
        stack.session("mallory", **forged) as http,
        http.ws_connect("/ws?session=forged") as ws,
    ):
        hello = await next_frame(ws, lambda f: f["type"] == "hello")
        assert (hello["user"], hello["identity"]) == ("mallory", "verified")
    # Not signed in: the client's copy does not get through at all.
    async with stack.session(**forged) as visitor:
        body = {"user": "visitor", "text": f"确认 {cid}"}
        async with visitor.post("/api/chat/forged/messages", json=body) as resp:
            assert resp.status == 202
            seq = (await resp.json())["seq"]
        async with visitor.get(f"/api/chat/forged/messages?after={seq - 1}") as resp:
            [mine] = (await resp.json())["messages"][:1]
            assert mine["user"] == "visitor"
        await room_says(visitor, "forged", seq, texts.WEBCHAT_UNVERIFIED_DECISION)
    assert await status_of(stack, cid) == "pending"


@pytest.mark.parametrize(
    "copies",
    [
        [("X-Forwarded-User", "mallory"), ("X-Forwarded-User", "alice")],
        [("X-Forwarded-User", "mallory,alice")],
    ],
    ids=["two-copies", "comma-joined"],
)
async def test_a_duplicated_header_from_the_proxy_address_is_refused(
    stack: Stack, copies: list[tuple[str, str]]
) -> None:
    """Sent straight to the gateway from 127.0.0.1, a listed proxy address."""
    headers = CIMultiDict([("Host", PUBLIC), ("X-Forwarded-For", "203.0.113.9"), *copies])
    before = duplicates_logged(stack.gateway)
    async with (
        aiohttp.ClientSession(base_url=stack.gateway.url) as http,
        http.get("/api/chat/dup/messages?user=x", headers=headers) as resp,
    ):
        assert resp.status == 400
        assert "X-Forwarded-User" in (await resp.json())["error"]
    # One line per refused request, read from the daemon's log as it arrives.
    wait_until(lambda: duplicates_logged(stack.gateway) == before + 1)


def duplicates_logged(gateway: ServeProcess) -> int:
    return sum("identity.duplicate_header" in line for line in gateway.lines)
