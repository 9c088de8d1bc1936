"""Small dispatch windows (requests as objects): the ConsumeQueue's and the index's compiled
loops over a window's requests (``_speedups.cq_group_requests``, ``_speedups.index_entries_of``)
against the pure loops they replace, as functions and as the files dispatch writes."""

from __future__ import annotations

import os
import random
import shutil
import struct
import tempfile
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _support.examples import examples
from _support.files import tree_bytes
from _support.queues import assert_same_queue
from rocketq import speedups
from rocketq.config import StoreConfig
from rocketq.message import BrokerMessage
from rocketq.store import MessageStore, consume_queue, index_file
from rocketq.store import record_scan as rs
from rocketq.store.consume_queue import ConsumeQueue
from rocketq.store.dispatch import ReputMessageService
from rocketq.store.record_scan import DispatchRequest, RequestList

pytestmark = pytest.mark.skipif(
    speedups.COMPILED is None, reason=f"compiled codecs not in use: {speedups.REASON}"
)

FLAGS = [0, 0, 0x4, 0x8, 0xC, 0x3, 0x1C, -4, 1 << 40]
BIG = [0, 1, 299, 1 << 40, (1 << 63) - 1, -(1 << 63), 1 << 64, -7]


class OtherRequest(DispatchRequest):
    """Not exactly a DispatchRequest: the compiled loops leave windows holding one to Python."""

    __slots__ = ()


@st.composite
def requests(draw: st.DrawFn) -> list[DispatchRequest]:
    out: list[DispatchRequest] = []
    offset = draw(st.integers(0, 1 << 40))
    for _ in range(draw(st.integers(0, 40))):
        cls = OtherRequest if draw(st.integers(0, 60)) == 0 else DispatchRequest
        size = draw(st.sampled_from([120, 300, 4096]))
        req = cls(
            draw(st.sampled_from(["T", "Other", "%RETRY%g", "ü"])),
            draw(st.sampled_from([0, 1, 2, 3, 1 << 31, 1 << 70])),
            draw(st.sampled_from([offset, *BIG])),
            size,
            draw(st.sampled_from([0, -5, 2598919, 1 << 63])),
            draw(st.sampled_from([0, 1_700_000_000_000, 1 << 62])),
            draw(st.integers(0, 1 << 20)),
            sys_flag=draw(st.sampled_from(FLAGS)),
        )
        offset += size
        out.append(req)
    return out


def _groups_pure(reqs: list[DispatchRequest]) -> tuple[dict[tuple[str, int], list[tuple[int, ...]]], int]:
    """ConsumeQueueStore._put_batch's grouping loop, as written there."""
    groups: dict[tuple[str, int], list[tuple[int, ...]]] = {}
    last_ts = 0
    for r in reqs:
        if (r.sys_flag & 0xC) not in (0x0, 0x8):
            continue
        groups.setdefault((r.topic, r.queue_id), []).append(
            (r.commit_log_offset, r.msg_size, r.tags_code, r.consume_queue_offset)
        )
        last_ts = r.store_timestamp
    return groups, last_ts


def _entries_pure(
    reqs: list[DispatchRequest], rows: list[int], hashes: list[int], floor: int
) -> tuple[list[int], list[int], list[int]]:
    """IndexService.build_index_batch's loop over the scan's entries, as written there."""
    out: tuple[list[int], list[int], list[int]] = ([], [], [])
    for row, key_hash in zip(rows, hashes, strict=True):
        r = reqs[row]
        if r.commit_log_offset >= floor and r.sys_flag & 0xC != 0xC:
            out[0].append(key_hash)
            out[1].append(r.commit_log_offset)
            out[2].append(r.store_timestamp)
    return out


@settings(deadline=None, max_examples=examples(300))
@given(requests())
def test_grouping_equals_the_pure_loop(reqs: list[DispatchRequest]) -> None:
    assert speedups.COMPILED is not None
    got = speedups.COMPILED.cq_group_requests(reqs)
    if any(type(r) is not DispatchRequest for r in reqs):
        assert got is None
        return
    groups, last_ts = got
    want_groups, want_ts = _groups_pure(reqs)
    assert list(groups.items()) == list(want_groups.items())  # the same groups in the same order
    assert last_ts == want_ts
    assert all(type(u) is tuple for units in groups.values() for u in units)


