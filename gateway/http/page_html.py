"""The admin page's HTML, rendered on the server: the whole page and the parts its script
re-reads when an event arrives (one renderer for both, so a refresh looks like a load).

Every value from a record or a person goes through ``e`` (HTML escaping): tool
arguments, reasons and names are typed by people and models.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from html import escape

from gateway.confirm.direct import asks_approvers_directly, direct_recipients_told
from gateway.confirm.grants import Grant, grant_offered
from gateway.confirm.model import AuditEvent, Confirmation, Status

STATUSES = [s.value for s in Status]


def e(value: object) -> str:
    return escape(str(value), quote=True)


def bi(zh: str, en: str) -> str:
    """Chinese first, English beside it."""
    return f'{e(zh)} <span class="en">{e(en)}</span>'


def clock(at: float | None) -> str:
    if at is None:
        return "—"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def layout(title: str, body: str, *, actor: str | None = None, logout: bool = False) -> str:
    who = ""
    if actor:
        who = f'<span class="actor">{bi("操作人", "acting as")} <b>{e(actor)}</b></span>'
    elif actor is not None:  # "": the page is open but nobody said who they are
        who = f'<a class="actor" href="/admin/login">{bi("登录后才能决定", "log in to decide")}</a>'
    out = (
        '<form method="post" action="/admin/logout" class="logout">'
        f'<button type="submit">{bi("退出", "Log out")}</button></form>'
        if logout
        else ""
    )
    return f"""<!doctype html>
<html lang="zh-CN">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{e(title)}</title>
<link rel="stylesheet" href="/admin/static/admin.css">
<script src="/admin/static/admin.js" defer></script>
</head>
<body>
<header class="bar"><h1><a href="/admin">{bi("网关管理", "Gateway admin")}</a></h1>
<span id="live" class="live off">{bi("未连接", "offline")}</span>{who}{out}</header>
<main>
{body}
</main>
</body>
</html>
"""


def login_page(error: str | None, *, token: bool, known_as: str | None) -> str:
    """The login form: the person's name (decisions are theirs, four-eyes compares it with
    the requester), unless the login proxy names them; and the admin token, if one is set."""
    problem = f'<p class="error" role="alert">{e(error)}</p>' if error else ""
    if known_as:
        says = bi("登录代理认定你是", "the login proxy says you are")
        name = f"<p>{says} <b>{e(known_as)}</b></p>"
    else:
        label = bi("你的名字（决定以此署名）", "Your name (decisions are recorded as yours)")
        name = f"""<label>{label}
<input type="text" name="name" autocomplete="username" maxlength="64" required autofocus></label>"""
    secret = ""
    if token:
        secret = f"""<label>{bi("管理令牌", "Admin token")}
<input type="password" name="token" autocomplete="current-password" required></label>"""
    hint = ""
    if token:
        hint = f"""<p class="hint">{bi("令牌即", "the token is")} <code>[admin] token</code> /
<code>GATEWAY_ADMIN__TOKEN</code></p>"""
    body = f"""<section class="panel login">
<h2>{bi("登录", "Log in")}</h2>
{problem}
<form method="post" action="/admin/login">
{name}
{secret}
<button type="submit">{bi("登录", "Log in")}</button>
</form>
{hint}
</section>"""
    return layout("登录 · Log in", body)


# ---------------------------------------------------------------------- the main page


def admin_page(
    *,
    pending: Sequence[Confirmation],
    history: Sequence[Confirmation],
    grants: Sequence[Grant],
    query: Mapping[str, str],
    words: Mapping[str, Sequence[str]],
    keywords_file: str,
    keywords_error: str | None,
    tools: Sequence[str],
    health: str,
    actor: str | None,
    logout: bool,
    now: float,
) -> str:
    """The whole page; ``health`` is the health panel's HTML (gateway/http/health_html.py)."""
    body = f"""<section class="panel" id="pending">
<h2>{bi("待确认", "Pending")}</h2>
<p id="notice" class="notice" role="status" hidden></p>
<div id="pending-list">{pending_list(pending, now)}</div>
</section>
<section class="panel" id="grants">
<h2>{bi("免确认授权", "Grants")}</h2>
<div id="grants-list">{grants_list(grants)}</div>
</section>
<section class="panel" id="history">
<h2>{bi("历史", "History")}</h2>
{history_form(query)}
<div id="history-list">{history_list(history)}</div>
</section>
<section class="panel" id="keywords">
<h2>{bi("确认词与取消词", "Keywords")}</h2>
<div id="keywords-lists">{keyword_lists(words, keywords_file, keywords_error)}</div>
{keyword_forms()}
</section>
<section class="panel" id="policy">
<h2>{bi("策略测试", "Policy tester")}</h2>
{policy_form(tools)}
</section>
<section class="panel" id="health">
<h2>{bi("实例与渠道", "Instances and channels")}</h2>
<div id="health-body">{health}</div>
</section>"""
    return layout("网关管理 · Gateway admin", body, actor=actor or "", logout=logout)


