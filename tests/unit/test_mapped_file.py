from __future__ import annotations

import os
import pathlib
import threading
import time

import pytest

from _support.wait import wait_until
from rocketq.errors import CorruptFileError, SegmentAllocationError, WriteBufferPoolExhausted
from rocketq.store.allocate import AllocateMappedFileService
from rocketq.store.mapped_file import MappedFile, MappedFileQueue, offset_to_file_name
from rocketq.store.transient_pool import TransientStorePool

SIZE = 64 * 1024


def test_file_name_is_twenty_digit_offset() -> None:
    assert offset_to_file_name(0) == "00000000000000000000"
    assert offset_to_file_name(1073741824) == "00000000001073741824"
    assert offset_to_file_name(6_000_000) == "00000000000006000000"


def test_new_segment_is_sparse_full_size_and_zero(tmp_path: pathlib.Path) -> None:
    path = tmp_path / offset_to_file_name(SIZE)
    mf = MappedFile(str(path), SIZE)
    try:
        assert mf.file_from_offset == SIZE
        assert os.path.getsize(path) == SIZE
        assert os.stat(path).st_blocks * 512 >= SIZE  # blocks reserved up front
        assert mf.read(0, 0) == b""
        assert mf.wrote_position == mf.committed_position == mf.flushed_position == 0
    finally:
        mf.destroy(0)
    assert not path.exists()


def test_append_read_flush_positions(tmp_path: pathlib.Path) -> None:
    mf = MappedFile(str(tmp_path / offset_to_file_name(0)), SIZE)
    assert mf.append(b"abc")
    assert mf.read(0, 3) == b"abc"
    assert mf.read(0, 4) is None  # beyond the read position
    assert mf.flushed_position == 0
    # Fewer dirty pages than asked: no flush.
    assert mf.flush(least_pages=4) == 0
    assert mf.flush(least_pages=0) == 3
    assert not mf.append(b"x" * SIZE)  # does not fit
    assert mf.append(b"x" * (SIZE - 3))
    assert mf.is_full()
    assert mf.flush(least_pages=4) == SIZE  # a full file is always flushable
    mf.destroy(0)


def test_wrong_length_segment_is_rejected(tmp_path: pathlib.Path) -> None:
    path = tmp_path / offset_to_file_name(0)
    path.write_bytes(b"x" * 100)
    with pytest.raises(CorruptFileError, match="length not matched"):
        MappedFile(str(path), SIZE)


def test_hold_release_defers_unmap_until_last_reader(tmp_path: pathlib.Path) -> None:
    mf = MappedFile(str(tmp_path / offset_to_file_name(0)), SIZE)
    mf.append(b"data")
    assert mf.hold()
    mf.shutdown()
    assert not mf.hold()  # unavailable to new readers
    assert mf.mm[0:4] == b"data"  # still mapped for the holder
    mf.release()
    assert mf.mm.closed
    assert mf.read(0, 4) is None


def test_queue_load_finds_by_offset_and_rolls(tmp_path: pathlib.Path) -> None:
    q = MappedFileQueue(str(tmp_path / "log"), SIZE)
    q.load()
    first = q.get_last_mapped_file(0)
    assert first is not None and first.file_from_offset == 0
    first.append(b"y" * SIZE)
    second = q.get_last_mapped_file(0)
    assert second is not None and second.file_from_offset == SIZE
    third_start = 2 * SIZE
    second.append(b"z" * SIZE)
    third = q.get_last_mapped_file(0)
    assert third is not None and third.file_from_offset == third_start
    assert q.find_by_offset(0) is first
    assert q.find_by_offset(SIZE - 1) is first
    assert q.find_by_offset(SIZE + 5) is second
    assert q.find_by_offset(third_start + 1) is third
    assert q.find_by_offset(10 * SIZE) is None
    q.shutdown()

    q2 = MappedFileQueue(str(tmp_path / "log"), SIZE)
    q2.load()
    assert [m.file_from_offset for m in q2.files] == [0, SIZE, 2 * SIZE]
    assert all(m.wrote_position == SIZE for m in q2.files)  # loaded as full; recovery corrects
    assert q2.find_by_offset(SIZE + 1) is q2.files[1]
    q2.shutdown()


def test_queue_starting_at_nonzero_offset_finds_in_constant_time(tmp_path: pathlib.Path) -> None:
    q = MappedFileQueue(str(tmp_path / "log"), SIZE)
    q.load()
    mf = q.get_last_mapped_file(start_offset=5 * SIZE + 17)
    assert mf is not None and mf.file_from_offset == 5 * SIZE
    assert q.find_by_offset(5 * SIZE + 100) is mf
    assert q.find_by_offset(4 * SIZE) is None
    q.shutdown()


