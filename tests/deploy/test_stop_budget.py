"""One stop budget, derived from the settings' defaults, everywhere a supervisor is told it.

A supervisor that kills before Gateway.stop() has had its time cuts running calls off
unrecorded; one that is told three different figures (as the unit, compose and the docs
once were) gets one of them wrong.
"""

from __future__ import annotations

import re

import pytest
import yaml

from config.settings import Settings
from gateway.stop_budget import stop_budget_seconds
from tests.deploy.kit import ROOT

BUDGET = stop_budget_seconds(Settings())
# Every file that tells a supervisor how long to wait, and the ways it can say so.
FILES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "Dockerfile",
    ROOT / "compose.yaml",
    ROOT / "deploy" / "gateway.service",
    ROOT / "config" / "gateway.example.toml",
]
FIGURES = {
    "systemd": r"TimeoutStopSec=(\d+)s",
    "compose": r"stop_grace_period: (\d+)s",
    "docker run": r"--stop-timeout[= ](\d+)",
    "docker stop": r"docker stop (?:-t|--time)[= ](\d+)",
    "prose": r"stop budget\W+(?:is\W+)?(\d+) s",
}


def figures(pattern: str) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for path in FILES:
        values = [int(v) for v in re.findall(pattern, path.read_text(encoding="utf-8"))]
        if values:
            found[str(path.relative_to(ROOT))] = values
    return found


def test_the_budget_covers_every_wait_of_a_stop() -> None:
    """Each second of stop_timeout_seconds, and of each channel's, is a second more."""
    base = Settings()
    longer = base.model_copy(
        update={
            "confirmation": base.confirmation.model_copy(
                update={"stop_timeout_seconds": base.confirmation.stop_timeout_seconds + 7}
            )
        }
    )
    assert stop_budget_seconds(longer) == BUDGET + 7
    channels = base.channels
    waits = (
        base.confirmation.stop_timeout_seconds
        + channels.feishu.stop_timeout_seconds
        + channels.dingtalk.stop_timeout_seconds
    )
    assert waits < BUDGET


@pytest.mark.parametrize("way", sorted(FIGURES))
def test_every_mention_carries_the_budget(way: str) -> None:
    found = figures(FIGURES[way])
    assert found, f"no {way} stop timeout is documented"
    assert {path: values for path, values in found.items() if set(values) != {BUDGET}} == {}


def test_the_unit_and_compose_use_the_budget() -> None:
    unit = (ROOT / "deploy" / "gateway.service").read_text(encoding="utf-8")
    assert re.findall(r"^TimeoutStopSec=(.*)$", unit, re.MULTILINE) == [f"{BUDGET}s"]
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))
    assert compose["services"]["gateway"]["stop_grace_period"] == f"{BUDGET}s"


def test_the_docs_state_it_once_where_the_others_link() -> None:
    deploy = (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    stopping = deploy.split("\n## Stopping\n", 1)[1].split("\n## ", 1)[0]
    assert f"**The stop budget is {BUDGET} s**" in stopping
    assert deploy.count("**The stop budget is") == 1
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "(docs/deploy.md#stopping)" in readme
    for path in ("Dockerfile", "compose.yaml", "deploy/gateway.service"):
        assert 'docs/deploy.md, "Stopping"' in (ROOT / path).read_text(encoding="utf-8"), path
