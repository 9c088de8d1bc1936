"""Store jobs on a local Spark session: verify, rebuild-index, export, stats and the command line.

The stores are real: one written by ``MessageStore`` (small segments, three topics, four queues,
delayed messages, a few thousand messages, shut down cleanly) and one laid out by the Apache
RocketMQ fixture of ``tests/integration`` (IPv6 born host, a PREPARED record, delayed messages,
ConsumeQueue and index files built by RocketMQ's rules).
"""

from __future__ import annotations

import pathlib
import shutil
import struct
import sys
import time
from typing import Any

import pyarrow.parquet as pq
import pytest

from rocketq.cli import main
from rocketq.config import StoreConfig
from rocketq.errors import StoreError
from rocketq.message import Message, create_offset_msg_id, decode_properties, unpack_socket_addr
from rocketq.protocol import record as rec
from rocketq.spark import jobs
from rocketq.spark.jobs.scan import EXPORT_COLUMNS
from rocketq.store import MessageStore

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "integration"))
from _support.rocketmq_fixture import build_standard_fixture

SEGMENT = 128 * 1024
CQ_FILE = 20 * 200
HASH_SLOTS = 64
INDEX_NUM = 500
TOPICS = ("Orders", "Payments", "Audit")
COUNT = 3000


def _config(root: pathlib.Path) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=SEGMENT,
        mapped_file_size_consume_queue=CQ_FILE,
        max_hash_slot_num=HASH_SLOTS,
        max_index_num=INDEX_NUM,
    )


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("store")
    with MessageStore(_config(root)) as st:
        for i in range(COUNT):
            msg = Message(
                TOPICS[i % 3],
                (b"body-%d|" % i) * (i % 50 + 1),
                tags=f"Tag{i % 4}" if i % 5 else None,
                keys=[f"order-{i}", f"cust-{i % 7}"],
                properties={"seq": str(i)},
                delay_level=3 if i % 500 == 7 else 0,
            )
            st.put_message(msg, queue_id=i % 4)
        st.wait_dispatched()
    return root


def _segments(root: pathlib.Path) -> list[pathlib.Path]:
    return sorted((root / "commitlog").iterdir())


def _records(root: pathlib.Path) -> list[rec.RecordView]:
    """Every record of the CommitLog, decoded one by one with the store's codec."""
    out = []
    for path in _segments(root):
        data = path.read_bytes()
        p = 0
        while True:
            view = rec.decode_record(data, p)
            if view.kind is not rec.RecordKind.MESSAGE:
                break
            assert view.physical_offset == int(path.name) + p
            out.append(view)
            p += view.size
    return out


def _tree(root: pathlib.Path, sub: str) -> dict[str, bytes]:
    base = root / sub
    return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}


# -- verify ------------------------------------------------------------------------------------------
def test_verify_clean_store_reports_every_record(spark: Any, store: pathlib.Path) -> None:
    report = jobs.verify(spark, str(store))
    assert report.ok, report.summary()
    assert report.records == COUNT
    assert [s.end_kind for s in report.segments[:-1]] == ["blank"] * (len(report.segments) - 1)
    assert report.segments[-1].end_kind == "end"
    assert report.to_dataframe(spark).count() == 0


