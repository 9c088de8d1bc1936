"""IndexFile and IndexService: byte layout, RocketMQ's put/query rules, rolling, load and retention."""

from __future__ import annotations

import datetime
import os
import pathlib
import struct
import threading

import pytest

from rocketq.config import StoreConfig
from rocketq.errors import CorruptFileError
from rocketq.protocol.record import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from rocketq.store.index_file import (
    INDEX_ENTRY_SIZE,
    INDEX_HEADER_SIZE,
    IndexFile,
    IndexService,
    QueryOffsetResult,
    build_key,
    index_file_size,
    index_key_hash,
    time_millis_to_file_name,
)
from rocketq.store.record_scan import DispatchRequest

SLOTS = 8
ENTRIES = 16
T0 = 1_700_000_000_123
INT_MAX = 2**31 - 1


def ref_hash(key: str) -> int:
    """Independent reference: abs(Java String.hashCode) for BMP text, MIN_VALUE -> 0."""
    h = 0
    for ch in key:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    if h >= 2**31:
        h -= 2**32
    return 0 if h == -(2**31) else abs(h)


def key_in_same_slot(key: str, prefix: str, slots: int = SLOTS) -> str:
    """A key that lands in ``key``'s slot with a different hash."""
    target = ref_hash(key)
    for i in range(100_000):
        candidate = f"{prefix}{i}"
        h = ref_hash(candidate)
        if h % slots == target % slots and h != target:
            return candidate
    raise AssertionError("no colliding key found")


def key_in_other_slot(key: str, prefix: str, slots: int = SLOTS) -> str:
    target = ref_hash(key) % slots
    for i in range(100_000):
        candidate = f"{prefix}{i}"
        if ref_hash(candidate) % slots != target:
            return candidate
    raise AssertionError("no key in another slot found")


def read_header(path: pathlib.Path | str) -> tuple[int, ...]:
    with open(path, "rb") as fh:
        return struct.unpack(">qqqqii", fh.read(40))


def read_slot(path: pathlib.Path | str, slot: int) -> int:
    with open(path, "rb") as fh:
        fh.seek(40 + slot * 4)
        value: int = struct.unpack(">i", fh.read(4))[0]
        return value


def read_entry(path: pathlib.Path | str, n: int, slots: int = SLOTS) -> tuple[int, ...]:
    with open(path, "rb") as fh:
        fh.seek(40 + slots * 4 + n * 20)
        return struct.unpack(">iqii", fh.read(20))


class FakeCheckpoint:
    def __init__(self, index_msg_timestamp: int = 0) -> None:
        self.index_msg_timestamp = index_msg_timestamp
        self.flushes: list[int] = []

    def flush(self) -> None:
        self.flushes.append(self.index_msg_timestamp)


def req(
    offset: int,
    ts: int,
    keys: str = "",
    uniq_key: str | None = None,
    topic: str = "T",
    sys_flag: int = 0,
) -> DispatchRequest:
    return DispatchRequest(
        topic=topic,
        queue_id=0,
        commit_log_offset=offset,
        msg_size=100,
        tags_code=0,
        store_timestamp=ts,
        consume_queue_offset=0,
        keys=keys,
        uniq_key=uniq_key,
        sys_flag=sys_flag,
    )


@pytest.fixture
def index_file(tmp_path: pathlib.Path) -> IndexFile:
    return IndexFile(str(tmp_path / "20240101000000000"), SLOTS, ENTRIES)


def make_config(
    tmp_path: pathlib.Path, *, max_index_num: int = ENTRIES, max_msgs_num_batch: int = 64
) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=str(tmp_path / "store"),
        max_hash_slot_num=SLOTS,
        max_index_num=max_index_num,
        max_msgs_num_batch=max_msgs_num_batch,
    )


class Clock:
    """A settable millisecond clock for file names."""

    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


# -- hashing and naming ---------------------------------------------------------------------


def test_key_hash_is_abs_java_hash_with_min_value_zero() -> None:
    assert index_key_hash("hello") == 99162322
    assert index_key_hash("polygenelubricants") == 0  # hashCode() == Integer.MIN_VALUE
    for key in ("T#k1", "T#\u00e9t\u00e9", "topic#" + "x" * 50, ""):
        assert index_key_hash(key) == ref_hash(key)
    assert build_key("TopicA", "order-1") == "TopicA#order-1"


