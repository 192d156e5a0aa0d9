"""``gateway confirmations list | show ID | approve ID | reject ID --reason TEXT``.

``approve ID --arguments JSON`` approves the call with edited arguments (gateway/tools/edits.py).
``approve`` and ``reject`` need ``--actor NAME``: the token is an operator's, the decision a
person's.

Talks to a running daemon's admin API. The URL defaults to the configured server
(``[server] host/port``), the token to ``[admin] token`` / ``GATEWAY_ADMIN__TOKEN``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import unicodedata
import urllib.parse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from config.settings import Settings

EXIT_OK = 0
EXIT_FAILED = 1  # not found, already decided, refused
EXIT_UNREACHABLE = 3
EXIT_TOKEN = 4  # no admin token given, or not the daemon's (not "not found", issue 26)


class AdminClientError(Exception):
    def __init__(self, message: str, *, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


class AdminClient:
    """A tiny blocking client of the admin API (one request per command)."""

    def __init__(self, url: str, token: str | None, *, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def request(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        import urllib.error  # here, not at the top: `gateway --help` stays fast
        import urllib.request

        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return resp.status, _json(resp.read())
        except urllib.error.HTTPError as exc:
            payload = _json(exc.read())
            if exc.code == 401:
                fix = (
                    "set GATEWAY_ADMIN__TOKEN (or [admin] token in the config) to the "
                    "daemon's token, or pass --token"
                )
                raise AdminClientError(
                    f"the daemon refused the admin token (not the daemon's): {fix}"
                    if self.token
                    else f"no admin token given, and the daemon needs one: {fix}",
                    code=EXIT_TOKEN,
                ) from exc
            return exc.code, payload
        except urllib.error.URLError as exc:
            raise AdminClientError(
                f"cannot reach the gateway at {self.url}: {exc.reason}; is `gateway serve` "
                "running? (pass --url if it listens elsewhere)",
                code=EXIT_UNREACHABLE,
            ) from exc


def _json(raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw or b"{}")
    except ValueError:
        return {"error": raw.decode("utf-8", "replace")[:200]}
    return data if isinstance(data, dict) else {"data": data}


def _default_url(settings: Settings) -> str:
    host = settings.server.host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{settings.server.port}"


def admin_client(args: argparse.Namespace) -> AdminClient:
    token = args.token
    url = args.url
    if token is None or url is None:
        from config.settings import load_settings

        settings = load_settings(args.config)
        if token is None and settings.admin.token is not None:
            token = settings.admin.token.get_secret_value() or None
        if url is None:
            url = _default_url(settings)
    return AdminClient(url, token, timeout=args.timeout)


def _fmt_time(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


def _line(c: dict[str, Any]) -> str:
    """One record a line; its stage in the words its cards use (``已执行 / done``)."""
    from gateway import texts

    left = ""
    if c["status"] == "pending":
        left = f"  {max(0, int(c['expires_at'] - time.time()))}s left"
    who = f" by {c['decided_by']} via {c['decided_via']}" if c.get("decided_by") else ""
    widest = max(_width(texts.stage_label(at)) for at in texts.Stage)
    return (
        f"{c['id']:<6} {_padded(_stage_label(c), widest)} {c['risk']:<8} "
        f"{c['session_key']:<24} {c['summary']}{who}{left}"
    )


def _stage_label(c: dict[str, Any]) -> str:
    from gateway import texts
    from gateway.confirm.model import Confirmation

    return texts.stage_label(texts.stage(Confirmation.from_dict(c)))


def _width(text: str) -> int:
    """Columns ``text`` takes in a terminal: a Chinese character takes two."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _padded(text: str, width: int) -> str:
    return text + " " * max(0, width - _width(text))


