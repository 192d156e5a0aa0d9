"""docs/core-api.md names only what the code has.

Every ``from X import A, B`` line in its Python blocks is imported, and every backticked
``Name.attribute`` whose ``Name`` was imported there is looked up.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "core-api.md"
IMPORT = re.compile(r"^from ([\w.]+) import (\([^)]*\)|.+)$", re.MULTILINE)
DOTTED = re.compile(r"`([A-Z]\w*)\.(\w+)`")


def _imported() -> dict[str, object]:
    names: dict[str, object] = {}
    for module_name, listed in IMPORT.findall(DOC.read_text(encoding="utf-8")):
        module = importlib.import_module(module_name)
        for name in (n.strip() for n in listed.strip("()").split(",")):
            if not name:
                continue
            assert hasattr(module, name), f"docs/core-api.md: {module_name} has no {name}"
            names[name] = getattr(module, name)
    return names


def test_every_imported_name_exists() -> None:
    assert len(_imported()) >= 30  # the page still documents the core


def test_every_dotted_name_exists() -> None:
    names = _imported()
    checked = 0
    for owner, attribute in DOTTED.findall(DOC.read_text(encoding="utf-8")):
        if owner not in names:
            continue
        target = names[owner]
        fields = getattr(target, "__dataclass_fields__", {}) or getattr(target, "model_fields", {})
        assert hasattr(target, attribute) or attribute in fields, (
            f"docs/core-api.md: {owner}.{attribute} does not exist"
        )
        checked += 1
    assert checked >= 20
