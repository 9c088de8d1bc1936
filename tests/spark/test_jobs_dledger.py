"""Store jobs on DLedger stores, on a local Spark session and from the command line.

The store is written by ``DLedgerMessageStore`` on a group of one (the CommitLog inside the entry
store's data files, 128 KiB each) and shut down cleanly; the adopted one was a plain store first;
the last ones by a group of three broker processes (``rocketq serve --dledger 3``).
"""

from __future__ import annotations

import dataclasses
import pathlib
import shutil
import struct
from typing import Any

import pyarrow.parquet as pq
import pytest

from _support.procs import RocketqProcess
from _support.wait import wait_until
from rocketq.cli import main
from rocketq.client import Admin, Producer, SendStatus
from rocketq.config import StoreConfig
from rocketq.ha import entry_format as fmt
from rocketq.message import Message
from rocketq.spark import jobs
from rocketq.store import MessageStore
from rocketq.store.message_store import open_message_store

SEGMENT = 128 * 1024
CQ_FILE = 20 * 200
HASH_SLOTS = 64
INDEX_NUM = 500
COUNT = 1500


def _config(root: pathlib.Path, *, dledger: bool = True) -> StoreConfig:
    cfg = StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=SEGMENT,
        mapped_file_size_consume_queue=CQ_FILE,
        max_hash_slot_num=HASH_SLOTS,
        max_index_num=INDEX_NUM,
    )
    return dataclasses.replace(cfg, enable_dleger_commit_log=True, d_leger_self_id="n0") if dledger else cfg


def _put(st: MessageStore, start: int, count: int) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    for i in range(start, start + count):
        body = (b"body-%d|" % i) * (i % 50 + 1)
        msg = Message(("Orders", "Payments", "Audit")[i % 3], body, tags=f"Tag{i % 4}", keys=[f"order-{i}"])
        out[st.put_message(msg, queue_id=i % 4).physical_offset] = body
    return out


@pytest.fixture(scope="module")
def dl_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, dict[int, bytes]]:
    root = tmp_path_factory.mktemp("dledger-store")
    with open_message_store(_config(root)) as st:
        written = _put(st, 0, COUNT)
        assert st.wait_dispatched(30)
    return root, written


def _tree(root: pathlib.Path, sub: str) -> dict[str, bytes]:
    base = root / sub
    return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}


def test_verify_export_and_rebuild_of_a_dledger_store(
    spark: Any, dl_store: tuple[pathlib.Path, dict[int, bytes]], tmp_path: pathlib.Path
) -> None:
    root, written = dl_store
    report = jobs.verify(spark, str(root))
    assert report.ok, report.summary()
    assert report.records == COUNT and len(report.segments) >= 3
    assert all(s.segment.isdigit() for s in report.segments)
    assert [s.end_kind for s in report.segments] == ["blank"] * (len(report.segments) - 1) + ["end"]
    summary = jobs.export(spark, str(root), str(tmp_path / "out"), broker_name="broker-a")
    assert summary.rows == COUNT
    rows = pq.read_table(tmp_path / "out").to_pylist()
    assert sorted(r["body"] for r in rows) == sorted(written.values())
    assert {r["brokerName"] for r in rows} == {"broker-a"}
    # the ConsumeQueues rebuilt from the entries are the ones the broker's dispatch wrote
    out = tmp_path / "rebuilt"
    config = _config(root)
    rebuilt = jobs.rebuild_index(spark, str(root), str(out), config=config)
    assert rebuilt.records == COUNT and rebuilt.skipped_records == 0
    assert _tree(out, "consumequeue") == _tree(root, "consumequeue")


