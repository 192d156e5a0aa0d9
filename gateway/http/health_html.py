"""The admin page's health panel: the channels, the confirmation store, and every
instance (replica) the store knows, alive or dead, this one marked.

Rendered for the whole page and for ``/admin/part/health``, which the page's script
re-reads on each event and every few seconds. The instances come from
``gateway.http.instances.instances_report`` (also ``GET /api/instances``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gateway.http.page_html import bi, clock, e


def health_panel(channels: Sequence[Mapping[str, Any]], report: Mapping[str, Any]) -> str:
    return (
        f"<h3>{bi('渠道', 'channels')}</h3>{channel_list(channels)}"
        f"<h3>{bi('存储', 'store')}</h3>{store_line(report['store'])}"
        f"<h3>{bi('实例', 'instances')}</h3>{instance_list(report)}"
    )


def channel_list(channels: Sequence[Mapping[str, Any]]) -> str:
    rows = "".join(
        f'<li class="{"ok" if ch.get("ready") else "bad"}"><b>{e(ch.get("name", "?"))}</b> '
        f"{e('ready' if ch.get('ready') else ch.get('reason') or 'not ready')}</li>"
        for ch in channels
    )
    return f'<ul class="channels">{rows}</ul>'


def store_line(store: Mapping[str, Any]) -> str:
    if store.get("ready"):
        return f'<p class="store ok" data-ready="true"><b>{bi("就绪", "ready")}</b></p>'
    why = store.get("reason") or "not ready"
    return (
        f'<p class="store bad" data-ready="false" role="alert"><b>{bi("不可用", "down")}</b> '
        f'<span class="reason">{e(why)}</span></p>'
    )


def instance_list(report: Mapping[str, Any]) -> str:
    now = float(report["now"])
    lease = float(report["lease_seconds"])
    rule = (
        f'<p class="hint">{bi("心跳超过", "silent for more than")} {lease:g} s '
        f"{bi('即视为失联', 'counts as dead')}</p>"
    )
    instances: Sequence[Mapping[str, Any]] = report["instances"]
    if not instances:
        empty = bi("存储中没有实例。", "The store knows no instance.")
        return f'<p class="empty">{empty}</p>{rule}'
    rows = "".join(instance_row(i, now) for i in instances)
    return f'<ul class="rows instances">{rows}</ul>{rule}'


def instance_row(i: Mapping[str, Any], now: float) -> str:
    alive = bool(i["alive"])
    ago = max(0, round(now - float(i["seen_at"])))
    state = bi("存活", "alive") if alive else bi("失联", "dead")
    this = f'<span class="tag this">{bi("本实例", "this one")}</span>' if i["this"] else ""
    return (
        f'<li class="row instance {"ok" if alive else "bad"}{" this" if i["this"] else ""}" '
        f'data-id="{e(i["id"])}" data-alive="{"true" if alive else "false"}">'
        f'<b class="state">{state}</b>{this}'
        f'<span class="host">{e(i["host"])}</span>'
        f'<span class="pid">pid {e(i["pid"])}</span>'
        f'<span class="started">{bi("启动于", "started")} {e(clock(i["started_at"]))}</span>'
        f'<span class="seen">{bi(f"上次心跳 {ago} 秒前", f"last seen {ago} s ago")}</span>'
        f'<code class="iid">{e(i["id"])}</code></li>'
    )
