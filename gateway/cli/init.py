"""``gateway init``: write a commented ``gateway.toml`` for the chosen channels.

The file names every secret's environment variable instead of holding a value, so it can
be committed or mounted read-only; ``config/gateway.example.toml`` lists every option.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

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
        help="write a commented gateway.toml for the chosen channels",
        description="Write a commented settings file (default ./gateway.toml, or --config "
        "PATH). Secrets are named as environment variables, never written.",
    )
    p.add_argument(
        "--channel",
        action="append",
        choices=CHANNELS,
        help="a channel to enable; repeat for several (default: webchat)",
    )
    p.add_argument("--data-dir", default="data", help="data_dir to write (default: data)")
    p.add_argument("--force", action="store_true", help="overwrite an existing file")
    p.set_defaults(handler=cmd_init)


def cmd_init(args: argparse.Namespace) -> int:
    path = Path(args.config or "gateway.toml").expanduser()
    if path.exists() and not args.force:
        print(f"{path} exists; pass --force to overwrite it", file=sys.stderr)
        return 1
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
