"""IndexFile and IndexService: look up messages by key and time range. Byte-compatible with RocketMQ.

One idea: the index file format (its hash table, and the service that keeps the files of it).

An index file is one fixed-size, memory-mapped hash table with chained entries
(``store/index/IndexFile.java``). Files live in ``<root>/index/`` and are named by their
creation time in local time, ``yyyyMMddHHmmssSSS`` (17 digits). Layout (big-endian)::

    off                         field               type
    0                           beginTimestamp      i64   ms, store time of the first entry
    8                           endTimestamp        i64   ms, store time of the last entry
    16                          beginPhyOffset      i64   CommitLog offset of the first entry
    24                          endPhyOffset        i64   CommitLog offset of the last entry
    32                          hashSlotCount       i32   number of slots ever used
    36                          indexCount          i32   next entry number; starts at 1
    40 + s*4                    slot s              i32   newest entry number in slot s; 0 = empty
    40 + S*4 + n*20             entry n (n >= 1):
                  +0            keyHash             i32   abs(String.hashCode(key)), MIN_VALUE -> 0
                  +4            phyOffset           i64
                  +12           timeDiff            i32   SECONDS since beginTimestamp, >= 0
                  +16           prevIndex           i32   previous entry in the slot chain; 0 = end

    size = 40 + hashSlotNum*4 + indexNum*20     (defaults: 420 000 040 B)

The key of a message is ``topic#key``; its slot is ``keyHash % hashSlotNum``. A put writes entry
``indexCount`` with ``prevIndex`` = the slot's old value, then stores ``indexCount`` in the slot,
so each slot heads a chain that runs from the newest entry to the oldest. Only the hash is
stored: a lookup returns every entry whose hash equals the key's, and callers filter by the real
key (as RocketMQ's clients do).

Invariants:

* ``1 <= indexCount <= indexNum``; entry 0 is never written; the file is full when
  ``indexCount >= indexNum``, so it holds at most ``indexNum - 1`` entries.
* Every slot value and every ``prevIndex`` is 0 or an entry number below ``indexCount``, and
  ``prevIndex < `` the entry's own number, so chains end.
* The header in the mapping is always current: every change is written through at once, so
  :meth:`IndexFile.flush` only has to make the pages durable.

RocketMQ quirks kept on purpose, because they are visible in the bytes or in query results:

* The first put computes its ``timeDiff`` against the *old* ``beginTimestamp`` (0 in the first
  file, so 0; the previous file's end time in a rolled file) and only then sets the header's
  begin values to this message's. The first entry of a rolled file therefore reads back as
  ``storeTimestamp + (storeTimestamp - previousEnd)`` rounded down to a second. The bytes are
  kept, but unlike RocketMQ our query reads that entry's time from the header's
  ``beginTimestamp`` (which is exactly its store time): otherwise a query ending "now" misses the
  first message of a file that rolled a second or more after its predecessor's last entry.
* Times read back are ``beginTimestamp + timeDiff*1000``: second precision relative to the file's
  first message.
* ``hashSlotCount`` only grows when a put lands in a slot that was empty (or invalid).

Index files become durable when they are full: when the writer rolls to a new file, it flushes
the full one and records its ``endTimestamp`` as ``indexMsgTimestamp`` in the checkpoint. After
an abnormal shutdown, :meth:`IndexService.load` destroys the files that end after that time;
recovery re-dispatches their messages.

Where this differs from RocketMQ (never in the bytes):

* The full file is flushed on the dispatching thread when the writer rolls, not on a new thread.
* :meth:`IndexService.flush` also records a newest file that is already full in the checkpoint;
  RocketMQ waits until the writer rolls to the next file.
* A new file's name is bumped by 1 ms while it is taken or does not sort after the newest file;
  RocketMQ would reuse an existing file created in the same millisecond.
* A chain walk is bounded by ``indexCount`` steps, so a corrupt file with a cycle cannot hang a
  query, and ``IndexFile`` refuses a file whose length does not match the configured slot and
  entry counts (RocketMQ maps it anyway).

Threads: one dispatcher thread calls :meth:`IndexService.build_index`; queries come from other
threads. The file list is replaced (copy on write) under a lock, so a query works on a snapshot.
Each file is reference counted: a query holds it while reading, and a file destroyed meanwhile is
unmapped when the last reader lets go.
"""

from __future__ import annotations

import datetime
import logging
import os
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

import numpy as np
import numpy.typing as npt

from rocketq import speedups as _speedups
from rocketq.config import StoreConfig
from rocketq.errors import CorruptFileError, DiskFull, SegmentAllocationError
from rocketq.message import KEY_SEPARATOR, java_string_hash, java_string_hashes
from rocketq.protocol.record import TRANSACTION_MASK, TRANSACTION_ROLLBACK_TYPE
from rocketq.store.mapped_file import MappedFile
from rocketq.store.record_scan import DispatchBatch, DispatchRequest, RequestList
from rocketq.wallclock import wall_clock_ms

log = logging.getLogger(__name__)

