"""Reading replicas for the checker (rocketq.testing.chaos.replicas) from entry stores written by
rocketq.ha.entry_store on real files: entries across data files, a torn tail, the committed
index, CommitLog records turned into drain ops, ConsumeQueue units."""

from __future__ import annotations

import os
import pathlib
import struct

from rocketq.ha.entry_format import MAGIC_NOOP
from rocketq.ha.entry_store import EntryStore
from rocketq.message import encode_properties
from rocketq.protocol.record import encode_record
from rocketq.testing.chaos.check import check_history, check_replicas
from rocketq.testing.chaos.replicas import read_consume_queues, read_replica, replica_drain

FILE = 4096


def _record(topic: str, queue: int, offset: int, payload: str) -> bytes:
    props = encode_properties({"UNIQ_KEY": f"ID-{payload}"}).encode()
    return encode_record(
        topic=topic, body=payload.encode(), properties=props, queue_id=queue, queue_offset=offset
    )


def _store(root: pathlib.Path, sid: str, records: list[bytes], committed: int) -> EntryStore:
    store = EntryStore.open(str(root), sid, data_file_size=FILE, index_file_size=32 * 64)
    store.append(1, b"", magic=MAGIC_NOOP)
    for body in records:
        store.append(1, body)
    store.set_committed_index(committed)
    store.persist_checkpoint()
    return store


def _records(n: int) -> list[bytes]:
    return [_record("T", i % 2, i // 2, f"p0-{i}") for i in range(n)]


def test_a_replica_across_data_files_reads_as_the_store_holds_it(tmp_path: pathlib.Path) -> None:
    store = _store(tmp_path, "n0", _records(60), committed=50)  # 60 records of ~150 B: several files
    try:
        want = [(e.index, e.term, e.pos, e.chain_crc) for e in store.read_range(0, 1000)]
        end = store.write_pos
    finally:
        store.close()
    assert len(os.listdir(tmp_path / "dledger-n0" / "data")) > 1
    dump = read_replica(str(tmp_path), "n0")
    assert list(dump.entries) == want
    assert dump.committed_index == 50
    assert dump.data is not None and len(dump.data) == end - dump.start_offset
    assert dump.consume_queues is None


def test_a_torn_tail_ends_the_walk(tmp_path: pathlib.Path) -> None:
    _store(tmp_path, "n0", _records(5), committed=5).close()
    data_dir = tmp_path / "dledger-n0" / "data"
    last = sorted(data_dir.iterdir())[-1]
    good = read_replica(str(tmp_path), "n0")
    with open(last, "r+b") as f:  # flip a byte in the body of the last entry
        f.seek(good.entries[-1][2] + 60)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    torn = read_replica(str(tmp_path), "n0")
    assert list(torn.entries) == list(good.entries)[:-1]
    assert torn.committed_index == 5  # as the checkpoint says: a committed entry is gone
    res = check_replicas([good, torn])
    assert res.anomalies == {"replica_divergence": 2}, str(res)
    assert any("past its last entry 4" in e for e in res.examples["replica_divergence"])


def test_replica_drains_carry_the_committed_messages_per_queue(tmp_path: pathlib.Path) -> None:
    _store(tmp_path, "n0", _records(10), committed=8).close()  # index 0 is the NOOP: 8 records
    ops = replica_drain(str(tmp_path), "n0", "T")
    assert [(op.queue, op.node, op.type) for op in ops] == [(0, "n0", "drain"), (1, "n0", "drain")]
    assert [(r.offset, r.payload, r.msg_id) for r in ops[0].reads] == [
        (i, f"p0-{2 * i}", f"ID-p0-{2 * i}") for i in range(4)
    ]
    assert [r.payload for r in ops[1].reads] == [f"p0-{2 * i + 1}" for i in range(4)]
    assert replica_drain(str(tmp_path), "n0", "Other") == []
    res = check_history(ops)
    assert res.anomalies == {"unexpected": 8}  # nothing was sent in this history


def test_consume_queue_units(tmp_path: pathlib.Path) -> None:
    qdir = tmp_path / "consumequeue" / "T" / "1"
    qdir.mkdir(parents=True)
    units = b"".join(struct.pack(">qiq", 1000 + 100 * i, 90, 7) for i in range(3)) + bytes(20 * 5)
    (qdir / f"{0:020d}").write_bytes(units)
    assert read_consume_queues(str(tmp_path), ["T", "Missing"]) == {
        ("T", 1, i): 1000 + 100 * i for i in range(3)
    }
    _store(tmp_path, "n0", _records(2), committed=2).close()
    dump = read_replica(str(tmp_path), "n0", topics=["T"], with_data=False)
    assert dump.data is None and dump.consume_queues == {("T", 1, i): 1000 + 100 * i for i in range(3)}
