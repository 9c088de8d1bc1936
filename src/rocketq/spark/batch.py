"""Batch reads: plan one input partition per queue range, read it in an executor as Arrow.

Planning (driver side, in Spark's planner worker)::

    queues     = every queue of the topics (topic list or pattern) with min/max offset
    start(q)   = startingTimestamp → first offset stored at/after it
                 else startingOffsets (earliest | latest | JSON, -2/-1) resolved in [min, max]
    end(q)     = endingOffsets (latest | JSON) resolved in [min, max]
    pushed filters (optional) narrow the queues and [start, end) exactly; tag and store-time
      filters narrow the rows
    a range is split into several partitions when minPartitions asks for more tasks

Reading (executor side): :func:`read_partition` pulls ``[start, end)`` from the broker named in
the partition (see :mod:`rocketq.spark.pull`) and yields ``pyarrow.RecordBatch``es of up to
``ROWS_PER_BATCH`` rows. Everything ``read()`` needs is in :class:`QueuePartition`, which is
pickled to the executors. When the broker it names stops answering (a DLedger group's master
killed, say), the partition asks the name server for the broker name's read address again
(master, else a slave: :func:`rocketq.spark.cluster.read_addresses`) and goes on from the next
unread offset there, for up to ``REROUTE_WAIT_S``: a pull is a read, so repeating it is safe, and
every member of a DLedger group serves the same committed messages at the same offsets.

Filters accepted with ``pushFilters=true`` (others are left to Spark)::

    topic, brokerName      = / IN                 → queues dropped
    queueId                = / IN / < <= > >=     → queues dropped
    queueOffset            = / IN / < <= > >=     → range narrowed (IN: to its min..max, rows exact)
    tags                   = / IN                 → rows filtered (combined with subExpression)
    storeTimestamp         > >=                   → start offset searched by time (Spark re-checks)
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition

from rocketq.client.admin import AsyncAdmin
from rocketq.errors import (
    ConnectionClosed,
    RemotingConnectError,
    RemotingTimeout,
    RocketqError,
)
from rocketq.remoting import RemotingClient
from rocketq.spark import cluster
from rocketq.spark.arrow import to_record_batch
from rocketq.spark.offsets import (
    LATEST,
    QueueRef,
    check_data_loss,
    pieces_per_queue,
    resolve_offset,
    spec_offset_for,
    split_range,
)
from rocketq.spark.options import ReadOptions, TlsOptions
from rocketq.spark.pull import read_range

log = logging.getLogger(__name__)

#: Rows per Arrow record batch handed to Spark.
ROWS_PER_BATCH = 8192
#: How long a partition whose broker stopped answering looks for another member of its group.
REROUTE_WAIT_S = 30.0


@dataclass(frozen=True)
class QueuePartition(InputPartition):
    """One Spark input partition: the offsets ``[start, end)`` of one queue."""

    ref: QueueRef
    addr: str
    start: int
    end: int
    tags: frozenset[str] | None
    offsets: frozenset[int] | None
    fail_on_data_loss: bool
    pull_batch_size: int
    request_timeout_ms: int
    keys: tuple[str, str] | None = field(default=None, repr=False)
    tls: TlsOptions | None = None
    #: The name server to find the broker again when ``addr`` stops answering (None: do not).
    name_server: str | None = None


@dataclass
class RangePlan:
    """Per-queue ranges plus row-level restrictions gathered from pushed filters."""

    ranges: dict[QueueRef, tuple[int, int]]
    addrs: dict[QueueRef, str]
    tags: frozenset[str] | None
    offsets: frozenset[int] | None = None


def plan_ranges(opts: ReadOptions, restrict: Restrictions | None = None) -> RangePlan:
    """Resolve starting/ending offsets for every queue (network: name server and brokers)."""
    restrict = restrict or Restrictions()
    queues = {ref: info for ref, info in cluster.queue_ranges(opts).items() if restrict.allows_queue(ref)}
    starts: dict[QueueRef, int]
    if opts.starting_timestamp_ms is not None:
        starts = cluster.offsets_at(opts, queues, opts.starting_timestamp_ms)
    else:
        starts = {
            ref: resolve_offset(spec_offset_for(opts.starting_offsets, ref, -2), i.min_offset, i.max_offset)
            for ref, i in queues.items()
        }
    if restrict.min_store_ms is not None:
        by_time = cluster.offsets_at(opts, queues, restrict.min_store_ms)
        starts = {ref: max(starts[ref], by_time[ref]) for ref in starts}
    ranges: dict[QueueRef, tuple[int, int]] = {}
    for ref, info in queues.items():
        end = resolve_offset(
            spec_offset_for(opts.ending_offsets, ref, LATEST), info.min_offset, info.max_offset
        )
        start = starts[ref]
        if opts.starting_offsets != "earliest" and isinstance(opts.starting_offsets, dict):
            wanted = opts.starting_offsets.get(ref)
            if wanted is not None and wanted >= 0 and opts.starting_timestamp_ms is None:
                start = check_data_loss(
                    ref, wanted, info.min_offset, fail_on_data_loss=opts.fail_on_data_loss, end=end
                ).start
                start = min(start, info.max_offset)
        start, end = restrict.narrow(start, end)
        if start < end:
            ranges[ref] = (start, end)
    tags = opts.tags
    if restrict.tags is not None:
        tags = restrict.tags if tags is None else tags & restrict.tags
    return RangePlan(ranges, {ref: queues[ref].addr for ref in ranges}, tags, restrict.offsets_in)


def make_partitions(opts: ReadOptions, plan: RangePlan) -> list[QueuePartition]:
    """One partition per queue range, more when ``minPartitions`` asks for it."""
    lengths = {ref: end - start for ref, (start, end) in plan.ranges.items()}
    pieces = pieces_per_queue(lengths, opts.min_partitions or 1)
    out: list[QueuePartition] = []
    for ref in sorted(pieces):
        start, end = plan.ranges[ref]
        for lo, hi in split_range(start, end, pieces[ref]):
            out.append(
                QueuePartition(
                    ref=ref,
                    addr=plan.addrs[ref],
                    start=lo,
                    end=hi,
                    tags=plan.tags,
                    offsets=plan.offsets,
                    fail_on_data_loss=opts.fail_on_data_loss,
                    pull_batch_size=opts.pull_batch_size,
                    request_timeout_ms=opts.request_timeout_ms,
                    keys=opts.keys,
                    tls=opts.tls,
                    name_server=opts.name_server,
                )
            )
    return out


async def _read_address_again(part: QueuePartition, failed: str, deadline: float) -> str | None:
    """The read address of ``part``'s broker name as the name server lists it now, once that is
    another than the ``failed`` one; None when none is listed before ``deadline`` (monotonic)."""
    assert part.name_server is not None
    delay = 0.2
    while True:
        try:
            async with AsyncAdmin(
                part.name_server,
                config=cluster.acl_config(part.keys, part.tls),
                timeout_ms=part.request_timeout_ms,
            ) as admin:
                addr = cluster.read_addresses(await admin.topic_route(part.ref.topic)).get(part.ref.broker)
            if addr is not None and addr != failed:
                return addr
        except RocketqError as exc:
            log.info("%s: looking up the broker again: %s", part.ref, exc)
        if time.monotonic() + delay >= deadline:
            return None
        await asyncio.sleep(delay)
        delay = min(2 * delay, 1.0)


# -- reading (executors) ---------------------------------------------------------------------------
def read_partition(part: QueuePartition) -> Iterator[Any]:
    """Yield ``pyarrow.RecordBatch``es with the rows of ``part`` (runs in an executor).

    The pulls run on an event loop in a helper thread; batches come back through a bounded
    queue, so a slow consumer of the iterator holds the pulls back."""
    out: queue.Queue[Any] = queue.Queue(maxsize=4)
    stop = threading.Event()
    done = object()

    def on_loss(lost_from: int, lost_to: int) -> None:
        check_data_loss(part.ref, lost_from, lost_to, fail_on_data_loss=part.fail_on_data_loss)

    async def pump() -> None:
        client = RemotingClient(rpc_hook=cluster.acl_hook(part.keys), ssl=cluster.ssl_context(part.tls))
        pending: list[Any] = []
        addr, position = part.addr, part.start
        deadline: float | None = None
        try:
            while True:
                try:
                    async for messages in read_range(
                        client,
                        addr,
                        part.ref.topic,
                        part.ref.queue_id,
                        position,
                        part.end,
                        batch_size=part.pull_batch_size,
                        timeout_s=part.request_timeout_ms / 1000,
                        on_loss=on_loss,
                    ):
                        position = messages[-1].queue_offset + 1
                        kept = messages
                        if part.tags is not None:
                            kept = [m for m in kept if m.properties.get("TAGS") in part.tags]
                        if part.offsets is not None:
                            kept = [m for m in kept if m.queue_offset in part.offsets]
                        pending.extend(kept)
                        if len(pending) >= ROWS_PER_BATCH:
                            await asyncio.to_thread(out.put, pending)
                            pending = []
                        if stop.is_set():
                            return
                    break
                except (RemotingConnectError, ConnectionClosed, RemotingTimeout) as exc:
                    if part.name_server is None:
                        raise
                    if deadline is None:
                        deadline = time.monotonic() + REROUTE_WAIT_S
                    failed = addr
                    found = await _read_address_again(part, failed, deadline)
                    if found is None:
                        raise
                    addr = found
                    log.warning(
                        "%s: %s stopped answering (%s); reading on from offset %d on %s",
                        part.ref,
                        failed,
                        exc,
                        position,
                        addr,
                    )
            if pending:
                await asyncio.to_thread(out.put, pending)
        finally:
            await client.close()

    def run() -> None:
        try:
            asyncio.run(pump())
        except BaseException as exc:  # handed to the consuming thread
            out.put(exc)
        else:
            out.put(done)

    worker = threading.Thread(target=run, name=f"rocketq-read-{part.ref}", daemon=True)
    worker.start()
    try:
        while True:
            item = out.get()
            if item is done:
                break
            if isinstance(item, BaseException):
                raise item
            yield to_record_batch(part.ref.topic, part.ref.broker, part.ref.queue_id, item)
    finally:
        stop.set()
        while worker.is_alive():
            try:
                out.get(timeout=0.1)
            except queue.Empty:
                pass
        worker.join()


# -- filter pushdown ---------------------------------------------------------------------------------
@dataclass
class Restrictions:
    """What pushed filters allow: queues, an offset range or set, tags, a store-time lower bound."""

    topics: set[str] | None = None
    brokers: set[str] | None = None
    queue_ids: set[int] | None = None
    queue_lo: int | None = None
    queue_hi: int | None = None  # inclusive
    offset_lo: int | None = None
    offset_hi: int | None = None  # exclusive
    offsets_in: frozenset[int] | None = None
    tags: frozenset[str] | None = None
    min_store_ms: int | None = None

    def allows_queue(self, ref: QueueRef) -> bool:
        if self.topics is not None and ref.topic not in self.topics:
            return False
        if self.brokers is not None and ref.broker not in self.brokers:
            return False
        if self.queue_ids is not None and ref.queue_id not in self.queue_ids:
            return False
        if self.queue_lo is not None and ref.queue_id < self.queue_lo:
            return False
        return not (self.queue_hi is not None and ref.queue_id > self.queue_hi)

    def narrow(self, start: int, end: int) -> tuple[int, int]:
        if self.offset_lo is not None:
            start = max(start, self.offset_lo)
        if self.offset_hi is not None:
            end = min(end, self.offset_hi)
        if self.offsets_in is not None:
            if not self.offsets_in:
                return start, start
            start = max(start, min(self.offsets_in))
            end = min(end, max(self.offsets_in) + 1)
        return start, end


def _restrict_set(current: set[Any] | None, values: set[Any]) -> set[Any]:
    return values if current is None else current & values


def _int_values(value: Any) -> list[int] | None:
    values = value if isinstance(value, tuple | list) else (value,)
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return [int(v) for v in values]
    return None


def apply_filter(r: Restrictions, column: str, op: str, value: Any) -> bool:
    """Fold one ``column op value`` predicate into ``r``; False when it cannot be pushed.
    ``op`` is one of ``= in < <= > >=``."""
    if column in ("topic", "brokerName", "tags") and op in ("=", "in"):
        values = list(value) if op == "in" else [value]
        if not all(isinstance(v, str) for v in values):
            return False
        if column == "topic":
            r.topics = _restrict_set(r.topics, set(values))
        elif column == "brokerName":
            r.brokers = _restrict_set(r.brokers, set(values))
        else:
            r.tags = frozenset(_restrict_set(None if r.tags is None else set(r.tags), set(values)))
        return True
    if column in ("queueId", "queueOffset"):
        ints = _int_values(value)
        if ints is None:
            return False
        if op in ("=", "in"):
            if column == "queueId":
                r.queue_ids = _restrict_set(r.queue_ids, set(ints))
            else:
                merged = _restrict_set(None if r.offsets_in is None else set(r.offsets_in), set(ints))
                r.offsets_in = frozenset(merged)
            return True
        v = ints[0]
        lo, hi = {"<": (None, v - 1), "<=": (None, v), ">": (v + 1, None), ">=": (v, None)}[op]
        if column == "queueId":
            if lo is not None:
                r.queue_lo = lo if r.queue_lo is None else max(r.queue_lo, lo)
            if hi is not None:
                r.queue_hi = hi if r.queue_hi is None else min(r.queue_hi, hi)
        else:
            if lo is not None:
                r.offset_lo = lo if r.offset_lo is None else max(r.offset_lo, lo)
            if hi is not None:
                r.offset_hi = hi + 1 if r.offset_hi is None else min(r.offset_hi, hi + 1)
        return True
    return False


_OPS = {
    "EqualTo": "=",
    "In": "in",
    "LessThan": "<",
    "LessThanOrEqual": "<=",
    "GreaterThan": ">",
    "GreaterThanOrEqual": ">=",
}


# -- the readers -------------------------------------------------------------------------------------
class BatchReader(DataSourceReader):
    """``spark.read.format("rocketq")`` without filter pushdown."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self.restrictions = Restrictions()

    def partitions(self) -> Sequence[InputPartition]:
        plan = plan_ranges(self.opts, self.restrictions)
        parts = make_partitions(self.opts, plan)
        log.info("rocketq batch read: %d partitions over %d queues", len(parts), len(plan.ranges))
        return parts

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, QueuePartition)
        yield from read_partition(partition)


