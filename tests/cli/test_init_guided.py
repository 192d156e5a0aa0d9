"""``gateway init`` on a terminal: it asks, checks the credentials with the platform (the
loopback fakes), writes gateway.toml and a 0600 env file, and prints the next command.

Each test drives the real ``gateway`` process on a pseudo-terminal, as a newcomer would.
"""

from __future__ import annotations

import io
import os
import re
import stat
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest

from tests.cli.support import ROOT
from tests.fakes.dingtalk.server import FakeDingTalk
from tests.fakes.feishu.server import FakeFeishu
from tests.support import ctrl_c_delivered, wait_reading_input


@pytest.fixture
def feishu() -> Iterator[FakeFeishu]:
    with FakeFeishu(app_id="cli_a1b2c3d4e5f60708", app_secret="feishu-secret-0042") as fake:
        yield fake


@pytest.fixture
def dingtalk() -> Iterator[FakeDingTalk]:
    with FakeDingTalk(client_id="dingabcdef123", client_secret="ding-secret-0042") as fake:
        yield fake


class Session:
    """``gateway init`` on a pty; ``transcript`` is everything the terminal showed."""

    def __init__(self, cwd: Path, env: dict[str, str], *args: str) -> None:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
        clean |= {"PYTHONPATH": str(ROOT), "NO_PROXY": "127.0.0.1,localhost", **env}
        self.screen = io.StringIO()
        self.child = pexpect.spawn(
            sys.executable,
            ["-m", "gateway", "init", *args],
            cwd=str(cwd),
            env=clean,
            encoding="utf-8",
            preexec_fn=ctrl_c_delivered,
            timeout=30,
        )
        self.child.logfile_read = self.screen

    def answer(self, question: str, text: str) -> None:
        self.child.expect_exact(question)
        self.child.sendline(text)

    def finish(self) -> int:
        self.child.expect(pexpect.EOF)
        self.child.close()
        return int(self.child.exitstatus)

    @property
    def transcript(self) -> str:
        return self.screen.getvalue()


@pytest.fixture
def sessions() -> Iterator[list[Session]]:
    started: list[Session] = []
    yield started
    for session in started:
        session.child.close(force=True)


def start(sessions: list[Session], cwd: Path, env: dict[str, str], *args: str) -> Session:
    session = Session(cwd, env, *args)
    sessions.append(session)
    return session