def test_verify_pinpoints_records_corrupted_on_purpose(
    spark: Any, store: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    damaged = tmp_path / "damaged"
    shutil.copytree(store, damaged, ignore=shutil.ignore_patterns("lock"))
    views = _records(damaged)
    body_hit = views[1234]
    size_hit = views[2345]
    seg_size = SEGMENT
    assert body_hit.physical_offset // seg_size != size_hit.physical_offset // seg_size

    def patch(offset: int, data: bytes) -> None:
        path = damaged / "commitlog" / f"{offset - offset % seg_size:020d}"
        buf = bytearray(path.read_bytes())
        buf[offset % seg_size : offset % seg_size + len(data)] = data
        path.write_bytes(bytes(buf))

    body_byte = body_hit.physical_offset + body_hit.body_offset + 3
    patch(body_byte, b"\x00" if (body_hit.body or b"\x01" * 4)[3] else b"\x01")
    patch(size_hit.physical_offset, struct.pack(">i", size_hit.size + 8))

    report = jobs.verify(spark, str(damaged), split_bytes=32 * 1024)
    assert not report.ok
    damage = report.damage
    assert [d.offset for d in damage] == [body_hit.physical_offset, size_hit.physical_offset]
    assert "body CRC mismatch" in damage[0].reason and damage[0].recoverable
    assert "TOTALSIZE" in damage[1].reason and not damage[1].recoverable
    seg = next(
        s for s in report.segments if s.start_offset <= size_hit.physical_offset < s.start_offset + seg_size
    )
    assert seg.valid_end == size_hit.physical_offset and seg.end_kind == "damaged"
    lost = [v for v in views if size_hit.physical_offset <= v.physical_offset < seg.start_offset + seg_size]
    assert report.records == COUNT - len(lost)
    rows = report.to_dataframe(spark).orderBy("offset").collect()
    assert [r["offset"] for r in rows] == [body_hit.physical_offset, size_hit.physical_offset]
    assert "DAMAGED: first damage at offset" in report.summary()


# -- rebuild-index -------------------------------------------------------------------------------------
def test_rebuild_index_is_byte_identical_to_the_broker(
    spark: Any, store: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    out = tmp_path / "rebuilt"
    summary = jobs.rebuild_index(spark, str(store), str(out), config=_config(store), split_bytes=40 * 1024)
    assert summary.records == COUNT
    theirs = _tree(store, "consumequeue")
    assert len(theirs) > 12  # several files per queue
    assert _tree(out, "consumequeue") == theirs
    # Index files: every byte (header included) is defined by the data; only the file names
    # (the broker's wall clock at creation) differ.
    mine_index, their_index = _tree(out, "index"), _tree(store, "index")
    assert len(their_index) > 5
    assert list(mine_index.values()) == list(their_index.values())
    with pytest.raises(StoreError, match="already exists"):
        jobs.rebuild_index(spark, str(store), str(out), config=_config(store))


def test_rebuild_index_of_an_apache_rocketmq_store(spark: Any, tmp_path: pathlib.Path) -> None:
    fx = build_standard_fixture(
        int(time.time() * 1000),
        commitlog_file_size=64 * 1024,
        cq_file_size=20 * 50,
        hash_slot_num=32,
        index_num=64,
        store_ip="10.0.0.5",
        store_port=10911,
    )
    root = tmp_path / "rmq"
    files = fx.write(str(root), abort=False)
    cfg = StoreConfig(mapped_file_size_consume_queue=20 * 50, max_hash_slot_num=32, max_index_num=64)
    out = tmp_path / "rebuilt"
    jobs.rebuild_index(spark, str(root), str(out), config=cfg)
    want_cq = {k.removeprefix("consumequeue/"): v for k, v in files.items() if k.startswith("consumequeue/")}
    assert _tree(out, "consumequeue") == want_cq
    want_index = [v for k, v in sorted(files.items()) if k.startswith("index/")]
    assert len(want_index) > 2
    assert list(_tree(out, "index").values()) == want_index

    report = jobs.verify(spark, str(root))
    assert report.ok and report.records == len(fx.messages), report.summary()
    # Export reads the IPv6 born host and the PREPARED record like every other one.
    exported = tmp_path / "rmq.parquet"
    jobs.export(spark, str(root), str(exported), broker_name="broker-a")
    rows = pq.read_table(exported).to_pylist()
    by_id = {r["msgId"]: r for r in rows}
    assert len(rows) == len(by_id) == len(fx.messages)
    for m in fx.messages:
        r = by_id[m.uniq_key]
        assert (r["topic"], r["queueId"], r["body"], r["bornHost"], r["storeHost"]) == (
            m.topic, m.queue_id, m.body, m.born_host, m.store_host,
        )  # fmt: skip
        assert dict(r["properties"]) == m.props


# -- export --------------------------------------------------------------------------------------------
def test_export_to_parquet_matches_the_source(
    spark: Any, store: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    views = _records(store)
    begin = views[600].store_timestamp
    end = views[2400].store_timestamp
    out = tmp_path / "orders.parquet"
    summary = jobs.export(
        spark,
        str(store),
        str(out),
        topics=["Orders", "Audit"],
        begin_ms=begin,
        end_ms=end,
        broker_name="broker-a",
    )
    want = [v for v in views if v.topic in ("Orders", "Audit") and begin <= v.store_timestamp < end]
    table = pq.read_table(out)
    assert table.column_names == list(EXPORT_COLUMNS)
    got = sorted(table.to_pylist(), key=lambda r: (r["topic"], r["queueId"], r["queueOffset"]))
    want.sort(key=lambda v: (v.topic, v.queue_id, v.queue_offset))
    assert summary.rows == len(got) == len(want) > 500
    for r, v in zip(got, want, strict=True):
        props = decode_properties(v.properties)
        assert r["topic"] == v.topic and r["brokerName"] == "broker-a"
        assert (r["queueId"], r["queueOffset"]) == (v.queue_id, v.queue_offset)
        assert r["body"] == v.body
        assert dict(r["properties"]) == props
        assert r["keys"] == props["KEYS"] and r["tags"] == props.get("TAGS")
        assert r["msgId"] == props.get("UNIQ_KEY", create_offset_msg_id(v.store_host, v.physical_offset))
        assert int(r["storeTimestamp"].timestamp() * 1000) == v.store_timestamp
        assert int(r["bornTimestamp"].timestamp() * 1000) == v.born_timestamp
        assert r["bornHost"] == unpack_socket_addr(v.born_host)
        assert r["storeHost"] == unpack_socket_addr(v.store_host)
        assert r["reconsumeTimes"] == v.reconsume_times


# -- stats and the command line ---------------------------------------------------------------------------
def test_stats_per_topic_queue_and_hour(spark: Any, store: pathlib.Path) -> None:
    views = _records(store)
    rows = jobs.stats(spark, str(store)).collect()
    want: dict[tuple[str, int, int], list[int]] = {}
    for v in views:
        key = (v.topic, v.queue_id, v.store_timestamp // 3_600_000 * 3_600_000)
        acc = want.setdefault(key, [0, 0, 0])
        acc[0] += 1
        acc[1] += v.size
        acc[2] += v.body_length
    got = {
        (r["topic"], r["queueId"], int(r["hour"].timestamp() * 1000)): [
            r["messages"],
            r["bytes"],
            r["bodyBytes"],
        ]
        for r in rows
    }
    assert got == want


def test_command_line_verify_and_rebuild(
    spark: Any, store: pathlib.Path, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["spark", "verify", str(store), "--split-bytes", "64k"]) == 0
    captured = capsys.readouterr()
    assert f"{COUNT} records, 0 damaged places" in captured.out and captured.out.rstrip().endswith("OK")
    assert "[verify] tasks" in captured.err  # progress line
    out = tmp_path / "cli-rebuild"
    args = ["spark", "rebuild-index", str(store), "--out", str(out), "--no-progress"]
    args += ["--cq-file-size", str(CQ_FILE), "--hash-slots", str(HASH_SLOTS), "--index-num", str(INDEX_NUM)]
    assert main(args) == 0
    assert _tree(out, "consumequeue") == _tree(store, "consumequeue")
    assert main(["spark", "stats", str(store), "--no-progress"]) == 0
    assert "total" in capsys.readouterr().out
    assert (
        main(
            [
                "spark",
                "export",
                str(store),
                "--out",
                str(tmp_path / "x"),
                "--begin",
                "2030-01-01",
                "--end",
                "2020-01-01",
            ]
        )
        == 2
    )
    assert "before begin time" in capsys.readouterr().err
