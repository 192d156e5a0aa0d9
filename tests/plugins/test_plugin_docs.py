"""docs/plugins.md, run as written: the example module on PYTHONPATH is found, one that is
not is named in one line with the fix, and the tools run under the policy (issue 16)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.bus import OutboundKind
from tests.agent.conftest import GatewayFactory, say
from tests.cli.support import ROOT
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls

DOC = (ROOT / "docs" / "plugins.md").read_text(encoding="utf-8")
EXAMPLE = ROOT / "docs" / "examples" / "acme_tools.py"


GATEWAY = Path(sys.executable).parent / "gateway"


def gateway(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The installed ``gateway`` command, as an operator runs it (``python -c`` would add the
    working directory to the import path, which the real command does not)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    clean |= {"GATEWAY_DATA_DIR": str(cwd / "data"), "NO_PROXY": "127.0.0.1,localhost"}
    clean.pop("PYTHONPATH", None)
    return subprocess.run(
        [str(GATEWAY), *args],
        cwd=cwd,
        env=clean | (env or {}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def plugin_dir(tmp_path: Path) -> Path:
    """The doc's step 1: the file in a directory of its own, listed in gateway.toml."""
    directory = tmp_path / "gateway-plugins"
    directory.mkdir()
    shutil.copy(EXAMPLE, directory / "acme_tools.py")
    (tmp_path / "gateway.toml").write_text('[tools]\nplugins = ["acme_tools"]\n', "utf-8")
    return directory


def test_the_doc_shows_the_example_as_it_is() -> None:
    block = re.search(r"```python\n(.*?)```", DOC, re.DOTALL)
    assert block is not None
    assert block.group(1).strip() in EXAMPLE.read_text(encoding="utf-8")


def test_a_module_off_the_import_path_is_named_with_the_fix(
    tmp_path: Path, plugin_dir: Path
) -> None:
    # Not even a copy next to gateway.toml is found: the working directory is not searched.
    shutil.copy(EXAMPLE, tmp_path / "acme_tools.py")
    out = gateway("serve", "--port", "0", cwd=tmp_path, env={"GATEWAY_LOG__LEVEL": "warning"})
    assert out.returncode == 2
    documented = re.search(r"^configuration error: tools\.plugins.*$", DOC, re.MULTILINE)
    assert documented is not None
    assert out.stderr.strip() == documented.group(0)
    checked = gateway("check-config", cwd=tmp_path)
    assert checked.returncode == 2
    assert "put the directory that holds it on PYTHONPATH" in checked.stderr


def test_on_pythonpath_it_loads_and_the_policy_holds_refund(
    tmp_path: Path, plugin_dir: Path
) -> None:
    env = {"PYTHONPATH": str(plugin_dir)}
    checked = gateway("check-config", cwd=tmp_path, env=env)
    assert checked.returncode == 0, checked.stderr
    assert "configuration OK" in checked.stderr
    status = gateway("policy", "test", "order_status", '{"order_id": 7}', cwd=tmp_path, env=env)
    assert status.returncode == 0, status.stderr
    assert re.search(r"^level:\s+auto$", status.stdout, re.MULTILINE), status.stdout
    refund = gateway(
        "policy", "test", "refund", '{"order_id": 7, "amount": 120}', cwd=tmp_path, env=env
    )
    assert refund.returncode == 0, refund.stderr
    assert re.search(r"^level:\s+confirm$", refund.stdout, re.MULTILINE), refund.stdout
    assert re.search(r"^risk:\s+high", refund.stdout, re.MULTILINE), refund.stdout


async def test_the_model_refunds_after_approval(
    plugin_dir: Path,
    start_gateway: GatewayFactory,
    fake_llm: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The doc's step 3: "refund 120 on order 7", a card, approve, the model gets the result."""
    monkeypatch.syspath_prepend(str(plugin_dir))
    monkeypatch.delitem(sys.modules, "acme_tools", raising=False)
    fake_llm.script(
        tool_calls(("refund", {"order_id": 7, "amount": 120})),
        text("已退款 / refunded"),
    )
    gw, chat = await start_gateway(tools={"plugins": ["acme_tools"]})
    await say(gw, "refund 120 on order 7")
    prompt = await chat.wait_prompt()
    assert prompt.tool_call.name == "refund"
    assert prompt.risk.value == "high"
    await say(gw, "确认")
    await chat.wait_text("已退款")
    result = list(fake_llm.requests[1].tool_results().values())
    assert result == ["refunded 120.00 CNY on order 7"]
    assert any(m.kind is OutboundKind.CONFIRMATION for m in chat.sent)
