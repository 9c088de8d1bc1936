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

from rocketq.fileio import durable_replace
from rocketq.protocol import record as rec
from rocketq.store import record_scan
from rocketq.store.commitlog import CommitLog
from rocketq.store.mapped_file import MappedFile
from rocketq.store.record_scan import QUARANTINE_TOPIC, SegmentView

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
class ResyncPolicy:
    """When the scan looks past a damaged record for intact records after it.

    A damaged record (CORRUPT) is looked past anywhere after a clean shutdown, and below
    ``known_end`` after a crash (past it, damage is what a torn write leaves: the tail is cut as
    before). A zero TOTALSIZE (END) is looked past only below ``known_end``: data was flushed up to
    there, so zeros before it are damage, not the end of data. ``known_end`` is the checkpoint's
    "CommitLog flushed up to" (-1 when unknown: a store written by Apache RocketMQ)."""

    known_end: int
    clean_shutdown: bool

    def allows(self, offset: int, kind: rec.RecordKind) -> bool:
        if offset < self.known_end:
            return True
        return kind is rec.RecordKind.CORRUPT and self.clean_shutdown


@dataclass(frozen=True, slots=True)
class QuarantinedRange:
    """A damaged byte range ``[offset, end)`` of one segment, with intact records after it.

    Recovery copies its bytes to ``quarantine/`` and overwrites it in place with a filler (see
    :func:`encode_filler`); the records after it keep their offsets."""

    offset: int
    end: int
    #: The segment holding it.
    segment: int
    #: Records the damaged range held, as far as its TOTALSIZE chain tells (at least 1).
    records: int
    reason: str

    @property
    def size(self) -> int:
        return self.end - self.offset


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
    if count == 0 and start % file_size == 0 and start > segments[0].file_from_offset:
        # Nothing valid at a segment start: the previous segment may end with a BLANK, in which
        # case the end of data is that BLANK's position, found by scanning that segment.
        prev = start - file_size
        for offset, view in record_scan.iter_records(
            find, file_size, prev, end=start, check_crc=check_crc, verify_prop_crc=prop_crc, window=window
        ):
            process = offset + view.size
            count += 1
        if count:
            ends[prev] = process
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


#: The directory (under the store root) of the quarantined bytes.
QUARANTINE_DIR = "quarantine"
#: Bytes read per step when looking for the next intact record after damage.
_SEARCH_BYTES = 4 << 20
_MESSAGE_PREFIX = rec.MESSAGE_MAGIC_CODE.to_bytes(4, "big", signed=True)[:3]  # V1 and V2 share it
_BLANK_MAGIC = rec.BLANK_MAGIC_CODE.to_bytes(4, "big", signed=True)


def quarantine_file_name(r: QuarantinedRange) -> str:
    """``<20-digit segment>.quarantine-<CommitLog offset>``."""
    return f"{r.segment:020d}.quarantine-{r.offset}"


def encode_filler(physical_offset: int, size: int, *, prop_crc: bool = False) -> bytes | None:
    """A record of exactly ``size`` bytes that replaces a damaged range at ``physical_offset``.

    It is an ordinary, valid V1 message record (so Apache RocketMQ's own recovery and tools read
    past it) of topic :data:`QUARANTINE_TOPIC` with a zero body, flagged as a ROLLBACK transaction
    record: dispatch never puts it in a ConsumeQueue or the index (RocketMQ's rule, ours too), so
    no consumer ever sees it. None when ``size`` is below the smallest such record (103 bytes,
    123 with the ``__CRC32#`` property)."""
    props = rec.properties_with_crc_slot(b"") if prop_crc else b""
    overhead = rec.calc_msg_length(0, 0, len(QUARANTINE_TOPIC), len(props))
    if size < overhead:
        return None
    return rec.encode_record(
        topic=QUARANTINE_TOPIC,
        body=bytes(size - overhead),
        sys_flag=rec.TRANSACTION_ROLLBACK_TYPE,
        physical_offset=physical_offset,
        append_prop_crc=prop_crc,
    )


