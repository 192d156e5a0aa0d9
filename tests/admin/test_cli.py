"""``gateway confirmations ...`` against a running gateway's admin API."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import aiohttp
import pytest

from gateway.app import Gateway
from gateway.cli.main import main
from tests.admin.conftest import TOKEN
from tests.admin.test_api import DELETE_3, ask
from tests.webchat.support import base_url


async def run_cli(*argv: str) -> int:
    # The CLI blocks on HTTP; the gateway runs on this loop, so the CLI gets a thread.
    return await asyncio.to_thread(main, list(argv))


async def test_list_show_approve_and_the_second_decision_fails(
    gateway: Gateway,
    admin: aiohttp.ClientSession,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GATEWAY_ADMIN__TOKEN", TOKEN)
    url = base_url(gateway)
    cid = await ask(admin, "cli", "alice", DELETE_3)

    assert await run_cli("confirmations", "list", "--status", "pending", "--url", url) == 0
    out = capsys.readouterr().out
    assert cid in out and "pending" in out and "webchat:cli" in out

    assert await run_cli("confirmations", "show", cid, "--url", url) == 0
    out = capsys.readouterr().out
    assert "statement:   DELETE FROM orders WHERE id = 3" in out
    assert "rows:        1" in out

    assert await run_cli("confirmations", "approve", cid, "--url", url, "--actor", "oncall") == 0
    assert "approved by oncall" in capsys.readouterr().out

    code = await run_cli(
        "confirmations", "reject", cid, "--reason", "late", "--url", url, "--actor", "oncall"
    )
    assert code == 1
    assert "already approved" in capsys.readouterr().err

    assert await run_cli("confirmations", "show", cid, "--url", url, "--json") == 0
    out = capsys.readouterr().out
    # The in-process gateway's log lines share stdout with the CLI: find the CLI's JSON.
    start = out.index('{\n  "confirmation"')
    record = json.JSONDecoder().raw_decode(out, start)[0]["confirmation"]
    assert record["status"] == "approved"
    assert record["decided_via"] == "admin"


async def test_reject_needs_a_reason_and_records_it(
    gateway: Gateway,
    admin: aiohttp.ClientSession,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GATEWAY_ADMIN__TOKEN", TOKEN)
    url = base_url(gateway)
    cid = await ask(admin, "cli", "alice", DELETE_3)
    with pytest.raises(SystemExit):
        await run_cli("confirmations", "reject", cid, "--url", url, "--actor", "oncall")
    capsys.readouterr()
    assert (
        await run_cli(
            "confirmations",
            "reject",
            cid,
            "--reason",
            "wrong id",
            "--url",
            url,
            "--actor",
            "oncall",
        )
        == 0
    )
    async with admin.get(f"/api/confirmations/{cid}") as resp:
        c = (await resp.json())["confirmation"]
    assert c["status"] == "rejected"
    assert c["reason"] == "wrong id"


async def test_unknown_id_wrong_token_and_no_daemon(
    gateway: Gateway,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    url = base_url(gateway)
    monkeypatch.setenv("GATEWAY_ADMIN__TOKEN", TOKEN)
    assert await run_cli("confirmations", "show", "ZZ99", "--url", url) == 1
    assert "ZZ99" in capsys.readouterr().err

    # A token problem is not "not found" (1): its own code, saying which (issue 26).
    monkeypatch.setenv("GATEWAY_ADMIN__TOKEN", "not-the-token")
    assert await run_cli("confirmations", "list", "--url", url) == 4
    assert "refused the admin token" in capsys.readouterr().err
    monkeypatch.delenv("GATEWAY_ADMIN__TOKEN")
    monkeypatch.chdir(tmp_path)  # no gateway.toml with a token either
    assert await run_cli("confirmations", "list", "--url", url) == 4
    err = capsys.readouterr().err
    assert "no admin token given" in err and "GATEWAY_ADMIN__TOKEN" in err

    # A port nobody listens on: find one, then close it.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    code = await run_cli("confirmations", "list", "--url", f"http://127.0.0.1:{free}")
    assert code == 3
    assert "cannot reach the gateway" in capsys.readouterr().err


async def test_approve_with_edited_arguments(
    gateway: Gateway,
    admin: aiohttp.ClientSession,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GATEWAY_ADMIN__TOKEN", TOKEN)
    url = base_url(gateway)
    cid = await ask(admin, "cli-edit", "alice", DELETE_3)
    approve = ("confirmations", "approve", cid, "--url", url, "--actor", "oncall")

    # Not a JSON object: a usage error before anything is sent.
    with pytest.raises(SystemExit) as usage:
        await run_cli(*approve, "--arguments", "DELETE FROM orders")
    assert usage.value.code == 2
    assert "--arguments: not valid JSON" in capsys.readouterr().err
    # The daemon refuses arguments the tool does not take, naming the field; still pending.
    assert await run_cli(*approve, "--arguments", '{"sql": 5}') == 1
    assert "(arguments.sql)" in capsys.readouterr().err
    assert [c.id for c in await gateway.confirmations.list_pending("webchat:cli-edit")] == [cid]

    edited = '{"sql": "DELETE FROM orders WHERE id = 4"}'
    assert await run_cli(*approve, "--arguments", edited) == 0
    out = capsys.readouterr().out
    assert "approved by oncall with edited arguments" in out
    assert "'DELETE FROM orders WHERE id = 3' → 'DELETE FROM orders WHERE id = 4'" in out
    final = await gateway.confirmations.get(cid)
    assert final is not None and final.tool_call.args == {"sql": "DELETE FROM orders WHERE id = 4"}
