"""``gateway check-config`` runs serve's start-up checks, and reports what serve only warns of."""

from __future__ import annotations

import json
from pathlib import Path

from config.checks import environment_problems
from tests.cli.support import ROOT, gateway

TOKEN = "check-config-token-0123456789abcdef"


def problems_of(out_stderr: str) -> list[str]:
    """The listed problems; a problem's further lines are indented under its dash."""
    _, _, listed = out_stderr.partition("problems:\n")
    problems: list[str] = []
    for line in listed.splitlines():
        if line.startswith("  - "):
            problems.append(line.removeprefix("  - "))
        elif line.startswith("    ") and problems:
            problems[-1] += "\n" + line.removeprefix("    ")
    return problems


def test_a_fresh_machine_is_ok_and_warns_the_admin_api_has_no_token(tmp_path: Path) -> None:
    out = gateway("check-config", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "configuration OK" in out.stderr
    assert "warning: admin.token is not set" in out.stderr
    assert json.loads(out.stdout)["server"]["allowed_hosts"] == ["localhost", "127.0.0.1", "::1"]


def test_the_admin_api_exposed_without_a_token(tmp_path: Path) -> None:
    out = gateway("check-config", cwd=tmp_path, env={"GATEWAY_SERVER__HOST": "0.0.0.0"})
    assert out.returncode == 2
    [problem] = problems_of(out.stderr)
    assert "admin.token is not set" in problem
    assert "secrets.token_urlsafe(32)" in problem


def test_a_public_host_name_without_a_strong_token(tmp_path: Path) -> None:
    """Behind a reverse proxy the gateway binds loopback, yet the admin API is public."""
    public = {"GATEWAY_SERVER__ALLOWED_HOSTS": '["localhost", "chat.example.com"]'}
    for weak in ({}, {"GATEWAY_ADMIN__TOKEN": "token"}):
        out = gateway("check-config", cwd=tmp_path, env={**public, **weak})
        assert out.returncode == 2
        [problem] = problems_of(out.stderr)
        assert "'chat.example.com'" in problem
        assert "at least 32 characters" in problem
    out = gateway("check-config", cwd=tmp_path, env={**public, "GATEWAY_ADMIN__TOKEN": TOKEN})
    assert out.returncode == 0, out.stderr


def test_any_host_allowed_without_a_token(tmp_path: Path) -> None:
    out = gateway("check-config", cwd=tmp_path, env={"GATEWAY_SERVER__ALLOWED_HOSTS": '["*"]'})
    assert out.returncode == 2
    [problem] = problems_of(out.stderr)
    assert "DNS" in problem
    out = gateway(
        "check-config",
        cwd=tmp_path,
        env={"GATEWAY_SERVER__ALLOWED_HOSTS": '["*"]', "GATEWAY_ADMIN__TOKEN": TOKEN},
    )
    assert out.returncode == 0, out.stderr


def test_unknown_variables_name_the_nearest_setting(tmp_path: Path) -> None:
    env = {
        "GATEWAY_CONFIRMATON__STORE": "memory",  # a misspelt section: ignored by serve
        "GATEWAY_ADMIN_TOKEN": TOKEN,  # one underscore where two belong
        "GATEWAY_CONFIRMATION__TIMEOUT_SECS": "5",  # a misspelt key: refused by serve too
    }
    out = gateway("check-config", cwd=tmp_path, env=env)
    assert out.returncode == 2
    problems = problems_of(out.stderr)
    assert (
        "GATEWAY_CONFIRMATON__STORE is not a setting: did you mean GATEWAY_CONFIRMATION__STORE?"
        in problems
    )
    assert "GATEWAY_ADMIN_TOKEN is not a setting: did you mean GATEWAY_ADMIN__TOKEN?" in problems
    assert (
        "GATEWAY_CONFIRMATION__TIMEOUT_SECS is not a setting: "
        "did you mean GATEWAY_CONFIRMATION__TIMEOUT_SECONDS?" in problems
    )


def test_a_malformed_list_shows_the_syntax_that_works(tmp_path: Path) -> None:
    out = gateway(
        "check-config",
        cwd=tmp_path,
        env={"GATEWAY_CHANNELS__FEISHU__ALLOW_FROM": "ou_1, ou_2"},
    )
    assert out.returncode == 2
    [problem] = problems_of(out.stderr)
    assert problem.startswith("GATEWAY_CHANNELS__FEISHU__ALLOW_FROM must be a JSON list")
    assert """GATEWAY_CHANNELS__FEISHU__ALLOW_FROM='["ou_1","ou_2"]'""" in problem


def test_the_start_up_checks_of_serve_are_run(tmp_path: Path) -> None:
    env = {
        "GATEWAY_TOOLS__SQL__URL": "mysql://root@127.0.0.1/test",
        "GATEWAY_LLM__MODEL": "gpt-x",
    }
    out = gateway("check-config", cwd=tmp_path, env=env, missing=("openai",))
    assert out.returncode == 2
    problems = problems_of(out.stderr)
    assert len(problems) == 2, problems
    assert "mysql+aiomysql://" in problems[0]
    assert f" -m pip install -e '{ROOT}[llm]'" in problems[1]


def test_redis_down_is_reported(tmp_path: Path) -> None:
    env = {
        "GATEWAY_CONFIRMATION__STORE": "redis",
        "GATEWAY_CONFIRMATION__REDIS_URL": "redis://127.0.0.1:1/0",
    }
    out = gateway("check-config", cwd=tmp_path, env=env)
    assert out.returncode == 2
    [problem] = problems_of(out.stderr)
    assert "Redis at redis://127.0.0.1:1/0 cannot be used" in problem


def test_variables_under_a_table_setting_and_whole_sections_are_known() -> None:
    unknown, malformed = environment_problems(
        {
            "GATEWAY_POLICY__LEVELS__SQL_MODIFY": "deny",
            "GATEWAY_SERVER": '{"port": 9000}',
            "GATEWAY_LOG": "debug",
            "GATEWAY_TEST_REQUIRE_SERVICES": "1",
            "HOME": "/root",
        }
    )
    assert unknown == []
    assert malformed == [
        "GATEWAY_LOG must be a JSON table, e.g. GATEWAY_LOG='{\"key\": \"value\"}' (got 'debug')"
    ]


def test_feishu_webhook_mode_needs_the_encrypt_key(tmp_path: Path) -> None:
    # Issue 22: the verification token alone let anyone who had it forge a card click.
    env = {
        "GATEWAY_CHANNELS__FEISHU__ENABLED": "true",
        "GATEWAY_CHANNELS__FEISHU__MODE": "webhook",
        "GATEWAY_CHANNELS__FEISHU__APP_ID": "cli_x",
        "GATEWAY_CHANNELS__FEISHU__APP_SECRET": "s",
        "GATEWAY_CHANNELS__FEISHU__ALLOW_FROM": '["*"]',
        "GATEWAY_CHANNELS__FEISHU__VERIFICATION_TOKEN": "t",
    }
    out = gateway("check-config", cwd=tmp_path, env=env)
    assert out.returncode == 2
    [problem] = problems_of(out.stderr)
    assert "encrypt_key" in problem
    assert "GATEWAY_CHANNELS__FEISHU__ENCRYPT_KEY" in problem
    env["GATEWAY_CHANNELS__FEISHU__ENCRYPT_KEY"] = "k"
    assert gateway("check-config", cwd=tmp_path, env=env).returncode == 0


# ---------------------------------------------------------------------- issue 26


def test_placeholders_are_not_configuration_ok(tmp_path: Path) -> None:
    """What `gateway init`'s template and the docs' examples write is reported, not OK."""
    cfg = tmp_path / "gateway.toml"
    cfg.write_text(
        "[channels.dingtalk]\nenabled = true\n"
        'client_id = "dingxxxxxxxxxxxxxxxx"\nallow_from = ["*"]\napprovers = ["<staff id>"]\n'
        "[channels.feishu]\nenabled = false\n"
        # a channel that is off: its settings are not in force, and not reported
        'app_id = "cli_xxxxxxxxxxxxxxxx"\n',
        encoding="utf-8",
    )
    env = {
        "GATEWAY_CHANNELS__DINGTALK__CLIENT_SECRET": "changeme",
        "GATEWAY_ADMIN__TOKEN": "xxx",
    }
    out = gateway("check-config", cwd=tmp_path, env=env)
    assert out.returncode == 2
    assert "configuration OK" not in out.stderr
    assert problems_of(out.stderr) == [
        "admin.token is not configured: environment variable GATEWAY_ADMIN__TOKEN holds a "
        "placeholder: set the real value there",
        f'channels.dingtalk.approvers is not configured: {cfg} has the placeholder "<staff id>"'
        ": set the real value there (or in GATEWAY_CHANNELS__DINGTALK__APPROVERS)",
        f"channels.dingtalk.client_id is not configured: {cfg} has the placeholder "
        '"dingxxxxxxxxxxxxxxxx": set the real value there (or in '
        "GATEWAY_CHANNELS__DINGTALK__CLIENT_ID)",
        "channels.dingtalk.client_secret is not configured: environment variable "
        "GATEWAY_CHANNELS__DINGTALK__CLIENT_SECRET holds a placeholder: set the real value there",
    ]
    real = {
        "GATEWAY_CHANNELS__DINGTALK__CLIENT_ID": "dingabcdef123",
        "GATEWAY_CHANNELS__DINGTALK__CLIENT_SECRET": "Kq3-real-secret",
        "GATEWAY_CHANNELS__DINGTALK__APPROVERS": '["manager1"]',
        "GATEWAY_ADMIN__TOKEN": TOKEN,
    }
    fixed = gateway("check-config", cwd=tmp_path, env=real)
    assert fixed.returncode == 0, fixed.stderr
    assert "configuration OK" in fixed.stderr


def test_a_bad_value_names_its_source_file_or_variable(tmp_path: Path) -> None:
    cfg = tmp_path / "gateway.toml"
    cfg.write_text("[confirmation]\ntimeout_seconds = -1\n[server]\nport = 8080\n")
    out = gateway("check-config", cwd=tmp_path, env={"GATEWAY_SERVER__PORT": "99999"})
    assert out.returncode == 2
    [problem] = problems_of(out.stderr)
    lines = [line.strip() for line in problem.splitlines()]
    assert lines == [
        "invalid configuration:",
        "server.port: Input should be less than or equal to 65535 (got '99999' from environment "
        "variable GATEWAY_SERVER__PORT); change or unset that variable",
        f"confirmation.timeout_seconds: Input should be greater than 0 (got -1 in {cfg}); change "
        "[confirmation] timeout_seconds there (or set GATEWAY_CONFIRMATION__TIMEOUT_SECONDS)",
    ]
    assert "gateway.toml" not in lines[1]  # the variable's value is not blamed on the file


def test_a_misspelt_key_gets_the_nearest_one(tmp_path: Path) -> None:
    cfg = tmp_path / "g.toml"
    cfg.write_text("[confirmaton]\nstore = 'memory'\n[llm]\ntimeout_secs = 5\n")
    out = gateway("check-config", "--config", str(cfg), cwd=tmp_path)
    assert out.returncode == 2
    [problem] = problems_of(out.stderr)
    assert f"llm.timeout_secs: unknown setting in {cfg}; did you mean `timeout_seconds`?" in (
        problem
    )
    assert f"confirmaton: unknown setting in {cfg}; did you mean `confirmation`?" in problem
    out = gateway("check-config", cwd=tmp_path, env={"GATEWAY_LLM__MAX_STEP": "3"})
    assert (
        "llm.max_step: unknown setting from environment variable GATEWAY_LLM__MAX_STEP; "
        "did you mean GATEWAY_LLM__MAX_STEPS?"
    ) in out.stderr


def test_reminder_and_escalation_keys_are_known_and_warned_of_when_they_cannot_work(
    tmp_path: Path,
) -> None:
    """``[confirmation] remind_before_seconds`` / ``escalate_after_seconds`` and a channel's
    ``escalation_chat`` (gateway/confirm/nudges.py): read, shown, and warned of when they
    could never take effect."""
    env = {
        "GATEWAY_CONFIRMATION__TIMEOUT_SECONDS": "60",
        "GATEWAY_CONFIRMATION__REMIND_BEFORE_SECONDS": "90",
        "GATEWAY_CONFIRMATION__ESCALATE_AFTER_SECONDS": "120",
        "GATEWAY_CHANNELS__FEISHU__ESCALATION_CHAT": "oc_oncall",
    }
    out = gateway("check-config", cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    shown = json.loads(out.stdout)
    assert shown["confirmation"]["remind_before_seconds"] == 90
    assert shown["confirmation"]["escalate_after_seconds"] == 120
    assert shown["channels"]["feishu"]["escalation_chat"] == "oc_oncall"
    assert "warning: confirmation.remind_before_seconds (90) is not less than" in out.stderr
    assert "calls expire before they are escalated" in out.stderr
    assert "no enabled Feishu or DingTalk channel has approvers" in out.stderr  # feishu is off

    out = gateway("check-config", cwd=tmp_path)  # the defaults: a reminder, no escalation
    assert json.loads(out.stdout)["confirmation"]["remind_before_seconds"] == 60
    assert "remind_before_seconds" not in out.stderr and "escalat" not in out.stderr

    bad = gateway(
        "check-config", cwd=tmp_path, env={"GATEWAY_CONFIRMATION__REMIND_BEFORE_SECONDS": "-1"}
    )
    assert bad.returncode != 0
    assert "remind_before_seconds" in bad.stderr
