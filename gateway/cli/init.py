"""``gateway init``: write a commented ``gateway.toml`` for the chosen channels.

The file names every secret's environment variable instead of holding a value, so it can
be committed or mounted read-only; ``config/gateway.example.toml`` lists every option.

On a terminal it asks instead (issue 26): the channels, each platform's app id and secret
(checked against the platform's token endpoint), approvers and the data directory; it
generates the admin token, writes the same commented file with the answers filled in, and
the secrets to a ``0600`` env file beside it. Without a terminal (scripts, CI, images) it
writes the template from the flags, as before.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

CHANNELS = ("webchat", "feishu", "dingtalk")

HEADER = """\
# gateway.toml — written by `gateway init`. Every option with its default:
# config/gateway.example.toml in the package. Any key can also come from the environment,
# GATEWAY_<SECTION>__<KEY>; put secrets there, not in this file.
# `gateway check-config` prints what is in force (secrets masked).

# SQLite files (confirmations + audit log, demo database) and the keyword file live here.
# A relative path is taken from the directory the gateway starts in; the gateway logs the
# absolute path at start.
data_dir = {data_dir}

[server]                  # one HTTP server: web chat, admin API, platform webhooks
host = "127.0.0.1"        # beyond loopback, a strong admin token is required
port = 8080
# Behind a reverse proxy, add the public name it forwards (this too needs the token), and
# the proxy's sign-in header (docs/deploy.md):
# allowed_hosts = ["localhost", "127.0.0.1", "::1", "chat.example.com"]
# trusted_proxies = ["127.0.0.1", "::1"]
# trusted_user_header = "X-Forwarded-User"

[admin]
# Bearer token for the admin API; set GATEWAY_ADMIN__TOKEN instead (32+ characters, 8+
# distinct: openssl rand -hex 32).

[confirmation]
timeout_seconds = 300                      # a timeout always cancels, never approves
on_other_message = "reject_with_feedback"  # reject_with_feedback | cancel | keep_pending
approvers = []                             # user ids that may decide anyone's call

[keywords]
# The confirm / cancel words. The first start copies the shipped words to
# <data_dir>/keywords.toml; edit that copy (or `gateway keywords add ...`).
# file = "/var/lib/chat-gateway/keywords.toml"

[llm]                     # an OpenAI-compatible model; without one the command agent answers
# base_url = "https://api.deepseek.com/v1"
# model = "deepseek-chat"
# api_key: set GATEWAY_LLM__API_KEY
"""

SECTIONS = {
    "webchat": """
[channels.webchat]        # the web chat page at http://host:port/
enabled = true
approvers = []            # web chat names that may decide anyone's call (names are typed,
                          # not authenticated: put the page behind your own login first)
""",
    "feishu": """
[channels.feishu]         # Feishu / Lark, see docs/feishu.md; needs the [feishu] extra
enabled = true
mode = "ws"               # ws (long connection, no public URL) | webhook
app_id = "cli_xxxxxxxxxxxxxxxx"   # from the Feishu developer console
# app_secret: set GATEWAY_CHANNELS__FEISHU__APP_SECRET
# webhook mode also needs GATEWAY_CHANNELS__FEISHU__ENCRYPT_KEY (it signs every request)
domain = "feishu"         # feishu | lark
allow_from = []           # [] nobody, ["*"] everyone, or open_ids
group_policy = "mention"  # answer in groups only when @-mentioned | "open"
approvers = []            # open_ids that may decide anyone's call (and get four-eyes
                          # and critical prompts in their direct chat with the bot)
""",
    "dingtalk": """
[channels.dingtalk]       # DingTalk, see docs/dingtalk.md; needs the [dingtalk] extra
enabled = true
mode = "stream"           # stream (no public URL) | http
client_id = "dingxxxxxxxxxxxxxxxx"   # the app's AppKey
# client_secret: set GATEWAY_CHANNELS__DINGTALK__CLIENT_SECRET
allow_from = []           # [] nobody, ["*"] everyone, or staff ids
group_policy = "mention"  # answer in groups only when @-mentioned | "open"
approvers = []            # staff ids that may decide anyone's call (and get four-eyes
                          # and critical prompts in their 1:1 chat with the robot)
