"""LocalOffsetStore: the offset file of a broadcasting consumer (real files in a temp dir)."""

from __future__ import annotations

import pathlib
import threading

import pytest

from rocketq.client import MessageQueue
from rocketq.client.offset_store import LocalOffsetStore, decode_offsets
from rocketq.errors import BodyFormatError

MQS = [MessageQueue("T", "broker-a", q) for q in range(4)]


def test_round_trip_and_backup(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "g" / "offsets.json"
    store = LocalOffsetStore(str(path))
    store.update(MQS[0], 5)
    store.persist()
    store.update(MQS[0], 3)  # increase only: ignored
    store.update(MQS[1], 7)
    store.persist()
    assert decode_offsets(path.read_bytes(), "file") == {MQS[0]: 5, MQS[1]: 7}
    assert decode_offsets((tmp_path / "g" / "offsets.json.bak").read_bytes(), "bak") == {MQS[0]: 5}
    again = LocalOffsetStore(str(path))
    again.load()
    assert again.table() == {MQS[0]: 5, MQS[1]: 7}


def test_damaged_file_falls_back_to_the_backup(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "offsets.json"
    store = LocalOffsetStore(str(path))
    store.update(MQS[2], 11)
    store.persist()
    store.update(MQS[2], 12)
    store.persist()
    path.write_bytes(b"{not json")
    again = LocalOffsetStore(str(path))
    again.load()
    assert again.table() == {MQS[2]: 11}  # the .bak copy, one write older
    (tmp_path / "offsets.json.bak").unlink()
    with pytest.raises(BodyFormatError):
        LocalOffsetStore(str(path)).load()


def test_concurrent_persists_leave_the_latest_table_in_place(tmp_path: pathlib.Path) -> None:
    """A consumer persists from its periodic commit and from shutdown, each in a worker thread:
    writes must not interleave (two writers sharing the temporary file and each moving the
    live file to .bak could leave no offsets.json at all)."""
    path = tmp_path / "offsets.json"
    store = LocalOffsetStore(str(path))
    start = threading.Barrier(6)
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        start.wait()
        try:
            for i in range(40):
                store.update(MQS[n % 4], n * 1000 + i, increase_only=False)
                store.persist()
        except BaseException as exc:  # reported below, in the test thread
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[0]
    store.persist()  # nothing dirty is left unwritten
    assert path.exists()
    assert decode_offsets(path.read_bytes(), "file") == store.table()
    assert not (tmp_path / "offsets.json.tmp").exists()
