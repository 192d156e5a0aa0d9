"""A plugin module as a user would write one: loaded by ``[tools] plugins``."""

from __future__ import annotations

import asyncio
import threading
from typing import Literal

from gateway.tools.base import tool


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(description="Today's weather in a city (async).")
async def weather(city: str, unit: Literal["C", "F"] = "C") -> str:
    await asyncio.sleep(0)
    return f"{city}: 21°{unit}, sunny"


@tool(requires_confirmation=True, risk="high")
def send_email(to: str, subject: str, body: str = "") -> str:
    """Send an email (held for a person's approval)."""
    return f"sent to {to}: {subject}"


@tool(name="explode")
def explode_tool(reason: str) -> str:
    """Always fails (to test how a failing tool is reported)."""
    raise RuntimeError(f"boom: {reason}")


@tool
def refund(order_id: int, amount: float, currency: str = "CNY") -> str:
    """Refund an order."""
    return f"refunded {amount} {currency} on order {order_id}"


def not_a_tool() -> None:
    """Plain functions in a plugin module are ignored."""


@tool
def thread_kind() -> str:
    """Where sync tools run: 'worker' means off the event loop's thread."""
    return "main" if threading.current_thread() is threading.main_thread() else "worker"


@tool
def search_customers(filter: dict[str, str], limit: int = 10) -> str:
    """Search customers by field values."""
    return f"{limit} customers matching {filter}"
