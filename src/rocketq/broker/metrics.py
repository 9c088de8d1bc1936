"""The broker's Prometheus metrics: RocketMQ 5's names and labels, and the store's own.

Counting (the hot paths pay no lock per message)::

    send (loop thread)  sent(topic, type or properties, result) → messages_in / throughput_in /
                        (compiled: added up per topic and type;  message_size, per (topic, type)
                        pure: appended to pending_in), folded each 1 s
    pull (loop thread)  pulled(topic, group, n, bytes, queue, next offset)
                                                               → messages_out / throughput_out,
                                                                  and the group's pull offsets
    pop (loop thread)   popped(topic, group, deliveries)      → messages_out / throughput_out
                        (remoting POP_MESSAGE and the gRPC endpoint's ReceiveMessage)
    every request       timed by the broker's dispatch          → rpc_latency by (request code,
                        (Broker._handle_now: rpc.call, compiled   response code)
                        or pure; _handle inline), folded each 1 s
    store put           MessageStore.put_latency, one histogram per calling thread
    store services      group commit, flush, allocation: plain ints of their one thread

Each counter is a plain int in a dict (or list) that one thread writes: the event loop, which
runs every send, pull and pop handler, or one store service thread. A scrape (:meth:`collect`)
copies the loop's counters on the loop, then computes the gauges from existing state in a
worker thread: consumer lag from the store's max offsets and the committed offsets, storage
size from the file system, flush and dispatch lag from the CommitLog positions. Nothing is
sampled in the background.

Gauges per (consumer group, topic), RocketMQ's ``ConsumerLagCalculator``: over the topic's read
queues, lag = max offset − committed offset (an uncommitted queue counts from its min offset),
inflight = pulled − committed (what a consumer holds but has not committed), ready = max −
pulled, lag latency = now − store time of the oldest unconsumed message (0 without lag). The
pairs are those with committed offsets plus the subscriptions of online consumers.

With metrics off the broker creates none of this: no timing, no counting call. The counting of
sends and the request timing are compiled when the C accelerator is in use
(``rocketq._speedups``: SendCounter, RpcTimer; docs/metrics.md, "What it costs"); the pure code
here and in :mod:`rocketq.remoting.rpc_metrics` is the reference, and both count the same.
"""

from __future__ import annotations

import os
import time
from bisect import bisect_left as _bisect_left
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rocketq import speedups
from rocketq.broker.consumer_offset import split_offset_key
from rocketq.errors import ConfigError
from rocketq.message import PROPERTY_DELAY_TIME_LEVEL, PROPERTY_SHARDING_KEY
from rocketq.metrics.exposition import (
    COUNTER,
    GAUGE,
    HISTOGRAM,
    Family,
    Histogram,
    Labels,
    ThreadHistograms,
    add_to_buckets,
    render,
)
from rocketq.metrics.http import MetricsServer
from rocketq.protocol.topic import is_dlq_topic, is_retry_topic, is_system_topic
from rocketq.remoting.rpc_metrics import RpcLatency

if TYPE_CHECKING:
    from rocketq.broker.config import BrokerConfig
    from rocketq.broker.context import BrokerContext
    from rocketq.broker.pop.service import PoppedMessage
    from rocketq.store.commitlog import PutMessageResult
    from rocketq.store.message_store import MessageStore

#: RocketMQ's ``message_size`` buckets (bytes): 1 KiB, 4 KiB, 512 KiB, 1, 2, 4 MiB.
MESSAGE_SIZE_BOUNDS = (1024, 4096, 512 * 1024, 1024 * 1024, 2 * 1024 * 1024, 4 * 1024 * 1024)
#: Bounds (seconds) of the store's put-latency histogram.
PUT_SECONDS_BOUNDS = (0.00001, 0.00005, 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0)

