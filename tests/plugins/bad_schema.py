"""A plugin whose tool cannot be described to a model: a parameter without a type hint."""

from gateway.tools.base import tool


@tool
def untyped(x):  # type: ignore[no-untyped-def]
    return x