def pending_list(items: Sequence[Confirmation], now: float) -> str:
    if not items:
        return f'<p class="empty">{bi("没有待确认的调用。", "Nothing is waiting.")}</p>'
    return "\n".join(pending_card(c, now) for c in items)


def pending_card(c: Confirmation, now: float) -> str:
    left = int(c.seconds_left(now))
    eyes = f' <span class="tag">{bi("四眼", "four-eyes")}</span>' if c.four_eyes else ""
    waits = " waits-for-approver" if asks_approvers_directly(c) else ""
    return f"""<article class="card{waits}" data-id="{e(c.id)}" data-status="{e(c.status.value)}">
<header><a class="cid" href="/admin/confirmations/{e(c.id)}">{e(c.id)}</a>
<span class="tool">{e(c.tool_call.name)}</span>
<span class="risk risk-{e(c.risk.value)}">{e(c.risk.value)}</span>{eyes}</header>
{waiting_for_approver(c)}
<p class="summary">{e(c.summary)}</p>
{statement(c)}
<dl class="meta">
<dt>{bi("会话", "session")}</dt><dd class="session">{e(c.session_key)}</dd>
<dt>{bi("发起人", "requester")}</dt><dd class="requester">{e(c.requester)}</dd>
<dt>{bi("剩余", "time left")}</dt>
<dd class="left" data-expires="{c.expires_at}">{left // 60}:{left % 60:02d}</dd>
</dl>
<div class="actions">
<button type="button" class="approve" data-id="{e(c.id)}">{bi("批准", "Approve")}</button>
{grant_buttons(c)}
<input type="text" class="reason" maxlength="1000" placeholder="原因 reason" aria-label="reason">
<button type="button" class="reject" data-id="{e(c.id)}">{bi("拒绝", "Reject")}</button>
</div>
{arguments_editor(c)}
</article>"""


def waiting_for_approver(c: Confirmation) -> str:
    """Four-eyes and critical calls wait for an approver (or you): say so, and who was
    sent the prompt in a direct chat (gateway/confirm/direct.py)."""
    if not asks_approvers_directly(c):
        return ""
    why = bi("四眼", "four-eyes") if c.four_eyes else bi("严重风险", "critical")
    approvers = ", ".join(c.approvers) or "—"
    told = direct_recipients_told(c)
    sent = (
        f"<br>{bi('已私信', 'sent to the direct chats of')} "
        f'<span class="told">{e(", ".join(told))}</span>'
        if told
        else ""
    )
    waiting = bi("等待审批人或您决定", "waiting for an approver or you")
    return (
        f'<p class="waiting" role="note">⏳ {waiting} ({why}) · '
        f"{bi('审批人', 'approvers')} {e(approvers)}{sent}</p>"
    )


def arguments_editor(c: Confirmation) -> str:
    """Edit arguments, then approve: the call's JSON to change; the server checks it
    against the tool's schema and the policy (gateway/tools/edits.py), errors show here."""
    args = json.dumps(dict(c.tool_call.args), ensure_ascii=False, indent=2)
    rows = min(12, max(3, args.count("\n") + 2))
    return f"""<details class="edit">
<summary>{bi("修改参数后批准", "Edit arguments, then approve")}</summary>
<label>{bi("参数 (JSON)", "arguments (JSON)")}
<textarea class="edit-args" rows="{rows}" spellcheck="false" autocapitalize="off"
 data-id="{e(c.id)}">{e(args)}</textarea></label>
<p class="edit-error error" role="alert" hidden></p>
<button type="button" class="approve-edited" data-id="{e(c.id)}">
{bi("按修改后的参数批准", "Approve as edited")}</button>
</details>"""


