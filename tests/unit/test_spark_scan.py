"""Segment planning, column-wise record parsing, damage reports and the index rebuild, without Spark.

Segments are written record by record with the store's encoder (every layout: V1/V2, IPv4/IPv6
hosts, properties with odd contents), and the column parser is checked against the store's
one-record decoder on every record.
"""

from __future__ import annotations

import itertools
import os
import pathlib
import random
import struct
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from rocketq.config import StoreConfig
from rocketq.errors import StoreError, StoreLocked
from rocketq.message import Message, create_offset_msg_id, decode_properties, unpack_socket_addr
from rocketq.protocol import record as rec
from rocketq.spark.jobs import scan
from rocketq.spark.jobs.api import VerifyReport, _merge_reports, check_stopped
from rocketq.spark.jobs.rebuild import IndexRebuilder, dispatch_rows
from rocketq.store import MessageStore, quarantine, recovery
from rocketq.store.commitlog import CommitLog

SEGMENT = 64 * 1024
V4_HOST = b"\x0a\x00\x00\x05\x00\x00\x2a\x9f"  # 10.0.0.5:10911
V6_HOST = bytes.fromhex("20010db8000000000000000000000007") + struct.pack(">i", 53001)


def write_segments(
    directory: pathlib.Path, records: list[dict[str, object]], seg_size: int = SEGMENT
) -> list[int]:
    """Append ``encode_record(**r)`` for each r as the CommitLog writer would (BLANK + roll when
    ``length + 8`` does not fit); returns each record's CommitLog offset."""
    commitlog = directory / "commitlog"
    commitlog.mkdir(parents=True, exist_ok=True)
    segments: dict[int, bytearray] = {}
    offsets = []
    pos = 0
    for r in records:
        length = len(rec.encode_record(**r))  # type: ignore[arg-type]
        start = pos - pos % seg_size
        left = seg_size - pos % seg_size
        seg = segments.setdefault(start, bytearray(seg_size))
        if length + 8 > left:
            seg[pos - start : pos - start + 8] = rec.encode_blank(left)
            pos = start + seg_size
            start = pos
            seg = segments.setdefault(start, bytearray(seg_size))
        data = rec.encode_record(**{**r, "physical_offset": pos})  # type: ignore[arg-type]
        seg[pos - start : pos - start + length] = data
        offsets.append(pos)
        pos += length
    for start, seg in segments.items():
        (commitlog / f"{start:020d}").write_bytes(bytes(seg))
    return offsets


def sample_records(count: int, seed: int = 7) -> list[dict[str, object]]:
    rng = random.Random(seed)
    out: list[dict[str, object]] = []
    for i in range(count):
        props = f"KEYS\x01k{i} c{i % 5}\x02UNIQ_KEY\x01U{i:08d}\x02"
        if i % 4:
            props += f"TAGS\x01tag{i % 3}\x02"
        if i % 11 == 0:
            props += "EMPTY\x01\x02\x01novalue\x02lone\x02"  # pairs RocketMQ drops
        if i % 13 == 0:
            props = props.rstrip("\x02")  # a missing trailing separator is tolerated
        topic = "T" * 130 if i % 17 == 5 else ("Orders", "Payments", "Audit")[i % 3]
        out.append(
            {
                "topic": topic,
                "body": bytes(rng.randrange(256) for _ in range(rng.randrange(0, 600))),
                "properties": props.encode(),
                "queue_id": i % 4,
                "flag": i % 3,
                "queue_offset": i // 4,
                "sys_flag": 0,
                "born_timestamp": 1_700_000_000_000 + i * 1000 - 7,
                "born_host": V6_HOST if i % 7 == 3 else V4_HOST,
                "store_timestamp": 1_700_000_000_000 + i * 1000,
                "store_host": V6_HOST if i % 19 == 4 else V4_HOST,
                "reconsume_times": i % 2,
            }
        )
    return out


@pytest.fixture
def store(tmp_path: pathlib.Path) -> tuple[pathlib.Path, list[dict[str, object]], list[int]]:
    records = sample_records(400)
    offsets = write_segments(tmp_path, records)
    return tmp_path, records, offsets


