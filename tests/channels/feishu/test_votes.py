"""A call that needs two approvers on Feishu (issue 25), through the real lark-oapi long
connection against the fake platform: the first approval patches every copy (the group's
card and each approver's direct copy) with "1/2 已批准", buttons kept; the second, from a
direct copy, approves and every copy shows it.
"""

from __future__ import annotations

from typing import Any

import pytest

from config.settings import Settings
from gateway.app import Gateway
from gateway.confirm.model import ExecState, Status
from tests.channels.feishu.conftest import (
    ALICE,
    buttons,
    card_text,
    make_settings,
    order_ids,
    wait_pending,
    wait_status,
    wait_until,
)
from tests.channels.feishu.test_direct_chats import BOB, CAROL, GROUP, click, copies, group_msg
from tests.fakes.feishu import FakeFeishu
from tests.support import wait_record

TWO = {"rules": [{"name": "two", "tool": "sql_modify", "approvals": 2}]}


@pytest.fixture
def settings(tmp_path: Any, fake: FakeFeishu) -> Settings:
    return make_settings(tmp_path, fake, approvers=[BOB, CAROL], policy=TWO)


async def test_two_approvers_every_copy_shows_the_tally_then_the_approval(
    gateway: Gateway, fake: FakeFeishu, settings: Settings
) -> None:
    fake.send_frame(group_msg(ALICE, "/sql DELETE FROM orders WHERE id = 3"))
    [conf] = await wait_pending(gateway)
    assert conf.approvals == 2
    group, direct = await copies(fake)
    assert "0/2 已批准 / approved 0 of 2" in card_text(group.content)

    # Bob clicks the group card: a vote, shown on the clicked card and on every copy.
    answer = fake.send_frame(click(conf, BOB, group.message_id, GROUP))
    tally = f"1/2 已批准：{BOB} / approved 1 of 2: {BOB}"
    for message_id in (group.message_id, direct[BOB].message_id, direct[CAROL].message_id):
        assert message_id is not None
        await wait_until(
            lambda m=message_id: tally in card_text(fake.card(m)),
            what=f"card {message_id} shows the tally",
        )
        assert buttons(fake.card(message_id)) != []  # still waiting: still decidable
    assert 3 in order_ids(settings)
    ack = await fake.wait_ack(answer)  # bob's toast says his vote counted
    assert ack.data["toast"]["type"] == "success"
    assert "1/2" in ack.data["toast"]["content"]

    # Carol approves from her direct copy: the second vote approves; the delete runs once.
    fake.send_frame(click(conf, CAROL, direct[CAROL].message_id, fake.p2p_chat(CAROL)))
    done = await wait_status(gateway, conf.id, Status.APPROVED)
    assert [v.actor for v in done.votes] == [BOB, CAROL]
    await wait_until(lambda: 3 not in order_ids(settings), what="row 3 deleted")
    for message_id in (group.message_id, direct[BOB].message_id, direct[CAROL].message_id):
        assert message_id is not None
        await wait_until(
            lambda m=message_id: f"{BOB}, {CAROL} 已批准" in card_text(fake.card(m)),
            what=f"card {message_id} approved",
        )
        # No decision is left to make; the group card may offer undo once the run ended.
        left = {b.get("element_id") for b in buttons(fake.card(message_id))}
        assert left <= {"btn_undo"}, left
    ran = await wait_record(gateway, conf.id, lambda c: c.execution.state.is_final, what="run")
    assert ran.execution.state is ExecState.SUCCEEDED and ran.execution.attempts == 1
