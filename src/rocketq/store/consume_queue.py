"""ConsumeQueue: the per-(topic, queue id) index of CommitLog records, in RocketMQ's file format.

One idea: the ConsumeQueue file format (writing, reading, recovering and trimming its units).

Files live at ``<root>/consumequeue/<topic>/<queueId>/<20-digit start byte offset>``; each is
``file_size`` bytes (300 000 units = 6 000 000 B by default, always a multiple of 20) and holds
fixed 20-byte units, with no header and no end-of-file padding (spec/store-format.md §5)::

    offset  field                                 type (big-endian)
    0       CommitLog physical offset             i64
    8       record size (TOTALSIZE)               i32
    12      tags code (Java String.hashCode, or   i64
            the delivery time for delayed topics)

The unit with logical queue offset ``n`` sits at byte ``n * 20`` of the concatenated files, so
the file holding it is named ``offset_to_file_name(n * 20 - n * 20 % file_size)``: with the
default size the second file is ``00000000000006000000``.

Special units:

* **invalid / end unit**: ``offset < 0 or size <= 0`` (never-written zeros). Recovery stops at
  the first one.
* **pre-blank filler** ``(0, 0x7FFFFFFF, 0)``: when the first file of a queue is created for a
  queue offset ``n != 0`` (the earlier units were deleted, or the queue is re-created on a broker
  that already assigned offsets), the slots before ``n`` in that file are filled with these so
  that slot index and queue offset agree.

Write rules (``put_message_position_info``, RocketMQ ``putMessagePositionInfo``), in order:

1. ``offset + size <= max_physic_offset``: already built (re-dispatch after recovery) → success,
   nothing written;
2. the last file, or a new one (the first at ``expect - expect % file_size`` with
   ``expect = cq_offset * 20``, later ones at ``last + file_size``);
3. first file ever created in this queue, still empty, ``cq_offset != 0``: pre-blank fillers up to
   ``expect`` and ``min_logic_offset = expect``;
4. ``cq_offset != 0`` and ``expect < current write position``: duplicate → success, nothing
   written; ``expect > current``: a hole, logged as an error, and the unit is still appended at
   the current position (RocketMQ does not pad holes);
5. ``max_physic_offset = offset + size`` and append the unit.

Invariants:

* units are appended only by the single dispatcher thread; a unit's 20 bytes are in place before
  the file's wrote position moves past them, so readers (which never look past the wrote
  position) see whole units only;
* ``min_offset_in_queue <= max_offset_in_queue``; ``max_offset_in_queue`` is the next offset to
  write, ``(last.file_from_offset + last.wrote_position) / 20``;
* real units (not fillers) have non-decreasing physical offsets, because dispatch follows
  CommitLog order; fillers only precede the first real unit. Binary searches rely on this.

Recovery (``recover``) scans the last three files from their start and stops at the first invalid
unit; everything after it is truncated (later files deleted, stale bytes zeroed).
``truncate_dirty_logic_files`` drops units that point at or after a CommitLog offset that
recovery cut off.

Where this goes beyond RocketMQ (each is marked ``Beyond RocketMQ`` where it happens):

* filler units never set ``max_physic_offset`` (RocketMQ would set it to ``0x7FFFFFFF`` and then
  skip re-dispatched messages below 2 GiB), and never become the minimum offset;
* ``truncate_dirty_logic_files`` deletes an empty last file instead of keeping its zero first
  unit as if it were data, and zeroes the bytes it cuts off;
* ``load`` starts the minimum offset at the first file's first unit, not at 0;
* ``correct_min_offset`` searches the whole queue, not only the first file;
* ``get_units`` reads across file boundaries (RocketMQ stops at a file end).
"""

from __future__ import annotations

import itertools
import logging
import os
import struct
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Final, NamedTuple

import numpy as np
import numpy.typing as npt

from rocketq import speedups as _speedups
from rocketq.errors import StoreError
from rocketq.store.mapped_file import MappedFile, MappedFileQueue, offset_to_file_name, reserve_file
from rocketq.store.record_scan import DispatchBatch

if TYPE_CHECKING:
    from rocketq.config import StoreConfig
    from rocketq.store.checkpoint import StoreCheckpoint
    from rocketq.store.record_scan import DispatchRequest

log = logging.getLogger(__name__)

#: ``CQ_STORE_UNIT_SIZE``: bytes per unit.
CQ_UNIT_SIZE: Final = 20
#: Size field of a pre-blank filler unit (``Integer.MAX_VALUE``).
FILLER_SIZE: Final = 0x7FFFFFFF
#: A unit as returned by :meth:`ConsumeQueue.get_units` (native byte order, packed, 20 bytes).
CQ_UNIT_DTYPE: Final = np.dtype([("offset", "=i8"), ("size", "=i4"), ("tags", "=i8")])
#: The same unit as stored on disk.
CQ_DISK_DTYPE: Final = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags", ">i8")])

