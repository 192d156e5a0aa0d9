"""Optional dependencies: name the extra to install when a configured feature needs one.

The default install runs the embedded defaults only; platform SDKs, database drivers and
the model client come with extras (``pip install 'chat-gateway[feishu]'``). Start-up calls
``require`` for each feature the settings turn on, so a missing package is one line that
says what to install instead of a traceback from deep inside an import.
"""

from __future__ import annotations

import importlib

from config.settings import ConfigError, Settings


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
        raise ConfigError(
            f"{what} needs the [{extra}] extra: pip install 'chat-gateway[{extra}]'"
        ) from exc


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
