"""The walk over one scan task: the record starts of each window, and where and why it stopped.

Parsing a task (:func:`iter_chunks`): the task is read in windows of about ``chunk_bytes``. A
sequential walk over each window collects the record starts (one ``unpack_from`` per record)
and stops at a BLANK marker, at zeros, at an illegal magic, a size out of range or a record cut
short by the range. Everything else is column-wise
(:func:`rocketq.spark.jobs.scan_columns.decode_chunk`).

Damage (:class:`Damage`): a record whose body CRC or physical offset is wrong still has a
trustworthy size, so the walk goes on after it; a record with a wrong structure, an illegal
magic, a size out of range or cut short ends the walk: nothing after that offset in the segment
can be located reliably (``valid_end``). Zeros are the normal end of data, but non-zero bytes
after them mean records were lost (e.g. a zeroed header), and are reported too.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

import numpy as np
import numpy.typing as npt

from rocketq.protocol import record as rec
from rocketq.spark.jobs.scan_plan import _HEAD, _V1, _V2, ScanTask
from rocketq.store import record_scan

DEFAULT_CHUNK_BYTES: Final = 8 << 20


class StopKind(StrEnum):
    """Why the walk of a task ended."""

    BLANK = "blank"  # an end-of-segment marker
    END = "end"  # zeros: the end of the data
    FULL = "full"  # records up to the exact end of the file
    RANGE = "range"  # the end of a task that stops before the end of its segment
    DAMAGED = "damaged"  # a record that cannot be located or trusted


@dataclass(frozen=True, slots=True)
class Damage:
    """A damaged place: CommitLog offset, position in its segment file, and why."""

    offset: int
    segment: str
    position: int
    reason: str
    #: Whether the walk could go on after it (the record's size is trustworthy).
    recoverable: bool


@dataclass(slots=True)
class Chunk:
    """One window of a task: its bytes, where they start, and the record starts in it."""

    data: bytes
    base_offset: int  # CommitLog offset of data[0]
    position: int  # position of data[0] in the segment file
    starts: npt.NDArray[np.int64]  # record starts, relative to data


@dataclass(slots=True)
class WalkResult:
    """How the walk of a task ended; filled in while :func:`iter_chunks` runs."""

    stop: StopKind = StopKind.RANGE
    #: CommitLog offset where valid data ends (after the last record that could be trusted).
    valid_end: int = 0
    #: CommitLog offset of the stop (BLANK marker, first zero byte, damaged record).
    stop_offset: int = 0
    damage: list[Damage] = field(default_factory=list)
    blank_offset: int | None = None


def _first_nonzero(mm: mmap.mmap, start: int, end: int) -> int | None:
    """Position of the first non-zero byte in ``mm[start:end]``, or None."""
    step = 1 << 22
    p = start
    while p < end:
        q = min(end, p + step)
        window = np.frombuffer(mm[p:q], dtype=np.uint8)
        nz = np.flatnonzero(window)
        if nz.size:
            return p + int(nz[0])
        p = q
    return None


@contextlib.contextmanager
def mapped_range(task: ScanTask, result: WalkResult) -> Iterator[tuple[mmap.mmap, int] | None]:
    """The task's file mapped read-only and where its range ends (within the file); None, with
    ``result`` set to an empty walk of the range, when the range holds nothing."""
    with open(task.path, "rb") as f:
        file_size = os.fstat(f.fileno()).st_size
        end = min(task.end, file_size)
        if end <= task.begin:
            result.valid_end = result.stop_offset = task.segment_offset + task.begin
            result.stop = StopKind.FULL if task.to_segment_end else StopKind.RANGE
            yield None
            return
        with mmap.mmap(f.fileno(), file_size, access=mmap.ACCESS_READ) as mm:
            yield mm, end


def iter_chunks(
    task: ScanTask, result: WalkResult, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> Iterator[Chunk]:
    """Walk the records of ``task`` window by window (see the module docstring).

    Chunks hold only records whose magic and size are plausible; their structure and CRCs are
    checked by :func:`decode_chunk`. How the walk ended goes into ``result``.
    """
    seg_name = task.segment_name
    base = task.segment_offset
    with mapped_range(task, result) as mapped:
        if mapped is None:
            return
        mm, end = mapped
        unpack = _HEAD.unpack_from
        p = task.begin
        while True:
            w_end = min(end, p + chunk_bytes)
            data = mm[p:w_end]
            n = len(data)
            starts, q, kind = record_scan.walk(data)
            stop: StopKind | None = None
            reason = ""
            if kind is rec.RecordKind.BLANK:
                stop = StopKind.BLANK
            elif kind is rec.RecordKind.END:
                stop = StopKind.END
            elif kind is rec.RecordKind.CORRUPT:
                total, magic = unpack(data, q)
                stop = StopKind.DAMAGED
                if magic in (_V1, _V2):
                    reason = f"record size {total} is below the minimum"
                else:
                    reason = f"illegal magic code 0x{magic & 0xFFFFFFFF:08X} (size field {total})"
            elif q + 8 <= n:
                # a record that runs past the window: damage if it runs past the range
                total = unpack(data, q)[0]
                if p + q + total > end:
                    if end == len(mm):
                        reason = f"record size {total} runs past the end of the segment"
                    else:
                        reason = f"record size {total} runs past the end of the task range"
                    stop = StopKind.DAMAGED
            if stop is None and q + 8 > n and w_end == end:
                # fewer than 8 bytes left in the range
                if q == n:
                    stop = StopKind.FULL if task.to_segment_end else StopKind.RANGE
                elif not any(data[q:n]):
                    stop = StopKind.END
                else:
                    stop = StopKind.DAMAGED
                    reason = f"{n - q} bytes at the end of the segment are too short for a record"
            if starts or q:
                yield Chunk(data[:q], base + p, p, np.asarray(starts, dtype=np.int64))
            pos = p + q
            if stop is not None:
                result.stop = stop
                result.stop_offset = base + pos
                result.valid_end = base + pos
                if stop is StopKind.BLANK:
                    result.blank_offset = base + pos
                elif stop is StopKind.DAMAGED:
                    result.damage.append(Damage(base + pos, seg_name, pos, reason, False))
                elif stop is StopKind.END:
                    # Records after the zeros are lost: the damage is where valid data ends,
                    # as recovery ends there too.
                    nz = _first_nonzero(mm, pos, end)
                    if nz is not None:
                        result.damage.append(
                            Damage(
                                base + pos,
                                seg_name,
                                pos,
                                f"non-zero bytes at position {nz} after the end of data at {pos}",
                                False,
                            )
                        )
                return
            if q == 0:
                # one record larger than the window: read it whole
                (total,) = struct.unpack_from(">i", data, 0)
                chunk_bytes = max(chunk_bytes, total)
                continue
            p = pos
