"""Everything a chat user reads, in one place: Chinese first, English beside it.

Change wording here; channels and the core import ``gateway.texts`` and use its names.
By topic: ``confirm`` (prompts, decisions, outcomes, the ledger's lines), ``grants``,
``sql`` (what a statement's effect is), ``effects`` (its preview rows), ``admin`` (the /admin page),
``channels`` (platforms, terminal chat, model agent) and ``web`` (the web chat page), all
read as ``texts.NAME``; ``gateway.texts.approvers`` (imported by itself) holds what
approvers read in their direct chats, and ``gateway.texts.again`` (imported by itself)
what asking an ended call again says (gateway/confirm/again.py).
"""

from gateway.texts.admin import *  # noqa: F403
from gateway.texts.channels import *  # noqa: F403
from gateway.texts.confirm import *  # noqa: F403
from gateway.texts.effects import *  # noqa: F403
from gateway.texts.grants import *  # noqa: F403
from gateway.texts.sql import *  # noqa: F403
from gateway.texts.web import *  # noqa: F403
