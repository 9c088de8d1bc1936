"""The columnar dispatch path gives what the record-by-record path gives, byte for byte, with
the compiled window scan and without it."""

from __future__ import annotations

import os
import pathlib
import random
import shutil
import struct

import numpy as np
import pytest

from _support.files import tree_bytes
from _support.index_entries import index_entries_of
from _support.queues import assert_same_queue
from rocketq import speedups
from rocketq.config import StoreConfig
from rocketq.message import BrokerMessage, java_string_hash
from rocketq.protocol import record as rec
from rocketq.store import MessageStore, consume_queue, index_file
from rocketq.store import dispatch as d
from rocketq.store import record_scan as rs
from rocketq.store.consume_queue import ConsumeQueue
from rocketq.store.dispatch import ReputMessageService
from rocketq.store.index_file import IndexFile
from rocketq.store.record_scan import DispatchBatch, DispatchRequest

# every test here runs with the compiled scan (rocketq._speedups.scan_window) and the pure one
pytestmark = pytest.mark.usefixtures("codec_impl")

FIELDS = (
    "topic",
    "queue_id",
    "commit_log_offset",
    "msg_size",
    "tags_code",
    "store_timestamp",
    "consume_queue_offset",
    "keys",
    "uniq_key",
    "sys_flag",
    "prepared_transaction_offset",
    "properties_raw",
)
VALUES = ["", "a", "order-1", "k1 k2", " k3 ", "x" * 70, "ü-key", "TAGS\x01z", "0", "7"]
IPV6_HOST = bytes(15) + b"\x01" + struct.pack(">i", 1234)


