"""Optional dependencies: name the extra to install when a configured feature needs one.

The default install runs the embedded defaults only; platform SDKs, database drivers and
the model client come with extras (``pip install -e '.[feishu]'`` in the checkout). Start-up
calls ``require`` for each feature the settings turn on, so a missing package is one line
that says what to install instead of a traceback from deep inside an import.

The project is on no package index: the hint installs the extra from where this install
came from (the checkout or the wheel, PEP 610's direct_url.json), never by name.
"""

from __future__ import annotations

import importlib
import json
import shlex
import sys
from importlib import metadata
from urllib.parse import unquote, urlparse

from config.settings import ConfigError, Settings

# The distribution: a name nobody else publishes under (the project is on no index).
DISTRIBUTION = "held-call-gateway"


def install_command(extra: str) -> str:
    """The pip command that adds ``extra`` to this environment from this install's source."""
    pip = f"{shlex.quote(sys.executable)} -m pip install"
    # The first with a record: in the checkout an editable build's egg-info comes first.
    records = (d.read_text("direct_url.json") for d in metadata.distributions(name=DISTRIBUTION))
    try:
        origin = json.loads(next((r for r in records if r), "{}"))
    except ValueError:
        origin = {}
    url = urlparse(str(origin.get("url", "")))
    if url.scheme != "file":  # run from a checkout on PYTHONPATH, or installed some other way
        return f"pip install '.[{extra}]' in the checkout (docs/deploy.md, \"Install\")"
    source = shlex.quote(f"{unquote(url.path)}[{extra}]")
    editable = bool(origin.get("dir_info", {}).get("editable"))
    return f"{pip} -e {source}" if editable else f"{pip} {source}"


def require(module: str, extra: str, what: str) -> None:
    """Import ``module``, or raise ConfigError saying which extra provides it.

    ``what`` names the feature in the settings' words, e.g.
    ``require("lark_oapi", "feishu", "channels.feishu")``.
    """
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        # Also when the module is there but one of its own dependencies is not (a partial
        # install): installing the extra again brings both.
        raise ConfigError(f"{what} needs the [{extra}] extra: {install_command(extra)}") from exc


# The driver module each async SQLAlchemy URL needs, and the extra that brings it.
SQL_DRIVER_EXTRAS = {"asyncpg": ("asyncpg", "postgres"), "aiomysql": ("aiomysql", "mysql")}


def required(settings: Settings) -> list[tuple[str, str, str]]:
    """(module, extra, what) for every optional package the settings turn on."""
    needs: list[tuple[str, str, str]] = []
    if settings.channels.feishu.enabled:
        # Through the channel, which imports lark-oapi module by module: `import lark_oapi`
        # itself loads the whole SDK (bench/startup.py feishu: 3.1 s more to ready without).
        needs.append(("channels.feishu.api", "feishu", "channels.feishu"))
    if settings.channels.dingtalk.enabled:
        needs.append(("dingtalk_stream", "dingtalk", "channels.dingtalk"))
    if settings.confirmation.store == "redis":
        needs.append(("redis", "redis", 'confirmation.store = "redis"'))
    if settings.llm.configured:
        needs.append(("openai", "llm", "llm.model"))
    scheme = (settings.tools.sql.url or "").partition("://")[0].lower()
    driver = scheme.partition("+")[2]
    if driver in SQL_DRIVER_EXTRAS:
        module, extra = SQL_DRIVER_EXTRAS[driver]
        needs.append((module, extra, f"tools.sql.url ({scheme}://)"))
    return needs


def missing(settings: Settings) -> list[str]:
    """One sentence per optional package the settings need and this install lacks."""
    problems = []
    for module, extra, what in required(settings):
        try:
            require(module, extra, what)
        except ConfigError as exc:
            problems.append(str(exc))
    return problems
