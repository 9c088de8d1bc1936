"""The CommitLog write path's fast paths and services: batch commit point, queue-offset table,
group commit gathering and hand-over, the write-buffer pool's commit wake-ups."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from _support.wait import wait_until
from rocketq.config import StoreConfig
from rocketq.errors import MessageBodyTooLarge
from rocketq.message import BrokerMessage, pack_socket_addr
from rocketq.protocol import record as rec
from rocketq.store import PutMessageStatus
from rocketq.store import commitlog as commitlog_module
from rocketq.store.commitlog import CommitLog, PutMessageResult
from rocketq.store.queue_offsets import QueueOffsetTable

PROPS = b"UNIQ_KEY\x010123456789ABCDEF\x02TAGS\x01TagA\x02"


@pytest.fixture
def log(store_config: StoreConfig) -> Iterator[CommitLog]:
    cl = CommitLog(store_config)
    cl.load()
    cl.start()
    yield cl
    cl.shutdown()


def bm(body: bytes = b"x" * 100, queue_id: int = 0, topic: str = "T", **kw: object) -> BrokerMessage:
    return BrokerMessage(topic, body, PROPS, queue_id=queue_id, born_timestamp=1_700_000_000_000, **kw)  # type: ignore[arg-type]


def expected_bytes(log: CommitLog, m: BrokerMessage, offset: int, queue_offset: int, stored_ms: int) -> bytes:
    return rec.encode_record(
        topic=m.topic,
        body=m.body,
        properties=m.properties,
        queue_id=m.queue_id,
        flag=m.flag,
        queue_offset=queue_offset,
        physical_offset=offset,
        sys_flag=m.sys_flag,
        born_timestamp=m.born_timestamp,
        born_host=m.born_host,
        store_timestamp=stored_ms,
        store_host=pack_socket_addr(log.config.store_host),
    )


# -- batches ------------------------------------------------------------------------------------
def test_batch_across_queues_writes_the_codec_bytes(log: CommitLog) -> None:
    log.put_message(bm())  # compiles the shape: the batch below takes the fast path
    batch = [bm(queue_id=i % 3) for i in range(7)]
    r = log.put_messages(batch)
    assert r.ok and r.msg_num == 7 and r.physical_offsets is not None
    assert r.physical_offsets[0] == r.physical_offset
    assert r.queue_offset == 1  # queue 0 had one message before
    next_qoff = {0: 1, 1: 0, 2: 0}
    for m, off in zip(batch, r.physical_offsets, strict=True):
        data = log.read(off, 4)
        assert data is not None
        (size,) = struct.unpack(">i", data)
        raw = log.read(off, size)
        assert raw == expected_bytes(log, m, off, next_qoff[m.queue_id], r.store_timestamp)
        next_qoff[m.queue_id] += 1
    assert sum(len(expected_bytes(log, m, 0, 0, 0)) for m in batch) == r.size
    assert log.max_offset == r.next_offset
    assert log.topic_queue_table == {("T", 0): 4, ("T", 1): 2, ("T", 2): 2}


def test_batch_commit_point_is_the_first_totalsize(log: CommitLog, monkeypatch: pytest.MonkeyPatch) -> None:
    """When the first record's TOTALSIZE is written, every other record of the batch is already
    complete, and the first one reads as a torn record (a recovery scan ends there)."""
    log.put_message(bm())
    seen: list[tuple[int, bytes]] = []
    real = commitlog_module._SIZE

    class Watching:
        size = real.size

        def pack_into(self, buf: bytearray, pos: int, value: int) -> None:
            seen.append((value, bytes(buf[pos : pos + 2048])))
            real.pack_into(buf, pos, value)

    monkeypatch.setattr(commitlog_module, "_SIZE", Watching())
    batch = [bm(body=bytes([i]) * 50, queue_id=1) for i in range(5)]
    r = log.put_messages(batch)
    assert len(seen) == 1, "one commit point per batch"
    value, before = seen[0]
    length = r.size // 5
    assert value == length
    first = rec.decode_record(before, 0)
    assert first.kind is rec.RecordKind.CORRUPT and first.size == 0  # a torn record: the scan ends
    for i in range(1, 5):
        view = rec.decode_record(before, i * length, check_crc=True, read_body=True)
        assert view.kind is rec.RecordKind.MESSAGE and view.body == bytes([i]) * 50
    assert [v.queue_offset for _, v in log.iter_records(r.physical_offset)] == [0, 1, 2, 3, 4]


def test_batch_that_fails_validation_writes_nothing(log: CommitLog) -> None:
    log.put_message(bm())
    end = log.max_offset
    table = dict(log.topic_queue_table)
    bad = [bm(), bm(topic="T", body=b"y" * (log.config.max_message_size + 1))]
    with pytest.raises(MessageBodyTooLarge, match="exceeds max"):
        log.put_messages(bad)
    assert log.max_offset == end
    assert dict(log.topic_queue_table) == table


# -- queue-offset table --------------------------------------------------------------------------
def test_queue_offset_table_is_a_mapping_of_topic_and_queue() -> None:
    t = QueueOffsetTable()
    t[("A", 0)] = 5
    t[("A", 3)] = 1
    t[("B", 0)] = 2
    assert len(t) == 3 and t[("A", 0)] == 5 and t.get(("A", 9), 0) == 0 and t.get(("C", 0)) is None
    assert ("A", 3) in t and ("A", 4) not in t and "A" not in t
    assert t == {("A", 0): 5, ("A", 3): 1, ("B", 0): 2}
    del t[("A", 3)]
    with pytest.raises(KeyError):
        del t[("A", 3)]
    with pytest.raises(KeyError):
        t[("Z", 0)]
    live = t.of_topic("A")
    t.clear()
    assert len(t) == 0 and dict(t) == {}
    t.update({("A", 1): 7})
    assert live == {1: 7}, "clear() keeps each topic's dict, so cached references see later updates"
    t.replace({("A", 2): 4, ("B", 0): 9})
    assert dict(t) == {("A", 2): 4, ("B", 0): 9}, "replace() drops what is not in the new table"
    assert live == {2: 4}, "replace() keeps each topic's dict too"


def test_put_continues_from_a_table_restored_after_clear(log: CommitLog) -> None:
    for _ in range(3):
        log.put_message(bm(queue_id=2))
    table = log.topic_queue_table
    table.clear()  # what MessageStore.load does before restoring the table from the ConsumeQueues
    table.update({("T", 2): 40})
    assert log.put_message(bm(queue_id=2)).queue_offset == 40
    assert log.put_messages([bm(queue_id=2), bm(queue_id=2)]).queue_offset == 41
    assert table[("T", 2)] == 43


def test_put_result_constructors() -> None:
    r = PutMessageResult.of(PutMessageStatus.PUT_OK, 100, 50, 3, 7, b"\x7f\x00\x00\x01\x00\x00*\x9f")
    assert (r.status, r.physical_offset, r.size, r.queue_offset, r.msg_num, r.next_offset) == (
        PutMessageStatus.PUT_OK,
        100,
        50,
        3,
        1,
        150,
    )
    t = r.with_status(PutMessageStatus.FLUSH_DISK_TIMEOUT)
    assert isinstance(t, PutMessageResult) and not t.ok and t.msg_id == r.msg_id


# -- group commit --------------------------------------------------------------------------------
def sync_log(store_config: StoreConfig, **kw: object) -> CommitLog:
    cfg = dataclasses.replace(store_config, flush_disk_type="SYNC_FLUSH", **kw)  # type: ignore[arg-type]
    cl = CommitLog(cfg)
    cl.load()
    cl.start()
    return cl


def run_writers(cl: CommitLog, writers: int, per_writer: int) -> list[PutMessageResult]:
    results: list[PutMessageResult] = []
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for _ in range(per_writer):
                r = cl.put_message(bm(queue_id=i))
                assert cl.flushed_where >= r.next_offset, "returned before its record was durable"
                results.append(r)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return results


def test_group_commit_rounds_cover_several_writers(store_config: StoreConfig) -> None:
    cl = sync_log(store_config, mapped_file_size_commit_log=1 << 20)
    try:
        cl.put_message(bm())
        gc = cl.group_commit
        assert gc is not None
        before = gc.rounds
        results = run_writers(cl, 8, 40)
        assert [r.status for r in results] == [PutMessageStatus.PUT_OK] * 320
        # Gathered rounds: far fewer syncs than puts (one per put would be 320).
        assert gc.rounds - before < 320 // 2
    finally:
        cl.shutdown()


def test_lone_writer_after_many_is_not_held_by_gathering(store_config: StoreConfig) -> None:
    """The service expects the eight writers of the last rounds; when only one is left, its
    gathering times out (``max_gather_s``) and it syncs alone: no put waits for the others until
    the flush timeout."""
    cl = sync_log(store_config, mapped_file_size_commit_log=1 << 20, sync_flush_timeout_ms=20_000)
    try:
        cl.put_message(bm())
        run_writers(cl, 8, 5)
        gc = cl.group_commit
        assert gc is not None
        statuses = [r.status for r in run_writers(cl, 1, 30)]
        assert statuses == [PutMessageStatus.PUT_OK] * 30
        assert gc._gather_target == 1  # the departed writers aged out of the expected set
    finally:
        cl.shutdown()


def test_futures_and_writers_share_rounds(store_config: StoreConfig) -> None:
    """The broker's path (submit → future, completed by the rounds) alongside blocking writers."""
    cl = sync_log(store_config, mapped_file_size_commit_log=1 << 20)
    try:
        futures: list[concurrent.futures.Future[bool]] = []
        offsets: list[int] = []
        stop = threading.Event()

        def submitter() -> None:
            while not stop.is_set() and len(futures) < 200:
                r = cl.put_messages([bm(queue_id=7)])
                offsets.append(r.next_offset)
                futures.append(cl.submit_flush(r.next_offset))
                futures[-1].result(20)

        t = threading.Thread(target=submitter)
        t.start()
        results = run_writers(cl, 4, 30)
        stop.set()
        t.join(30)
        assert all(r.ok for r in results)
        assert futures and all(f.result(0) is True for f in futures)
        assert cl.flushed_where >= max(offsets)
    finally:
        cl.shutdown()


