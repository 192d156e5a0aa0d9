"""Beyond loopback, or behind a proxy publishing a public name, the admin token must exist
and be strong; the error says how to make one, in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.settings import ConfigError
from gateway.app import build
from gateway.http.server import MIN_EXPOSED_TOKEN_LENGTH
from tests.webchat.support import ServeProcess, make_settings

HOW = 'python -c "import secrets; print(secrets.token_urlsafe(32))"'


STRONG = "Zq8-vN3xL0pR7tYw2sKd9fHj4mBc6gEa"  # 32 characters, 32 distinct
EXPOSED = [{"host": "0.0.0.0"}, {"allowed_hosts": ["localhost", "chat.example.com"]}]


@pytest.mark.parametrize("server", EXPOSED)
@pytest.mark.parametrize(
    "token", ["a", "token", "s3cr3t-" * 3, "k" * 40, "s3cr3t" * 6, STRONG[:-1]]
)
async def test_a_weak_token_beyond_loopback_is_refused(
    tmp_path: Path, token: str, server: dict[str, object]
) -> None:
    settings = make_settings(tmp_path, server=server, admin={"token": token})
    with pytest.raises(ConfigError) as refused:
        await build(settings)
    message = str(refused.value)
    assert f"at least {MIN_EXPOSED_TOKEN_LENGTH} characters" in message
    assert HOW in message
    assert "s3cr3t" not in message and "kkk" not in message  # the secret is not echoed
    assert "\n" not in message


@pytest.mark.parametrize("server", EXPOSED)
async def test_a_strong_token_beyond_loopback_is_accepted(
    tmp_path: Path, server: dict[str, object]
) -> None:
    settings = make_settings(tmp_path, server=server, admin={"token": STRONG})
    gateway = await build(settings)
    await gateway.stop()


async def test_on_loopback_any_token_will_do(tmp_path: Path) -> None:
    gateway = await build(make_settings(tmp_path, admin={"token": "a"}))
    await gateway.stop()


def test_serve_says_how_to_generate_a_token_in_one_line(tmp_path: Path) -> None:
    process = ServeProcess(
        tmp_path=tmp_path,
        env={"GATEWAY_SERVER__HOST": "0.0.0.0", "GATEWAY_ADMIN__TOKEN": "token"},
    )
    with pytest.raises(AssertionError, match="gateway serve exited"):
        process.start()
    assert process.stop() == 2
    output = "".join(process.lines)
    assert HOW in output
    assert output.count("\n") == 1


@pytest.mark.parametrize("token", [None, "token", "k" * 40])
def test_serve_refuses_a_public_host_name_without_a_strong_token(
    tmp_path: Path, token: str | None
) -> None:
    """Behind a proxy the gateway binds 127.0.0.1, but the admin API is on the internet."""
    env = {"GATEWAY_SERVER__ALLOWED_HOSTS": '["localhost", "chat.example.com"]'}
    if token is not None:
        env["GATEWAY_ADMIN__TOKEN"] = token
    process = ServeProcess(tmp_path=tmp_path, env=env)
    with pytest.raises(AssertionError, match="gateway serve exited"):
        process.start()
    assert process.stop() == 2
    [line] = process.lines
    assert "server.allowed_hosts lists 'chat.example.com'" in line
    assert f"at least {MIN_EXPOSED_TOKEN_LENGTH} characters" in line
    assert HOW in line