def test_file_name_is_local_time_with_millis() -> None:
    ms = 1_700_000_000_123
    expected = datetime.datetime.fromtimestamp(ms // 1000).strftime("%Y%m%d%H%M%S") + "123"
    name = time_millis_to_file_name(ms)
    assert name == expected
    assert len(name) == 17


# -- IndexFile: layout and put --------------------------------------------------------------


def test_new_file_size_and_empty_header(index_file: IndexFile) -> None:
    assert index_file_size(SLOTS, ENTRIES) == 40 + SLOTS * 4 + ENTRIES * 20
    assert os.path.getsize(index_file.path) == 392
    assert read_header(index_file.path) == (0, 0, 0, 0, 0, 1)
    assert index_file.index_count == 1
    assert index_file.hash_slot_count == 0
    assert not index_file.is_write_full()
    assert index_file.select_phy_offsets("T#a", 10, 0, 2**62) == []


def test_new_file_is_sparse(tmp_path: pathlib.Path) -> None:
    """Like RocketMQ's, a new index file takes no blocks for its empty slots and entries."""
    path = tmp_path / "20260101000000000"
    f = IndexFile(str(path), 100_000, 400_000)
    try:
        size = index_file_size(100_000, 400_000)
        assert os.path.getsize(path) == size
        assert os.stat(path).st_blocks * 512 < size // 2
    finally:
        f.shutdown()
    assert read_header(str(path)) == (0, 0, 0, 0, 0, 1)


def test_byte_exact_layout_after_puts(index_file: IndexFile) -> None:
    a = "T#a"
    b = key_in_other_slot(a, "T#b")
    c = key_in_same_slot(a, "T#c")
    puts = [
        (a, 100, T0),  # entry 1: first entry, timeDiff 0 (begin was 0)
        (b, 200, T0 + 2_500),  # entry 2: 2 s, own slot
        (c, 300, T0 + 3_000),  # entry 3: a's slot, chains to 1
        (a, 400, T0 + 10_999),  # entry 4: a's slot, chains to 3
        (b, 500, T0 - 5_000),  # entry 5: earlier than begin: timeDiff clamped to 0, chains to 2
    ]
    for key, off, ts in puts:
        assert index_file.put_key(key, off, ts)
    index_file.flush()

    expected = bytearray(40 + SLOTS * 4 + ENTRIES * 20)
    struct.pack_into(">q", expected, 0, T0)  # beginTimestamp
    struct.pack_into(">q", expected, 8, T0 - 5_000)  # endTimestamp: the last put's, not the max
    struct.pack_into(">q", expected, 16, 100)  # beginPhyOffset
    struct.pack_into(">q", expected, 24, 500)  # endPhyOffset
    struct.pack_into(">i", expected, 32, 2)  # hashSlotCount: two slots in use
    struct.pack_into(">i", expected, 36, 6)  # indexCount: 5 entries + 1
    slot_a, slot_b = ref_hash(a) % SLOTS, ref_hash(b) % SLOTS
    struct.pack_into(">i", expected, 40 + slot_a * 4, 4)
    struct.pack_into(">i", expected, 40 + slot_b * 4, 5)
    base = 40 + SLOTS * 4
    rows = [
        (1, ref_hash(a), 100, 0, 0),
        (2, ref_hash(b), 200, 2, 0),
        (3, ref_hash(c), 300, 3, 1),
        (4, ref_hash(a), 400, 10, 3),
        (5, ref_hash(b), 500, 0, 2),
    ]
    for n, h, off, diff, prev in rows:
        pos = base + n * 20
        struct.pack_into(">i", expected, pos, h)
        struct.pack_into(">q", expected, pos + 4, off)
        struct.pack_into(">i", expected, pos + 12, diff)
        struct.pack_into(">i", expected, pos + 16, prev)

    with open(index_file.path, "rb") as fh:
        actual = fh.read()
    assert actual == bytes(expected)
    assert (INDEX_HEADER_SIZE, INDEX_ENTRY_SIZE) == (40, 20)
    assert index_file.begin_timestamp == T0
    assert index_file.end_timestamp == T0 - 5_000
    assert index_file.begin_phy_offset == 100
    assert index_file.end_phy_offset == 500
    assert index_file.hash_slot_count == 2
    assert index_file.index_count == 6


def test_first_entry_of_rolled_file_uses_old_begin_timestamp(tmp_path: pathlib.Path) -> None:
    prev_end_ts, prev_end_off = T0, 5_000
    f = IndexFile(str(tmp_path / "f"), SLOTS, ENTRIES, prev_end_off, prev_end_ts)
    assert read_header(f.path) == (prev_end_ts, prev_end_ts, prev_end_off, prev_end_off, 0, 1)
    first_ts = T0 + 7_400
    assert f.put_key("T#k", 6_000, first_ts)
    # timeDiff was computed against the old begin (the previous file's end) ...
    assert read_entry(f.path, 1)[2] == 7
    # ... and only then the header's begin values became this message's.
    assert (f.begin_timestamp, f.begin_phy_offset) == (first_ts, 6_000)
    assert read_header(f.path)[:4] == (first_ts, first_ts, 6_000, 6_000)
    # RocketMQ would read that entry back 7 s late (first_ts + 7000); we read the first entry's
    # time from the header's beginTimestamp, which is its store time.
    assert f.select_phy_offsets("T#k", 10, first_ts, first_ts) == [6_000]
    assert f.select_phy_offsets("T#k", 10, first_ts + 7_000, first_ts + 7_000) == []
    # The second entry is relative to the new begin.
    assert f.put_key("T#k", 6_100, first_ts + 2_000)
    assert read_entry(f.path, 2)[2] == 2


def test_first_entry_of_first_file_has_zero_time_diff(index_file: IndexFile) -> None:
    assert index_file.put_key("T#k", 1, T0)
    assert read_entry(index_file.path, 1) == (ref_hash("T#k"), 1, 0, 0)
    assert index_file.select_phy_offsets("T#k", 10, T0, T0) == [1]


def test_time_diff_is_clamped(index_file: IndexFile) -> None:
    index_file.put_key("T#k", 1, 1_000)
    index_file.put_key("T#k", 2, 500)  # before begin -> 0
    index_file.put_key("T#k", 3, 1_000 + (INT_MAX + 10) * 1000)  # too far -> Integer.MAX_VALUE
    assert read_entry(index_file.path, 2)[2] == 0
    assert read_entry(index_file.path, 3)[2] == INT_MAX


def test_hash_slot_count_grows_only_for_empty_slots(index_file: IndexFile) -> None:
    a = "T#a"
    same = key_in_same_slot(a, "T#s")
    other = key_in_other_slot(a, "T#o")
    index_file.put_key(a, 1, T0)
    index_file.put_key(a, 2, T0)
    index_file.put_key(same, 3, T0)
    assert index_file.hash_slot_count == 1
    index_file.put_key(other, 4, T0)
    assert index_file.hash_slot_count == 2
    assert read_header(index_file.path)[4] == 2


def test_invalid_slot_value_is_treated_as_empty(index_file: IndexFile) -> None:
    key = "T#k"
    slot = ref_hash(key) % SLOTS
    index_file.put_key(key, 1, T0)
    # Corrupt the slot so that it points past indexCount (2).
    with open(index_file.path, "r+b") as fh:
        fh.seek(40 + slot * 4)
        fh.write(struct.pack(">i", 9))
    assert index_file.select_phy_offsets(key, 10, 0, 2**62) == []  # invalid slot: nothing
    assert index_file.put_key(key, 2, T0)
    assert read_entry(index_file.path, 2)[3] == 0  # prevIndex: slot treated as 0
    assert index_file.hash_slot_count == 2  # counted as a newly used slot
    assert read_slot(index_file.path, slot) == 2
    assert index_file.select_phy_offsets(key, 10, 0, 2**62) == [2]


def test_slot_collisions_chain_through_prev_index(index_file: IndexFile) -> None:
    a = "T#a"
    c = key_in_same_slot(a, "T#c")
    index_file.put_key(a, 10, T0)
    index_file.put_key(c, 20, T0 + 1_000)
    index_file.put_key(a, 30, T0 + 2_000)
    index_file.put_key(c, 40, T0 + 3_000)
    assert [read_entry(index_file.path, n)[3] for n in (1, 2, 3, 4)] == [0, 1, 2, 3]
    assert read_slot(index_file.path, ref_hash(a) % SLOTS) == 4
    assert index_file.select_phy_offsets(a, 10, 0, 2**62) == [30, 10]
    assert index_file.select_phy_offsets(c, 10, 0, 2**62) == [40, 20]


def test_equal_hashes_are_not_told_apart(index_file: IndexFile) -> None:
    # "Aa" and "BB" have the same String.hashCode: the index returns both, callers filter.
    assert index_key_hash("T#Aa") == index_key_hash("T#BB")
    index_file.put_key("T#Aa", 1, T0)
    index_file.put_key("T#BB", 2, T0)
    assert index_file.select_phy_offsets("T#Aa", 10, 0, 2**62) == [2, 1]


def test_full_file_refuses_puts(index_file: IndexFile) -> None:
    for i in range(ENTRIES - 1):
        assert index_file.put_key(f"T#{i}", i, T0 + i)
    assert index_file.is_write_full()
    assert index_file.index_count == ENTRIES
    assert not index_file.put_key("T#late", 99, T0 + 99)
    assert index_file.index_count == ENTRIES
    assert index_file.end_phy_offset == ENTRIES - 2


# -- IndexFile: query -----------------------------------------------------------------------


def test_select_filters_by_time_range_and_max_num(index_file: IndexFile) -> None:
    for i in range(10):
        index_file.put_key("T#k", 100 + i, T0 + i * 1_000)
    everything = [109, 108, 107, 106, 105, 104, 103, 102, 101, 100]
    assert index_file.select_phy_offsets("T#k", 64, 0, 2**62) == everything
    assert index_file.select_phy_offsets("T#k", 3, 0, 2**62) == [109, 108, 107]
    assert index_file.select_phy_offsets("T#k", 64, T0 + 2_000, T0 + 5_000) == [105, 104, 103, 102]
    assert index_file.select_phy_offsets("T#k", 2, T0 + 2_000, T0 + 5_000) == [105, 104]
    assert index_file.select_phy_offsets("T#k", 0, 0, 2**62) == []
    assert index_file.select_phy_offsets("T#other", 64, 0, 2**62) == []
    # Times read back have second precision relative to the file's first message.
    assert index_file.select_phy_offsets("T#k", 64, T0 + 2_000, T0 + 2_000) == [102]
    assert index_file.select_phy_offsets("T#k", 64, T0 + 2_001, T0 + 2_999) == []


def test_select_stops_at_an_entry_older_than_begin(index_file: IndexFile) -> None:
    # Out-of-order store times: entry 3 is older than the window, so the walk stops there and
    # never reaches entry 2, although entry 2 is inside the window (RocketMQ's rule).
    index_file.put_key("T#k", 1, T0)
    index_file.put_key("T#k", 2, T0 + 10_000)
    index_file.put_key("T#k", 3, T0 + 2_000)
    index_file.put_key("T#k", 4, T0 + 20_000)
    assert index_file.select_phy_offsets("T#k", 64, T0 + 5_000, T0 + 30_000) == [4]
    assert index_file.select_phy_offsets("T#k", 64, T0, T0 + 30_000) == [4, 3, 2, 1]


def test_select_stops_at_negative_time_diff_and_self_loop(index_file: IndexFile) -> None:
    for i in range(3):
        index_file.put_key("T#k", i + 1, T0 + i * 1_000)
    with open(index_file.path, "r+b") as fh:
        fh.seek(40 + SLOTS * 4 + 2 * 20 + 12)
        fh.write(struct.pack(">i", -1))  # entry 2 timeDiff < 0
    assert index_file.select_phy_offsets("T#k", 64, 0, 2**62) == [3]
    with open(index_file.path, "r+b") as fh:
        fh.seek(40 + SLOTS * 4 + 3 * 20 + 16)
        fh.write(struct.pack(">i", 3))  # entry 3 points at itself
    assert index_file.select_phy_offsets("T#k", 64, 0, 2**62) == [3]


def test_select_survives_a_cycle(index_file: IndexFile) -> None:
    for i in range(3):
        index_file.put_key("T#k", i + 1, T0)
    with open(index_file.path, "r+b") as fh:
        fh.seek(40 + SLOTS * 4 + 1 * 20 + 16)
        fh.write(struct.pack(">i", 3))  # 3 -> 2 -> 1 -> 3 -> ...
    found = index_file.select_phy_offsets("T#k", 64, 0, 2**62)
    assert found[:3] == [3, 2, 1]
    assert len(found) <= index_file.index_count


def test_is_time_matched(index_file: IndexFile) -> None:
    index_file.put_key("T#k", 1, 1_000)
    index_file.put_key("T#k", 2, 5_000)
    assert index_file.is_time_matched(0, 10_000)  # covers the file
    assert index_file.is_time_matched(2_000, 3_000)  # inside
    assert index_file.is_time_matched(0, 1_000)  # touches begin
    assert index_file.is_time_matched(5_000, 9_000)  # touches end
    assert not index_file.is_time_matched(0, 999)
    assert not index_file.is_time_matched(5_001, 9_000)


# -- IndexFile: lifecycle -------------------------------------------------------------------


def test_load_after_restart_reads_the_same(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "f")
    f = IndexFile(path, SLOTS, ENTRIES)
    for i in range(7):
        f.put_key(f"T#k{i % 3}", 1_000 + i, T0 + i * 1_000)
    before = [f.select_phy_offsets(f"T#k{i}", 64, 0, 2**62) for i in range(3)]
    header = (
        f.begin_timestamp,
        f.end_timestamp,
        f.begin_phy_offset,
        f.end_phy_offset,
        f.hash_slot_count,
        f.index_count,
    )
    f.shutdown()
    assert f.select_phy_offsets("T#k0", 64, 0, 2**62) == []  # closed

    g = IndexFile(path, SLOTS, ENTRIES)
    g.load()
    assert (
        g.begin_timestamp,
        g.end_timestamp,
        g.begin_phy_offset,
        g.end_phy_offset,
        g.hash_slot_count,
        g.index_count,
    ) == header
    assert [g.select_phy_offsets(f"T#k{i}", 64, 0, 2**62) for i in range(3)] == before
    assert before[0] == [1_006, 1_003, 1_000]
    g.put_key("T#k0", 2_000, T0 + 9_000)
    assert g.select_phy_offsets("T#k0", 64, 0, 2**62) == [2_000, 1_006, 1_003, 1_000]
    g.shutdown()


def test_load_forces_non_positive_index_count_to_one(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(bytes(index_file_size(SLOTS, ENTRIES)))
    f = IndexFile(str(path), SLOTS, ENTRIES)
    f.load()
    assert f.index_count == 1
    assert f.put_key("T#k", 5, T0)
    assert read_entry(path, 1)[1] == 5
    f.shutdown()


def test_length_mismatch_is_refused(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"\0" * 100)
    with pytest.raises(CorruptFileError, match="length not matched"):
        IndexFile(str(path), SLOTS, ENTRIES)


def test_destroy_deletes_file_even_while_a_reader_holds_it(index_file: IndexFile) -> None:
    index_file.put_key("T#k", 1, T0)
    assert index_file.hold()
    assert index_file.destroy()
    assert not os.path.exists(index_file.path)
    assert index_file.select_phy_offsets("T#k", 10, 0, 2**62) == []
    index_file.release()  # last reader unmaps


# -- IndexService ---------------------------------------------------------------------------


def test_build_index_indexes_uniq_key_and_each_key(tmp_path: pathlib.Path) -> None:
    svc = IndexService(make_config(tmp_path), FakeCheckpoint())
    svc.build_index(req(100, T0, keys="k1  k2 ", uniq_key="U1"))
    f = svc.files[-1]
    assert f.index_count == 4  # UNIQ_KEY, k1, k2; empty pieces skipped
    assert [read_entry(f.path, n)[0] for n in (1, 2, 3)] == [
        ref_hash("T#U1"),
        ref_hash("T#k1"),
        ref_hash("T#k2"),
    ]
    for key in ("U1", "k1", "k2"):
        assert svc.query_offset("T", key, 10, 0, 2**62).phy_offsets == [100]
    assert svc.query_offset("Other", "k1", 10, 0, 2**62).phy_offsets == []
    svc.build_index(req(200, T0 + 1_000))  # no keys at all: nothing to index
    assert f.index_count == 4
    assert os.path.dirname(f.path) == os.path.join(str(tmp_path / "store"), "index")
    assert len(f.name) == 17 and f.name.isdigit()
    svc.shutdown()


def test_rollback_and_already_indexed_are_skipped(tmp_path: pathlib.Path) -> None:
    svc = IndexService(make_config(tmp_path), FakeCheckpoint())
    svc.build_index(req(100, T0, keys="k", sys_flag=TRANSACTION_ROLLBACK_TYPE))
    assert svc.files[-1].index_count == 1
    svc.build_index(req(100, T0, keys="k", sys_flag=TRANSACTION_PREPARED_TYPE))
    svc.build_index(req(200, T0, keys="k", sys_flag=TRANSACTION_COMMIT_TYPE))
    assert svc.files[-1].index_count == 3
    svc.build_index(req(150, T0, keys="k"))  # below endPhyOffset 200: already indexed
    assert svc.files[-1].index_count == 3
    svc.build_index(req(200, T0, keys="k"))  # equal is not below: RocketMQ indexes it again
    assert svc.files[-1].index_count == 4
    assert svc.query_offset("T", "k", 10, 0, 2**62).phy_offsets == [200, 200, 100]
    assert svc.max_phy_offset == 200
    svc.shutdown()


def test_roll_starts_at_previous_end_and_updates_checkpoint(tmp_path: pathlib.Path) -> None:
    cp = FakeCheckpoint()
    svc = IndexService(make_config(tmp_path), cp, clock_ms=Clock(T0))
    per_file = ENTRIES - 1
    for i in range(per_file):
        svc.build_index(req(1_000 + i * 10, T0 + i * 1_000, keys=f"k{i}"))
    assert len(svc.files) == 1
    full = svc.files[0]
    assert full.is_write_full()
    assert cp.flushes == []  # not rolled yet

    svc.build_index(req(5_000, T0 + 60_000, keys="next"))
    assert len(svc.files) == 2
    first, second = svc.files
    assert first is full
    assert cp.index_msg_timestamp == full.end_timestamp == T0 + (per_file - 1) * 1_000
    assert cp.flushes == [full.end_timestamp]
    assert not full.dirty
    # The new file was created with the previous end values, then its first put set the begin values.
    assert second.name > first.name
    assert read_entry(second.path, 1)[2] == (T0 + 60_000 - full.end_timestamp) // 1000
    assert (second.begin_phy_offset, second.begin_timestamp) == (5_000, T0 + 60_000)
    assert svc.query_offset("T", "next", 10, 0, 2**62).phy_offsets == [5_000]
    svc.shutdown()


def test_new_file_header_before_first_put(tmp_path: pathlib.Path) -> None:
    cp = FakeCheckpoint()
    svc = IndexService(make_config(tmp_path), cp)
    for i in range(ENTRIES - 1):
        svc.build_index(req(i + 1, T0 + i, keys="k"))
    # A ROLLBACK record still makes the writer roll, but adds nothing.
    svc.build_index(req(ENTRIES + 10, T0 + 99_000, keys="k", sys_flag=TRANSACTION_ROLLBACK_TYPE))
    prev, new = svc.files
    end_ts, end_off = prev.end_timestamp, prev.end_phy_offset
    assert read_header(new.path) == (end_ts, end_ts, end_off, end_off, 0, 1)
    assert (new.begin_timestamp, new.end_timestamp) == (end_ts, end_ts)
    assert (new.begin_phy_offset, new.end_phy_offset) == (end_off, end_off)
    svc.shutdown()


def test_message_whose_keys_span_two_files(tmp_path: pathlib.Path) -> None:
    svc = IndexService(make_config(tmp_path, max_index_num=4), FakeCheckpoint())  # 3 entries per file
    svc.build_index(req(10, T0, keys="a b"))
    svc.build_index(req(20, T0 + 1_000, keys="c d"))  # c fills the first file, d goes to the next
    assert [f.index_count for f in svc.files] == [4, 2]
    assert svc.query_offset("T", "d", 10, 0, 2**62).phy_offsets == [20]
    assert svc.query_offset("T", "c", 10, 0, 2**62).phy_offsets == [20]
    svc.shutdown()


def test_file_names_are_bumped_when_taken_or_out_of_order(tmp_path: pathlib.Path) -> None:
    clock = Clock(T0)
    svc = IndexService(make_config(tmp_path, max_index_num=2), FakeCheckpoint(), clock_ms=clock)
    for i in range(3):
        svc.build_index(req(i + 1, T0, keys="k"))
    base = time_millis_to_file_name(T0)
    names = [f.name for f in svc.files]
    assert names[0] == base
    assert names == sorted(names)
    assert len(set(names)) == 3
    assert names[1] == time_millis_to_file_name(T0 + 1)
    assert names[2] == time_millis_to_file_name(T0 + 2)
    clock.ms = T0 - 3_600_000  # the clock went back an hour
    svc.build_index(req(10, T0, keys="k"))
    assert svc.files[-1].name == time_millis_to_file_name(T0 + 3)
    svc.shutdown()


def test_query_walks_files_newest_first(tmp_path: pathlib.Path) -> None:
    svc = IndexService(make_config(tmp_path, max_index_num=4), FakeCheckpoint())
    for i in range(9):  # 3 files of 3 entries
        svc.build_index(req(100 + i, T0 + i * 1_000, keys="k"))
    assert len(svc.files) == 3
    result = svc.query_offset("T", "k", 64, 0, 2**62)
    assert result == QueryOffsetResult(list(range(108, 99, -1)), T0 + 8_000, 108)
    assert svc.query_offset("T", "k", 4, 0, 2**62).phy_offsets == [108, 107, 106, 105]
    # Time range: only the files that overlap are searched, and the walk stops at the file
    # that begins before the window.
    assert svc.query_offset("T", "k", 64, T0 + 2_000, T0 + 4_000).phy_offsets == [104, 103, 102]
    assert svc.query_offset("T", "k", 64, T0 + 7_500, 2**62).phy_offsets == [108]
    # 106 is the first entry of the third file: its timeDiff was taken against the previous
    # file's end (5 s) before the header's begin moved, but it reads back at its store time (6 s).
    assert svc.query_offset("T", "k", 64, T0 + 7_000, 2**62).phy_offsets == [108, 107]
    assert svc.query_offset("T", "k", 64, T0 + 6_000, 2**62).phy_offsets == [108, 107, 106]
    assert svc.query_offset("T", "missing", 64, 0, 2**62).phy_offsets == []
    svc.shutdown()


def test_query_stops_at_a_file_that_begins_before_the_window(tmp_path: pathlib.Path) -> None:
    svc = IndexService(make_config(tmp_path, max_index_num=2), FakeCheckpoint())  # 1 entry per file
    svc.build_index(req(1, T0 + 10_000, keys="k"))
    svc.build_index(req(2, T0, keys="k"))  # store time went back: the second file begins at T0
    assert len(svc.files) == 2
    # The newest file begins before the window, so the older file (which matches) is not searched.
    assert svc.query_offset("T", "k", 64, T0 + 5_000, T0 + 20_000).phy_offsets == []
    assert svc.query_offset("T", "k", 64, T0, T0 + 20_000).phy_offsets == [2, 1]
    svc.shutdown()


def test_query_max_num_is_capped_by_config(tmp_path: pathlib.Path) -> None:
    svc = IndexService(make_config(tmp_path, max_index_num=64, max_msgs_num_batch=5), FakeCheckpoint())
    for i in range(20):
        svc.build_index(req(i + 1, T0 + i * 1_000, keys="k"))
    assert svc.query_offset("T", "k", 1_000, 0, 2**62).phy_offsets == [20, 19, 18, 17, 16]
    assert svc.query_offset("T", "k", 2, 0, 2**62).phy_offsets == [20, 19]
    svc.shutdown()


def test_query_without_files(tmp_path: pathlib.Path) -> None:
    svc = IndexService(make_config(tmp_path), FakeCheckpoint())
    assert svc.query_offset("T", "k", 10, 0, 2**62) == QueryOffsetResult([], 0, 0)
    assert svc.max_phy_offset == 0
    assert svc.load(last_exit_ok=True)
    assert svc.files == []


def test_load_after_restart(tmp_path: pathlib.Path) -> None:
    cfg = make_config(tmp_path, max_index_num=4)
    svc = IndexService(cfg, FakeCheckpoint())
    for i in range(7):
        svc.build_index(req(100 + i, T0 + i * 1_000, keys=f"k{i % 2}"))
    before = [svc.query_offset("T", f"k{i}", 64, 0, 2**62) for i in range(2)]
    names = [f.name for f in svc.files]
    svc.shutdown()

    again = IndexService(cfg, FakeCheckpoint())
    assert again.load(last_exit_ok=True)
    assert [f.name for f in again.files] == names
    assert [again.query_offset("T", f"k{i}", 64, 0, 2**62) for i in range(2)] == before
    assert before[1].phy_offsets == [105, 103, 101]
    # Indexing continues in the newest file and skips what it already has.
    again.build_index(req(106, T0 + 6_000, keys="k0"))  # == endPhyOffset: RocketMQ re-indexes it
    again.build_index(req(50, T0, keys="k0"))  # below: skipped
    assert again.query_offset("T", "k0", 64, 0, 2**62).phy_offsets == [106, 106, 104, 102, 100]
    again.shutdown()


def test_abnormal_load_destroys_files_newer_than_checkpoint(tmp_path: pathlib.Path) -> None:
    cfg = make_config(tmp_path, max_index_num=4)
    cp = FakeCheckpoint()
    svc = IndexService(cfg, cp)
    for i in range(8):  # files: [0,1,2] [3,4,5] [6,7]
        svc.build_index(req(100 + i, T0 + i * 1_000, keys="k"))
    assert cp.index_msg_timestamp == T0 + 5_000  # the second file, full, flushed on the last roll
    paths = [f.path for f in svc.files]
    svc.shutdown()

    crashed = IndexService(cfg, FakeCheckpoint(index_msg_timestamp=T0 + 2_000))
    assert crashed.load(last_exit_ok=False)
    assert [f.path for f in crashed.files] == paths[:1]
    assert [os.path.exists(p) for p in paths] == [True, False, False]
    assert crashed.query_offset("T", "k", 64, 0, 2**62).phy_offsets == [102, 101, 100]
    assert crashed.max_phy_offset == 102
    crashed.shutdown()


def test_normal_load_keeps_files_newer_than_checkpoint(tmp_path: pathlib.Path) -> None:
    cfg = make_config(tmp_path, max_index_num=4)
    svc = IndexService(cfg, FakeCheckpoint())
    for i in range(5):
        svc.build_index(req(100 + i, T0 + i * 1_000, keys="k"))
    svc.shutdown()
    again = IndexService(cfg, FakeCheckpoint(index_msg_timestamp=0))
    assert again.load(last_exit_ok=True)
    assert len(again.files) == 2
    again.shutdown()


def test_load_fails_on_a_file_of_the_wrong_size(tmp_path: pathlib.Path) -> None:
    cfg = make_config(tmp_path)
    index_dir = tmp_path / "store" / "index"
    index_dir.mkdir(parents=True)
    (index_dir / "20240101000000000").write_bytes(bytes(index_file_size(SLOTS, ENTRIES)))
    (index_dir / "20240101000000001").write_bytes(b"\0" * 10)
    (index_dir / "README").write_text("not an index file")
    svc = IndexService(cfg, FakeCheckpoint())
    assert not svc.load(last_exit_ok=True)
    assert svc.files == []


def test_delete_expired_files_keeps_the_newest(tmp_path: pathlib.Path) -> None:
    svc = IndexService(make_config(tmp_path, max_index_num=4), FakeCheckpoint())
    for i in range(9):  # ends: 102, 105, 108
        svc.build_index(req(100 + i, T0 + i * 1_000, keys="k"))
    paths = [f.path for f in svc.files]
    assert svc.delete_expired_file(102) == 0  # endPhyOffset must be strictly below
    assert svc.delete_expired_file(103) == 1
    assert [f.path for f in svc.files] == paths[1:]
    assert not os.path.exists(paths[0])
    assert svc.delete_expired_file(10_000) == 1  # never the newest
    assert [f.path for f in svc.files] == paths[2:]
    assert svc.query_offset("T", "k", 64, 0, 2**62).phy_offsets == [108, 107, 106]
    svc.destroy()
    assert svc.files == []
    assert not any(os.path.exists(p) for p in paths)


def test_flush_makes_full_newest_file_durable_and_checkpoints_it(tmp_path: pathlib.Path) -> None:
    cp = FakeCheckpoint()
    svc = IndexService(make_config(tmp_path, max_index_num=4), cp)
    svc.build_index(req(1, T0, keys="k"))
    svc.flush()
    assert cp.flushes == []  # not full: the checkpoint is not touched
    assert not svc.files[-1].dirty
    svc.build_index(req(2, T0 + 1_000, keys="a b"))
    svc.flush()
    assert cp.flushes == [T0 + 1_000]
    svc.flush()  # nothing new: no further checkpoint flush
    assert cp.flushes == [T0 + 1_000]
    svc.shutdown()


def test_queries_run_while_the_writer_rolls(tmp_path: pathlib.Path) -> None:
    svc = IndexService(make_config(tmp_path, max_index_num=8, max_msgs_num_batch=64), FakeCheckpoint())
    total = 300
    errors: list[BaseException] = []
    done = threading.Event()

    def writer() -> None:
        try:
            for i in range(total):
                svc.build_index(req(i + 1, T0 + i * 1_000, keys="k"))
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    def deleter() -> None:
        try:
            while not done.is_set():
                svc.delete_expired_file(max(svc.max_phy_offset - 20, 0))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer), threading.Thread(target=deleter)]
    for t in threads:
        t.start()
    while not done.is_set():
        found = svc.query_offset("T", "k", 64, 0, 2**62).phy_offsets
        assert found == sorted(found, reverse=True)
        assert len(set(found)) == len(found)
    for t in threads:
        t.join()
    assert errors == []
    assert svc.query_offset("T", "k", 3, 0, 2**62).phy_offsets == [total, total - 1, total - 2]
    svc.shutdown()


