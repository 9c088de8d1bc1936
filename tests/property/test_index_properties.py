"""Properties of the index: lookups against simple models of what was inserted.

Order of results: RocketMQ returns offsets newest first — files from newest to oldest, and within
a file the slot chain from the newest entry to the oldest. With non-decreasing store times that
is the reverse of insertion order, which is what the models below produce.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from _support.examples import examples
from rocketq.config import StoreConfig
from rocketq.store.index_file import IndexFile, IndexService, index_key_hash
from rocketq.store.record_scan import DispatchRequest

TOPIC = "T"
KEYS = ["key-0", "key-8", "key-1", "key-9", "order-17", "x"]
BASE_TS = 1_700_000_000_000  # a whole second
SLOTS = 8
ENTRIES_PER_FILE = 5
BATCH = 7


class NullCheckpoint:
    def __init__(self) -> None:
        self.index_msg_timestamp = 0

    def flush(self) -> None:
        pass


@dataclass(frozen=True)
class Msg:
    key: str
    offset: int
    ts: int


@st.composite
def message_streams(draw: st.DrawFn) -> list[Msg]:
    """Messages with one key each, increasing offsets, non-decreasing whole-second store times.

    Each file holds ENTRIES_PER_FILE entries; the message that opens a new file gets the same
    store time as the one before it. That neutralises the rolled-file quirk (a first entry reads
    back at ``ts + (ts - previous end)``, tested separately), so the model can use store times.
    """
    n = draw(st.integers(0, 40))
    msgs: list[Msg] = []
    offset, ts = draw(st.integers(0, 10_000)), BASE_TS
    for i in range(n):
        offset += draw(st.integers(1, 500))
        if not (i > 0 and i % ENTRIES_PER_FILE == 0):
            ts += 1000 * draw(st.integers(0, 3))
        msgs.append(Msg(draw(st.sampled_from(KEYS)), offset, ts))
    return msgs


def test_model_keys_do_not_collide() -> None:
    hashes = {index_key_hash(f"{TOPIC}#{k}") for k in KEYS}
    assert len(hashes) == len(KEYS)
    assert len({h % SLOTS for h in hashes}) < len(KEYS)  # some share a slot: chains are exercised


@settings(max_examples=examples(150), deadline=None)
@given(
    msgs=message_streams(),
    queries=st.lists(
        st.tuples(
            st.sampled_from(KEYS),
            st.integers(-2, 130),
            st.integers(-2, 130),
            st.integers(1, 20),
        ),
        min_size=1,
        max_size=8,
    ),
)
def test_query_returns_the_keys_entries_in_the_window(
    msgs: list[Msg], queries: list[tuple[str, int, int, int]]
) -> None:
    with tempfile.TemporaryDirectory() as root:
        cfg = StoreConfig(
            store_path_root_dir=root,
            max_hash_slot_num=SLOTS,
            max_index_num=ENTRIES_PER_FILE + 1,
            max_msgs_num_batch=BATCH,
        )
        svc = IndexService(cfg, NullCheckpoint())
        try:
            for m in msgs:
                svc.build_index(
                    DispatchRequest(
                        topic=TOPIC,
                        queue_id=0,
                        commit_log_offset=m.offset,
                        msg_size=1,
                        tags_code=0,
                        store_timestamp=m.ts,
                        consume_queue_offset=0,
                        keys=m.key,
                    )
                )
            expected_files = (len(msgs) + ENTRIES_PER_FILE - 1) // ENTRIES_PER_FILE
            assert len(svc.files) == expected_files
            for key, lo, hi, max_num in queries:
                begin = BASE_TS + min(lo, hi) * 1000 + (500 if lo % 3 == 0 else 0)
                end = BASE_TS + max(lo, hi) * 1000 + (500 if hi % 2 == 0 else 0)
                expected = [m.offset for m in reversed(msgs) if m.key == key and begin <= m.ts <= end]
                got = svc.query_offset(TOPIC, key, max_num, begin, end)
                assert got.phy_offsets == expected[: min(max_num, BATCH)]
                assert got.index_last_update_phy_offset == (msgs[-1].offset if msgs else 0)
                assert got.index_last_update_timestamp == (msgs[-1].ts if msgs else 0)
        finally:
            svc.destroy()


# -- one file, against a model that keeps RocketMQ's quirks (but one) ----------------------


@dataclass
class FileModel:
    """What one index file should answer, kept as plain lists (no chains, no bytes)."""

    begin_ts: int
    end_ts: int
    begin_off: int
    end_off: int
    capacity: int
    entries: list[tuple[int, int, int]]  # (hash, offset, timeDiff seconds), oldest first

    def put(self, key: str, offset: int, ts: int) -> bool:
        if len(self.entries) >= self.capacity:
            return False
        diff = 0 if self.begin_ts <= 0 else min(max((ts - self.begin_ts) // 1000, 0), 2**31 - 1)
        self.entries.append((index_key_hash(key), offset, diff))
        if len(self.entries) == 1:
            self.begin_ts, self.begin_off = ts, offset
        self.end_ts, self.end_off = ts, offset
        return True

    def select(self, key: str, max_num: int, begin: int, end: int) -> list[int]:
        h = index_key_hash(key)
        numbered = list(enumerate(self.entries, start=1))
        chain = [(i, e) for i, e in reversed(numbered) if e[0] % SLOTS == h % SLOTS]
        found: list[int] = []
        for i, (eh, off, diff) in chain:
            if len(found) >= max_num:
                break
            # The file's first entry has a timeDiff taken against the previous file's end; its
            # time is the header's beginTimestamp (RocketMQ reads beginTimestamp + timeDiff).
            t = self.begin_ts if i == 1 else self.begin_ts + diff * 1000
            if eh == h and begin <= t <= end:
                found.append(off)
            if t < begin:
                break
        return found


# "Aa" and "BB" have equal String.hashCode values, so T#Aa and T#BB collide exactly.
FILE_KEYS = ["T#Aa", "T#BB", "T#x", "T#y", "T#z", "T#w"]


@settings(max_examples=examples(150), deadline=None)
@given(
    prev_end_ts=st.one_of(st.just(0), st.integers(1, 2**41)),
    prev_end_off=st.one_of(st.just(0), st.integers(1, 2**40)),
    puts=st.lists(
        st.tuples(st.sampled_from(FILE_KEYS), st.integers(0, 2**50), st.integers(-(2**20), 2**41)),
        max_size=20,
    ),
    queries=st.lists(
        st.tuples(
            st.sampled_from(FILE_KEYS), st.integers(0, 30), st.integers(0, 2**41), st.integers(0, 2**41)
        ),
        max_size=6,
    ),
)
def test_index_file_matches_model_and_survives_reload(
    prev_end_ts: int,
    prev_end_off: int,
    puts: list[tuple[str, int, int]],
    queries: list[tuple[str, int, int, int]],
) -> None:
    index_num = 12
    model = FileModel(prev_end_ts, prev_end_ts, prev_end_off, prev_end_off, index_num - 1, [])
    with tempfile.TemporaryDirectory() as root:
        path = os.path.join(root, "20240101000000000")
        f = IndexFile(path, SLOTS, index_num, prev_end_off, prev_end_ts)
        for key, off, ts in puts:
            assert f.put_key(key, off, ts) == model.put(key, off, ts)
        assert f.index_count == len(model.entries) + 1
        assert f.hash_slot_count == len({h % SLOTS for h, _, _ in model.entries})
        header = (f.begin_timestamp, f.end_timestamp, f.begin_phy_offset, f.end_phy_offset)
        assert header == (model.begin_ts, model.end_ts, model.begin_off, model.end_off)
        all_queries = [(k, 64, 0, 2**62) for k in FILE_KEYS] + queries
        answers = [f.select_phy_offsets(k, n, min(a, b), max(a, b)) for k, n, a, b in all_queries]
        for (key, n, a, b), got in zip(all_queries, answers, strict=True):
            assert got == model.select(key, n, min(a, b), max(a, b))
        f.shutdown()

        g = IndexFile(path, SLOTS, index_num)
        g.load()
        assert (g.begin_timestamp, g.end_timestamp, g.begin_phy_offset, g.end_phy_offset) == header
        assert [g.select_phy_offsets(k, n, min(a, b), max(a, b)) for k, n, a, b in all_queries] == answers
        g.shutdown()
