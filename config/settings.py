"""Settings: a TOML file, then ``GATEWAY_*`` environment variables, then defaults.

Precedence (highest first): keyword arguments, environment (``GATEWAY_`` prefix, ``__`` for
nesting, e.g. ``GATEWAY_CONFIRMATION__TIMEOUT_SECONDS=30``), the TOML file (``--config PATH``
or ``./gateway.toml`` when present), then the defaults below, which run on a fresh machine.
"""

from __future__ import annotations

import difflib
import ipaddress
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from config.channel_settings import (
    ChannelsSettings,
)
from config.policy_settings import PolicySettings
from config.section import Section

PACKAGE_DIR = Path(__file__).resolve().parent
DEFAULT_KEYWORDS_FILE = PACKAGE_DIR / "keywords.toml"


LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


class ServerSettings(Section):
    """The one aiohttp server: web chat, admin API and platform webhooks."""

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    # Host header names answered (ports ignored); the bound host is added. Any other name
    # is refused with 421, so a page on another site cannot reach this server through a
    # DNS name that resolves to loopback (DNS rebinding). "*" allows any name.
    allowed_hosts: list[str] = Field(default_factory=lambda: list(LOOPBACK_NAMES))
    # Nesting allowed in a JSON request body: deeper input is a 400, never a RecursionError.
    max_json_depth: int = Field(default=64, ge=1, le=256)
    # A login proxy's header naming the signed-in person (e.g. X-Forwarded-User), honoured
    # only on requests from trusted_proxies (addresses or networks, e.g. 10.0.0.5, ::1/128).
    trusted_user_header: str | None = Field(default=None, min_length=1, max_length=100)
    trusted_proxies: list[str] = Field(default_factory=list)
    # Out of file descriptors, a failed accept of the listening socket is logged at most
    # once per this many seconds, with how many there were (http.accept_failed).
    accept_error_log_seconds: float = Field(default=60.0, gt=0)

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for item in value:
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise ValueError(
                    f"{item!r} is not an IP address or network (e.g. 10.0.0.5 or 10.0.0.0/24)"
                ) from None
        return value


class AdminSettings(Section):
    """Admin API access. A token is required when the server listens beyond loopback."""

    token: SecretStr | None = None
    # SSE keep-alive comments stop proxies from closing an idle event stream.
    sse_heartbeat_seconds: float = Field(default=15.0, gt=0)
    sse_queue_size: int = Field(default=1000, ge=1)
    # The /admin page's sign-in: how long a session lasts, how many may be open at once
    # (past it the oldest ends), and wrong logins allowed per client address per minute.
    session_hours: float = Field(default=12.0, gt=0)
    max_sessions: int = Field(default=1000, ge=1)
    login_attempts_per_minute: int = Field(default=5, ge=1)


