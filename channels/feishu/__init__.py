"""Feishu (Lark) channel. ``lark_oapi`` is imported only by ``create_channel``, so a
gateway without Feishu enabled never pays for (or needs) the SDK import. Every module here
imports lark-oapi by full module paths, after ``defer_package_inits`` (sdk_imports.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from channels.feishu.sdk_imports import defer_package_inits

defer_package_inits()

if TYPE_CHECKING:
    from channels.base import Channel, ChannelContext


def create_channel(context: ChannelContext) -> Channel:
    """Build the Feishu channel from ``context.settings.channels.feishu``."""
    from channels.feishu.channel import FeishuChannel

    return FeishuChannel(context=context)


__all__ = ["create_channel"]