def _details(c: dict[str, Any]) -> str:
    lines = [
        f"id:          {c['id']}",
        f"status:      {c['status']}",
        *_outcome(c),
        f"session:     {c['session_key']}",
        f"requester:   {c['requester']}",
        f"tool:        {c['tool_call']['name']}",
        f"summary:     {c['summary']}",
        f"risk:        {c['risk']}",
        f"created:     {_fmt_time(c['created_at'])}",
        f"expires:     {_fmt_time(c['expires_at'])}",
    ]
    statement = c.get("details", {}).get("statement")
    if statement:
        lines.append(f"statement:   {statement}")
    else:
        lines.append(f"args:        {json.dumps(c['tool_call']['args'], ensure_ascii=False)}")
    rows = c.get("details", {}).get("rows_affected")
    if rows is not None:
        lines.append(f"rows:        {rows}")
    if c.get("decided_by") or c["status"] != "pending":
        lines.append(
            f"decided:     {c.get('decided_by') or '-'} via {c.get('decided_via') or '-'}"
            f" at {_fmt_time(c.get('decided_at'))}"
        )
    if c.get("reason"):
        lines.append(f"reason:      {c['reason']}")
    lines += _execution(c.get("execution") or {})
    return "\n".join(lines)


def _outcome(c: dict[str, Any]) -> list[str]:
    """What its cards and chat say of it, in the same words (gateway/texts): its stage, and
    once settled the sentence."""
    from gateway import texts
    from gateway.confirm.model import Confirmation

    record = Confirmation.from_dict(c)
    lines = [f"stage:       {texts.stage_label(texts.stage(record))}"]
    if record.status.is_terminal:
        lines.append(f"outcome:     {texts.outcome(record)}")
    return lines


def _execution(ex: dict[str, Any]) -> list[str]:
    """The execution ledger: state, who claimed it, when it ran, how it ended."""
    if not ex:
        return []
    lines = [f"execution:   {ex['state']}"]
    if ex.get("claimed_by"):
        lines.append(f"claimed by:  {ex['claimed_by']} (attempt {ex.get('attempts') or 1})")
    if ex.get("started_at"):
        lines.append(f"started:     {_fmt_time(ex['started_at'])}")
    if ex.get("finished_at"):
        lines.append(f"finished:    {_fmt_time(ex['finished_at'])}")
    if ex.get("result"):
        label = "error:      " if ex["state"] == "failed" else "result:     "
        lines.append(f"{label} {ex['result']}")
    return lines


def _events(events: list[dict[str, Any]]) -> str:
    """The audit trail, one line per transition: time, kind, actor, detail."""
    if not events:
        return "events:      none recorded"
    lines = ["events:"]
    for e in events:
        detail = " ".join(
            f"{k}={v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}"
            for k, v in (e.get("detail") or {}).items()
        )
        actor = e.get("actor") or "-"
        lines.append(f"  {_fmt_time(e['at'])}  {e['kind']:<15} {actor:<12} {detail}".rstrip())
    return "\n".join(lines)


def print_answer(args: argparse.Namespace, payload: Any, text: str) -> None:
    if args.json:
        print(json.dumps(payload, ensure_ascii=False, indent=2))
    else:
        print(text)


