"""Properties of timed delivery's pure parts: never early, ordering of heap keys, snapshot codec."""

from __future__ import annotations

import heapq

from hypothesis import given
from hypothesis import strategies as st

from rocketq.message import BrokerMessage, decode_properties, encode_properties
from rocketq.store.timer import (
    TIMER_TOPIC,
    TimerPolicy,
    decode_snapshot,
    encode_snapshot,
    timer_out_ms,
    to_timer_topic,
)

EPOCH_MS = st.integers(min_value=1, max_value=(1 << 43) - 1)
PRECISION_MS = st.integers(min_value=1, max_value=60_000)
OFFSET = st.integers(min_value=0, max_value=(1 << 63) - 1)


@given(EPOCH_MS, PRECISION_MS)
def test_due_time_is_never_early_and_less_than_one_step_late(deliver_ms: int, precision_ms: int) -> None:
    due = timer_out_ms(deliver_ms, precision_ms) + precision_ms
    assert deliver_ms <= due < deliver_ms + precision_ms
    assert due % precision_ms == 0


@given(st.lists(st.tuples(EPOCH_MS, OFFSET), max_size=200))
def test_heap_keys_pop_in_time_then_offset_order(entries: list[tuple[int, int]]) -> None:
    heap = [(due << 64) | off for due, off in entries]
    heapq.heapify(heap)
    popped = [(k >> 64, k & ((1 << 64) - 1)) for k in (heapq.heappop(heap) for _ in range(len(heap)))]
    assert popped == sorted(entries)


@given(st.integers(min_value=0, max_value=(1 << 62)), st.lists(st.tuples(EPOCH_MS, OFFSET), max_size=200))
def test_snapshot_round_trips(cq_offset: int, entries: list[tuple[int, int]]) -> None:
    keys = [(due << 64) | off for due, off in entries]
    assert decode_snapshot(encode_snapshot(cq_offset, keys)) == (cq_offset, keys)


@given(
    now=st.integers(min_value=1_000_000, max_value=1 << 42),
    ahead_ms=st.integers(min_value=-(10**9), max_value=10**9),
    precision_ms=PRECISION_MS,
)
def test_put_hook_holds_exactly_the_future_times_within_the_limit(
    now: int, ahead_ms: int, precision_ms: int
) -> None:
    policy = TimerPolicy(max_delay_sec=10**6, precision_ms=precision_ms)
    m = BrokerMessage(
        topic="T", body=b"x", properties=encode_properties({"TIMER_DELAY_MS": str(ahead_ms)}).encode()
    )
    out = to_timer_topic(m, policy, now)
    if ahead_ms <= 0:
        assert out is m
        return
    assert out.topic == TIMER_TOPIC
    props = decode_properties(out.properties.decode())
    assert int(props["TIMER_OUT_MS"]) + precision_ms >= now + ahead_ms
    assert props["REAL_TOPIC"] == "T"
