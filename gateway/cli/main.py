"""The ``gateway`` command: ``serve | chat | keywords | check-config``, plus
``confirmations`` (gateway.cli.admin) and ``policy`` (gateway.cli.policy).

This module parses the command line only: each command's module is imported when it
runs, so ``gateway --help`` loads no settings, SQL or web code (0.3 s goal, issue 14).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from gateway.cli import admin, grants, init, policy

EXIT_CONFIG = 2

Handler = Callable[[argparse.Namespace], int]
CONFIG_HELP = "TOML settings file (default ./gateway.toml if present)"


class _VersionAction(argparse.Action):
    """``--version``: the installed distribution's version, looked up only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from importlib.metadata import PackageNotFoundError, version

        from gateway.extras import DISTRIBUTION

        try:
            found = version(DISTRIBUTION)
        except PackageNotFoundError:  # run from a source tree that was never installed
            found = "unknown (not installed)"
        print(f"gateway {found}")  # on stdout, like argparse's own version action
        parser.exit()


def _command(name: str) -> Handler:
    """The handler ``gateway.cli.commands.<name>``, imported when the command runs."""

    def run(args: argparse.Namespace) -> int:
        from gateway.cli import commands

        handler: Handler = getattr(commands, name)
        return handler(args)

    return run


# ---------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gateway",
        description="Chat gateway that holds an agent's risky tool calls until a person approves.",
    )
    parser.add_argument("--version", action=_VersionAction, help="print the version and exit")
    parser.add_argument("--config", "-c", help=CONFIG_HELP)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("serve", help="run the daemon (web chat, admin API, enabled channels)")
    p.add_argument("--host", help="override server.host")
    p.add_argument("--port", type=int, help="override server.port")
    p.set_defaults(handler=_command("cmd_serve"))

    p = sub.add_parser(
        "chat", help="chat with the gateway in this terminal (or run a script of lines from stdin)"
    )
    p.add_argument("--user", help="your user id in the console channel (default: local)")
    p.add_argument(
        "--store",
        choices=["memory", "sqlite", "redis"],
        help="confirmation store (default from settings)",
    )
    p.set_defaults(handler=_command("cmd_chat"))

    p = sub.add_parser(
        "check-config", help="print effective settings (secrets masked); exit 2 on problems"
    )
    p.set_defaults(handler=_command("cmd_check_config"))

    p = sub.add_parser("keywords", help="list, edit or test the confirm/cancel words")
    p.add_argument(
        "--file", help="keywords file (default: keywords.file, else <data_dir>/keywords.toml)"
    )
    ks = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    ks.add_parser("list", help="show both lists")
    a = ks.add_parser("add", help="add a word: keywords add confirm|cancel WORD")
    a.add_argument("list", choices=["confirm", "cancel"])
    a.add_argument("word")
    r = ks.add_parser("remove", help="remove a word from whichever list has it")
    r.add_argument("word")
    t = ks.add_parser("test", help="show how a reply is read: confirm|cancel|unclear|none ...")
    t.add_argument("text")
    p.set_defaults(handler=_command("cmd_keywords"))

    admin.register(sub)
    grants.register(sub)
    policy.register(sub)
    init.register(sub)
    _accept_config_anywhere(parser)
    return parser


def _accept_config_anywhere(parser: argparse.ArgumentParser) -> None:
    """Let every subcommand take ``--config`` too: ``gateway serve --config x.toml``.

    SUPPRESS as the default keeps a subcommand from overwriting a ``--config`` given
    before it with None.
    """
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                child.add_argument("--config", "-c", default=argparse.SUPPRESS, help=CONFIG_HELP)
                _accept_config_anywhere(child)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # --help and usage errors exit here, before any import
    from config.keywords import KeywordsError
    from config.settings import ConfigError

    handler: Handler = args.handler
    try:
        return handler(args)
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except KeywordsError as exc:
        print(f"keywords error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
