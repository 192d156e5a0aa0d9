"""The web chat page: page.html filled with its words from gateway/texts (rendered once)."""

from __future__ import annotations

import html
import json
from pathlib import Path
from string import Template

from gateway import texts

TEMPLATE = Path(__file__).resolve().parent / "page.html"


def render_page() -> str:
    """The page with every label in place and the script's lines as JSON."""
    fill: dict[str, str] = {}
    for key, (zh, en) in texts.WEBCHAT_LABELS.items():
        fill[key] = f'{html.escape(zh)} <span class="en">{html.escape(en)}</span>'
        fill[f"{key}_plain"] = html.escape(f"{zh} / {en}")
    fill["title_plain"] = html.escape(" · ".join(texts.WEBCHAT_LABELS["title"]))
    # In a <script> element only "</" can end it early: escaped, the JSON reads the same.
    script = json.dumps(texts.WEBCHAT_SCRIPT, ensure_ascii=False)
    fill["script_texts"] = script.replace("</", "<\\/")
    return Template(TEMPLATE.read_text(encoding="utf-8")).substitute(fill)