def all_columns(tasks: list[scan.ScanTask]) -> tuple[list[scan.RecordColumns], list[scan.WalkResult]]:
    cols, walks = [], []
    for t in tasks:
        w = scan.WalkResult()
        cols.extend(scan.iter_columns(t, w, check_crc=True, chunk_bytes=4096))
        walks.append(w)
    return cols, walks


# -- planning -------------------------------------------------------------------------------------
def test_list_segments_reads_root_or_commitlog_dir_and_refuses_empty(store, tmp_path):
    root, _, _ = store
    segs = scan.list_segments(str(root))
    assert [s.start_offset for s in segs] == [i * SEGMENT for i in range(len(segs))]
    assert len(segs) >= 3
    assert scan.list_segments(str(root / "commitlog")) == segs
    (root / "commitlog" / "notes.txt").write_text("x")
    assert scan.list_segments(str(root)) == segs
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(StoreError, match="no CommitLog segments"):
        scan.list_segments(str(empty))
    with pytest.raises(StoreError, match="does not exist"):
        scan.list_segments(str(tmp_path / "missing"))


def test_split_points_are_record_starts_and_ranges_cover_each_segment(store):
    root, _, offsets = store
    segs = scan.list_segments(str(root))
    tasks = scan.plan_tasks(segs, split_bytes=8192)
    assert len(tasks) > 2 * len(segs)
    starts = set(offsets)
    for seg in segs:
        mine = [t for t in tasks if t.path == seg.path]
        assert mine[0].begin == 0 and mine[-1].end == seg.size_bytes and mine[-1].to_segment_end
        for a, b in itertools.pairwise(mine):
            assert a.end == b.begin and not a.to_segment_end
            assert seg.start_offset + b.begin in starts
    whole, _ = all_columns(scan.plan_tasks(segs))
    split, walks = all_columns(tasks)
    assert np.concatenate([c.offset for c in split]).tolist() == offsets
    assert np.concatenate([c.offset for c in whole]).tolist() == offsets
    assert all(not w.damage for w in walks)


def test_hop_boundaries_stop_where_hops_stop(tmp_path):
    write_segments(tmp_path, sample_records(40))
    path = str(tmp_path / "commitlog" / f"{0:020d}")
    data = bytearray(pathlib.Path(path).read_bytes())
    first = scan.hop_boundaries(path, [1, 2000, 4000])
    assert len(first) == 3
    data[first[1] + 4 : first[1] + 8] = b"\x00\x00\x00\x01"  # illegal magic
    pathlib.Path(path).write_bytes(bytes(data))
    assert scan.hop_boundaries(path, [1, 2000, 4000]) == first[:1]
    with pytest.raises(ValueError, match="below 4096"):
        scan.plan_tasks(scan.list_segments(str(tmp_path)), split_bytes=100)


# -- columns ----------------------------------------------------------------------------------------
def test_columns_match_the_record_decoder_for_every_layout(store):
    root, records, offsets = store
    cols, walks = all_columns(scan.plan_tasks(scan.list_segments(str(root))))
    batch = pa.Table.from_batches([scan.to_export_batch(c, "broker-a") for c in cols])
    assert batch.num_rows == len(records)
    got = batch.to_pylist()
    by_segment = {}
    for i, (off, want) in enumerate(zip(offsets, records, strict=True)):
        seg = off - off % SEGMENT
        if seg not in by_segment:
            by_segment[seg] = (root / "commitlog" / f"{seg:020d}").read_bytes()
        view = rec.decode_record(by_segment[seg], off - seg)
        assert view.kind is rec.RecordKind.MESSAGE
        row = got[i]
        props = decode_properties(view.properties)
        assert row["topic"] == view.topic == want["topic"]
        assert row["body"] == view.body == want["body"]
        assert dict(row["properties"]) == props
        assert row["queueId"] == view.queue_id and row["queueOffset"] == view.queue_offset
        assert row["brokerName"] == "broker-a"
        assert row["keys"] == props.get("KEYS") and row["tags"] == props.get("TAGS")
        assert row["msgId"] == props.get("UNIQ_KEY", create_offset_msg_id(view.store_host, off))
        assert row["bornHost"] == unpack_socket_addr(view.born_host)
        assert row["storeHost"] == unpack_socket_addr(view.store_host)
        assert int(row["bornTimestamp"].timestamp() * 1000) == view.born_timestamp
        assert int(row["storeTimestamp"].timestamp() * 1000) == view.store_timestamp
        assert row["reconsumeTimes"] == view.reconsume_times
    assert batch.schema == scan.EXPORT_SCHEMA
    assert [w.stop for w in walks][-1] is scan.StopKind.END
    assert all(w.stop is scan.StopKind.BLANK for w in walks[:-1])