@settings(deadline=None, max_examples=examples(300))
@given(requests(), st.data())
def test_index_entries_equal_the_pure_loop(reqs: list[DispatchRequest], data: st.DataObject) -> None:
    assert speedups.COMPILED is not None
    n = len(reqs)
    rows = data.draw(st.lists(st.integers(-2, n + 1) if n else st.integers(-2, 2), max_size=60))
    hashes = data.draw(st.lists(st.integers(0, (1 << 31) - 1), min_size=len(rows), max_size=len(rows)))
    if data.draw(st.booleans()):
        rows.sort()
        rows = [r for r in rows if 0 <= r < n]
        hashes = hashes[: len(rows)]
    floor = data.draw(st.sampled_from([0, -1, 1 << 40, *[r.commit_log_offset for r in reqs[:3]]]))
    got = speedups.COMPILED.index_entries_of(RequestList(reqs, (rows, hashes)), rows, hashes, floor)
    taken = [reqs[r] for r in rows] if all(0 <= r < n for r in rows) else None
    if taken is None or any(type(r) is not DispatchRequest for r in taken):
        assert got is None
        return
    if any(not -(1 << 63) <= v < 1 << 63 for v in [floor, *(r.commit_log_offset for r in taken)]):
        assert got is None  # beyond a Java long: left to the pure loop
        return
    assert got == _entries_pure(reqs, rows, hashes, floor)
    assert speedups.COMPILED.index_entries_of(reqs, rows, hashes[:-1], floor) == (None if rows else got)


@settings(deadline=None, max_examples=examples(100))
@given(
    st.sampled_from([(1, 50), (7, 40), (64, 300), (97, 60_000)]),
    st.sampled_from([0, 5000, 1 << 62]),
    st.integers(0, 1 << 30),
    st.lists(st.tuples(st.integers(1, 3000), st.sampled_from(["", "", "", "hash", "offset"])), max_size=30),
)
def test_index_files_written_in_c_equal_put_keys(
    shape: tuple[int, int], begin: int, seed: int, batches: list[tuple[int, str]]
) -> None:
    """``index_put_file`` (``IndexFile.put_keys`` whole in C, for reserved blocks), then
    ``put_keys`` when it declines, against ``put_keys`` with every compiled loop off: the same
    file bytes (slots, links, counts, header), the same state and outcomes, with a stale slot,
    files filling up, timestamps before the file's begin, blocks still to be reserved (60,000
    entries: past the first reservation) and values out of a field's range (the pure loop
    raises for those)."""
    assert speedups.COMPILED is not None
    put_file = speedups.COMPILED.index_put_file
    rnd = random.Random(seed)
    slots, entries = shape
    with tempfile.TemporaryDirectory(prefix="rocketq-index-file-") as tmp:
        files = []
        stale = struct.pack(">i", rnd.randrange(1, entries))
        stale_at = 40 + 4 * rnd.randrange(slots)
        for side in "cp":
            f = index_file.IndexFile(
                os.path.join(tmp, side), slots, entries, end_phy_offset=10, end_timestamp=begin
            )
            f._mm[stale_at : stale_at + 4] = stale
            files.append(f)
        saved = index_file._index_put_keys
        ts, phys = 10_000, 100
        try:
            for n, bad in batches:
                hashes = [rnd.randrange(0, 1 << 31) for _ in range(n)]
                stamps = [ts + rnd.choice([0, -3000, 400, 1500]) for _ in range(n)]
                offsets = [phys + 90 * i for i in range(n)]
                ts += 1000
                phys += 90 * n
                if bad == "hash":
                    hashes[rnd.randrange(n)] = 1 << 31  # struct.error in the pure loop
                elif bad == "offset":
                    offsets[rnd.randrange(n)] = 1 << 63
                outcomes: list[object] = []
                for f, compiled in zip(files, (True, False), strict=True):
                    index_file._index_put_keys = saved if compiled else None
                    try:
                        wrote = put_file(f, list(hashes), list(offsets), list(stamps)) if compiled else None
                        outcomes.append(
                            f.put_keys(list(hashes), list(offsets), list(stamps)) if wrote is None else wrote
                        )
                    except struct.error as exc:
                        outcomes.append(str(exc))
                assert outcomes[0] == outcomes[1]
                a, b = files
                assert a._mm[:] == b._mm[:]
                state = (
                    "hash_slot_count",
                    "index_count",
                    "begin_timestamp",
                    "end_timestamp",
                    "begin_phy_offset",
                    "end_phy_offset",
                    "dirty",
                )
                assert [getattr(a, s) for s in state] == [getattr(b, s) for s in state]
                assert a._reserved_end == b._reserved_end
        finally:
            index_file._index_put_keys = saved
            for f in files:
                f.shutdown()


