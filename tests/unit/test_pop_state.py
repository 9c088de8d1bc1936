"""The pure per-queue pop state: watermark, expiry, FIFO blocking, stale nonces."""

from __future__ import annotations

from rocketq.broker.pop.state import InFlight, PopTable, QueueState


def test_fresh_state_watermark_follows_next_offset() -> None:
    s = QueueState()
    assert s.committed == 0
    s.advance(5)
    assert (s.next_offset, s.committed) == (5, 5)
    s.advance(3)  # never moves back
    assert s.next_offset == 5


def test_deliver_ack_moves_watermark_to_lowest_unacked() -> None:
    s = QueueState()
    for o in range(4):
        s.deliver(o, 1, 100, nonce=7)
    assert s.next_offset == 4 and s.committed == 0
    assert s.ack(1) and s.committed == 0
    assert s.ack(0) and s.committed == 2
    assert not s.ack(0)  # already done
    assert s.done(0) and s.done(1) and not s.done(2) and not s.done(4)
    s.ack(3)
    s.ack(2)
    assert s.committed == 4 and not s.in_flight


def test_gaps_below_next_offset_are_done() -> None:
    s = QueueState()
    s.deliver(2, 1, 100, 1)  # 0 and 1 were filtered out
    s.deliver(5, 1, 100, 1)
    s.advance(8)
    assert s.committed == 2
    assert s.done(0) and s.done(1) and s.done(3) and s.done(7) and not s.done(8)
    s.ack(2)
    assert s.committed == 5


def test_expired_in_offset_order_and_fifo_blocking() -> None:
    s = QueueState()
    s.deliver(3, 1, 50, 1)
    s.deliver(1, 1, 10, 1)
    s.deliver(2, 1, 30, 1)
    assert s.expired(5) == []
    assert s.expired(30) == [1, 2]
    assert s.fifo_blocked(30)  # offset 3 still invisible
    assert not s.fifo_blocked(50)
    assert s.next_deadline_ms() == 10


def test_redelivery_changes_nonce_and_keeps_attempts_growing() -> None:
    s = QueueState()
    s.deliver(0, 1, 10, nonce=1)
    assert s.is_current(0, 1) == InFlight(1, 10, 1)
    s.deliver(0, 2, 20, nonce=2)
    assert s.is_current(0, 1) is None
    assert s.is_current(0, 2) == InFlight(2, 20, 2)
    s.ack(0)
    assert s.is_current(0, 2) is None


def test_ack_then_redeliver_of_lower_offset_keeps_watermark_right() -> None:
    s = QueueState()
    s.deliver(0, 1, 10, 1)
    s.deliver(1, 1, 10, 1)
    s.ack(0)
    assert s.committed == 1
    s.deliver(1, 2, 20, 2)  # redelivery: heap holds a duplicate entry, watermark unchanged
    assert s.committed == 1
    s.ack(1)
    assert s.committed == 2


def test_table_key_ids() -> None:
    t = PopTable()
    assert t.next_key_id() == 1
    a = t.define(1, ("G", "T", 0))
    t.define(2, ("G", "T", 1))
    assert t.by_id(1) is a and t.next_key_id() == 3
    assert t.key_ids[("G", "T", 1)] == 2