def test_command_line_verify_reports_a_corrupted_entry_at_its_offset(
    spark: Any,
    dl_store: tuple[pathlib.Path, dict[int, bytes]],
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root, written = dl_store
    assert main(["spark", "verify", str(root / "dledger-n0"), "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert f"{COUNT} records, 0 damaged places" in captured.out and captured.out.rstrip().endswith("OK")
    damaged = tmp_path / "damaged"
    shutil.copytree(root, damaged, ignore=shutil.ignore_patterns("lock"))
    hit = sorted(written)[777]
    entry_pos = hit - fmt.BODY_OFFSET
    path = damaged / "dledger-n0" / "data" / f"{entry_pos - entry_pos % SEGMENT:020d}"
    buf = bytearray(path.read_bytes())
    buf[entry_pos % SEGMENT + fmt.BODY_OFFSET + 100] ^= 0x5A  # a byte of the message body
    path.write_bytes(bytes(buf))
    assert main(["spark", "verify", str(damaged), "--no-progress"]) == 1
    text = capsys.readouterr().out
    assert f"DAMAGE at offset {entry_pos} (position {entry_pos % SEGMENT}): entry " in text
    assert "bodyCrc" in text and f"DAMAGED: first damage at offset {entry_pos}" in text
    assert f"{COUNT} records" in text  # the entry's size holds: the walk went on after it
    assert "(DLedger entries)" in text


def test_an_adopted_store_verifies_fully(spark: Any, tmp_path: pathlib.Path) -> None:
    root = tmp_path / "adopted"
    with MessageStore(_config(root, dledger=False)) as plain:
        old = _put(plain, 0, 700)
    with open_message_store(_config(root)) as st:
        new = _put(st, 700, 500)
        divided = int(st.runtime_info()["dividedCommitlogOffset"])
        assert st.wait_dispatched(30)
    report = jobs.verify(spark, str(root))
    assert report.ok, report.summary()
    assert report.records == 1200
    starts = [s.start_offset for s in report.segments]
    assert divided in starts and starts.index(divided) >= 2  # old segments first, then entry files
    assert min(new) == divided + fmt.BODY_OFFSET > max(old)
    stats = jobs.stats(spark, str(root)).collect()
    assert sum(r["messages"] for r in stats) == 1200
    # a byte flipped in an old segment's record is found there, by the plain walk
    hit = sorted(old)[100]
    seg = root / "commitlog" / f"{hit - hit % SEGMENT:020d}"
    buf = bytearray(seg.read_bytes())
    buf[hit % SEGMENT + 4 : hit % SEGMENT + 8] = struct.pack(">i", 0x12345678)  # illegal magic
    seg.write_bytes(bytes(buf))
    damaged = jobs.verify(spark, str(root))
    assert [d.offset for d in damaged.damage] == [hit]
    assert "illegal magic" in damaged.damage[0].reason


def test_the_stores_of_a_real_group_verify_clean_with_the_same_records(
    spark: Any, tmp_path: pathlib.Path
) -> None:
    """``rocketq serve --dledger 3``, 300 messages, a clean stop: each member's store verifies clean
    and holds the same records at the same offsets (followers write the leader's entry bytes)."""
    data = tmp_path / "data"
    args = ["serve", "--dledger", "3", "--data-dir", str(data), "--namesrv-port", "0"]
    args += ["--broker-port", "0", "--grpc-port", "-1"]
    serve = RocketqProcess("serve-dledger3", args, tmp_path / "logs")
    try:
        namesrv = serve.wait_banner(["name server", "broker"], 45.0)["name server"]
        with Admin(namesrv) as admin:
            admin.create_topic("JobsGroupT", 4, 4, cluster="DefaultCluster")
            wait_until(lambda: len(admin.topic_route("JobsGroupT").queue_datas) > 0, "the route", 45.0, 0.2)
        with Producer("JobsGroupPG", namesrv_addr=namesrv) as producer:
            sent = [producer.send(Message("JobsGroupT", f"g-{i}".encode() * 20)) for i in range(300)]
        assert all(r.status is SendStatus.SEND_OK for r in sent)
    finally:
        serve.stop()
    exported = {}
    for member in ("n0", "n1", "n2"):
        root = data / f"broker-a-{member}"
        report = jobs.verify(spark, str(root))
        assert report.ok, report.summary()
        assert report.records == 300, report.summary()
        rows = (
            jobs.read_commitlog(spark, str(root)).select("topic", "queueId", "queueOffset", "body").collect()
        )
        exported[member] = sorted((r["queueId"], r["queueOffset"], bytes(r["body"])) for r in rows)
    assert exported["n0"] == exported["n1"] == exported["n2"]
    assert sorted(body for _, _, body in exported["n0"]) == sorted(f"g-{i}".encode() * 20 for i in range(300))