INDEX_HEADER_SIZE: Final = 40
HASH_SLOT_SIZE: Final = 4
INDEX_ENTRY_SIZE: Final = 20
#: ``indexCount`` of an empty file; entry numbers start here.
FIRST_INDEX: Final = 1
#: Entry blocks are reserved this far ahead of the last entry written (see ``IndexFile``).
RESERVE_AHEAD: Final = 1 << 20
INVALID_INDEX: Final = 0
INT_MAX: Final = 0x7FFFFFFF
INT_MIN: Final = -0x80000000
INDEX_DIR_NAME: Final = "index"

_BEGIN_TIMESTAMP_POS: Final = 0
_END_TIMESTAMP_POS: Final = 8
_BEGIN_PHY_OFFSET_POS: Final = 16
_END_PHY_OFFSET_POS: Final = 24
_HASH_SLOT_COUNT_POS: Final = 32
_INDEX_COUNT_POS: Final = 36

_HEADER = struct.Struct(">qqqqii")
_ENTRY = struct.Struct(">iqii")
#: An entry as a NumPy record (the same 20 bytes as ``_ENTRY``).
_ENTRY_DTYPE: Final = np.dtype([("hash", ">i4"), ("phy", ">i8"), ("diff", ">i4"), ("prev", ">i4")])
_I32 = struct.Struct(">i")
#: :meth:`IndexFile.put_keys`' loop compiled (``rocketq._speedups.index_put_keys``), or None on
#: the pure path; tests set it to None to run the pure loop beside it.
_index_put_keys: Callable[..., tuple[int, int, int | None, int] | None] | None = getattr(
    _speedups.COMPILED, "index_put_keys", None
)
_I64 = struct.Struct(">q")


#: The entry loop of :meth:`IndexService.build_index_batch` over a :class:`RequestList`'s hashes
#: compiled (``rocketq._speedups.index_entries_of``), or None on the pure path; tests set it to
#: None to run the pure loop beside it.
_index_entries_of: Callable[..., tuple[list[int], list[int], list[int]] | None] | None = getattr(
    _speedups.COMPILED, "index_entries_of", None
)


#: :meth:`IndexFile.put_keys` compiled whole (``rocketq._speedups.index_put_file``: the entries,
#: the file's counts and header) for a file whose blocks are reserved already, or None on the
#: pure path; tests set it to None to run put_keys beside it.
_index_put_file: Callable[[IndexFile, list[int], list[int], list[int]], int | None] | None = getattr(
    _speedups.COMPILED, "index_put_file", None
)


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    """Bytes of an index file with these counts: ``40 + slots*4 + entries*20``."""
    return INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + index_num * INDEX_ENTRY_SIZE


def index_key_hash(key: str) -> int:
    """``IndexFile.indexKeyHashMethod``: ``abs(key.hashCode())``; ``Integer.MIN_VALUE`` gives 0."""
    h = abs(java_string_hash(key))
    return 0 if h > INT_MAX else h


def build_key(topic: str, key: str) -> str:
    """``IndexService.buildKey``: the indexed string is ``topic#key``."""
    return f"{topic}#{key}"


