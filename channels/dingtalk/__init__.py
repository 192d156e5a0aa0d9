"""DingTalk channel (stream mode or HTTP robot mode) with confirmation cards.

Only ``create_channel`` lives here, so importing this package loads neither the
channel nor the dingtalk-stream SDK; the composition root calls it only when
``[channels.dingtalk] enabled = true``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from channels.base import Channel, ChannelContext


def create_channel(context: ChannelContext) -> Channel:
    """Build the DingTalk channel (imports the channel module, and the SDK in stream mode)."""
    from channels.dingtalk.channel import DingTalkChannel

    return DingTalkChannel(context)


__all__ = ["create_channel"]
