"""Structured Streaming reads: per-queue offsets in the checkpoint, admission control,
``availableNow``, new queues and brokers, retention loss, consumer-group progress.

Spark keeps one long-lived :class:`StreamReader` on the driver and calls, per micro-batch::

    latestOffset(start, limit) → end        start = the previous end (from the checkpoint)
    partitions(start, end)     → one QueuePartition per queue range (read() runs in executors)
    commit(end)                → (one batch late) progress as consumerGroup offsets, if set

Offsets are the nested JSON of :mod:`rocketq.spark.offsets` with concrete values; the checkpoint
is the query's position, never the consumer group.

Rules:

* ``latestOffset``: the current max offset of every queue of the topics (topic list or pattern,
  looked up again each time, so queues added to a topic and new brokers are picked up). A queue
  missing from ``start`` is new: it starts at 0, i.e. its earliest message. A queue that left
  the route keeps its offset. ``maxOffsetsPerTrigger`` → ``ReadMaxRows``: the batch admits at
  most that many offsets, split in proportion to each queue's backlog.
* ``availableNow``: :meth:`StreamReader.prepareForTriggerAvailableNow` freezes the max offsets
  of that moment; batches stop there (still rate-limited), queues found later wait for the next
  run.
* ``partitions``: a range whose start is below the queue's min offset lost messages to
  retention. ``failOnDataLoss=true`` fails the batch naming topic, broker, queue and offsets;
  false skips to the min offset with a warning. A new queue silently starts at its min offset.
  Deterministic for a given (start, end), so a batch replayed after a failure reads the same rows
  (unless retention ran in between).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from rocketq.errors import TopicNotExist
from rocketq.spark import cluster
from rocketq.spark.batch import QueuePartition, RangePlan, make_partitions, read_partition
from rocketq.spark.offsets import (
    EARLIEST,
    QueueRef,
    next_end,
    offsets_from_json,
    offsets_to_json,
    plan_stream_ranges,
    resolve_offset,
    spec_offset_for,
)
from rocketq.spark.options import ReadOptions

log = logging.getLogger(__name__)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("rocketq")``."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._target: dict[QueueRef, int] | None = None
        self._latest: dict[QueueRef, int] | None = None

    # -- offsets -----------------------------------------------------------------------------
    def initialOffset(self) -> dict[str, Any]:
        queues = cluster.queue_ranges(self.opts)
        if self.opts.starting_timestamp_ms is not None:
            starts = cluster.offsets_at(self.opts, queues, self.opts.starting_timestamp_ms)
        else:
            starts = {
                ref: resolve_offset(
                    spec_offset_for(self.opts.starting_offsets, ref, EARLIEST), i.min_offset, i.max_offset
                )
                for ref, i in queues.items()
            }
        log.info("rocketq stream starts at %s", starts)
        return offsets_to_json(starts)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        queues = cluster.queue_ranges(self.opts)
        self._target = {ref: info.max_offset for ref, info in queues.items()}
        log.info("rocketq availableNow: reading up to %s", self._target)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        queues = cluster.queue_ranges(self.opts)
        latest = {ref: info.max_offset for ref, info in queues.items()}
        self._latest = latest
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = next_end(
            offsets_from_json(start, what="start offset"),
            latest,
            {ref: info.min_offset for ref, info in queues.items()},
            max_rows=max_rows,
            target=self._target,
        )
        return offsets_to_json(end)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return None if self._latest is None else offsets_to_json(self._latest)

    # -- planning and reading ----------------------------------------------------------------
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        queues = cluster.queue_ranges(self.opts)
        ranges = plan_stream_ranges(
            offsets_from_json(start, what="start offset"),
            offsets_from_json(end, what="end offset"),
            {ref: info.min_offset for ref, info in queues.items()},
            fail_on_data_loss=self.opts.fail_on_data_loss,
        )
        missing = sorted(str(ref) for ref in ranges if ref not in queues)
        if missing:
            raise TopicNotExist(f"queues {', '.join(missing)} have offsets to read but no broker now")
        plan = RangePlan(ranges, {ref: queues[ref].addr for ref in ranges}, self.opts.tags)
        return make_partitions(self.opts, plan)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, QueuePartition)
        yield from read_partition(partition)

    def commit(self, end: dict[str, Any]) -> None:
        group = self.opts.consumer_group
        if group is None:
            return
        offsets = offsets_from_json(end, what="committed offset")
        cluster.commit_offsets(self.opts, group, offsets, cluster.queue_ranges(self.opts))


__all__ = ["StreamReader"]
