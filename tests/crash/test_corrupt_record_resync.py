"""One damaged CommitLog record no longer takes the records after it along.

A store of 3,000 records (one segment) is stopped cleanly, one record in the middle (the 1,500th)
is damaged on disk, and the store is started again, with and without the ``abort`` file (normal
and abnormal recovery). Recovery must resynchronise on the next intact record: the damaged range
is copied to ``quarantine/`` and filled in place, an ERROR line gives the counts, and the 2,999
intact records read back at their offsets and through their queues, each exactly once, at their
queue offsets; a new message continues every queue without reusing a queue offset. One case runs
``rocketq serve`` on such a store and reads it through the broker and ``rocketq admin``.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import subprocess
import sys
import urllib.request
from collections.abc import Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families

from _support.procs import ServeProcess, child_env, free_port, small_store_config
from rocketq.client import Admin
from rocketq.config import StoreConfig
from rocketq.message import Message
from rocketq.store import MessageStore, PutMessageResult
from rocketq.store.record_scan import QUARANTINE_TOPIC

COUNT = 3000
VICTIM = 1500
QUEUES = 4
TOPIC = "Resync"
BODY_OFFSET = 88  # V1 record, IPv4 hosts


def body_of(i: int) -> bytes:
    return f"message {i:05d} ".encode() * 8


def write_store(config: StoreConfig) -> list[PutMessageResult]:
    with MessageStore(config) as store:
        out = [store.put_message(Message(TOPIC, body_of(i)), i % QUEUES) for i in range(COUNT)]
        assert store.wait_dispatched()
    assert len({r.physical_offset // config.mapped_file_size_commit_log for r in out}) == 1
    return out


def patch(config: StoreConfig, offset: int, change: Callable[[bytes], bytes], length: int) -> None:
    seg = offset - offset % config.mapped_file_size_commit_log
    path = os.path.join(config.commit_log_dir, f"{seg:020d}")
    with open(path, "r+b") as f:
        f.seek(offset - seg)
        old = f.read(length)
        f.seek(offset - seg)
        f.write(change(old))


def read_range(config: StoreConfig, offset: int, length: int) -> bytes:
    seg = offset - offset % config.mapped_file_size_commit_log
    with open(os.path.join(config.commit_log_dir, f"{seg:020d}"), "rb") as f:
        f.seek(offset - seg)
        return f.read(length)


def flip_body(config: StoreConfig, r: PutMessageResult) -> None:
    patch(config, r.physical_offset + BODY_OFFSET + 20, lambda b: bytes(x ^ 0xA5 for x in b), 16)


def invert_size(config: StoreConfig, r: PutMessageResult) -> None:
    patch(config, r.physical_offset, lambda b: bytes(x ^ 0xFF for x in b), 4)


DAMAGE = {"body_16_bytes_flipped": flip_body, "totalsize_inverted": invert_size}


def read_queue(store: MessageStore, queue_id: int) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    offset = 0
    while True:
        got = store.get_message("g", TOPIC, queue_id, offset, 64)
        out += [(m.queue_offset, m.body) for m in got.messages]
        if got.next_begin_offset <= offset or got.next_begin_offset >= got.max_offset:
            return out
        offset = got.next_begin_offset


@pytest.mark.parametrize("abort", [False, True], ids=["clean", "abort_file"])
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_record_is_quarantined_and_the_rest_kept(
    tmp_path: pathlib.Path, damage: str, abort: bool, caplog: pytest.LogCaptureFixture
) -> None:
    config = StoreConfig(
        store_path_root_dir=str(tmp_path / "store"),
        mapped_file_size_commit_log=4 << 20,
        mapped_file_size_consume_queue=20 * 1000,
        flush_disk_type="SYNC_FLUSH",
    )
    written = write_store(config)
    victim = written[VICTIM]
    DAMAGE[damage](config, victim)
    damaged = read_range(config, victim.physical_offset, victim.size)
    if abort:
        pathlib.Path(config.store_path_root_dir, "abort").write_text("crashed")
    caplog.set_level(logging.ERROR, logger="rocketq.store")
    with MessageStore(config) as store:
        assert store.last_exit_ok is not abort
        # the damaged range is exactly the victim, quarantined to a file, reported
        assert store.recovery is not None
        plan = store.recovery.plan
        assert [(q.offset, q.end, q.records) for q in plan.quarantined] == [
            (victim.physical_offset, victim.next_offset, 1)
        ]
        name = f"{0:020d}.quarantine-{victim.physical_offset}"
        kept = pathlib.Path(store.quarantine_dir, name).read_bytes()
        assert kept == damaged
        lines = [r.getMessage() for r in caplog.records if "quarantined" in r.getMessage()]
        assert len(lines) == 1 and "1 record(s)" in lines[0] and f"{victim.size} bytes" in lines[0]
        info = store.runtime_info()
        assert info["commitLogQuarantinedRanges"] == "1"
        assert info["commitLogQuarantine"] == f"{victim.physical_offset}:{victim.size}"
        assert store.get_max_phy_offset() == written[-1].next_offset
        # every other record reads back at its offset
        for i, r in enumerate(written):
            m = store.look_message_by_offset(r.physical_offset)
            if i == VICTIM:
                assert m is None or m.topic == QUARANTINE_TOPIC
                continue
            assert m is not None and m.body == body_of(i) and m.queue_offset == r.queue_offset
        # and through the queues: exactly once each, at its queue offset
        seen: dict[tuple[int, int], bytes] = {}
        for q in range(QUEUES):
            for qoff, body in read_queue(store, q):
                assert (q, qoff) not in seen, f"queue {q} offset {qoff} read twice"
                seen[(q, qoff)] = body
        expected = {(i % QUEUES, r.queue_offset): body_of(i) for i, r in enumerate(written) if i != VICTIM}
        assert seen == expected
        # new messages continue each queue after its last offset
        for q in range(QUEUES):
            r = store.put_message(Message(TOPIC, b"after"), q)
            assert r.queue_offset == COUNT // QUEUES
    # a second restart finds nothing new to quarantine and keeps everything
    caplog.clear()
    with MessageStore(config) as store:
        assert store.recovery is not None and store.recovery.plan.quarantined == ()
        assert store.runtime_info()["commitLogQuarantinedRanges"] == "1"
        assert store.get_max_offset(TOPIC, 0) == COUNT // QUEUES + 1
        m = store.look_message_by_offset(written[VICTIM + 1].physical_offset)
        assert m is not None and m.body == body_of(VICTIM + 1)


def test_regression_damage_before_a_zeroed_last_segment_keeps_the_records_after_it(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """After a crash the scan starts at the last segment; with that segment zeroed from its
    start, the previous segment is scanned for its BLANK. A damaged record there used to end the
    valid data: the intact records after it in that segment were cut. They are kept now, the
    damaged record quarantined."""
    segment = 64 * 1024
    config = StoreConfig(
        store_path_root_dir=str(tmp_path / "store"),
        mapped_file_size_commit_log=segment,
        mapped_file_size_consume_queue=20 * 1000,
        flush_disk_type="SYNC_FLUSH",
    )
    with MessageStore(config) as store:
        written = []
        while not written or written[-1].physical_offset < 2 * segment + 4096:
            i = len(written)
            written.append(store.put_message(Message(TOPIC, body_of(i)), i % QUEUES))
        assert store.wait_dispatched()
    in_second = [i for i, r in enumerate(written) if segment <= r.physical_offset < 2 * segment]
    victim = in_second[len(in_second) // 2]
    flip_body(config, written[victim])
    lost = [i for i, r in enumerate(written) if r.physical_offset >= 2 * segment]
    patch(config, 2 * segment, lambda b: bytes(len(b)), written[-1].next_offset - 2 * segment)
    pathlib.Path(config.store_path_root_dir, "abort").write_text("crashed")
    caplog.set_level(logging.ERROR, logger="rocketq.store")
    with MessageStore(config) as store:
        assert store.recovery is not None
        plan = store.recovery.plan
        assert [(q.offset, q.end) for q in plan.quarantined] == [
            (written[victim].physical_offset, written[victim].next_offset)
        ]
        assert any("quarantined" in r.getMessage() for r in caplog.records)
        for i, r in enumerate(written):
            if i == victim or i in lost:
                continue
            m = store.look_message_by_offset(r.physical_offset)
            assert m is not None and m.body == body_of(i), f"record {i} at {r.physical_offset} lost"
        seen = {(q, qoff): body for q in range(QUEUES) for qoff, body in read_queue(store, q)}
        assert seen == {
            (i % QUEUES, r.queue_offset): body_of(i)
            for i, r in enumerate(written)
            if i != victim and i not in lost
        }


def _gauge(url: str, name: str) -> float:
    """One sample of ``name`` from a /metrics scrape."""
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    raise AssertionError(f"{name} not in the scrape of {url}")


def test_rocketq_serve_on_a_damaged_store(tmp_path: pathlib.Path) -> None:
    metrics_port = free_port()
    server = ServeProcess(
        tmp_path, broker_conf={"metricsExporterType": "PROM", "metricsPromExporterPort": str(metrics_port)}
    )
    try:
        server.start()
        with Admin(namesrv_addr=server.namesrv_addr) as admin:
            admin.create_topic(TOPIC, QUEUES, QUEUES, broker_addr=server.broker_addr)
        server.stop()
        config = small_store_config(server.store_dir, flush_disk_type="ASYNC_FLUSH")
        written = write_store(config)
        flip_body(config, written[VICTIM])
        server.start()
        log_text = server.log_text(None)
        assert "ERROR" in log_text and "1 record(s)" in log_text and "quarantined" in log_text
        cli = [sys.executable, "-m", "rocketq.cli", "admin"]
        status = subprocess.run(
            [*cli, "brokerStatus", "-n", server.namesrv_addr, "--json"],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
            env=child_env(),
        )
        assert status.returncode == 0, status.stderr
        table = json.loads(status.stdout)
        victim = written[VICTIM]
        assert table["commitLogQuarantinedRanges"] == "1"
        assert table["commitLogQuarantine"] == f"{victim.physical_offset}:{victim.size}"
        url = f"http://127.0.0.1:{metrics_port}/metrics"
        assert _gauge(url, "rocketq_store_quarantined_ranges") == 1
        assert _gauge(url, "rocketq_store_quarantined_bytes") == victim.size
        with Admin(namesrv_addr=server.namesrv_addr) as admin:
            got = {
                (q, m.queue_offset): m.body
                for q in range(QUEUES)
                for m in admin.consume_message(TOPIC, q, 0, COUNT, broker_name=server.broker_name)
            }
        expected = {(i % QUEUES, r.queue_offset): body_of(i) for i, r in enumerate(written) if i != VICTIM}
        assert got == expected
    finally:
        server.close()
