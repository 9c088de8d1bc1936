"""StoreCheckpoint: RocketMQ's ``checkpoint`` file, plus a rocketq extension.

The file is exactly 4096 bytes (one OS page), memory-mapped; unused bytes are zero. All integers
are big-endian (spec/store-format.md §7.1)::

    offset  field                    type   meaning
    0       physicMsgTimestamp       i64    store time of the last message flushed to the CommitLog
    8       logicsMsgTimestamp       i64    store time of the last message written to a ConsumeQueue
    16      indexMsgTimestamp        i64    end time of the last full and flushed index file
    24      masterFlushedOffset      i64    (RocketMQ 5.0)
    32      confirmPhyOffset         i64    (RocketMQ 5.1.1)
    40..63  zero
    ---- rocketq extension (RocketMQ neither reads nor writes these bytes) ----
    64      magic b"RQCP"            4 B
    68      version = 1              u32
    72      dispatched_phy_offset    i64    CommitLog offset below which ConsumeQueues and the index
                                            are built and flushed; -1 when unknown
    80      CRC32 of bytes 64..80    u32    zlib.crc32
    84..4095 zero

Field values live in memory; :meth:`StoreCheckpoint.flush` writes all of them into the mapping
(a :class:`~rocketq.store.mapped_file.MappedFile`) and makes the page durable, as RocketMQ's
``StoreCheckpoint.flush`` does (``fsync``, which on Linux covers the mapping; no ``msync``,
which Python makes holding the interpreter lock: :meth:`MappedFile.sync`).

Invariants and rules:

* the file is never any size but 4096 B: a missing file is created at full size (written to a
  temporary name, fsync'd, renamed), and an existing file of another size is refused with
  :class:`~rocketq.errors.CorruptFileError`;
* an all-zero extension (a file written by RocketMQ) means "absent" silently; a non-zero
  extension whose magic, version or CRC does not check out is logged and treated as absent
  (``dispatched_phy_offset == -1``);
* ``dispatched_phy_offset`` is set by the owner only after the ConsumeQueues and the index are
  flushed up to it, and the checkpoint is flushed after that. Since RocketMQ leaves the extension
  bytes untouched, a checkpoint last written by RocketMQ can carry a stale value: treat it as a
  hint and clamp it to the recovered CommitLog end.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import zlib
from typing import Final

from rocketq.errors import CorruptFileError
from rocketq.fileio import durable_replace
from rocketq.store.mapped_file import MappedFile

log = logging.getLogger(__name__)

CHECKPOINT_FILE_SIZE: Final = 4096
#: ``getMinTimestamp`` subtracts this margin from ``min(physic, logics)``.
MIN_TIMESTAMP_MARGIN_MS: Final = 3000
EXT_OFFSET: Final = 64
EXT_MAGIC: Final = b"RQCP"
EXT_VERSION: Final = 1

_FIELDS = struct.Struct(">qqqqq")
_EXT_BODY = struct.Struct(">4sIq")
_EXT_CRC = struct.Struct(">I")
_EXT_END = EXT_OFFSET + _EXT_BODY.size + _EXT_CRC.size
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def _check_int64(name: str, value: int) -> int:
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"checkpoint {name}={value} does not fit in a signed 64-bit integer")
    return value


def _create(path: str) -> None:
    """Create a zeroed 4096-byte checkpoint atomically (temporary file, fsync, rename)."""
    durable_replace(path, bytes(CHECKPOINT_FILE_SIZE), mode=0o644)
    log.info("created checkpoint %s", path)


class StoreCheckpoint:
    """The store's ``checkpoint`` file (RocketMQ ``StoreCheckpoint``)."""

    def __init__(self, path: str) -> None:
        self.path = path
        if not os.path.exists(path):
            _create(path)
        size = os.stat(path).st_size
        if size != CHECKPOINT_FILE_SIZE:
            raise CorruptFileError(f"checkpoint {path} is {size} B, expected {CHECKPOINT_FILE_SIZE} B")
        self._mf = MappedFile(path, CHECKPOINT_FILE_SIZE, create=False, file_from_offset=0)
        mm = self._mm = self._mf.mm
        self._lock = threading.Lock()
        self._closed = False
        fields = [int(v) for v in _FIELDS.unpack_from(mm, 0)]
        self._physic_msg_timestamp: int = fields[0]
        self._logics_msg_timestamp: int = fields[1]
        self._index_msg_timestamp: int = fields[2]
        self._master_flushed_offset: int = fields[3]
        self._confirm_phy_offset: int = fields[4]
        self._dispatched_phy_offset = self._load_extension()
        log.info(
            "loaded checkpoint %s: physic=%d logics=%d index=%d dispatched=%d",
            path,
            self._physic_msg_timestamp,
            self._logics_msg_timestamp,
            self._index_msg_timestamp,
            self._dispatched_phy_offset,
        )

    def _load_extension(self) -> int:
        raw = self._mm[EXT_OFFSET:_EXT_END]
        if raw == bytes(len(raw)):
            return -1
        body = raw[: _EXT_BODY.size]
        (crc,) = _EXT_CRC.unpack_from(raw, _EXT_BODY.size)
        if zlib.crc32(body) != crc:
            log.warning(
                "checkpoint %s: extension CRC mismatch (stored %#010x, computed %#010x); ignoring it",
                self.path,
                crc,
                zlib.crc32(body),
            )
            return -1
        magic, version, dispatched = _EXT_BODY.unpack(body)
        if magic != EXT_MAGIC or version != EXT_VERSION:
            log.warning(
                "checkpoint %s: unknown extension (magic %r, version %d); ignoring it",
                self.path,
                magic,
                version,
            )
            return -1
        return int(dispatched)

    # -- fields -------------------------------------------------------------------------------
    @property
    def physic_msg_timestamp(self) -> int:
        return self._physic_msg_timestamp

    @physic_msg_timestamp.setter
    def physic_msg_timestamp(self, value: int) -> None:
        self._physic_msg_timestamp = _check_int64("physic_msg_timestamp", value)

    @property
    def logics_msg_timestamp(self) -> int:
        return self._logics_msg_timestamp

    @logics_msg_timestamp.setter
    def logics_msg_timestamp(self, value: int) -> None:
        self._logics_msg_timestamp = _check_int64("logics_msg_timestamp", value)

    @property
    def index_msg_timestamp(self) -> int:
        return self._index_msg_timestamp

    @index_msg_timestamp.setter
    def index_msg_timestamp(self, value: int) -> None:
        self._index_msg_timestamp = _check_int64("index_msg_timestamp", value)

    @property
    def master_flushed_offset(self) -> int:
        return self._master_flushed_offset

    @master_flushed_offset.setter
    def master_flushed_offset(self, value: int) -> None:
        self._master_flushed_offset = _check_int64("master_flushed_offset", value)

    @property
    def confirm_phy_offset(self) -> int:
        return self._confirm_phy_offset

    @confirm_phy_offset.setter
    def confirm_phy_offset(self, value: int) -> None:
        self._confirm_phy_offset = _check_int64("confirm_phy_offset", value)

    @property
    def dispatched_phy_offset(self) -> int:
        """rocketq extension: CommitLog offset up to which CQ and index are built and flushed."""
        return self._dispatched_phy_offset

    @dispatched_phy_offset.setter
    def dispatched_phy_offset(self, value: int) -> None:
        if value < -1:
            raise ValueError(f"checkpoint dispatched_phy_offset={value} is below -1")
        self._dispatched_phy_offset = _check_int64("dispatched_phy_offset", value)

    def min_timestamp(self) -> int:
        """``max(0, min(physic, logics) - 3000)``: messages stored before this are surely dispatched."""
        return max(0, min(self._physic_msg_timestamp, self._logics_msg_timestamp) - MIN_TIMESTAMP_MARGIN_MS)

    def min_timestamp_index(self) -> int:
        """``min(min_timestamp(), index_msg_timestamp)``, used when the index must be safe too."""
        return min(self.min_timestamp(), self._index_msg_timestamp)

    # -- durability ---------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    def flush(self) -> None:
        """Write every field into the mapping and make the page durable."""
        with self._lock:
            if self._closed:
                log.debug("checkpoint %s: flush after shutdown ignored", self.path)
                return
            mm = self._mm
            _FIELDS.pack_into(
                mm,
                0,
                self._physic_msg_timestamp,
                self._logics_msg_timestamp,
                self._index_msg_timestamp,
                self._master_flushed_offset,
                self._confirm_phy_offset,
            )
            body = _EXT_BODY.pack(EXT_MAGIC, EXT_VERSION, self._dispatched_phy_offset)
            mm[EXT_OFFSET : EXT_OFFSET + len(body)] = body
            _EXT_CRC.pack_into(mm, EXT_OFFSET + len(body), zlib.crc32(body))
            self._mf.sync(full=True)

    def shutdown(self) -> None:
        """Flush, then unmap and close. Idempotent."""
        self.flush()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._mf.shutdown()


__all__ = [
    "CHECKPOINT_FILE_SIZE",
    "EXT_MAGIC",
    "EXT_OFFSET",
    "EXT_VERSION",
    "MIN_TIMESTAMP_MARGIN_MS",
    "StoreCheckpoint",
]