def test_answers_on_a_terminal_become_a_checked_config_and_a_private_env_file(
    tmp_path: Path, feishu: FakeFeishu, dingtalk: FakeDingTalk, sessions: list[Session]
) -> None:
    env = {"GATEWAY_CHANNELS__DINGTALK__OPENAPI_ENDPOINT": dingtalk.url}
    init = start(sessions, tmp_path, env)
    init.answer("Channels (webchat, feishu, dingtalk) [webchat]:", "feishu, dingtalk webchat")
    init.answer("Feishu or Lark", feishu.url)  # a private deployment's origin
    init.answer("Feishu app_id:", "cli_a1b2c3d4e5f60708")
    init.answer("Feishu app_secret (not shown as you type):", "feishu-secret-0042")
    init.child.expect_exact("Feishu accepted the App ID and App Secret")
    init.answer("Feishu approvers", "ou_boss, ou_deputy")
    init.answer("Who may talk to the Feishu bot", "")  # the default: everyone
    init.answer("DingTalk client_id:", "dingabcdef123")
    init.answer("DingTalk client_secret (not shown as you type):", "ding-secret-0042")
    init.child.expect_exact("DingTalk accepted the Client ID and Client Secret")
    init.answer("DingTalk approvers", "manager1")
    init.answer("Who may talk to the DingTalk bot", "manager1 staff2")
    init.answer("Web chat approvers", "alice")
    init.answer("Data directory", str(tmp_path / "state"))
    assert init.finish() == 0, init.transcript

    # The platforms were asked, with what was typed.
    [asked] = feishu.requests_for("token")
    assert asked.body == {"app_id": "cli_a1b2c3d4e5f60708", "app_secret": "feishu-secret-0042"}
    [asked] = dingtalk.requests("/v1.0/oauth2/accessToken")
    assert asked.body == {"appKey": "dingabcdef123", "appSecret": "ding-secret-0042"}
    # Secrets were read without echo; the screen shows the token once, and the next command.
    assert "feishu-secret-0042" not in init.transcript
    assert "ding-secret-0042" not in init.transcript
    token = re.search(r"admin token \(shown this once[^)]*\): (\S+)", init.transcript)
    assert token is not None, init.transcript
    assert init.transcript.count(token[1]) == 1
    assert "next: set -a; . ./gateway.env; set +a; gateway serve" in init.transcript
    assert "docs/feishu.md, step 3" in init.transcript

    config = tomllib.loads((tmp_path / "gateway.toml").read_text(encoding="utf-8"))
    assert config["data_dir"] == str(tmp_path / "state")
    fs = config["channels"]["feishu"]
    assert (fs["app_id"], fs["domain"]) == ("cli_a1b2c3d4e5f60708", feishu.url)
    assert (fs["approvers"], fs["allow_from"]) == (["ou_boss", "ou_deputy"], ["*"])
    dt = config["channels"]["dingtalk"]
    assert (dt["client_id"], dt["approvers"]) == ("dingabcdef123", ["manager1"])
    assert dt["allow_from"] == ["manager1", "staff2"]
    assert config["channels"]["webchat"]["approvers"] == ["alice"]
    assert "app_secret" not in fs and "client_secret" not in dt  # secrets stay out of it

    env_file = tmp_path / "gateway.env"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert "GATEWAY_CHANNELS__FEISHU__APP_SECRET=feishu-secret-0042\n" in env_file.read_text()
    assert "GATEWAY_CHANNELS__DINGTALK__CLIENT_SECRET=ding-secret-0042\n" in env_file.read_text()
    assert f"GATEWAY_ADMIN__TOKEN={token[1]}\n" in env_file.read_text()

    # The printed command, with check-config for serve, finds nothing to fix.
    checked = subprocess.run(
        [
            "bash",
            "-c",
            f'set -a; . ./gateway.env; set +a; "{sys.executable}" -m gateway check-config',
        ],
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
        | {"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert checked.returncode == 0, checked.stderr
    assert "configuration OK" in checked.stderr
    assert "admin.token is not set" not in checked.stderr
    assert "answers nobody" not in checked.stderr


def test_a_refused_secret_is_asked_again(
    tmp_path: Path, feishu: FakeFeishu, dingtalk: FakeDingTalk, sessions: list[Session]
) -> None:
    env = {
        "GATEWAY_CHANNELS__FEISHU__DOMAIN": feishu.url,  # the question's default
        "GATEWAY_CHANNELS__DINGTALK__OPENAPI_ENDPOINT": dingtalk.url,
    }
    init = start(sessions, tmp_path, env, "--channel", "feishu", "--channel", "dingtalk")
    init.answer("Channels (webchat, feishu, dingtalk) [feishu, dingtalk]:", "")
    init.answer(
        f"Feishu or Lark (feishu, lark, or the https:// origin of a private "
        f"deployment) [{feishu.url}]:",
        "",
    )
    init.answer("Feishu app_id:", "cli_xxxxxxxxxxxxxxxx")
    init.child.expect_exact("that is a placeholder: copy the real id from the console")
    init.answer("Feishu app_id:", "cli_a1b2c3d4e5f60708")
    init.answer("Feishu app_secret", "not-the-secret")
    init.child.expect_exact(
        "Feishu refused them: app secret invalid (code 10014); enter them again (Ctrl-C stops)"
    )
    init.answer("Feishu app_id [cli_a1b2c3d4e5f60708]:", "")
    init.answer("Feishu app_secret", "feishu-secret-0042")
    init.child.expect_exact("Feishu accepted")
    init.answer("Feishu approvers", "")
    init.answer("Who may talk to the Feishu bot", "")
    init.answer("DingTalk client_id:", "dingabcdef123")
    init.answer("DingTalk client_secret", "wrong")
    init.child.expect_exact(
        "DingTalk refused them: 无效的clientId或clientSecret (invalidClientIdOrSecret); "
        "enter them again"
    )
    init.answer("DingTalk client_id [dingabcdef123]:", "")
    init.answer("DingTalk client_secret", "ding-secret-0042")
    init.child.expect_exact("DingTalk accepted")
    init.answer("DingTalk approvers", "")
    init.answer("Who may talk to the DingTalk bot", "*")
    init.answer("Data directory", "")
    assert init.finish() == 0, init.transcript
    assert [r.code for r in feishu.requests_for("token")] == [10014, 0]
    env_text = (tmp_path / "gateway.env").read_text()
    assert "APP_SECRET=feishu-secret-0042\n" in env_text
    assert "CLIENT_SECRET=ding-secret-0042\n" in env_text
    config = tomllib.loads((tmp_path / "gateway.toml").read_text(encoding="utf-8"))
    assert config["channels"]["webchat"]["enabled"] is False
    assert config["data_dir"] == str(tmp_path / "data")  # the --data-dir default, absolute


def test_an_unreachable_platform_is_not_checked_and_ctrl_c_writes_nothing(
    tmp_path: Path, sessions: list[Session]
) -> None:
    closed = "http://127.0.0.1:9"  # discard port: nothing listens there
    env = {"GATEWAY_CHANNELS__DINGTALK__OPENAPI_ENDPOINT": closed}
    init = start(sessions, tmp_path, env)
    init.answer("Channels", "dingtalk")
    init.answer("DingTalk client_id:", "dingabcdef123")
    init.answer("DingTalk client_secret", "ding-secret-0042")
    init.child.expect_exact(f"not checked: {closed} could not be reached")
    init.child.expect_exact("`gateway serve` will try them")
    init.child.expect_exact("DingTalk approvers")
    wait_reading_input(init.child.pid)  # not while the prompt is still being printed
    init.child.sendintr()
    init.child.expect_exact("stopped; nothing was written")
    assert init.finish() == 130
    assert list(tmp_path.iterdir()) == []


def test_existing_files_are_kept_and_no_input_writes_the_template(
    tmp_path: Path, sessions: list[Session]
) -> None:
    (tmp_path / "gateway.env").write_text("GATEWAY_ADMIN__TOKEN=mine\n")
    init = start(sessions, tmp_path, {})
    init.child.expect_exact("gateway.env exists; pass --force to overwrite it")
    assert init.finish() == 1
    assert not (tmp_path / "gateway.toml").exists()
    # --no-input on a terminal: today's template, no questions, the env file untouched
    plain = start(sessions, tmp_path, {}, "--no-input", "--channel", "feishu")
    plain.child.expect_exact("next: set the secrets it names")
    assert plain.finish() == 0
    assert "Channels" not in plain.transcript
    text = (tmp_path / "gateway.toml").read_text(encoding="utf-8")
    assert 'app_id = "cli_xxxxxxxxxxxxxxxx"' in text
    assert (tmp_path / "gateway.env").read_text() == "GATEWAY_ADMIN__TOKEN=mine\n"
