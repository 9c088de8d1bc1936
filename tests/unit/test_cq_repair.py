"""A ConsumeQueue rebuild keeps every record whose queue offset is consistent with its place.

``dedupe`` chooses, among the units the CommitLog gives for one queue, the largest set whose
queue offsets increase and leave room between two units for the records of the offsets between
them. A damaged QUEUEOFFSET (not covered by the body CRC) may claim a value too small or too
large for its place; that unit is dropped, and never the intact units after it.
"""

from __future__ import annotations

import pathlib
import threading
from types import TracebackType

import pytest

from rocketq.config import StoreConfig
from rocketq.message import Message
from rocketq.store import MessageStore
from rocketq.store.consume_queue import ConsumeQueue
from rocketq.store.cq_repair import Unit, dedupe
from rocketq.store.store_queries import GetMessageResult, GetMessageStatus

SEGMENT = 32 * 1024


def queue_units(first: int, count: int, start: int = 0, stride: int = 480) -> list[Unit]:
    """``count`` units of one queue from queue offset ``first``, one every ``stride`` bytes (the
    other queues' records between them), at CommitLog offsets from ``start``."""
    return [(start + i * stride, 120 + i % 40, 0, first + i) for i in range(count)]


def test_intact_units_are_kept_as_they_are() -> None:
    units = queue_units(0, 200)
    assert dedupe(units) == (units, 0)
    assert dedupe([]) == ([], 0)


def test_a_first_unit_claiming_a_too_small_offset_is_dropped_not_the_units_after_it() -> None:
    # The failing case of the damage property test: queue 3's records before offset 64 are gone
    # with the zeroed first segment; the record of offset 64 (at 32907, the first of the queue in
    # the second segment) had the low half of its QUEUEOFFSET zeroed and claims 0. Its claim
    # leaves no room before 33408 for offsets 1..64, so it is inconsistent with every intact
    # unit up to offset 77; those 13 were dropped and the queue gave none of them.
    damaged: Unit = (32907, 150, 0, 0)
    intact = queue_units(65, 85, start=33408, stride=496)
    kept, dropped = dedupe([damaged, *intact])
    assert (kept, dropped) == (intact, 1)


def test_a_unit_claiming_a_too_large_offset_is_dropped() -> None:
    units = queue_units(0, 100)
    at_end = (units[-1][0] + 480, 100, 0, 1 << 40)
    assert dedupe([*units, at_end]) == (units, 1)
    middle = list(units)
    middle[50] = (middle[50][0], middle[50][1], 0, 57)  # no room for 51..56 before offset 51's record
    assert dedupe(middle) == ([*units[:50], *units[51:]], 1)


def test_a_unit_claiming_an_offset_before_its_predecessors_is_dropped() -> None:
    units = queue_units(0, 100)
    damaged = list(units)
    damaged[60] = (units[60][0], units[60][1], 0, 24)
    assert dedupe(damaged) == ([*units[:60], *units[61:]], 1)


def test_a_gap_the_bytes_between_can_hold_is_kept() -> None:
    # offsets 10..19 quarantined: 10 records of at least 91 bytes fit in the 1,000 bytes left
    units = [(i * 100, 100, 0, i) for i in range(10)] + [(2000 + i * 100, 100, 0, 20 + i) for i in range(10)]
    assert dedupe(units) == (units, 0)


def test_the_earlier_of_two_records_claiming_one_offset_is_kept() -> None:
    # as dispatch keeps the first unit put at a queue offset; the damage property test's cases:
    # a later record whose QUEUEOFFSET (or QUEUEID) was damaged to an intact record's
    units = [(0, 100, 0, 0), (100, 100, 0, 1), (200, 100, 0, 1), (300, 100, 0, 2)]
    assert dedupe(units) == ([units[0], units[1], units[3]], 1)


