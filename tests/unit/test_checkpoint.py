"""StoreCheckpoint: RocketMQ's 4096-byte layout, byte by byte, and the rocketq extension."""

from __future__ import annotations

import logging
import pathlib
import struct
import zlib

import pytest

from rocketq.errors import CorruptFileError
from rocketq.store.checkpoint import CHECKPOINT_FILE_SIZE, StoreCheckpoint


def rocketmq_checkpoint(physic: int, logics: int, index: int, master: int = 0, confirm: int = 0) -> bytes:
    """A checkpoint as RocketMQ writes it: five big-endian i64 fields, the rest of the page zero."""
    head = b"".join(struct.pack(">q", v) for v in (physic, logics, index, master, confirm))
    return head + bytes(4096 - len(head))


def extension(dispatched: int, *, magic: bytes = b"RQCP", version: int = 1) -> bytes:
    body = magic + struct.pack(">I", version) + struct.pack(">q", dispatched)
    return body + struct.pack(">I", zlib.crc32(body))


def test_missing_file_is_created_zeroed(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "store" / "checkpoint"
    cp = StoreCheckpoint(str(path))
    assert path.read_bytes() == bytes(4096)
    assert not (tmp_path / "store" / "checkpoint.tmp").exists()
    assert cp.physic_msg_timestamp == cp.logics_msg_timestamp == cp.index_msg_timestamp == 0
    assert cp.master_flushed_offset == cp.confirm_phy_offset == 0
    assert cp.dispatched_phy_offset == -1
    cp.shutdown()


def test_layout_is_byte_exact(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "checkpoint"
    cp = StoreCheckpoint(str(path))
    cp.physic_msg_timestamp = 1_700_000_000_123
    cp.logics_msg_timestamp = 1_700_000_000_100
    cp.index_msg_timestamp = 1_699_999_999_000
    cp.master_flushed_offset = 0x0102030405060708
    cp.confirm_phy_offset = -1
    cp.dispatched_phy_offset = 1 << 40
    cp.flush()
    data = path.read_bytes()
    assert len(data) == CHECKPOINT_FILE_SIZE
    assert struct.unpack_from(">q", data, 0) == (1_700_000_000_123,)
    assert struct.unpack_from(">q", data, 8) == (1_700_000_000_100,)
    assert struct.unpack_from(">q", data, 16) == (1_699_999_999_000,)
    assert data[24:32] == bytes([1, 2, 3, 4, 5, 6, 7, 8])
    assert data[32:40] == b"\xff" * 8
    assert data[40:64] == bytes(24)
    assert data[64:68] == b"RQCP"
    assert data[68:72] == bytes([0, 0, 0, 1])
    assert data[72:80] == bytes([0, 0, 1, 0, 0, 0, 0, 0])
    assert struct.unpack_from(">I", data, 80) == (zlib.crc32(data[64:80]),)
    assert data[84:] == bytes(4096 - 84)
    assert data[64:84] == extension(1 << 40)
    cp.shutdown()


def test_values_survive_a_reopen(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "checkpoint")
    cp = StoreCheckpoint(path)
    cp.physic_msg_timestamp = 11
    cp.logics_msg_timestamp = 22
    cp.index_msg_timestamp = 33
    cp.master_flushed_offset = 44
    cp.confirm_phy_offset = 55
    cp.dispatched_phy_offset = 66
    cp.shutdown()
    again = StoreCheckpoint(path)
    assert (
        again.physic_msg_timestamp,
        again.logics_msg_timestamp,
        again.index_msg_timestamp,
        again.master_flushed_offset,
        again.confirm_phy_offset,
        again.dispatched_phy_offset,
    ) == (11, 22, 33, 44, 55, 66)
    again.shutdown()


def test_fields_are_written_only_on_flush(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "checkpoint"
    cp = StoreCheckpoint(str(path))
    cp.physic_msg_timestamp = 5
    assert path.read_bytes()[0:8] == bytes(8)
    cp.flush()
    assert path.read_bytes()[0:8] == struct.pack(">q", 5)
    cp.shutdown()


def test_reads_a_rocketmq_written_checkpoint(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "checkpoint"
    path.write_bytes(rocketmq_checkpoint(1_000_000, 990_000, 980_000, 4096, 8192))
    with caplog.at_level(logging.WARNING, logger="rocketq.store.checkpoint"):
        cp = StoreCheckpoint(str(path))
    assert not caplog.records  # an absent extension is normal, not a warning
    assert cp.physic_msg_timestamp == 1_000_000
    assert cp.logics_msg_timestamp == 990_000
    assert cp.index_msg_timestamp == 980_000
    assert cp.master_flushed_offset == 4096
    assert cp.confirm_phy_offset == 8192
    assert cp.dispatched_phy_offset == -1
    cp.shutdown()
    # Shutdown flushes: RocketMQ's fields are unchanged, the extension is now present.
    data = path.read_bytes()
    assert data[:64] == rocketmq_checkpoint(1_000_000, 990_000, 980_000, 4096, 8192)[:64]
    assert data[64:84] == extension(-1)


def test_extension_crc_mismatch_is_ignored_with_a_warning(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "checkpoint"
    page = bytearray(rocketmq_checkpoint(7, 8, 9))
    page[64:84] = extension(123_456)
    page[79] ^= 0x01  # one flipped bit in dispatched_phy_offset
    path.write_bytes(bytes(page))
    with caplog.at_level(logging.WARNING, logger="rocketq.store.checkpoint"):
        cp = StoreCheckpoint(str(path))
    assert cp.dispatched_phy_offset == -1
    assert cp.physic_msg_timestamp == 7  # RocketMQ's fields are still read
    assert any(r.levelno == logging.WARNING and "CRC mismatch" in r.getMessage() for r in caplog.records)
    cp.shutdown()


def test_extension_with_a_bad_crc_field(tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "checkpoint"
    page = bytearray(rocketmq_checkpoint(0, 0, 0))
    page[64:84] = extension(10)
    page[83] ^= 0xFF
    path.write_bytes(bytes(page))
    with caplog.at_level(logging.WARNING, logger="rocketq.store.checkpoint"):
        cp = StoreCheckpoint(str(path))
    assert cp.dispatched_phy_offset == -1
    assert "CRC mismatch" in caplog.text
    cp.shutdown()


@pytest.mark.parametrize(("magic", "version"), [(b"XXXX", 1), (b"RQCP", 2)])
def test_unknown_extension_is_ignored(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture, magic: bytes, version: int
) -> None:
    path = tmp_path / "checkpoint"
    page = bytearray(rocketmq_checkpoint(0, 0, 0))
    page[64:84] = extension(10, magic=magic, version=version)
    path.write_bytes(bytes(page))
    with caplog.at_level(logging.WARNING, logger="rocketq.store.checkpoint"):
        cp = StoreCheckpoint(str(path))
    assert cp.dispatched_phy_offset == -1
    assert "unknown extension" in caplog.text
    cp.shutdown()


@pytest.mark.parametrize("size", [0, 40, 4095, 4097, 8192])
def test_wrong_size_is_refused(tmp_path: pathlib.Path, size: int) -> None:
    path = tmp_path / "checkpoint"
    path.write_bytes(bytes(size))
    with pytest.raises(CorruptFileError, match=rf"checkpoint .* is {size} B, expected 4096 B"):
        StoreCheckpoint(str(path))
    assert path.stat().st_size == size  # left untouched


def test_min_timestamp_rules(tmp_path: pathlib.Path) -> None:
    cp = StoreCheckpoint(str(tmp_path / "checkpoint"))
    cp.physic_msg_timestamp = 10_000
    cp.logics_msg_timestamp = 8_000
    cp.index_msg_timestamp = 9_000
    assert cp.min_timestamp() == 5_000
    assert cp.min_timestamp_index() == 5_000
    cp.index_msg_timestamp = 4_000
    assert cp.min_timestamp_index() == 4_000
    cp.logics_msg_timestamp = 2_999
    assert cp.min_timestamp() == 0
    cp.physic_msg_timestamp = 0
    assert cp.min_timestamp() == 0
    assert cp.min_timestamp_index() == 0
    cp.shutdown()


def test_setters_validate(tmp_path: pathlib.Path) -> None:
    cp = StoreCheckpoint(str(tmp_path / "checkpoint"))
    with pytest.raises(ValueError, match="below -1"):
        cp.dispatched_phy_offset = -2
    with pytest.raises(ValueError, match="signed 64-bit"):
        cp.physic_msg_timestamp = 1 << 63
    cp.confirm_phy_offset = -(1 << 63)
    cp.flush()
    cp.shutdown()


def test_shutdown_is_idempotent_and_flush_after_it_is_ignored(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "checkpoint"
    cp = StoreCheckpoint(str(path))
    cp.physic_msg_timestamp = 77
    cp.shutdown()
    assert cp.closed
    cp.physic_msg_timestamp = 88
    cp.flush()
    cp.shutdown()
    assert struct.unpack_from(">q", path.read_bytes(), 0) == (77,)
