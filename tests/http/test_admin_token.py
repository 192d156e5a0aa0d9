"""Beyond loopback the admin token must exist and be long; the error says how to make one."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.settings import ConfigError
from gateway.app import build
from gateway.http.server import MIN_EXPOSED_TOKEN_LENGTH
from tests.webchat.support import ServeProcess, make_settings

HOW = 'python -c "import secrets; print(secrets.token_urlsafe(32))"'


@pytest.mark.parametrize("token", ["a", "token", "s3cr3t-" * 3])
async def test_a_short_token_beyond_loopback_is_refused(tmp_path: Path, token: str) -> None:
    settings = make_settings(tmp_path, server={"host": "0.0.0.0"}, admin={"token": token})
    with pytest.raises(ConfigError) as refused:
        await build(settings)
    message = str(refused.value)
    assert f"at least {MIN_EXPOSED_TOKEN_LENGTH}" in message
    assert HOW in message
    assert "s3cr3t" not in message  # the secret itself is not echoed


async def test_a_long_token_beyond_loopback_is_accepted(tmp_path: Path) -> None:
    token = "k" * MIN_EXPOSED_TOKEN_LENGTH
    settings = make_settings(tmp_path, server={"host": "0.0.0.0"}, admin={"token": token})
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
