"""ConsumeQueue and ConsumeQueueStore: on-disk layout, RocketMQ write rules, recovery, truncation,
minimum-offset correction, expiry, time lookup and vectorised reads, on real files."""

from __future__ import annotations

import logging
import os
import pathlib
import struct
from collections.abc import Callable

import numpy as np
import pytest

from rocketq.config import StoreConfig
from rocketq.errors import CorruptFileError, StoreError
from rocketq.store.checkpoint import StoreCheckpoint
from rocketq.store.consume_queue import (
    CQ_UNIT_DTYPE,
    FILLER_SIZE,
    ConsumeQueue,
    ConsumeQueueStore,
    CqUnit,
)
from rocketq.store.mapped_file import MappedFile
from rocketq.store.record_scan import DispatchRequest

UNITS_PER_FILE = 10
FILE_SIZE = UNITS_PER_FILE * 20  # small files so that queues roll quickly
MSG_SIZE = 100


def file_name(byte_offset: int) -> str:
    """The 20-digit zero-padded decimal name, spelled out independently of the code under test."""
    name = str(byte_offset)
    return "0" * (20 - len(name)) + name


def unit_bytes(offset: int, size: int, tags: int) -> bytes:
    """One unit written field by field: i64 offset @0, i32 size @8, i64 tags @12, big-endian."""
    return struct.pack(">q", offset) + struct.pack(">i", size) + struct.pack(">q", tags)


FILLER_BYTES = bytes.fromhex("0000000000000000") + bytes.fromhex("7fffffff") + bytes(8)


def make_cq(root: pathlib.Path, topic: str = "TopicA", queue_id: int = 0) -> ConsumeQueue:
    cq = ConsumeQueue(topic, queue_id, str(root), FILE_SIZE)
    cq.load()
    return cq


def reopen(cq: ConsumeQueue, root: pathlib.Path) -> ConsumeQueue:
    cq.shutdown()
    again = make_cq(root, cq.topic, cq.queue_id)
    again.recover()
    return again


def fill(cq: ConsumeQueue, count: int, *, first_cq: int = 0, first_phys: int = 0) -> None:
    """Units for queue offsets first_cq.. pointing at consecutive 100-byte records."""
    for i in range(count):
        assert cq.put_message_position_info(first_phys + i * MSG_SIZE, MSG_SIZE, 1000 + i, first_cq + i)


def queue_dir(root: pathlib.Path, topic: str = "TopicA", queue_id: int = 0) -> pathlib.Path:
    return root / "consumequeue" / topic / str(queue_id)


def files_on_disk(root: pathlib.Path, topic: str = "TopicA", queue_id: int = 0) -> list[str]:
    d = queue_dir(root, topic, queue_id)
    return sorted(os.listdir(d)) if d.exists() else []


def read_file(root: pathlib.Path, byte_offset: int) -> bytes:
    return (queue_dir(root) / file_name(byte_offset)).read_bytes()


# -- layout and naming ----------------------------------------------------------------------------
def test_units_on_disk_are_byte_exact(tmp_path: pathlib.Path) -> None:
    cq = make_cq(tmp_path)
    tags_negative = -1656969516  # "TopicTest#KEY1".hashCode(), sign-extended
    assert cq.put_message_position_info(0, 211, 2598919, 0)
    assert cq.put_message_position_info(211, 300, tags_negative, 1)
    assert cq.put_message_position_info(0x1_0000_0000, 0x7FFF0000, -(1 << 63), 2)
    cq.flush(0)
    data = read_file(tmp_path, 0)
    assert len(data) == FILE_SIZE
    assert data[0:8] == bytes(8)
    assert data[8:12] == bytes([0, 0, 0, 211])
    assert data[12:20] == bytes([0, 0, 0, 0, 0, 0x27, 0xA8, 0x07])  # 2598919
    assert struct.unpack_from(">q", data, 20) == (211,)
    assert struct.unpack_from(">i", data, 28) == (300,)
    assert data[32:40] == bytes.fromhex("ffffffff9d3ca6d4")
    assert data[40:60] == unit_bytes(0x1_0000_0000, 0x7FFF0000, -(1 << 63))
    assert data[60:] == bytes(FILE_SIZE - 60)
    cq.shutdown()


