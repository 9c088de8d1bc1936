"""Segment scans of a stopped store: task planning and column-oriented record parsing.

Pure Python, NumPy and PyArrow; nothing here needs Spark, so the same code serves the Spark jobs
(one call per task, in the executors), the single-process baseline of the benchmark and the unit
tests.

The planning (:mod:`~rocketq.spark.jobs.scan_plan`), the walk over a task
(:mod:`~rocketq.spark.jobs.scan_walk`) and the column-wise decoding with its Arrow form
(:mod:`~rocketq.spark.jobs.scan_columns`) have modules of their own; this one holds the
whole-task helpers the jobs call (:func:`verify_task`, :func:`export_batches`,
:func:`stats_batch`, :func:`count_records`) and names everything the jobs and tests use.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import pyarrow as pa

from rocketq.protocol import record as rec
from rocketq.spark.jobs.scan_columns import (
    _TS,
    EXPORT_COLUMNS,
    EXPORT_DDL,
    EXPORT_SCHEMA,
    RecordColumns,
    _timestamps,
    decode_chunk,
    offset_msg_ids,
    properties_map,
    select_rows,
    to_export_batch,
)
from rocketq.spark.jobs.scan_entries import iter_entry_chunks
from rocketq.spark.jobs.scan_plan import (
    COMMITLOG,
    DLEDGER,
    ScanTask,
    Segment,
    commitlog_dir,
    dledger_data_dir,
    hop_boundaries,
    list_segments,
    plan_tasks,
)
from rocketq.spark.jobs.scan_walk import DEFAULT_CHUNK_BYTES, Chunk, Damage, StopKind, WalkResult, iter_chunks
from rocketq.store.record_scan import QUARANTINE_TOPIC


@dataclass(slots=True)
class TaskReport:
    """What a verify pass over one task found."""

    task: ScanTask
    records: int = 0
    record_bytes: int = 0
    walk: WalkResult = field(default_factory=WalkResult)
    #: (offset, size) of each filler record recovery wrote over a quarantined damaged range
    #: (``store/recovery.py``): not counted as records, not damage.
    quarantined: list[tuple[int, int]] = field(default_factory=list)

    @property
    def damage(self) -> list[Damage]:
        return self.walk.damage


def iter_columns(
    task: ScanTask,
    walk: WalkResult,
    *,
    check_crc: bool = False,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> Iterator[RecordColumns]:
    """Decoded columns of every sound record of ``task``, chunk by chunk. Damage (and, with
    ``check_crc``, body CRC mismatches) goes to ``walk.damage``; records with a wrong CRC are
    still returned. A DLedger entry data file is walked entry by entry (:mod:`.scan_entries`)."""
    seg = task.segment_name
    walker = iter_entry_chunks if task.layout == DLEDGER else iter_chunks
    for chunk in walker(task, walk, chunk_bytes=chunk_bytes):
        cols, cut = decode_chunk(chunk, walk.damage, seg)
        if check_crc and len(cols):
            for i in cols.crc_mismatches().tolist():
                off = int(cols.offset[i])
                s = int(cols.body_start[i])
                stored = int(cols.body_crc[i])
                actual = zlib.crc32(memoryview(cols.data)[s : s + int(cols.body_length[i])]) & 0x7FFFFFFF
                walk.damage.append(
                    Damage(
                        off,
                        seg,
                        off - task.segment_offset,
                        f"body CRC mismatch: stored {stored}, computed {actual}",
                        True,
                    )
                )
        if len(cols):
            yield cols
        if cut is not None:
            # the walk went past a record that does not add up: nothing after it is trusted
            walk.stop = StopKind.DAMAGED
            walk.valid_end = walk.stop_offset = chunk.base_offset + cut
            walk.blank_offset = None
            walk.damage[:] = [d for d in walk.damage if d.recoverable or d.offset <= walk.valid_end]
            return


_FILLER_TOPIC = QUARANTINE_TOPIC.encode()


def quarantine_fillers(cols: RecordColumns) -> list[tuple[int, int]]:
    """(offset, size) of the filler records among ``cols``: ROLLBACK records of the quarantine
    topic, which recovery writes over a damaged range it skipped."""
    rollback = np.flatnonzero((cols.sys_flag & rec.TRANSACTION_MASK) == rec.TRANSACTION_ROLLBACK_TYPE)
    return [
        (int(cols.offset[i]), int(cols.size[i]))
        for i in rollback.tolist()
        if cols.topic_raw[i].as_py() == _FILLER_TOPIC
    ]


def verify_task(task: ScanTask, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> TaskReport:
    """Parse every record of ``task`` with structure and body CRC checks."""
    report = TaskReport(task)
    for cols in iter_columns(task, report.walk, check_crc=True, chunk_bytes=chunk_bytes):
        fillers = quarantine_fillers(cols)
        report.quarantined += fillers
        report.records += len(cols) - len(fillers)
        report.record_bytes += int(cols.size.sum(dtype=np.int64)) - sum(size for _, size in fillers)
    report.walk.damage.sort(key=lambda d: d.offset)
    return report


def export_batches(
    task: ScanTask,
    *,
    topics: frozenset[str] | None = None,
    begin_ms: int | None = None,
    end_ms: int | None = None,
    broker_name: str | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> Iterator[pa.RecordBatch]:
    """Export batches of ``task``'s records that pass the filters."""
    walk = WalkResult()
    for cols in iter_columns(task, walk, chunk_bytes=chunk_bytes):
        picked = select_rows(cols, topics=topics, begin_ms=begin_ms, end_ms=end_ms)
        if len(picked):
            yield to_export_batch(picked, broker_name)