def grant_buttons(c: Confirmation) -> str:
    """Approve and stop asking: never offered where a grant cannot apply (grants.py)."""
    if not grant_offered(c):
        return ""
    return (
        f'<button type="button" class="approve-grant" data-id="{e(c.id)}" data-scope="session" '
        f'data-minutes="30">{bi("批准，30 分钟内同类免确认", "Approve, skip asking 30 min")}'
        "</button>"
        f'<button type="button" class="approve-grant" data-id="{e(c.id)}" data-scope="call" '
        f'data-minutes="10080">{bi("总是批准此调用（7 天）", "Always this exact call (7 d)")}'
        "</button>"
    )


def grants_list(grants: Sequence[Grant]) -> str:
    if not grants:
        return f'<p class="empty">{bi("没有生效的授权。", "No live grants.")}</p>'
    rows = []
    for g in grants:
        covers = (
            f"{e(g.requester)} @ {e(g.session_key)}"
            if g.scope == "session"
            else f"<code>{e(json.dumps(dict(g.args), ensure_ascii=False))}</code>"
        )
        rows.append(
            f'<li class="row grant-row" data-id="{e(g.id)}"><b>{e(g.id)}</b>'
            f'<span class="tag">{e(g.scope)}</span><span class="tool">{e(g.tool)}</span>'
            f"<span>{covers}</span>"
            f'<span class="via">{bi("授权人", "by")} {e(g.granted_by)} · '
            f"{bi('至', 'until')} {e(clock(g.expires_at))}</span>"
            f'<button type="button" class="revoke-grant" data-id="{e(g.id)}">'
            f"{bi('撤销', 'Revoke')}</button></li>"
        )
    return f'<ul class="rows">{"".join(rows)}</ul>'


def statement(c: Confirmation) -> str:
    sql = c.details.get("statement")
    if sql:
        return f'<pre class="statement">{e(sql)}</pre>'
    args = json.dumps(dict(c.tool_call.args), ensure_ascii=False, indent=2)
    return f'<pre class="args">{e(args)}</pre>'


def history_form(query: Mapping[str, str]) -> str:
    def field(name: str, zh: str, en: str) -> str:
        value = e(query.get(name, ""))
        return f'<label>{bi(zh, en)}<input name="{name}" value="{value}" maxlength="128"></label>'

    chosen = query.get("status", "")
    options = "".join(
        f'<option value="{s}"{" selected" if s == chosen else ""}>{s}</option>' for s in STATUSES
    )
    return f"""<form id="history-form" class="filters" method="get" action="/admin#history">
{field("session", "会话", "session")}{field("tool", "工具", "tool")}
<label>{bi("状态", "status")}
<select name="status"><option value="">*</option>{options}</select></label>
{field("person", "人员", "person")}
<button type="submit">{bi("搜索", "Search")}</button>
</form>"""


def history_list(items: Sequence[Confirmation]) -> str:
    if not items:
        return f'<p class="empty">{bi("没有匹配的记录。", "No matching records.")}</p>'
    rows = "\n".join(history_row(c) for c in items)
    return f'<ul class="rows">{rows}</ul>'


def history_row(c: Confirmation) -> str:
    decided = (
        f'{e(c.decided_by or "—")} <span class="via">({e(c.decided_via or "")})</span>'
        if c.status is not Status.PENDING
        else ""
    )
    return f"""<li class="row" data-id="{e(c.id)}" data-status="{e(c.status.value)}">
<a class="cid" href="/admin/confirmations/{e(c.id)}">{e(c.id)}</a>
<span class="status status-{e(c.status.value)}">{e(c.status.value)}</span>
<span class="tool">{e(c.tool_call.name)}</span>{edited_tag(c)}
<span class="session">{e(c.session_key)}</span>
<span class="requester">{e(c.requester)}</span>
<span class="decider">{decided}</span>
<time>{e(clock(c.created_at))}</time>
<span class="summary">{e(c.summary)}</span>
</li>"""


def edited_tag(c: Confirmation) -> str:
    if c.edit_note is None:
        return ""
    return f'<span class="tag edited">{bi("参数已修改", "edited")}</span>'


def keyword_lists(words: Mapping[str, Sequence[str]], path: str, error: str | None) -> str:
    def one(kind: str, zh: str, en: str) -> str:
        items = "".join(
            f'<li><span class="word">{e(w)}</span><button type="button" class="remove-word" '
            f'data-list="{kind}" data-word="{e(w)}" aria-label="remove {e(w)}">×</button></li>'
            for w in words.get(kind, ())
        )
        return f'<div class="words" data-list="{kind}"><h3>{bi(zh, en)}</h3><ul>{items}</ul></div>'

    problem = f'<p class="error">{e(error)}</p>' if error else ""
    return (
        f"{one('confirm', '确认词', 'confirm')}{one('cancel', '取消词', 'cancel')}"
        f'<p class="hint">{bi("文件", "file")}: <code>{e(path)}</code></p>{problem}'
    )