_UNIT = struct.Struct(">qiq")
_Unit = tuple[int, int, int, int]  # (offset, size, tags code, queue offset)
_QueueKey = tuple[str, int]  # (topic, queue id)
#: The run loop of :meth:`ConsumeQueue.put_units` compiled (``rocketq._speedups.cq_pack_run``),
#: or None on the pure path; tests set it to None to run the pure loop beside it.
_cq_pack_run: Callable[..., tuple[bytes, int, int] | None] | None = getattr(
    _speedups.COMPILED, "cq_pack_run", None
)
#: The first step of :meth:`ConsumeQueue.put_units` compiled (``rocketq._speedups.cq_put_run``:
#: the run written straight into the queue's last file), or None; tests set it to None.
_cq_put_run: Callable[[ConsumeQueue, list[_Unit]], int | None] | None = getattr(
    _speedups.COMPILED, "cq_put_run", None
)
#: The grouping loop of :meth:`ConsumeQueueStore._put_batch` compiled
#: (``rocketq._speedups.cq_group_requests``), or None on the pure path; tests set it to None to
#: run the pure loop beside it.
_cq_group_requests: (
    Callable[[list[DispatchRequest]], tuple[dict[_QueueKey, list[_Unit]], int] | None] | None
) = getattr(_speedups.COMPILED, "cq_group_requests", None)
_FILLER = _UNIT.pack(0, FILLER_SIZE, 0)
_TRANSACTION_MASK = 0xC
#: NOT_TYPE and COMMIT records go to the ConsumeQueue; PREPARED and ROLLBACK do not.
_QUEUED_TRANSACTION_TYPES = frozenset((0x0, 0x8))

CqUnits = npt.NDArray[np.void]


class CqUnit(NamedTuple):
    """One ConsumeQueue unit."""

    offset: int
    size: int
    tags: int

    @property
    def is_filler(self) -> bool:
        return self.offset == 0 and self.size == FILLER_SIZE and self.tags == 0


def _empty_units() -> CqUnits:
    return np.empty(0, dtype=CQ_UNIT_DTYPE)


def _decode(data: bytes) -> CqUnits:
    """Big-endian unit bytes → native structured array (one vectorised conversion)."""
    return np.frombuffer(data, dtype=CQ_DISK_DTYPE).astype(CQ_UNIT_DTYPE)


def _valid_mask(units: CqUnits) -> npt.NDArray[np.bool_]:
    return (units["offset"] >= 0) & (units["size"] > 0)


def _filler_mask(units: CqUnits) -> npt.NDArray[np.bool_]:
    return (  # type: ignore[no-any-return]
        (units["offset"] == 0) & (units["size"] == FILLER_SIZE) & (units["tags"] == 0)
    )


def _valid_prefix(units: CqUnits) -> int:
    """Number of leading valid units (the index of the first invalid one)."""
    bad = np.flatnonzero(~_valid_mask(units))
    return int(bad[0]) if bad.size else len(units)


def _last_real_end(units: CqUnits) -> int | None:
    """``offset + size`` of the last unit that is not a filler, or None."""
    real = np.flatnonzero(~_filler_mask(units))
    if not real.size:
        return None
    unit = units[int(real[-1])]
    return int(unit["offset"]) + int(unit["size"])