def test_a_rebuilt_queue_gives_the_records_after_a_damaged_first_one(tmp_path: pathlib.Path) -> None:
    """The store-level case: the first segment zeroed, the QUEUEOFFSET of queue 1's first record
    in the second segment zeroed; the rebuilt queue gives every other record of that segment."""
    config = StoreConfig(
        store_path_root_dir=str(tmp_path / "store"),
        mapped_file_size_commit_log=SEGMENT,
        flush_disk_type="ASYNC_FLUSH",
        message_index_enable=False,
    )
    written = []
    with MessageStore(config) as store:
        for i in range(600):
            r = store.put_message(Message("T", f"record {i} ".encode() * 4), i % 2)
            written.append((r.physical_offset, i % 2, r.queue_offset, f"record {i} ".encode() * 4))
        assert store.wait_dispatched()
    segments = sorted(pathlib.Path(config.store_path_root_dir, "commitlog").iterdir())
    assert len(segments) >= 3
    segments[0].write_bytes(bytes(SEGMENT))
    survivors = [w for w in written if w[0] >= SEGMENT]
    first = next(w for w in survivors if w[1] == 1)
    assert first[2] > 1
    raw = bytearray(segments[1].read_bytes())
    at = first[0] - SEGMENT + 24  # the low half of QUEUEOFFSET (record bytes 20..28)
    raw[at : at + 4] = bytes(4)
    segments[1].write_bytes(bytes(raw))
    with MessageStore(config) as store:
        assert store.stats.queues_rebuilt >= 1
        for offset, queue_id, queue_offset, body in survivors:
            if offset == first[0]:
                continue
            got = store.get_message("g", "T", queue_id, queue_offset, 1)
            assert [(m.queue_offset, m.body) for m in got.messages] == [(queue_offset, body)], (
                f"queue {queue_id} offset {queue_offset} (record at {offset})"
            )


class WatchedLock:
    """A lock that tells when ``watched`` starts to wait for it (or take it)."""

    def __init__(self, inner: threading.RLock, watched: threading.Thread, waits: threading.Event) -> None:
        self.inner = inner
        self.watched = watched
        self.waits = waits

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if threading.current_thread() is self.watched:
            self.waits.set()
        return self.inner.acquire(blocking, timeout)

    def release(self) -> None:
        self.inner.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def test_regression_a_read_overlapping_a_rebuild_of_its_queue_reads_the_rebuilt_queue(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 17: a rebuilt queue is put in place empty and filled after; a read in another thread
    in between found no message in the queue, which a broker answers with PULL_OFFSET_MOVED to
    offset 0. A read that overlaps a rebuild is made again once the rebuild is over."""
    config = StoreConfig(
        store_path_root_dir=str(tmp_path / "store"), flush_disk_type="ASYNC_FLUSH", message_index_enable=False
    )
    with MessageStore(config) as store:
        for i in range(10):
            store.put_message(Message("T", f"m{i}".encode()), 0)
        assert store.wait_dispatched()
        results: list[GetMessageResult] = []
        progressed = threading.Event()  # the reader has its answer, or waits for the rebuild

        def read() -> None:
            try:
                results.append(store.get_message("g", "T", 0, 5, 2))
            finally:
                progressed.set()

        reader = threading.Thread(target=read, name="reader")
        cqs = store.consume_queues
        cqs.repair_lock = WatchedLock(cqs.repair_lock, reader, progressed)  # type: ignore[assignment]
        fill_from = ConsumeQueue.fill_from
        empty_seen: list[int] = []

        def fill_later(cq: ConsumeQueue, units: list[tuple[int, int, int, int]]) -> int:
            if not empty_seen:  # the rebuilt queue is in place, still empty: read it now
                empty_seen.append(cq.max_offset_in_queue)
                reader.start()
                assert progressed.wait(30)
            return fill_from(cq, units)

        monkeypatch.setattr(ConsumeQueue, "fill_from", fill_later)
        store.rebuild_queues({("T", 0): "a test"})
        reader.join(30)
        assert empty_seen == [0] and not reader.is_alive()
        assert results[0].status is GetMessageStatus.FOUND, results[0].status
        assert [m.body for m in results[0].messages] == [b"m5", b"m6"]
        assert results[0].next_begin_offset == 7