def keyword_forms() -> str:
    return f"""<form id="add-word" class="inline">
<select name="list" aria-label="list"><option value="confirm">确认 confirm</option>
<option value="cancel">取消 cancel</option></select>
<input name="word" maxlength="64" required placeholder="好的 / sure" aria-label="word">
<button type="submit">{bi("添加", "Add")}</button>
</form>
<form id="reply-test" class="inline">
<label>{bi("这句回复会怎样理解？", "How would this reply be read?")}
<input name="text" maxlength="4000" required placeholder="确认 K7Q2"></label>
<button type="submit">{bi("测试", "Test")}</button>
</form>
<pre id="reply-result" class="result" hidden></pre>"""


def policy_form(tools: Iterable[str]) -> str:
    options = "".join(f'<option value="{e(t)}">{e(t)}</option>' for t in tools)
    example = '{"sql": "DELETE FROM orders WHERE id = 3"}'
    return f"""<form id="policy-test">
<label>{bi("工具", "tool")}<select name="tool">{options}</select></label>
<label>{bi("参数 (JSON)", "arguments (JSON)")}
<textarea name="args" rows="3">{e(example)}</textarea></label>
<button type="submit">{bi("测试", "Test")}</button>
</form>
<pre id="policy-result" class="result" hidden></pre>"""


# ---------------------------------------------------------------------- one record


def audit_trail(events: Sequence[AuditEvent]) -> str:
    """The record's transitions, oldest first: asked, read, decided, claimed, ran, ended."""
    if not events:
        return f'<p class="empty">{bi("没有审计记录。", "No audit events.")}</p>'
    rows = "".join(
        f'<li class="row event" data-kind="{e(ev.kind)}"><time>{e(clock(ev.at))}</time>'
        f"<b>{e(ev.kind)}</b><span>{e(ev.actor or '')}</span>"
        f'<span class="summary">{e(json.dumps(dict(ev.detail), ensure_ascii=False))}</span></li>'
        for ev in events
    )
    return f'<ul class="rows audit">{rows}</ul>'


def detail_page(
    c: Confirmation, events: Sequence[AuditEvent], *, actor: str | None, logout: bool, now: float
) -> str:
    record = json.dumps(c.to_dict(), ensure_ascii=False, indent=2)
    fields = [
        (bi("状态", "status"), e(c.status.value)),
        (bi("工具", "tool"), e(c.tool_call.name)),
        (bi("会话", "session"), e(c.session_key)),
        (bi("发起人", "requester"), e(c.requester)),
        (bi("风险", "risk"), e(c.risk.value)),
        (bi("创建于", "created"), e(clock(c.created_at))),
        (bi("决定人", "decided by"), e(c.decided_by or "—")),
        (bi("途径", "via"), e(c.decided_via or "—")),
        (bi("决定于", "decided at"), e(clock(c.decided_at))),
        (bi("原因", "reason"), e(c.reason or "—")),
        (bi("执行", "execution"), e(c.execution.state.value)),
        (bi("结果", "result"), e(c.execution.result or "—")),
    ]
    note = c.edit_note
    if note is not None:
        before = json.dumps(dict(note.get("args_before") or {}), ensure_ascii=False)
        fields.append((bi("修改人", "edited by"), e(note.get("by") or "—")))
        fields.append((bi("修改前参数", "arguments before"), f"<code>{e(before)}</code>"))
    dl = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in fields)
    card = pending_card(c, now) if c.status is Status.PENDING else ""
    body = f"""<section class="panel detail" data-id="{e(c.id)}">
<h2>{e(c.id)} · {e(c.summary)}</h2>
{card}
<dl class="meta">{dl}</dl>
<h3>{bi("调用参数", "arguments")}</h3>
<pre class="args">{e(json.dumps(dict(c.tool_call.args), ensure_ascii=False, indent=2))}</pre>
<h3>{bi("审计记录", "audit trail")}</h3>
{audit_trail(events)}
<details><summary>{bi("完整记录", "the whole record")}</summary><pre>{e(record)}</pre></details>
</section>"""
    return layout(f"{c.id} · Gateway admin", body, actor=actor or "", logout=logout)