""",
}

DISABLED_WEBCHAT = """
[channels.webchat]
enabled = false           # `gateway init --channel webchat` writes this section enabled
"""


def render(channels: list[str], *, data_dir: str = "data") -> str:
    """The file's text for the chosen channels, in a fixed order."""
    chosen = [name for name in CHANNELS if name in channels]
    # json.dumps writes a valid TOML basic string (quotes, backslashes, \u escapes)
    parts = [HEADER.format(data_dir=json.dumps(data_dir, ensure_ascii=False))]
    if "webchat" not in chosen:
        parts.append(DISABLED_WEBCHAT)
    parts.extend(SECTIONS[name] for name in chosen)
    return "".join(parts)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "init",
        help="set up a gateway.toml: asks on a terminal, else writes a commented template",
        description="Write a commented settings file (default ./gateway.toml, or --config "
        "PATH). On a terminal it asks for the channels, their app ids and secrets (checked "
        "with the platform), approvers and the data directory, generates an admin token, and "
        "writes the secrets to a 0600 env file beside it (gateway.env). Without a terminal, "
        "or with --no-input, secrets are named as environment variables, never written.",
    )
    p.add_argument(
        "--channel",
        action="append",
        choices=CHANNELS,
        help="a channel to enable; repeat for several (default: webchat)",
    )
    p.add_argument("--data-dir", default="data", help="data_dir to write (default: data)")
    p.add_argument("--force", action="store_true", help="overwrite existing files")
    p.add_argument(
        "--no-input", action="store_true", help="do not ask, even on a terminal: the template"
    )
    p.set_defaults(handler=cmd_init)


def cmd_init(args: argparse.Namespace) -> int:
    path = Path(args.config or "gateway.toml").expanduser()
    guided = sys.stdin.isatty() and not args.no_input
    env_path = path.with_suffix(".env")
    for existing in (path, env_path) if guided else (path,):
        if existing.exists() and not args.force:
            print(f"{existing} exists; pass --force to overwrite it", file=sys.stderr)
            return 1
    if guided:
        return _guided(args, path, env_path)
    channels = args.channel or ["webchat"]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render(channels, data_dir=args.data_dir), encoding="utf-8")
    except OSError as exc:
        print(f"cannot write {path}: {exc.strerror}", file=sys.stderr)
        return 2
    print(f"wrote {path.absolute()} ({', '.join(c for c in CHANNELS if c in channels)})")
    print("next: set the secrets it names, then `gateway check-config` and `gateway serve`")
    return 0


# ---------------------------------------------------------------------- guided set-up


class Platform(NamedTuple):
    """What the questions and the credential check need to know of one chat platform."""

    channel: str  # its section: [channels.<channel>]
    title: str
    id_key: str
    secret_key: str
    id_help: str
    user_ids: str  # what the platform's user ids are called, for the approver questions
    console_step: str  # what to do in the platform's console once the gateway runs


PLATFORMS = {
    "feishu": Platform(
        channel="feishu",
        title="Feishu",
        id_key="app_id",
        secret_key="app_secret",
        id_help="App ID (cli_...) and App Secret are on 凭证与基础信息 / Credentials & Basic Info "
        "in the developer console",
        user_ids="open_ids (ou_...)",
        console_step="while it runs, choose the long connection for events and callbacks in "
        "the Feishu console (docs/feishu.md, step 3)",
    ),
    "dingtalk": Platform(
        channel="dingtalk",
        title="DingTalk",
        id_key="client_id",
        secret_key="client_secret",
        id_help="Client ID (AppKey) and Client Secret are on 凭证与基础信息 / Credentials in the "
        "developer console",
        user_ids="staff ids (userid)",
        console_step="set the robot's message receiving mode to Stream in the DingTalk "
        "console (docs/dingtalk.md, section 1)",
    ),
}

# lark-oapi's FEISHU_DOMAIN and LARK_DOMAIN (the SDK is an extra: init runs without it).
FEISHU_ORIGINS = {"feishu": "https://open.feishu.cn", "lark": "https://open.larksuite.com"}
FEISHU_TOKEN_PATH = "/open-apis/auth/v3/tenant_access_token/internal"
# channels/dingtalk/api.py TOKEN_PATH: the endpoint the dingtalk-stream SDK uses too.
DINGTALK_TOKEN_PATH = "/v1.0/oauth2/accessToken"
CHECK_TIMEOUT_SECONDS = 10.0


class Verdict(NamedTuple):
    """A platform's answer to an app id and secret: accepted, refused, or None when there
    was no answer to read (unreachable, a server error)."""

    accepted: bool | None
    detail: str


