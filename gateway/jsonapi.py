"""Moved to gateway.http.jsonapi: this name stays only until channels/webchat imports it there.

Delete this file at merge time once ``channels/webchat`` imports ``gateway.http.jsonapi``.
"""

from __future__ import annotations

from aiohttp import web

from gateway.http.jsonapi import ApiError, check_name, read_json_object, required_string

__all__ = ["ApiError", "check_name", "install_middlewares", "read_json_object", "required_string"]


def install_middlewares(app: web.Application) -> None:
    """Nothing to do: gateway.http.server.HttpServer builds its app with every middleware."""
