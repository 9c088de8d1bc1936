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
    commitlog: CommitLog, *, check_crc: bool = True, start_index: int | None = None
) -> RecoveryReport:
    began = time.monotonic()
    queue = commitlog.queue
    files = queue.files
    if not files:
        return RecoveryReport(0, 0, 0, 0, 0.0)
    index = max(0, len(files) - 3) if start_index is None else max(0, min(start_index, len(files) - 1))
    start = files[index].file_from_offset
    process = start
    count = 0
    for offset, view in commitlog.iter_records(start, check_crc=check_crc):
        process = offset + view.size
        count += 1
    # A BLANK at the very end leaves ``process`` at the last record; a segment that is wholly
    # valid and followed by another continues from the next one (iter_records handles both).
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