def find_resync(
    find: Callable[[int], SegmentView | None],
    file_size: int,
    offset: int,
    policy: ResyncPolicy,
    *,
    check_crc: bool = True,
    prop_crc: bool = False,
) -> QuarantinedRange | None:
    """The damaged range starting at ``offset`` (where the scan stopped) and the intact record
    after it, or None when the scan's stop is the end of valid data (nothing intact follows, or
    the policy says a stop there is a torn tail).

    The search goes byte by byte (records are not aligned) for a magic code in the rest of the
    segment; a candidate is taken only when it decodes as a whole record with its body CRC (and,
    with ``prop_crc``, its ``__CRC32#`` property) and its PHYSICALOFFSET field equals its position.
    A BLANK whose size reaches exactly the end of the segment is taken too. When the segment has
    nothing intact after the damage, the damage reaches the end of the segment if the next
    segment starts with an intact record; else it is a torn tail."""
    seg = find(offset)
    if seg is None:
        return None
    base = seg.file_from_offset
    pos = offset - base
    limit = seg.read_position
    if pos >= limit:
        return None
    head = seg.read(pos, min(limit - pos, 8)) or b""
    total = int.from_bytes(head[:4], "big", signed=True) if len(head) >= 4 else 0
    if len(head) == 8 and head[4:] == _BLANK_MAGIC:
        # The scan stops at a BLANK when the next segment does not start with a valid record:
        # that segment's start is where the damage is.
        nxt = base + file_size
        following = find(nxt)
        if pos == 0 or following is None or following.file_from_offset != nxt:
            return None
        return find_resync(find, file_size, nxt, policy, check_crc=check_crc, prop_crc=prop_crc)
    if not any(head):
        kind = rec.RecordKind.END
        reason = "zero TOTALSIZE"
    else:
        kind = rec.RecordKind.CORRUPT
        data = seg.read(pos, total) if 0 < total <= limit - pos else head
        view = rec.decode_record(data or head, 0, check_crc=check_crc, verify_prop_crc=prop_crc)
        reason = view.reason or f"record does not decode ({view.kind.name})"
    if not policy.allows(offset, kind):
        return None
    stop = limit
    if policy.known_end > offset:
        stop = min(limit, policy.known_end - base)
    found = _search(seg, file_size, pos + 1, stop, prop_crc=prop_crc)
    if found is None:
        # Nothing intact in the rest of this segment: the damage reaches its end if a later
        # segment holds an intact record (its own damaged start is then found from there).
        nxt = base + file_size
        following = find(nxt)
        while following is not None and following.file_from_offset == nxt:
            if _intact_at(following, file_size, 0, prop_crc=prop_crc) or (
                _search(following, file_size, 0, following.read_position, prop_crc=prop_crc) is not None
            ):
                break
            nxt += file_size
            following = find(nxt)
        else:
            return None
        found = file_size
    return QuarantinedRange(offset, base + found, base, _chain_count(seg, pos, found), reason)


def _search(seg: SegmentView, file_size: int, start: int, stop: int, *, prop_crc: bool) -> int | None:
    """Position of the first intact record (or exact end-of-segment BLANK) starting in
    ``[start, stop)`` of ``seg``."""
    p = start
    while p < stop:
        n = min(stop - p, _SEARCH_BYTES)
        # the magic sits 4 bytes into the record: read 4 + 3 bytes more to see a magic that
        # starts at the window's last record position
        data = seg.read(p, min(n + 7, seg.read_position - p))
        if not data:
            return None
        hits = []
        i = data.find(_MESSAGE_PREFIX, 4)
        if i >= 0:
            hits.append(i)
        j = data.find(_BLANK_MAGIC, 4)
        if j >= 0:
            hits.append(j)
        if not hits:
            p += n
            continue
        q = min(hits)
        cand = p + q - 4
        if cand >= stop:
            return None
        if _intact_at(seg, file_size, cand, prop_crc=prop_crc):
            return cand
        p = cand + 1
    return None