def _messages(
    seed: int, n: int, topics: tuple[str, ...] = ("T", "Other", rs.SCHEDULE_TOPIC)
) -> list[BrokerMessage]:
    """Messages with every property shape the parser distinguishes."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        items = [
            (name, rnd.choice(VALUES))
            for name in ("UNIQ_KEY", "KEYS", "TAGS", "DELAY", "WAIT", "X")
            if rnd.random() < 0.6
        ]
        if rnd.random() < 0.02:  # properties longer than the scan's padding
            items.append(("BIG", "y" * 1500))
        rnd.shuffle(items)
        raw = "".join(f"{k}\x01{v}\x02" for k, v in items).encode()
        if rnd.random() < 0.1:
            raw = raw[:-1]
        topic = rnd.choice(topics) if rnd.random() < 0.4 else "T"
        body = os.urandom(rnd.choice([0, 5, 128])) if rnd.random() < 0.8 else b"\x02TAGS\x01zz\x02KEYS\x01q"
        sys_flag = rnd.choice([0, 0, 0, 0x4, 0x8, 0xC])
        host = {}
        if rnd.random() < 0.03:  # an IPv6 born host ends a columnar run
            host = {"born_host": IPV6_HOST}
        out.append(BrokerMessage(topic, body, raw, queue_id=i % 5, sys_flag=sys_flag, **host))  # type: ignore[arg-type]
    return out


def _segment(tmp_path: pathlib.Path, msgs: list[BrokerMessage]) -> bytes:
    cfg = StoreConfig(store_path_root_dir=str(tmp_path / "seg"), mapped_file_size_commit_log=4 << 20)
    with MessageStore(cfg) as store:
        for m in msgs:
            store.commitlog.put_message(m)
        mf = store.commitlog.queue.files[0]
        data = mf.read(0, mf.read_position)
        assert data is not None
        return data


@pytest.fixture(autouse=True)
def _columnar_from_16_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """The windows here are small: take the columnar path from 16 records on (the default
    threshold is a speed setting, not part of what the two paths must agree on)."""
    monkeypatch.setattr(rs, "MIN_COLUMNAR_RECORDS", 16)


@pytest.mark.parametrize("seed", [1, 2])
def test_columns_match_the_record_parser(tmp_path: pathlib.Path, seed: int) -> None:
    data = _segment(tmp_path, _messages(seed, 1500))
    levels = d.parse_delay_levels("1s 5s 10s")
    batches = 0
    for delay_levels in (levels, None):
        for window in (len(data), 65536, 3000):
            pos = 0
            while pos < len(data):
                chunk = data[pos : pos + window]
                got, used, stop = rs.parse_window(chunk, pos, delay_levels)
                want, want_used, want_stop = rs._parse_records(chunk, pos, delay_levels)
                if isinstance(got, DispatchBatch):
                    batches += 1
                    assert used <= want_used  # a prefix: the scalar parser takes over after it
                    want = want[: len(got)]
                    rows, hashes = got.index_entries()
                    assert list(zip(rows.tolist(), hashes.tolist(), strict=True)) == index_entries_of(want)
                    if used < want_used:
                        assert stop is None
                else:
                    assert (used, stop) == (want_used, want_stop)
                assert len(got) == len(want)
                for a, b in zip(got, want, strict=True):
                    assert [getattr(a, f) for f in FIELDS] == [getattr(b, f) for f in FIELDS]
                if used == 0:
                    break
                pos += used
            assert pos == len(data)
    assert batches > 10


def _v1_window(n: int) -> tuple[bytes, list[int]]:
    parts = []
    starts = []
    pos = 0
    for i in range(n):
        raw = rec.encode_record(
            topic="T",
            body=b"body",
            properties=b"TAGS\x01A\x02KEYS\x01k\x02",
            queue_offset=i,
            physical_offset=pos,
            store_timestamp=1_000 + i,
        )
        starts.append(pos)
        parts.append(raw)
        pos += len(raw)
    return b"".join(parts), starts


def test_a_damaged_record_ends_the_batch_as_corrupt() -> None:
    data, starts = _v1_window(40)
    bad = bytearray(data)
    # topic length byte of record 30 (V1/IPv4: 88 + body length 4)
    bad[starts[30] + 88 + 4] = 0
    got, used, stop = rs.parse_window(bytes(bad), 0)
    assert isinstance(got, DispatchBatch)
    assert (len(got), used, stop) == (30, starts[30], rec.RecordKind.CORRUPT)


def test_blank_and_zero_tail_after_a_batch() -> None:
    data, _ = _v1_window(20)
    blank = struct.pack(">ii", 64, rec.BLANK_MAGIC_CODE) + bytes(56)
    got, used, stop = rs.parse_window(data + blank, 0)
    assert (len(got), used, stop) == (20, len(data), rec.RecordKind.BLANK)
    got, used, stop = rs.parse_window(data + bytes(100), 0)
    assert (len(got), used, stop) == (20, len(data), rec.RecordKind.END)
    got, used, stop = rs.parse_window(data + data[:50], 0)  # the window ends inside a record
    assert (len(got), used, stop) == (20, len(data), None)


def _rebuild(cfg: StoreConfig, window_bytes: int) -> tuple[dict[str, bytes], list[bytes]]:
    root = cfg.store_path_root_dir
    shutil.rmtree(os.path.join(root, "consumequeue"))
    shutil.rmtree(os.path.join(root, "index"))
    store = MessageStore(cfg)
    old = ReputMessageService.do_reput

    def windowed(self: ReputMessageService) -> int:
        self.window_bytes = window_bytes
        return old(self)

    ReputMessageService.do_reput = windowed  # type: ignore[method-assign]
    try:
        store.start()
    finally:
        ReputMessageService.do_reput = old  # type: ignore[method-assign]
    store.shutdown()
    queues, index = tree_bytes(os.path.join(root, "consumequeue")), tree_bytes(os.path.join(root, "index"))
    return queues, sorted(index.values())


def test_columnar_dispatch_writes_the_same_files(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = StoreConfig(
        store_path_root_dir=str(tmp_path / "store"),
        mapped_file_size_commit_log=256 * 1024,
        mapped_file_size_consume_queue=20 * 100,  # many ConsumeQueue files: runs cross file ends
        max_hash_slot_num=97,
        max_index_num=700,  # several index files, filled in the middle of a window
    )
    with MessageStore(cfg) as store:
        # straight to the CommitLog: the broker-side rewrites (delay, timer) would reject some
        # of these property strings, and what is tested here is what dispatch makes of records
        # (no SCHEDULE_TOPIC records: their delivery would add records between the runs)
        for i, m in enumerate(_messages(3, 3000, ("T", "Other"))):
            store.commitlog.put_message(m) if i % 7 else store.commitlog.put_messages([m])
        assert store.wait_dispatched(30)
    root = cfg.store_path_root_dir
    queues, index = tree_bytes(os.path.join(root, "consumequeue")), tree_bytes(os.path.join(root, "index"))
    live = queues, sorted(index.values())
    assert len(live[1]) >= 3
    monkeypatch.setattr(rs, "MIN_COLUMNAR_RECORDS", 1 << 30)
    scalar = _rebuild(cfg, 1 << 20)
    monkeypatch.setattr(rs, "MIN_COLUMNAR_RECORDS", 16)
    for window in (4 << 20, 8192):
        assert _rebuild(cfg, window) == scalar
    assert live == scalar


def test_index_entries_in_bulk_equal_one_by_one(tmp_path: pathlib.Path) -> None:
    rnd = random.Random(5)
    for trial in range(20):
        slots, entries = rnd.choice([(1, 50), (7, 40), (64, 300)])
        a = IndexFile(
            str(tmp_path / f"a{trial}"),
            slots,
            entries,
            end_phy_offset=10,
            end_timestamp=rnd.choice([0, 5000]),
        )
        b = IndexFile(
            str(tmp_path / f"b{trial}"), slots, entries, end_phy_offset=10, end_timestamp=a.end_timestamp
        )
        # a stale slot value, as a batch cut off before its header leaves behind
        stale = struct.pack(">i", rnd.randrange(1, entries))
        for f in (a, b):
            f._mm[40:44] = stale
        ts = 10_000
        phys = 100
        while not a.is_write_full():
            n = rnd.randrange(1, 30)
            hashes = [rnd.randrange(0, 1 << 31) for _ in range(n)]
            stamps = []
            offsets = []
            for _ in range(n):
                ts += rnd.choice([0, 0, 400, 1500])
                phys += rnd.choice([0, 90])
                stamps.append(ts)
                offsets.append(phys)
            done_a = a.put_keys(hashes, offsets, stamps)
            done_b = b.put_key_arrays(np.array(hashes), np.array(offsets), np.array(stamps))
            assert done_a == done_b
            assert a._mm[:] == b._mm[:]
            assert (a.hash_slot_count, a.index_count, a.begin_timestamp, a.end_phy_offset) == (
                b.hash_slot_count,
                b.index_count,
                b.begin_timestamp,
                b.end_phy_offset,
            )
        a.shutdown()
        b.shutdown()


def test_queue_units_in_bulk_equal_one_by_one(tmp_path: pathlib.Path) -> None:
    rnd = random.Random(9)
    for trial in range(15):
        a = ConsumeQueue("T", 0, str(tmp_path / f"a{trial}"), 20 * 16)
        b = ConsumeQueue("T", 0, str(tmp_path / f"b{trial}"), 20 * 16)
        cq = rnd.choice([0, 0, 5, 40])
        phys = 0
        for _ in range(12):
            units = []
            for _ in range(rnd.randrange(1, 40)):
                step = rnd.random()
                if step < 0.05:
                    cq += 2  # a hole
                elif step < 0.1:
                    cq -= 1  # a duplicate
                elif step < 0.15:
                    phys -= 300  # already built
                units.append((phys, 100, rnd.randrange(-5, 5), cq))
                phys += 100
                cq += 1
            arrays = [np.array(col, dtype=np.int64) for col in zip(*units, strict=True)]
            assert a.put_units(units) == b.put_unit_arrays(*arrays)
            assert (a.max_offset_in_queue, a.min_offset_in_queue, a.max_physic_offset) == (
                b.max_offset_in_queue,
                b.min_offset_in_queue,
                b.max_physic_offset,
            )
            assert [mf.mm[: mf.wrote_position] for mf in a.queue.files] == [
                mf.mm[: mf.wrote_position] for mf in b.queue.files
            ]
        a.shutdown()
        b.shutdown()


def test_topic_listeners_see_only_their_topic(tmp_path: pathlib.Path) -> None:
    cfg = StoreConfig(store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commit_log=1 << 20)
    with MessageStore(cfg) as store:
        reput = store.reput
        assert reput is not None
        seen: list[list[DispatchRequest]] = []
        everything: list[int] = []
        reput.add_arrival_listener(seen.append, topic="Wanted")
        reput.add_arrival_listener(lambda reqs: everything.append(len(reqs)))
        store.put_messages([BrokerMessage("Other", b"x", b"KEYS\x01a\x02") for _ in range(40)])
        assert store.wait_dispatched(10)
        assert seen == [] and sum(everything) == 40
        batch = [
            BrokerMessage("Wanted" if i % 4 == 0 else "Other", b"x", b"TAGS\x01A\x02") for i in range(40)
        ]
        store.put_messages(batch)
        assert store.wait_dispatched(10)
        got = [r for reqs in seen for r in reqs]
        assert [r.topic for r in got] == ["Wanted"] * 10
        assert [r.tags_code for r in got] == [java_string_hash("A")] * 10
        assert sum(everything) == 80


@pytest.mark.parametrize("window", [4 << 20, 8192, 1500])
def test_compiled_scan_writes_the_files_of_the_pure_one(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, window: int
) -> None:
    """ConsumeQueue and index files rebuilt with the compiled scan (columns, objects with their
    index hashes) against those of the pure parser: the same bytes."""
    if speedups.COMPILED is None:
        pytest.skip(f"compiled codecs not in use: {speedups.REASON}")
    cfg = StoreConfig(
        store_path_root_dir=str(tmp_path / "store"),
        mapped_file_size_commit_log=256 * 1024,
        mapped_file_size_consume_queue=20 * 100,
        max_hash_slot_num=97,
        max_index_num=700,
    )
    with MessageStore(cfg) as store:
        for i, m in enumerate(_messages(4, 2500, ("T", "Other"))):
            store.commitlog.put_message(m) if i % 5 else store.commitlog.put_messages([m])
        assert store.wait_dispatched(30)
    monkeypatch.setattr(rs, "_scan_window", None)
    pure = _rebuild(cfg, window)
    monkeypatch.setattr(rs, "_scan_window", speedups.COMPILED.scan_window)
    for objects_below in (1, 384, 1 << 30):  # columns, the default, objects only
        monkeypatch.setattr(rs, "MIN_COMPILED_COLUMNAR_RECORDS", objects_below)
        assert _rebuild(cfg, window) == pure


def test_compiled_index_put_keys_writes_the_pure_bytes(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """IndexFile.put_keys with its loop compiled against the pure loop: the same file bytes and
    state, stale slots, files filling up, timestamps before the file's begin and values out of
    a field's range (the compiled loop leaves those to the pure one, which raises) included."""
    if speedups.COMPILED is None:
        pytest.skip(f"compiled codecs not in use: {speedups.REASON}")
    compiled = speedups.COMPILED.index_put_keys
    rnd = random.Random(7)
    for trial in range(30):
        slots, entries = rnd.choice([(1, 50), (7, 40), (64, 300), (500, 2000)])
        begin = rnd.choice([0, 5000, 1 << 62])
        stale_at = 40 + 4 * rnd.randrange(slots)  # a stale slot value, as a cut-off batch leaves
        stale = struct.pack(">i", rnd.randrange(1, entries))
        files = []
        for side in ("c", "p"):
            path = str(tmp_path / f"{side}{trial}")
            f = IndexFile(path, slots, entries, end_phy_offset=10, end_timestamp=begin)
            f._mm[stale_at : stale_at + 4] = stale
            files.append(f)
        ts, phys = 10_000, 100
        while not files[0].is_write_full():
            n = rnd.randrange(1, 40)
            hashes = [rnd.randrange(0, 1 << 31) for _ in range(n)]
            stamps = [ts + rnd.choice([0, -3000, 400, 1500, 1 << 40]) for _ in range(n)]
            offsets = [phys + 90 * i for i in range(n)]
            ts += 1000
            phys += 90 * n
            if rnd.random() < 0.05:
                hashes[rnd.randrange(n)] = rnd.choice([1 << 31, -(1 << 31) - 1])  # struct.error
            if rnd.random() < 0.05:
                offsets[rnd.randrange(n)] = 1 << 63
            outcomes = []
            for f, impl in zip(files, (compiled, None), strict=True):
                monkeypatch.setattr(index_file, "_index_put_keys", impl)
                try:
                    outcomes.append(f.put_keys(list(hashes), list(offsets), list(stamps)))
                except struct.error as exc:
                    outcomes.append(str(exc))
            assert outcomes[0] == outcomes[1]
            a, b = files
            assert a._mm[:] == b._mm[:]
            state = ("hash_slot_count", "index_count", "begin_timestamp", "end_timestamp", "begin_phy_offset")
            assert [getattr(a, s) for s in state] == [getattr(b, s) for s in state]
        for f in files:
            f.shutdown()


