"""Start-up checks on settings and the environment: each problem as one fix-it sentence.

``gateway serve`` refuses to start on a problem; ``gateway check-config`` lists them all.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr

from config.settings import Settings, env_name, mask_url, value_source

# The Verification Token alone travels in every body: a request built from it would pass
# (a forged card click, issue 22). Only the Encrypt Key signs requests.
FEISHU_WEBHOOK_NEEDS_ENCRYPT_KEY = (
    "channels.feishu webhook mode needs encrypt_key, which signs every request (the"
    " verification token alone lets anyone who has it forge a card click): set an Encrypt"
    " Key in the Feishu console and GATEWAY_CHANNELS__FEISHU__ENCRYPT_KEY"
)


def check_channel_settings(settings: Settings) -> list[str]:
    """Problems with enabled channels that stop them from starting, as fix-it sentences."""
    problems: list[str] = []
    fs = settings.channels.feishu
    if fs.enabled:
        for key in ("app_id", "app_secret"):
            if not getattr(fs, key):
                problems.append(
                    f"channels.feishu.{key} is missing: set GATEWAY_CHANNELS__FEISHU__{key.upper()}"
                    f" or [channels.feishu] {key}"
                )
        if fs.mode == "webhook" and not fs.encrypt_key:
            problems.append(FEISHU_WEBHOOK_NEEDS_ENCRYPT_KEY)
    ds = settings.channels.dingtalk
    if ds.enabled:
        for key in ("client_id", "client_secret"):
            if not getattr(ds, key):
                problems.append(
                    f"channels.dingtalk.{key} is missing: set "
                    f"GATEWAY_CHANNELS__DINGTALK__{key.upper()} or [channels.dingtalk] {key}"
                )
    return problems


def channel_warnings(settings: Settings) -> list[str]:
    """Valid but probably unintended: the channel starts and answers nobody."""
    warnings: list[str] = []
    for name in ("feishu", "dingtalk"):
        ch = getattr(settings.channels, name)
        if ch.enabled and not ch.allow_from:
            warnings.append(
                f"channels.{name}.allow_from is empty, so the bot answers nobody: list user ids"
                f' or "*" (GATEWAY_CHANNELS__{name.upper()}__ALLOW_FROM=\'["*"]\')'
            )
    return warnings


def nudge_warnings(settings: Settings) -> list[str]:
    """Reminder and escalation settings that can never take effect (gateway/confirm/nudges.py)."""
    c = settings.confirmation
    warnings: list[str] = []
    if 0 < c.timeout_seconds <= c.remind_before_seconds:
        warnings.append(
            f"confirmation.remind_before_seconds ({c.remind_before_seconds:g}) is not less than"
            f" confirmation.timeout_seconds ({c.timeout_seconds:g}): no call is ever reminded"
            " (a call asked with a longer timeout still is); lower it, or 0 to turn it off"
        )
    if c.escalate_after_seconds > 0:
        if c.escalate_after_seconds >= c.timeout_seconds:
            warnings.append(
                f"confirmation.escalate_after_seconds ({c.escalate_after_seconds:g}) is not less"
                f" than confirmation.timeout_seconds ({c.timeout_seconds:g}): calls expire"
                " before they are escalated"
            )
        ch = settings.channels
        if not any(
            x.enabled and (x.approvers or x.escalation_chat) for x in (ch.feishu, ch.dingtalk)
        ):
            warnings.append(
                "confirmation.escalate_after_seconds is set but no enabled Feishu or DingTalk"
                " channel has approvers or an escalation_chat: an escalation only tells the"
                " chat that asked; set [channels.feishu] / [channels.dingtalk] approvers or"
                " escalation_chat"
            )
    return warnings


# A value written to be replaced: the ids `gateway init`'s template writes
# (cli_xxxxxxxxxxxxxxxx, dingxxxxxxxxxxxxxxxx), the docs' examples (ou_xxxxxxxx, cli_...,
# xxx), and the usual words for "fill me in".
_PLACEHOLDER = re.compile(
    r"(?:[a-z]{1,4}[-_]?)?(?:x{3,}|\.{3,}|…)|<[^<>]*>|your[-_ ].*|change[-_ ]?me|todo|fixme|"
    r"replace[-_ ]?me",
    re.IGNORECASE,
)
# Channels whose settings do not matter while they are off.
_SWITCHABLE = ("channels.webchat", "channels.feishu", "channels.dingtalk")


def is_placeholder(value: str) -> bool:
    """Whether ``value`` is a stand-in for the real one (``cli_xxxx``, ``changeme``, ``<id>``)."""
    return _PLACEHOLDER.fullmatch(value.strip()) is not None


def placeholder_problems(
    settings: Settings, *, toml_path: Path | None, environ: Mapping[str, str]
) -> list[str]:
    """Settings in force that still hold a placeholder, each naming where it was written.

    A secret's value is not repeated. Sections of a channel that is off are skipped.
    """
    problems: list[str] = []

    def walk(value: Any, loc: tuple[str, ...]) -> None:
        if isinstance(value, BaseModel):
            if ".".join(loc) in _SWITCHABLE and not getattr(value, "enabled", True):
                return
            for name in type(value).model_fields:
                walk(getattr(value, name), (*loc, name))
            return
        items = value if isinstance(value, list) else [value]
        for item in items:
            secret = isinstance(item, SecretStr)
            text = item.get_secret_value() if secret else item
            if isinstance(text, str) and is_placeholder(text):
                problems.append(_placeholder(loc, text, secret, toml_path, environ))
                return

    walk(settings, ())
    return problems


def _placeholder(
    loc: tuple[str, ...],
    text: str,
    secret: bool,
    toml_path: Path | None,
    environ: Mapping[str, str],
) -> str:
    key = ".".join(loc)
    source = value_source(loc, toml_path, environ)
    value = "a placeholder" if secret else f"the placeholder {json.dumps(text, ensure_ascii=False)}"
    if source is not None and source.variable:
        where = f"environment variable {source.variable} holds {value}: set the real value there"
    elif source is not None:
        where = f"{source.file} has {value}: set the real value there (or in {env_name(loc)})"
    else:
        where = f"it is {value}: set {env_name(loc)}"
    return f"{key} is not configured: {where}"


# ---------------------------------------------------------------------- start-up checks

ENV_PREFIX = "GATEWAY_"
# Variables of the tooling around the gateway, not settings.
ENV_NOT_SETTINGS = frozenset({"GATEWAY_TEST_REQUIRE_SERVICES"})
# SQLAlchemy dialects and the async driver to use with each.
ASYNC_SQL_URLS = {
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "mysql": "mysql+aiomysql",
    "mariadb": "mysql+aiomysql",
    "sqlite": "sqlite+aiosqlite",
}
ASYNC_SQL_DRIVERS = frozenset({"asyncpg", "psycopg", "aiomysql", "asyncmy", "aiosqlite"})


# Descriptors besides the web chat's connections: the stores' files or Redis connections,
# platform connections, webhooks and admin requests, the SQL tools' pool, the log.
OTHER_DESCRIPTORS = 256


def open_file_warnings(settings: Settings, soft_limit: int | None = None) -> list[str]:
    """The process's open-file limit below what the connection caps may use (issue 22: out
    of descriptors, /healthz, admin requests and webhooks time out). ``soft_limit``: this
    process's own (RLIMIT_NOFILE) when not given."""
    if soft_limit is None:
        try:
            import resource  # POSIX only
        except ImportError:
            return []
        soft_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft_limit < 0:  # RLIM_INFINITY
        return []
    webchat = settings.channels.webchat
    needed = OTHER_DESCRIPTORS
    if webchat.enabled:
        needed += webchat.max_sockets + webchat.max_long_polls
    if settings.confirmation.store == "redis":
        needed += settings.confirmation.redis_max_connections
    if soft_limit >= needed:
        return []
    return [
        f"the open-file limit is {soft_limit}, below the {needed} descriptors the connection "
        f"caps may use (channels.webchat.max_sockets + max_long_polls + {OTHER_DESCRIPTORS} "
        "for the rest): raise it (LimitNOFILE= in the systemd unit, ulimits nofile in "
        "compose, ulimit -n) or lower the caps"
    ]