def check_credentials(platform: str, origin: str, app_id: str, secret: str) -> Verdict:
    """Ask the platform's token endpoint whether ``app_id`` and ``secret`` are valid."""
    import http.client
    import urllib.error
    import urllib.request  # here, not at the top: `gateway --help` stays quick (issue 14)

    origin = origin.rstrip("/")
    if platform == "feishu":
        url, body = origin + FEISHU_TOKEN_PATH, {"app_id": app_id, "app_secret": secret}
    else:
        url, body = origin + DINGTALK_TOKEN_PATH, {"appKey": app_id, "appSecret": secret}
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json; charset=utf-8"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=CHECK_TIMEOUT_SECONDS) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as exc:  # DingTalk says no with a 400 and a JSON body
        status, raw = exc.code, exc.read()
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return Verdict(None, f"{origin} could not be reached ({reason})")
    try:
        answer = json.loads(raw)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        return Verdict(None, f"{origin} answered HTTP {status} without a JSON body")
    if platform == "feishu":
        # Feishu answers HTTP 200 and says no in the code (10014 app secret invalid, ...).
        if answer.get("code") == 0 and answer.get("tenant_access_token"):
            return Verdict(True, "Feishu accepted the App ID and App Secret")
        if isinstance(answer.get("code"), int):
            return Verdict(
                False, f"Feishu refused them: {answer.get('msg')} (code {answer['code']})"
            )
    else:
        if status == 200 and answer.get("accessToken"):
            return Verdict(True, "DingTalk accepted the Client ID and Client Secret")
        if 400 <= status < 500 and answer.get("code"):
            return Verdict(
                False, f"DingTalk refused them: {answer.get('message')} ({answer['code']})"
            )
    return Verdict(None, f"{origin} answered HTTP {status} without a verdict")


class Terminal:
    """The questions, asked on this terminal: a [default] is kept with Enter, and an answer
    that does not fit is asked again with the reason."""

    def say(self, text: str) -> None:
        print(text, flush=True)

    def ask(
        self,
        question: str,
        default: str = "",
        problem: Callable[[str], str | None] = lambda _: None,
    ) -> str:
        shown = f" [{default}]" if default else ""
        while True:
            answer = input(f"{question}{shown}: ").strip() or default
            why = problem(answer)
            if why is None:
                return answer
            self.say(f"  {why}")

    def ask_list(self, question: str, default: list[str]) -> list[str]:
        return _split(self.ask(question, ", ".join(default)))

    def secret(self, question: str) -> str:
        import getpass

        while True:
            # getpass reads from the terminal with echo off: the secret is never shown.
            answer = getpass.getpass(f"{question} (not shown as you type): ").strip()
            if answer:
                return answer
            self.say("  the secret is empty: paste it from the console")


def _split(answer: str) -> list[str]:
    """A list typed on one line: items separated by commas or spaces."""
    return [item for item in re.split(r"[,\s]+", answer) if item]


def _channels_problem(answer: str) -> str | None:
    names = _split(answer.lower())
    unknown = [name for name in names if name not in CHANNELS]
    if unknown:
        return f"{unknown[0]!r} is not a channel: choose from {', '.join(CHANNELS)}"
    return None if names else "choose at least one channel"


def _id_problem(answer: str) -> str | None:
    from config.checks import is_placeholder

    if not answer:
        return "the id is empty: copy it from the console"
    return (
        "that is a placeholder: copy the real id from the console"
        if is_placeholder(answer)
        else None
    )


def _domain_problem(answer: str) -> str | None:
    if answer in FEISHU_ORIGINS or re.fullmatch(r"https?://[^/\s]+/?", answer):
        return None
    return "answer feishu, lark, or an origin such as https://open.example.com"


def _data_dir_problem(answer: str) -> str | None:
    from config.checks import data_dir_problem

    return data_dir_problem(Path(answer).expanduser().absolute())


