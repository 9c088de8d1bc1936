"""Hypothesis pieces for the record packers' equivalence tests (a compiled packer against its
pure reference): the message fields drawn mostly in range and sometimes out of it (values no
field takes: too large, not exact ints), the topics and store hosts of the layouts' edge cases."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from rocketq.message import BrokerMessage

I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
#: values no field takes: out of range, not exact ints
ODD_INTS = st.sampled_from([2**31, -(2**31) - 1, 2**63, True, 1.0, None])
#: topics of one byte, a usual one, and both sides of the one-byte length's limit
TOPICS = st.sampled_from([b"T", b"TopicA", b"x" * 127, b"x" * 128])
#: an IPv4 store host and an IPv6 one
STORE_HOSTS = st.sampled_from([bytes([10, 0, 0, 1, 0, 0, 0x2A, 0x9F]), bytes(range(20))])
#: a body CRC in range, and one past it
CRCS = st.one_of(st.integers(0, 2**31 - 1), st.just(2**31))


def mostly(draw: st.DrawFn, base: st.SearchStrategy[int]) -> Any:
    """A value of ``base`` 25 times in 26, else one no field takes."""
    return draw(base) if draw(st.integers(0, 25)) else draw(ODD_INTS)


def broker_message(draw: st.DrawFn, sys_flag: Any) -> BrokerMessage:
    """A message of small body and properties whose numeric fields are drawn by :func:`mostly`."""
    return BrokerMessage(
        topic="T",
        body=draw(st.binary(max_size=40)),
        properties=draw(st.binary(max_size=30)),
        queue_id=mostly(draw, I32),
        flag=mostly(draw, I32),
        sys_flag=sys_flag,
        born_timestamp=mostly(draw, I64),
        born_host=draw(st.sampled_from([bytes(range(8)), bytes(20), b"\x01" * 7])),
        reconsume_times=mostly(draw, I32),
        prepared_transaction_offset=mostly(draw, I64),
    )