class FilteringBatchReader(BatchReader):
    """The batch reader with filter pushdown (option ``pushFilters=true``)."""

    def pushFilters(self, filters: list[Any]) -> Iterator[Any]:
        for f in filters:
            name = type(f).__name__
            attribute: tuple[str, ...] = tuple(getattr(f, "attribute", ()))
            column = attribute[0] if len(attribute) == 1 else None
            op = _OPS.get(name)
            if column == "storeTimestamp" and op in (">", ">="):
                ms = _timestamp_ms(f.value)
                if ms is not None:
                    low = self.restrictions.min_store_ms
                    self.restrictions.min_store_ms = ms if low is None else max(low, ms)
                yield f  # used to skip ahead only; Spark still applies it
                continue
            if column is None or op is None or not apply_filter(self.restrictions, column, op, f.value):
                yield f


def _timestamp_ms(value: Any) -> int | None:
    timestamp = getattr(value, "timestamp", None)
    if timestamp is None:
        return None
    return int(timestamp() * 1000)


def make_reader(opts: ReadOptions) -> BatchReader:
    """The batch reader for ``opts`` (with filter pushdown when ``pushFilters=true``)."""
    return FilteringBatchReader(opts) if opts.push_filters else BatchReader(opts)


__all__ = [
    "BatchReader",
    "FilteringBatchReader",
    "QueuePartition",
    "Restrictions",
    "apply_filter",
    "make_partitions",
    "make_reader",
    "plan_ranges",
    "read_partition",
]