STEPS = ["next"] * 12 + ["hole", "duplicate", "built", "bad size", "bad tags", "zero"]


@settings(deadline=None, max_examples=examples(200))
@given(st.sampled_from([0, 0, 5, 40]), st.lists(st.lists(st.sampled_from(STEPS), max_size=40), max_size=12))
def test_queue_runs_written_in_place_equal_put_units(start: int, windows: list[list[str]]) -> None:
    """``cq_put_run`` (a queue's first run written straight into its last file), then
    ``put_units`` for the rest, against ``put_units`` with every compiled loop off: the same
    files, positions and outcomes through holes, duplicates, units already built, file ends
    (16 units a file), queue offset 0 and values out of a unit field's range (the pure loop
    raises for those)."""
    assert speedups.COMPILED is not None
    put_run = speedups.COMPILED.cq_put_run
    with tempfile.TemporaryDirectory(prefix="rocketq-cq-runs-") as tmp:
        queues = [ConsumeQueue("T", 0, os.path.join(tmp, side), 20 * 16) for side in "cp"]
        cq, phys = start, 0
        saved = consume_queue._cq_pack_run
        try:
            for steps in windows:
                units = []
                for step in steps:
                    cq += {"hole": 2, "duplicate": -1}.get(step, 0)
                    phys -= 300 if step == "built" else 0
                    size = {"bad size": 1 << 31, "zero": 0}.get(step, 100)
                    tags = 1 << 63 if step == "bad tags" else len(units) % 3
                    units.append((phys, size, tags, cq))
                    phys += 100
                    cq += 1
                outcomes: list[object] = []
                for q, compiled in zip(queues, (True, False), strict=True):
                    consume_queue._cq_pack_run = saved if compiled else None
                    try:
                        done = put_run(q, list(units)) if compiled else None
                        rest = units if not done else units[done:]
                        outcomes.append(q.put_units(list(rest)) if rest else True)
                    except struct.error as exc:
                        outcomes.append(str(exc))
                assert outcomes[0] == outcomes[1]
                assert_same_queue(*queues)
        finally:
            consume_queue._cq_pack_run = saved
            for q in queues:
                q.shutdown()


def _messages(seed: int, n: int) -> list[BrokerMessage]:
    """Messages of every property shape the index and the queues tell apart (the shapes of
    tests/unit/test_dispatch_columns.py): keys, UNIQ_KEY, tags, transaction types, queues."""
    rnd = random.Random(seed)
    values = ["", "a", "order-1", "k1 k2", " k3 ", "x" * 70, "0"]
    out = []
    for i in range(n):
        items = [(k, rnd.choice(values)) for k in ("UNIQ_KEY", "KEYS", "TAGS", "WAIT") if rnd.random() < 0.7]
        if rnd.random() < 0.01:  # a non-ASCII key: no hashes from the scan for its window
            items.append(("KEYS", "ü-key"))
        raw = "".join(f"{k}\x01{v}\x02" for k, v in items).encode()
        topic = rnd.choice(["T", "T", "Other", "Third"])
        sys_flag = rnd.choice([0, 0, 0, 0x4, 0x8, 0xC])
        out.append(
            BrokerMessage(topic, b"b" * rnd.choice([0, 16, 136]), raw, queue_id=i % 4, sys_flag=sys_flag)
        )
    return out