class LogSettings(Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["auto", "console", "json"] = "auto"


class ConfirmationSettings(Section):
    """How tool calls are held for a person's decision."""

    timeout_seconds: float = Field(default=300.0, gt=0)
    on_other_message: Literal["reject_with_feedback", "cancel", "keep_pending"] = (
        "reject_with_feedback"
    )
    approvers: list[str] = Field(default_factory=list)
    max_unclear_replies: int = Field(default=3, ge=1)
    store: Literal["memory", "sqlite", "redis"] = "sqlite"
    redis_url: str = "redis://127.0.0.1:6379/0"
    # Replicas that share one bot must share the prefix; wrap it in braces for Redis Cluster.
    redis_prefix: str = Field(default="gateway:confirm", min_length=1)
    # How long decided confirmations stay readable in Redis (the audit trail is SQLite's job).
    redis_finished_ttl_seconds: float = Field(default=30 * 24 * 3600.0, gt=0)
    # A process that has not heartbeaten for this long is dead: others adopt its records.
    # It heartbeats every lease/3 seconds, so two missed beats are not yet death.
    lease_seconds: float = Field(default=15.0, gt=0)
    # SIGTERM lets running calls finish for this long; the rest are reported interrupted.
    # Part of the stop budget (gateway/stop_budget.py): raise the supervisor's with it.
    stop_timeout_seconds: float = Field(default=30.0, ge=0)
    # Connections per replica (the finished feed holds one); past it callers queue for up
    # to redis_pool_timeout_seconds, then the request fails closed (chat told, HTTP 503).
    redis_max_connections: int = Field(default=64, ge=2)
    redis_pool_timeout_seconds: float = Field(default=5.0, gt=0)
    # Settled records and their audit events are purged this long after their decision.
    retention_days: float = Field(default=30.0, gt=0)
    # Calls held at once, per session and over all: past them a call is not held (nor run);
    # the chat and the model are told. Counted by the store in the step that writes the
    # record: exact over every replica.
    max_pending_per_session: int = Field(default=20, ge=1)
    max_pending: int = Field(default=1000, ge=1)
    # Nudges (gateway/confirm/nudges.py): once, this long before a pending call expires, its
    # chat is told it still waits, mentioning who may decide; 0: never.
    remind_before_seconds: float = Field(default=60.0, ge=0)
    # A call still undecided this long after it was asked also goes to every approver's
    # direct chat and to each channel's ``escalation_chat``; 0: never.
    escalate_after_seconds: float = Field(default=0.0, ge=0)


class KeywordsSettings(Section):
    """The confirm/cancel words file admins edit; reloaded on change.

    None means ``<data_dir>/keywords.toml``. The first start copies the shipped words
    (``DEFAULT_KEYWORDS_FILE``) there: edits never go into the installed package, which an
    upgrade replaces and a hardened service cannot write.
    """

    file: Path | None = None
    watch: bool = True

    @field_validator("file")
    @classmethod
    def _absolute(cls, value: Path | None) -> Path | None:
        return value.expanduser().absolute() if value is not None else None


class SqlToolSettings(Section):
    """The SQL tools' database (an SQLAlchemy async URL)."""

    # None means the demo SQLite database under data_dir, created on first run.
    url: str | None = None
    max_rows: int = Field(default=50, ge=1)
    # The database stops a statement after this long; reads (queries, preview counts) run
    # with it set on the server, in a read-only transaction (docs/sql-safety.md).
    statement_timeout_seconds: float = Field(default=30.0, gt=0)
    # Functions that queries and previews may call before approval, added to the built-in
    # list for the database (gateway/tools/sql_functions.py); any other function is held.
    allowed_functions: list[str] = Field(default_factory=list)
    # An approved change runs only if the rows it changes are still the ones the approver
    # saw: at most this many rows of difference in the count (and in the keys, when the
    # preview kept them). 0: exactly what was approved (docs/model.md, "Drift").
    drift_tolerance: int = Field(default=0, ge=0)


class ToolsSettings(Section):
    sql: SqlToolSettings = Field(default_factory=SqlToolSettings)
    plugins: list[str] = Field(default_factory=list)


class LlmSettings(Section):
    """An OpenAI-compatible chat model. Without ``model`` the command agent is used."""

    base_url: str | None = None
    api_key: SecretStr | None = None
    model: str | None = None
    temperature: float = 0.2
    timeout_seconds: float = Field(default=60.0, gt=0)
    max_steps: int = Field(default=8, ge=1)
    max_history_messages: int = Field(default=40, ge=2)
    max_sessions: int = Field(default=1000, ge=1)
    max_tool_result_chars: int = Field(default=8000, ge=100)
    # Retries on 429 / 5xx / timeouts / connection errors (the SDK's own retries are off).
    max_retries: int = Field(default=3, ge=0)
    retry_base_seconds: float = Field(default=1.0, ge=0)
    retry_max_seconds: float = Field(default=20.0, ge=0)
    system_prompt: str | None = None

    @property
    def configured(self) -> bool:
        return bool(self.model)


class Settings(BaseSettings):
    """All settings of one gateway process."""

    model_config = SettingsConfigDict(
        env_prefix="GATEWAY_",
        env_nested_delimiter="__",
        extra="forbid",
        validate_default=True,
    )

    # The TOML file used by settings_customise_sources; set by load() before construction.
    _toml_file: ClassVar[Path | None] = None

    data_dir: Path = Path("data")
    log: LogSettings = Field(default_factory=LogSettings)
    server: ServerSettings = Field(default_factory=ServerSettings)
    admin: AdminSettings = Field(default_factory=AdminSettings)
    confirmation: ConfirmationSettings = Field(default_factory=ConfirmationSettings)
    keywords: KeywordsSettings = Field(default_factory=KeywordsSettings)
    tools: ToolsSettings = Field(default_factory=ToolsSettings)
    policy: PolicySettings = Field(default_factory=PolicySettings)
    llm: LlmSettings = Field(default_factory=LlmSettings)
    channels: ChannelsSettings = Field(default_factory=ChannelsSettings)

    @field_validator("data_dir")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        # Absolute at load: a later chdir (or a test) cannot move the data, and the
        # start-up log names the real place.
        return value.expanduser().absolute()

    @property
    def keywords_file(self) -> Path:
        """The keyword file in force: ``keywords.file``, else ``<data_dir>/keywords.toml``."""
        return self.keywords.file or self.data_dir / "keywords.toml"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if cls._toml_file is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=cls._toml_file))
        return tuple(sources)

    @property
    def sql_url(self) -> str:
        """The SQL tools' URL; the demo SQLite database when none is configured."""
        if self.tools.sql.url:
            return self.tools.sql.url
        return f"sqlite+aiosqlite:///{(self.data_dir / 'demo.db').resolve()}"

    @property
    def uses_demo_database(self) -> bool:
        return not self.tools.sql.url


