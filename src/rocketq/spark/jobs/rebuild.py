"""Rebuilding ConsumeQueues and index files from CommitLog segments, with the broker's own writers.

Two halves, so the parse can run in parallel and the writes stay in CommitLog order::

    executors (one task per segment or range)          driver (one pass, CommitLog order)
    dispatch_rows(task):                               IndexRebuilder.feed(rows):
      windows of the segment → store.dispatch            rows → DispatchRequest
      .parse_window (the dispatcher's parser: tags         → ConsumeQueueStore.put_batch
      code, delay-level deliver time, KEYS, UNIQ_KEY)      → IndexService.build_index_batch
      → compact rows                                     → close(): flush, unmap

The writers are the store's (:mod:`rocketq.store.consume_queue`, :mod:`rocketq.store.index_file`),
fed the same requests in the same order as the broker's ``ReputMessageService``, so the
ConsumeQueue files are byte-identical to the broker's: same names, same units, pre-blank fillers
included. Index files hold the same bytes too (header included: every header field comes from the
indexed messages); only their names differ. The broker names a file by the wall clock when it
creates it; the rebuild names it by the store time of the message that makes it necessary (bumped
by 1 ms when taken), so names still sort in creation order and a query behaves the same.

An entry data file of a DLedger store is walked entry by entry (:mod:`.scan_entries`) and the
record inside each entry goes through the same parser; damaged entries are reported by ``verify``.

A walk stops at the BLANK marker or at zeros. A record that does not decode is skipped by its
size when the size is plausible, otherwise the rest of the segment is left out, as the broker's
dispatcher does; both are counted in :class:`DispatchSummary`.
"""

from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

from rocketq.config import StoreConfig
from rocketq.errors import StoreError
from rocketq.protocol import record as rec
from rocketq.store.consume_queue import ConsumeQueueStore
from rocketq.store.index_file import IndexService
from rocketq.store.record_scan import DispatchRequest, parse_window

from .scan import DLEDGER, ScanTask, StopKind, WalkResult, iter_entry_chunks

log = logging.getLogger(__name__)

#: One dispatched record: topic, queue id, CommitLog offset, size, tags code, store time, queue
#: offset, KEYS, UNIQ_KEY (or None), sys flag.
DispatchRow = tuple[str, int, int, int, int, int, int, str, str | None, int]

WINDOW_BYTES = 1 << 20


@dataclass(slots=True)
class DispatchSummary:
    records: int = 0
    skipped_records: int = 0
    abandoned_bytes: int = 0


def dispatch_rows(
    task: ScanTask, delay_levels: dict[int, int] | None, *, window_bytes: int = WINDOW_BYTES
) -> Iterator[DispatchRow]:
    """The dispatch requests of every record of ``task``, in CommitLog order, as rows.

    A trailing row ``("", -1, offset, skipped, abandoned, 0, 0, "", None, 0)`` reports damage
    skipped (records) and abandoned (bytes) when there was any.
    """
    if task.layout == DLEDGER:
        yield from _entry_dispatch_rows(task, delay_levels, window_bytes)
        return
    base = task.segment_offset
    skipped = abandoned = 0
    stop_at: int | None = None
    with open(task.path, "rb") as f:
        file_size = os.fstat(f.fileno()).st_size
        end = min(task.end, file_size)
        if end <= task.begin:
            return
        with mmap.mmap(f.fileno(), file_size, access=mmap.ACCESS_READ) as mm:
            p = task.begin
            window = window_bytes
            while p < end:
                data = mm[p : min(end, p + window)]
                reqs, used, stop = parse_window(data, base + p, delay_levels)
                for r in reqs:
                    yield _row(r)
                p += used
                window = window_bytes
                if stop is rec.RecordKind.BLANK or stop is rec.RecordKind.END:
                    break
                if stop is rec.RecordKind.CORRUPT:
                    size = int.from_bytes(mm[p : p + 4], "big", signed=True) if p + 4 <= end else 0
                    if size > 0 and p + size <= end:
                        log.error(
                            "record at offset %d does not decode; skipping its %d bytes", base + p, size
                        )
                        skipped += 1
                        p += size
                        continue
                    stop_at = p
                    break
                if not reqs:
                    # the window ends inside a record: read that record whole, or stop at the end
                    size = int.from_bytes(mm[p : p + 4], "big", signed=True) if p + 4 <= end else 0
                    if size <= len(data) or p + size > end:
                        stop_at = p
                        break
                    window = size
    if stop_at is not None:
        abandoned = end - stop_at
        log.error("dispatch of %s stops at position %d: the rest does not decode", task.path, stop_at)
    if skipped or abandoned:
        yield (
            "",
            -1,
            base + (stop_at if stop_at is not None else end),
            skipped,
            abandoned,
            0,
            0,
            "",
            None,
            0,
        )