def report_errors(run: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run an admin command; a failed call prints one line and exits with its code."""
    try:
        return run(args)
    except AdminClientError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code


def cmd_confirmations(args: argparse.Namespace) -> int:
    return report_errors(_run, args)


def _run(args: argparse.Namespace) -> int:
    client = admin_client(args)
    if args.action == "list":
        return _list(args, client)
    cid = urllib.parse.quote(args.id, safe="")
    if args.action == "show":
        status, body = client.request("GET", f"/api/confirmations/{cid}")
        trail: dict[str, Any] = {}
        if status == 200:
            status, trail = client.request("GET", f"/api/confirmations/{cid}/events")
        if status != 200:
            print(f"error: {(trail or body).get('error', status)}", file=sys.stderr)
            return EXIT_FAILED
        body["events"] = trail["events"]
        print_answer(args, body, _details(body["confirmation"]) + "\n" + _events(trail["events"]))
        return EXIT_OK
    decision = "approve" if args.action == "approve" else "reject"
    request: dict[str, Any] = {"decision": decision, "actor": args.actor}
    if args.reason:
        request["reason"] = args.reason
    if getattr(args, "arguments", None) is not None:
        request["arguments"] = args.arguments
    status, body = client.request("POST", f"/api/confirmations/{cid}/decision", request)
    if status == 200:
        print_answer(args, body, body.get("message") or _line(body["confirmation"]))
        return EXIT_OK
    message = body.get("error") or body.get("message") or f"HTTP {status}"
    where = f" ({body['field']})" if body.get("field") else ""
    print(f"error: {message}{where}", file=sys.stderr)
    if args.json:
        print(json.dumps(body, ensure_ascii=False, indent=2))
    return EXIT_FAILED


def _json_object(text: str) -> dict[str, Any]:
    """``--arguments``: a JSON object, or a usage error saying what is wrong."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError('must be a JSON object, e.g. {"sql": "..."}')
    return value


def _list(args: argparse.Namespace, client: AdminClient) -> int:
    """One page, newest first; the last line says how to ask for the next."""
    params = {
        k: v
        for k, v in (
            ("status", args.status),
            ("session", args.session),
            ("limit", args.limit),
            ("cursor", args.cursor),
        )
        if v
    }
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    status, body = client.request("GET", f"/api/confirmations{query}")
    if status != 200:
        print(f"error: {body.get('error', status)}", file=sys.stderr)
        return EXIT_FAILED
    found = body["confirmations"]
    lines = [_line(c) for c in found] if found else ["no confirmations"]
    if body.get("next_cursor"):
        lines.append(f"next page: --cursor {body['next_cursor']}")
    print_answer(args, body, "\n".join(lines))
    return EXIT_OK


def common_options() -> argparse.ArgumentParser:
    """--url, --token, --timeout, --json: a parent parser for every admin API command."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", help="the daemon's base URL (default from [server] host/port)")
    common.add_argument(
        "--token",
        default=None,
        help="admin token (default [admin] token / GATEWAY_ADMIN__TOKEN; prefer the env)",
    )
    common.add_argument("--timeout", type=float, default=10.0, help="seconds per request")
    common.add_argument("--json", action="store_true", help="print the API's JSON")
    return common


def register(subparsers: Any) -> None:
    """Add ``confirmations`` to the ``gateway`` command."""
    # Options go after the action (``confirmations list --url ...``), via a parent parser.
    common = common_options()
    p = subparsers.add_parser(
        "confirmations", help="list and decide confirmations on a running daemon (admin API)"
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    ls = actions.add_parser("list", parents=[common], help="list confirmations, newest first")
    ls.add_argument("--status", choices=["pending", "approved", "rejected", "expired", "cancelled"])
    ls.add_argument("--session", help="a session key, e.g. webchat:lobby")
    ls.add_argument("--limit", type=int, default=50, help="how many per page (1-1000)")
    ls.add_argument("--cursor", help="the cursor a previous page printed, for the next page")
    show = actions.add_parser(
        "show", parents=[common], help="one confirmation in full: execution and events"
    )
    show.add_argument("id")
    for name in ("approve", "reject"):
        a = actions.add_parser(
            name, parents=[common], help=f"{name} a pending confirmation as the operator"
        )
        a.add_argument("id")
        # Required, no default: four-eyes compares the decider with the requester, and a
        # default (the old "admin", or $USER, often root) would pass for anyone (issue 22).
        a.add_argument(
            "--actor",
            required=True,
            help="your name as the requester's chat knows people (recorded as the decider; "
            "four-eyes refuses the requester's own approval)",
        )
        a.add_argument("--reason", required=name == "reject", help="why (required to reject)")
    approve = actions.choices["approve"]
    approve.add_argument(
        "--arguments",
        type=_json_object,
        metavar="JSON",
        help="run the call with these arguments instead (all of them, a JSON object); the "
        "daemon checks them against the tool's schema and the policy",
    )
    p.set_defaults(handler=cmd_confirmations)
