"""``gateway serve`` with a dependency down or misconfigured: one line on stderr, exit 2.

Each used to print a 76-130 line traceback.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.support import ROOT, gateway

EXIT_CONFIG = 2
FEISHU = {
    "GATEWAY_CHANNELS__FEISHU__ENABLED": "true",
    "GATEWAY_CHANNELS__FEISHU__APP_ID": "cli_x",
    "GATEWAY_CHANNELS__FEISHU__APP_SECRET": "s",
    "GATEWAY_CHANNELS__FEISHU__ALLOW_FROM": '["*"]',
}
DINGTALK = {
    "GATEWAY_CHANNELS__DINGTALK__ENABLED": "true",
    "GATEWAY_CHANNELS__DINGTALK__CLIENT_ID": "ding_x",
    "GATEWAY_CHANNELS__DINGTALK__CLIENT_SECRET": "s",
    "GATEWAY_CHANNELS__DINGTALK__ALLOW_FROM": '["*"]',
}


def serve_fails_in_one_line(tmp_path: Path, **kw: object) -> str:
    out = gateway("serve", "--port", "0", cwd=tmp_path, **kw)  # type: ignore[arg-type]
    assert out.returncode == EXIT_CONFIG, out.stderr
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("configuration error: ")
    return lines[0]


def test_redis_down(tmp_path: Path) -> None:
    line = serve_fails_in_one_line(
        tmp_path,
        env={
            "GATEWAY_CONFIRMATION__STORE": "redis",
            "GATEWAY_CONFIRMATION__REDIS_URL": "redis://:hunter2@127.0.0.1:1/0",
        },
    )
    assert "Redis at redis://:***@127.0.0.1:1/0 cannot be used" in line
    assert "GATEWAY_CONFIRMATION__REDIS_URL" in line
    assert "hunter2" not in line


@pytest.mark.parametrize(
    ("url", "wanted"),
    [
        ("postgresql://gw@127.0.0.1/test", "postgresql+asyncpg://"),
        ("postgresql+psycopg2://gw@127.0.0.1/test", "postgresql+asyncpg://"),
        ("mysql://root@127.0.0.1/test", "mysql+aiomysql://"),
        ("mysql+pymysql://root@127.0.0.1/test", "mysql+aiomysql://"),
    ],
)
def test_a_sync_sql_driver(tmp_path: Path, url: str, wanted: str) -> None:
    line = serve_fails_in_one_line(tmp_path, env={"GATEWAY_TOOLS__SQL__URL": url})
    assert "synchronous driver" in line
    assert wanted in line
    assert "GATEWAY_TOOLS__SQL__URL" in line


def test_a_data_dir_that_cannot_be_written(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    line = serve_fails_in_one_line(
        tmp_path, env={"GATEWAY_DATA_DIR": str(tmp_path / "a-file" / "data")}
    )
    assert "a-file is not a directory" in line
    assert "GATEWAY_DATA_DIR" in line


@pytest.mark.parametrize(
    ("module", "extra", "env"),
    [
        ("lark_oapi", "feishu", FEISHU),
        ("dingtalk_stream", "dingtalk", DINGTALK),
        ("redis", "redis", {"GATEWAY_CONFIRMATION__STORE": "redis"}),
        ("openai", "llm", {"GATEWAY_LLM__MODEL": "gpt-x"}),
        ("asyncpg", "postgres", {"GATEWAY_TOOLS__SQL__URL": "postgresql+asyncpg://u@h/db"}),
        ("aiomysql", "mysql", {"GATEWAY_TOOLS__SQL__URL": "mysql+aiomysql://u@h/db"}),
    ],
)
def test_a_missing_extra(tmp_path: Path, module: str, extra: str, env: dict[str, str]) -> None:
    line = serve_fails_in_one_line(tmp_path, env=env, missing=(module,))
    # From this checkout, never by name from a package index (docs/deploy.md, "Install").
    assert f" -m pip install -e '{ROOT}[{extra}]'" in line


def test_a_malformed_list_in_the_environment(tmp_path: Path) -> None:
    line = serve_fails_in_one_line(
        tmp_path, env={**FEISHU, "GATEWAY_CHANNELS__FEISHU__ALLOW_FROM": "ou_1,ou_2"}
    )
    assert """GATEWAY_CHANNELS__FEISHU__ALLOW_FROM='["ou_1","ou_2"]'""" in line
