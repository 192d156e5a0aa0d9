"""A preview of a Feishu card JSON 2.0 as HTML, for a screenshot in headless Chromium.

Feishu's client draws cards itself; this draws the same JSON — only the parts our
confirmation card uses (a coloured header, markdown with bold and code blocks, rows of
buttons) — close enough to show in the docs what a person sees. It is a preview, not
Feishu: the README says so beside the picture.
"""

from __future__ import annotations

import re
from html import escape
from typing import Any

# Feishu header templates -> colours (approximations of Feishu's palette).
_HEADERS = {
    "blue": "#3370ff",
    "yellow": "#f5b400",
    "orange": "#ff8800",
    "red": "#f54a45",
    "green": "#34c724",
    "grey": "#8f959e",
}
_BUTTONS = {
    "primary_filled": ("#3370ff", "#ffffff", "#3370ff"),
    "primary": ("#ffffff", "#3370ff", "#3370ff"),
    "danger": ("#ffffff", "#f54a45", "#f54a45"),
    "default": ("#ffffff", "#1f2329", "#d0d3d6"),
}
_CODE = re.compile(r"```[a-z]*\n(.*?)\n```", re.S)
_BOLD = re.compile(r"\*\*(.+?)\*\*")


def _markdown(text: str) -> str:
    parts: list[str] = []
    last = 0
    for block in _CODE.finditer(text):
        parts.append(_inline(text[last : block.start()]))
        parts.append(f"<pre>{escape(block.group(1))}</pre>")
        last = block.end()
    parts.append(_inline(text[last:]))
    return "".join(parts)


def _inline(text: str) -> str:
    return _BOLD.sub(r"<b>\1</b>", escape(text)).replace("\n", "<br>")


def _button(button: dict[str, Any]) -> str:
    bg, fg, border = _BUTTONS.get(button.get("type", "default"), _BUTTONS["default"])
    label = escape(button["text"]["content"])
    return (
        f'<button class="btn" style="background:{bg};color:{fg};border-color:{border}">'
        f"{label}</button>"
    )


def _element(el: dict[str, Any]) -> str:
    if el.get("tag") == "div" and el["text"].get("tag") == "plain_text":
        text = escape(str(el["text"]["content"]))
        if el.get("element_id") == "statement":
            return f"<pre>{text}</pre>"
        if el["text"].get("text_size") == "heading":
            return f'<div class="md"><b>{text}</b></div>'
        return f'<div class="md">{text.replace(chr(10), "<br>")}</div>'
    if el.get("tag") == "markdown":
        return f'<div class="md">{_markdown(str(el["content"]))}</div>'
    if el.get("tag") == "column_set":
        buttons = [b for col in el["columns"] for b in col["elements"] if b.get("tag") == "button"]
        return '<div class="row">' + "".join(_button(b) for b in buttons) + "</div>"
    raise ValueError(f"the preview does not draw {el.get('tag')!r} elements")


def card_html(card: dict[str, Any], *, caption: str) -> str:
    """A page holding the card (and a caption under it saying what it is)."""
    header = card["header"]
    colour = _HEADERS.get(header.get("template", "blue"), "#3370ff")
    body = "".join(_element(el) for el in card["body"]["elements"])
    return f"""<!doctype html>
<html lang="zh-CN"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body {{ margin: 0; padding: 12px; background: #f2f3f5;
  font-family: "PingFang SC", "WenQuanYi Micro Hei", "Noto Sans CJK SC", sans-serif; }}
.card {{ background: #fff; border-radius: 8px; overflow: hidden;
  box-shadow: 0 1px 3px rgba(0,0,0,.12); }}
.head {{ background: {colour}; color: #fff; padding: 10px 12px; font-weight: 600; }}
.body {{ padding: 4px 12px 12px; font-size: 14px; line-height: 1.5; color: #1f2329; }}
.md {{ margin: 8px 0; overflow-wrap: anywhere; }}
pre {{ background: #f5f6f7; padding: 6px 8px; border-radius: 4px; margin: 0;
  white-space: pre-wrap; font-size: 13px; }}
.row {{ display: flex; flex-wrap: wrap; gap: 8px; margin: 8px 0; }}
.btn {{ border: 1px solid; border-radius: 6px; padding: 6px 12px; font-size: 14px;
  font-family: inherit; }}
#shot {{ padding: 6px; background: #f2f3f5; }}
.caption {{ color: #646a73; font-size: 12px; margin-top: 8px; }}
</style></head>
<body><div id="shot"><div class="card"><div class="head">{escape(header["title"]["content"])}</div>
<div class="body">{body}</div></div>
<div class="caption">{escape(caption)}</div></div></body></html>
"""