def test_directory_and_file_names(tmp_path: pathlib.Path) -> None:
    cq = make_cq(tmp_path, "%RETRY%group", 3)
    fill(cq, 25)
    d = tmp_path / "consumequeue" / "%RETRY%group" / "3"
    assert sorted(os.listdir(d)) == [
        "00000000000000000000",
        "00000000000000000200",
        "00000000000000000400",
    ]
    for n in (0, 9, 10, 19, 20, 24):
        byte = n * 20
        expected = file_name(byte - byte % FILE_SIZE)
        assert (d / expected).exists()
        assert cq.get_unit(n) == CqUnit(n * MSG_SIZE, MSG_SIZE, 1000 + n)
    assert cq.roll_next_file(13) == 20
    assert cq.roll_next_file(20) == 30
    cq.shutdown()


def test_default_size_second_file_name(tmp_path: pathlib.Path) -> None:
    size = StoreConfig().consume_queue_file_size
    assert size == 6_000_000
    cq = ConsumeQueue("T", 0, str(tmp_path), size)
    cq.load()
    # The first unit of the second file (queue offset 300 000): no filler is needed before it.
    assert cq.put_message_position_info(0, 100, 0, 300_000)
    assert files_on_disk(tmp_path, "T") == ["00000000000006000000"]
    assert cq.min_offset_in_queue == 300_000
    assert cq.max_offset_in_queue == 300_001
    cq.shutdown()


def test_file_size_must_be_a_multiple_of_20(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="multiple of 20"):
        ConsumeQueue("T", 0, str(tmp_path), 210)


def test_load_rejects_a_file_of_the_wrong_length(tmp_path: pathlib.Path) -> None:
    d = queue_dir(tmp_path)
    d.mkdir(parents=True)
    (d / file_name(0)).write_bytes(bytes(FILE_SIZE - 20))
    cq = ConsumeQueue("TopicA", 0, str(tmp_path), FILE_SIZE)
    with pytest.raises(CorruptFileError, match="length not matched"):
        cq.load()


# -- write rules ----------------------------------------------------------------------------------
def test_pre_blank_filler_when_the_first_file_starts_at_a_non_zero_offset(tmp_path: pathlib.Path) -> None:
    cq = make_cq(tmp_path)
    assert cq.put_message_position_info(5000, 120, 77, 13)
    assert files_on_disk(tmp_path) == [file_name(200)]
    data = read_file(tmp_path, 200)
    assert data[0:20] == data[20:40] == data[40:60] == FILLER_BYTES
    assert data[0:20] == unit_bytes(0, FILLER_SIZE, 0)
    assert data[60:80] == unit_bytes(5000, 120, 77)
    assert data[80:] == bytes(FILE_SIZE - 80)
    assert cq.min_offset_in_queue == 13
    assert cq.max_offset_in_queue == 14
    assert cq.max_physic_offset == 5120
    assert cq.get_unit(12) is None  # below the minimum
    assert cq.get_unit(13) == CqUnit(5000, 120, 77)
    assert cq.put_message_position_info(5120, 80, 78, 14)
    assert cq.max_offset_in_queue == 15
    cq.shutdown()


def test_pre_blank_within_the_first_file(tmp_path: pathlib.Path) -> None:
    cq = make_cq(tmp_path)
    assert cq.put_message_position_info(100, 10, 0, 4)
    data = read_file(tmp_path, 0)
    assert [data[i : i + 20] for i in range(0, 80, 20)] == [FILLER_BYTES] * 4
    assert data[80:100] == unit_bytes(100, 10, 0)
    assert cq.min_offset_in_queue == 4
    cq.shutdown()


def test_fillers_do_not_count_as_physical_offset_after_reload(tmp_path: pathlib.Path) -> None:
    cq = make_cq(tmp_path)
    assert cq.put_message_position_info(100, 10, 0, 4)
    cq = reopen(cq, tmp_path)
    assert cq.max_physic_offset == 110
    assert cq.min_offset_in_queue == 0  # the first file's start until correct_min_offset runs
    cq.correct_min_offset(0)
    assert cq.min_offset_in_queue == 4  # fillers never become the minimum
    cq.shutdown()


def test_already_built_units_are_skipped(tmp_path: pathlib.Path) -> None:
    cq = make_cq(tmp_path)
    fill(cq, 5)
    before = read_file(tmp_path, 0)
    # A re-dispatch of records already indexed: offset + size <= max physical offset.
    assert cq.put_message_position_info(200, MSG_SIZE, 1, 2)
    assert cq.put_message_position_info(400, MSG_SIZE, 1, 9)
    assert cq.max_offset_in_queue == 5
    assert read_file(tmp_path, 0) == before
    cq.shutdown()


