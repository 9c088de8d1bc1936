"""A damaged ConsumeQueue is rebuilt from the CommitLog, and queue offsets never repeat.

A store of 3,000 messages in 4 queues is stopped cleanly, one ConsumeQueue file is damaged on
disk, and the store is started again (with and without the ``abort`` file). Every message must
read back through its queue exactly once at its original queue offset, and new messages must
continue each queue after its last offset. Deleting ``consumequeue/`` (the documented repair)
must bring every message back, the newest included.
"""

from __future__ import annotations

import logging
import pathlib
import shutil
import struct
from collections.abc import Callable

import pytest

from rocketq.config import StoreConfig
from rocketq.message import Message
from rocketq.store import MessageStore, PutMessageResult

COUNT = 3000
QUEUES = 4
TOPIC = "Repair"
PER_QUEUE = COUNT // QUEUES
UNIT = struct.Struct(">qiq")


def body_of(i: int) -> bytes:
    return f"message {i:05d}".encode()


def make_config(tmp_path: pathlib.Path) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=str(tmp_path / "store"),
        mapped_file_size_commit_log=1 << 20,
        mapped_file_size_consume_queue=20 * 1000,
        flush_disk_type="SYNC_FLUSH",
    )


def write(config: StoreConfig) -> list[PutMessageResult]:
    with MessageStore(config) as store:
        out = [store.put_message(Message(TOPIC, body_of(i)), i % QUEUES) for i in range(COUNT)]
        assert store.wait_dispatched()
    return out


def cq_file(config: StoreConfig, queue_id: int, qoff: int) -> pathlib.Path:
    first = qoff * 20 - qoff * 20 % config.mapped_file_size_consume_queue
    return pathlib.Path(config.store_path_root_dir, "consumequeue", TOPIC, str(queue_id), f"{first:020d}")


def patch_unit(config: StoreConfig, queue_id: int, qoff: int, data: bytes) -> None:
    path = cq_file(config, queue_id, qoff)
    raw = bytearray(path.read_bytes())
    pos = qoff * 20 % config.mapped_file_size_consume_queue
    raw[pos : pos + len(data)] = data
    path.write_bytes(bytes(raw))


def read_all(store: MessageStore) -> dict[tuple[int, int], bytes]:
    """Every message of every queue, by (queue id, queue offset); a repeat fails."""
    seen: dict[tuple[int, int], bytes] = {}
    for q in range(QUEUES):
        offset = 0
        while True:
            got = store.get_message("g", TOPIC, q, offset, 50)
            for m in got.messages:
                assert m.queue_id == q
                assert (q, m.queue_offset) not in seen, f"queue {q} offset {m.queue_offset} read twice"
                seen[(q, m.queue_offset)] = m.body
            if got.next_begin_offset <= offset or got.next_begin_offset >= got.max_offset:
                break
            offset = got.next_begin_offset
    return seen


def expected(written: list[PutMessageResult]) -> dict[tuple[int, int], bytes]:
    return {(i % QUEUES, r.queue_offset): body_of(i) for i, r in enumerate(written)}


def garbage_unit(config: StoreConfig, written: list[PutMessageResult]) -> None:
    patch_unit(config, 1, 100, bytes(range(0xEC, 0x100)))  # negative offset: invalid


def plausible_wrong_unit(config: StoreConfig, written: list[PutMessageResult]) -> None:
    # queue 1, offset 100 points at the record of offset 101 (valid, same queue)
    other = written[101 * QUEUES + 1]
    patch_unit(config, 1, 100, UNIT.pack(other.physical_offset, other.size, 0))


def unit_of_another_queue(config: StoreConfig, written: list[PutMessageResult]) -> None:
    other = written[100 * QUEUES + 2]
    patch_unit(config, 1, 100, UNIT.pack(other.physical_offset, other.size, 0))


def cut_short(config: StoreConfig, written: list[PutMessageResult]) -> None:
    # the last five units of queue 1 lost (zeroed)
    patch_unit(config, 1, PER_QUEUE - 5, bytes(5 * 20))


DAMAGE: dict[str, Callable[[StoreConfig, list[PutMessageResult]], None]] = {
    "garbage_unit": garbage_unit,
    "plausible_wrong_unit": plausible_wrong_unit,
    "unit_of_another_queue": unit_of_another_queue,
    "cut_short": cut_short,
}


@pytest.mark.parametrize("abort", [False, True], ids=["clean", "abort_file"])
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_consume_queue_is_rebuilt(
    tmp_path: pathlib.Path, damage: str, abort: bool, caplog: pytest.LogCaptureFixture
) -> None:
    config = make_config(tmp_path)
    written = write(config)
    DAMAGE[damage](config, written)
    if abort:
        pathlib.Path(config.store_path_root_dir, "abort").write_text("crashed")
    caplog.set_level(logging.ERROR, logger="rocketq.store")
    with MessageStore(config) as store:
        assert read_all(store) == expected(written)
        rebuilt = [r.getMessage() for r in caplog.records if "rebuilt from the CommitLog" in r.getMessage()]
        assert rebuilt and all(f"{TOPIC}-1 " in line for line in rebuilt), rebuilt
        assert int(store.runtime_info()["consumeQueuesRebuilt"]) >= 1
        new = [store.put_message(Message(TOPIC, f"new {q}".encode()), q) for q in range(QUEUES)]
        assert [r.queue_offset for r in new] == [PER_QUEUE] * QUEUES
        assert store.wait_dispatched()
        everything = {**expected(written), **{(q, PER_QUEUE): f"new {q}".encode() for q in range(QUEUES)}}
        assert read_all(store) == everything
    # the documented repair: delete consumequeue/ and start again; nothing is lost
    shutil.rmtree(pathlib.Path(config.store_path_root_dir, "consumequeue"))
    with MessageStore(config) as store:
        assert read_all(store) == everything
        assert store.put_message(Message(TOPIC, b"later"), 1).queue_offset == PER_QUEUE + 1


def test_deleting_consume_queues_rebuilds_everything(tmp_path: pathlib.Path) -> None:
    config = make_config(tmp_path)
    written = write(config)
    shutil.rmtree(pathlib.Path(config.store_path_root_dir, "consumequeue"))
    with MessageStore(config) as store:
        assert read_all(store) == expected(written)
        assert store.put_message(Message(TOPIC, b"next"), 3).queue_offset == PER_QUEUE
