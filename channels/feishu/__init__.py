"""Feishu (Lark) channel. ``lark_oapi`` is imported only by ``create_channel``, so a
gateway without Feishu enabled never pays for (or needs) the SDK import."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from channels.base import Channel, ChannelContext


def create_channel(context: ChannelContext) -> Channel:
    """Build the Feishu channel from ``context.settings.channels.feishu``."""
    from channels.feishu.channel import FeishuChannel

    return FeishuChannel(context=context)


__all__ = ["create_channel"]