def test_queue_load_rejects_wrong_size_and_drops_empty_last(tmp_path: pathlib.Path) -> None:
    d = tmp_path / "log"
    d.mkdir()
    (d / offset_to_file_name(0)).write_bytes(bytes(SIZE))
    (d / offset_to_file_name(SIZE)).write_bytes(b"")
    q = MappedFileQueue(str(d), SIZE)
    q.load()
    assert len(q.files) == 1
    assert not (d / offset_to_file_name(SIZE)).exists()
    q.shutdown()
    (d / offset_to_file_name(SIZE)).write_bytes(b"short")
    (d / offset_to_file_name(2 * SIZE)).write_bytes(bytes(SIZE))
    with pytest.raises(CorruptFileError, match=offset_to_file_name(SIZE)):
        MappedFileQueue(str(d), SIZE).load()


def test_truncate_dirty_files_deletes_later_and_zeroes_tail(tmp_path: pathlib.Path) -> None:
    q = MappedFileQueue(str(tmp_path / "log"), SIZE)
    q.load()
    for _ in range(3):
        mf = q.get_last_mapped_file(0)
        assert mf is not None
        mf.append(b"q" * SIZE)
    q.truncate_dirty_files(SIZE + 100)
    assert [m.file_from_offset for m in q.files] == [0, SIZE]
    last = q.files[-1]
    assert last.wrote_position == 100
    assert last.mm[99:101] == b"q\x00"
    assert last.mm[100:SIZE] == bytes(SIZE - 100)
    assert not (tmp_path / "log" / offset_to_file_name(2 * SIZE)).exists()
    assert q.max_offset == SIZE + 100
    q.shutdown()


def test_delete_expired_by_time_keeps_last(tmp_path: pathlib.Path) -> None:
    q = MappedFileQueue(str(tmp_path / "log"), SIZE)
    q.load()
    for _ in range(3):
        mf = q.get_last_mapped_file(0)
        assert mf is not None
        mf.append(b"e" * SIZE)
    old = 1_000_000  # epoch seconds, long ago
    for mf in q.files:
        os.utime(mf.file_name, (old, old))
    deleted = q.delete_expired_by_time(expired_ms=3_600_000)
    assert deleted == 2
    assert [m.file_from_offset for m in q.files] == [2 * SIZE]
    assert q.min_offset == 2 * SIZE
    q.shutdown()


def test_flush_moves_flushed_where_segment_by_segment(tmp_path: pathlib.Path) -> None:
    q = MappedFileQueue(str(tmp_path / "log"), SIZE)
    q.load()
    a = q.get_last_mapped_file(0)
    assert a is not None
    a.append(b"1" * SIZE)
    b = q.get_last_mapped_file(0)
    assert b is not None
    b.append(b"2" * 10)
    assert not q.flush(0)
    assert q.flushed_where == SIZE
    assert not q.flush(0)
    assert q.flushed_where == SIZE + 10
    assert q.flush(0)  # nothing left
    q.shutdown()


def test_transient_pool_write_buffer_commit(tmp_path: pathlib.Path) -> None:
    pool = TransientStorePool(2, SIZE)
    pool.init()
    mf = MappedFile(str(tmp_path / offset_to_file_name(0)), SIZE, transient_pool=pool)
    assert pool.available_buffer_count() == 1
    mf.append(b"buffered")
    assert mf.read_position == 0  # not yet committed: invisible to readers
    assert mf.mm[0:8] == bytes(8)
    assert mf.commit(0) == 8
    assert mf.read(0, 8) == b"buffered"
    assert mf.mm[0:8] == b"buffered"
    mf.append(b"x" * (SIZE - 8))
    mf.commit(0)
    assert mf.write_buffer is None  # fully committed: buffer returned to the pool
    assert pool.available_buffer_count() == 2
    mf.destroy(0)
    pool.destroy()


def test_transient_pool_empty_refuses_segment(tmp_path: pathlib.Path) -> None:
    pool = TransientStorePool(1, SIZE)
    pool.init()
    a = MappedFile(str(tmp_path / offset_to_file_name(0)), SIZE, transient_pool=pool)
    with pytest.raises(SegmentAllocationError, match="write-buffer pool is empty"):
        MappedFile(str(tmp_path / offset_to_file_name(SIZE)), SIZE, transient_pool=pool)
    a.destroy(0)
    pool.destroy()


def test_allocator_precreates_next_next(tmp_path: pathlib.Path) -> None:
    svc = AllocateMappedFileService(wait_timeout_ms=5000)
    svc.start()
    try:
        d = tmp_path / "log"
        a = svc.allocate(str(d / offset_to_file_name(0)), str(d / offset_to_file_name(SIZE)), SIZE)
        assert a.file_from_offset == 0
        # The next-next segment is created in the background without anyone waiting for it.
        nxt = d / offset_to_file_name(SIZE)
        done = threading.Event()

        def created() -> bool:
            return nxt.exists() and nxt.stat().st_size == SIZE

        for _ in range(5000):
            if created():
                done.set()
                break
            done.wait(0.001)
        assert created()
        b = svc.allocate(str(nxt), str(d / offset_to_file_name(2 * SIZE)), SIZE)
        assert b.file_from_offset == SIZE
        a.destroy(0)
        b.destroy(0)
    finally:
        svc.shutdown()
    # Pre-created segments nobody asked for are removed at shutdown.
    assert not (tmp_path / "log" / offset_to_file_name(2 * SIZE)).exists()