def _row(r: DispatchRequest) -> DispatchRow:
    return (
        r.topic,
        r.queue_id,
        r.commit_log_offset,
        r.msg_size,
        r.tags_code,
        r.store_timestamp,
        r.consume_queue_offset,
        r.keys,
        r.uniq_key,
        r.sys_flag,
    )


def _entry_dispatch_rows(
    task: ScanTask, delay_levels: dict[int, int] | None, window_bytes: int
) -> Iterator[DispatchRow]:
    """:func:`dispatch_rows` of an entry data file: the record of every entry, parsed alone."""
    walk = WalkResult()
    skipped = 0
    for chunk in iter_entry_chunks(task, walk, chunk_bytes=window_bytes):
        for start in chunk.starts.tolist():
            size = int.from_bytes(chunk.data[start : start + 4], "big", signed=True)
            reqs, _, stop = parse_window(
                chunk.data[start : start + size], chunk.base_offset + start, delay_levels
            )
            if stop is rec.RecordKind.CORRUPT or not reqs:
                log.error("record at offset %d does not decode; skipping it", chunk.base_offset + start)
                skipped += 1
            for r in reqs:
                yield _row(r)
    abandoned = 0
    if walk.stop is StopKind.DAMAGED:
        abandoned = task.segment_offset + task.end - walk.valid_end
        log.error("dispatch of %s stops at offset %d: the rest does not decode", task.path, walk.valid_end)
    if skipped or abandoned:
        yield ("", -1, walk.valid_end, skipped, abandoned, 0, 0, "", None, 0)


def _request(row: DispatchRow) -> DispatchRequest:
    topic, qid, offset, size, tags, store_ts, cq_offset, keys, uniq, sys_flag = row
    return DispatchRequest(topic, qid, offset, size, tags, store_ts, cq_offset, keys, uniq, sys_flag, 0)


class _Checkpoint:
    """Where the index writer records ``indexMsgTimestamp``; the rebuild keeps it in memory."""

    def __init__(self) -> None:
        self.index_msg_timestamp = 0

    def flush(self) -> None:
        return None


class IndexRebuilder:
    """Writes ``consumequeue/`` and ``index/`` under ``out_dir`` from dispatch rows.

    Refuses an output directory that already holds either, so nothing is ever mixed or
    overwritten. ``config`` supplies the file geometry (ConsumeQueue file size, hash slots,
    index entries) and ``message_index_enable``.
    """

    def __init__(self, out_dir: str, config: StoreConfig, *, batch_records: int = 4096) -> None:
        for sub in ("consumequeue", "index"):
            path = os.path.join(out_dir, sub)
            if os.path.exists(path):
                raise StoreError(f"{path} already exists; rebuild-index writes only into a fresh directory")
        os.makedirs(out_dir, exist_ok=True)
        self.config = config = replace(config, store_path_root_dir=out_dir, store_path_commit_log=None)
        self.cq_store = ConsumeQueueStore(config)
        self._now_ms = 0
        self.index: IndexService | None = None
        if config.message_index_enable:
            self.index = IndexService(config, _Checkpoint(), clock_ms=lambda: self._now_ms)
            self.index.load(True)
        self.batch_records = batch_records
        self.summary = DispatchSummary()
        self._pending: list[DispatchRequest] = []
        self._last_offset = -1

    def feed(self, rows: Iterable[DispatchRow]) -> None:
        """Dispatch ``rows`` (CommitLog order across calls)."""
        pending = self._pending
        for row in rows:
            if row[1] < 0:
                self.summary.skipped_records += row[3]
                self.summary.abandoned_bytes += row[4]
                continue
            if row[2] <= self._last_offset:
                raise StoreError(f"dispatch rows out of CommitLog order at offset {row[2]}")
            self._last_offset = row[2]
            pending.append(_request(row))
            if len(pending) >= self.batch_records:
                self._flush_pending()
        self._flush_pending()

    def _flush_pending(self) -> None:
        reqs = self._pending
        if not reqs:
            return
        self._now_ms = reqs[0].store_timestamp
        self.cq_store.put_batch(reqs)
        if self.index is not None:
            self.index.build_index_batch(reqs)
        self.summary.records += len(reqs)
        self._pending = []

    @property
    def queues(self) -> int:
        return len(self.cq_store)

    @property
    def index_files(self) -> list[str]:
        return [f.path for f in self.index.files] if self.index is not None else []

    def close(self) -> None:
        """Make every file durable and unmap it."""
        self._flush_pending()
        self.cq_store.flush(0)
        self.cq_store.shutdown()
        if self.index is not None:
            self.index.flush()
            self.index.shutdown()


__all__ = ["DispatchRow", "DispatchSummary", "IndexRebuilder", "dispatch_rows"]