def _intact_at(seg: SegmentView, file_size: int, pos: int, *, prop_crc: bool) -> bool:
    """Whether an intact record (CRC checked, PHYSICALOFFSET equal to its position) or a BLANK
    reaching exactly the end of the segment starts at ``pos`` of ``seg``."""
    head = seg.read(pos, 8)
    if head is None or len(head) < 8:
        return False
    total = int.from_bytes(head[:4], "big", signed=True)
    if head[4:] == _BLANK_MAGIC:
        return total == file_size - pos and total >= 8
    if total < 91 or pos + total > seg.read_position:
        return False
    data = seg.read(pos, total)
    if data is None:
        return False
    view = rec.decode_record(data, 0, check_crc=True, read_body=False, verify_prop_crc=prop_crc)
    return view.kind is rec.RecordKind.MESSAGE and view.physical_offset == seg.file_from_offset + pos


def _chain_count(seg: SegmentView, pos: int, end: int) -> int:
    """Records in ``[pos, end)`` as the TOTALSIZE chain tells: exact when the chain lands on
    ``end``, else at least 1."""
    p = pos
    n = 0
    while p < end and n < 100_000:
        head = seg.read(p, 4)
        size = int.from_bytes(head, "big", signed=True) if head is not None and len(head) == 4 else 0
        if size <= 0 or p + size > end:
            break
        p += size
        n += 1
    return n if p == end and n else max(1, n)


def quarantine(
    commitlog: CommitLog, plan: RecoveryPlan, directory: str, *, prop_crc: bool
) -> list[tuple[QuarantinedRange, str]]:
    """Copy each damaged range of ``plan`` to ``directory`` (once: an existing copy is kept, it
    holds the original bytes) and overwrite the range in place with a filler: a filler record
    (:func:`encode_filler`), or a BLANK when the range reaches the end of its segment. The filler's
    TOTALSIZE is written last and the segment synced, so a crash meanwhile leaves the damage as it
    was for the next start to find again. Returns each range with its quarantine file path."""
    paths: list[tuple[QuarantinedRange, str]] = []
    for r in plan.quarantined:
        mf = commitlog.queue.find_by_offset(r.offset)
        if mf is None or not mf.hold():
            continue
        try:
            pos = r.offset - mf.file_from_offset
            end = r.end - mf.file_from_offset
            path = os.path.join(directory, quarantine_file_name(r))
            if not os.path.exists(path):
                damaged = bytes(mf.mm[pos:end])
                if end >= commitlog.file_size:
                    damaged = damaged.rstrip(b"\0")  # the never-written rest of the segment
                durable_replace(path, damaged)
            if end >= commitlog.file_size:
                filler: bytes | None = rec.encode_blank(end - pos)
            else:
                filler = encode_filler(r.offset, r.size, prop_crc=prop_crc)
            if filler is None:
                log.error(
                    "CommitLog damage at offset %d is %d bytes, too short for a filler record: "
                    "left in place (dispatch skips it by its size)",
                    r.offset,
                    r.size,
                )
            else:
                mf.mm[pos + 4 : pos + len(filler)] = filler[4:]
                mf.mm[pos : pos + 4] = filler[:4]
                mf.sync(full=True)
            paths.append((r, path))
        finally:
            mf.release()
    return paths


def list_quarantined(directory: str) -> list[tuple[int, int, str]]:
    """(CommitLog offset, bytes kept, file name) of every quarantine file in ``directory``."""
    out: list[tuple[int, int, str]] = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return out
    for name in names:
        head, sep, tail = name.partition(".quarantine-")
        if not sep or not head.isdigit() or not tail.isdigit():
            continue
        out.append((int(tail), os.path.getsize(os.path.join(directory, name)), name))
    out.sort()
    return out


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
        for r, path in quarantine(commitlog, plan, directory, prop_crc=prop_crc):
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