def masked_url(url: str) -> str:
    """``url`` with its password replaced by ``***``, for messages and logs."""
    return mask_url(url)


def sql_url_problem(url: str | None) -> str | None:
    """A sync driver URL (``postgresql://``, ``mysql://``) is refused, naming the async one."""
    if not url:
        return None
    scheme = url.partition("://")[0].lower()
    dialect, _, driver = scheme.partition("+")
    if driver in ASYNC_SQL_DRIVERS or dialect not in ASYNC_SQL_URLS:
        return None  # another dialect: SQLAlchemy says what it thinks when it connects
    wanted = ASYNC_SQL_URLS[dialect]
    return (
        f"tools.sql.url uses {scheme}://, a synchronous driver the gateway cannot use: "
        f"write {wanted}://... in GATEWAY_TOOLS__SQL__URL (or [tools.sql] url)"
    )


def data_dir_problem(path: Path) -> str | None:
    """Whether ``data_dir`` is (or can be created as) a directory the gateway may write."""
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    why = None
    if not existing.is_dir():
        why = f"{existing} is not a directory"
    elif not os.access(existing, os.W_OK | os.X_OK):
        why = f"{existing} is not writable"
    if why is None:
        return None
    return (
        f"data_dir {path} cannot be used ({why}): set GATEWAY_DATA_DIR (or data_dir) to a "
        "directory the gateway may write"
    )


