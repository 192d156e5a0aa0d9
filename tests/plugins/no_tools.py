"""A module listed as a plugin that defines no @tool."""


def helper() -> int:
    return 1