def time_millis_to_file_name(ms: int) -> str:
    """``UtilAll.timeMillisToHumanString``: ``yyyyMMddHHmmssSSS`` in local time."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(ms // 1000)) + f"{ms % 1000:03d}"


def _next_file_name(name: str) -> str:
    """The 17-digit name 1 ms after ``name``, by wall-clock arithmetic (no time zone involved)."""
    dt = datetime.datetime.strptime(name[:14], "%Y%m%d%H%M%S") + datetime.timedelta(
        milliseconds=int(name[14:]) + 1
    )
    return dt.strftime("%Y%m%d%H%M%S") + f"{dt.microsecond // 1000:03d}"


class IndexFile:
    """One index file: a hash table of ``hash_slot_num`` slots and ``index_num - 1`` entries.

    ``path`` is created at full size when it does not exist or is empty; a new file's header gets
    ``end_phy_offset`` and ``end_timestamp`` (the previous file's end values) as both its begin
    and end values when they are positive. An existing file is opened as it is: call
    :meth:`load` to read its header.
    """

    def __init__(
        self,
        path: str,
        hash_slot_num: int,
        index_num: int,
        end_phy_offset: int = 0,
        end_timestamp: int = 0,
    ) -> None:
        if hash_slot_num <= 0 or index_num <= FIRST_INDEX:
            raise ValueError(
                f"index file needs hash_slot_num >= 1 and index_num >= 2, got {hash_slot_num} and {index_num}"
            )
        self.path = path
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.file_size = index_file_size(hash_slot_num, index_num)
        self._entries_pos = INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            size = 0
        created = size == 0
        if not created and size != self.file_size:
            raise CorruptFileError(
                f"index file {path} is {size} B, expected {self.file_size} B "
                f"for {hash_slot_num} slots and {index_num} entries (length not matched)"
            )
        # A sparse file, as RocketMQ's: untouched entries take no blocks. Blocks are reserved
        # (header and slots at once, entries RESERVE_AHEAD at a time) before they are written,
        # so a full disk raises DiskFull instead of killing the process with SIGBUS.
        self._mf = MappedFile(path, self.file_size, file_from_offset=0, preallocate=False)
        self._mm = self._mf.mm
        self._reserved_end = 0
        if created:
            try:
                self._reserve_entries(FIRST_INDEX)
            except DiskFull:
                self._mf.destroy(0)
                raise
        self._dirty = created
        self._begin_timestamp = 0
        self._end_timestamp = 0
        self._begin_phy_offset = 0
        self._end_phy_offset = 0
        self._hash_slot_count = 0
        self._index_count = FIRST_INDEX
        if created:
            self._write_header()
        if end_phy_offset > 0:
            self._set_begin_phy_offset(end_phy_offset)
            self._set_end_phy_offset(end_phy_offset)
        if end_timestamp > 0:
            self._set_begin_timestamp(end_timestamp)
            self._set_end_timestamp(end_timestamp)

    def __repr__(self) -> str:
        return (
            f"IndexFile({self.name}, entries={self._index_count - 1}/{self.index_num - 1}, "
            f"time=[{self._begin_timestamp}, {self._end_timestamp}], "
            f"offsets=[{self._begin_phy_offset}, {self._end_phy_offset}])"
        )

    # -- header -----------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def begin_timestamp(self) -> int:
        return self._begin_timestamp

    @property
    def end_timestamp(self) -> int:
        return self._end_timestamp

    @property
    def begin_phy_offset(self) -> int:
        return self._begin_phy_offset

    @property
    def end_phy_offset(self) -> int:
        return self._end_phy_offset

    @property
    def hash_slot_count(self) -> int:
        return self._hash_slot_count

    @property
    def index_count(self) -> int:
        """The next entry number (1 in an empty file); the file holds ``index_count - 1`` entries."""
        return self._index_count

    def _write_header(self) -> None:
        _HEADER.pack_into(
            self._mm,
            0,
            self._begin_timestamp,
            self._end_timestamp,
            self._begin_phy_offset,
            self._end_phy_offset,
            self._hash_slot_count,
            self._index_count,
        )

    def _set_begin_timestamp(self, value: int) -> None:
        self._begin_timestamp = value
        _I64.pack_into(self._mm, _BEGIN_TIMESTAMP_POS, value)

    def _set_end_timestamp(self, value: int) -> None:
        self._end_timestamp = value
        _I64.pack_into(self._mm, _END_TIMESTAMP_POS, value)

    def _set_begin_phy_offset(self, value: int) -> None:
        self._begin_phy_offset = value
        _I64.pack_into(self._mm, _BEGIN_PHY_OFFSET_POS, value)

    def _set_end_phy_offset(self, value: int) -> None:
        self._end_phy_offset = value
        _I64.pack_into(self._mm, _END_PHY_OFFSET_POS, value)

    def load(self) -> None:
        """Read the header of an existing file; an ``indexCount`` <= 0 becomes 1."""
        (
            self._begin_timestamp,
            self._end_timestamp,
            self._begin_phy_offset,
            self._end_phy_offset,
            self._hash_slot_count,
            index_count,
        ) = _HEADER.unpack_from(self._mm, 0)
        self._index_count = index_count if index_count > 0 else FIRST_INDEX
        if self._index_count > self.index_num:
            log.warning(
                "index file %s has indexCount %d above the configured %d entries",
                self.path,
                self._index_count,
                self.index_num,
            )

    # -- state ------------------------------------------------------------------------------
    def is_write_full(self) -> bool:
        return self._index_count >= self.index_num

    def is_time_matched(self, begin: int, end: int) -> bool:
        """Whether ``[begin, end]`` overlaps ``[beginTimestamp, endTimestamp]`` (RocketMQ's test)."""
        first, last = self._begin_timestamp, self._end_timestamp
        return (begin < first and end > last) or first <= begin <= last or first <= end <= last

    # -- reference counting (the MappedFile's) ---------------------------------------------
    def hold(self) -> bool:
        return self._mf.hold()

    def release(self) -> None:
        self._mf.release()

    # -- write ------------------------------------------------------------------------------
    def _reserve_entries(self, entries: int) -> None:
        """Reserve the blocks up to the end of entry ``entries - 1`` (and some ahead)."""
        end = self._entries_pos + entries * INDEX_ENTRY_SIZE
        if end <= self._reserved_end:
            return
        target = min(self.file_size, end + RESERVE_AHEAD)
        self._mf.reserve_blocks(self._reserved_end, target - self._reserved_end)
        self._reserved_end = target

    def put_key(self, key: str, phy_offset: int, store_timestamp: int, key_hash: int | None = None) -> bool:
        """Add an entry for ``key``; False when the file is full (``indexCount >= indexNum``).
        ``key_hash`` may be passed precomputed (:func:`index_key_hash` of ``key``)."""
        count = self._index_count
        if count >= self.index_num:
            log.warning("index file %s is full at %d entries", self.path, count - 1)
            return False
        self._reserve_entries(count + 1)
        mm = self._mm
        if key_hash is None:
            key_hash = index_key_hash(key)
        slot_pos = INDEX_HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE
        slot_value: int = _I32.unpack_from(mm, slot_pos)[0]
        # a slot may only name an entry below the one being written: a value >= count was left
        # by a batch that a crash cut off before its header (that entry is being written again)
        if slot_value <= INVALID_INDEX or slot_value >= count:
            slot_value = INVALID_INDEX
        begin = self._begin_timestamp
        # Seconds since the file's first message; 0 while the file has no begin time yet.
        time_diff = 0 if begin <= 0 else min(max((store_timestamp - begin) // 1000, 0), INT_MAX)
        _ENTRY.pack_into(
            mm, self._entries_pos + count * INDEX_ENTRY_SIZE, key_hash, phy_offset, time_diff, slot_value
        )
        _I32.pack_into(mm, slot_pos, count)
        if count <= FIRST_INDEX:
            self._set_begin_phy_offset(phy_offset)
            self._set_begin_timestamp(store_timestamp)
        if slot_value == INVALID_INDEX:
            self._hash_slot_count += 1
            _I32.pack_into(mm, _HASH_SLOT_COUNT_POS, self._hash_slot_count)
        self._index_count = count + 1
        _I32.pack_into(mm, _INDEX_COUNT_POS, count + 1)
        self._set_end_phy_offset(phy_offset)
        self._set_end_timestamp(store_timestamp)
        self._dirty = True
        return True

    def put_keys(self, key_hashes: list[int], phy_offsets: list[int], timestamps: list[int]) -> int:
        """:meth:`put_key` for many precomputed key hashes; the header is written once at the end.
        Returns how many entries fit (fewer than given when the file fills up)."""
        mm = self._mm
        count = self._index_count
        room = self.index_num - count
        n = min(room, len(key_hashes))
        if n <= 0:
            return 0
        self._reserve_entries(count + n)
        slots = self.hash_slot_num
        entries_pos = self._entries_pos
        begin = self._begin_timestamp
        slot_count = self._hash_slot_count
        put_c = _index_put_keys
        done = None
        if put_c is not None:  # the same loop compiled (None: values it leaves to this one)
            done = put_c(
                mm, slots, entries_pos, count, n, begin, slot_count, key_hashes, phy_offsets, timestamps
            )
        if done is not None:
            count, slot_count, begin_phy, begin = done
            if begin_phy is not None:
                self._begin_phy_offset = begin_phy
                self._begin_timestamp = begin
        unpack_slot = _I32.unpack_from
        pack_slot = _I32.pack_into
        pack_entry = _ENTRY.pack_into
        for i in range(0 if done is None else n, n):
            key_hash = key_hashes[i]
            ts = timestamps[i]
            slot_pos = INDEX_HEADER_SIZE + (key_hash % slots) * HASH_SLOT_SIZE
            slot_value = unpack_slot(mm, slot_pos)[0]
            if slot_value <= INVALID_INDEX or slot_value >= count:  # see put_key
                slot_value = INVALID_INDEX
                slot_count += 1
            time_diff = 0 if begin <= 0 else min(max((ts - begin) // 1000, 0), INT_MAX)
            pack_entry(
                mm, entries_pos + count * INDEX_ENTRY_SIZE, key_hash, phy_offsets[i], time_diff, slot_value
            )
            pack_slot(mm, slot_pos, count)
            if count <= FIRST_INDEX:
                self._begin_phy_offset = phy_offsets[i]
                self._begin_timestamp = begin = ts
            count += 1
        self._hash_slot_count = slot_count
        self._index_count = count
        self._end_phy_offset = phy_offsets[n - 1]
        self._end_timestamp = timestamps[n - 1]
        self._write_header()
        self._dirty = True
        return n

    def put_key_arrays(
        self,
        key_hashes: npt.NDArray[np.int64],
        phy_offsets: npt.NDArray[np.int64],
        timestamps: npt.NDArray[np.int64],
    ) -> int:
        """:meth:`put_keys` for arrays, with the chain pointers computed in bulk; same bytes.

        Entries ``count, count+1, ...`` are written as one block. Sorting the entries by slot
        (stably) puts each slot's entries in write order: an entry's ``prevIndex`` is the entry
        before it in its slot's run, and the first of a run takes the slot's value in the file
        (0 when it is not below that entry's own number, as :meth:`put_key` rules). The slot ends
        up naming the last entry of its run, and ``hashSlotCount`` grows once per run that found
        its slot empty. Returns how many entries fit.
        """
        count = self._index_count
        n = min(self.index_num - count, len(key_hashes))
        if n <= 0:
            return 0
        self._reserve_entries(count + n)
        key_hashes = key_hashes[:n]
        phys = phy_offsets[:n]
        stamps = timestamps[:n]
        numbers = np.arange(count, count + n, dtype=np.int64)
        slot = key_hashes % self.hash_slot_num
        order = np.argsort(slot, kind="stable")
        slot_sorted = slot[order]
        numbers_sorted = numbers[order]
        run_start = np.ones(n, dtype=np.bool_)
        run_start[1:] = slot_sorted[1:] != slot_sorted[:-1]
        run_end = np.ones(n, dtype=np.bool_)
        run_end[:-1] = run_start[1:]
        slots = np.frombuffer(self._mm, dtype=">i4", count=self.hash_slot_num, offset=INDEX_HEADER_SIZE)
        try:
            old = slots[slot_sorted[run_start]].astype(np.int64)
            fresh = (old <= INVALID_INDEX) | (old >= numbers_sorted[run_start])
            prev_sorted = np.empty(n, dtype=np.int64)
            prev_sorted[1:] = numbers_sorted[:-1]
            prev_sorted[run_start] = np.where(fresh, INVALID_INDEX, old)
            prev = np.empty(n, dtype=np.int64)
            prev[order] = prev_sorted
            begin = first_begin = self._begin_timestamp
            if count <= FIRST_INDEX:
                # the first entry is measured against the old begin time, then the file begins at it
                begin = int(stamps[0])
                self._begin_phy_offset = int(phys[0])
                self._begin_timestamp = begin
            if begin <= 0:
                diffs = np.zeros(n, dtype=np.int64)
            else:
                diffs = np.clip((stamps - begin) // 1000, 0, INT_MAX)
            if count <= FIRST_INDEX:
                diffs[0] = (
                    0 if first_begin <= 0 else min(max((int(stamps[0]) - first_begin) // 1000, 0), INT_MAX)
                )
            entries = np.empty(n, dtype=_ENTRY_DTYPE)
            entries["hash"] = key_hashes
            entries["phy"] = phys
            entries["diff"] = diffs
            entries["prev"] = prev
            pos = self._entries_pos + count * INDEX_ENTRY_SIZE
            self._mm[pos : pos + n * INDEX_ENTRY_SIZE] = entries.tobytes()
            # entries are in place before any slot names them (readers follow slots)
            slots[slot_sorted[run_end]] = numbers_sorted[run_end]
        finally:
            del slots  # an exported view would keep the mapping from closing
        self._hash_slot_count += int(fresh.sum())
        self._index_count = count + n
        self._end_phy_offset = int(phys[n - 1])
        self._end_timestamp = int(stamps[n - 1])
        self._write_header()
        self._dirty = True
        return n

    def has_entry(self, key_hash: int, phy_offset: int) -> bool:
        """Whether the chain of ``key_hash``'s slot holds an entry for ``phy_offset``."""
        count = self._index_count
        if count <= FIRST_INDEX:
            return False
        mm = self._mm
        slot = _I32.unpack_from(mm, INDEX_HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE)[0]
        steps = 0
        while INVALID_INDEX < slot < count and steps < count:
            h, phy, _diff, prev = _ENTRY.unpack_from(mm, self._entries_pos + slot * INDEX_ENTRY_SIZE)
            if h == key_hash and phy == phy_offset:
                return True
            if phy < phy_offset:
                return False  # chains run newest first; older entries have lower offsets
            slot = prev
            steps += 1
        return False

    # -- read -------------------------------------------------------------------------------
    def select_phy_offsets(self, key: str, max_num: int, begin_ms: int, end_ms: int) -> list[int]:
        """CommitLog offsets of entries whose hash equals ``key``'s and whose time is in
        ``[begin_ms, end_ms]``, newest entry first, at most ``max_num``.

        The chain walk stops at an entry with a negative ``timeDiff``, at an entry older than
        ``begin_ms``, or when ``prevIndex`` is 0, beyond ``indexCount`` or the entry itself.
        """
        found: list[int] = []
        if max_num <= 0 or not self.hold():
            return found
        try:
            mm = self._mm
            key_hash = index_key_hash(key)
            slot_pos = INDEX_HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE
            slot_value: int = _I32.unpack_from(mm, slot_pos)[0]
            count = self._index_count
            if slot_value <= INVALID_INDEX or slot_value > count or count <= FIRST_INDEX:
                return found
            begin_timestamp = self._begin_timestamp
            current = slot_value
            for _ in range(count):
                if len(found) >= max_num:
                    break
                key_hash_read, phy_offset, time_diff, prev = _ENTRY.unpack_from(
                    mm, self._entries_pos + current * INDEX_ENTRY_SIZE
                )
                if time_diff < 0:
                    break
                # Entry 1 is the file's first put; its timeDiff is relative to the previous
                # file's end (see the module docstring), its real time is beginTimestamp.
                time_read = begin_timestamp if current == FIRST_INDEX else begin_timestamp + time_diff * 1000
                if key_hash_read == key_hash and begin_ms <= time_read <= end_ms:
                    found.append(phy_offset)
                if prev <= INVALID_INDEX or prev > count or prev == current or time_read < begin_ms:
                    break
                current = prev
        except struct.error:
            log.warning("index file %s: entry beyond the end of the file while looking up %r", self.path, key)
        finally:
            self.release()
        return found

    # -- lifecycle --------------------------------------------------------------------------
    @property
    def dirty(self) -> bool:
        """Whether entries were added since the last flush."""
        return self._dirty

    def flush(self) -> bool:
        """Make the mapped pages durable (the header is already current in the mapping).

        Returns whether there was anything to flush.
        """
        if not self._dirty or not self._mf.available:
            return False
        self._dirty = False
        return self._mf.sync()

    def shutdown(self) -> None:
        """Flush, then unmap once no reader holds the file."""
        self.flush()
        self._mf.shutdown()

    def destroy(self) -> bool:
        """Delete the file; the mapping is closed when the last reader lets go."""
        self._mf.shutdown()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        log.info("destroyed index file %s", self.path)
        return True


class IndexCheckpoint(Protocol):
    """The part of the store checkpoint the index writes (``StoreCheckpoint.indexMsgTimestamp``)."""

    index_msg_timestamp: int

    def flush(self) -> None: ...


@dataclass(frozen=True, slots=True)
class QueryOffsetResult:
    """CommitLog offsets found for a key, and how far the index had got at the time."""

    phy_offsets: list[int]
    index_last_update_timestamp: int
    index_last_update_phy_offset: int


class IndexService:
    """The index files of a store: building entries from dispatched messages, and queries."""

    def __init__(
        self,
        config: StoreConfig,
        checkpoint: IndexCheckpoint,
        *,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.config = config
        self.checkpoint = checkpoint
        self.hash_slot_num = config.max_hash_slot_num
        self.index_num = config.max_index_num
        self.directory = os.path.join(config.store_path_root_dir, INDEX_DIR_NAME)
        self._clock_ms = clock_ms
        self._files: list[IndexFile] = []
        #: After an unclean load: the CommitLog offset from which destroyed files must be rebuilt.
        self.rebuild_from: int | None = None
        self._lock = threading.RLock()

    # -- files ------------------------------------------------------------------------------
    @property
    def files(self) -> list[IndexFile]:
        """A snapshot of the files, oldest first (never mutated afterwards)."""
        return self._files

    @property
    def max_phy_offset(self) -> int:
        """``endPhyOffset`` of the newest file; 0 without files."""
        files = self._files
        return files[-1].end_phy_offset if files else 0

    def load(self, last_exit_ok: bool) -> bool:
        """Open the files in the index directory, oldest first.

        After an abnormal exit, files that end after the checkpoint's ``index_msg_timestamp``
        may be incomplete and are destroyed; recovery dispatches their messages again.
        """
        with self._lock:
            os.makedirs(self.directory, exist_ok=True)
            loaded: list[IndexFile] = []
            for name in sorted(os.listdir(self.directory)):
                path = os.path.join(self.directory, name)
                if not name.isdigit() or not os.path.isfile(path):
                    log.warning("ignoring %s in the index directory", path)
                    continue
                try:
                    f = IndexFile(path, self.hash_slot_num, self.index_num)
                except (OSError, CorruptFileError):
                    log.exception("cannot load index file %s", path)
                    for g in loaded:
                        g.shutdown()
                    return False
                f.load()
                if not last_exit_ok and f.end_timestamp > self.checkpoint.index_msg_timestamp:
                    log.info(
                        "destroying index file %s: it ends at %d, after the checkpoint's index time %d",
                        path,
                        f.end_timestamp,
                        self.checkpoint.index_msg_timestamp,
                    )
                    if f.index_count > FIRST_INDEX:
                        begin = f.begin_phy_offset
                        self.rebuild_from = (
                            begin if self.rebuild_from is None else min(self.rebuild_from, begin)
                        )
                    f.destroy()
                    continue
                log.info("loaded index file %r", f)
                loaded.append(f)
            # Beyond RocketMQ: trailing files without a single entry (a process killed while
            # creating one leaves it empty or zeroed) carry no end offset worth trusting; drop them
            # so the newest real file says how far the index goes.
            while loaded and loaded[-1].index_count <= FIRST_INDEX:
                empty = loaded.pop()
                log.info("removing index file %s: it holds no entry", empty.path)
                empty.destroy()
            self._files = [*self._files, *loaded]
            return True

    def discard_beyond(self, phy_offset: int) -> int:
        """Destroy the newest files that index a CommitLog offset at or after ``phy_offset`` (the
        end of the data recovery kept) and note where their messages must be indexed again.

        Beyond RocketMQ, which keeps such entries: they would point at records that no longer
        exist, and the file's end offset would make the index skip every record written there
        afterwards. Returns how many files were destroyed.
        """
        destroyed = 0
        with self._lock:
            files = list(self._files)
            while files and files[-1].index_count > FIRST_INDEX and files[-1].end_phy_offset >= phy_offset:
                f = files.pop()
                begin = f.begin_phy_offset
                self.rebuild_from = begin if self.rebuild_from is None else min(self.rebuild_from, begin)
                log.warning(
                    "destroying index file %s: it indexes offset %d, past the CommitLog end %d",
                    f.path,
                    f.end_phy_offset,
                    phy_offset,
                )
                f.destroy()
                destroyed += 1
            self._files = files
        return destroyed

    def _new_file_path(self) -> str:
        name = time_millis_to_file_name(self._clock_ms())
        files = self._files
        if files and name <= files[-1].name:
            name = _next_file_name(files[-1].name)
        while os.path.exists(os.path.join(self.directory, name)):
            name = _next_file_name(name)
        return os.path.join(self.directory, name)

    def _writable_file(self) -> IndexFile:
        """The newest file if it has room, else a new one that starts where the newest ended."""
        files = self._files
        previous: IndexFile | None = None
        if files:
            last = files[-1]
            if not last.is_write_full():
                return last
            previous = last
        os.makedirs(self.directory, exist_ok=True)
        path = self._new_file_path()
        end_phy_offset = previous.end_phy_offset if previous is not None else 0
        end_timestamp = previous.end_timestamp if previous is not None else 0
        try:
            new = IndexFile(path, self.hash_slot_num, self.index_num, end_phy_offset, end_timestamp)
        except DiskFull:
            raise
        except OSError as exc:
            raise SegmentAllocationError(f"cannot create index file {path}: {exc}") from exc
        self._files = [*files, new]
        log.info("created index file %s (starts at offset %d, time %d)", path, end_phy_offset, end_timestamp)
        if previous is not None:
            self._flush_file(previous)
        return new

    def _flush_file(self, f: IndexFile) -> None:
        """Flush ``f``; a full file then becomes the checkpoint's ``index_msg_timestamp``."""
        index_msg_timestamp = f.end_timestamp if f.is_write_full() else 0
        f.flush()
        if index_msg_timestamp > 0:
            self.checkpoint.index_msg_timestamp = index_msg_timestamp
            self.checkpoint.flush()

    # -- write ------------------------------------------------------------------------------
    def build_index(self, req: DispatchRequest) -> None:
        """Index ``topic#UNIQ_KEY`` and ``topic#key`` for every key of one dispatched message.

        Skipped: messages below the newest file's ``endPhyOffset`` (already indexed) and
        ROLLBACK transaction records. Raises :class:`SegmentAllocationError` when a new file
        cannot be created.
        """
        with self._lock:
            f = self._writable_file()
            if req.commit_log_offset < f.end_phy_offset:
                return
            if req.sys_flag & TRANSACTION_MASK == TRANSACTION_ROLLBACK_TYPE:
                return
            if req.uniq_key is not None:
                f = self._put_key(f, req, build_key(req.topic, req.uniq_key))
            if req.keys:
                for key in req.keys.split(KEY_SEPARATOR):
                    if key:
                        f = self._put_key(f, req, build_key(req.topic, key))

    def build_index_batch(self, reqs: list[DispatchRequest]) -> None:
        """:meth:`build_index` for the requests of one dispatch window, hashing all keys at once."""
        if isinstance(reqs, DispatchBatch):
            self._build_index_columns(reqs)
            return
        with self._lock:
            f = self._writable_file()
            floor = f.end_phy_offset
            owners: list[DispatchRequest] = []
            made = reqs.index_entries if isinstance(reqs, RequestList) else None
            taken = None
            if made is not None and _index_entries_of is not None:
                # the loop below, compiled (None: entries it leaves to that loop)
                taken = _index_entries_of(reqs, made[0], made[1], floor)
            if taken is not None:
                hashes, phys, stamps = taken
                if not hashes:
                    return
            elif made is not None:
                # the compiled scan hashed the keys already (same entries, same order)
                hashes = []
                for row, key_hash in zip(*made, strict=True):
                    req = reqs[row]
                    if (
                        req.commit_log_offset >= floor
                        and req.sys_flag & TRANSACTION_MASK != TRANSACTION_ROLLBACK_TYPE
                    ):
                        hashes.append(key_hash)
                        owners.append(req)
                if not hashes:
                    return
            else:
                keys: list[str] = []
                for req in reqs:
                    if (
                        req.commit_log_offset < floor
                        or req.sys_flag & TRANSACTION_MASK == TRANSACTION_ROLLBACK_TYPE
                    ):
                        continue
                    if req.uniq_key is not None:
                        keys.append(f"{req.topic}#{req.uniq_key}")
                        owners.append(req)
                    if req.keys:
                        for key in req.keys.split(KEY_SEPARATOR):
                            if key:
                                keys.append(f"{req.topic}#{key}")
                                owners.append(req)
                if not keys:
                    return
                hashes = [h if h >= 0 else (0 if h == INT_MIN else -h) for h in java_string_hashes(keys)]
            if taken is None:
                phys = [r.commit_log_offset for r in owners]
                stamps = [r.store_timestamp for r in owners]
            if floor > 0 and phys[0] == floor:
                # The message at the end offset is re-dispatched after a restart: keep only the
                # keys that are not indexed yet (RocketMQ would index all of them again).
                keep = [
                    i
                    for i in range(len(hashes))
                    if phys[i] != floor or not self._already_indexed(hashes[i], floor)
                ]
                hashes = [hashes[i] for i in keep]
                phys = [phys[i] for i in keep]
                stamps = [stamps[i] for i in keep]
            done = 0
            put_file = _index_put_file
            while done < len(hashes):
                rest = (hashes, phys, stamps) if not done else (hashes[done:], phys[done:], stamps[done:])
                wrote = None if put_file is None else put_file(f, *rest)
                done += f.put_keys(*rest) if wrote is None else wrote
                if done < len(hashes):
                    f = self._writable_file()

    def _build_index_columns(self, batch: DispatchBatch) -> None:
        """:meth:`build_index_batch` on the columns of a window: key hashes come from
        :meth:`DispatchBatch.index_entries` and entries are written by
        :meth:`IndexFile.put_key_arrays`; the same entries in the same order."""
        with self._lock:
            f = self._writable_file()
            floor = f.end_phy_offset
            rows, hashes = batch.index_entries()
            if not len(rows):
                return
            record_phys = batch.commit_log_offset
            wanted = (record_phys >= floor) & (
                (batch.columns.sys_flag & TRANSACTION_MASK) != TRANSACTION_ROLLBACK_TYPE
            )
            keep = wanted[rows]
            rows = rows[keep]
            hashes = hashes[keep]
            if not len(rows):
                return
            phys = record_phys[rows]
            stamps = batch.columns.store_ts[rows]
            if floor > 0 and int(phys[0]) == floor:
                # see build_index_batch: keys of the message at the end offset may be indexed
                redo = np.ones(len(rows), dtype=np.bool_)
                for i in np.flatnonzero(phys == floor).tolist():
                    redo[i] = not self._already_indexed(int(hashes[i]), floor)
                hashes, phys, stamps = hashes[redo], phys[redo], stamps[redo]
            done = 0
            total = len(hashes)
            if _index_put_keys is not None:  # the compiled loop beats the bulk chaining
                hash_list, phys_list, stamp_list = hashes.tolist(), phys.tolist(), stamps.tolist()
                while done < total:
                    done += f.put_keys(hash_list[done:], phys_list[done:], stamp_list[done:])
                    if done < total:
                        f = self._writable_file()
                return
            while done < total:
                done += f.put_key_arrays(hashes[done:], phys[done:], stamps[done:])
                if done < total:
                    f = self._writable_file()

    def _already_indexed(self, key_hash: int, phy_offset: int) -> bool:
        """Whether the newest two files hold an entry for this key hash and offset: a message
        re-dispatched at the index's end offset may have some of its keys indexed already."""
        return any(f.has_entry(key_hash, phy_offset) for f in self._files[-2:])

    def _put_key(self, f: IndexFile, req: DispatchRequest, index_key: str) -> IndexFile:
        while not f.put_key(index_key, req.commit_log_offset, req.store_timestamp):
            f = self._writable_file()
        return f

    # -- read -------------------------------------------------------------------------------
    def query_offset(
        self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int
    ) -> QueryOffsetResult:
        """Offsets of messages indexed under ``topic#key`` with a time in ``[begin_ms, end_ms]``.

        Files are searched newest first, and entries within a file newest first, so the result
        is in that order (not sorted). At most ``min(max_num, max_msgs_num_batch)`` offsets; the
        entries are matched by hash only, so callers must check the real key.
        """
        max_num = min(max_num, self.config.max_msgs_num_batch)
        files = self._files
        found: list[int] = []
        last_timestamp = last_phy_offset = 0
        if files:
            last_timestamp = files[-1].end_timestamp
            last_phy_offset = files[-1].end_phy_offset
        index_key = build_key(topic, key)
        for f in reversed(files):
            if f.is_time_matched(begin_ms, end_ms):
                found.extend(f.select_phy_offsets(index_key, max_num - len(found), begin_ms, end_ms))
            if f.begin_timestamp < begin_ms or len(found) >= max_num:
                break
        return QueryOffsetResult(found, last_timestamp, last_phy_offset)

    # -- retention and lifecycle ------------------------------------------------------------
    def delete_expired_file(self, commitlog_min_offset: int) -> int:
        """Delete the oldest files (never the newest) whose ``endPhyOffset`` is below the CommitLog's
        minimum offset; returns how many were deleted."""
        with self._lock:
            files = self._files
            expired: list[IndexFile] = []
            for f in files[:-1]:
                if f.end_phy_offset >= commitlog_min_offset:
                    break
                expired.append(f)
            if not expired:
                return 0
            self._files = files[len(expired) :]
        for f in expired:
            log.info("deleting expired index file %r (CommitLog starts at %d)", f, commitlog_min_offset)
            f.destroy()
        return len(expired)

    def flush(self) -> None:
        """Flush files with unflushed entries. A newest file that is full also advances the
        checkpoint (RocketMQ waits for the next roll to do that)."""
        files = self._files
        for f in files[:-1]:
            f.flush()
        with self._lock:  # the writer also sets the checkpoint when it rolls
            files = self._files
            if files and files[-1].dirty:
                self._flush_file(files[-1])

    def shutdown(self) -> None:
        with self._lock:
            files, self._files = self._files, []
        for f in files:
            f.shutdown()
        log.info("index service shut down (%d files)", len(files))

    def destroy(self) -> None:
        with self._lock:
            files, self._files = self._files, []
        for f in files:
            f.destroy()
        log.info("index service destroyed (%d files)", len(files))


__all__ = [
    "INDEX_ENTRY_SIZE",
    "INDEX_HEADER_SIZE",
    "IndexCheckpoint",
    "IndexFile",
    "IndexService",
    "QueryOffsetResult",
    "build_key",
    "index_file_size",
    "index_key_hash",
    "time_millis_to_file_name",
]
