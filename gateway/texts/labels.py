"""Labels for templates: the (Chinese, English) pairs of gateway/texts as shown markup."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from markupsafe import Markup


def label_functions(labels: Mapping[str, tuple[str, str]]) -> dict[str, Callable[..., Any]]:
    """A template's ``bi`` and ``plain`` for its labels (gateway/texts): ``bi(key)`` is
    Chinese first with the English beside it, set apart; ``plain(key, sep)`` one string,
    for an attribute or a title. ``{name}`` fields are filled from keywords; all escaped."""

    def bi(key: str, **fields: object) -> Markup:
        zh, en = (part.format(**fields) for part in labels[key])
        return Markup('{} <span class="en">{}</span>').format(zh, en)

    def plain(key: str, sep: str = " ") -> str:
        return sep.join(labels[key])

    return {"bi": bi, "plain": plain}