def _rebuild(
    cfg: StoreConfig, window_bytes: int, compiled: bool
) -> tuple[dict[str, bytes], list[bytes], int]:
    """ConsumeQueues and index rebuilt from the CommitLog with windows of ``window_bytes``, every
    compiled loop of the dispatchers on or off (the scan compiled either way: requests as
    objects)."""
    assert speedups.COMPILED is not None
    root = cfg.store_path_root_dir
    shutil.rmtree(os.path.join(root, "consumequeue"))
    shutil.rmtree(os.path.join(root, "index"))
    old = ReputMessageService.do_reput

    def windowed(self: ReputMessageService) -> int:
        self.window_bytes = window_bytes
        return old(self)

    taken: list[str] = []
    group_c, entries_c = speedups.COMPILED.cq_group_requests, speedups.COMPILED.index_entries_of

    def group(reqs: list[DispatchRequest]) -> object:
        out = group_c(reqs)
        taken.append("cq" if out is not None else "")
        return out

    def entries(*args: object) -> object:
        out = entries_c(*args)
        taken.append("index" if out is not None else "")
        return out

    loops: list[tuple[ModuleType, str, object]] = [
        (consume_queue, "_cq_group_requests", group),
        (consume_queue, "_cq_put_run", speedups.COMPILED.cq_put_run),
        (index_file, "_index_entries_of", entries),
        (index_file, "_index_put_file", speedups.COMPILED.index_put_file),
        (consume_queue, "_cq_pack_run", speedups.COMPILED.cq_pack_run),
        (index_file, "_index_put_keys", speedups.COMPILED.index_put_keys),
    ]
    saved = [(module, name, getattr(module, name)) for module, name, _ in loops]
    for module, name, fn in loops:
        setattr(module, name, fn if compiled else None)
    ReputMessageService.do_reput = windowed  # type: ignore[method-assign]
    try:
        store = MessageStore(cfg)
        store.start()
        assert store.reput is not None
        inline = store.reput.dispatched_records
        store.shutdown()
    finally:
        for module, name, fn in saved:
            setattr(module, name, fn)
        ReputMessageService.do_reput = old  # type: ignore[method-assign]
    if compiled:  # the compiled loops took every window they were given (a window with a
        # non-ASCII key has no hashes from the scan: the index hashes it the pure way)
        assert "" not in taken and "cq" in taken and ("index" in taken or window_bytes > 2000)
    index = sorted(tree_bytes(os.path.join(root, "index")).values())
    return tree_bytes(os.path.join(root, "consumequeue")), index, inline


@settings(deadline=None, max_examples=examples(8))
@given(st.integers(0, 1 << 30), st.sampled_from([700, 2000, 6000, 30_000]))
def test_small_windows_write_the_files_of_the_pure_loops(seed: int, window_bytes: int) -> None:
    """Dispatch in windows of a few records to some hundreds (objects, below the columnar
    threshold): the same ConsumeQueue units and index files (slots, links, counts, header)
    with the compiled loops as with the pure ones, ConsumeQueue and index files filling up in
    the middle of windows."""
    with tempfile.TemporaryDirectory(prefix="rocketq-small-windows-") as tmp:
        cfg = StoreConfig(
            store_path_root_dir=os.path.join(tmp, "store"),
            mapped_file_size_commit_log=256 * 1024,
            mapped_file_size_consume_queue=20 * 50,
            max_hash_slot_num=31,
            max_index_num=300,
        )
        with MessageStore(cfg) as store:
            msgs = _messages(seed, 700)
            for i in range(0, len(msgs), 7):
                if i % 2:
                    store.commitlog.put_messages(msgs[i : i + 7])
                else:
                    for m in msgs[i : i + 7]:
                        store.commitlog.put_message(m)
            assert store.wait_dispatched(30)
        assert rs.MIN_COMPILED_COLUMNAR_RECORDS > 30_000 // rs.V1_MIN_SIZE  # every window as objects
        pure = _rebuild(cfg, window_bytes, compiled=False)
        assert len(pure[1]) >= 2  # the index filled a file
        assert _rebuild(cfg, window_bytes, compiled=True) == pure
