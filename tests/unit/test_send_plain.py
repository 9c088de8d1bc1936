"""``plain_send``: the sends ``_prepare`` stores as they come and the lone send may take."""

from __future__ import annotations

import pytest

from rocketq.broker.send import plain_send
from rocketq.broker.sys_flag import CHECKED_SYS_FLAGS

PLAIN_PROPERTIES = "UNIQ_KEY\x01AB12\x02TAGS\x01TagA\x02WAIT\x01true\x02"


def test_an_ordinary_send_is_plain() -> None:
    assert plain_send("TopicA", 0, PLAIN_PROPERTIES)
    assert plain_send("TopicA", 0, None)
    assert plain_send("TopicA", 0, "")


@pytest.mark.parametrize("bit", [1 << i for i in range(32) if (1 << i) & (CHECKED_SYS_FLAGS | 0xC)])
def test_a_checked_sys_flag_bit_or_a_transaction_type_is_not_plain(bit: int) -> None:
    assert not plain_send("TopicA", bit, PLAIN_PROPERTIES)


def test_sys_flag_bits_nobody_checks_stay_plain() -> None:
    other = ~(CHECKED_SYS_FLAGS | 0xC) & 0xFFFF
    assert plain_send("TopicA", other, PLAIN_PROPERTIES)


def test_a_retry_topic_is_not_plain() -> None:
    assert not plain_send("%RETRY%GroupA", 0, PLAIN_PROPERTIES)
    assert plain_send("RETRY_LIKE", 0, PLAIN_PROPERTIES)


@pytest.mark.parametrize("value", ["true", "TRUE", "false", ""])
def test_the_transaction_property_in_any_form_is_not_plain(value: str) -> None:
    assert not plain_send("TopicA", 0, PLAIN_PROPERTIES + f"TRAN_MSG\x01{value}\x02")