def test_properties_map_follows_rocketmq_parser_rules():
    texts = [
        "",
        "A\x011\x02B\x012\x02",
        "A\x011\x02B\x012",  # no trailing separator
        "E\x01\x02\x01v\x02X\x02\x02ok\x01y\x02",  # empty value, empty key, no separator
        "K\x01a\x01b\x02",  # the value keeps later \x01
        "D\x011\x02D\x012\x02",  # a name twice: the last value wins
    ]
    got = scan.properties_map(pa.array(texts, type=pa.string())).to_pylist()
    assert [dict(m) for m in got] == [decode_properties(t) for t in texts]


def test_offset_msg_ids_match_the_store_for_both_families():
    offs = np.array([0, 123456789, 2**40 + 5], dtype=np.int64)
    for host in (V4_HOST, V6_HOST):
        ids = scan.offset_msg_ids([host] * 3, offs).to_pylist()
        assert ids == [create_offset_msg_id(host, int(o)) for o in offs]


def test_invalid_utf8_in_topic_and_properties_is_replaced_not_fatal(tmp_path):
    r = sample_records(1)[0]
    r["properties"] = b"KEYS\x01\xff\xfe\x02"
    write_segments(tmp_path, [r])
    (cols,), _ = all_columns(scan.plan_tasks(scan.list_segments(str(tmp_path))))
    row = scan.to_export_batch(cols).to_pylist()[0]
    assert row["keys"] == "\ufffd\ufffd"


def test_select_rows_filters_topics_and_time(store):
    root, records, _ = store
    cols, _ = all_columns(scan.plan_tasks(scan.list_segments(str(root))))
    begin, end = 1_700_000_000_000 + 50_000, 1_700_000_000_000 + 250_000
    picked = [scan.select_rows(c, topics=frozenset({"Orders"}), begin_ms=begin, end_ms=end) for c in cols]
    got = sorted(int(o) for c in picked for o in c.offset.tolist())
    want = [
        i
        for i, r in enumerate(records)
        if r["topic"] == "Orders" and begin <= int(r["store_timestamp"]) < end  # type: ignore[arg-type]
    ]
    assert len(got) == len(want) > 0


def test_stats_batch_counts_every_record(store):
    root, records, _ = store
    rows = [
        r for t in scan.plan_tasks(scan.list_segments(str(root))) for r in scan.stats_batch(t).to_pylist()
    ]
    assert sum(r["messages"] for r in rows) == len(records)
    want_body = sum(len(r["body"]) for r in records)  # type: ignore[arg-type]
    assert sum(r["bodyBytes"] for r in rows) == want_body


# -- damage ----------------------------------------------------------------------------------------
def _segment_of(root: pathlib.Path, offset: int) -> pathlib.Path:
    return root / "commitlog" / f"{offset - offset % SEGMENT:020d}"


def _patch(root: pathlib.Path, offset: int, data: bytes) -> None:
    path = _segment_of(root, offset)
    buf = bytearray(path.read_bytes())
    pos = offset % SEGMENT
    buf[pos : pos + len(data)] = data
    path.write_bytes(bytes(buf))


def _verify(root: pathlib.Path, split: int | None = None) -> list[scan.TaskReport]:
    return [
        scan.verify_task(t, chunk_bytes=4096)
        for t in scan.plan_tasks(scan.list_segments(str(root)), split_bytes=split)
    ]