def test_putting_again_after_a_batch_cut_off_before_its_header_matches_a_clean_file(
    tmp_path: pathlib.Path,
) -> None:
    """A crash can leave a batch's entries and slot values on disk while the header still has
    the old ``indexCount``; putting the batch again (re-dispatch after recovery) must give the
    same bytes as a file that never crashed, not slots that point at the entry being written."""
    keys = [f"T#k{i}" for i in range(6)]
    hashes = [index_key_hash(k) for k in keys]
    offsets = [1000 + 100 * i for i in range(6)]
    times = [T0 + i for i in range(6)]

    clean = IndexFile(str(tmp_path / "clean"), SLOTS, ENTRIES)
    assert clean.put_keys(hashes, offsets, times) == 6
    clean.shutdown()

    torn_path = tmp_path / "torn"
    torn = IndexFile(str(torn_path), SLOTS, ENTRIES)
    assert torn.put_keys(hashes[:2], offsets[:2], times[:2]) == 2
    header_after_two = torn_path.read_bytes()[:INDEX_HEADER_SIZE]
    assert torn.put_keys(hashes[2:], offsets[2:], times[2:]) == 4
    torn.shutdown()
    # the crash: the last batch's entries and slots are there, its header is not
    data = bytearray(torn_path.read_bytes())
    data[:INDEX_HEADER_SIZE] = header_after_two
    torn_path.write_bytes(bytes(data))

    again = IndexFile(str(torn_path), SLOTS, ENTRIES)
    again.load()
    assert again.index_count == 3
    assert again.put_keys(hashes[2:], offsets[2:], times[2:]) == 4
    again.shutdown()
    assert torn_path.read_bytes() == (tmp_path / "clean").read_bytes()