def _ask_platform(
    term: Terminal, platform: Platform, table: Any, current: Any, variables: dict[str, str]
) -> None:
    """The app id (into the file), the secret (checked, into ``variables``) and who may use
    and approve; ``current`` is the channel's settings from the environment."""
    from config.settings import env_name

    term.say(f"\n{platform.title}: the {platform.id_help}.")
    if platform.channel == "feishu":
        domain = term.ask(
            "Feishu or Lark (feishu, lark, or the https:// origin of a private deployment)",
            current.domain,
            _domain_problem,
        )
        table["domain"] = domain
        origin = FEISHU_ORIGINS.get(domain, domain)
    else:
        origin = current.openapi_endpoint
    app_id = getattr(current, platform.id_key) or ""
    while True:
        app_id = term.ask(f"{platform.title} {platform.id_key}", app_id, _id_problem)
        secret = term.secret(f"{platform.title} {platform.secret_key}")
        verdict = check_credentials(platform.channel, origin, app_id, secret)
        if verdict.accepted is False:
            term.say(f"  {verdict.detail}; enter them again (Ctrl-C stops)")
            continue
        if verdict.accepted is None:
            term.say(f"  not checked: {verdict.detail}; `gateway serve` will try them")
        else:
            term.say(f"  {verdict.detail}")
        break
    table[platform.id_key] = app_id
    variables[env_name(("channels", platform.channel, platform.secret_key))] = secret
    table["approvers"] = term.ask_list(
        f"{platform.title} approvers, {platform.user_ids} that may approve anyone's call", []
    )
    table["allow_from"] = term.ask_list(
        f"Who may talk to the {platform.title} bot: {platform.user_ids}, or * for everyone",
        ["*"],
    )


def _guided(args: argparse.Namespace, path: Path, env_path: Path) -> int:
    import secrets

    import tomlkit

    from config.settings import environment_settings

    current = environment_settings()  # the questions start from what the environment says
    term = Terminal()
    term.say(
        f"gateway init: a few questions, then {path.name} and {env_path.name} (the secrets)"
        " are written. Enter keeps the [default]; Ctrl-C stops without writing anything."
    )
    variables: dict[str, str] = {}
    try:
        answer = term.ask(
            f"Channels ({', '.join(CHANNELS)})",
            ", ".join(args.channel or ["webchat"]),
            _channels_problem,
        )
        channels = [name for name in CHANNELS if name in _split(answer.lower())]
        doc = tomlkit.parse(render(channels))
        sections: Any = doc["channels"]
        for name in channels:
            if name in PLATFORMS:
                _ask_platform(
                    term,
                    PLATFORMS[name],
                    sections[name],
                    getattr(current.channels, name),
                    variables,
                )
        if "webchat" in channels:
            sections["webchat"]["approvers"] = term.ask_list(
                "\nWeb chat approvers, names that may approve anyone's call (typed, not "
                "verified: put the page behind your login before you rely on them)",
                [],
            )
        data_dir = term.ask(
            "\nData directory (confirmations, audit log, keyword file)",
            str(Path(args.data_dir).expanduser().absolute()),
            _data_dir_problem,
        )
    except (EOFError, KeyboardInterrupt) as exc:
        term.say("\nstopped; nothing was written")
        return 130 if isinstance(exc, KeyboardInterrupt) else 1
    doc["data_dir"] = str(Path(data_dir).expanduser().absolute())
    token = secrets.token_urlsafe(32)  # 43 characters: strong enough beyond loopback too
    variables = {"GATEWAY_ADMIN__TOKEN": token, **variables}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_private(env_path, _env_text(variables, path))
        path.write_text(tomlkit.dumps(doc), encoding="utf-8")
    except OSError as exc:
        print(f"cannot write {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    term.say(f"\nwrote {path.absolute()} ({', '.join(channels)})")
    term.say(f"wrote {env_path.absolute()} (mode 0600): {', '.join(variables)}")
    term.say(f"admin token (shown this once; the /admin page asks for it): {token}")
    term.say(f"next: {_serve_command(path, env_path)}")
    for name in channels:
        if name in PLATFORMS:
            term.say(f"then: {PLATFORMS[name].console_step}")
    return 0


def _env_text(variables: dict[str, str], config: Path) -> str:
    lines = [
        f"# Secrets for {config.absolute()}, written by `gateway init`; keep it private.",
        "# Load it: set -a; . THIS-FILE; set +a  (systemd EnvironmentFile=, docker --env-file)",
    ]
    lines += [f"{name}={shlex.quote(value)}" for name, value in variables.items()]
    return "\n".join(lines) + "\n"


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` readable by the owner only (0600), also over an existing file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        os.fchmod(file.fileno(), 0o600)  # an existing file keeps its mode through os.open
        file.write(text)


def _serve_command(config: Path, env_file: Path) -> str:
    """How to start the gateway with these files, from the current directory."""

    def shown(p: Path) -> str:
        try:
            return shlex.quote(f"./{p.absolute().relative_to(Path.cwd())}")
        except ValueError:
            return shlex.quote(str(p.absolute()))

    default = config.absolute() == Path("gateway.toml").absolute()
    serve = "gateway serve" if default else f"gateway serve --config {shown(config)}"
    return f"set -a; . {shown(env_file)}; set +a; {serve}"
