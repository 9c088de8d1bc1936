"""The blocking producer's plain send, compiled (``rocketq._speedups.plain_send_frame``), against
its pure-Python reference (:func:`rocketq.client.send_plain.pure_plain_send_frame`) and against
what the general path makes of the same message: the same None (nothing taken) for a message
that is not plain, else the same id, the same sequence left behind, and the frame
``send_request_frame`` writes for the message with its two properties and the call's opaque.
The id is the one :class:`~rocketq.message.UniqueIdGenerator` gives next, with its clock pinned.
Skipped, saying why, when the compiled module is not in use."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests._support.fixed_clock import NOW_NS

from rocketq import speedups
from rocketq.client.send_plain import plain_properties, plain_send_frame, pure_plain_send_frame
from rocketq.client.send_request import pure_send_request_frame
from rocketq.message import Message, UniqueIdGenerator, pure_seq_take, seq_take
from rocketq.remoting.command import next_opaque

compiled_only = pytest.mark.skipif(
    speedups.COMPILED is None, reason=f"compiled codecs not in use: {speedups.REASON}"
)
NOW_MS = NOW_NS // 1_000_000


class Sub(Message):
    """A Message subclass: not plain (its attributes could be anything)."""


texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=12) | st.sampled_from(["T", "é\u2028", '"\\'])
# a plain message, or one with a single field that may make it not plain (or an odd value)
plain_fields = {
    "topic": st.sampled_from(["T", "Topic_1"]) | texts,
    "body": st.binary(min_size=1, max_size=48),
    "tags": st.none(),
    "keys": st.just(()),
    "properties": st.just({}),
    "delay_level": st.sampled_from([0, -1]),
    "flag": st.sampled_from([0, 7, -1, 2**63 - 1, -(2**63)]),
}
odd_fields = {
    "body": st.sampled_from([b"", bytearray(b"x"), memoryview(b"x")]),
    "tags": st.sampled_from(["", "TagA"]),
    "keys": st.sampled_from([[], ("k",), ["", ""], ("",)]),
    "properties": st.sampled_from([{"a": "b"}, {"": ""}]),
    "delay_level": st.sampled_from([1, 3, 2**64]),
    "flag": st.sampled_from([2**63, -(2**63) - 1, True]),
}


@st.composite
def messages(draw: st.DrawFn) -> Message:
    fields = {name: draw(strategy) for name, strategy in plain_fields.items()}
    if draw(st.booleans()):
        name = draw(st.sampled_from(sorted(odd_fields)))
        fields[name] = draw(odd_fields[name])
    cls = draw(st.sampled_from([Message, Message, Message, Sub]))
    return cls(**fields)


prefixes = st.sampled_from(["7F000001A1B2C3D4E5F6", "20010DB8" * 5, "", "é"])
offsets = st.one_of(st.integers(0, 0xFFFFFFFF), st.sampled_from([0, 0xFFFFFFFF, -1, 2**32, 2**70]))
seqs = st.one_of(
    st.integers(0, 0xFFFF).map(lambda v: [v]),
    st.sampled_from([[0xFFFF], [0x10000], [-1], [1, 2], [], [True]]),
)


def call(fn: Any, msg: Message, seq: list[int], *args: Any) -> tuple[str, Any]:
    """``fn``'s outcome with the opaque it took, and its frame checked against the general
    path's frame of the same message: ("none", None), ("made", (msg_id, seq after)) or the error."""
    group, queue_id, broker, max_body, threshold, prefix, offset, born = args
    try:
        made = fn(msg, group, queue_id, broker, max_body, threshold, prefix, offset, seq, born)
    except Exception as exc:  # the same exception type and message both ways
        return type(exc).__name__, str(exc)
    if made is None:
        return "none", list(seq)
    frame, opaque, msg_id = made
    expected = pure_send_request_frame(
        opaque,
        group,
        msg.topic,
        queue_id,
        0,
        born,
        msg.flag,
        plain_properties(msg_id),
        False,
        broker,
        msg.body,
    )
    assert frame == expected
    return "made", (msg_id, list(seq))


@compiled_only
@settings(max_examples=500, deadline=None)
@given(
    msg=messages(),
    group=texts,
    queue_id=st.sampled_from([0, 3, -1, 2**40, 2**64]),
    broker=texts,
    max_body=st.sampled_from([4 * 1024 * 1024, 4 * 1024 * 1024, 1, 16, 2**64]),
    threshold=st.sampled_from([4096, 4096, 0, 8, -1]),
    prefix=prefixes,
    offset=offsets,
    seq=seqs,
    born=st.sampled_from([NOW_MS, 0, -5, 2**64]),
)
def test_the_compiled_plain_send_is_the_pure_one(
    msg: Message,
    group: str,
    queue_id: int,
    broker: str,
    max_body: int,
    threshold: int,
    prefix: str,
    offset: int,
    seq: list[int],
    born: int,
) -> None:
    args = (group, queue_id, broker, max_body, threshold, prefix, offset, born)
    compiled, pure = list(seq), list(seq)
    assert call(plain_send_frame, msg, compiled, *args) == call(pure_plain_send_frame, msg, pure, *args)


@compiled_only
@settings(max_examples=200, deadline=None)
@given(
    now_ms=st.one_of(st.just(NOW_MS), st.integers(0, 2**42)),
    start=st.integers(0, 0xFFFF),
)
def test_the_plain_id_is_the_generators_next_and_the_opaque_next_opaques(now_ms: int, start: int) -> None:
    """With the generator's clock pinned, an id made by the plain send sits between two
    ``next_id`` calls (same prefix and time field, the next sequence number), and its opaque
    between two ``next_opaque`` calls."""
    gen = UniqueIdGenerator(bytes([10, 0, 0, 1]), clock_ms=lambda: now_ms)
    gen._seq = [start]
    before, opaque_before = gen.next_id(), next_opaque()
    made = plain_send_frame(
        Message("T", b"body"), "PG", 1, "broker-a", 1024, 1024, gen._prefix, gen.offset_ms(), gen._seq, now_ms
    )
    assert made is not None
    after, opaque_after = gen.next_id(), next_opaque()
    _, opaque, msg_id = made
    assert [before[:-4], msg_id[:-4], after[:-4]] == [before[:-4]] * 3
    assert [int(i[-4:], 16) for i in (before, msg_id, after)] == [
        start,
        (start + 1) & 0xFFFF,
        (start + 2) & 0xFFFF,
    ]
    assert opaque_before % 0x7FFFFFFF + 1 == opaque and opaque % 0x7FFFFFFF + 1 == opaque_after


@settings(max_examples=200, deadline=None)
@given(start=st.integers(0, 0xFFFF), n=st.one_of(st.integers(0, 70_000), st.just(2**62)))
def test_seq_take_is_the_pure_one(start: int, n: int) -> None:
    compiled, pure = [start], [start]
    assert seq_take(compiled, n) == pure_seq_take(pure, n) == start
    assert compiled == pure == [(start + n) & 0xFFFF]


@compiled_only
@pytest.mark.parametrize("seq", [[0x10000], [-1], [1, 2], [], (5,), [1.0]])
def test_seq_take_refuses_a_sequence_it_does_not_hold(seq: Any) -> None:
    with pytest.raises(ValueError):
        seq_take(seq, 1)
