"""The store-file scans on DLedger stores, without Spark: records inside entry data files.

The stores are written by ``DLedgerMessageStore`` on a group of one (real entry store files,
64 KiB data files so the log rolls over several of them), and by a plain ``MessageStore`` first
for the adopted store (old segments below ``dividedCommitlogOffset``, entries above).
"""

from __future__ import annotations

import dataclasses
import pathlib
import shutil
import struct

import pyarrow as pa
import pytest

from rocketq.config import StoreConfig
from rocketq.errors import StoreError
from rocketq.ha import entry_format as fmt
from rocketq.message import Message
from rocketq.spark.jobs import scan
from rocketq.spark.jobs.api import _merge_reports
from rocketq.spark.jobs.rebuild import dispatch_rows
from rocketq.store.message_store import MessageStore, open_message_store

COUNT = 600


def _dledger(cfg: StoreConfig) -> StoreConfig:
    return dataclasses.replace(cfg, enable_dleger_commit_log=True, d_leger_self_id="n0")


def _put(store: MessageStore, count: int, start: int = 0) -> dict[int, bytes]:
    """Offset → body of ``count`` messages (bodies of varying size, three topics)."""
    out: dict[int, bytes] = {}
    for i in range(start, start + count):
        body = b"m%d|" % i * (i % 40 + 1)
        msg = Message(("Orders", "Payments", "Audit")[i % 3], body, tags=f"t{i % 4}", keys=[f"k{i}"])
        out[store.put_message(msg, queue_id=i % 4).physical_offset] = body
    return out


@pytest.fixture
def dl_store(store_config: StoreConfig) -> tuple[pathlib.Path, dict[int, bytes]]:
    with open_message_store(_dledger(store_config)) as st:
        written = _put(st, COUNT)
        assert st.wait_dispatched(10)
    return pathlib.Path(store_config.store_path_root_dir), written


def _verify(root: pathlib.Path) -> tuple[list[scan.Segment], list[scan.TaskReport]]:
    segments = scan.list_segments(str(root))
    tasks = scan.plan_tasks(segments, split_bytes=8192)
    return segments, [scan.verify_task(t, chunk_bytes=4096) for t in tasks]


def _exported(root: pathlib.Path) -> list[dict[str, object]]:
    tasks = scan.plan_tasks(scan.list_segments(str(root)))
    batches = [b for t in tasks for b in scan.export_batches(t, broker_name="broker-a", chunk_bytes=4096)]
    return pa.Table.from_batches(batches, schema=scan.EXPORT_SCHEMA).to_pylist()


def _entry_at(root: pathlib.Path, offset: int) -> tuple[pathlib.Path, int]:
    """The data file holding the message at CommitLog ``offset`` and the entry's position in it."""
    for seg in scan.list_segments(str(root)):
        if seg.start_offset <= offset < seg.start_offset + seg.size_bytes:
            return pathlib.Path(seg.path), offset - fmt.BODY_OFFSET - seg.start_offset
    raise AssertionError(f"no data file holds offset {offset}")


def _patch(path: pathlib.Path, pos: int, data: bytes) -> None:
    buf = bytearray(path.read_bytes())
    buf[pos : pos + len(data)] = data
    path.write_bytes(bytes(buf))


def test_a_dledger_store_lists_its_entry_data_files_from_any_of_its_directories(dl_store, tmp_path):
    root, _ = dl_store
    segs = scan.list_segments(str(root))
    assert len(segs) >= 3 and {s.layout for s in segs} == {scan.DLEDGER}
    data = root / "dledger-n0" / "data"
    assert [s.path for s in segs] == [str(data / n) for n in sorted(p.name for p in data.iterdir())]
    assert scan.list_segments(str(root / "dledger-n0")) == segs
    assert scan.list_segments(str(data)) == segs
    assert scan.dledger_data_dir(str(root)) == str(data)
    tasks = scan.plan_tasks(segs, split_bytes=4096)  # entry files are never split
    assert len(tasks) == len(segs) and all(t.layout == scan.DLEDGER for t in tasks)
    assert scan.ScanTask.from_json(tasks[1].to_json()) == tasks[1]
    older = {k: v for k, v in tasks[1].to_json().items() if k != "layout"}  # JSON of plain tasks
    assert scan.ScanTask.from_json(older).layout == scan.COMMITLOG
    # two members' stores under one root: which one is meant is not guessed
    shutil.copytree(root / "dledger-n0", root / "dledger-n1")
    with pytest.raises(StoreError, match=r"several DLedger members \(dledger-n0, dledger-n1\)"):
        scan.list_segments(str(root))
    assert scan.list_segments(str(root / "dledger-n1" / "data"))[0].start_offset == 0
    empty = tmp_path / "empty" / "dledger-n0" / "data"
    empty.mkdir(parents=True)
    with pytest.raises(StoreError, match="no entry data files"):
        scan.list_segments(str(empty.parent.parent))


