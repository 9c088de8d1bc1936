"""Retention under disk pressure: what may be deleted given consumer offsets, time and watermarks.

The pure rule (:func:`plan_deletion`) first, then a real store driven by its own retention
service with a given disk usage and clock, then real full filesystems (a small tmpfs).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import os
import pathlib
from collections.abc import Iterator

import pytest

from _support.tmpfs import fill, small_tmpfs
from rocketq.config import StoreConfig
from rocketq.errors import DiskFull
from rocketq.fileio import durable_replace
from rocketq.message import Message
from rocketq.store import MessageStore
from rocketq.store.retention import (
    NOTHING_NEEDED,
    CleanDecision,
    DeleteReason,
    Segment,
    decide,
    plan_deletion,
)

HOUR_MS = 3_600_000
NOW_MS = 1_000 * HOUR_MS
RESERVED_MS = 72 * HOUR_MS
SIZE = 1000


def segs(*ages_h: float) -> list[Segment]:
    """Segments of SIZE bytes, oldest first, last written ``age`` hours before NOW_MS."""
    return [Segment(i * SIZE, (i + 1) * SIZE, NOW_MS - int(age * HOUR_MS)) for i, age in enumerate(ages_h)]


def plan(
    segments: list[Segment], usage: float, *, hour: bool = False, min_needed: int = 0, force: bool = False
) -> list[tuple[int, DeleteReason]]:
    d = decide(StoreConfig(), usage, hour)
    out = plan_deletion(
        segments, d, now_ms=NOW_MS, reserved_ms=RESERVED_MS, min_needed=min_needed, force_unconsumed=force
    )
    return [(s.start // SIZE, r) for s, r in out]


# -- the pure rule -------------------------------------------------------------------------------


def test_nothing_goes_below_the_watermarks_outside_the_delete_hour() -> None:
    assert plan(segs(100, 100, 1), 0.5, min_needed=NOTHING_NEEDED) == []


def test_expired_segments_go_at_the_delete_hour_oldest_first_never_the_last() -> None:
    assert plan(segs(100, 80, 10, 100), 0.5, hour=True) == [
        (0, DeleteReason.EXPIRED),
        (1, DeleteReason.EXPIRED),
    ]
    assert plan(segs(100, 100), 0.5, hour=True) == [(0, DeleteReason.EXPIRED)]  # the last one stays
    assert plan(segs(100), 0.99, hour=True, min_needed=NOTHING_NEEDED, force=True) == []


def test_expired_segments_go_at_once_above_the_early_ratio() -> None:
    assert plan(segs(100, 1, 1), 0.80) == [(0, DeleteReason.EXPIRED)]


def test_pressure_deletes_consumed_segments_but_nothing_a_consumer_still_needs() -> None:
    young = segs(1, 1, 1, 1, 1)
    # at 93 %: segments 0 and 1 end at or below the minimum needed offset 2000
    assert plan(young, 0.93, min_needed=2 * SIZE) == [(0, DeleteReason.CONSUMED), (1, DeleteReason.CONSUMED)]
    # a needed offset inside segment 0 keeps everything
    assert plan(young, 0.93, min_needed=SIZE - 1) == []
    # the tester's case: small segments, nothing consumed, 93 % used: nothing is deleted
    assert plan(segs(*[0.01] * 11), 0.93, min_needed=0) == []
    # below the forcibly ratio consumed but young segments stay
    assert plan(young, 0.80, min_needed=NOTHING_NEEDED) == []


def test_expired_segments_go_even_when_unconsumed_and_stop_at_the_first_young_one() -> None:
    assert plan(segs(100, 1, 100, 1), 0.93, min_needed=0) == [(0, DeleteReason.EXPIRED)]


def test_forced_cleaning_deletes_unconsumed_segments_only_when_enabled() -> None:
    young = segs(*[0.01] * 11)
    assert plan(young, 0.93, min_needed=0, force=False) == []
    forced = plan(young, 0.93, min_needed=3 * SIZE, force=True)
    assert forced[:3] == [(0, DeleteReason.CONSUMED), (1, DeleteReason.CONSUMED), (2, DeleteReason.CONSUMED)]
    assert forced[3:] == [(i, DeleteReason.FORCED) for i in range(3, 10)]  # at most 10 per run
    assert plan(young, 0.80, min_needed=0, force=True) == []  # only above the forcibly ratio


def test_decide_watermarks() -> None:
    cfg = StoreConfig()
    assert decide(cfg, 0.5, False) == CleanDecision(False, False, False, 0.5)
    assert decide(cfg, 0.8, False) == CleanDecision(True, False, False, 0.8)
    assert decide(cfg, 0.86, False) == CleanDecision(True, True, False, 0.86)
    assert decide(cfg, 0.93, False) == CleanDecision(True, True, True, 0.93)


# -- a real store -------------------------------------------------------------------------------


@pytest.fixture
def store(store_config: StoreConfig) -> Iterator[MessageStore]:
    with MessageStore(store_config) as s:
        yield s


def fill_queues(store: MessageStore, n: int, queues: int = 2) -> dict[tuple[int, int], bytes]:
    """``n`` messages round-robin over ``queues``; {(queue, queue offset): body}."""
    out = {}
    for i in range(n):
        body = f"message {i:05d} ".encode() * 20
        r = store.put_message(Message("T", body), queue_id=i % queues)
        out[(i % queues, r.queue_offset)] = body
    assert store.wait_dispatched(10)
    return out


def readable(store: MessageStore, queue_id: int, start: int) -> list[tuple[int, bytes]]:
    """(queue offset, body) of every message of queue ``queue_id`` from ``start`` on."""
    out: list[tuple[int, bytes]] = []
    offset = start
    while offset < store.get_max_offset("T", queue_id):
        g = store.get_message("G", "T", queue_id, offset, 32)
        assert g.buffers, (queue_id, offset, g.status)
        out.extend(zip(g.queue_offsets, (m.body for m in g.messages), strict=True))
        offset = g.next_begin_offset
    return out


def at_noon() -> dt.datetime:
    return dt.datetime(2026, 1, 1, 12, 0)  # not the delete hour; every segment is young


def test_high_disk_use_deletes_nothing_unconsumed_and_refuses_writes(store: MessageStore) -> None:
    stored = fill_queues(store, 3000)
    segments = len(store.commitlog.queue.files)
    assert segments > 5
    svc = store.retention_service(usage=lambda: 0.93, now=at_noon)
    svc.run_once()
    assert len(store.commitlog.queue.files) == segments
    assert svc.deleted_segments == 0
    with pytest.raises(DiskFull, match=r"disk full: 93% used, limit 90%.*not yet consumed"):
        store.put_message(Message("T", b"refused"))
    for q in (0, 1):
        assert readable(store, q, 0) == sorted((o, b) for (qq, o), b in stored.items() if qq == q)


def test_pressure_deletes_what_every_queue_consumed_then_accepts_writes(store: MessageStore) -> None:
    stored = fill_queues(store, 3000)
    committed = {("T", 0): 900, ("T", 1): 1200}
    store.consumer_progress = lambda: committed
    usage = [0.93]
    svc = store.retention_service(usage=lambda: usage[0], now=at_noon)
    svc.run_once()
    assert svc.deleted_segments > 0
    low = store.commitlog.min_offset
    # nothing at or after a committed offset went; the message at queue 0's offset 900 is the
    # smallest one needed, so deletion stopped at the segment holding it
    needed = store.get_commitlog_offset_in_queue("T", 0, 900)
    assert low <= needed < low + store.commitlog.file_size
    for q, start in ((0, 900), (1, 1200)):
        assert readable(store, q, start) == sorted(
            (o, b) for (qq, o), b in stored.items() if qq == q and o >= start
        )
    with pytest.raises(DiskFull):
        store.put_message(Message("T", b"still full"))
    usage[0] = 0.5  # space is back
    svc.run_once()
    assert store.put_message(Message("T", b"accepted")).ok


def test_forced_cleaning_deletes_unconsumed_and_warns_with_counts(
    store: MessageStore, store_config: StoreConfig, caplog: pytest.LogCaptureFixture
) -> None:
    fill_queues(store, 3000)
    store.consumer_progress = lambda: {("T", 0): 100, ("T", 1): 100}
    cfg = dataclasses.replace(store_config, force_clean_unconsumed=True)
    svc = store.retention_service(usage=lambda: 0.93, now=at_noon, config=cfg)
    with caplog.at_level(logging.WARNING, logger="rocketq.store.retention"):
        svc.run_once()
    assert svc.deleted_segments == 10
    low = store.commitlog.min_offset
    lost = sum(
        1
        for q in (0, 1)
        for o in range(100, store.get_max_offset("T", q))
        if store.get_commitlog_offset_in_queue("T", q, o) < low
    )
    assert lost > 0 and svc.forced_messages == lost
    warning = [r for r in caplog.records if r.levelno == logging.WARNING and "forced cleaning" in r.message]
    assert len(warning) == 1
    assert f"deleted 10 CommitLog segments ({10 * store.commitlog.file_size} B" in warning[0].message
    assert f"holding {lost} messages not yet consumed in 2 queues" in warning[0].message


def test_store_progress_of_delay_levels_counts_as_a_consumer(store: MessageStore) -> None:
    """The store's own delay-level service consumes SCHEDULE_TOPIC_XXXX: its queue does not
    pin the CommitLog once delivered; a topic nobody consumes does."""
    r = store.put_message(Message("T", b"x"))
    assert store.wait_dispatched(10)
    assert store.min_needed_phy_offset() == r.physical_offset
    store.consumer_progress = lambda: {("T", 0): 1}
    assert store.min_needed_phy_offset() == NOTHING_NEEDED


# -- real full disks ----------------------------------------------------------------------------


def test_durable_replace_raises_disk_full_and_keeps_the_old_file(tmp_path: pathlib.Path) -> None:
    with small_tmpfs(tmp_path / "mnt", "1m") as mnt:
        path = mnt / "config" / "topics.json"
        durable_replace(str(path), b"old", keep_backup=True)
        fill(mnt)
        with pytest.raises(DiskFull, match=r"disk full: cannot write .*topics\.json \(200000 B\)") as info:
            durable_replace(str(path), b"n" * 200_000, keep_backup=True)
        assert isinstance(info.value, OSError)
        assert path.read_bytes() == b"old"
        assert not os.path.exists(str(path) + ".tmp")
        (mnt / "filler").unlink()
        durable_replace(str(path), b"new", keep_backup=True)
        assert path.read_bytes() == b"new"


def test_full_disk_refuses_a_send_whose_consume_queue_file_cannot_be_created(tmp_path: pathlib.Path) -> None:
    """The current CommitLog segment has room, the disk has none: a message that would open a
    new ConsumeQueue file is refused (nothing acknowledged that dispatch cannot index); messages
    that fit existing ConsumeQueue files are accepted; all are readable after a restart."""
    with small_tmpfs(tmp_path / "mnt", "8m") as mnt:
        cfg = StoreConfig(
            store_path_root_dir=str(mnt / "store"),
            mapped_file_size_commit_log=1 << 20,
            mapped_file_size_consume_queue=20 * 100,
            message_index_enable=False,
            flush_disk_type="SYNC_FLUSH",
        )
        acked: dict[tuple[str, int], list[bytes]] = {}
        with MessageStore(cfg) as s:
            for i in range(50):
                r = s.put_message(Message("Old", f"old {i}".encode()))
                acked.setdefault(("Old", r.queue_offset), []).append(f"old {i}".encode())
            assert s.wait_dispatched(10)
            fill(mnt)
            with pytest.raises(DiskFull, match="disk full"):
                s.put_message(Message("New", b"never acknowledged"))
            for i in range(50, 100):  # queue offsets 50..99: the existing ConsumeQueue file
                r = s.put_message(Message("Old", f"old {i}".encode()))
                acked.setdefault(("Old", r.queue_offset), []).append(f"old {i}".encode())
            with pytest.raises(DiskFull):
                s.put_message(Message("Old", b"offset 100 opens a new file"))
            assert s.wait_dispatched(10)
            assert s.get_max_offset("Old", 0) == 100 and s.get_max_offset("New", 0) == 0
            (mnt / "filler").unlink()  # space is back: no restart needed
            r = s.put_message(Message("New", b"after"))
            acked[("New", r.queue_offset)] = [b"after"]
            assert s.wait_dispatched(10)
            assert s.get_message("G", "New", 0, 0).messages[0].body == b"after"
        with MessageStore(cfg) as s:
            for (topic, offset), bodies in acked.items():
                assert len(bodies) == 1
                g = s.get_message("G", topic, 0, offset, 1)
                assert [m.body for m in g.messages] == bodies, (topic, offset)
            assert s.get_max_offset("Old", 0) == 100 and s.get_max_offset("New", 0) == 1


def test_full_disk_leaves_keys_unindexed_instead_of_crashing(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Index files are sparse: a new one on a full disk used to be written through the mapping
    and kill the process (SIGBUS). Its blocks are reserved first now; when that fails the keys
    of the window stay out of the index (ERROR once) and every message stays readable."""
    with small_tmpfs(tmp_path / "mnt", "8m") as mnt:
        cfg = StoreConfig(
            store_path_root_dir=str(mnt / "store"),
            mapped_file_size_commit_log=1 << 20,
            mapped_file_size_consume_queue=20 * 1000,
            max_hash_slot_num=16,
            max_index_num=32,  # a new index file every 31 keys
        )
        with MessageStore(cfg) as s:
            s.put_message(Message("T", b"first", keys=["k0"]))
            assert s.wait_dispatched(10)
            fill(mnt)
            with caplog.at_level(logging.ERROR, logger="rocketq.store.message_store"):
                for i in range(1, 200):
                    assert s.put_message(Message("T", f"m{i}".encode(), keys=[f"k{i}"])).ok
                assert s.wait_dispatched(10)
            assert s.index_windows_skipped > 0
            assert any("are not indexed until space is back" in r.message for r in caplog.records)
            got = s.get_message("G", "T", 0, 0, 500)
            assert [m.body for m in got.messages] == [b"first", *(f"m{i}".encode() for i in range(1, 200))]
            (mnt / "filler").unlink()
            s.put_message(Message("T", b"later", keys=["later"]))
            assert s.wait_dispatched(10)
            assert [m.body for m in s.query_messages_by_key("T", "later").messages] == [b"later"]
        with MessageStore(cfg) as s:
            assert s.get_max_offset("T", 0) == 201
