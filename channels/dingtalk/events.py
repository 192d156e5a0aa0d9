"""The shape of the DingTalk payloads the channel reads, field by field.

A chatbot message (the stream's ``/v1.0/im/bot/messages/get`` topic and the HTTP robot
callback carry the same JSON) and a card button click (``/v1.0/card/instances/callback``).
Only the fields the channel reads are declared; anything else DingTalk sends is ignored.
Types are DingTalk's own (``createAt`` is a number of milliseconds, ``conversationType``
the string "1" or "2"), checked without coercion: see channels/payloads.py.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, StringConstraints, model_validator

from channels.payloads import Shape

NonEmpty = Annotated[str, StringConstraints(min_length=1)]
# Milliseconds since the epoch; bounded so that dividing it stays a finite float.
Millis = Annotated[int, Field(ge=0, le=10**16)]


class TextBody(Shape):
    content: str | None = None


class RichTextItem(Shape):
    text: str | None = None  # pictures in rich text have a downloadCode instead


class RichTextContent(Shape):
    """``content`` of a ``richText`` message (other message types have other contents)."""

    rich_text: list[RichTextItem] | None = Field(default=None, alias="richText")


class ChatbotMessageShape(Shape):
    # Without them the message can be neither answered nor told from a redelivery.
    msg_id: NonEmpty = Field(alias="msgId")
    conversation_id: NonEmpty = Field(alias="conversationId")
    sender_staff_id: str | None = Field(default=None, alias="senderStaffId")
    sender_id: str | None = Field(default=None, alias="senderId")
    conversation_type: str | None = Field(default=None, alias="conversationType")
    msgtype: str | None = None
    text: TextBody | None = None
    # Read as RichTextContent only for msgtype "richText".
    content: Any = None
    sender_nick: str | None = Field(default=None, alias="senderNick")
    is_in_at_list: bool | None = Field(default=None, alias="isInAtList")
    session_webhook: str | None = Field(default=None, alias="sessionWebhook")
    session_webhook_expired_time: Millis | None = Field(
        default=None, alias="sessionWebhookExpiredTime"
    )
    robot_code: str | None = Field(default=None, alias="robotCode")
    create_at: Millis | None = Field(default=None, alias="createAt")

    @model_validator(mode="after")
    def _has_a_sender(self) -> ChatbotMessageShape:
        if not (self.sender_staff_id or self.sender_id):
            raise ValueError("neither senderStaffId nor senderId")
        return self


class CardParams(Shape):
    # The standard template's request buttons echo these (channels/dingtalk/cards.py).
    action: str | None = None
    id: str | None = None


class CardPrivateData(Shape):
    action_ids: list[str] | None = Field(default=None, alias="actionIds")
    params: CardParams | None = None


class CardContent(Shape):
    """The click's ``content`` (a JSON string in the callback)."""

    card_private_data: CardPrivateData | None = Field(default=None, alias="cardPrivateData")


class CardCallbackShape(Shape):
    out_track_id: str | None = Field(default=None, alias="outTrackId")
    user_id: str | None = Field(default=None, alias="userId")
    # A JSON string of CardContent; an object is read as well.
    content: str | dict[str, Any] | None = None
