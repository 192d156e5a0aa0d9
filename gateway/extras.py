"""Optional dependencies: name the extra to install when a configured feature needs one.

The default install runs the embedded defaults only; platform SDKs, database drivers and
the model client come with extras (``pip install 'chat-gateway[feishu]'``). Start-up calls
``require`` for each feature the settings turn on, so a missing package is one line that
says what to install instead of a traceback from deep inside an import.
"""

from __future__ import annotations

import importlib

from config.settings import ConfigError


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
