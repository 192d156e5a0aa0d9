"""The package's import graph: no circle anywhere, and channels stay out of the judging.

Every ``import`` and ``from … import`` of ``gateway``, ``channels`` and ``config`` counts: at
module level, inside functions and under ``TYPE_CHECKING`` alike (a circle of annotations is
still two modules that cannot be read one without the other).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("gateway", "channels", "config")


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()

    def ours(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                deps.update(d for a in node.names if (d := ours(a.name)))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    package = name.split(".") if is_package else name.split(".")[:-1]
                    package = package[: len(package) - node.level + 1]
                    base = ".".join([*package, base] if base else package)
                for alias in node.names:
                    dep = ours(f"{base}.{alias.name}") or ours(base)
                    if dep:
                        deps.add(dep)
        deps.discard(name)
        graph[name] = deps
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, deps = work[-1]
            dep = next(deps, None)
            if dep is not None:
                if dep not in index:
                    index[dep] = low[dep] = len(index)
                    stack.append(dep)
                    on_stack.add(dep)
                    work.append((dep, iter(sorted(graph[dep]))))
                elif dep in on_stack:
                    low[node] = min(low[node], index[dep])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def test_no_import_circle() -> None:
    assert _circles(_graph()) == []


def test_the_check_finds_a_circle() -> None:
    """The check itself: a circle of three is reported, a chain is not."""
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


# What a channel may import of the approvals domain: the records and values, the card views
# the core hands it, its events, id parsing, and the service as the one entrance for
# decisions. Never what judges (grants, replies, the intercept, adoption, …).
CHANNEL_MAY_IMPORT = {
    "gateway.confirm.model",
    "gateway.confirm.views",
    "gateway.confirm.events",
    "gateway.confirm.ids",
    "gateway.confirm.service",
}


def test_channels_import_only_the_card_views_of_the_approvals_domain() -> None:
    graph = _graph()
    found = {
        f"{module} imports {dep}"
        for module, deps in graph.items()
        if module.startswith("channels.")
        for dep in deps
        if dep.startswith("gateway.confirm.") and dep not in CHANNEL_MAY_IMPORT
    }
    assert found == set()
