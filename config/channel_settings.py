"""Settings of the channels: console, web chat, Feishu, DingTalk."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, SecretStr, field_validator

from config.section import Section


class ConsoleChannelSettings(Section):
    user: str = "local"


class WebChatSettings(Section):
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
    # Open WebSockets and waiting long polls, over all and per client address (the peer,
    # or the address a trusted proxy forwarded): past them a new one is refused before the
    # upgrade (429 per address, 503 over all) instead of using up the process's file
    # descriptors. Keep the sum well below the open-file limit (LimitNOFILE; docs/deploy.md).
    max_sockets: int = Field(default=1000, ge=1)
    max_sockets_per_address: int = Field(default=20, ge=1)
    max_long_polls: int = Field(default=1000, ge=1)
    max_long_polls_per_address: int = Field(default=20, ge=1)
    # Messages one client address may post per minute, whatever names it types; 0: off.
    messages_per_minute_per_address: int = Field(default=120, ge=0)


class PlatformReceiveSettings(Section):
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
    # A chat (Feishu chat_id, DingTalk openConversationId) that also gets the prompt of a
    # call still undecided after [confirmation] escalate_after_seconds; None: approvers only.
    escalation_chat: str | None = None


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


class ChannelsSettings(Section):
    console: ConsoleChannelSettings = Field(default_factory=ConsoleChannelSettings)
    webchat: WebChatSettings = Field(default_factory=WebChatSettings)
    feishu: FeishuSettings = Field(default_factory=FeishuSettings)
    dingtalk: DingTalkSettings = Field(default_factory=DingTalkSettings)
