"""The commands serve, chat, check-config and keywords; parsed in gateway.cli.main."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import structlog

from config.checks import (
    channel_warnings,
    environment_problems,
    nudge_warnings,
    open_file_warnings,
    placeholder_problems,
)
from config.keywords import (
    SHIPPED_KEYWORDS_FILE,
    KeywordsError,
    KeywordStore,
    WordExists,
    load_keywords,
)
from config.settings import ConfigError, Settings, load_settings, masked_dump, resolve_config_path
from gateway.data_lock import DataDirInUse
from gateway.logs import configure_logging

EXIT_CONFIG = 2


def _settings(args: argparse.Namespace) -> Settings:
    """The settings, or ConfigError; a malformed list in the environment says how to write it."""
    unknown, malformed = environment_problems(os.environ)
    if malformed:
        raise ConfigError("\n".join(malformed))
    try:
        return load_settings(args.config)
    except ConfigError as exc:
        if unknown:  # a misspelt section makes pydantic's error; say what was meant
            raise ConfigError("\n".join([str(exc), *unknown])) from exc
        raise


def _warn_unknown_environment() -> None:
    for problem in environment_problems(os.environ)[0]:
        structlog.get_logger(__name__).warning("config.unknown_env", detail=problem)


# ---------------------------------------------------------------------- serve / chat


def cmd_serve(args: argparse.Namespace) -> int:
    from gateway.app import Gateway, build, run_until_stopped

    settings = _settings(args)
    config_file = resolve_config_path(args.config)
    if args.host or args.port is not None:
        server = settings.server.model_copy(
            update={k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
        )
        settings = settings.model_copy(update={"server": server})
    configure_logging(settings.log.level, settings.log.format, cache=True)
    _warn_unknown_environment()

    def started(gw: Gateway) -> None:
        # Once running, so a start-up error stays the one line on stderr.
        structlog.get_logger(__name__).info(
            "config.loaded",
            file=str(config_file.absolute()) if config_file else None,
            data_dir=str(settings.data_dir),
            keywords_file=str(gw.keywords.path),
        )
        if gw.http is None:
            print("gateway is running (no HTTP server; Ctrl-C to stop)", flush=True)
            return
        url = gw.http.url
        # One line, read by scripts and tests up to the first URL.
        print(
            f"gateway is running: open {url}  (admin page: {url}/admin; Ctrl-C to stop)",
            flush=True,
        )

    async def serve() -> None:
        await run_until_stopped(await build(settings), on_started=started)

    asyncio.run(serve())
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    from gateway.app import build, run_until_stopped

    configured = settings = _settings(args)
    channels = settings.channels.model_copy(deep=True)
    channels.console.user = args.user or channels.console.user
    channels.webchat.enabled = False
    channels.feishu.enabled = False
    channels.dingtalk.enabled = False
    update: dict[str, Any] = {"channels": channels}
    if args.store:
        update["confirmation"] = settings.confirmation.model_copy(update={"store": args.store})
    settings = settings.model_copy(update=update)
    # The terminal is the chat: only warnings go to stderr.
    configure_logging(
        "warning" if settings.log.level == "info" else settings.log.level,
        settings.log.format,
        cache=True,
    )

    async def chat() -> None:
        await run_until_stopped(await build(settings, console=True, serve_http=False))

    try:
        asyncio.run(chat())
    except DataDirInUse as exc:  # `gateway serve` runs on it: say how to talk to that one
        raise DataDirInUse(exc.data_dir, exc.pid, instead=_chat_instead(configured)) from None
    return 0


def _chat_instead(settings: Settings) -> str:
    from gateway.http.server import local_url

    demo = "or run `gateway chat --store memory` for a separate demo (its own confirmations)"
    if not settings.channels.webchat.enabled:
        return f"stop it, {demo}"
    url = local_url(settings.server.host, settings.server.port)
    return f"chat with the running gateway in its web chat at {url}, {demo}"


# ---------------------------------------------------------------------- config


def cmd_check_config(args: argparse.Namespace) -> int:
    """What ``serve`` would refuse, plus what it would only warn about, without starting."""
    from gateway.app import check_settings

    unknown, malformed = environment_problems(os.environ)
    problems = [*malformed, *unknown]
    warnings: list[str] = []
    settings = None
    if not malformed:
        try:
            settings = load_settings(args.config)
        except ConfigError as exc:
            problems.append(str(exc))
    if settings is not None:
        problems += check_settings(settings)
        problems += placeholder_problems(
            settings, toml_path=resolve_config_path(args.config), environ=os.environ
        )
        try:
            kw = settings.keywords_file
            load_keywords(kw if kw.exists() else SHIPPED_KEYWORDS_FILE)
        except KeywordsError as exc:
            problems.append(f"keywords.file: {exc}")
        problems += _plugin_problems(settings)
        if not problems:  # the store's server, only once everything else is right
            problems += asyncio.run(_store_problems(settings))
        warnings += channel_warnings(settings)
        warnings += nudge_warnings(settings)
        warnings += open_file_warnings(settings)
        if settings.admin.token is None:
            warnings.append(
                "admin.token is not set: anyone who can open a connection to "
                f"{settings.server.host} (every local user and process) can decide "
                "confirmations through the admin API; set GATEWAY_ADMIN__TOKEN"
            )
        print(json.dumps(masked_dump(settings), indent=2, ensure_ascii=False))
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if problems:
        print("\nproblems:", file=sys.stderr)
        for p in problems:
            lines = p.replace("\n", "\n    ")  # a multi-line problem stays under its dash
            print(f"  - {lines}", file=sys.stderr)
        return EXIT_CONFIG
    print("\nconfiguration OK", file=sys.stderr)
    return 0


def _plugin_problems(settings: Settings) -> list[str]:
    """Import the plugin modules as ``serve`` would: one that is not found is named."""
    from gateway.tools.base import PluginError, ToolRegistry

    try:
        ToolRegistry([]).load_plugins(settings.tools.plugins)
    except PluginError as exc:
        return [str(exc)]
    return []


async def _store_problems(settings: Settings) -> list[str]:
    """Open and close the confirmation store when it is a server (Redis): is it there?"""
    if settings.confirmation.store != "redis":
        return []
    from gateway.storage.backends import open_store

    try:
        store = await open_store(settings)
    except ConfigError as exc:
        return [str(exc)]
    await store.close()
    return []


# ---------------------------------------------------------------------- keywords


def _keywords_path(args: argparse.Namespace) -> Path:
    return Path(args.file).expanduser().absolute() if args.file else _settings(args).keywords_file


def cmd_keywords(args: argparse.Namespace) -> int:
    path = _keywords_path(args)
    if args.action in ("add", "remove"):
        try:
            return _edit_keywords(args, KeywordStore.open(path))
        except OSError as exc:
            print(f"cannot write {path}: {exc.strerror}", file=sys.stderr)
            return EXIT_CONFIG
    # Reading needs no copy: before the first start the shipped words are in force.
    words = load_keywords(path if path.exists() else SHIPPED_KEYWORDS_FILE)
    if args.action == "list":
        print("confirm:", " ".join(words.confirm))
        print("cancel: ", " ".join(words.cancel))
        return 0
    # test
    from gateway.confirm.replies import ReplyParser

    parsed = ReplyParser(words).parse(args.text)
    parts = [parsed.intent.value]
    if parsed.matched:
        parts.append("words=" + ",".join(parsed.matched))
    if parsed.confirmation_id:
        parts.append(f"id={parsed.confirmation_id}")
    if parsed.reason:
        parts.append(f"reason={parsed.reason!r}")
    parts.append(f"({parsed.why})")
    print(" ".join(parts))
    return 0


def _edit_keywords(args: argparse.Namespace, store: KeywordStore) -> int:
    """``add`` / ``remove`` on the data dir's copy; comments and order are kept."""
    if args.action == "remove":
        store.remove(args.word)
        print(f"removed {args.word!r} from {store.path}")
        return 0
    try:
        store.add(args.list, args.word)
    except WordExists as exc:
        print(f"{exc} of {store.path}; nothing changed", file=sys.stderr)
        return 1
    print(f"added {args.word!r} to the {args.list} list of {store.path}")
    return 0