class ConfigError(Exception):
    """A configuration problem, with a message that says what to change."""


def resolve_config_path(path: Path | str | None) -> Path | None:
    """The TOML file to read: the given one, else ./gateway.toml when present."""
    if path is not None:
        p = Path(path).expanduser()
        if not p.is_file():
            raise ConfigError(f"config file {p} does not exist: pass an existing --config PATH")
        return p
    default = Path("gateway.toml")
    return default if default.is_file() else None


def _names(loc: tuple[int | str, ...]) -> list[str]:
    """The setting's path without list indexes: ("server", "trusted_proxies", 0) -> 2 names."""
    return [str(part) for part in loc if not isinstance(part, int)]


def env_name(loc: tuple[int | str, ...]) -> str:
    """The environment variable of a setting: GATEWAY_CONFIRMATION__TIMEOUT_SECONDS."""
    return "GATEWAY_" + "__".join(name.upper() for name in _names(loc))


def _toml_name(loc: tuple[int | str, ...]) -> str:
    parts = _names(loc)
    if len(parts) == 1:
        return f"top-level key {parts[0]}"
    return f"[{'.'.join(parts[:-1])}] {parts[-1]}"


@dataclass(frozen=True)
class ValueSource:
    """Where a setting's value came from: an environment variable, or a TOML file."""

    variable: str | None = None
    file: Path | None = None

    def __str__(self) -> str:
        return f"from environment variable {self.variable}" if self.variable else f"in {self.file}"


def value_source(
    loc: tuple[int | str, ...], toml_path: Path | None, environ: Mapping[str, str]
) -> ValueSource | None:
    """Where the value of a setting came from: the environment variable that holds it (a
    whole section's JSON counts), else the TOML file that has it, else None (a default).

    The environment beats the file, so a variable that is set is the source.
    """
    names = _names(loc)
    set_names = {name.upper() for name in environ}
    for end in range(len(names), 0, -1):
        variable = env_name(tuple(names[:end]))
        if variable in set_names:
            return ValueSource(variable=variable)
    if toml_path is None:
        return None
    try:
        node: Any = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    for name in names:
        if not isinstance(node, dict) or name not in node:
            return None
        node = node[name]
    return ValueSource(file=toml_path.absolute())