def test_duplicate_queue_offset_is_skipped_with_success(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    cq = make_cq(tmp_path)
    fill(cq, 5)
    with caplog.at_level(logging.WARNING, logger="rocketq.store.consume_queue"):
        assert cq.put_message_position_info(10_000, 50, 9, 3)
    assert "already written" in caplog.text
    assert cq.max_offset_in_queue == 5
    assert cq.max_physic_offset == 500  # unchanged: nothing was written
    assert cq.get_unit(3) == CqUnit(300, MSG_SIZE, 1003)
    cq.shutdown()


def test_queue_offset_zero_is_never_a_duplicate(tmp_path: pathlib.Path) -> None:
    """RocketMQ checks duplicates and holes only for cq_offset != 0."""
    cq = make_cq(tmp_path)
    fill(cq, 2)
    assert cq.put_message_position_info(5000, 10, 0, 0)
    assert cq.max_offset_in_queue == 3
    assert cq.get_unit(2) == CqUnit(5000, 10, 0)
    cq.shutdown()


def test_hole_is_logged_and_the_unit_appended_at_the_current_position(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    cq = make_cq(tmp_path)
    fill(cq, 2)
    with caplog.at_level(logging.ERROR, logger="rocketq.store.consume_queue"):
        assert cq.put_message_position_info(900, 10, 5, 7)
    assert any(r.levelno == logging.ERROR and "order wrong" in r.getMessage() for r in caplog.records)
    assert cq.max_offset_in_queue == 3
    assert cq.get_unit(2) == CqUnit(900, 10, 5)
    assert read_file(tmp_path, 0)[40:60] == unit_bytes(900, 10, 5)
    cq.shutdown()


def test_duplicate_at_a_file_boundary_creates_the_next_file(tmp_path: pathlib.Path) -> None:
    """RocketMQ picks (and creates) the last file before the duplicate check."""
    cq = make_cq(tmp_path)
    fill(cq, 10)
    assert cq.put_message_position_info(5000, 10, 0, 4)
    assert files_on_disk(tmp_path) == [file_name(0), file_name(200)]
    assert cq.max_offset_in_queue == 10
    cq.shutdown()


def test_invalid_unit_is_refused(tmp_path: pathlib.Path) -> None:
    cq = make_cq(tmp_path)
    assert not cq.put_message_position_info(-5, 10, 0, 0)
    assert not cq.put_message_position_info(5, 0, 0, 0)
    assert cq.max_offset_in_queue == 0
    cq.shutdown()


# -- reads ----------------------------------------------------------------------------------------
def test_get_units_reads_across_file_boundaries_one_read_per_file(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cq = make_cq(tmp_path)
    fill(cq, 25, first_phys=7)
    reads: list[tuple[int, int]] = []
    original = MappedFile.read

    def counting_read(self: MappedFile, pos: int, size: int) -> bytes | None:
        reads.append((pos, size))
        return original(self, pos, size)

    monkeypatch.setattr(MappedFile, "read", counting_read)
    units = cq.get_units(7, 10)
    assert reads == [(140, 60), (0, 140)]
    assert units.dtype == CQ_UNIT_DTYPE
    assert units.dtype.itemsize == 20
    for name in ("offset", "size", "tags"):
        assert units.dtype.fields is not None
        assert units.dtype.fields[name][0].isnative
    assert units["offset"].tolist() == [7 + i * MSG_SIZE for i in range(7, 17)]
    assert units["size"].tolist() == [MSG_SIZE] * 10
    assert units["tags"].tolist() == [1000 + i for i in range(7, 17)]
    cq.shutdown()


def test_get_units_limits(tmp_path: pathlib.Path) -> None:
    cq = make_cq(tmp_path)
    fill(cq, 25)
    assert len(cq.get_units(20, 100)) == 5  # stops at the write position
    assert len(cq.get_units(0, 25)) == 25
    assert len(cq.get_units(10, 10)) == 10  # exactly one whole file
    assert len(cq.get_units(25, 5)) == 0
    assert len(cq.get_units(40, 5)) == 0
    assert len(cq.get_units(-1, 5)) == 0
    assert len(cq.get_units(3, 0)) == 0
    cq.correct_min_offset(1200)
    assert cq.min_offset_in_queue == 12
    assert len(cq.get_units(11, 5)) == 0  # below the minimum
    assert cq.get_units(12, 2)["offset"].tolist() == [1200, 1300]
    empty = make_cq(tmp_path, "Empty")
    assert len(empty.get_units(0, 10)) == 0
    assert empty.get_unit(0) is None
    empty.shutdown()
    cq.shutdown()


def test_get_units_returns_an_independent_array(tmp_path: pathlib.Path) -> None:
    cq = make_cq(tmp_path)
    fill(cq, 3)
    units = cq.get_units(0, 3)
    cq.shutdown()  # unmapped: the array must not refer to the mapping
    assert units["offset"].tolist() == [0, 100, 200]
    assert isinstance(units, np.ndarray)


# -- recovery -------------------------------------------------------------------------------------
def test_recover_after_clean_shutdown_keeps_everything(tmp_path: pathlib.Path) -> None:
    cq = make_cq(tmp_path)
    fill(cq, 25)
    cq = reopen(cq, tmp_path)
    assert cq.max_offset_in_queue == 25
    assert cq.max_physic_offset == 2500
    assert cq.get_units(0, 30)["offset"].tolist() == [i * MSG_SIZE for i in range(25)]
    assert cq.put_message_position_info(2500, MSG_SIZE, 0, 25)
    assert cq.get_unit(25) == CqUnit(2500, MSG_SIZE, 0)
    cq.shutdown()


def test_recover_of_exactly_full_files(tmp_path: pathlib.Path) -> None:
    cq = make_cq(tmp_path)
    fill(cq, 20)
    cq = reopen(cq, tmp_path)
    assert cq.max_offset_in_queue == 20
    assert files_on_disk(tmp_path) == [file_name(0), file_name(200)]
    assert cq.put_message_position_info(2000, MSG_SIZE, 0, 20)
    assert files_on_disk(tmp_path) == [file_name(0), file_name(200), file_name(400)]
    cq.shutdown()


def _write_at(root: pathlib.Path, byte_offset: int, data: bytes) -> None:
    start = byte_offset - byte_offset % FILE_SIZE
    with open(queue_dir(root) / file_name(start), "r+b") as f:
        f.seek(byte_offset - start)
        f.write(data)


def test_recover_stops_at_a_zeroed_last_unit(tmp_path: pathlib.Path) -> None:
    cq = make_cq(tmp_path)
    fill(cq, 15)
    cq.shutdown()
    _write_at(tmp_path, 14 * 20, bytes(20))
    cq = reopen(cq, tmp_path)
    assert cq.max_offset_in_queue == 14
    assert cq.max_physic_offset == 1400
    assert cq.put_message_position_info(1400, 50, 0, 14)
    assert cq.get_unit(14) == CqUnit(1400, 50, 0)
    cq.shutdown()


def test_recover_stops_at_a_torn_unit_and_zeroes_what_follows(tmp_path: pathlib.Path) -> None:
    cq = make_cq(tmp_path)
    fill(cq, 12)
    cq.shutdown()
    # Unit 12: only the physical offset reached the disk (size 0 → invalid). Unit 13: stale bytes.
    _write_at(tmp_path, 12 * 20, struct.pack(">q", 1200))
    _write_at(tmp_path, 13 * 20, unit_bytes(1300, MSG_SIZE, 5))
    cq = reopen(cq, tmp_path)
    assert cq.max_offset_in_queue == 12
    assert cq.max_physic_offset == 1200
    assert read_file(tmp_path, 200)[40:] == bytes(FILE_SIZE - 40)
    cq = reopen(cq, tmp_path)  # a second recovery must not resurrect the stale unit
    assert cq.max_offset_in_queue == 12
    cq.shutdown()


def test_recover_stops_at_a_negative_offset(tmp_path: pathlib.Path) -> None:
    cq = make_cq(tmp_path)
    fill(cq, 4)
    cq.shutdown()
    _write_at(tmp_path, 2 * 20, unit_bytes(-1, MSG_SIZE, 0))
    cq = reopen(cq, tmp_path)
    assert cq.max_offset_in_queue == 2
    assert cq.max_physic_offset == 200
    cq.shutdown()


def test_recover_empties_a_last_file_whose_first_unit_is_torn(tmp_path: pathlib.Path) -> None:
    cq = make_cq(tmp_path)
    fill(cq, 11)
    cq.shutdown()
    _write_at(tmp_path, 10 * 20, bytes(20))
    cq = reopen(cq, tmp_path)
    assert files_on_disk(tmp_path) == [file_name(0), file_name(200)]  # kept, empty
    assert cq.max_offset_in_queue == 10
    assert cq.max_physic_offset == 1000
    assert cq.put_message_position_info(1000, MSG_SIZE, 0, 10)
    assert cq.get_unit(10) == CqUnit(1000, MSG_SIZE, 0)
    cq.shutdown()


def test_recover_scans_only_the_last_three_files(tmp_path: pathlib.Path) -> None:
    cq = make_cq(tmp_path)
    fill(cq, 45)
    cq.shutdown()
    _write_at(tmp_path, 5 * 20, bytes(20))  # in file 0: before the last three, trusted as full
    _write_at(tmp_path, 44 * 20, bytes(20))
    cq = reopen(cq, tmp_path)
    assert cq.max_offset_in_queue == 44
    assert cq.max_physic_offset == 4400
    assert cq.get_unit(5) == CqUnit(0, 0, 0)
    cq.shutdown()


def test_recover_of_a_queue_holding_only_fillers(tmp_path: pathlib.Path) -> None:
    d = queue_dir(tmp_path)
    d.mkdir(parents=True)
    (d / file_name(200)).write_bytes(FILLER_BYTES * 3 + bytes(FILE_SIZE - 60))
    cq = make_cq(tmp_path)
    cq.recover()
    assert cq.max_offset_in_queue == 13
    assert cq.max_physic_offset == -1  # a filler is not a record
    # The record for queue offset 13 is dispatched again and must not be skipped.
    assert cq.put_message_position_info(4096, 100, 0, 13)
    assert cq.get_unit(13) == CqUnit(4096, 100, 0)
    cq.shutdown()


def test_recover_with_no_files(tmp_path: pathlib.Path) -> None:
    cq = make_cq(tmp_path)
    cq.recover()
    assert cq.max_offset_in_queue == 0
    assert cq.max_physic_offset == -1
    cq.shutdown()


# -- truncation -----------------------------------------------------------------------------------
def test_truncate_dirty_inside_a_file(tmp_path: pathlib.Path) -> None:
    cq = make_cq(tmp_path)
    fill(cq, 25)
    cq.truncate_dirty_logic_files(1250)
    assert files_on_disk(tmp_path) == [file_name(0), file_name(200)]
    assert cq.max_offset_in_queue == 13
    assert cq.max_physic_offset == 1300  # end of the last kept unit (1200 + 100)
    assert read_file(tmp_path, 200)[60:] == bytes(FILE_SIZE - 60)  # stale units zeroed
    cq = reopen(cq, tmp_path)
    assert cq.max_offset_in_queue == 13
    assert cq.put_message_position_info(1250, 10, 0, 13)  # inside the kept record: already built
    assert cq.max_offset_in_queue == 13
    assert cq.put_message_position_info(1300, 10, 0, 13)
    assert cq.get_unit(13) == CqUnit(1300, 10, 0)
    cq.shutdown()


def test_truncate_dirty_at_a_file_start_deletes_files(tmp_path: pathlib.Path) -> None:
    cq = make_cq(tmp_path)
    fill(cq, 25)
    cq.truncate_dirty_logic_files(1000)
    assert files_on_disk(tmp_path) == [file_name(0)]
    assert cq.max_offset_in_queue == 10
    assert cq.max_physic_offset == 1000
    assert cq.put_message_position_info(1000, 10, 0, 10)
    assert files_on_disk(tmp_path) == [file_name(0), file_name(200)]
    cq.shutdown()


def test_truncate_dirty_beyond_the_end_keeps_everything(tmp_path: pathlib.Path) -> None:
    cq = make_cq(tmp_path)
    fill(cq, 15)
    cq.truncate_dirty_logic_files(10**9)
    assert cq.max_offset_in_queue == 15
    assert cq.max_physic_offset == 1500
    cq.shutdown()


def test_truncate_dirty_everything(tmp_path: pathlib.Path) -> None:
    cq = make_cq(tmp_path)
    fill(cq, 15, first_cq=30, first_phys=100)
    cq.truncate_dirty_logic_files(50)
    assert files_on_disk(tmp_path) == []
    assert cq.max_offset_in_queue == 0
    assert cq.min_offset_in_queue == 0
    assert cq.max_physic_offset == 50
    # A fresh first file: fillers again.
    assert cq.put_message_position_info(50, 10, 0, 32)
    assert read_file(tmp_path, 600)[0:40] == FILLER_BYTES * 2
    assert cq.min_offset_in_queue == 32
    cq.shutdown()


def test_truncate_dirty_keeps_fillers_but_not_their_size(tmp_path: pathlib.Path) -> None:
    cq = make_cq(tmp_path)
    fill(cq, 3, first_cq=4, first_phys=1000)
    cq.truncate_dirty_logic_files(1000)
    assert cq.max_offset_in_queue == 4  # the four fillers remain, as in RocketMQ
    assert cq.max_physic_offset == 1000
    assert cq.put_message_position_info(1000, 10, 0, 4)
    assert cq.get_unit(4) == CqUnit(1000, 10, 0)
    cq.shutdown()


def test_truncate_dirty_deletes_an_empty_last_file(tmp_path: pathlib.Path) -> None:
    cq = make_cq(tmp_path)
    fill(cq, 10)
    assert cq.put_message_position_info(5, 1, 0, 3)  # already built: nothing, no new file
    assert cq.put_message_position_info(5000, 1, 0, 3)  # duplicate at the boundary: empty next file
    assert files_on_disk(tmp_path) == [file_name(0), file_name(200)]
    cq.truncate_dirty_logic_files(5000)
    assert files_on_disk(tmp_path) == [file_name(0)]
    assert cq.max_offset_in_queue == 10
    assert cq.max_physic_offset == 1000
    cq.shutdown()


# -- minimum offset and expiry --------------------------------------------------------------------
def test_correct_min_offset(tmp_path: pathlib.Path) -> None:
    cq = make_cq(tmp_path)
    fill(cq, 25)
    cq.correct_min_offset(0)
    assert cq.min_offset_in_queue == 0
    cq.correct_min_offset(1050)
    assert cq.min_offset_in_queue == 11
    cq.correct_min_offset(1100)
    assert cq.min_offset_in_queue == 11
    cq.correct_min_offset(0)
    assert cq.min_offset_in_queue == 11  # never moves backwards
    cq.correct_min_offset(2400)
    assert cq.min_offset_in_queue == 24
    cq.correct_min_offset(2401)
    assert cq.min_offset_in_queue == 25  # the last unit is gone too: the queue is empty
    assert cq.max_offset_in_queue == 25
    assert cq.put_message_position_info(2500, 10, 0, 25)
    cq.correct_min_offset(2401)
    assert cq.min_offset_in_queue == 25
    cq.shutdown()


def test_correct_min_offset_after_reload_searches_the_whole_queue(tmp_path: pathlib.Path) -> None:
    cq = make_cq(tmp_path)
    fill(cq, 25)
    cq = reopen(cq, tmp_path)
    assert cq.min_offset_in_queue == 0
    cq.correct_min_offset(1750)  # in the second file, not the first
    assert cq.min_offset_in_queue == 18
    cq.shutdown()


def test_delete_expired_file(tmp_path: pathlib.Path) -> None:
    cq = make_cq(tmp_path)
    fill(cq, 25)
    assert cq.delete_expired_file(899) == 0  # last unit of file 0 is at 900
    assert cq.delete_expired_file(901) == 1
    assert files_on_disk(tmp_path) == [file_name(200), file_name(400)]
    assert cq.min_offset_in_queue == 10
    assert cq.get_unit(9) is None
    assert cq.delete_expired_file(10**9) == 1  # the last file is always kept
    assert files_on_disk(tmp_path) == [file_name(400)]
    assert cq.min_offset_in_queue == 25
    assert cq.max_offset_in_queue == 25
    cq = reopen(cq, tmp_path)
    assert cq.min_offset_in_queue == 20
    assert cq.max_offset_in_queue == 25
    cq.shutdown()


# -- lookup by time -------------------------------------------------------------------------------
def _times(store_times: list[int]) -> Callable[[int, int], int | None]:
    def store_time_of(offset: int, size: int) -> int | None:
        assert size == MSG_SIZE
        index = offset // MSG_SIZE
        return store_times[index] if 0 <= index < len(store_times) else None

    return store_time_of


def test_offset_by_time(tmp_path: pathlib.Path) -> None:
    store_times = [1000, 1000, 2000, 3000, 3000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 9500]
    cq = make_cq(tmp_path)
    fill(cq, len(store_times))
    lookup = _times(store_times)
    assert cq.get_offset_in_queue_by_time(3000, lookup) == 3  # the first at that time
    assert cq.get_offset_in_queue_by_time(2500, lookup) == 3
    assert cq.get_offset_in_queue_by_time(2000, lookup) == 2
    assert cq.get_offset_in_queue_by_time(1000, lookup) == 0
    assert cq.get_offset_in_queue_by_time(1, lookup) == 0  # all later: min offset
    assert cq.get_offset_in_queue_by_time(9500, lookup) == 12
    assert cq.get_offset_in_queue_by_time(9501, lookup) == 13  # all earlier: max offset
    for ts in range(0, 10_000, 250):
        expected = next((i for i, t in enumerate(store_times) if t >= ts), len(store_times))
        assert cq.get_offset_in_queue_by_time(ts, lookup) == expected
    cq.shutdown()


def test_offset_by_time_respects_min_offset_and_missing_records(tmp_path: pathlib.Path) -> None:
    store_times = list(range(1000, 26_000, 1000))
    cq = make_cq(tmp_path)
    fill(cq, 25)
    cq.correct_min_offset(1000)
    assert cq.get_offset_in_queue_by_time(0, _times(store_times)) == 10
    # Records before physical offset 1500 have left the CommitLog: they count as earlier.
    gone = _times([0] * 15 + store_times[15:])

    def partial(offset: int, size: int) -> int | None:
        return None if offset < 1500 else gone(offset, size)

    assert cq.get_offset_in_queue_by_time(0, partial) == 15
    assert cq.get_offset_in_queue_by_time(20_000, partial) == 19
    empty = make_cq(tmp_path, "Empty")
    assert empty.get_offset_in_queue_by_time(5, partial) == 0
    empty.shutdown()
    cq.shutdown()


def test_offset_by_time_calls_are_logarithmic(tmp_path: pathlib.Path) -> None:
    cq = make_cq(tmp_path)
    fill(cq, 45)
    calls = 0

    def lookup(offset: int, size: int) -> int:
        nonlocal calls
        calls += 1
        return offset

    assert cq.get_offset_in_queue_by_time(2050, lookup) == 21
    assert calls <= 7
    cq.shutdown()


# -- flush ----------------------------------------------------------------------------------------
def test_flush_reports_whether_anything_moved(tmp_path: pathlib.Path) -> None:
    cq = make_cq(tmp_path)
    fill(cq, 3)
    assert cq.flush(0) is False
    assert cq.flush(0) is True
    assert cq.queue.flushed_where == 60
    cq.shutdown()


def test_destroy_removes_files_and_directories(tmp_path: pathlib.Path) -> None:
    cq = make_cq(tmp_path)
    fill(cq, 15)
    cq.destroy()
    assert not (tmp_path / "consumequeue" / "TopicA").exists()
    assert cq.max_offset_in_queue == 0
    assert cq.max_physic_offset == -1


# -- ConsumeQueueStore ----------------------------------------------------------------------------
def _config(tmp_path: pathlib.Path) -> StoreConfig:
    return StoreConfig(store_path_root_dir=str(tmp_path), mapped_file_size_consume_queue=FILE_SIZE - 7)


def _request(topic: str, qid: int, phys: int, cq_offset: int, sys_flag: int = 0) -> DispatchRequest:
    return DispatchRequest(
        topic=topic,
        queue_id=qid,
        commit_log_offset=phys,
        msg_size=MSG_SIZE,
        tags_code=42,
        store_timestamp=1_700_000_000_000 + phys,
        consume_queue_offset=cq_offset,
        sys_flag=sys_flag,
    )


def test_store_put_filters_transaction_types(tmp_path: pathlib.Path) -> None:
    store = ConsumeQueueStore(_config(tmp_path))
    assert store.file_size == FILE_SIZE  # rounded up to a multiple of 20
    assert store.put(_request("T", 0, 0, 0, sys_flag=0x0))
    assert store.put(_request("T", 0, 100, 1, sys_flag=0x4))  # PREPARED: not queued
    assert store.put(_request("T", 0, 200, 1, sys_flag=0x8))  # COMMIT
    assert store.put(_request("T", 0, 300, 2, sys_flag=0xC))  # ROLLBACK: not queued
    assert store.put(_request("T", 0, 400, 2, sys_flag=0x1 | 0x2 | 0x8))  # compressed COMMIT
    cq = store.find("T", 0)
    assert cq is not None
    assert cq.get_units(0, 10)["offset"].tolist() == [0, 200, 400]
    assert store.find("T", 1) is None
    store.shutdown()


def test_store_updates_the_checkpoint_logics_timestamp(tmp_path: pathlib.Path) -> None:
    checkpoint = StoreCheckpoint(str(tmp_path / "checkpoint"))
    store = ConsumeQueueStore(_config(tmp_path), checkpoint=checkpoint)
    store.put(_request("T", 0, 0, 0))
    store.put(_request("T", 0, 100, 1))
    assert checkpoint.logics_msg_timestamp == 1_700_000_000_100
    store.put(_request("T", 0, 500, 2, sys_flag=0x4))
    assert checkpoint.logics_msg_timestamp == 1_700_000_000_100
    store.shutdown()
    checkpoint.shutdown()


def test_store_load_recover_and_tables(tmp_path: pathlib.Path) -> None:
    config = _config(tmp_path)
    store = ConsumeQueueStore(config)
    phys = 0
    for i in range(12):
        for topic, qid in (("A", 0), ("A", 1), ("B", 7)):
            if topic == "B" and i >= 5:
                continue
            assert store.put(_request(topic, qid, phys, i))
            phys += MSG_SIZE
    assert store.find_or_create("A", 0) is store.find("A", 0)
    assert len(store) == 3
    store.flush(0)
    store.shutdown()
    cq_root = tmp_path / "consumequeue"
    (cq_root / "A" / "notanint").mkdir()
    (cq_root / "A" / "01").mkdir()
    (cq_root / "A" / "stray-file").write_bytes(b"x")
    (cq_root / "stray-topic-file").write_bytes(b"x")

    again = ConsumeQueueStore(config)
    again.load()
    assert sorted((cq.topic, cq.queue_id) for cq in again) == [("A", 0), ("A", 1), ("B", 7)]
    assert again.recover() == phys
    assert again.max_offsets() == {("A", 0): 12, ("A", 1): 12, ("B", 7): 5}
    assert again.max_physic_offset() == phys

    again.truncate_dirty(1500)
    assert again.max_offsets() == {("A", 0): 5, ("A", 1): 5, ("B", 7): 5}
    again.correct_min_offsets(700)
    a0 = again.find("A", 0)
    assert a0 is not None
    assert a0.min_offset_in_queue == 3  # physical offsets 0, 300, 600, 800, ...
    assert again.delete_expired(10**9) == 0  # every queue has one file, and the last is kept
    again.shutdown()


def test_store_recover_without_queues(tmp_path: pathlib.Path) -> None:
    store = ConsumeQueueStore(_config(tmp_path))
    store.load()
    assert store.recover() == -1
    assert store.max_offsets() == {}
    assert store.flush(0) is True


def test_store_delete_expired_and_destroy(tmp_path: pathlib.Path) -> None:
    store = ConsumeQueueStore(_config(tmp_path))
    for i in range(25):
        store.put(_request("T", 0, i * MSG_SIZE, i))
        store.put(_request("U", 2, 100_000 + i * MSG_SIZE, i))
    assert store.delete_expired(1000) == 1  # T's first file; every unit of U is later
    assert store.delete_expired(10**9) == 1 + 2
    cq = store.find("U", 2)
    assert cq is not None
    assert cq.min_offset_in_queue == cq.max_offset_in_queue == 25
    assert store.flush(0) is False
    store.destroy()
    assert len(store) == 0
    assert not (tmp_path / "consumequeue").exists()


def test_scans_of_a_closed_file_raise_instead_of_cutting(tmp_path: pathlib.Path) -> None:
    cq = make_cq(tmp_path)
    fill(cq, 5)
    last = cq.queue.last()
    assert last is not None
    last.shutdown()
    with pytest.raises(StoreError, match="closed"):
        cq.truncate_dirty_logic_files(0)
    with pytest.raises(StoreError, match="closed"):
        cq.recover()
    cq.shutdown()
    assert read_file(tmp_path, 0)[:100] == b"".join(unit_bytes(i * 100, 100, 1000 + i) for i in range(5))