def test_body_crc_mismatch_is_pinpointed_and_the_walk_goes_on(store):
    root, records, offsets = store
    i = 100
    body_pos = offsets[i] + (
        88 if records[i]["born_host"] == V4_HOST and records[i]["store_host"] == V4_HOST else 112
    )
    assert len(records[i]["body"]) > 0  # type: ignore[arg-type]
    _patch(root, body_pos, bytes([records[i]["body"][0] ^ 0xFF]))  # type: ignore[index]
    reports = _verify(root)
    damage = [d for r in reports for d in r.damage]
    assert [(d.offset, d.recoverable) for d in damage] == [(offsets[i], True)]
    assert "body CRC mismatch" in damage[0].reason
    assert sum(r.records for r in reports) == len(records)


@pytest.mark.parametrize(
    ("patch", "reason"),
    [
        (struct.pack(">i", 50), "below the minimum"),
        (struct.pack(">i", 1 << 20), "runs past the end of the segment"),
        (struct.pack(">ii", 300, 0x12345678), "illegal magic code 0x12345678"),
        (b"", "TOTALSIZE"),  # a few bytes too large: the fields no longer add up
    ],
)
@pytest.mark.parametrize("i", [150, 152])  # an IPv6 born host (decoded one by one), a common record
def test_structural_damage_ends_the_segment_at_the_exact_offset(store, patch, reason, i):
    root, _, offsets = store
    if not patch:
        total = int.from_bytes(_segment_of(root, offsets[i]).read_bytes()[offsets[i] % SEGMENT :][:4], "big")
        patch = struct.pack(">i", total + 4)
    _patch(root, offsets[i], patch)
    for split in (None, 4096):
        reports = _verify(root, split)
        damage = [d for r in reports for d in r.damage]
        assert damage and damage[0].offset == offsets[i] and not damage[0].recoverable, damage
        assert reason in damage[0].reason
        hit = next(r for r in reports if r.damage)
        assert hit.walk.valid_end == offsets[i]
        assert hit.walk.stop is scan.StopKind.DAMAGED
        seg_start = offsets[i] - offsets[i] % SEGMENT
        before = sum(1 for o in offsets if seg_start <= o < offsets[i])
        assert sum(r.records for r in reports if r.task.segment_offset == seg_start) == before


def test_zeroed_header_with_data_after_it_is_reported(store):
    root, _, offsets = store
    i = 120
    _patch(root, offsets[i], bytes(8))
    damage = [d for r in _verify(root) for d in r.damage]
    assert len(damage) == 1 and not damage[0].recoverable
    assert damage[0].offset == offsets[i]  # where valid data ends (as recovery ends there)
    pos = offsets[i] % SEGMENT
    assert f"position {pos + 8} after the end of data at {pos}" in damage[0].reason


def test_physical_offset_field_mismatch_is_reported(store):
    root, _, offsets = store
    _patch(root, offsets[77] + 28, struct.pack(">q", 12345))
    damage = [d for r in _verify(root) for d in r.damage]
    assert [(d.offset, d.recoverable) for d in damage] == [(offsets[77], True)]
    assert "PHYSICALOFFSET field 12345" in damage[0].reason


def test_truncated_last_record_is_damage(tmp_path):
    write_segments(tmp_path, sample_records(5))
    path = tmp_path / "commitlog" / f"{0:020d}"
    data = path.read_bytes()
    view = rec.decode_record(data, 0)
    path.write_bytes(data[: view.size + 50])  # second record cut short by the end of the file
    (report,) = _verify(tmp_path)
    assert report.records == 1
    assert (
        report.damage[0].offset == view.size and "runs past the end of the segment" in report.damage[0].reason
    )


# -- rebuild without Spark ----------------------------------------------------------------------------
def _tree(root: pathlib.Path, sub: str) -> dict[str, bytes]:
    base = root / sub
    return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}


