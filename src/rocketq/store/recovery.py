"""Recovery of the CommitLog: find the end of valid data and cut whatever follows.

The scan follows RocketMQ's ``recoverNormally``/``recoverAbnormally`` loop: from a start segment,
decode records one after the other (with the body CRC check when ``check_crc_on_recover``);
a BLANK marker moves to the next segment; the first END (never-written zeros) or CORRUPT record
(bad magic, size mismatch, CRC mismatch, truncated record) ends the scan. ``process_offset`` is
the end of the last valid record. Everything at and after it is truncated: later segments are
deleted and the stale bytes of the segment holding it are zeroed, so a torn tail can never be
read back.

Only the last segments can hold a torn tail (appends are sequential), so the scan starts at the
third-last segment; the segments before it are trusted as full.

Speed: the scan is what start-up waits for, so it runs a window (4 MiB) at a time through the
dispatcher's columnar scan (``record_scan``): the TOTALSIZE chain is walked, the structure of
every V1/IPv4 record is checked in bulk (the same tests as ``decode_record``), and only the body
CRC is computed per record. Anything the bulk check does not accept (a BLANK, a V2 or IPv6
record, a record cut by the window, damage) is decoded by ``decode_record`` one record at a time,
so both paths end the scan at exactly the same offset.
"""

from __future__ import annotations

import logging
import time
import zlib
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rocketq.protocol import record as rec
from rocketq.store import record_scan
from rocketq.store.commitlog import CommitLog

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    start_offset: int
    process_offset: int
    records_scanned: int
    truncated_bytes: int
    seconds: float


def recover_commitlog(
    commitlog: CommitLog,
    *,
    check_crc: bool = True,
    start_index: int | None = None,
    start_offset: int | None = None,
) -> RecoveryReport:
    """Scan from ``start_offset`` (a record boundary), or from the start of segment ``start_index``,
    or by default from the third-last segment; cut everything after the last valid record."""
    began = time.monotonic()
    # With the whole-record CRC property on, every record is verified against it as well.
    prop_crc = check_crc and commitlog.config.enabled_append_prop_crc
    queue = commitlog.queue
    files = queue.files
    if not files:
        return RecoveryReport(0, 0, 0, 0, 0.0)
    if start_offset is not None and files[0].file_from_offset <= start_offset:
        start = start_offset
    else:
        index = max(0, len(files) - 3) if start_index is None else max(0, min(start_index, len(files) - 1))
        start = files[index].file_from_offset
    process, count = _scan(commitlog, start, check_crc=check_crc, prop_crc=prop_crc)
    if count == 0 and start % commitlog.file_size == 0 and start > files[0].file_from_offset:
        # Nothing valid at a segment start: the previous segment may end with a BLANK, in which
        # case the end of data is that BLANK's position, found by scanning that segment.
        prev = start - commitlog.file_size
        for offset, view in commitlog.iter_records(
            prev, end=start, check_crc=check_crc, verify_prop_crc=prop_crc
        ):
            process = offset + view.size
            count += 1
    old_end = queue.max_wrote_position
    queue.flushed_where = process
    queue.committed_where = process
    queue.truncate_dirty_files(process)
    report = RecoveryReport(start, process, count, max(0, old_end - process), time.monotonic() - began)
    log.info(
        "CommitLog recovered: scanned %d records from offset %d, valid data ends at %d (%.1f ms)",
        count,
        start,
        process,
        report.seconds * 1000,
    )
    return report


#: Bytes read per window by the bulk scan.
_WINDOW_BYTES = 4 << 20
#: Offset of BODYCRC in a record.
_BODY_CRC_POS = 8
#: The largest PROPERTIES LENGTH a record can carry (a signed 16-bit field).
_MAX_PROPS_BYTES = 32767


def _scan(commitlog: CommitLog, start: int, *, check_crc: bool, prop_crc: bool) -> tuple[int, int]:
    """(end of the last valid record, records accepted) from ``start``: bulk-checked prefixes of
    each window, and one ``decode_record`` step wherever the bulk check stops."""
    process = start
    count = 0
    # One padded window buffer for the whole scan (a fresh 4 MiB allocation per window costs
    # its page faults every time).
    buf = np.zeros(_WINDOW_BYTES + record_scan.PAD_BYTES, dtype=np.uint8)
    while True:
        if not prop_crc:
            process, accepted = _bulk_prefix(commitlog, process, buf, check_crc=check_crc)
            count += accepted
            if accepted:
                continue  # the next window starts at the record the walk stopped at
        # One record the scalar way: a BLANK (followed into the next segment), a record the bulk
        # check does not take, the end of data or damage.
        step = commitlog.iter_records(process, check_crc=check_crc, verify_prop_crc=prop_crc)
        stepped = 0
        for offset, view in step:
            process = offset + view.size
            count += 1
            stepped += 1
            if not prop_crc:
                break
        if stepped == 0:
            return process, count


def _bulk_prefix(
    commitlog: CommitLog, offset: int, buf: npt.NDArray[np.uint8], *, check_crc: bool
) -> tuple[int, int]:
    """Accept the leading records of the window at ``offset`` that pass the structure checks in
    bulk and, when ``check_crc``, their body CRC. Returns (offset after them, how many).

    ``buf`` holds the window followed by ``record_scan.PAD_BYTES`` zeros (it is reused)."""
    mf = commitlog.queue.find_by_offset(offset)
    if mf is None:
        return offset, 0
    pos = offset - mf.file_from_offset
    n = min(mf.read_position - pos, _WINDOW_BYTES)
    if n <= 0 or not mf.hold():
        return offset, 0
    try:
        buf[:n] = np.frombuffer(mf.mm, dtype=np.uint8, count=n, offset=pos)
    finally:
        mf.release()
    buf[n : n + record_scan.PAD_BYTES] = 0
    data = buf.data[:n]
    starts, _ = record_scan.walk(data)
    if not starts:
        return offset, 0
    cols, k, _ = record_scan.scan(buf, n, starts)
    # PROPERTIES LENGTH is a signed i16 to decode_record: 32768 or more is damage, not a length.
    too_long = np.flatnonzero(cols.props_end - cols.props_start > _MAX_PROPS_BYTES)
    if too_long.size:
        k = int(too_long[0])
    if k and check_crc:
        first = cols.starts
        stored = record_scan.rows(buf, 4)[first + _BODY_CRC_POS].view(">i4").reshape(-1).tolist()
        body_from = (first + record_scan.V1_HEAD_BYTES).tolist()
        body_to = (cols.topic_start - 1).tolist()
        crc32 = zlib.crc32
        for i in range(k):
            if crc32(data[body_from[i] : body_to[i]]) & 0x7FFFFFFF != stored[i]:
                k = i  # the scalar step reports this record as CORRUPT and ends the scan
                break
    if k == 0:
        return offset, 0
    last = k - 1
    return offset + int(cols.starts[last]) + int(cols.size[last]), k


def choose_abnormal_start(commitlog: CommitLog, min_timestamp: int) -> int:
    """RocketMQ ``recoverAbnormally``'s start: the last segment whose first record is a valid message
    stored no later than the checkpoint's minimum timestamp (segment 0 when none is)."""
    files = commitlog.queue.files
    for mf in reversed(files):
        head = mf.read(0, 4)
        if head is None:
            continue
        size = int.from_bytes(head, "big", signed=True)
        data = mf.read(0, size) if 0 < size <= mf.file_size else None
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
                mf.file_from_offset,
                view.store_timestamp,
            )
            return mf.file_from_offset
    return files[0].file_from_offset if files else 0
