"""``gateway grants list | show ID | revoke ID``: scoped grants on a running daemon.

Grants are given by approvers ("确认 30分钟", the admin page, or the API); this lists and
revokes them through the admin API, with the same URL and token rules as
``gateway confirmations``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.parse
from typing import Any

from gateway.cli.admin import (
    EXIT_FAILED,
    EXIT_OK,
    admin_client,
    common_options,
    print_answer,
    report_errors,
)


def _line(g: dict[str, Any]) -> str:
    until = time.strftime("%Y-%m-%d %H:%M", time.localtime(g["expires_at"]))
    where = (
        f"{g['requester']} in {g['session_key']}"
        if g["scope"] == "session"
        else json.dumps(g["args"], ensure_ascii=False)
    )
    head = f"{g['id']:<10} {g['scope']:<8} {g['tool']:<14}"
    return f"{head} until {until}  by {g['granted_by']}  {where}"


def cmd_grants(args: argparse.Namespace) -> int:
    return report_errors(_run, args)


def _run(args: argparse.Namespace) -> int:
    client = admin_client(args)
    if args.action == "list":
        status, body = client.request("GET", "/api/grants")
        if status != 200:
            print(f"error: {body.get('error', status)}", file=sys.stderr)
            return EXIT_FAILED
        found = body["grants"]
        print_answer(args, body, "\n".join(_line(g) for g in found) if found else "no live grants")
        return EXIT_OK
    gid = urllib.parse.quote(args.id, safe="")
    if args.action == "show":
        status, body = client.request("GET", f"/api/grants/{gid}")
        text = ""
        if status == 200:
            trail = [
                f"  {time.strftime('%H:%M:%S', time.localtime(e['at']))} {e['kind']:<8} "
                f"{e['actor'] or ''} {e['detail']}"
                for e in body["events"]
            ]
            text = "\n".join([_line(body["grant"]), *trail])
    else:
        status, body = client.request("POST", f"/api/grants/{gid}/revoke", {"actor": args.actor})
        text = f"revoked {args.id}"
    if status != 200:
        print(f"error: {body.get('error', status)}", file=sys.stderr)
        return EXIT_FAILED
    print_answer(args, body, text)
    return EXIT_OK


def register(subparsers: Any) -> None:
    """Add ``grants`` to the ``gateway`` command."""
    common = common_options()
    p = subparsers.add_parser("grants", help="list and revoke scoped grants (admin API)")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser("list", parents=[common], help="live grants, oldest first")
    show = actions.add_parser("show", parents=[common], help="one grant and its audit trail")
    show.add_argument("id")
    revoke = actions.add_parser("revoke", parents=[common], help="end a grant now")
    revoke.add_argument("id")
    revoke.add_argument("--actor", default="admin", help="name recorded as the revoker")
    p.set_defaults(handler=cmd_grants)