def test_a_clean_dledger_store_verifies_and_exports_every_record(dl_store):
    root, written = dl_store
    segments, reports = _verify(root)
    merged = _merge_reports(segments, reports)
    assert [d for s in merged for d in s.damage] == []
    assert sum(s.records for s in merged) == COUNT
    assert [s.end_kind for s in merged] == ["blank"] * (len(merged) - 1) + ["end"]
    # a blank ends every data file but the last, at the position the next entry did not fit
    assert all(s.blank_offset is not None for s in merged[:-1])
    rows = _exported(root)
    got = {bytes(r["body"]): r for r in rows}  # type: ignore[arg-type]
    assert len(rows) == COUNT
    assert sorted(bytes(r["body"]) for r in rows) == sorted(written.values())  # type: ignore[arg-type]
    seventh = got[b"m7|" * 8]
    assert (seventh["topic"], seventh["keys"], seventh["tags"], seventh["queueId"]) == (
        "Payments",
        "k7",
        "t3",
        3,
    )
    # the records' offsets are their entries' positions + 48, as the broker stored them
    offsets = [c.offset for t in scan.plan_tasks(segments) for c in scan.iter_columns(t, scan.WalkResult())]
    assert sorted(int(o) for a in offsets for o in a.tolist()) == sorted(written)
    stats = [r for t in scan.plan_tasks(segments) for r in scan.stats_batch(t).to_pylist()]
    assert sum(int(r["messages"]) for r in stats) == COUNT


def test_a_damaged_entry_is_reported_at_its_offset(dl_store):
    root, written = dl_store
    offsets = sorted(written)
    # 1. a byte of a message body: the entry's bodyCrc (and the record's body CRC) no longer match
    body_hit = offsets[40]
    path, pos = _entry_at(root, body_hit)
    body_pos = pos + fmt.BODY_OFFSET + 90  # inside the record's body
    _patch(path, body_pos, bytes([path.read_bytes()[body_pos] ^ 0xFF]))
    # 2. the pos field of a later entry's header: nothing after it in that file can be trusted
    header_hit = offsets[200]
    path2, pos2 = _entry_at(root, header_hit)
    _patch(path2, pos2 + fmt.POS_OFFSET, struct.pack(">q", 12345))
    segments, reports = _verify(root)
    damage = sorted((d for r in reports for d in r.damage), key=lambda d: d.offset)
    by_offset = {d.offset: d for d in damage}
    entry_pos = body_hit - fmt.BODY_OFFSET
    assert "bodyCrc" in by_offset[entry_pos].reason and by_offset[entry_pos].recoverable
    assert by_offset[entry_pos].position == pos and by_offset[entry_pos].segment == path.name
    assert "body CRC mismatch" in by_offset[body_hit].reason  # the record's own CRC as well
    bad = by_offset[header_hit - fmt.BODY_OFFSET]
    assert "pos field 12345" in bad.reason and not bad.recoverable and bad.position == pos2
    assert [d.offset for d in damage] == [entry_pos, body_hit, header_hit - fmt.BODY_OFFSET]
    # the records before the broken header (and those in later files) are still counted
    in_file = [o for o in offsets if pathlib.Path(_entry_at(root, o)[0]) == path2]
    lost = [o for o in in_file if o >= header_hit]
    assert sum(r.records for r in reports) == COUNT - len(lost)
    merged = _merge_reports(segments, reports)
    assert next(s for s in merged if s.segment == path2.name).end_kind == "damaged"


def test_a_broken_chain_is_reported_and_the_walk_goes_on(dl_store):
    root, written = dl_store
    offsets = sorted(written)
    path, pos = _entry_at(root, offsets[10])
    # a changed header field that no structural check looks at: only the chainCrc sees it
    _patch(path, pos + 32, struct.pack(">i", 7))  # the reserved channel field
    _, reports = _verify(root)
    damage = [d for r in reports for d in r.damage]
    assert len(damage) == 1 and "chainCrc" in damage[0].reason and damage[0].recoverable
    assert damage[0].offset == offsets[10] - fmt.BODY_OFFSET
    assert sum(r.records for r in reports) == COUNT


def test_an_adopted_store_verifies_old_segments_and_entries(store_config: StoreConfig):
    root = pathlib.Path(store_config.store_path_root_dir)
    with MessageStore(store_config) as plain:
        old = _put(plain, 120)
    with open_message_store(_dledger(store_config)) as st:
        new = _put(st, 80, start=120)
        divided = int(st.runtime_info()["dividedCommitlogOffset"])
        assert st.wait_dispatched(10)
    segments = scan.list_segments(str(root))
    layouts = [s.layout for s in segments]
    assert layouts == sorted(layouts) and set(layouts) == {scan.COMMITLOG, scan.DLEDGER}
    first_entry_file = next(s for s in segments if s.layout == scan.DLEDGER)
    assert first_entry_file.start_offset == divided
    assert all(s.start_offset < divided for s in segments if s.layout == scan.COMMITLOG)
    segments, reports = _verify(root)
    merged = _merge_reports(segments, reports)
    assert [d for s in merged for d in s.damage] == []
    assert sum(s.records for s in merged) == 200
    # the padded last old segment ends with a BLANK, as every full segment does
    assert [s.end_kind for s in merged[:-1]] == ["blank"] * (len(merged) - 1)
    assert [s.layout for s in merged] == [s.layout for s in segments]
    rows = _exported(root)
    assert sorted(bytes(r["body"]) for r in rows) == sorted([*old.values(), *new.values()])  # type: ignore[arg-type]


def test_rebuild_rows_of_a_dledger_store_are_the_records(dl_store):
    root, written = dl_store
    rows = [r for t in scan.plan_tasks(scan.list_segments(str(root))) for r in dispatch_rows(t, None)]
    assert [r[2] for r in rows] == sorted(written)
    assert {(r[0], r[1]) for r in rows} == {(t, q) for t in ("Orders", "Payments", "Audit") for q in range(4)}
    assert all(r[3] == int(r[3]) > 0 for r in rows)
    queue0 = [r[6] for r in rows if r[0] == "Orders" and r[1] == 0]
    assert queue0 == list(range(len(queue0)))
