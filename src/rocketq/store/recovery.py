"""Recovery of the CommitLog: find the end of valid data and cut whatever follows.

Two steps. :func:`plan_recovery` is the scan, pure: it reads segments (MappedFiles, or bytes in
tests) and returns a :class:`RecoveryPlan`, what to keep and what to cut, without changing
anything. :func:`apply_recovery` carries the plan out on the CommitLog: later segments deleted,
the stale bytes of the segment holding the end zeroed (so a torn tail can never be read back),
flush and commit positions set to the end. :func:`recover_commitlog` does both.

The scan follows RocketMQ's ``recoverNormally``/``recoverAbnormally`` loop: from a start segment,
decode records one after the other (with the body CRC check when ``check_crc_on_recover``);
a BLANK marker moves to the next segment; the first END (never-written zeros) or CORRUPT record
(bad magic, size mismatch, CRC mismatch, truncated record) ends the scan. ``process_offset`` is
the end of the last valid record; everything at and after it is cut.

Only the last segments can hold a torn tail (appends are sequential), so the scan starts at the
third-last segment; the segments before it are trusted as full.

Speed: the scan is what start-up waits for, so it runs a window (4 MiB) at a time through the
record walk of :mod:`rocketq.store.record_scan` (:func:`~rocketq.store.record_scan.valid_prefix`):
the TOTALSIZE chain is walked, the structure of every V1/IPv4 record is checked in bulk (the same
tests as ``decode_record``), and only the body CRC is computed per record. Anything the bulk check
does not accept (a BLANK, a V2 or IPv6 record, a record cut by the window, damage) is decoded by
``decode_record`` one record at a time, so both paths end the scan at exactly the same offset.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from rocketq.protocol import record as rec
from rocketq.store import record_scan
from rocketq.store.commitlog import CommitLog
from rocketq.store.mapped_file import MappedFile
from rocketq.store.quarantine import (
    QUARANTINE_DIR,
    QuarantinedRange,
    ResyncPolicy,
    find_resync,
    quarantine,
)
from rocketq.store.record_scan import SegmentView

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DispatchState:
    """What was dispatched before the restart, as the ConsumeQueues and the checkpoint say."""

    #: End of the data the ConsumeQueues name (-1: none).
    queues_end: int
    #: The checkpoint's "dispatched (ConsumeQueues and index flushed) up to" (-1: not recorded).
    dispatched: int
    clean_shutdown: bool


@dataclass(frozen=True, slots=True)
class SegmentEnd:
    """Where valid data ends in one scanned segment (a BLANK, the end of data, or damage)."""

    file_from_offset: int
    valid_end: int


@dataclass(frozen=True, slots=True)
class RecoveryPlan:
    """What the scan found and what applying it does. Nothing here refers to open files."""

    #: CommitLog offset the scan started at (a record boundary).
    start_offset: int
    #: End of the last valid record: the new end of the CommitLog, and its flush and commit
    #: positions. ConsumeQueue units and index entries at or past it are dropped by the store,
    #: and dispatch resumes no later than it.
    process_offset: int
    records_scanned: int
    #: The segments the scan went through, in order, with where their valid data ends.
    segment_ends: tuple[SegmentEnd, ...]
    #: Segments that start after ``process_offset``: deleted.
    delete_segments: tuple[int, ...]
    #: The segment holding ``process_offset`` and its bytes ``[cut_from, cut_to)`` (positions in
    #: the segment) that are zeroed; None when no segment holds it (an empty CommitLog).
    cut_segment: int | None
    cut_from: int
    cut_to: int
    #: The end of data before recovery (the last segment's read position).
    data_end: int
    #: Where dispatch resumes: the earliest record a ConsumeQueue may lack (the store lowers it
    #: further to where its index ends); ``process_offset`` when no DispatchState was given.
    redispatch_from: int
    #: The ConsumeQueues name data past ``process_offset``: their units from there are cut.
    cut_queues: bool
    #: Damaged ranges followed by intact records: kept in place, filled, and reported.
    quarantined: tuple[QuarantinedRange, ...] = ()
    #: (topic, queue id) → the next queue offset the scanned records name (the store's
    #: queue-offset table takes at least this; a queue that ends before it was cut short).
    queue_next: Mapping[tuple[str, int], int] = field(default_factory=dict)

    @property
    def truncated_bytes(self) -> int:
        """Bytes of data dropped: from ``process_offset`` to the old end of data."""
        return max(0, self.data_end - self.process_offset)


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    start_offset: int
    process_offset: int
    records_scanned: int
    truncated_bytes: int
    seconds: float
    plan: RecoveryPlan


#: Bytes read per window by the bulk scan.
_WINDOW_BYTES = 4 << 20


def plan_recovery(
    segments: Sequence[SegmentView],
    file_size: int,
    *,
    check_crc: bool = True,
    prop_crc: bool = False,
    max_record: int = 0,
    start_index: int | None = None,
    start_offset: int | None = None,
    dispatch: DispatchState | None = None,
    resync: ResyncPolicy | None = None,
) -> RecoveryPlan:
    """The recovery scan over ``segments`` (in offset order, each ``file_size`` bytes apart).

    It starts at ``start_offset`` (a record boundary), or at the start of segment
    ``start_index``, or by default at the third-last segment. ``prop_crc``: verify every record
    against its ``__CRC32#`` property as well (record by record). ``max_record``: the largest
    legal record (windows of the record-by-record step hold at least that). ``dispatch``: what
    was dispatched before, for :attr:`RecoveryPlan.redispatch_from`. ``resync``: look past damage
    for intact records (:class:`ResyncPolicy`; None: the first damage ends the valid data)."""
    if not segments:
        return RecoveryPlan(0, 0, 0, (), (), None, 0, 0, 0, 0, False)
    if start_offset is not None and segments[0].file_from_offset <= start_offset:
        start = start_offset
    else:
        count = len(segments)
        index = max(0, count - 3) if start_index is None else max(0, min(start_index, count - 1))
        start = segments[index].file_from_offset
    find = record_scan.segment_finder(segments, file_size)
    window = max(_WINDOW_BYTES, max_record + 8)
    ends: dict[int, int] = {}
    queue_next: record_scan.QueueNext = {}
    process, count, quarantined = _scan_resyncing(
        find,
        file_size,
        start,
        ends,
        queue_next,
        resync,
        check_crc=check_crc,
        prop_crc=prop_crc,
        window=window,
    )
    if count == 0 and start % file_size == 0 and start > segments[0].file_from_offset:
        # Nothing valid at a segment start: the previous segment may end with a BLANK, in which
        # case the end of data is that BLANK's position. That segment is scanned like any other,
        # damage in it resynced past: cutting at its first damaged record would take the intact
        # records after that with it. Its result is taken only when it holds records (else the
        # previous segment is left as it is, unscanned).
        prev = start - file_size
        prev_ends: dict[int, int] = {}
        prev_next: record_scan.QueueNext = {}
        prev_process, prev_count, prev_quarantined = _scan_resyncing(
            find,
            file_size,
            prev,
            prev_ends,
            prev_next,
            resync,
            check_crc=check_crc,
            prop_crc=prop_crc,
            window=window,
        )
        if prev_count:
            start, process, count, quarantined = prev, prev_process, prev_count, prev_quarantined
            ends, queue_next = prev_ends, prev_next
    last = segments[-1]
    data_end = last.file_from_offset + last.read_position
    holder = find(process)
    if holder is None and process > 0 and process % file_size == 0:
        holder = find(process - 1)  # the end of data is the end of a full segment
    cut_segment = holder.file_from_offset if holder is not None else None
    cut_from = process - cut_segment if cut_segment is not None else 0
    cut_to = cut_from
    if holder is not None:
        cut_to = max(cut_from, min(file_size, data_end - holder.file_from_offset))
    scanned = tuple(
        SegmentEnd(seg.file_from_offset, ends.get(seg.file_from_offset, max(start, seg.file_from_offset)))
        for seg in segments
        if start - start % file_size <= seg.file_from_offset <= process
    )
    return RecoveryPlan(
        start,
        process,
        count,
        scanned,
        tuple(seg.file_from_offset for seg in segments if seg.file_from_offset > process),
        cut_segment,
        cut_from,
        cut_to,
        data_end,
        process
        if dispatch is None
        else redispatch_from(max(0, segments[0].file_from_offset), process, dispatch),
        dispatch is not None and dispatch.queues_end > process,
        tuple(quarantined),
        queue_next,
    )


def redispatch_from(low: int, end: int, state: DispatchState) -> int:
    """Where dispatch resumes in a CommitLog holding ``[low, end)`` after recovery: the earliest
    record a ConsumeQueue may lack."""
    queues = max(state.queues_end, low)
    dispatched = state.dispatched
    if state.clean_shutdown and low <= dispatched <= end:
        # Clean shutdown: queues and index were flushed up to ``dispatched``.
        start = min(dispatched, queues)
    else:
        start = queues
        if low <= dispatched < start:
            # After a crash, queues flushed less recently than others may have lost units.
            start = dispatched
    return max(low, min(start, end))


def apply_recovery(commitlog: CommitLog, plan: RecoveryPlan) -> None:
    """Cut the CommitLog at ``plan.process_offset``: later segments deleted, stale bytes of the
    segment holding it zeroed, flush and commit positions set to it. (Quarantined ranges are
    filled by :func:`quarantine` first.)"""
    queue = commitlog.queue
    if not queue.files:
        return
    queue.flushed_where = plan.process_offset
    queue.committed_where = plan.process_offset
    queue.truncate_dirty_files(plan.process_offset)


def recover_commitlog(
    commitlog: CommitLog,
    *,
    check_crc: bool = True,
    start_index: int | None = None,
    start_offset: int | None = None,
    dispatch: DispatchState | None = None,
    resync: ResyncPolicy | None = None,
    quarantine_dir: str | None = None,
) -> RecoveryReport:
    """Scan from ``start_offset`` (a record boundary), or from the start of segment ``start_index``,
    or by default from the third-last segment; cut everything after the last valid record.
    With ``resync``, damage followed by intact records is quarantined to ``quarantine_dir``
    (default ``<store root>/quarantine``) instead, and logged at ERROR."""
    began = time.monotonic()
    queue = commitlog.queue
    prop_crc = check_crc and commitlog.config.enabled_append_prop_crc
    plan = plan_recovery(
        queue.files,
        commitlog.file_size,
        check_crc=check_crc,
        # With the whole-record CRC property on, every record is verified against it as well.
        prop_crc=prop_crc,
        max_record=commitlog._max_record,
        start_index=start_index,
        start_offset=start_offset,
        dispatch=dispatch,
        resync=resync,
    )
    if plan.quarantined:
        directory = quarantine_dir or os.path.join(commitlog.config.store_path_root_dir, QUARANTINE_DIR)
        for r, path in quarantine(commitlog, plan.quarantined, directory, prop_crc=prop_crc):
            log.error(
                "CommitLog damage at offset %d (%s): %d record(s), %d bytes skipped and quarantined "
                "to %s; intact records resume at offset %d",
                r.offset,
                r.reason,
                r.records,
                r.size,
                path,
                r.end,
            )
    apply_recovery(commitlog, plan)
    process = plan.process_offset
    report = RecoveryReport(
        plan.start_offset, process, plan.records_scanned, plan.truncated_bytes, time.monotonic() - began, plan
    )
    log.info(
        "CommitLog recovered: scanned %d records from offset %d, valid data ends at %d (%.1f ms)",
        plan.records_scanned,
        plan.start_offset,
        process,
        report.seconds * 1000,
    )
    return report


def _scan_resyncing(
    find: Callable[[int], SegmentView | None],
    file_size: int,
    start: int,
    ends: dict[int, int],
    queue_next: record_scan.QueueNext,
    resync: ResyncPolicy | None,
    *,
    check_crc: bool,
    prop_crc: bool,
    window: int,
) -> tuple[int, int, list[QuarantinedRange]]:
    """:func:`_scan` from ``start``, and past every damaged range ``resync`` lets it look past
    (:func:`find_resync`): (end of the last valid record, records accepted, damaged ranges)."""
    process, count = _scan(
        find, file_size, start, ends, queue_next, check_crc=check_crc, prop_crc=prop_crc, window=window
    )
    quarantined: list[QuarantinedRange] = []
    while resync is not None:
        found = find_resync(find, file_size, process, resync, check_crc=check_crc, prop_crc=prop_crc)
        if found is None:
            break
        quarantined.append(found)
        process, more = _scan(
            find,
            file_size,
            found.end,
            ends,
            queue_next,
            check_crc=check_crc,
            prop_crc=prop_crc,
            window=window,
        )
        count += more
    return process, count, quarantined


def _scan(
    find: Callable[[int], SegmentView | None],
    file_size: int,
    start: int,
    ends: dict[int, int],
    queue_next: record_scan.QueueNext,
    *,
    check_crc: bool,
    prop_crc: bool,
    window: int,
) -> tuple[int, int]:
    """(end of the last valid record, records accepted) from ``start``: bulk-checked prefixes of
    each window, and one ``decode_record`` step wherever the bulk check stops. ``ends`` gets the
    end of the last valid record of each segment that has one."""
    process = start
    count = 0
    # One padded window buffer for the whole scan (a fresh 4 MiB allocation per window costs
    # its page faults every time).
    buf = np.zeros(_WINDOW_BYTES + record_scan.PAD_BYTES, dtype=np.uint8)
    while True:
        if not prop_crc:
            process, accepted = _bulk_prefix(find, process, buf, queue_next, check_crc=check_crc)
            if accepted:
                count += accepted
                ends[(process - 1) - (process - 1) % file_size] = process
                continue  # the next window starts at the record the walk stopped at
        # One record the scalar way: a BLANK (followed into the next segment), a record the bulk
        # check does not take, the end of data or damage.
        stepped = 0
        for offset, view in record_scan.iter_records(
            find, file_size, process, check_crc=check_crc, verify_prop_crc=prop_crc, window=window
        ):
            process = offset + view.size
            ends[offset - offset % file_size] = process
            count += 1
            stepped += 1
            if view.sys_flag & 0x4 == 0 and view.queue_offset + 1 > queue_next.get(
                (view.topic, view.queue_id), 0
            ):
                queue_next[(view.topic, view.queue_id)] = view.queue_offset + 1
            if not prop_crc:
                break
        if stepped == 0:
            return process, count


def _bulk_prefix(
    find: Callable[[int], SegmentView | None],
    offset: int,
    buf: npt.NDArray[np.uint8],
    queue_next: record_scan.QueueNext,
    *,
    check_crc: bool,
) -> tuple[int, int]:
    """Accept the leading records of the window at ``offset`` that pass the structure checks in
    bulk and, when ``check_crc``, their body CRC. Returns (offset after them, how many).

    ``buf`` holds the window followed by ``record_scan.PAD_BYTES`` zeros (it is reused)."""
    seg = find(offset)
    if seg is None:
        return offset, 0
    pos = offset - seg.file_from_offset
    n = min(seg.read_position - pos, _WINDOW_BYTES)
    if n <= 0:
        return offset, 0
    if isinstance(seg, MappedFile):
        # straight from the mapping: one copy instead of two
        if not seg.hold():
            return offset, 0
        try:
            buf[:n] = np.frombuffer(seg.mm, dtype=np.uint8, count=n, offset=pos)
        finally:
            seg.release()
    else:
        data = seg.read(pos, n)
        if data is None:
            return offset, 0
        buf[:n] = np.frombuffer(data, dtype=np.uint8)
    buf[n : n + record_scan.PAD_BYTES] = 0
    end, accepted = record_scan.valid_prefix(buf, n, check_crc=check_crc, queue_next=queue_next)
    return offset + end, accepted


def choose_abnormal_start(segments: Sequence[SegmentView], min_timestamp: int) -> int:
    """RocketMQ ``recoverAbnormally``'s start: the last segment whose first record is a valid message
    stored no later than the checkpoint's minimum timestamp (segment 0 when none is)."""
    for seg in reversed(segments):
        head = seg.read(0, 4)
        if head is None:
            continue
        size = int.from_bytes(head, "big", signed=True)
        data = seg.read(0, size) if size > 0 else None
        if data is None:
            continue
        view = rec.decode_record(data, 0, check_crc=False, read_body=False)
        if (
            view.kind is rec.RecordKind.MESSAGE
            and view.store_timestamp != 0
            and view.store_timestamp <= min_timestamp
        ):
            log.info(
                "abnormal recovery starts at segment %d (stored at %d)",
                seg.file_from_offset,
                view.store_timestamp,
            )
            return seg.file_from_offset
    return segments[0].file_from_offset if segments else 0
