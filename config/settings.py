"""Settings: a TOML file, then ``GATEWAY_*`` environment variables, then defaults.

Precedence (highest first): keyword arguments, environment (``GATEWAY_`` prefix, ``__`` for
nesting, e.g. ``GATEWAY_CONFIRMATION__TIMEOUT_SECONDS=30``), the TOML file (``--config PATH``
or ``./gateway.toml`` when present), then the defaults below, which run on a fresh machine.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

PACKAGE_DIR = Path(__file__).resolve().parent
DEFAULT_KEYWORDS_FILE = PACKAGE_DIR / "keywords.toml"

Level = Literal["auto", "notify", "confirm", "manual", "deny"]
RiskName = Literal["low", "medium", "high", "critical"]


LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


class _Section(BaseModel):
    # A misspelt key in a TOML section is an error, not silently ignored.
    model_config = ConfigDict(extra="forbid")


class ServerSettings(_Section):
    """The one aiohttp server: web chat, admin API and platform webhooks."""

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    # Host header names answered (ports ignored); the bound host is added. Any other name
    # is refused with 421, so a page on another site cannot reach this server through a
    # DNS name that resolves to loopback (DNS rebinding). "*" allows any name.
    allowed_hosts: list[str] = Field(default_factory=lambda: list(LOOPBACK_NAMES))
    # Nesting allowed in a JSON request body: deeper input is a 400, never a RecursionError.
    max_json_depth: int = Field(default=64, ge=1, le=256)


class AdminSettings(_Section):
    """Admin API access. A token is required when the server listens beyond loopback."""

    token: SecretStr | None = None
    # SSE keep-alive comments stop proxies from closing an idle event stream.
    sse_heartbeat_seconds: float = Field(default=15.0, gt=0)
    sse_queue_size: int = Field(default=1000, ge=1)


class LogSettings(_Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["auto", "console", "json"] = "auto"


class ConfirmationSettings(_Section):
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
    stop_timeout_seconds: float = Field(default=30.0, ge=0)


class KeywordsSettings(_Section):
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


class SqlToolSettings(_Section):
    """The SQL tools' database (an SQLAlchemy async URL)."""

    # None means the demo SQLite database under data_dir, created on first run.
    url: str | None = None
    max_rows: int = Field(default=50, ge=1)
    statement_timeout_seconds: float = Field(default=30.0, gt=0)


class ToolsSettings(_Section):
    sql: SqlToolSettings = Field(default_factory=SqlToolSettings)
    plugins: list[str] = Field(default_factory=list)


