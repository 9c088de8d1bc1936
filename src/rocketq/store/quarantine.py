"""Damage in the middle of the CommitLog: finding the intact records after it, and quarantine.

A damaged record (bad magic, size or CRC) with intact records after it is not the end of the
log. :func:`find_resync` looks past it, byte by byte within its segment (records are not
aligned), for the next record that adds up: magic code, TOTALSIZE, body CRC, and a
PHYSICALOFFSET equal to its position; a later segment holding an intact record makes the damage
run to the end of its own. :class:`ResyncPolicy` says where looking past damage is allowed (after
a crash, damage past the flushed point is a torn write and is cut as before).

:func:`quarantine` copies each damaged range to ``quarantine/`` beside the CommitLog and
overwrites it in place with a filler record that no queue or index ever takes
(:func:`encode_filler`), or a BLANK when the range reaches the end of its segment, so every intact
record after it keeps its offset. :mod:`rocketq.store.recovery` plans and applies these steps.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rocketq.fileio import durable_replace
from rocketq.protocol import record as rec
from rocketq.store.commitlog import CommitLog
from rocketq.store.record_scan import QUARANTINE_TOPIC, SegmentView

log = logging.getLogger(__name__)


#: The directory (under the store root) of the quarantined bytes.
QUARANTINE_DIR = "quarantine"
#: Bytes read per step when looking for the next intact record after damage.
_SEARCH_BYTES = 4 << 20
_MESSAGE_PREFIX = rec.MESSAGE_MAGIC_CODE.to_bytes(4, "big", signed=True)[:3]  # V1 and V2 share it
_BLANK_MAGIC = rec.BLANK_MAGIC_CODE.to_bytes(4, "big", signed=True)


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
    commitlog: CommitLog, ranges: Sequence[QuarantinedRange], directory: str, *, prop_crc: bool
) -> list[tuple[QuarantinedRange, str]]:
    """Copy each damaged range (a recovery plan's ``quarantined``) to ``directory`` (once: an
    existing copy is kept, it holds the original bytes) and overwrite the range in place with a
    filler: a filler record (:func:`encode_filler`), or a BLANK when the range reaches the end of
    its segment. The filler's TOTALSIZE is written last and the segment synced, so a crash
    meanwhile leaves the damage as it was for the next start to find again. Returns each range
    with its quarantine file path."""
    paths: list[tuple[QuarantinedRange, str]] = []
    for r in ranges:
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
