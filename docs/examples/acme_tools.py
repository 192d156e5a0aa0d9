"""A tool plugin for the gateway: docs/plugins.md walks through it, tests run it.

Put this file in a directory on PYTHONPATH (or ship it in a package you pip install) and
list the module in the settings: [tools] plugins = ["acme_tools"].
"""

from __future__ import annotations

from typing import Literal

from gateway.tools.base import tool

ORDERS = {7: "shipped", 8: "paid"}


@tool
def order_status(order_id: int) -> str:
    """Look up an order's status."""  # the description the model sees
    return ORDERS.get(order_id, "unknown order")


@tool(requires_confirmation=True, risk="high")
async def refund(order_id: int, amount: float, currency: Literal["CNY", "USD"] = "CNY") -> str:
    """Refund an order. Held until a person approves it."""
    return f"refunded {amount:.2f} {currency} on order {order_id}"
