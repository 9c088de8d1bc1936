"""Spark jobs over the CommitLog of a stopped store: verify, export, stats, rebuild-index.

Every job plans its tasks in the driver (:func:`rocketq.spark.jobs.scan.plan_tasks`: one per
segment, or per proven byte range of a large segment), runs one Spark task per planned range, and
reads the segment files directly from the executors, so the store directory must be readable by
them (a local or shared file system). ::

    job            Spark side                                   driver side
    verify         RDD, one partition per task → TaskReport     merge per segment, cross-segment checks
    export         mapInArrow → Arrow batches → Parquet         count rows
    stats          mapInArrow → partial aggregates → groupBy    ordered DataFrame
    rebuild-index  RDD → dispatch rows, streamed in order       ConsumeQueue and index writers

Progress: each task reports ``(1, bytes)`` to an accumulator (:mod:`.progress`).

The directory must not be in use: a rocketq store's ``lock`` is checked (a running store holds
it); an ``abort`` file (the last run did not shut down cleanly) is reported by ``verify``.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from rocketq.config import StoreConfig
from rocketq.errors import InvalidParameter, StoreLocked
from rocketq.store.dispatch import parse_delay_levels

from . import scan
from .progress import JobProgress, ProgressCallback, stderr_printer
from .rebuild import DispatchRow, IndexRebuilder, dispatch_rows
from .scan import Damage, ScanTask, StopKind

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

Progressish = bool | ProgressCallback | None


# -- helpers -----------------------------------------------------------------------------------------
def _progress_callback(progress: Progressish) -> ProgressCallback | None:
    if progress is True:
        return stderr_printer()
    if progress is False or progress is None:
        return None
    return progress


def check_stopped(store_dir: str) -> None:
    """Raise :class:`StoreLocked` when a running rocketq store holds ``<store_dir>/lock``."""
    path = os.path.join(store_dir, "lock")
    if not os.path.isfile(path):
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StoreLocked(
                f"store directory {store_dir} is in use (lock held); stop the broker before running jobs"
            ) from None
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def plan(store_dir: str, split_bytes: int | None = None) -> list[ScanTask]:
    """The tasks a job over ``store_dir`` runs (see :func:`scan.plan_tasks`)."""
    check_stopped(store_dir)
    return scan.plan_tasks(scan.list_segments(store_dir), split_bytes=split_bytes)


def _task_rdd(spark: SparkSession, tasks: Sequence[ScanTask]) -> Any:
    return spark.sparkContext.parallelize([t.to_json() for t in tasks], max(1, len(tasks)))


def _task_frame(spark: SparkSession, tasks: Sequence[ScanTask]) -> DataFrame:
    """A one-column DataFrame (``task`` JSON), exactly one task per partition.

    Built on the JVM alone: ``range(n)`` in ``n`` partitions holds id ``i`` in partition ``i``,
    and ``element_at`` picks task ``i``'s JSON from a literal array. (A DataFrame made from a
    Python RDD needs a Python worker per task just to unpickle its one row, on top of the
    worker that scans; on two cores that extra process competes with the scan.)"""
    from pyspark.sql import functions as F  # noqa: PLC0415 - the module imports without a JVM

    n = max(1, len(tasks))
    texts = F.array(*(F.lit(json.dumps(t.to_json())) for t in tasks)) if tasks else F.array(F.lit(""))
    frame = spark.range(0, n, 1, n).select(F.element_at(texts, (F.col("id") + 1).cast("int")).alias("task"))
    return frame if tasks else frame.limit(0)


def _tasks_of(batches: Iterator[pa.RecordBatch]) -> Iterator[ScanTask]:
    for batch in batches:
        for text in batch.column(0).to_pylist():
            yield ScanTask.from_json(json.loads(text))


# -- read / export -----------------------------------------------------------------------------------
def _export_partition(
    options: dict[str, Any], accumulator: Any, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    topics = frozenset(options["topics"]) if options["topics"] is not None else None
    for task in _tasks_of(batches):
        yield from scan.export_batches(
            task,
            topics=topics,
            begin_ms=options["begin_ms"],
            end_ms=options["end_ms"],
            broker_name=options["broker_name"],
        )
        accumulator.add((1, task.size_bytes))


def read_commitlog(
    spark: SparkSession,
    store_dir: str,
    *,
    topics: Sequence[str] | None = None,
    begin_ms: int | None = None,
    end_ms: int | None = None,
    broker_name: str | None = None,
    split_bytes: int | None = None,
    progress: JobProgress | None = None,
    tasks: Sequence[ScanTask] | None = None,
) -> DataFrame:
    """The records of a store's CommitLog as a DataFrame with the export columns
    (:data:`scan.EXPORT_SCHEMA`), filtered by topics and store time ``[begin_ms, end_ms)``.
    Lazy: nothing is read until an action runs."""
    if begin_ms is not None and end_ms is not None and end_ms < begin_ms:
        raise InvalidParameter(f"end time {end_ms} ms is before begin time {begin_ms} ms")
    if topics is not None and not topics:
        raise InvalidParameter("topics is empty; pass None to export every topic")
    if tasks is None:
        tasks = plan(store_dir, split_bytes)
    if progress is None:
        progress = JobProgress(spark.sparkContext, "read", len(tasks), sum(t.size_bytes for t in tasks), None)
    options = {
        "topics": sorted(topics) if topics is not None else None,
        "begin_ms": begin_ms,
        "end_ms": end_ms,
        "broker_name": broker_name,
    }
    fn = functools.partial(_export_partition, options, progress.accumulator)
    return _task_frame(spark, tasks).mapInArrow(fn, scan.EXPORT_DDL)


@dataclass(frozen=True, slots=True)
class ExportSummary:
    path: str
    rows: int
    tasks: int
    bytes_scanned: int
    elapsed_s: float

    def text(self) -> str:
        return (
            f"exported {self.rows} messages to {self.path} from {self.bytes_scanned / (1 << 20):.1f} MiB "
            f"of CommitLog in {self.tasks} tasks, {self.elapsed_s:.1f} s"
        )


def export(
    spark: SparkSession,
    store_dir: str,
    out_path: str,
    *,
    topics: Sequence[str] | None = None,
    begin_ms: int | None = None,
    end_ms: int | None = None,
    broker_name: str | None = None,
    mode: str = "errorifexists",
    split_bytes: int | None = None,
    progress: Progressish = False,
) -> ExportSummary:
    """Write the store's messages (optionally only ``topics`` and store times in
    ``[begin_ms, end_ms)``) to Parquet at ``out_path`` (one file per task at most)."""
    tasks = plan(store_dir, split_bytes)
    total = sum(t.size_bytes for t in tasks)
    with JobProgress(spark.sparkContext, "export", len(tasks), total, _progress_callback(progress)) as job:
        rows_acc = spark.sparkContext.accumulator(0)
        df = read_commitlog(
            spark,
            store_dir,
            topics=topics,
            begin_ms=begin_ms,
            end_ms=end_ms,
            broker_name=broker_name,
            progress=job,
            tasks=tasks,
        )
        counted = df.mapInArrow(functools.partial(_count_rows, rows_acc), scan.EXPORT_DDL)
        counted.write.mode(mode).parquet(out_path)
    return ExportSummary(out_path, int(rows_acc.value), len(tasks), total, job.elapsed_s)


def _count_rows(accumulator: Any, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        accumulator.add(batch.num_rows)
        yield batch


# -- stats ---------------------------------------------------------------------------------------
def _stats_partition(accumulator: Any, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for task in _tasks_of(batches):
        out = scan.stats_batch(task)
        accumulator.add((1, task.size_bytes))
        if out.num_rows:
            yield out


def stats(
    spark: SparkSession, store_dir: str, *, split_bytes: int | None = None, progress: Progressish = False
) -> DataFrame:
    """Messages, record bytes and body bytes per topic, queue id and hour of store time, as a
    DataFrame ordered by those keys (columns of :data:`scan.STATS_SCHEMA`). Computed when
    called; the result is cached."""
    from pyspark.sql import functions as F  # noqa: PLC0415 - the module imports without a JVM

    tasks = plan(store_dir, split_bytes)
    total = sum(t.size_bytes for t in tasks)
    with JobProgress(spark.sparkContext, "stats", len(tasks), total, _progress_callback(progress)) as job:
        partial = _task_frame(spark, tasks).mapInArrow(
            functools.partial(_stats_partition, job.accumulator), scan.STATS_DDL
        )
        result = (
            partial.groupBy("topic", "queueId", "hour")
            .agg(
                F.sum("messages").cast("long").alias("messages"),
                F.sum("bytes").cast("long").alias("bytes"),
                F.sum("bodyBytes").cast("long").alias("bodyBytes"),
            )
            .orderBy("topic", "queueId", "hour")
            .cache()
        )
        result.count()
    return result


# -- verify ----------------------------------------------------------------------------------------
@dataclass(slots=True)
class SegmentReport:
    """What ``verify`` found in one segment."""

    segment: str
    start_offset: int
    size_bytes: int
    records: int = 0
    record_bytes: int = 0
    #: How the data of the segment ends: BLANK marker, zeros, exactly full, or damage.
    end_kind: str = ""
    #: CommitLog offset after which nothing valid follows in this segment.
    valid_end: int = 0
    blank_offset: int | None = None
    damage: list[Damage] = field(default_factory=list)
    #: (offset, size) of each damaged range recovery quarantined (a filler record in its place).
    quarantined: list[tuple[int, int]] = field(default_factory=list)
    #: :data:`scan.COMMITLOG`, or :data:`scan.DLEDGER` for an entry data file of a DLedger store.
    layout: str = scan.COMMITLOG

    @property
    def ok(self) -> bool:
        return not self.damage


@dataclass(slots=True)
class VerifyReport:
    store_dir: str
    segments: list[SegmentReport]
    tasks: int
    elapsed_s: float
    unclean_shutdown: bool

    @property
    def damage(self) -> list[Damage]:
        return sorted((d for s in self.segments for d in s.damage), key=lambda d: d.offset)

    @property
    def ok(self) -> bool:
        return not self.damage

    @property
    def records(self) -> int:
        return sum(s.records for s in self.segments)

    @property
    def quarantined(self) -> list[tuple[int, int]]:
        """(offset, size) of every range recovery quarantined, in offset order."""
        return sorted(q for s in self.segments for q in s.quarantined)

    def summary(self) -> str:
        lines = [
            f"verified {len(self.segments)} segments of {self.store_dir} in {self.tasks} tasks, "
            f"{self.elapsed_s:.1f} s: {self.records} records, {len(self.damage)} damaged places"
        ]
        if self.unclean_shutdown:
            lines.append("note: an abort file is present: the store did not shut down cleanly")
        for s in self.segments:
            blank = f", BLANK at {s.blank_offset}" if s.blank_offset is not None else ""
            name = s.segment if s.layout == scan.COMMITLOG else f"{s.segment} (DLedger entries)"
            lines.append(
                f"  {name}: {s.records} records, {s.record_bytes} B, ends: {s.end_kind}{blank}, "
                f"valid data to offset {s.valid_end}"
            )
            for offset, size in s.quarantined:
                lines.append(f"    QUARANTINED at offset {offset}: {size} B recovery skipped (quarantine/)")
            for d in s.damage:
                after = "" if d.recoverable else "; nothing valid follows in this segment"
                lines.append(f"    DAMAGE at offset {d.offset} (position {d.position}): {d.reason}{after}")
        lines.append("OK" if self.ok else f"DAMAGED: first damage at offset {self.damage[0].offset}")
        return "\n".join(lines)

    def to_dataframe(self, spark: SparkSession) -> DataFrame:
        """One row per damaged place (segment, offset, position, reason, recoverable)."""
        rows = [(d.segment, d.offset, d.position, d.reason, d.recoverable) for d in self.damage]
        return spark.createDataFrame(
            rows, "segment string, offset long, position long, reason string, recoverable boolean"
        )


def _verify_partition(accumulator: Any, items: Iterator[dict[str, Any]]) -> Iterator[scan.TaskReport]:
    for obj in items:
        task = ScanTask.from_json(obj)
        report = scan.verify_task(task)
        accumulator.add((1, task.size_bytes))
        yield report


def _merge_reports(segments: list[scan.Segment], reports: list[scan.TaskReport]) -> list[SegmentReport]:
    by_path: dict[str, list[scan.TaskReport]] = {}
    for r in sorted(reports, key=lambda r: (r.task.segment_offset, r.task.begin)):
        by_path.setdefault(r.task.path, []).append(r)
    out: list[SegmentReport] = []
    for i, seg in enumerate(segments):
        sr = SegmentReport(os.path.basename(seg.path), seg.start_offset, seg.size_bytes, layout=seg.layout)
        for r in by_path.get(seg.path, []):
            sr.records += r.records
            sr.record_bytes += r.record_bytes
            sr.damage.extend(r.damage)
            sr.quarantined.extend(r.quarantined)
            sr.end_kind = r.walk.stop.value
            sr.valid_end = r.walk.valid_end
            sr.blank_offset = r.walk.blank_offset
            if r.walk.stop is StopKind.DAMAGED and not r.task.to_segment_end:
                break  # later ranges start at boundaries proven before the damage; keep the first break
        is_last = i == len(segments) - 1
        if not is_last:
            nxt = segments[i + 1]
            if seg.start_offset + seg.size_bytes != nxt.start_offset:
                sr.damage.append(
                    Damage(
                        seg.start_offset + seg.size_bytes,
                        sr.segment,
                        seg.size_bytes,
                        f"segment ends at offset {seg.start_offset + seg.size_bytes} but the next one "
                        f"starts at {nxt.start_offset}",
                        False,
                    )
                )
            if sr.end_kind == StopKind.END.value:
                sr.damage.append(
                    Damage(
                        sr.valid_end,
                        sr.segment,
                        sr.valid_end - seg.start_offset,
                        "data ends with zeros before the end of the segment but a later segment exists "
                        "(no end-of-segment BLANK marker)",
                        False,
                    )
                )
        sr.damage.sort(key=lambda d: d.offset)
        out.append(sr)
    return out


def verify(
    spark: SparkSession, store_dir: str, *, split_bytes: int | None = None, progress: Progressish = False
) -> VerifyReport:
    """Check every record of the CommitLog: magic, size, structure, PHYSICALOFFSET, body CRC; and
    that segments are contiguous and every segment but the last ends with a BLANK marker."""
    check_stopped(store_dir)
    segments = scan.list_segments(store_dir)
    tasks = scan.plan_tasks(segments, split_bytes=split_bytes)
    total = sum(t.size_bytes for t in tasks)
    with JobProgress(spark.sparkContext, "verify", len(tasks), total, _progress_callback(progress)) as job:
        reports: list[scan.TaskReport] = (
            _task_rdd(spark, tasks)
            .mapPartitions(functools.partial(_verify_partition, job.accumulator))
            .collect()
        )
    return VerifyReport(
        store_dir,
        _merge_reports(segments, reports),
        len(tasks),
        job.elapsed_s,
        os.path.exists(os.path.join(store_dir, "abort")),
    )


# -- rebuild-index ----------------------------------------------------------------------------------
def _dispatch_partition(
    delay_levels: dict[int, int], accumulator: Any, items: Iterator[dict[str, Any]]
) -> Iterator[DispatchRow]:
    for obj in items:
        task = ScanTask.from_json(obj)
        yield from dispatch_rows(task, delay_levels)
        accumulator.add((1, task.size_bytes))


@dataclass(frozen=True, slots=True)
class RebuildSummary:
    out_dir: str
    records: int
    queues: int
    index_files: list[str]
    skipped_records: int
    abandoned_bytes: int
    tasks: int
    elapsed_s: float

    def text(self) -> str:
        text = (
            f"rebuilt {self.queues} ConsumeQueues and {len(self.index_files)} index files in {self.out_dir} "
            f"from {self.records} records ({self.tasks} tasks, {self.elapsed_s:.1f} s)"
        )
        if self.skipped_records or self.abandoned_bytes:
            text += (
                f"; skipped {self.skipped_records} records that do not decode and "
                f"{self.abandoned_bytes} B that cannot be parsed"
            )
        return text


def rebuild_index(
    spark: SparkSession,
    store_dir: str,
    out_dir: str,
    *,
    config: StoreConfig | None = None,
    split_bytes: int | None = None,
    progress: Progressish = False,
) -> RebuildSummary:
    """Write ``consumequeue/`` and ``index/`` into ``out_dir`` from the CommitLog of
    ``store_dir``, as the broker's dispatcher would (:mod:`.rebuild`). ``config`` gives the file
    geometry (``mapped_file_size_consume_queue``, ``max_hash_slot_num``, ``max_index_num``),
    ``message_index_enable`` and ``message_delay_level``; defaults are RocketMQ's."""
    config = config or StoreConfig()
    tasks = plan(store_dir, split_bytes)
    total = sum(t.size_bytes for t in tasks)
    delay_levels = parse_delay_levels(config.message_delay_level)
    rebuilder = IndexRebuilder(out_dir, config)
    try:
        with JobProgress(
            spark.sparkContext, "rebuild-index", len(tasks), total, _progress_callback(progress)
        ) as job:
            rows = (
                _task_rdd(spark, tasks)
                .mapPartitions(functools.partial(_dispatch_partition, delay_levels, job.accumulator))
                .toLocalIterator(prefetchPartitions=True)
            )
            rebuilder.feed(rows)
        index_files = rebuilder.index_files
    finally:
        rebuilder.close()
    s = rebuilder.summary
    return RebuildSummary(
        out_dir,
        s.records,
        rebuilder.queues,
        index_files,
        s.skipped_records,
        s.abandoned_bytes,
        len(tasks),
        job.elapsed_s,
    )


def stats_summary(rows: Sequence[Any]) -> str:
    """Totals per topic from collected ``stats`` rows."""
    totals: dict[str, list[int]] = {}
    for r in rows:
        t = totals.setdefault(r["topic"], [0, 0, 0])
        t[0] += r["messages"]
        t[1] += r["bytes"]
        t[2] += r["bodyBytes"]
    lines = [f"{'topic':<40} {'messages':>12} {'bytes':>14} {'body bytes':>14}"]
    for topic in sorted(totals):
        m, b, bb = totals[topic]
        lines.append(f"{topic:<40} {m:>12} {b:>14} {bb:>14}")
    lines.append(
        f"{'total':<40} {sum(t[0] for t in totals.values()):>12} "
        f"{sum(t[1] for t in totals.values()):>14} {sum(t[2] for t in totals.values()):>14}"
    )
    return "\n".join(lines)


__all__ = [
    "ExportSummary",
    "RebuildSummary",
    "SegmentReport",
    "VerifyReport",
    "check_stopped",
    "export",
    "plan",
    "read_commitlog",
    "rebuild_index",
    "stats",
    "stats_summary",
    "verify",
]
