"""The walk over one entry data file of a DLedger store: the CommitLog records inside its entries.

In DLedger mode every CommitLog record is the body of one entry of the entry store
(``rocketq.ha.entry_format``): a 48-byte header, then the record, whose CommitLog offset is the
entry's ``pos + 48``. :func:`iter_entry_chunks` walks a data file entry by entry with the entry
store's own check (:func:`~rocketq.ha.entry_format.entry_problem`: magic, ``size == 48 +
bodySize``, ``pos`` equal to the entry's position, contiguous indexes, non-decreasing terms, and
the body and chain CRCs where the writer filled them in) and hands the record starts it finds to
the same column-wise decoding as a plain segment (:class:`~rocketq.spark.jobs.scan_walk.Chunk`:
``data`` holds whole entries, ``starts`` point at the records inside them), so the jobs report
the same columns for both layouts.

Each body must be exactly one record: the shared record walk (:func:`rocketq.store.record_scan.walk`)
over the body must find one record filling it. NOOP and CONFIG_CHANGE entries carry no record.

Damage: an entry whose body or chain CRC is wrong, or whose body is not one record, has a
trustworthy size (its header adds up), so the walk goes on after it (``recoverable``); a wrong
magic, size, position, index or term ends the walk: nothing after it can be located. The chain
is checked from the second entry the task reads on (the first one's predecessor is in another
file), and from the very first entry of the log (index 0). A file ends with a blank (magic -1
filling the rest of the file exactly) or zeros; non-zero bytes after the zeros are reported.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Final

import numpy as np

from rocketq.ha import entry_format as fmt
from rocketq.spark.jobs.scan_plan import ScanTask
from rocketq.spark.jobs.scan_walk import (
    DEFAULT_CHUNK_BYTES,
    Chunk,
    Damage,
    StopKind,
    WalkResult,
    _first_nonzero,
    mapped_range,
)
from rocketq.store import record_scan

_HEAD8: Final = struct.Struct(">ii")
#: Reasons of :func:`entry_problem` after which the entry's size can still be trusted.
_CRC_PROBLEMS: Final = ("bodyCrc ", "chainCrc ")


def iter_entry_chunks(
    task: ScanTask, result: WalkResult, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> Iterator[Chunk]:
    """Walk the entries of the data file of ``task`` window by window (see the module docstring);
    yield the records inside them. How the walk ended goes into ``result``."""
    seg_name = task.segment_name
    base = task.segment_offset
    with mapped_range(task, result) as mapped:
        if mapped is None:
            return
        mm, end = mapped
        chunk_bytes = max(chunk_bytes, fmt.BODY_OFFSET)
        p = task.begin
        prev_chain: int | None = None
        expected_index: int | None = None
        min_term = 0
        stop: StopKind | None = None
        reason = ""
        while stop is None:
            w_end = min(end, p + chunk_bytes)
            data = mm[p:w_end]
            n = len(data)
            q = 0
            starts: list[int] = []
            while True:
                left = n - q
                if left < fmt.BODY_OFFSET and w_end < end:
                    break  # read on in the next window
                if left < 8:
                    if left == 0:
                        stop = StopKind.FULL if task.to_segment_end else StopKind.RANGE
                    elif not any(data[q:n]):
                        stop = StopKind.END
                    else:
                        stop, reason = (
                            StopKind.DAMAGED,
                            f"{left} bytes at the end of the file are too short",
                        )
                    break
                magic, size = _HEAD8.unpack_from(data, q)
                if magic == 0 and size == 0:
                    stop = StopKind.END
                    break
                if magic == fmt.BLANK_MAGIC:
                    problem = fmt.blank_problem(data, q, len(mm) - (p + q))
                    if problem is None:
                        stop = StopKind.BLANK
                    else:
                        stop, reason = StopKind.DAMAGED, problem
                    break
                if size >= fmt.BODY_OFFSET and q + size > n and w_end < end and p + q + size <= end:
                    if q == 0:
                        chunk_bytes = max(chunk_bytes, size)  # one entry larger than the window
                    break
                h, problem = fmt.entry_problem(
                    data,
                    q,
                    left,
                    expected_pos=base + p + q,
                    expected_index=expected_index,
                    prev_chain=prev_chain,
                    min_term=min_term,
                )
                if h is None or (problem is not None and not problem.startswith(_CRC_PROBLEMS)):
                    what = f"entry {h.index}" if h is not None else "entry"
                    stop, reason = StopKind.DAMAGED, f"{what}: {problem}"
                    break
                at = base + p + q
                if problem is not None:
                    result.damage.append(Damage(at, seg_name, p + q, f"entry {h.index}: {problem}", True))
                if h.magic == fmt.MAGIC_NORMAL and h.body_size > 0:
                    body = q + fmt.BODY_OFFSET
                    found, used, kind = record_scan.walk(memoryview(data)[body : q + h.size])
                    if found == [0] and used == h.body_size and kind is None:
                        starts.append(body)
                    else:
                        result.damage.append(
                            Damage(
                                at,
                                seg_name,
                                p + q,
                                f"entry {h.index}: its {h.body_size} B body is not one CommitLog record",
                                True,
                            )
                        )
                prev_chain, expected_index, min_term = h.chain_crc, h.index + 1, h.term
                q += h.size
            if starts or q:
                yield Chunk(data[:q], base + p, p, np.asarray(starts, dtype=np.int64))
            p += q
        result.stop = stop
        result.stop_offset = result.valid_end = base + p
        if stop is StopKind.BLANK:
            result.blank_offset = base + p
        elif stop is StopKind.DAMAGED:
            result.damage.append(Damage(base + p, seg_name, p, reason, False))
        elif stop is StopKind.END and (nz := _first_nonzero(mm, p, end)) is not None:
            why = f"non-zero bytes at position {nz} after the end of data at {p}"
            result.damage.append(Damage(base + p, seg_name, p, why, False))


__all__ = ["iter_entry_chunks"]
