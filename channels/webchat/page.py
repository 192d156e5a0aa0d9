"""The web chat page: the page.html template filled with its words from gateway/texts
(rendered once), with autoescape like the /admin page."""

from __future__ import annotations

from pathlib import Path

import jinja2

from gateway import texts
from gateway.texts.labels import label_functions


def render_page() -> str:
    """The page with every label in place and the script's lines as JSON."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).resolve().parent),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    env.policies["json.dumps_kwargs"] = {"ensure_ascii": False}
    env.globals.update(label_functions(texts.WEBCHAT_LABELS))
    # tojson escapes <, > and & inside the JSON: nothing in it can end the <script> early.
    return env.get_template("page.html").render(script_texts=texts.WEBCHAT_SCRIPT)
