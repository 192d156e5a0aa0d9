"""The base of every settings section."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A TOML table of settings."""

    # A misspelt key in a TOML section is an error, not silently ignored.
    model_config = ConfigDict(extra="forbid")