def test_allocator_reports_errors_instead_of_hanging(tmp_path: pathlib.Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the segment directory should be")
    svc = AllocateMappedFileService(wait_timeout_ms=300, retry_interval_ms=10)
    svc.start()
    try:
        with pytest.raises(SegmentAllocationError):
            svc.allocate(
                str(blocker / offset_to_file_name(0)), str(blocker / offset_to_file_name(SIZE)), SIZE
            )
        # The failure is recorded; the next caller fails fast with the cause.
        wait_until(lambda: svc.has_exception, "the failure to be recorded", 1.0, 0.001)
        assert svc.last_error is not None
    finally:
        svc.shutdown()


def test_allocator_fast_fails_when_pool_is_empty(tmp_path: pathlib.Path) -> None:
    pool = TransientStorePool(1, SIZE)
    pool.init()
    held = pool.borrow_buffer()
    assert held is not None
    svc = AllocateMappedFileService(transient_pool=pool, fast_fail_if_no_buffer=True)
    svc.start()
    try:
        with pytest.raises(WriteBufferPoolExhausted, match="no free buffer"):
            svc.allocate(
                str(tmp_path / offset_to_file_name(0)), str(tmp_path / offset_to_file_name(SIZE)), SIZE
            )
        assert not (tmp_path / offset_to_file_name(0)).exists()
    finally:
        svc.shutdown()
        pool.return_buffer(held)
        pool.destroy()


def test_warm_up_touches_every_page(tmp_path: pathlib.Path) -> None:
    mf = MappedFile(str(tmp_path / offset_to_file_name(0)), SIZE)
    mf.warm_up(sync_flush=True, flush_least_pages=4)
    assert os.stat(mf.file_name).st_blocks * 512 >= SIZE  # every page now allocated
    assert mf.mm[0:SIZE] == bytes(SIZE)
    mf.destroy(0)


def test_non_segment_file_sparse_with_given_offset(tmp_path: pathlib.Path) -> None:
    """The index files and the checkpoint map through MappedFile: any name, optionally sparse."""
    path = tmp_path / "checkpoint"
    big = 8 << 20
    mf = MappedFile(str(path), big, file_from_offset=0, preallocate=False)
    try:
        assert mf.file_from_offset == 0
        assert os.path.getsize(path) == big
        assert os.stat(path).st_blocks * 512 < big  # sparse: no blocks reserved
        mf.mm[100:104] = b"abcd"
        assert mf.sync()
        assert mf.sync(full=True)
    finally:
        mf.shutdown()
    assert not mf.sync()  # unavailable after shutdown
    with open(path, "rb") as f:
        f.seek(100)
        assert f.read(4) == b"abcd"
    with pytest.raises(CorruptFileError, match="not a decimal offset"):
        MappedFile(str(path), big)


def test_sync_waits_for_no_reader_but_skips_a_destroyed_file(tmp_path: pathlib.Path) -> None:
    mf = MappedFile(str(tmp_path / offset_to_file_name(0)), SIZE)
    assert mf.hold()
    mf.shutdown()  # the reader still holds the mapping
    assert not mf.sync()
    assert mf.mm[0:1] == b"\0"
    mf.release()
    assert mf.mm.closed


@pytest.mark.slow
def test_a_full_sync_lets_the_other_threads_run(tmp_path: pathlib.Path) -> None:
    """``sync(full=True)`` (the checkpoint's, every thorough flush and at shutdown) waits for the
    disk without the interpreter lock: ``mmap.flush`` would keep it for the whole write-back and
    stop the event loop with it. A thread keeps a clock while 128 MiB dirtied through the mapping
    are written; its longest stall must stay far below the write-back's time."""
    size = 128 << 20
    mf = MappedFile(str(tmp_path / "big"), size, file_from_offset=0)
    ticks = 0
    longest = 0.0
    stop = threading.Event()

    def tick() -> None:
        nonlocal ticks, longest
        last = time.monotonic()
        while not stop.is_set():
            now = time.monotonic()
            longest = max(longest, now - last)
            last = now
            ticks += 1

    ticker = threading.Thread(target=tick, daemon=True)
    try:
        for pos in range(0, size, 4096):
            mf.mm[pos] = 1
        ticker.start()
        wait_until(lambda: ticks > 0, timeout_s=10)
        t0 = time.monotonic()
        assert mf.sync(full=True)
        took = time.monotonic() - t0
    finally:
        stop.set()
        ticker.join(10)
        mf.shutdown()
    if took < 0.05:
        pytest.skip(f"the write-back took {took * 1000:.0f} ms: too quick to tell")
    assert longest < took / 2, f"the other thread stalled {longest * 1000:.0f} of {took * 1000:.0f} ms"
