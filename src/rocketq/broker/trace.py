"""Message traces written by the broker (``brokerTraceEnable``; docs/operations.md "Message traces").

The request processors call one method per event (only when ``BrokerContext.trace`` is set);
each appends a record in RocketMQ's trace format (:mod:`rocketq.protocol.trace`) to a buffer on
the event loop, a send only its messages and put result (its Pub records are built later). Every
``brokerTraceFlushIntervalMs``, or as soon as ``brokerTraceBatchSize`` entries wait, a worker
thread encodes the buffer into trace messages (one per client address, so ``queryMsgTraceById``
shows the client as the message's born host; at most ~128 KB of records each) and puts them into
the trace topic (``msgTraceTopicName``, created on demand with one queue).

Events and the records they make (the traced msgId is the message's UNIQ_KEY):

- a message stored by a send (``sent``): Pub (producer group, client, born time, cost = store
  time - born time, topic, msgId, offsetMsgId, keys, tags, status); the real topic for a
  transaction half, msgType Trans.
- a pull answering messages of a traced topic, or of a retry topic whose RETRY_TOPIC is traced
  (``delivered``): SubBefore per message (consumer group, request id, retryTimes = the
  message's reconsume times, keys). The delivery waits for its outcome:
- CONSUMER_SEND_MSG_BACK (``sent_back``): SubAfter success=false (contextCode FAILED) for the
  delivery, then a Pub of the message to ``%RETRY%group`` (msgType Delay) or, past the maximum
  reconsume times, to ``%DLQ%group`` (msgType Normal), group = the consumer group.
- an offset commit past the message (``committed``; UPDATE_CONSUMER_OFFSET or a pull's commit
  flag): SubAfter success=true (contextCode SUCCESS).
- END_TRANSACTION commit or rollback, or a check's answer (``end_transaction``): EndTransaction.
- pop (``popped``, ``pop_acked``, ``pop_nacked``, ``pop_dead_lettered``): SubBefore per delivery
  (retryTimes = attempt - 1), SubAfter success on ack, failed on ChangeInvisibleDuration or when
  the message is popped again unacked, a Pub to ``%DLQ%group`` when it is dead-lettered.

Deliveries waiting for an outcome are bounded (``MAX_PENDING``); the oldest are dropped first.
``brokerTraceTopics`` (comma separated) limits tracing to those topics; empty traces every
topic except system ones (``RMQ_SYS_*``, ``SCHEDULE_TOPIC_XXXX``, ``%DLQ%``) and the trace topic.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from rocketq.broker.context import BrokerContext
from rocketq.message import (
    PROPERTY_KEYS,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    BrokerMessage,
    MessageExt,
    UniqueIdGenerator,
    born_host_of,
    decode_properties,
    encode_properties,
)
from rocketq.protocol import trace as tr
from rocketq.protocol.record import RecordKind, decode_record, view_to_message
from rocketq.protocol.topic import (
    DLQ_GROUP_TOPIC_PREFIX,
    PERM_READ,
    PERM_WRITE,
    RETRY_GROUP_TOPIC_PREFIX,
    TRANS_HALF_TOPIC,
)
from rocketq.store.commitlog import PutMessageResult, PutMessageStatus
from rocketq.tasks import cancel_and_wait
from rocketq.wallclock import wall_clock_ms

log = logging.getLogger(__name__)

#: Deliveries waiting for their outcome, over all groups (the oldest are dropped beyond).
MAX_PENDING = 100_000
#: Records per trace message at most (RocketMQ's trace dispatcher caps a message at 128 000 B).
MAX_TRACE_BODY = 128_000
_SYSTEM_PREFIXES = ("RMQ_SYS_", "SCHEDULE_TOPIC_XXXX", DLQ_GROUP_TOPIC_PREFIX, "rmq_sys_")


def _field(value: str | None) -> str:
    """A Java string appended to the record: ``null`` when absent."""
    return "null" if value is None else value


#: A send waiting for its Pub records: (producer group, messages, put result).
_Sent = tuple[str, Sequence[BrokerMessage], PutMessageResult]


@dataclass(slots=True)
class _Delivery:
    request_id: str
    msg_id: str
    keys: str
    group: str
    client: str
    delivered_ms: int
    failed: bool = False  # a pop delivery whose failure is already recorded


class BrokerTracer:
    """The trace recorder of one broker (``BrokerContext.trace``; None when tracing is off)."""

    def __init__(self, ctx: BrokerContext) -> None:
        cfg = ctx.config
        self.ctx = ctx
        self.topic = cfg.msg_trace_topic_name
        self.region = cfg.region_id
        self.topics = frozenset(t.strip() for t in cfg.broker_trace_topics.split(",") if t.strip())
        self.flush_interval_s = cfg.broker_trace_flush_interval_ms / 1000
        self.batch_size = cfg.broker_trace_batch_size
        self._ids = UniqueIdGenerator()
        #: (client address, record or a send's messages) waiting to be written; encoded by the
        #: writer in a worker thread, so an event costs the event loop little more than an append.
        self._buffer: list[tuple[str, tr.TraceRecord | _Sent]] = []
        self._writer_ids = UniqueIdGenerator()  # used by the worker thread only
        #: (group, topic, queue id) → queue offset → delivery, in delivery order.
        self._pending: dict[tuple[str, str, int], OrderedDict[int, _Delivery]] = {}
        #: (group, commit-log offset) → (its key in ``_pending``, queue offset).
        self._by_offset: OrderedDict[tuple[str, int], tuple[tuple[str, str, int], int]] = OrderedDict()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.written = 0  # trace messages stored
        self.records = 0  # records stored

    # -- which topics --------------------------------------------------------------------------
    def traced(self, topic: str) -> bool:
        if self.topics:
            return topic in self.topics
        return topic != self.topic and not topic.startswith(_SYSTEM_PREFIXES)

    # -- events ----------------------------------------------------------------------------------
    def sent(self, client: str, group: str, msgs: Sequence[BrokerMessage], result: PutMessageResult) -> None:
        """Messages stored by a send (one, or a batch)."""
        if (
            result.status is not PutMessageStatus.PUT_OK
            and result.status is not PutMessageStatus.FLUSH_DISK_TIMEOUT
        ):
            return
        if self.topics and msgs[0].topic not in self.topics and msgs[0].topic != TRANS_HALF_TOPIC:
            return
        self._buffer.append((client, (group, msgs, result)))
        if len(self._buffer) >= self.batch_size:
            self._wake.set()

    def _pub_records(self, sent: _Sent) -> list[tr.TraceRecord]:
        """The Pub records of a send (in the writer's worker thread)."""
        group, msgs, result = sent
        ids = result.msg_ids if len(msgs) > 1 else [result.msg_id]
        out = []
        for msg, offset_id in zip(msgs, ids, strict=False):
            props = decode_properties(msg.properties.decode("utf-8", "replace"))
            topic = props.get(PROPERTY_REAL_TOPIC) or msg.topic
            if not self.traced(topic):
                continue
            half = PROPERTY_REAL_TOPIC in props
            record = tr.TraceRecord(
                tr.PUB,
                timestamp=msg.born_timestamp,
                region_id=self.region,
                group=group,
                topic=topic,
                msg_id=props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, offset_id),
                tags=_field(props.get(PROPERTY_TAGS)),
                keys=_field(props.get(PROPERTY_KEYS)),
                store_host=self.ctx.broker_addr,
                body_length=len(msg.body),
                cost_ms=max(0, result.store_timestamp - msg.born_timestamp),
                msg_type=tr.MSG_TYPE_TRANS_HALF if half else tr.MSG_TYPE_NORMAL,
                offset_msg_id=offset_id,
                success=True,
            )
            out.append(record)
        return out

    def delivered(self, client: str, group: str, topic: str, buffers: Sequence[bytes]) -> None:
        """Messages a pull answers (raw CommitLog records)."""
        retry = topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
        if not retry and not self.traced(topic):
            return
        now = wall_clock_ms()
        for buf in buffers:
            view = decode_record(buf, 0, check_crc=False)
            if view.kind is not RecordKind.MESSAGE:
                continue
            msg = view_to_message(view)
            if retry and not self.traced(msg.properties.get(PROPERTY_RETRY_TOPIC, topic)):
                continue
            key = (group, msg.topic, msg.queue_id)
            self._delivery_begins(client, group, key, msg.queue_offset, msg, msg.reconsume_times, now)

    def sent_back(
        self, client: str, group: str, original: MessageExt, new_topic: str, result: PutMessageResult
    ) -> None:
        """CONSUMER_SEND_MSG_BACK stored ``original`` again in ``new_topic`` (retry or DLQ)."""
        d = self._forget(group, original.commit_log_offset)
        real = original.properties.get(PROPERTY_RETRY_TOPIC, original.topic)
        if d is None and not self.traced(real):
            return
        now = wall_clock_ms()
        if d is not None:
            self._add(d.client, self._sub_after(d, now, success=False))
        self._add(client, self._retry_pub(group, original, new_topic, result, now))

    def committed(self, client: str, group: str, topic: str, queue_id: int, offset: int) -> None:
        """A consumer offset committed: deliveries below it were consumed."""
        waiting = self._pending.get((group, topic, queue_id))
        if not waiting:
            return
        now = wall_clock_ms()
        while waiting:
            queue_offset, d = next(iter(waiting.items()))
            if queue_offset >= offset:
                break
            del waiting[queue_offset]
            self._add(client or d.client, self._sub_after(d, now, success=True))
        if not waiting:
            del self._pending[(group, topic, queue_id)]

    def end_transaction(
        self, client: str, group: str, half: MessageExt, commit: bool, from_check: bool
    ) -> None:
        topic = half.properties.get(PROPERTY_REAL_TOPIC, half.topic)
        if not self.traced(topic):
            return
        record = tr.TraceRecord(
            tr.END_TRANSACTION,
            timestamp=wall_clock_ms(),
            region_id=self.region,
            group=group,
            topic=topic,
            msg_id=half.client_msg_id,
            tags=_field(half.properties.get(PROPERTY_TAGS)),
            keys=_field(half.properties.get(PROPERTY_KEYS)),
            store_host=self.ctx.broker_addr,
            msg_type=tr.MSG_TYPE_TRANS_COMMIT,
            transaction_id=half.properties.get("__transactionId__") or half.client_msg_id,
            transaction_state=tr.COMMIT_MESSAGE if commit else tr.ROLLBACK_MESSAGE,
            from_transaction_check=from_check,
        )
        self._add(client, record)

    # -- pop (gRPC consumers; the client is the broker's own endpoint) -------------------------------
    def popped(self, group: str, deliveries: Sequence[tuple[int, MessageExt, int]]) -> None:
        """Pop deliveries: (queue offset, message, delivery attempt from 1). A message popped
        again (its invisible time passed unacked) first fails its previous delivery."""
        now = wall_clock_ms()
        client = self.ctx.broker_addr
        for offset, msg, attempt in deliveries:
            if not self.traced(msg.topic):
                continue
            key = (group, msg.topic, msg.queue_id)
            old = self._take(key, offset)
            if old is not None and not old.failed:
                self._add(old.client, self._sub_after(old, now, success=False))
            self._delivery_begins(client, group, key, offset, msg, attempt - 1, now)

    def pop_acked(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        d = self._take((group, topic, queue_id), offset)
        if d is not None:
            self._add(d.client, self._sub_after(d, wall_clock_ms(), success=True))

    def pop_nacked(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """ChangeInvisibleDuration: the delivery failed, the message comes back later (an ack
        with the new handle still records the success)."""
        waiting = self._pending.get((group, topic, queue_id))
        d = waiting.get(offset) if waiting is not None else None
        if d is not None and not d.failed:
            d.failed = True
            self._add(d.client, self._sub_after(d, wall_clock_ms(), success=False))

    def pop_dead_lettered(self, group: str, msg: MessageExt, dlq: str, result: PutMessageResult) -> None:
        d = self._take((group, msg.topic, msg.queue_id), msg.queue_offset)
        if d is None and not self.traced(msg.topic):
            return
        now = wall_clock_ms()
        if d is not None and not d.failed:
            self._add(d.client, self._sub_after(d, now, success=False))
        self._add(self.ctx.broker_addr, self._retry_pub(group, msg, dlq, result, now))

    # -- pending deliveries ----------------------------------------------------------------------
    def _delivery_begins(
        self,
        client: str,
        group: str,
        key: tuple[str, str, int],
        queue_offset: int,
        msg: MessageExt,
        retry_times: int,
        now: int,
    ) -> None:
        """``msg`` delivered to ``client``: its SubBefore, and the delivery kept until it ends."""
        keys = _field(msg.properties.get(PROPERTY_KEYS))
        d = _Delivery(self._ids.next_id(), msg.client_msg_id, keys, group, client, now)
        self._remember(key, queue_offset, msg.commit_log_offset, d)
        record = tr.TraceRecord(
            tr.SUB_BEFORE,
            timestamp=now,
            region_id=self.region,
            group=group,
            request_id=d.request_id,
            msg_id=d.msg_id,
            retry_times=retry_times,
            keys=keys,
        )
        self._add(client, record)

    def _retry_pub(
        self, group: str, msg: MessageExt, new_topic: str, result: PutMessageResult, now: int
    ) -> tr.TraceRecord:
        """The Pub of a message the broker stored again in ``%RETRY%group`` or ``%DLQ%group``."""
        dlq = new_topic.startswith(DLQ_GROUP_TOPIC_PREFIX)
        return tr.TraceRecord(
            tr.PUB,
            timestamp=now,
            region_id=self.region,
            group=group,
            topic=new_topic,
            msg_id=msg.client_msg_id,
            tags=_field(msg.properties.get(PROPERTY_TAGS)),
            keys=_field(msg.properties.get(PROPERTY_KEYS)),
            store_host=self.ctx.broker_addr,
            body_length=len(msg.body),
            cost_ms=max(0, result.store_timestamp - now),
            msg_type=tr.MSG_TYPE_NORMAL if dlq else tr.MSG_TYPE_DELAY,
            offset_msg_id=result.msg_id,
            success=result.status is PutMessageStatus.PUT_OK,
        )

    def _sub_after(self, d: _Delivery, now: int, *, success: bool) -> tr.TraceRecord:
        return tr.TraceRecord(
            tr.SUB_AFTER,
            request_id=d.request_id,
            msg_id=d.msg_id,
            cost_ms=max(0, now - d.delivered_ms),
            success=success,
            keys=d.keys,
            context_code=tr.CONSUME_SUCCESS if success else tr.CONSUME_FAILED,
            timestamp=now,
            group=d.group,
        )

    def _remember(self, key: tuple[str, str, int], queue_offset: int, phys: int, d: _Delivery) -> None:
        self._pending.setdefault(key, OrderedDict())[queue_offset] = d
        self._by_offset[(d.group, phys)] = (key, queue_offset)
        while len(self._by_offset) > MAX_PENDING:
            _, (old_key, old_offset) = self._by_offset.popitem(last=False)
            waiting = self._pending.get(old_key)
            if waiting is not None:
                waiting.pop(old_offset, None)
                if not waiting:
                    del self._pending[old_key]

    def _take(self, key: tuple[str, str, int], queue_offset: int) -> _Delivery | None:
        waiting = self._pending.get(key)
        if waiting is None:
            return None
        d = waiting.pop(queue_offset, None)
        if not waiting:
            del self._pending[key]
        return d

    def _forget(self, group: str, phys: int) -> _Delivery | None:
        found = self._by_offset.pop((group, phys), None)
        if found is None:
            return None
        return self._take(*found)

    # -- buffer and writer -----------------------------------------------------------------------
    def _add(self, client: str, record: tr.TraceRecord) -> None:
        self._buffer.append((client, record))
        if len(self._buffer) >= self.batch_size:
            self._wake.set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="broker-trace-writer")

    async def stop(self) -> None:
        """Write what is buffered and stop the writer."""
        task, self._task = self._task, None
        await cancel_and_wait(task)
        await self.flush()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.flush_interval_s)
            self._wake.clear()
            try:
                await self.flush()
            except Exception as exc:  # a full disk or a shutdown must not stop the writer
                log.warning("trace records dropped: %s", exc)

    async def flush(self) -> None:
        """Put the buffered records into the trace topic now."""
        if not self._buffer:
            return
        batch, self._buffer = self._buffer, []
        ctx = self.ctx
        ctx.topics.create_in_send_back(self.topic, 1, PERM_READ | PERM_WRITE)
        await ctx.topics_durable()
        written, records = await ctx.blocking(self._write, batch)
        self.written += written
        self.records += records

    def _write(self, batch: list[tuple[str, tr.TraceRecord | _Sent]]) -> tuple[int, int]:
        """Encode ``batch`` and put its trace messages (in a worker thread): (messages, records)."""
        encoded: list[tuple[str, str, list[str]]] = []
        for client, item in batch:
            for record in self._pub_records(item) if isinstance(item, tuple) else (item,):
                encoded.append((client, tr.encode_record(record), record.key_list()))
        msgs = self.messages(encoded)
        for msg in msgs:
            result = self.ctx.store.put_message(msg)
            if result.status is not PutMessageStatus.PUT_OK:
                log.warning("trace message not stored: %s", result.status.value)
        return len(msgs), len(encoded)

    def messages(self, batch: list[tuple[str, str, list[str]]]) -> list[BrokerMessage]:
        """The trace messages of buffered records: per client, records in order, ≤ MAX_TRACE_BODY."""
        by_client: dict[str, list[tuple[str, list[str]]]] = {}
        for client, text, keys in batch:
            by_client.setdefault(client, []).append((text, keys))
        out: list[BrokerMessage] = []
        now = wall_clock_ms()
        for client, entries in by_client.items():
            start = 0
            while start < len(entries):
                size, end = 0, start
                while end < len(entries) and (end == start or size + len(entries[end][0]) <= MAX_TRACE_BODY):
                    size += len(entries[end][0])
                    end += 1
                chunk = entries[start:end]
                keys = list(dict.fromkeys(k for _, ks in chunk for k in ks))
                props = {
                    PROPERTY_KEYS: " ".join(keys),
                    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: self._writer_ids.next_id(),
                    "WAIT": "false",
                }
                out.append(
                    BrokerMessage(
                        topic=self.topic,
                        body="".join(t for t, _ in chunk).encode("utf-8"),
                        properties=encode_properties(props).encode("utf-8"),
                        born_timestamp=now,
                        born_host=born_host_of(client),
                    )
                )
                start = end
        return out


def start_tracer(ctx: BrokerContext) -> None:
    """Set up ``ctx.trace`` when the broker's settings turn tracing on."""
    if ctx.config.broker_trace_enable:
        ctx.trace = BrokerTracer(ctx)
        ctx.trace.start()


async def stop_tracer(ctx: BrokerContext) -> None:
    """Write the buffered records (at shutdown, before the store closes) and stop recording."""
    tracer, ctx.trace = ctx.trace, None
    if tracer is not None:
        try:
            await tracer.stop()
        except Exception as exc:  # a full disk must not turn a clean shutdown into a crash
            log.error("shutting down without writing %d trace records: %s", len(tracer._buffer), exc)


__all__ = ["MAX_PENDING", "BrokerTracer", "start_tracer", "stop_tracer"]
