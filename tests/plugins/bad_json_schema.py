"""A plugin whose tool has a type hint pydantic cannot turn into a JSON schema."""

from collections.abc import Callable

from gateway.tools.base import tool


@tool
def takes_callback(callback: Callable[[int], int]) -> int:
    """Models cannot pass functions."""
    return callback(1)