def test_flush_timeout_of_a_queued_writer_leaves_the_queue(
    store_config: StoreConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that times out leaves the queue; when the stuck sync ends, the next put is served."""
    cl = sync_log(store_config, sync_flush_timeout_ms=100)
    try:
        cl.put_message(bm())
        release = threading.Event()
        started = threading.Event()
        real_flush = type(cl.queue).flush

        def stuck_flush(self: object, least_pages: int) -> bool:
            started.set()
            release.wait(20)
            return real_flush(self, least_pages)  # type: ignore[arg-type]

        monkeypatch.setattr(type(cl.queue), "flush", stuck_flush)
        first: list[PutMessageResult] = []
        t = threading.Thread(target=lambda: first.append(cl.put_message(bm(body=b"first"))))
        t.start()
        assert started.wait(10)
        timed_out = cl.put_message(bm(body=b"second"))
        assert timed_out.status is PutMessageStatus.FLUSH_DISK_TIMEOUT
        release.set()
        t.join(30)
        monkeypatch.setattr(type(cl.queue), "flush", real_flush)
        assert first[0].status in (PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT)
        # the next writer gets a deadline a loaded machine's fsync meets: what is tested is that the
        # queue serves it, not how fast the disk syncs
        monkeypatch.setattr(cl, "_sync_timeout_s", 30.0)
        after = cl.put_message(bm(body=b"third"))
        assert after.status is PutMessageStatus.PUT_OK
        assert cl.flushed_where >= after.next_offset >= timed_out.next_offset
    finally:
        cl.shutdown()


# -- write-buffer pool ---------------------------------------------------------------------------
def test_pool_put_wakes_the_commit_service_only_when_it_has_work(store_config: StoreConfig) -> None:
    cfg = dataclasses.replace(
        store_config,
        transient_store_pool_enable=True,
        transient_store_pool_size=2,
        mapped_file_size_commit_log=1 << 20,
        commit_interval_commit_log_ms=60_000,  # only wake-ups make the service commit here
        commit_commit_log_thorough_interval_ms=60_000,
        commit_commit_log_least_pages=4,
    )
    cl = CommitLog(cfg)
    cl.load()
    cl.start()
    try:
        svc = cl.commit_service
        assert svc is not None
        wakes = []
        real_wakeup = svc.wakeup

        def counting_wakeup() -> None:
            wakes.append(cl.queue.max_wrote_position)
            real_wakeup()

        svc.wakeup = counting_wakeup  # type: ignore[method-assign]
        cl._update_after_put()
        svc.thorough_due_ms = time.time_ns() // 1_000_000 + 60_000
        small = cl.put_message(bm())
        assert wakes == [] and cl.max_offset < small.next_offset  # not committed: nothing due yet
        while cl.queue.max_wrote_position < 4 * 4096 + small.next_offset:
            cl.put_message(bm(body=b"z" * 1000))
        assert wakes, "a put with four pages pending wakes the commit service"
        assert all(w >= 4 * 4096 for w in wakes)
        wait_until(
            lambda: cl.max_offset >= small.next_offset, "the woken service to commit the pages", 20, 0.005
        )
    finally:
        cl.shutdown()