def nearest_key(loc: tuple[int | str, ...]) -> str | None:
    """The valid key nearest to a misspelt one, in the section it was written in."""
    model: type[BaseModel] = Settings
    *parents, wrong = _names(loc)
    for name in parents:
        field = model.model_fields.get(name)
        annotation = field.annotation if field is not None else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        model = annotation
    near = difflib.get_close_matches(wrong, list(model.model_fields), n=1)
    return near[0] if near else None


def describe_validation_error(
    error: ValidationError,
    *,
    toml_path: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> str:
    """Turn a pydantic error into lines that name the key, where its value came from (the
    file or the variable) and how to fix it."""
    environ = os.environ if environ is None else environ
    lines = []
    for item in error.errors():
        loc = tuple(item["loc"])
        key = ".".join(str(p) for p in loc)
        source = value_source(loc, toml_path, environ)
        origin = f" {source}" if source else ""
        if item["type"] == "extra_forbidden":
            near = nearest_key(loc)
            if near is None:
                hint = "remove it or check its spelling"
            elif source is not None and source.variable:
                hint = f"did you mean {env_name((*_names(loc)[:-1], near))}?"
            else:
                hint = f"did you mean `{near}`?"
            lines.append(f"{key}: unknown setting{origin}; {hint}")
            continue
        if source is None:
            fix = f"set {env_name(loc)} or {_toml_name(loc)}"
        elif source.variable:
            fix = "change or unset that variable"
        else:
            fix = f"change {_toml_name(loc)} there (or set {env_name(loc)})"
        lines.append(f"{key}: {item['msg']} (got {item.get('input')!r}{origin}); {fix}")
    return "\n".join(lines)


def load_settings(path: Path | str | None = None, **overrides: Any) -> Settings:
    """Load settings from the TOML file, the environment and defaults.

    Raises ConfigError with a readable message on any bad value.
    """
    return _build(resolve_config_path(path), overrides)


def environment_settings() -> Settings:
    """Settings from the environment and defaults only, no file (``gateway init`` writes
    the file: its questions start from what the environment says)."""
    return _build(None, {})


def _build(toml_path: Path | None, overrides: dict[str, Any]) -> Settings:
    Settings._toml_file = toml_path
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError(
            "invalid configuration:\n" + describe_validation_error(exc, toml_path=toml_path)
        ) from exc
    except (OSError, ValueError) as exc:
        # tomllib.TOMLDecodeError is a ValueError: say which file is broken.
        raise ConfigError(f"cannot read configuration {toml_path}: {exc}") from exc
    finally:
        Settings._toml_file = None


def masked_dump(settings: Settings) -> dict[str, Any]:
    """The effective settings as plain data, secrets replaced by '***'."""

    def walk(value: Any) -> Any:
        if isinstance(value, SecretStr):
            return "***" if value.get_secret_value() else ""
        if isinstance(value, BaseModel):
            return {k: walk(getattr(value, k)) for k in type(value).model_fields}
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [walk(v) for v in value]
        if isinstance(value, Path):
            return str(value)
        return value

    data: dict[str, Any] = walk(settings)
    llm = data.get("llm", {})
    if isinstance(llm, dict) and llm.get("base_url"):
        # URLs may embed credentials (https://user:pass@host).
        llm["base_url"] = mask_url(str(llm["base_url"]))
    sql = data.get("tools", {}).get("sql", {})
    if isinstance(sql, dict) and sql.get("url"):
        sql["url"] = mask_url(str(sql["url"]))
    conf = data.get("confirmation", {})
    if isinstance(conf, dict) and conf.get("redis_url"):
        conf["redis_url"] = mask_url(str(conf["redis_url"]))
    return data


def mask_url(url: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return urlunsplit(parts._replace(netloc=netloc))
    return url