class PolicyRule(_Section):
    """One policy rule: a tool-name glob plus conditions that, when all hold, set level/risk.

    ``when`` holds conditions on the call's arguments (``{amount = {gt = 1000}}``); ``sql``
    holds conditions on the parsed SQL statement (``kind``, ``tables``, ``where``,
    ``statement_count``, ``rows_affected``). A condition is a value (equals), a list (one
    of), or a table of operators: ``equals not_equals in not_in glob not_glob regex
    not_regex contains gt ge lt le exists``.
    """

    name: str = ""
    tool: str = "*"
    level: Level | None = None
    risk: RiskName | None = None
    # True/False overrides four-eyes for calls this rule matches; None leaves it to risk.
    four_eyes: bool | None = None
    when: dict[str, Any] = Field(default_factory=dict)
    sql: dict[str, Any] = Field(default_factory=dict)

    @field_validator("when", "sql")
    @classmethod
    def _conditions(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key, condition in value.items():
            _check_condition(key, condition)
        return value

    @model_validator(mode="after")
    def _sets_something(self) -> PolicyRule:
        if self.level is None and self.risk is None and self.four_eyes is None:
            raise ValueError(f"rule {self.name or self.tool!r} sets none of level, risk, four_eyes")
        return self

    @field_validator("sql")
    @classmethod
    def _sql_fields(cls, value: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(value) - SQL_FIELDS)
        if unknown:
            raise ValueError(
                f"unknown SQL field(s) {', '.join(unknown)}; use {', '.join(sorted(SQL_FIELDS))}"
            )
        return value


SQL_FIELDS = frozenset({"kind", "tables", "where", "statement_count", "rows_affected"})
CONDITION_OPERATORS = frozenset(
    {
        "equals",
        "not_equals",
        "in",
        "not_in",
        "glob",
        "not_glob",
        "regex",
        "not_regex",
        "contains",
        "gt",
        "ge",
        "lt",
        "le",
        "exists",
    }
)


def _check_condition(key: str, condition: Any) -> None:
    """Refuse unknown operators and bad regexes at load time, naming the key."""
    if not isinstance(condition, dict):
        return
    if not condition:
        raise ValueError(f"condition {key!r} is an empty table")
    for op, operand in condition.items():
        if op not in CONDITION_OPERATORS:
            raise ValueError(
                f"condition {key!r}: unknown operator {op!r}; "
                f"use one of {', '.join(sorted(CONDITION_OPERATORS))}"
            )
        if op in ("gt", "ge", "lt", "le") and (
            isinstance(operand, bool) or not isinstance(operand, int | float)
        ):
            raise ValueError(f"condition {key!r}: {op} needs a number, got {operand!r}")
        if op in ("in", "not_in") and not isinstance(operand, list):
            raise ValueError(f"condition {key!r}: {op} needs a list, got {operand!r}")
        if op == "exists" and not isinstance(operand, bool):
            raise ValueError(f"condition {key!r}: exists needs true or false")
        if op in ("regex", "not_regex"):
            try:
                re.compile(str(operand))
            except re.error as exc:
                raise ValueError(f"condition {key!r}: bad regex {operand!r}: {exc}") from exc


class PolicySettings(_Section):
    """Supervision levels per tool and rules that override them.

    ``levels`` maps a tool name or glob to its default level (the tool's own default when
    absent). Rules are checked on every call: a matching ``deny`` always wins, otherwise
    the most specific matching rule decides.
    """

    levels: dict[str, Level] = Field(default_factory=dict)
    rules: list[PolicyRule] = Field(default_factory=list)
    # Risks whose confirmations need an approver other than the requester.
    four_eyes_risks: list[RiskName] = Field(default_factory=list)
    four_eyes_for_critical: bool = False


class LlmSettings(_Section):
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


class ConsoleChannelSettings(_Section):
    user: str = "local"


class WebChatSettings(_Section):
    """The built-in browser chat. Names are typed by the user, not authenticated."""

    enabled: bool = True
    max_text_length: int = Field(default=4000, ge=1)
    history_size: int = Field(default=500, ge=10)
    # History is also bounded by bytes (UTF-8 text plus a small allowance per entry), per
    # room and over all rooms; the oldest entries go first.
    history_bytes_per_room: int = Field(default=1 << 20, ge=64 << 10)
    history_bytes_total: int = Field(default=64 << 20, ge=1 << 20)
    # Messages one sender (by name) may post per minute, over all rooms; beyond it they are
    # answered with a request to slow down (REST: 429 with Retry-After). 0 turns it off.
    messages_per_minute: int = Field(default=30, ge=0)
    approvers: list[str] = Field(default_factory=list)
    # Rooms kept in memory; the least recently used room without open sockets goes first.
    max_sessions: int = Field(default=1000, ge=1)
    max_long_poll_seconds: float = Field(default=30.0, gt=0)
    max_sockets_per_session: int = Field(default=50, ge=1)


class PlatformReceiveSettings(_Section):
    """Who and what a platform bot answers (the same rules for Feishu and DingTalk)."""

    # Sender ids the bot answers: empty means nobody, "*" everyone.
    allow_from: list[str] = Field(default_factory=list)
    # In groups: only messages that @-mention the bot ("mention"), or all ("open").
    group_policy: Literal["mention", "open"] = "mention"
    approvers: list[str] = Field(default_factory=list)
    # Messages older than this are skipped, e.g. a burst after an outage; 0 turns it off.
    max_message_age_seconds: float = Field(default=600.0, ge=0)
    # Sends that failed after every retry, kept for /api/channels/<name>/failed.
    dead_letter_size: int = Field(default=200, ge=1)


class FeishuSettings(PlatformReceiveSettings):
    """Feishu / Lark bot. Secrets belong in the environment."""

    enabled: bool = False
    mode: Literal["ws", "webhook"] = "ws"
    app_id: str | None = None
    app_secret: SecretStr | None = None
    encrypt_key: SecretStr | None = None
    verification_token: SecretStr | None = None
    domain: str = "feishu"
    replay_window_seconds: float = 300.0
    webhook_path: str = "/webhook/feishu/event"
    card_webhook_path: str = "/webhook/feishu/card"
    # Sends: attempts and backoff on 429 / rate-limit codes / server errors.
    retry_attempts: int = Field(default=5, ge=1)
    retry_base_seconds: float = Field(default=0.5, gt=0)
    retry_max_seconds: float = Field(default=8.0, gt=0)
    # Long connection: reconnect backoff, connect timeout, and the bound on stopping.
    reconnect_base_seconds: float = Field(default=0.5, gt=0)
    reconnect_max_seconds: float = Field(default=60.0, gt=0)
    request_timeout_seconds: float = Field(default=10.0, gt=0)
    stop_timeout_seconds: float = Field(default=5.0, gt=0)


class DingTalkSettings(PlatformReceiveSettings):
    """DingTalk robot. Secrets belong in the environment."""

    enabled: bool = False
    mode: Literal["stream", "http"] = "stream"
    client_id: str | None = None
    client_secret: SecretStr | None = None
    robot_code: str | None = None
    card_template_id: str | None = None
    openapi_endpoint: str = "https://api.dingtalk.com"
    signature_window_seconds: float = 300.0
    webhook_path: str = "/webhook/dingtalk"
    # The only places a message's sessionWebhook URL may point to (it comes from the
    # request body): exact host names, or host:port for a port other than the scheme's
    # default. Anything else is refused and the reply goes through the robot OpenAPI.
    webhook_hosts: list[str] = Field(default_factory=lambda: ["oapi.dingtalk.com"])
    # "http" only for a loopback test platform or a trusted proxy inside your network.
    webhook_schemes: list[Literal["https", "http"]] = Field(default=["https"])
    # OpenAPI calls: per-request timeout, attempts and backoff on 429 / 5xx.
    request_timeout_seconds: float = Field(default=10.0, gt=0)
    send_attempts: int = Field(default=4, ge=1)
    retry_base_seconds: float = Field(default=1.0, ge=0)
    retry_max_seconds: float = Field(default=30.0, ge=0)
    # Stream reconnect backoff (exponential with jitter) and the bound on shutdown.
    reconnect_base_seconds: float = Field(default=1.0, gt=0)
    reconnect_max_seconds: float = Field(default=60.0, gt=0)
    stop_timeout_seconds: float = Field(default=5.0, gt=0)

    @field_validator("webhook_hosts")
    @classmethod
    def _hosts(cls, value: list[str]) -> list[str]:
        hosts = [host.strip().lower() for host in value]
        for host in hosts:
            if not _WEBHOOK_HOST.fullmatch(host):
                raise ValueError(
                    f"{host!r} is not a host name: use e.g. oapi.dingtalk.com, or host:port"
                )
        return hosts


# A host name, an IPv4 address or a bracketed IPv6 address, with an optional port.
_WEBHOOK_HOST = re.compile(r"(?:[a-z0-9](?:[a-z0-9.\-]*[a-z0-9])?|\[[0-9a-f:.]+\])(?::\d{1,5})?")


class ChannelsSettings(_Section):
    console: ConsoleChannelSettings = Field(default_factory=ConsoleChannelSettings)
    webchat: WebChatSettings = Field(default_factory=WebChatSettings)
    feishu: FeishuSettings = Field(default_factory=FeishuSettings)
    dingtalk: DingTalkSettings = Field(default_factory=DingTalkSettings)


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


def _env_name(loc: tuple[int | str, ...]) -> str:
    return "GATEWAY_" + "__".join(str(part).upper() for part in loc)


def _toml_name(loc: tuple[int | str, ...]) -> str:
    parts = [str(p) for p in loc if not isinstance(p, int)]
    if len(parts) == 1:
        return f"top-level key {parts[0]}"
    return f"[{'.'.join(parts[:-1])}] {parts[-1]}"


def describe_validation_error(error: ValidationError) -> str:
    """Turn a pydantic error into lines that name the key and how to set it."""
    lines = []
    for item in error.errors():
        loc = tuple(item["loc"])
        key = ".".join(str(p) for p in loc)
        if item["type"] == "extra_forbidden":
            lines.append(f"{key}: unknown setting; remove it or check its spelling")
            continue
        lines.append(
            f"{key}: {item['msg']} (got {item.get('input')!r}); "
            f"set {_env_name(loc)} or {_toml_name(loc)}"
        )
    return "\n".join(lines)


def load_settings(path: Path | str | None = None, **overrides: Any) -> Settings:
    """Load settings from the TOML file, the environment and defaults.

    Raises ConfigError with a readable message on any bad value.
    """
    toml_path = resolve_config_path(path)
    Settings._toml_file = toml_path
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        where = f" (file {toml_path})" if toml_path else ""
        raise ConfigError(
            f"invalid configuration{where}:\n{describe_validation_error(exc)}"
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
        llm["base_url"] = _mask_url(str(llm["base_url"]))
    sql = data.get("tools", {}).get("sql", {})
    if isinstance(sql, dict) and sql.get("url"):
        sql["url"] = _mask_url(str(sql["url"]))
    conf = data.get("confirmation", {})
    if isinstance(conf, dict) and conf.get("redis_url"):
        conf["redis_url"] = _mask_url(str(conf["redis_url"]))
    return data


def _mask_url(url: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return urlunsplit(parts._replace(netloc=netloc))
    return url


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
        if fs.mode == "webhook" and not (fs.encrypt_key or fs.verification_token):
            problems.append(
                "channels.feishu webhook mode needs encrypt_key or verification_token to verify"
                " requests: set GATEWAY_CHANNELS__FEISHU__ENCRYPT_KEY or [channels.feishu]"
                " encrypt_key"
            )
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


def masked_url(url: str) -> str:
    """``url`` with its password replaced by ``***``, for messages and logs."""
    return _mask_url(url)


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
