"""``gateway policy test TOOL 'JSON_ARGS'`` through the real CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.cli.main import main

CONFIG = """
data_dir = "{data_dir}"

[tools]
plugins = ["tests.plugins.sample_tools"]

[policy]
four_eyes_for_critical = true
levels = {{ add = "notify" }}

[[policy.rules]]
name = "no-drop"
tool = "sql_*"
sql = {{ kind = ["DROP", "TRUNCATE"] }}
level = "deny"

[[policy.rules]]
name = "delete-without-where"
tool = "sql_modify"
sql = {{ kind = "DELETE", where = false }}
level = "confirm"
risk = "critical"

[[policy.rules]]
name = "many-rows"
tool = "sql_modify"
sql = {{ kind = "DELETE", where = true, rows_affected = {{ gt = 2 }} }}
level = "manual"

[[policy.rules]]
name = "big-refund"
tool = "refund"
when = {{ amount = {{ gt = 1000 }} }}
level = "confirm"
risk = "high"
"""


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(CONFIG.format(data_dir=tmp_path / "data"), encoding="utf-8")
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_prints_level_risk_and_rule(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "-c", str(config), "policy", "test", "sql_modify", '{"sql": "DROP TABLE orders"}'
    )
    assert code == 0
    assert "level:     deny" in out
    assert "risk:      critical" in out
    assert "rule:      rule 'no-drop'" in out

    code, out, _ = run(
        capsys, "-c", str(config), "policy", "test", "sql_modify", '{"sql": "DELETE FROM t"}'
    )
    assert "level:     confirm" in out
    assert "rule:      rule 'delete-without-where'" in out
    assert "four-eyes: yes" in out


def test_row_counts_come_from_the_demo_database(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sql = '{"sql": "DELETE FROM orders WHERE status = %d"}'
    code, out, _ = run(capsys, "-c", str(config), "policy", "test", "sql_modify", sql % 1)
    assert code == 0
    assert "影响 3 行" in out
    assert "rule:      rule 'many-rows'" in out
    code, out, _ = run(capsys, "-c", str(config), "policy", "test", "sql_modify", sql % 2)
    assert "rule:      tool default (confirm)" in out


def test_json_output_for_plugin_tools(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "-c", str(config), "policy", "test", "refund",
        '{"order_id": 7, "amount": 5000}', "--json",
    )  # fmt: skip
    assert code == 0
    data = json.loads(out)
    assert data["level"] == "confirm"
    assert data["risk"] == "high"
    assert data["rule"] == "rule 'big-refund'"
    assert data["matched"] == ["rule 'big-refund'"]

    code, out, _ = run(capsys, "-c", str(config), "policy", "test", "add", '{"a":1,"b":2}')
    assert "level:     notify" in out
    assert "rule:      levels.add" in out


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["nope", "{}"], 2, "no tool named 'nope'"),
        (["add", "{not json"], 2, "not valid JSON"),
        (["add", "[1, 2]"], 2, "must be a JSON object"),
        (["add", '{"a": "x"}'], 2, "bad arguments for add"),
    ],
)
def test_usage_errors(
    config: Path, capsys: pytest.CaptureFixture[str], argv: list[str], code: int, message: str
) -> None:
    got, out, err = run(capsys, "-c", str(config), "policy", "test", *argv)
    assert got == code
    assert message in out + err


def test_unparseable_sql_is_refused_before_the_policy(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        capsys, "-c", str(config), "policy", "test", "sql_modify", '{"sql": "DELETE FROM"}'
    )
    assert code == 1
    assert "refused before the policy" in out