#: RocketMQ ``TopicMessageType.getMetricsValue()``.
NORMAL, FIFO, DELAY, TRANSACTION = "normal", "fifo", "delay", "transaction"
_DELAY_KEYS = frozenset(
    {PROPERTY_DELAY_TIME_LEVEL, "__STARTDELIVERTIME", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS"}
)
#: Properties that make a message other than ``normal``.
TYPED_KEYS = _DELAY_KEYS | {PROPERTY_SHARDING_KEY}
_SYSTEM_GROUP_PREFIX = "cid_rmq_sys_"
#: How often the loop folds what the send path recorded into the counters (BrokerMetrics.fold).
FOLD_INTERVAL_S = 1.0

#: What a send records as its message type: the label itself, or the send's properties (the
#: type is derived from them when folded, off the send path).
SendKind = str | Mapping[str, str]


def message_type(props: Mapping[str, str], half: bool) -> str:
    """The ``message_type`` label of a send (RocketMQ ``BrokerMetricsManager.getMessageType``):
    transaction, else fifo (a sharding key), else delay (a delay level or a delivery time), else
    normal."""
    if half:
        return TRANSACTION
    if TYPED_KEYS.isdisjoint(props):  # the common case, one test
        return NORMAL
    if PROPERTY_SHARDING_KEY in props:
        return FIFO
    if not _DELAY_KEYS.isdisjoint(props):
        return DELAY
    return NORMAL


def _is_system(topic: str, group: str = "") -> str:
    system = is_system_topic(topic) or group.lower().startswith(_SYSTEM_GROUP_PREFIX)
    return "true" if system else "false"


@dataclass(slots=True)
class _LagInput:
    """Loop-thread snapshot of one (group, topic): what the worker thread needs from the store."""

    group: str
    topic: str
    queues: int
    committed: dict[int, int]
    pulled: dict[int, int]


class BrokerMetrics:
    """Counters of one broker and the exposition of everything it measures. ``compiled``: None
    counts sends and times requests with the C accelerator when it is in use, False never, True
    always (see :func:`rocketq.speedups.module_for`)."""

    def __init__(self, config: BrokerConfig, compiled: bool | None = None) -> None:
        self.base: Labels = (
            ("cluster", config.broker_cluster_name),
            ("node_type", "broker"),
            ("node_id", config.broker_name),
        )
        #: (topic, message type) → [messages, bytes, per-bucket counts of message_size…]
        self.messages_in: dict[tuple[str, str], list[int]] = {}
        #: Sends not yet folded into messages_in: (topic, kind, bytes, messages) (pure path).
        self.pending_in: list[tuple[str, SendKind, int, int]] = []
        module = speedups.module_for(compiled)
        #: The compiled counts of sends not yet folded into messages_in (None: pure path).
        self._sends = (
            None
            if module is None
            else module.SendCounter(
                (NORMAL, FIFO, DELAY, TRANSACTION),
                PROPERTY_SHARDING_KEY,
                tuple(sorted(_DELAY_KEYS)),
                MESSAGE_SIZE_BOUNDS,
            )
        )
        #: ``sent(topic, kind, result)``: a send to ``topic`` stored ``result`` (its
        #: PutMessageResult: bytes, messages); ``kind`` is the message type, or the send's
        #: properties to derive it from (at once: they are not kept). The send path's one call.
        self.sent: Callable[[str, SendKind, PutMessageResult], object] = (
            self._sent_pure if self._sends is None else self._sends.sent
        )
        #: (topic, consumer group) → [messages, bytes]
        self.messages_out: dict[tuple[str, str], list[int]] = {}
        #: (consumer group, topic) → queue id → next offset a pull answered with
        self.pull_offsets: dict[tuple[str, str], dict[int, int]] = {}
        self.rpc = RpcLatency(compiled)
        #: (topic, consumer group) → messages sent to the group's DLQ
        self.dlq: dict[tuple[str, str], int] = {}
        self.put_latency = ThreadHistograms(PUT_SECONDS_BOUNDS)

    # -- counting (event loop thread) ---------------------------------------------------------
    def stored(self, topic: str, kind: SendKind, size: int, count: int = 1) -> None:
        """``count`` messages of ``size`` bytes in all were stored for a send to ``topic``;
        ``kind`` is the message type, or the send's properties to derive it from."""
        if self._sends is not None:
            self._sends.stored(topic, kind, size, count)
        else:
            self.pending_in.append((topic, kind, size, count))

    def _sent_pure(self, topic: str, kind: SendKind, result: PutMessageResult) -> None:
        """:attr:`sent` in Python, the reference of the compiled one (result[2]: bytes, [6]:
        messages); the common case of the type is one set test, and the properties are not
        kept (a dict held until the fold would survive garbage collections)."""
        self.pending_in.append(
            (
                topic,
                kind
                if kind.__class__ is str
                else NORMAL
                if TYPED_KEYS.isdisjoint(kind)
                else message_type(kind, False),  # type: ignore[arg-type]
                result[2],
                result[6],
            )
        )

    def fold(self) -> None:
        """Add the sends and request latencies recorded since the last fold to the counters.
        The send path only appends to :attr:`pending_in` (a tuple and a list append per send:
        in the middle of a send every further dict lookup costs several times what it costs
        here, in a tight loop over a batch); the broker folds every FOLD_INTERVAL_S on its loop
        and before every scrape. When the records since the last fold are single messages of
        one topic and type (a second of one producer's traffic, say), the batch is added up
        by whole-list operations (sum, sort, bisect) instead of record by record."""
        self.rpc.fold()
        if self._sends is not None:
            self._fold_compiled(self._sends.drain())
        pending, self.pending_in = self.pending_in, []
        if not pending:
            return
        topics, kinds, sizes, counts = zip(*pending, strict=True)
        n = len(pending)
        if counts.count(1) == n and topics.count(topics[0]) == n and kinds.count(kinds[0]) == n:
            self._add_single_messages(topics[0], kinds[0], sizes)
            return
        table = self.messages_in
        for topic, kind, size, count in pending:
            mtype = kind if isinstance(kind, str) else message_type(kind, False)
            key = (topic, mtype)
            c = table.get(key)
            if c is None:
                c = table[key] = [0] * (len(MESSAGE_SIZE_BOUNDS) + 3)
            c[0] += count
            c[1] += size
            c[2 + _bisect_left(MESSAGE_SIZE_BOUNDS, size // count)] += count

    def _fold_compiled(self, counted: list[tuple[str, str, list[int]]]) -> None:
        """What the compiled SendCounter added up since the last fold: per (topic, type), in
        the order the pairs were first seen, [messages, bytes, per-bucket counts...] (the layout
        of messages_in)."""
        table = self.messages_in
        for topic, mtype, add in counted:
            key = (topic, mtype)
            c = table.get(key)
            if c is None:
                table[key] = add
            else:
                for i, n in enumerate(add):
                    c[i] += n

    def _add_single_messages(self, topic: str, kind: SendKind, sizes: Sequence[int]) -> None:
        """Sends of one message each, all to ``topic`` with message type ``kind``."""
        mtype = kind if isinstance(kind, str) else message_type(kind, False)
        key = (topic, mtype)
        c = self.messages_in.get(key)
        if c is None:
            c = self.messages_in[key] = [0] * (len(MESSAGE_SIZE_BOUNDS) + 3)
        add_to_buckets(c, 2, MESSAGE_SIZE_BOUNDS, sizes)
        c[0] += len(sizes)
        c[1] += sum(sizes)

    def pulled(self, topic: str, group: str, count: int, size: int, queue_id: int, next_offset: int) -> None:
        """A pull answered ``count`` messages (``size`` bytes) of a queue, up to ``next_offset``."""
        key = (topic, group)
        c = self.messages_out.get(key)
        if c is None:
            c = self.messages_out[key] = [0, 0]
        c[0] += count
        c[1] += size
        offsets = self.pull_offsets.get((group, topic))
        if offsets is None:
            offsets = self.pull_offsets[(group, topic)] = {}
        offsets[queue_id] = next_offset

    def popped(self, topic: str, group: str, deliveries: Sequence[PoppedMessage]) -> None:
        """A pop (remoting POP_MESSAGE, or the gRPC endpoint's ReceiveMessage) handed
        ``deliveries`` of ``topic`` to ``group``: each delivery counts, a redelivery again (as
        RocketMQ counts every message a pop answers); bytes are the records' stored sizes."""
        key = (topic, group)
        c = self.messages_out.get(key)
        if c is None:
            c = self.messages_out[key] = [0, 0]
        c[0] += len(deliveries)
        c[1] += sum(item.message.store_size for item in deliveries)

    def sent_to_dlq(self, topic: str, group: str) -> None:
        key = (topic, group)
        self.dlq[key] = self.dlq.get(key, 0) + 1

    # -- scrape -------------------------------------------------------------------------------
    async def collect(self, ctx: BrokerContext) -> list[Family]:
        """Every family: counters copied here (on the loop), gauges from the store read in a
        worker thread."""
        families = self._counter_families()
        lag_inputs = self._lag_inputs(ctx)
        loop_gauges = self._loop_gauges(ctx)
        store_families = await ctx.blocking(self._store_families, ctx.store, lag_inputs)
        return families + loop_gauges + store_families

    def _counter_families(self) -> list[Family]:
        self.fold()
        base = self.base
        m_in = Family("rocketmq_messages_in_total", COUNTER, "Messages stored by sends (count).")
        t_in = Family("rocketmq_throughput_in_total", COUNTER, "Bytes of messages stored by sends.")
        size = Family("rocketmq_message_size", HISTOGRAM, "Size of the messages stored by sends (bytes).")
        for (topic, mtype), c in list(self.messages_in.items()):
            labels = (*base, ("topic", topic), ("message_type", mtype), ("is_system", _is_system(topic)))
            m_in.add(labels, c[0])
            t_in.add(labels, c[1])
            hist = Histogram(MESSAGE_SIZE_BOUNDS)
            hist.counts = c[2:]
            hist.sum = c[1]
            size.add(labels, hist)
        m_out = Family("rocketmq_messages_out_total", COUNTER, "Messages answered to pulls and pops (count).")
        t_out = Family(
            "rocketmq_throughput_out_total", COUNTER, "Bytes of messages answered to pulls and pops."
        )
        for (topic, group), c in list(self.messages_out.items()):
            labels = (*base, *_group_labels(topic, group))
            m_out.add(labels, c[0])
            t_out.add(labels, c[1])
        dlq = Family(
            "rocketmq_send_to_dlq_messages_total", COUNTER, "Messages moved to a dead-letter queue (count)."
        )
        for (topic, group), n in list(self.dlq.items()):
            dlq.add((*base, *_group_labels(topic, group)), n)
        rpc = self.rpc.family(base)
        put = Family(
            "rocketq_store_put_latency_seconds",
            HISTOGRAM,
            "Time a store put takes, the flush wait under SYNC_FLUSH included (seconds).",
        )
        put.add(base, self.put_latency.merged())
        return [m_in, t_in, size, m_out, t_out, dlq, rpc, put]

    def _lag_inputs(self, ctx: BrokerContext) -> list[_LagInput]:
        pairs: set[tuple[str, str]] = set()
        for key in list(ctx.offsets.offset_table):
            topic, group = split_offset_key(key)
            pairs.add((group, topic))
        for group, info in list(ctx.consumers.table.items()):
            for topic in list(info.subscriptions):
                pairs.add((group, topic))
        out = []
        for group, topic in sorted(pairs):
            tc = ctx.topics.select(topic)
            if tc is None:
                continue
            out.append(
                _LagInput(
                    group,
                    topic,
                    tc.read_queue_nums,
                    dict(ctx.offsets.query_offsets(group, topic)),
                    dict(self.pull_offsets.get((group, topic), {})),
                )
            )
        return out

    def _loop_gauges(self, ctx: BrokerContext) -> list[Family]:
        base = self.base
        producers = sum(len(channels) for channels in ctx.producers.table.values())
        consumers = sum(len(info.channels) for info in ctx.consumers.table.values())
        return [
            Family("rocketmq_broker_permission", GAUGE, "Broker permission bits (READ=4, WRITE=2).").add(
                base, ctx.config.broker_permission
            ),
            Family("rocketmq_active_topic_number", GAUGE, "Topics this broker serves (count).").add(
                base, len(ctx.topics)
            ),
            Family(
                "rocketmq_active_subscription_number", GAUGE, "Subscription groups on this broker (count)."
            ).add(base, len(ctx.groups.table)),
            Family("rocketmq_producer_connections", GAUGE, "Producer connections (count).").add(
                base, producers
            ),
            Family("rocketmq_consumer_connections", GAUGE, "Consumer connections (count).").add(
                base, consumers
            ),
        ]

    def _store_families(self, store: MessageStore, lag_inputs: list[_LagInput]) -> list[Family]:
        """Worker thread: consumer lag and storage gauges, and the store services' counters."""
        base = self.base
        now_ms = time.time_ns() // 1_000_000
        lag = Family(
            "rocketmq_consumer_lag_messages", GAUGE, "Messages not yet committed by the group (count)."
        )
        latency = Family(
            "rocketmq_consumer_lag_latency",
            GAUGE,
            "Age of the oldest message the group has not committed (milliseconds).",
        )
        inflight = Family(
            "rocketmq_consumer_inflight_messages", GAUGE, "Messages pulled but not committed (count)."
        )
        ready = Family("rocketmq_consumer_ready_messages", GAUGE, "Messages not yet pulled (count).")
        for item in lag_inputs:
            total_lag = total_inflight = total_ready = 0
            oldest = 0
            for queue_id in range(item.queues):
                max_offset = max(0, store.get_max_offset(item.topic, queue_id))
                min_offset = max(0, store.get_min_offset(item.topic, queue_id))
                committed = max(item.committed.get(queue_id, min_offset), min_offset)
                pulled = max(item.pulled.get(queue_id, committed), committed)
                behind = max(0, max_offset - committed)
                total_lag += behind
                total_inflight += max(0, min(pulled, max_offset) - committed)
                total_ready += max(0, max_offset - pulled)
                if behind:
                    stamp = store.get_message_store_timestamp(item.topic, queue_id, committed)
                    if stamp > 0 and (oldest == 0 or stamp < oldest):
                        oldest = stamp
            labels = (*base, *_group_labels(item.topic, item.group))
            lag.add(labels, total_lag)
            latency.add(labels, max(0, now_ms - oldest) if oldest else 0)
            inflight.add(labels, total_inflight)
            ready.add(labels, total_ready)
        return [lag, latency, inflight, ready, *store_families(store, base)]


async def serve_metrics(
    ctx: BrokerContext, extra: Sequence[Callable[[], Awaitable[list[Family]]]] = ()
) -> MetricsServer:
    """Start ``/metrics`` of the broker of ``ctx`` (its ``metrics`` set) on the configured host
    and port; ``extra`` adds families (a name server's, in ``rocketq serve``)."""
    metrics = ctx.metrics
    assert metrics is not None

    async def collect() -> str:
        families = await metrics.collect(ctx)
        for more in extra:
            families += await more()
        return render(families)

    cfg = ctx.config
    server = MetricsServer(cfg.metrics_host, cfg.metrics_prom_exporter_port, collect)
    try:
        await server.start()
    except OSError as exc:
        raise ConfigError(
            f"cannot serve metrics on {cfg.metrics_host}:{cfg.metrics_prom_exporter_port}: "
            f"{exc.strerror or exc}; choose another metricsPromExporterPort (--metrics-port)"
        ) from None
    return server


def _group_labels(topic: str, group: str) -> Labels:
    retry = "true" if is_retry_topic(topic) or is_dlq_topic(topic) else "false"
    return (
        ("topic", topic),
        ("consumer_group", group),
        ("is_retry", retry),
        ("is_system", _is_system(topic, group)),
    )


def store_families(store: MessageStore, base: Labels) -> list[Family]:
    """RocketMQ's storage gauges and the store's own counters (any thread)."""
    commitlog = store.commitlog
    out = []
    try:
        st = os.statvfs(store.root)
        used = (st.f_blocks - st.f_bfree) * st.f_frsize
    except OSError:
        used = 0
    out.append(
        Family("rocketmq_storage_size", GAUGE, "Bytes used on the file system of the store directory.").add(
            base, used
        )
    )
    out.append(
        Family(
            "rocketmq_storage_flush_behind_bytes", GAUGE, "CommitLog bytes written but not yet flushed."
        ).add(base, max(0, commitlog.max_offset - commitlog.flushed_where))
    )
    out.append(
        Family(
            "rocketmq_storage_dispatch_behind_bytes",
            GAUGE,
            "CommitLog bytes not yet dispatched to consume queues and the index.",
        ).add(base, max(0, store.dispatch_behind_bytes()))
    )
    out.append(
        Family("rocketq_store_commitlog_max_offset_bytes", GAUGE, "CommitLog end (physical offset).").add(
            base, commitlog.max_offset
        )
    )
    out.append(
        Family("rocketq_store_commitlog_min_offset_bytes", GAUGE, "CommitLog start (physical offset).").add(
            base, max(0, commitlog.min_offset)
        )
    )
    out.append(
        Family("rocketq_store_put_failures_total", COUNTER, "Store puts that raised (count).").add(
            base, store.stats.put_failures
        )
    )
    quarantined = list(store.quarantined)
    out.append(
        Family(
            "rocketq_store_quarantined_ranges",
            GAUGE,
            "Damaged CommitLog ranges recovery quarantined and stepped over (count; docs/operations.md).",
        ).add(base, len(quarantined))
    )
    out.append(
        Family(
            "rocketq_store_quarantined_bytes", GAUGE, "Bytes of the quarantined CommitLog ranges (bytes)."
        ).add(base, sum(size for _, size, _ in quarantined))
    )
    out.append(
        Family(
            "rocketq_store_consume_queues_rebuilt_total",
            COUNTER,
            "ConsumeQueues rebuilt from the CommitLog after a unit disagreed with its record (count).",
        ).add(base, store.stats.queues_rebuilt)
    )
    flush = Family(
        "rocketq_store_flush_latency_seconds", HISTOGRAM, "Time one CommitLog flush takes (seconds)."
    )
    flush_seconds = getattr(commitlog.flush_service, "flush_seconds", None)
    if isinstance(flush_seconds, Histogram):
        flush.add(base, flush_seconds)
    out.append(flush)
    group = Family(
        "rocketq_store_group_commit_size",
        HISTOGRAM,
        "Requests made durable by one group-commit round under SYNC_FLUSH (count).",
    )
    if commitlog.group_commit is not None:
        group.add(base, commitlog.group_commit.round_sizes)
    out.append(group)
    allocator = commitlog.allocator
    out.append(
        Family(
            "rocketq_store_segments_allocated_total", COUNTER, "CommitLog segments created ahead of need."
        ).add(base, allocator.created)
    )
    out.append(
        Family(
            "rocketq_store_segment_allocation_failures_total",
            COUNTER,
            "Failed attempts to create a CommitLog segment (count).",
        ).add(base, allocator.failures)
    )
    out.append(
        Family(
            "rocketq_store_segment_allocation_seconds",
            HISTOGRAM,
            "Time to create (and warm, when asked) one CommitLog segment (seconds).",
        ).add(base, allocator.create_seconds)
    )
    out.append(
        Family("rocketq_store_segment_allocations_pending", GAUGE, "Segment creations queued (count).").add(
            base, allocator.pending()
        )
    )
    pool = commitlog.transient_pool
    out.append(
        Family("rocketq_store_write_buffers", GAUGE, "Buffers of the write-buffer pool (0: pool off).").add(
            base, pool.size if pool is not None else 0
        )
    )
    out.append(
        Family("rocketq_store_write_buffers_available", GAUGE, "Write buffers free to borrow (count).").add(
            base, pool.available_buffer_count() if pool is not None else 0
        )
    )
    return out


__all__ = [
    "MESSAGE_SIZE_BOUNDS",
    "PUT_SECONDS_BOUNDS",
    "TYPED_KEYS",
    "BrokerMetrics",
    "message_type",
    "serve_metrics",
    "store_families",
]