def _read_raw(mf: MappedFile, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of a file regardless of its positions (recovery and truncation).

    A closed file raises rather than reading as empty, which would make the caller cut data.
    """
    if not mf.hold():
        raise StoreError(f"ConsumeQueue file {mf.file_name} is closed; cannot scan it")
    try:
        return mf.mm[start:end]
    finally:
        mf.release()


class ConsumeQueue:
    """The ConsumeQueue of one (topic, queue id)."""

    def __init__(self, topic: str, queue_id: int, store_path_root_dir: str, file_size: int) -> None:
        if file_size <= 0 or file_size % CQ_UNIT_SIZE:
            raise ValueError(f"ConsumeQueue file size {file_size} B is not a positive multiple of 20 B")
        self.topic = topic
        self.queue_id = queue_id
        self.file_size = file_size
        self.units_per_file = file_size // CQ_UNIT_SIZE
        self.directory = os.path.join(store_path_root_dir, "consumequeue", topic, str(queue_id))
        self.queue = MappedFileQueue(self.directory, file_size)
        self._max_physic_offset = -1
        self._min_logic_offset = 0
        #: Why recovery found this queue damaged (None: it did not); the store rebuilds it.
        self.damaged: str | None = None

    def __repr__(self) -> str:
        return (
            f"ConsumeQueue({self.topic!r}, {self.queue_id}, min={self.min_offset_in_queue}, "
            f"max={self.max_offset_in_queue}, max_physic={self._max_physic_offset})"
        )

    # -- lifecycle ----------------------------------------------------------------------------
    def load(self) -> None:
        """Map the files on disk (each must be ``file_size`` bytes, else CorruptFileError)."""
        self.queue.load()
        first = self.queue.first()
        # Beyond RocketMQ: units before the first file cannot exist, so start the minimum there.
        self._min_logic_offset = first.file_from_offset if first is not None else 0
        log.debug("loaded %s: %d files", self.directory, len(self.queue.files))

    def recover(self) -> None:
        """Find the end of valid units in the last three files and truncate everything after it;
        :attr:`damaged` says why when the cut was not at the end of written units."""
        files = self.queue.files
        if not files:
            return
        index = max(0, len(files) - 3)
        process = files[index].file_from_offset
        max_physic = -1
        for i, mf in enumerate(files[index:], index):
            units = _decode(_read_raw(mf, 0, self.file_size))
            kept = _valid_prefix(units)
            end = _last_real_end(units[:kept])  # Beyond RocketMQ: fillers do not count
            if end is not None:
                max_physic = end
            process = mf.file_from_offset + kept * CQ_UNIT_SIZE
            if kept < self.units_per_file:
                # Beyond RocketMQ: units after the first invalid one (or later files) mean the
                # queue was damaged, not torn: the store rebuilds it from the CommitLog.
                rest = units[kept:]
                if bool((rest["offset"] != 0).any() or (rest["size"] != 0).any()) or i + 1 < len(files):
                    at = process // CQ_UNIT_SIZE
                    self.damaged = f"invalid unit at queue offset {at} with units after it"
                break
        self._max_physic_offset = max_physic
        old_end = self.queue.max_wrote_position
        self.queue.flushed_where = process
        self.queue.committed_where = process
        self.queue.truncate_dirty_files(process)
        self._min_logic_offset = min(self._min_logic_offset, process)
        if old_end != process:
            log.info(
                "ConsumeQueue %s-%d recovered: valid units end at queue offset %d, %d B cut",
                self.topic,
                self.queue_id,
                process // CQ_UNIT_SIZE,
                old_end - process,
            )

    def flush(self, least_pages: int) -> bool:
        """Flush dirty pages (all when ``least_pages`` is 0). True when nothing moved."""
        return self.queue.flush(least_pages)

    def shutdown(self) -> None:
        self.queue.shutdown()

    def destroy(self) -> None:
        """Delete every file of this queue (and its directories, when they become empty)."""
        self.queue.destroy()
        self._max_physic_offset = -1
        self._min_logic_offset = 0
        for path in (self.directory, os.path.dirname(self.directory)):
            try:
                os.rmdir(path)
            except OSError:
                break

    # -- offsets ------------------------------------------------------------------------------
    @property
    def max_physic_offset(self) -> int:
        """End (``offset + size``) of the last CommitLog record indexed here, or -1."""
        return self._max_physic_offset

    @property
    def min_logic_offset(self) -> int:
        """Byte offset of the first live unit (``min_offset_in_queue * 20``)."""
        return self._min_logic_offset

    @property
    def min_offset_in_queue(self) -> int:
        return self._min_logic_offset // CQ_UNIT_SIZE

    @property
    def max_offset_in_queue(self) -> int:
        """The next queue offset to write (one past the last unit)."""
        return self.queue.max_offset // CQ_UNIT_SIZE

    def roll_next_file(self, index: int) -> int:
        """The first queue offset of the file after the one holding ``index``."""
        return index + self.units_per_file - index % self.units_per_file

    # -- write --------------------------------------------------------------------------------
    def put_message_position_info(self, offset: int, size: int, tags_code: int, cq_offset: int) -> bool:
        """Append the unit for the record at ``offset`` with queue offset ``cq_offset``.

        RocketMQ's rules (module docstring): already-built and duplicate units are skipped with
        success; a hole is logged and the unit appended at the current position.
        """
        if offset + size <= self._max_physic_offset:
            log.debug(
                "%s-%d: unit for physical offset %d already built (max %d)",
                self.topic,
                self.queue_id,
                offset,
                self._max_physic_offset,
            )
            return True
        if offset < 0 or size <= 0:
            log.error(
                "%s-%d: refusing invalid unit (offset %d, size %d)", self.topic, self.queue_id, offset, size
            )
            return False
        expect = cq_offset * CQ_UNIT_SIZE
        mf = self.queue.get_last_mapped_file(expect)
        if mf is None:
            log.error("%s-%d: no ConsumeQueue file for queue offset %d", self.topic, self.queue_id, cq_offset)
            return False
        if mf.first_create_in_queue and cq_offset != 0 and mf.wrote_position == 0:
            self._min_logic_offset = expect
            self.queue.flushed_where = expect
            self.queue.committed_where = expect
            fillers = (expect - mf.file_from_offset) // CQ_UNIT_SIZE
            if fillers:
                mf.append(_FILLER * fillers)
            log.info(
                "%s-%d: queue starts at offset %d; %d pre-blank units written",
                self.topic,
                self.queue_id,
                cq_offset,
                fillers,
            )
        if cq_offset != 0:
            current = mf.file_from_offset + mf.wrote_position
            if expect < current:
                log.warning(
                    "%s-%d: queue offset %d already written (next is %d); skipped",
                    self.topic,
                    self.queue_id,
                    cq_offset,
                    current // CQ_UNIT_SIZE,
                )
                return True
            if expect != current:
                log.error(
                    "%s-%d: logic queue order wrong: expected queue offset %d, writing at %d "
                    "(physical offset %d)",
                    self.topic,
                    self.queue_id,
                    cq_offset,
                    current // CQ_UNIT_SIZE,
                    offset,
                )
        self._max_physic_offset = offset + size
        return mf.append(_UNIT.pack(offset, size, tags_code))

    def put_units(self, units: list[tuple[int, int, int, int]]) -> bool:
        """:meth:`put_message_position_info` for many ``(offset, size, tags, cq_offset)`` in order.

        Units that land exactly at the write position, after ``max_physic_offset`` and inside the
        current file are packed together and appended with one copy; anything else (first unit of
        a queue, duplicates, holes, file ends) takes the one-by-one path with its full rules.
        """
        ok = True
        i = 0
        n = len(units)
        pack = _UNIT.pack_into
        pack_run = _cq_pack_run
        while i < n:
            last = self.queue.last()
            if last is None or last.is_full():
                ok = self.put_message_position_info(*units[i]) and ok
                i += 1
                continue
            current = last.file_from_offset + last.wrote_position
            room = (last.file_size - last.wrote_position) // CQ_UNIT_SIZE
            max_physic = self._max_physic_offset
            run = None if pack_run is None else pack_run(units, i, room, current, max_physic)
            if run is not None:  # the loop below, compiled (None: a run it leaves to that loop)
                packed, count, max_physic = run
            else:
                buf = bytearray(min(room, n - i) * CQ_UNIT_SIZE)
                count = 0
                while i + count < n and count < room:
                    offset, size, tags, cq_offset = units[i + count]
                    if (
                        cq_offset * CQ_UNIT_SIZE != current + count * CQ_UNIT_SIZE
                        or offset + size <= max_physic
                    ):
                        break
                    if offset < 0 or size <= 0 or cq_offset == 0:
                        break
                    pack(buf, count * CQ_UNIT_SIZE, offset, size, tags)
                    max_physic = offset + size
                    count += 1
                packed = bytes(buf[: count * CQ_UNIT_SIZE])
            if count == 0:
                ok = self.put_message_position_info(*units[i]) and ok
                i += 1
                continue
            self._max_physic_offset = max_physic
            ok = last.append(packed) and ok
            i += count
        return ok

    def fill_from(self, units: list[tuple[int, int, int, int]]) -> int:
        """Write ``(offset, size, tags, cq_offset)`` units, in queue-offset order and each queue
        offset once, into this empty queue, each at its own queue offset: a queue offset the
        CommitLog no longer holds (a quarantined record) gets a filler unit, which reads skip.
        Returns the number of such holes."""
        holes = 0
        for offset, size, tags, cq_offset in units:
            if self.queue.files and self._max_physic_offset >= 0:
                while self.max_offset_in_queue < cq_offset:
                    mf = self.queue.get_last_mapped_file(self.max_offset_in_queue * CQ_UNIT_SIZE)
                    if mf is None or not mf.append(_FILLER):
                        raise StoreError(f"{self.topic}-{self.queue_id}: cannot write a filler unit")
                    holes += 1
            self.put_message_position_info(offset, size, tags, cq_offset)
        return holes

    def put_unit_arrays(
        self,
        offsets: npt.NDArray[np.int64],
        sizes: npt.NDArray[np.int64],
        tags: npt.NDArray[np.int64],
        cq_offsets: npt.NDArray[np.int64],
    ) -> bool:
        """:meth:`put_units` for units given as arrays (one dispatch window of this queue).

        Units already built (``offset + size <= max_physic_offset``, rule 1, which comes before
        every other rule) are skipped in bulk. Then the longest run that lands exactly at the write
        position, after ``max_physic_offset``, inside the current file, with no queue-offset 0
        unit, is checked in bulk and appended as one ``tobytes()`` copy. Whatever breaks a run
        (the first unit of a queue, a file end, a duplicate or a hole) takes the one-by-one path
        with its full rules; after a few of those the rest goes to :meth:`put_units`.
        """
        ok = True
        n = len(offsets)
        ends = offsets + sizes
        built = int(np.searchsorted(np.maximum.accumulate(ends) > self._max_physic_offset, True))
        if built:
            log.debug(
                "%s-%d: %d units up to physical offset %d already built (max %d)",
                self.topic,
                self.queue_id,
                built,
                int(offsets[built - 1]),
                self._max_physic_offset,
            )
        i = built
        scalar_steps = 0
        while i < n:
            last = self.queue.last()
            if last is not None and not last.is_full():
                current = last.file_from_offset + last.wrote_position
                room = (last.file_size - last.wrote_position) // CQ_UNIT_SIZE
                j = min(n, i + room)
                run_ends = ends[i:j]
                prior = np.empty(j - i, dtype=np.int64)
                prior[0] = self._max_physic_offset
                if j - i > 1:
                    np.maximum.accumulate(run_ends[:-1], out=prior[1:])
                    np.maximum(prior, self._max_physic_offset, out=prior)
                cq = cq_offsets[i:j]
                fits = (
                    (cq * CQ_UNIT_SIZE == current + np.arange(j - i, dtype=np.int64) * CQ_UNIT_SIZE)
                    & (run_ends > prior)
                    & (offsets[i:j] >= 0)
                    & (sizes[i:j] > 0)
                    & (cq != 0)
                )
                bad = np.flatnonzero(~fits)
                count = int(bad[0]) if bad.size else j - i
                if count:
                    units = np.empty(count, dtype=CQ_DISK_DTYPE)
                    units["offset"] = offsets[i : i + count]
                    units["size"] = sizes[i : i + count]
                    units["tags"] = tags[i : i + count]
                    self._max_physic_offset = int(run_ends[count - 1])
                    ok = last.append(units.tobytes()) and ok
                    i += count
                    continue
            if scalar_steps >= 8:  # many irregular units: the list path handles them in one pass
                rest = zip(
                    offsets[i:].tolist(),
                    sizes[i:].tolist(),
                    tags[i:].tolist(),
                    cq_offsets[i:].tolist(),
                    strict=True,
                )
                return self.put_units(list(rest)) and ok
            ok = (
                self.put_message_position_info(
                    int(offsets[i]), int(sizes[i]), int(tags[i]), int(cq_offsets[i])
                )
                and ok
            )
            i += 1
            scalar_steps += 1
        return ok

    # -- read ---------------------------------------------------------------------------------
    def get_units(self, start_index: int, max_count: int) -> CqUnits:
        """Up to ``max_count`` units from queue offset ``start_index``, as a structured array.

        Fields ``offset`` (int64), ``size`` (int32), ``tags`` (int64) in native byte order. Only
        units below the write position are returned; the result is empty when ``start_index`` is
        below the minimum or at/after the maximum offset. Each file is read and converted in one
        call. Beyond RocketMQ: a read that reaches the end of a file continues in the next one.
        """
        if max_count <= 0 or start_index < self.min_offset_in_queue:
            return _empty_units()
        chunks: list[CqUnits] = []
        position = start_index * CQ_UNIT_SIZE
        remaining = max_count
        while remaining > 0:
            mf = self.queue.find_by_offset(position)
            if mf is None:
                break
            pos = position - mf.file_from_offset
            end = min(mf.read_position, pos + remaining * CQ_UNIT_SIZE)
            if end <= pos:
                break
            data = mf.read(pos, end - pos)
            if data is None:
                break
            units = _decode(data)
            chunks.append(units)
            remaining -= len(units)
            position += end - pos
            if end < self.file_size:
                break
        if not chunks:
            return _empty_units()
        return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)

    def get_unit(self, index: int) -> CqUnit | None:
        """The unit at queue offset ``index``, or None outside ``[min, max)``."""
        if index < self.min_offset_in_queue:
            return None
        position = index * CQ_UNIT_SIZE
        mf = self.queue.find_by_offset(position)
        if mf is None:
            return None
        data = mf.read(position - mf.file_from_offset, CQ_UNIT_SIZE)
        if data is None:
            return None
        return CqUnit(*_UNIT.unpack(data))

    def get_offset_in_queue_by_time(
        self, timestamp_ms: int, store_time_of: Callable[[int, int], int | None]
    ) -> int:
        """The first queue offset whose message was stored at or after ``timestamp_ms``.

        ``store_time_of(physical_offset, size)`` returns the STORETIMESTAMP of that CommitLog
        record, or None when it is gone; such units (and fillers) count as earlier than any
        timestamp. All units earlier → the max offset; all later → the min offset. Binary search:
        O(log n) unit reads and ``store_time_of`` calls.
        """
        low = self.min_offset_in_queue
        high = self.max_offset_in_queue
        if high <= low:
            return high
        while low < high:
            mid = (low + high) // 2
            unit = self.get_unit(mid)
            store_time = None
            if unit is not None and not unit.is_filler:
                store_time = store_time_of(unit.offset, unit.size)
            if store_time is not None and store_time >= timestamp_ms:
                high = mid
            else:
                low = mid + 1
        return low

    def last_record_start_at_or_before(self, phy_offset: int) -> int | None:
        """The largest CommitLog offset of a real unit that is ``<= phy_offset`` (a record start),
        by binary search over the queue; None when every unit lies after it."""
        low = self.min_offset_in_queue
        high = self.max_offset_in_queue - 1
        best: int | None = None
        while low <= high:
            mid = (low + high) // 2
            unit = self.get_unit(mid)
            if unit is None or unit.is_filler:
                low = mid + 1
                continue
            if unit.offset <= phy_offset:
                best = unit.offset
                low = mid + 1
            else:
                high = mid - 1
        return best

    # -- shrinking ----------------------------------------------------------------------------
    def truncate_dirty_logic_files(self, phy_offset: int) -> None:
        """Drop every unit pointing at or after CommitLog offset ``phy_offset`` (§5.5).

        From the last file backwards: a file whose first unit is at/after ``phy_offset`` is
        deleted; in the first file that survives, units are kept while valid and below
        ``phy_offset``, and the rest is cut. ``max_physic_offset`` becomes the end of the last
        kept unit (``phy_offset`` when no real unit is left, as RocketMQ's initial assignment).
        """
        self._max_physic_offset = phy_offset
        while True:
            mf = self.queue.last()
            if mf is None:
                break
            units = _decode(_read_raw(mf, 0, mf.read_position))
            # Beyond RocketMQ: an empty (all-zero) last file is deleted, not kept with a zero unit.
            if not len(units) or not _valid_mask(units[:1])[0] or int(units[0]["offset"]) >= phy_offset:
                log.info(
                    "%s-%d: deleting dirty ConsumeQueue file %s", self.topic, self.queue_id, mf.file_name
                )
                self.queue.delete_last_file()
                continue
            keep_mask = _valid_mask(units) & (units["offset"] < phy_offset)
            bad = np.flatnonzero(~keep_mask)
            kept = int(bad[0]) if bad.size else len(units)
            end = _last_real_end(units[:kept])
            if end is not None:
                self._max_physic_offset = end
            cut = mf.file_from_offset + kept * CQ_UNIT_SIZE
            if kept < len(units):
                log.info(
                    "%s-%d: truncating ConsumeQueue at queue offset %d (CommitLog offset %d)",
                    self.topic,
                    self.queue_id,
                    cut // CQ_UNIT_SIZE,
                    phy_offset,
                )
            self.queue.truncate_dirty_files(cut)
            break
        end_offset = self.queue.max_offset
        self.queue.flushed_where = min(self.queue.flushed_where, end_offset)
        self.queue.committed_where = min(self.queue.committed_where, end_offset)
        self._min_logic_offset = min(self._min_logic_offset, end_offset)

    def correct_min_offset(self, commitlog_min_offset: int) -> None:
        """Move the minimum offset to the first unit whose record is still in the CommitLog.

        If even the last unit points below ``commitlog_min_offset`` the queue holds no live unit
        and the minimum becomes the maximum. The minimum never moves backwards. Beyond RocketMQ:
        fillers never qualify, and the binary search covers the whole queue, not only the first
        file (real units are sorted by physical offset).
        """
        if not self.queue.files:
            return
        end = self.queue.max_offset
        if self._min_logic_offset >= end:
            return
        last_index = end // CQ_UNIT_SIZE - 1

        def live(index: int) -> bool:
            unit = self.get_unit(index)
            return unit is not None and not unit.is_filler and unit.offset >= commitlog_min_offset

        if not live(last_index):
            if self._min_logic_offset != end:
                log.info(
                    "%s-%d: no unit points at or after CommitLog offset %d; min offset set to %d",
                    self.topic,
                    self.queue_id,
                    commitlog_min_offset,
                    end // CQ_UNIT_SIZE,
                )
            self._min_logic_offset = end
            return
        first = self.queue.first()
        first_from = first.file_from_offset if first is not None else 0
        low = max(self._min_logic_offset, first_from) // CQ_UNIT_SIZE
        high = last_index
        while low < high:
            mid = (low + high) // 2
            if live(mid):
                high = mid
            else:
                low = mid + 1
        new_min = low * CQ_UNIT_SIZE
        if new_min != self._min_logic_offset:
            log.debug(
                "%s-%d: min offset %d -> %d",
                self.topic,
                self.queue_id,
                self._min_logic_offset // CQ_UNIT_SIZE,
                low,
            )
        self._min_logic_offset = max(self._min_logic_offset, new_min)

    def delete_expired_file(self, commitlog_min_offset: int) -> int:
        """Delete leading non-last files whose last unit points below ``commitlog_min_offset``,
        then correct the minimum offset. Returns the number of files deleted."""
        last_pos = self.file_size - CQ_UNIT_SIZE

        def expired(mf: MappedFile) -> bool:
            data = mf.read(last_pos, CQ_UNIT_SIZE)
            if data is None:
                return not mf.available
            physical, _size, _tags = _UNIT.unpack(data)
            return bool(physical < commitlog_min_offset)

        count = self.queue.delete_expired_by_predicate(expired)
        self.correct_min_offset(commitlog_min_offset)
        return count


class ConsumeQueueStore:
    """Every ConsumeQueue of the store, keyed by topic and queue id (RocketMQ's consumeQueueTable).

    The table grows under a lock (``find_or_create``); reads take a snapshot. The optional
    ``checkpoint`` gets ``logics_msg_timestamp`` updated on every successful ``put``, as
    RocketMQ's ``putMessagePositionInfoWrapper`` does.
    """

    def __init__(self, config: StoreConfig, *, checkpoint: StoreCheckpoint | None = None) -> None:
        self.config = config
        self.root_dir = config.store_path_root_dir
        self.directory = os.path.join(config.store_path_root_dir, "consumequeue")
        self.file_size = config.consume_queue_file_size
        self.checkpoint = checkpoint
        self._table: dict[tuple[str, int], ConsumeQueue] = {}
        self._lock = threading.Lock()
        #: Held by dispatch while it writes units and by a rebuild of queues from the CommitLog,
        #: so a rebuild sees dispatch stopped at a window boundary.
        self.repair_lock = threading.RLock()
        #: Odd while a rebuild runs (one step up as it begins, one as it ends, under
        #: :attr:`repair_lock`): a rebuilt queue is empty, then half filled, before it is whole,
        #: so a read that saw the number change reads again once no rebuild runs.
        self.repair_generation = 0

    def __iter__(self) -> Iterator[ConsumeQueue]:
        return iter(list(self._table.values()))

    def __len__(self) -> int:
        return len(self._table)

    def find(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self._table.get((topic, queue_id))

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self._table.get((topic, queue_id))
        if cq is not None:
            return cq
        with self._lock:
            cq = self._table.get((topic, queue_id))
            if cq is None:
                cq = ConsumeQueue(topic, queue_id, self.root_dir, self.file_size)
                self._table = {**self._table, (topic, queue_id): cq}
            return cq

    def reserve(self, topic: str, queue_id: int, queue_offset: int) -> None:
        """Create the file that will hold unit ``queue_offset`` of the queue, its blocks
        reserved, unless it exists; :class:`~rocketq.errors.DiskFull` when the disk has no room.

        The CommitLog calls this before writing a message that opens a ConsumeQueue file, so a
        message is acknowledged only when dispatch can index it. The file is not mapped here:
        dispatch maps it (it has the right size already) when it gets there. A reserved file
        that dispatch never reached is all zeros, a state recovery handles as the end of the queue.
        """
        byte = queue_offset * CQ_UNIT_SIZE
        directory = os.path.join(self.directory, topic, str(queue_id))
        path = os.path.join(directory, offset_to_file_name(byte - byte % self.file_size))
        if os.path.exists(path):
            return
        reserve_file(path, self.file_size)

    # -- lifecycle ----------------------------------------------------------------------------
    def load(self) -> None:
        """Load every ``consumequeue/<topic>/<queueId>`` directory; other entries are skipped."""
        if not os.path.isdir(self.directory):
            return
        count = 0
        for topic in sorted(os.listdir(self.directory)):
            topic_dir = os.path.join(self.directory, topic)
            if not os.path.isdir(topic_dir):
                continue
            for name in sorted(os.listdir(topic_dir)):
                if not os.path.isdir(os.path.join(topic_dir, name)):
                    continue
                try:
                    queue_id = int(name)
                except ValueError:
                    queue_id = None
                if queue_id is None or str(queue_id) != name:
                    log.warning(
                        "skipping %s: queue directory name is not an int", os.path.join(topic_dir, name)
                    )
                    continue
                self.find_or_create(topic, queue_id).load()
                count += 1
        log.info("loaded %d ConsumeQueues from %s", count, self.directory)

    def recover(self) -> int:
        """Recover every queue; returns the largest ``max_physic_offset`` (or -1 when none)."""
        result = -1
        for cq in self:
            cq.recover()
            result = max(result, cq.max_physic_offset)
        log.info("ConsumeQueues recovered: %d queues, max physical offset %d", len(self), result)
        return result

    def flush(self, least_pages: int) -> bool:
        """Flush every queue. True when nothing moved in any of them."""
        unchanged = True
        for cq in self:
            unchanged = cq.flush(least_pages) and unchanged
        return unchanged

    def shutdown(self) -> None:
        for cq in self:
            cq.shutdown()

    def destroy(self) -> None:
        """Delete every ConsumeQueue file and forget every queue."""
        with self._lock:
            queues, self._table = list(self._table.values()), {}
        for cq in queues:
            cq.destroy()
        try:
            os.rmdir(self.directory)
        except OSError:
            pass

    # -- dispatch -----------------------------------------------------------------------------
    def put(self, request: DispatchRequest) -> bool:
        """Dispatcher entry point: index a NOT_TYPE or COMMIT record; others succeed unwritten."""
        with self.repair_lock:
            return self._put(request)

    def _put(self, request: DispatchRequest) -> bool:
        if (request.sys_flag & _TRANSACTION_MASK) not in _QUEUED_TRANSACTION_TYPES:
            return True
        cq = self.find_or_create(request.topic, request.queue_id)
        ok = cq.put_message_position_info(
            request.commit_log_offset, request.msg_size, request.tags_code, request.consume_queue_offset
        )
        if ok and self.checkpoint is not None:
            self.checkpoint.logics_msg_timestamp = request.store_timestamp
        return ok

    def put_batch(self, requests: list[DispatchRequest]) -> bool:
        """Dispatcher entry point for the requests of one read window (CommitLog order): the
        units are grouped per queue and each queue appends its run in one copy."""
        with self.repair_lock:
            return self._put_batch(requests)

    def _put_batch(self, requests: list[DispatchRequest]) -> bool:
        if isinstance(requests, DispatchBatch):
            return self._put_columns(requests)
        group_c = _cq_group_requests
        grouped = None if group_c is None else group_c(requests)
        if grouped is not None:  # the loop below, compiled (None: requests it leaves to the loop)
            groups, last_ts = grouped
        else:
            groups = {}
            last_ts = 0
            for r in requests:
                if (r.sys_flag & _TRANSACTION_MASK) not in _QUEUED_TRANSACTION_TYPES:
                    continue
                key = (r.topic, r.queue_id)
                group = groups.get(key)
                if group is None:
                    group = groups[key] = []
                group.append((r.commit_log_offset, r.msg_size, r.tags_code, r.consume_queue_offset))
                last_ts = r.store_timestamp
        ok = True
        put_run = _cq_put_run
        for (topic, queue_id), units in groups.items():
            cq = self.find_or_create(topic, queue_id)
            done = None if put_run is None else put_run(cq, units)
            if done is None:
                ok = cq.put_units(units) and ok
            elif done < len(units):  # the first run is written: put_units goes on from there
                ok = cq.put_units(units[done:] if done else units) and ok
        if ok and last_ts and self.checkpoint is not None:
            self.checkpoint.logics_msg_timestamp = last_ts
        return ok

    def _put_columns(self, batch: DispatchBatch) -> bool:
        """:meth:`put_batch` on the columns of a window: NOT_TYPE and COMMIT records (sysflag bit
        0x4 clear) are grouped per (topic, queue) with one stable sort, and each group goes to
        :meth:`ConsumeQueue.put_unit_arrays` in CommitLog order."""
        cols = batch.columns
        rows = np.flatnonzero((cols.sys_flag & 0x4) == 0)
        if not rows.size:
            return True
        key = (batch.topic_index[rows] << 32) | (cols.queue_id[rows] & 0xFFFFFFFF)
        order = np.argsort(key, kind="stable")
        key = key[order]
        rows = rows[order]
        cuts = [0, *(np.flatnonzero(key[1:] != key[:-1]) + 1).tolist(), len(rows)]
        ok = True
        for a, b in itertools.pairwise(cuts):
            group = rows[a:b]
            first = int(group[0])
            cq = self.find_or_create(batch.topics[int(batch.topic_index[first])], int(cols.queue_id[first]))
            ok = (
                cq.put_unit_arrays(
                    batch.commit_log_offset[group],
                    cols.size[group],
                    batch.tags_code[group],
                    cols.queue_offset[group],
                )
                and ok
            )
        last_ts = int(cols.store_ts[int(rows.max())])
        if ok and last_ts and self.checkpoint is not None:
            self.checkpoint.logics_msg_timestamp = last_ts
        return ok

    # -- maintenance --------------------------------------------------------------------------
    def replace(self, topic: str, queue_id: int) -> ConsumeQueue:
        """Delete the files of one queue and put an empty queue in its place (to be rebuilt from
        the CommitLog; call with :attr:`repair_lock` held)."""
        with self._lock:
            old = self._table.get((topic, queue_id))
            fresh = ConsumeQueue(topic, queue_id, self.root_dir, self.file_size)
            self._table = {**self._table, (topic, queue_id): fresh}
        if old is not None:
            old.destroy()
        fresh.load()
        return fresh

    def truncate_dirty(self, phy_offset: int) -> None:
        """Drop units at or after CommitLog offset ``phy_offset`` in every queue."""
        for cq in self:
            cq.truncate_dirty_logic_files(phy_offset)

    def correct_min_offsets(self, commitlog_min_offset: int) -> None:
        for cq in self:
            cq.correct_min_offset(commitlog_min_offset)

    def max_offsets(self) -> dict[tuple[str, int], int]:
        """Next queue offset of every queue that has had a message (rebuilds the CommitLog's
        topic-queue table). A queue with none (its first file reserved by a put that was never
        written, e.g. killed before its record was durable) is left out: its next offset is 0,
        as for a queue the table does not name."""
        return {(cq.topic, cq.queue_id): n for cq in self if (n := cq.max_offset_in_queue)}

    def max_physic_offset(self) -> int:
        """Largest ``max_physic_offset`` over all queues, or -1."""
        return max((cq.max_physic_offset for cq in self), default=-1)

    def delete_expired(self, commitlog_min_offset: int) -> int:
        """Delete expired files of every queue; returns the number of files deleted."""
        return sum(cq.delete_expired_file(commitlog_min_offset) for cq in self)


__all__ = [
    "CQ_DISK_DTYPE",
    "CQ_UNIT_DTYPE",
    "CQ_UNIT_SIZE",
    "FILLER_SIZE",
    "ConsumeQueue",
    "ConsumeQueueStore",
    "CqUnit",
    "CqUnits",
]