STATS_SCHEMA: Final = pa.schema(
    [
        ("topic", pa.string()),
        ("queueId", pa.int32()),
        ("hour", _TS),
        ("messages", pa.int64()),
        ("bytes", pa.int64()),
        ("bodyBytes", pa.int64()),
    ]
)


#: :data:`STATS_SCHEMA` as a Spark DDL string.
STATS_DDL: Final = (
    "topic string, queueId int, hour timestamp, messages bigint, bytes bigint, bodyBytes bigint"
)


def stats_batch(task: ScanTask, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> pa.RecordBatch:
    """Messages, record bytes and body bytes per (topic, queue id, hour of store time) of one task."""
    parts: list[pa.Table] = []
    walk = WalkResult()
    for cols in iter_columns(task, walk, chunk_bytes=chunk_bytes):
        hour = (cols.store_timestamp // 3_600_000) * 3_600_000
        parts.append(
            pa.table(
                {
                    "topic": cols.topics(),
                    "queueId": pa.array(cols.queue_id, type=pa.int32()),
                    "hour": pa.array(hour, type=pa.int64()),
                    "size": pa.array(cols.size.astype(np.int64)),
                    "body": pa.array(cols.body_length.astype(np.int64)),
                }
            )
        )
    if not parts:
        return _empty_stats()
    table = pa.concat_tables(parts)
    agg = table.group_by(["topic", "queueId", "hour"], use_threads=False).aggregate(
        [("size", "count"), ("size", "sum"), ("body", "sum")]
    )
    return pa.RecordBatch.from_arrays(
        [
            agg.column("topic").combine_chunks(),
            agg.column("queueId").combine_chunks(),
            _timestamps(np.asarray(agg.column("hour"))),
            agg.column("size_count").combine_chunks().cast(pa.int64()),
            agg.column("size_sum").combine_chunks().cast(pa.int64()),
            agg.column("body_sum").combine_chunks().cast(pa.int64()),
        ],
        schema=STATS_SCHEMA,
    )


def _empty_stats() -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in STATS_SCHEMA], schema=STATS_SCHEMA)


def count_records(task: ScanTask, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> int:
    """Number of sound records of ``task`` (walk and structure checks only)."""
    walk = WalkResult()
    return sum(len(c) for c in iter_columns(task, walk, chunk_bytes=chunk_bytes))


__all__ = [
    "COMMITLOG",
    "DEFAULT_CHUNK_BYTES",
    "DLEDGER",
    "EXPORT_COLUMNS",
    "EXPORT_DDL",
    "EXPORT_SCHEMA",
    "STATS_DDL",
    "STATS_SCHEMA",
    "Chunk",
    "Damage",
    "RecordColumns",
    "ScanTask",
    "Segment",
    "StopKind",
    "TaskReport",
    "WalkResult",
    "commitlog_dir",
    "count_records",
    "decode_chunk",
    "dledger_data_dir",
    "export_batches",
    "hop_boundaries",
    "iter_chunks",
    "iter_columns",
    "iter_entry_chunks",
    "list_segments",
    "offset_msg_ids",
    "plan_tasks",
    "properties_map",
    "select_rows",
    "stats_batch",
    "to_export_batch",
    "verify_task",
]
