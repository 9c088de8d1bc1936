"""Assertions shared by the tests that compare two ConsumeQueues fed the same units."""

from __future__ import annotations

from rocketq.store.consume_queue import ConsumeQueue


def assert_same_queue(a: ConsumeQueue, b: ConsumeQueue) -> None:
    """``a`` and ``b`` hold the same state: offsets, each file's write position and bytes."""
    assert (a.max_offset_in_queue, a.min_offset_in_queue, a.max_physic_offset) == (
        b.max_offset_in_queue,
        b.min_offset_in_queue,
        b.max_physic_offset,
    )
    assert [mf.wrote_position for mf in a.queue.files] == [mf.wrote_position for mf in b.queue.files]
    assert [mf.mm[:] for mf in a.queue.files] == [mf.mm[:] for mf in b.queue.files]
