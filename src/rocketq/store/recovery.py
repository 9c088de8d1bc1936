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
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from rocketq.store import record as rec
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
    process = start
    count = 0
    for offset, view in commitlog.iter_records(start, check_crc=check_crc, verify_prop_crc=prop_crc):
        process = offset + view.size
        count += 1
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