def test_rebuild_matches_the_broker_byte_for_byte(tmp_path):
    cfg = StoreConfig(
        store_path_root_dir=str(tmp_path / "store"),
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=20 * 50,
        max_hash_slot_num=16,
        max_index_num=120,
    )
    with MessageStore(cfg) as st:
        for i in range(900):
            msg = Message(("A", "B")[i % 2], b"m%d" % i * (i % 9 + 1), tags=f"t{i % 3}", keys=[f"k{i}"])
            st.put_message(msg, queue_id=i % 3)
        st.put_message(Message("A", b"late", keys=["x"], delay_level=2), queue_id=0)
        st.wait_dispatched()
    out = tmp_path / "out"
    rebuilder = IndexRebuilder(str(out), cfg)
    for t in scan.plan_tasks(scan.list_segments(cfg.store_path_root_dir), split_bytes=8192):
        rebuilder.feed(dispatch_rows(t, {1: 1000, 2: 5000}))
    rebuilder.close()
    store_root = pathlib.Path(cfg.store_path_root_dir)
    assert _tree(out, "consumequeue") == _tree(store_root, "consumequeue")
    mine, theirs = _tree(out, "index"), _tree(store_root, "index")
    assert len(mine) == len(theirs) > 3
    assert list(mine.values()) == list(theirs.values())
    assert rebuilder.summary.records == 901
    with pytest.raises(StoreError, match="already exists"):
        IndexRebuilder(str(out), cfg)


def test_jobs_refuse_a_store_in_use(tmp_path):
    cfg = StoreConfig(store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=64 * 1024)
    with MessageStore(cfg), pytest.raises(StoreLocked, match="in use"):
        check_stopped(str(tmp_path))
    check_stopped(str(tmp_path))


def test_spark_subcommand_does_not_import_pyspark_until_it_runs(tmp_path):
    code = (
        "import sys, rocketq.cli as c\n"
        "try:\n    c.main(['spark', 'verify', '--help'])\nexcept SystemExit:\n    pass\n"
        "print('pyspark' in sys.modules)\n"
        f"rc = c.main(['spark', 'verify', {str(tmp_path / 'missing')!r}])\n"
        "print(rc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120, env=os.environ
    )
    lines = out.stdout.strip().splitlines()
    assert lines[-2:] == ["False", "2"], out.stdout + out.stderr
    assert "does not exist" in out.stderr


def _recovery_end(root: pathlib.Path) -> int:
    """Where the store's recovery scan (CRC checks on, from the first segment) ends."""
    cl = CommitLog(StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=SEGMENT))
    cl.load()
    try:
        plan = recovery.plan_recovery(
            cl.queue.files, cl.file_size, check_crc=True, max_record=cl._max_record, start_index=0
        )
    finally:
        cl.shutdown()
    return plan.process_offset


def _verify_end(root: pathlib.Path, split: int | None) -> int:
    """Where ``verify`` says valid data ends: its first damage, else the end of the data."""
    segments = scan.list_segments(str(root))
    reports = [scan.verify_task(t, chunk_bytes=4096) for t in scan.plan_tasks(segments, split_bytes=split)]
    merged = _merge_reports(segments, reports)
    damage = sorted((d for s in merged for d in s.damage), key=lambda d: d.offset)
    return damage[0].offset if damage else merged[-1].valid_end


def _field_pos(root: pathlib.Path, offset: int, field: str) -> int:
    data = _segment_of(root, offset).read_bytes()
    view = rec.decode_record(data, offset % SEGMENT)
    assert view.kind is rec.RecordKind.MESSAGE
    if field == "body":
        return offset + view.body_offset
    if field == "topic length":
        return offset + view.body_offset + view.body_length
    assert field == "properties length"
    return offset + view.size - len(view.properties.encode()) - 2


