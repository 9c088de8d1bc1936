"""A blocking connection's read keeps its receive timeout without working the rule out again
while the time left is within the bounds its last setting noted; within them the full rule
(half the time left, between the shortest and the longest slice, kept while a quarter of the
time left up to all of it fits) keeps that setting too."""

from __future__ import annotations

import socket

from hypothesis import given, settings
from hypothesis import strategies as st

from rocketq.remoting import blocking
from rocketq.remoting.blocking import BlockingConnection


def full_rule_keeps(wait: float, remaining: float) -> bool:
    want = min(max(remaining / 2, blocking._READ_SLICE_MIN_S), blocking._READ_SLICE_MAX_S)
    return remaining > 0 and want / 2 <= wait <= max(remaining, blocking._READ_SLICE_MIN_S)


@settings(max_examples=2000, deadline=None)
@given(
    seconds=st.one_of(st.floats(0.001, 3600.0), st.sampled_from([0.001, 0.0015, 1.5, 3600.0])),
    remaining=st.one_of(st.floats(-1.0, 20_000.0), st.sampled_from([0.0, 0.002, 7200.0, 7200.5])),
)
def test_the_noted_bounds_keep_only_what_the_full_rule_keeps(seconds: float, remaining: float) -> None:
    a, b = socket.socketpair()
    try:
        conn = BlockingConnection("peer", a)
        assert not conn._slice_lo <= remaining <= conn._slice_hi  # nothing set: never kept
        conn._set_read_slice(seconds)
        if conn._slice_lo <= remaining <= conn._slice_hi:
            assert full_rule_keeps(conn._read_slice, remaining)
    finally:
        a.close()
        b.close()


def test_the_usual_call_is_within_the_bounds() -> None:
    a, b = socket.socketpair()
    try:
        conn = BlockingConnection("peer", a)
        conn._set_read_slice(1.5)  # what a first call of 3 s sets
        assert conn._slice_lo <= 2.9999 <= conn._slice_hi  # the next calls of 3 s: kept at once
    finally:
        a.close()
        b.close()