def test_compiled_queue_runs_write_the_pure_bytes(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ConsumeQueue.put_units with its run loop compiled against the pure loop: the same files
    and state through holes, duplicates, units already built, file ends, queue offset 0 and
    values out of a unit field's range (left to the pure loop, which raises)."""
    if speedups.COMPILED is None:
        pytest.skip(f"compiled codecs not in use: {speedups.REASON}")
    rnd = random.Random(13)
    for trial in range(25):
        queues = [ConsumeQueue("T", 0, str(tmp_path / f"{side}{trial}"), 20 * 16) for side in "cp"]
        cq = rnd.choice([0, 0, 5, 40])
        phys = 0
        for _ in range(15):
            units = []
            for _ in range(rnd.randrange(1, 40)):
                step = rnd.random()
                if step < 0.05:
                    cq += 2  # a hole
                elif step < 0.1:
                    cq -= 1  # a duplicate
                elif step < 0.15:
                    phys -= 300  # already built
                size = 100 if step < 0.97 else rnd.choice([0, -5, 1 << 31])
                tags = rnd.randrange(-5, 5) if step < 0.98 else rnd.choice([1 << 63, -(1 << 63)])
                units.append((phys, size, tags, cq))
                phys += 100
                cq += 1
            outcomes = []
            for q, impl in zip(queues, (speedups.COMPILED.cq_pack_run, None), strict=True):
                monkeypatch.setattr(consume_queue, "_cq_pack_run", impl)
                try:
                    outcomes.append(q.put_units(list(units)))
                except struct.error as exc:
                    outcomes.append(str(exc))
            assert outcomes[0] == outcomes[1]
            assert_same_queue(*queues)
        for q in queues:
            q.shutdown()