@pytest.mark.parametrize(
    "damage",
    [
        "intact",
        "body CRC",
        "TOTALSIZE",
        "magic",
        "zeroed header",
        "zeroed header in the last segment",
        "V2 topic length",
        "properties length",
        "BLANK marker zeroed",
        "torn tail",
    ],
)
def test_recovery_and_verify_agree_on_where_valid_data_ends(store, damage):
    """The recovery scan and ``verify`` read through the same record walk: for each kind of damage
    (in the first, a middle and the last segment), recovery's end offset is verify's first damaged
    offset. Not covered: a wrong PHYSICALOFFSET field, which verify reports and recovery keeps (as
    RocketMQ's does: the record's size is sound), and the ``__CRC32#`` property, which only a
    store with that option checks."""
    root, records, offsets = store
    assert len({o - o % SEGMENT for o in offsets}) >= 3
    end_of_data = _verify_end(root, None)
    assert end_of_data == offsets[-1] + len(rec.encode_record(**records[-1]))  # type: ignore[arg-type]
    expected = {
        "intact": end_of_data,
        "body CRC": offsets[30],
        "TOTALSIZE": offsets[200],
        "magic": offsets[120],
        "zeroed header": offsets[250],
        "zeroed header in the last segment": offsets[-5],
        "V2 topic length": offsets[158],  # 158 % 17 == 5: a topic longer than 127 chars
        "properties length": offsets[77],
        "torn tail": offsets[-1],
    }
    if damage == "body CRC":
        pos = _field_pos(root, offsets[30], "body")
        _patch(root, pos, bytes([_segment_of(root, pos).read_bytes()[pos % SEGMENT] ^ 0x01]))
    elif damage == "TOTALSIZE":
        _patch(root, offsets[200], struct.pack(">i", len(rec.encode_record(**records[200])) + 4))  # type: ignore[arg-type]
    elif damage == "magic":
        _patch(root, offsets[120] + 4, struct.pack(">i", 0x12345678))
    elif damage == "zeroed header":
        _patch(root, offsets[250], bytes(8))
    elif damage == "zeroed header in the last segment":
        assert offsets[-5] - offsets[-5] % SEGMENT == offsets[-1] - offsets[-1] % SEGMENT
        _patch(root, offsets[-5], bytes(8))
    elif damage == "V2 topic length":
        assert len(records[158]["topic"]) > 127  # type: ignore[arg-type]
        _patch(root, _field_pos(root, offsets[158], "topic length"), struct.pack(">h", 0))
    elif damage == "properties length":
        _patch(root, _field_pos(root, offsets[77], "properties length"), struct.pack(">H", 0x8000))
    elif damage == "BLANK marker zeroed":
        first_of_second = next(o for o in offsets if o >= SEGMENT)
        last_of_first = offsets[offsets.index(first_of_second) - 1]
        blank = last_of_first + len(rec.encode_record(**records[offsets.index(last_of_first)]))  # type: ignore[arg-type]
        _patch(root, blank, bytes(8))
        expected[damage] = blank
    elif damage == "torn tail":
        _patch(root, offsets[-1], bytes(4))
    for split in (None, 4096):
        assert _verify_end(root, split) == expected[damage]
    assert _recovery_end(root) == expected[damage]


@pytest.mark.parametrize("damage", ["body CRC", "TOTALSIZE inverted"])
def test_verify_reports_the_ranges_recovery_quarantines(store, damage):
    """With resync, recovery quarantines exactly the record verify reports as damaged, keeps the
    records after it, and verify then reports that range as quarantined (a filler record in its
    place), not as damage, with every other record still counted."""
    root, records, offsets = store
    victim = offsets[30] if damage == "body CRC" else offsets[200]
    size = len(rec.encode_record(**records[offsets.index(victim)]))  # type: ignore[arg-type]
    before = _verify_report(root)
    if damage == "body CRC":
        pos = _field_pos(root, victim, "body")
        _patch(root, pos, bytes([_segment_of(root, pos).read_bytes()[pos % SEGMENT] ^ 0x01]))
    else:
        _patch(root, victim, bytes(b ^ 0xFF for b in struct.pack(">i", size)))
    damaged = _verify_report(root)
    assert [d.offset for d in damaged.damage] == [victim]
    cl = CommitLog(StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=SEGMENT))
    cl.load()
    try:
        report = recovery.recover_commitlog(
            cl, start_index=0, resync=quarantine.ResyncPolicy(-1, clean_shutdown=True)
        )
    finally:
        cl.shutdown()
    assert [(q.offset, q.end) for q in report.plan.quarantined] == [(victim, victim + size)]
    assert (root / "quarantine" / f"{victim - victim % SEGMENT:020d}.quarantine-{victim}").exists()
    after = _verify_report(root)
    assert after.damage == []
    assert after.quarantined == [(victim, size)]
    assert after.records == before.records - 1
    assert report.process_offset == _verify_end(root, None)


def _verify_report(root: pathlib.Path) -> VerifyReport:
    segments = scan.list_segments(str(root))
    reports = [scan.verify_task(t, chunk_bytes=4096) for t in scan.plan_tasks(segments)]
    return VerifyReport(str(root), _merge_reports(segments, reports), len(reports), 0.0, False)
