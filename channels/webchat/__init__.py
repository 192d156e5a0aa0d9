"""The built-in web chat: ``GET /``, ``/ws`` and ``/api/chat/...`` on the shared server."""

from __future__ import annotations

from channels.base import ChannelContext
from channels.webchat.channel import WebChatChannel

__all__ = ["WebChatChannel", "create_channel"]


def create_channel(context: ChannelContext) -> WebChatChannel:
    """Build the channel and register its routes (called before the server starts)."""
    channel = WebChatChannel(
        settings=context.settings.channels.webchat,
        bus=context.bus,
        confirmations=context.confirmations,
        metrics=context.metrics,
        history=context.rooms,
        max_json_depth=context.settings.server.max_json_depth,
    )
    if context.http is not None:
        channel.register_routes(context.http)
    return channel