def _env_fields(model: type[BaseModel], prefix: str) -> Iterator[tuple[str, Any, bool]]:
    """Every settings variable name: (name, annotation, is_a_section)."""
    for name, field in model.model_fields.items():
        env = f"{prefix}{name.upper()}"
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            yield env, ann, True
            yield from _env_fields(ann, env + "__")
        else:
            yield env, ann, False


def environment_problems(environ: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """``GATEWAY_*`` variables that are not settings, and list/table values that are not JSON.

    Returns (unknown, malformed) as fix-it sentences. Unknown names come with the nearest
    valid name; malformed values with the syntax that works.
    """
    fields = {name: (ann, section) for name, ann, section in _env_fields(Settings, ENV_PREFIX)}
    # Variables under a table setting (policy.levels) name its keys: any name is fine.
    open_tables = [
        name + "__" for name, (ann, _) in fields.items() if typing.get_origin(ann) is dict
    ]
    unknown: list[str] = []
    malformed: list[str] = []
    for raw_name, value in sorted(environ.items()):
        name = raw_name.upper()
        if not name.startswith(ENV_PREFIX) or name in ENV_NOT_SETTINGS:
            continue
        if name not in fields:
            if not name.startswith(tuple(open_tables)):
                # Compared without the prefix every name shares, which would make all similar.
                bare = [field.removeprefix(ENV_PREFIX) for field in fields]
                near = difflib.get_close_matches(name.removeprefix(ENV_PREFIX), bare, n=1)
                hint = f": did you mean {ENV_PREFIX}{near[0]}?" if near else ""
                unknown.append(f"{raw_name} is not a setting{hint}")
            continue
        ann, section = fields[name]
        kind = "table" if section or typing.get_origin(ann) is dict else None
        if typing.get_origin(ann) is list:
            kind = "list"
        if kind is not None and not _is_json(value, list if kind == "list" else dict):
            malformed.append(_malformed(raw_name, value, kind))
    return unknown, malformed


def _is_json(value: str, kind: type) -> bool:
    try:
        return isinstance(json.loads(value), kind)
    except ValueError:
        return False


def _malformed(name: str, value: str, kind: str) -> str:
    if kind == "list":
        items = [item.strip().strip("'\"") for item in value.strip("[]").split(",")]
        example = json.dumps([i for i in items if i], ensure_ascii=False, separators=(",", ":"))
        return f"{name} must be a JSON list, e.g. {name}='{example}' (got {value[:80]!r})"
    return f'{name} must be a JSON table, e.g. {name}=\'{{"key": "value"}}\' (got {value[:80]!r})'
