"""PopService: the broker-side pop consumption engine (RocketMQ 5 SimpleConsumer / PushConsumer).

A *pop* hands out messages of a queue to a consumer group without the consumer tracking offsets:
each message becomes invisible to the group for a while, and comes back (delivery attempt + 1)
unless it is acked before that. The gRPC endpoint's ReceiveMessage, AckMessage,
ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue call this service::

    receive   per queue (the one asked for, or every readable queue of the topic, rotating the
              starting queue between calls): expired in-flight messages first (attempt + 1, or to
              %DLQ%<group> once the attempt would pass max_delivery_attempts), then fresh ones
              from next_offset; nothing → wait for an arrival on the topic, the next invisible
              deadline, or the long-poll time, whichever comes first
    ack       the handle's delivery must be current (same nonce) and still invisible
    change    same check; a new deadline and nonce → a new handle (the old one goes stale)
    dlq       same check; the message is written to %DLQ%<group>, then acked

State (:mod:`~rocketq.broker.pop.state`) is per (group, topic, queue) and is changed on the event
loop only. Every change is appended to an in-memory buffer in the same step and is durable before
the call that made it returns: a single sync task at a time writes and fsyncs whatever has
accumulated (group commit — concurrent calls share one fsync) and compacts the journal into a
snapshot when it is large (:mod:`~rocketq.broker.pop.journal`). Disk work runs in worker threads
(``ctx.blocking``).

Invariants:

* a receive holds its queue's lock from reading the state to recording the deliveries, so two
  receives never hand out the same offset; acks and changes need no lock (they touch one entry,
  synchronously on the loop);
* a message is handed to a caller only after its delivery record is durable, and an ack returns
  only after its record is durable: after a crash no acked message comes back and every
  unacked one is still in flight (delivered again after its deadline) or not yet popped;
* the group's consumer offset (``ConsumerOffsetManager``) follows the lowest offset not done,
  so ``consumerProgress`` shows a pop group's lag like a pull group's;
* long polling is woken by the dispatcher's arrival listener (registered before the store is
  read, so an arrival between the read and the wait is not missed) and by acks / invisible-time
  changes of the topic; there is no polling loop.

Dead letters in the background: a sweeper task (started with the first receive, one pass every
:data:`DLQ_SWEEP_INTERVAL_MS`) moves a message that used its last delivery attempt to
``%DLQ%<group>`` as soon as its invisible time has passed, not only when the group next
receives from that queue.

FIFO (``fifo=True``): a queue with any in-flight message that is still invisible delivers
nothing; once all of them expired they are delivered again first, in offset order, before fresh
messages. Messages rejected by ``message_filter`` are done for the group (never delivered).

One idea: the pop state machine over one durable table. Every path (receive, ack, change,
forward to the DLQ, the sweeper) changes the same per-queue states under the same queue locks
and makes the change durable through the same group commit before it returns; the invariants
above hold only together, so they are stated and kept in this one module (the records, the
journal file and the receipt handles have modules of their own).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from rocketq.broker.pop.journal import (
    PopJournal,
    ack_record,
    advance_record,
    deliver_record,
    encode_snapshot,
    key_record,
)
from rocketq.broker.pop.receipt import Receipt, decode_receipt, encode_receipt
from rocketq.broker.pop.state import InFlight, Key, PopTable, QueueState
from rocketq.errors import (
    InvalidParameter,
    InvalidReceiptHandle,
    RocketqError,
    ServiceNotAvailable,
    TopicNotExist,
)
from rocketq.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    BrokerMessage,
    MessageExt,
)
from rocketq.protocol import record as rec
from rocketq.protocol.record import view_to_message
from rocketq.protocol.topic import DLQ_NUMS_PER_GROUP, PERM_READ, PERM_WRITE, dlq_topic
from rocketq.store.commitlog import PutMessageStatus
from rocketq.store.store_queries import GetMessageStatus
from rocketq.wallclock import wall_clock_ms

if TYPE_CHECKING:
    from rocketq.broker.context import BrokerContext
    from rocketq.broker.long_polling import ArrivalRequest

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

#: ``retryMaxTimes`` of a group without a subscription-group config (RocketMQ's default).
DEFAULT_RETRY_MAX_TIMES = 16
#: Most messages one receive hands out.
MAX_BATCH = 1024
#: Longest invisible time accepted (RocketMQ's proxy allows up to 12 h).
MAX_INVISIBLE_MS = 12 * 3600 * 1000
POP_CLIENT_HOST = "PopService"
#: Pause between two passes of the dead-letter sweeper; 0 or less: no sweeper task (passes are
#: then made only by whoever calls :meth:`PopService.sweep_dead_letters`).
DLQ_SWEEP_INTERVAL_MS = 1_000


@dataclass(frozen=True, slots=True)
class PoppedMessage:
    """One message handed out by :meth:`PopService.receive`."""

    #: The message as stored; ``.topic`` is the topic popped from.
    message: MessageExt
    queue_id: int
    queue_offset: int
    #: Opaque, printable ASCII; valid for exactly one ack / change_invisible / forward_to_dlq.
    receipt_handle: str
    #: 1 on first delivery, +1 on every redelivery.
    delivery_attempt: int
    #: Epoch ms after which the message is delivered again unless acked.
    invisible_until_ms: int


@dataclass(slots=True)
class _Read:
    """What one worker-thread read of a queue found."""

    again: dict[int, MessageExt] = field(default_factory=dict)
    fresh: list[tuple[int, MessageExt]] = field(default_factory=list)
    next_offset: int | None = None


class PopService:
    """Pop / ack / change-invisible / DLQ over the broker's store, with durable state."""

    def __init__(
        self,
        ctx: BrokerContext,
        *,
        directory: str | None = None,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.ctx = ctx
        self.directory = directory or os.path.join(ctx.store.config.store_path_root_dir, "pop")
        self._clock_ms = clock_ms
        self._journal = PopJournal(self.directory)
        self._table = PopTable()
        self._locks: dict[Key, asyncio.Lock] = {}
        self._pending = bytearray()
        self._appended = 0
        self._synced = 0
        self._sync_task: asyncio.Task[None] | None = None
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._rotation: dict[tuple[str, str], int] = {}
        self._started = False
        self._closing = False
        self._sweeper: asyncio.Task[None] | None = None
        #: Messages the sweeper moved to a DLQ (for tests and metrics).
        self.swept_to_dlq = 0
        #: Journal fsyncs done (one per group commit) and compactions, for tests and metrics.
        self.syncs = 0
        self.compactions = 0

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        """Load the persisted pop state (called by the broker after the store is open)."""
        self._table = self._journal.load()
        for key, state in self._table.states.items():
            self._commit_offset(key, state)
        self._started = True

    async def shutdown(self) -> None:
        """End held receives (they return what they have) and persist the state."""
        if not self._started or self._closing:
            return
        self._closing = True
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await sweeper
        for waiters in list(self._waiters.values()):
            for waiter in list(waiters):
                if not waiter.done():
                    waiter.set_result(None)
        # Receives past their read hold a queue lock until their records are appended.
        for lock in list(self._locks.values()):
            async with lock:
                pass
        try:
            await self._durable(self._appended)
        except Exception as exc:  # a full disk: the journal keeps what was synced before
            log.error("shutting down without persisting the last pop state changes: %s", exc)
        self._journal.close()
        log.info("pop state persisted (%d queues)", len(self._table.states))

    @property
    def table(self) -> PopTable:
        """The in-memory state (read it, do not change it)."""
        return self._table

    def _check_open(self) -> None:
        if not self._started:
            raise ServiceNotAvailable("pop service is not started")
        if self._closing:
            raise ServiceNotAvailable("broker is shutting down")

    async def _run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        if self.ctx.accepting:
            return await self.ctx.blocking(fn, *args, **kwargs)
        return await asyncio.to_thread(fn, *args, **kwargs)

    # -- journal ----------------------------------------------------------------------------
    def _append(self, data: bytes) -> int:
        self._pending += data
        self._appended += len(data)
        return self._appended

    async def _durable(self, upto: int) -> None:
        """Return once every record appended up to ``upto`` is on disk (group commit)."""
        while self._synced < upto:
            task = self._sync_task
            if task is None:
                task = self._sync_task = asyncio.get_running_loop().create_task(self._sync_round())
            await asyncio.shield(task)

    async def _sync_round(self) -> None:
        try:
            target = self._appended
            journal = self._journal
            if journal.size_bytes + len(self._pending) > self.ctx.config.pop_journal_compact_bytes:
                generation = journal.generation + 1
                snapshot = encode_snapshot(self._table, generation)
                pending, self._pending = self._pending, bytearray()
                try:
                    await self._run(journal.compact, snapshot, generation)
                except OSError:
                    if journal.generation != generation:  # the snapshot was not written
                        self._pending[:0] = pending
                    raise
                self.compactions += 1
                log.info("pop journal compacted: snapshot of %d B (generation %d)", len(snapshot), generation)
            else:
                data = bytes(self._pending)
                self._pending = bytearray()
                try:
                    await self._run(journal.write_and_sync, data)
                except OSError:
                    # not on disk (a full disk: DiskFull): written by the next round, in order
                    self._pending[:0] = data
                    raise
            self.syncs += 1
            self._synced = target
        finally:
            self._sync_task = None

    def _state(self, key: Key) -> QueueState:
        """The state of ``key``, created (and journaled) from the group's consumer offset, or
        the queue's first offset, on first use."""
        state = self._table.states.get(key)
        if state is not None:
            return state
        group, topic, queue_id = key
        key_id = self._table.next_key_id()
        state = self._table.define(key_id, key)
        start = self.ctx.offsets.query_offset(group, topic, queue_id)
        if start < 0:
            start = max(0, self.ctx.store.get_min_offset(topic, queue_id))
        state.advance(start)
        self._append(key_record(key_id, group, topic, queue_id) + advance_record(key_id, start))
        self._commit_offset(key, state)
        return state

    def _commit_offset(self, key: Key, state: QueueState) -> None:
        group, topic, queue_id = key
        self.ctx.offsets.commit_offset(POP_CLIENT_HOST, group, topic, queue_id, state.committed)

    # -- settings ---------------------------------------------------------------------------
    def max_delivery_attempts(self, group: str) -> int:
        """``retryMaxTimes`` of the subscription group + 1 (default 17)."""
        cfg = self.ctx.groups.get(group)
        retry = cfg.retry_max_times if cfg is not None else DEFAULT_RETRY_MAX_TIMES
        return max(1, retry + 1)

    # -- receive ----------------------------------------------------------------------------
    async def receive(
        self,
        *,
        group: str,
        topic: str,
        queue_id: int | None,
        max_messages: int,
        invisible_ms: int,
        long_poll_ms: int,
        fifo: bool = False,
        message_filter: Callable[[MessageExt], bool] | None = None,
    ) -> list[PoppedMessage]:
        """Pop up to ``max_messages`` messages of ``topic`` for ``group``.

        ``queue_id`` None takes from every readable queue, starting at a different queue on each
        call. Waits up to ``long_poll_ms`` when nothing is available (woken by arrivals, acks and
        invisible deadlines); returns [] on timeout or shutdown. Each message stays invisible
        to the group for ``invisible_ms``.
        """
        self._check_open()
        if not group:
            raise InvalidParameter("consumer group is empty")
        if not 1 <= max_messages <= MAX_BATCH:
            raise InvalidParameter(f"max_messages={max_messages} is outside 1..{MAX_BATCH}")
        if not 0 <= invisible_ms <= MAX_INVISIBLE_MS:
            raise InvalidParameter(f"invisible_ms={invisible_ms} is outside 0..{MAX_INVISIBLE_MS}")
        if long_poll_ms < 0:
            raise InvalidParameter(f"long_poll_ms={long_poll_ms} is negative")
        tc = self.ctx.topics.select(topic)
        if tc is None:
            raise TopicNotExist(f"topic {topic} not exist")
        if queue_id is None:
            queues = list(range(tc.read_queue_nums)) if tc.readable else []
        elif not 0 <= queue_id < tc.read_queue_nums:
            raise InvalidParameter(
                f"queue {queue_id} of topic {topic} does not exist (read queues: {tc.read_queue_nums})"
            )
        else:
            queues = [queue_id]
        if not queues:
            return []
        loop = asyncio.get_running_loop()
        self._loop = loop
        if self._sweeper is None and DLQ_SWEEP_INTERVAL_MS > 0:
            self._sweeper = loop.create_task(self._sweep_forever(), name="pop-dlq-sweeper")
        poll_ms = min(long_poll_ms, self.ctx.config.pop_long_polling_max_ms)
        give_up = time.monotonic() + poll_ms / 1000
        while True:
            waiter: asyncio.Future[None] = loop.create_future()
            waiters = self._waiters.setdefault(topic, set())
            waiters.add(waiter)
            try:
                got = await self._receive_once(
                    group, topic, queues, max_messages, invisible_ms, fifo, message_filter
                )
                if got or self._closing:
                    return got
                wait_s = give_up - time.monotonic()
                if wait_s <= 0:
                    return []
                due = self._next_deadline_ms(group, topic, queues)
                if due is not None:
                    wait_s = min(wait_s, max(0.0, (due - self._clock_ms()) / 1000) + 0.001)
                await asyncio.wait((waiter,), timeout=wait_s)
            finally:
                waiters.discard(waiter)
                if not waiters and self._waiters.get(topic) is waiters:
                    del self._waiters[topic]

    def _next_deadline_ms(self, group: str, topic: str, queues: Sequence[int]) -> int | None:
        due: int | None = None
        for q in queues:
            state = self._table.states.get((group, topic, q))
            d = state.next_deadline_ms() if state is not None else None
            if d is not None and (due is None or d < due):
                due = d
        return due

    async def _receive_once(
        self,
        group: str,
        topic: str,
        queues: list[int],
        max_messages: int,
        invisible_ms: int,
        fifo: bool,
        message_filter: Callable[[MessageExt], bool] | None,
    ) -> list[PoppedMessage]:
        out: list[PoppedMessage] = []
        n = len(queues)
        first = self._rotation.get((group, topic), 0) % n
        self._rotation[(group, topic)] = first + 1
        for i in range(n):
            if len(out) >= max_messages or self._closing:
                break
            q = queues[(first + i) % n]
            out.extend(
                await self._receive_queue(
                    (group, topic, q), max_messages - len(out), invisible_ms, fifo, message_filter
                )
            )
        return out

    def _lock(self, key: Key) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    async def _receive_queue(
        self,
        key: Key,
        max_count: int,
        invisible_ms: int,
        fifo: bool,
        message_filter: Callable[[MessageExt], bool] | None,
    ) -> list[PoppedMessage]:
        group, topic, queue_id = key
        store = self.ctx.store
        async with self._lock(key):
            if self._closing:
                return []
            state = self._state(key)
            now = self._clock_ms()
            if fifo and state.fifo_blocked(now):
                return []
            expired = state.expired(now)
            again = expired[:max_count]
            fresh_count = max_count - len(again)
            if fifo and len(expired) > len(again):
                fresh_count = 0
            fresh_from = state.next_offset if fresh_count > 0 else None
            if fresh_from is not None and fresh_from >= store.get_max_offset(topic, queue_id):
                fresh_from = None
            if not again and fresh_from is None:
                return []
            read = await self._run(self._read, group, topic, queue_id, again, fresh_from, fresh_count)

            # Decide first (the filter may raise: then nothing has changed), then record.
            max_attempts = self.max_delivery_attempts(group)
            deliver: list[tuple[int, MessageExt, int]] = []
            done: list[int] = []
            to_dlq: list[tuple[int, MessageExt]] = []
            for offset in again:
                entry = state.in_flight.get(offset)
                msg = read.again.get(offset)
                if entry is None:
                    continue
                if msg is None or (message_filter is not None and not message_filter(msg)):
                    done.append(offset)
                elif entry.attempt + 1 > max_attempts:
                    to_dlq.append((offset, msg))
                else:
                    deliver.append((offset, msg, entry.attempt + 1))
            for offset, msg in read.fresh:
                if message_filter is None or message_filter(msg):
                    deliver.append((offset, msg, 1))

            for offset, msg in to_dlq:
                await self._put_dlq(group, msg, reason="max delivery attempts reached")
                done.append(offset)
            now = self._clock_ms()
            until = now + invisible_ms
            nonce = secrets.randbits(64)
            key_id = self._table.key_ids[key]
            records: list[bytes] = []
            for offset in done:
                if state.ack(offset):
                    records.append(ack_record(key_id, offset))
            out: list[PoppedMessage] = []
            for offset, msg, attempt in deliver:
                state.deliver(offset, attempt, until, nonce)
                records.append(deliver_record(key_id, offset, attempt, until, nonce))
                handle = encode_receipt(group, topic, Receipt(queue_id, offset, attempt, until, nonce))
                out.append(PoppedMessage(msg, queue_id, offset, handle, attempt, until))
            if read.next_offset is not None and read.next_offset > state.next_offset:
                state.advance(read.next_offset)
                records.append(advance_record(key_id, read.next_offset))
            seq = self._append(b"".join(records)) if records else self._appended
            self._commit_offset(key, state)
            if self.ctx.trace is not None:
                self.ctx.trace.popped(group, deliver)
        await self._durable(seq)
        if out and self.ctx.metrics is not None:  # messages_out / throughput_out (docs/metrics.md)
            self.ctx.metrics.popped(topic, group, out)
        return out

    def _read(
        self,
        group: str,
        topic: str,
        queue_id: int,
        again: list[int],
        fresh_from: int | None,
        fresh_count: int,
    ) -> _Read:
        """Worker thread: the messages at ``again`` and up to ``fresh_count`` from ``fresh_from``."""
        store = self.ctx.store
        out = _Read()
        for offset in again:
            result = store.get_message(group, topic, queue_id, offset, 1)
            for buf, at in zip(result.buffers, result.queue_offsets, strict=True):
                if at == offset:
                    msg = _decode(buf, topic, queue_id, at)
                    if msg is not None:
                        out.again[offset] = msg
        if fresh_from is None or fresh_count <= 0:
            return out
        offset = fresh_from
        for _ in range(2):
            result = store.get_message(group, topic, queue_id, offset, fresh_count)
            if result.status is GetMessageStatus.OFFSET_TOO_SMALL:
                # Retention deleted what was never popped: skip to the first offset still there.
                log.warning(
                    "pop group %s topic %s queue %d: offset %d was deleted; skipping to %d",
                    group,
                    topic,
                    queue_id,
                    offset,
                    result.next_begin_offset,
                )
                offset = result.next_begin_offset
                out.next_offset = offset
                continue
            if result.status in (
                GetMessageStatus.OFFSET_OVERFLOW_BADLY,
                GetMessageStatus.OFFSET_OVERFLOW_ONE,
            ):
                return out
            for buf, at in zip(result.buffers, result.queue_offsets, strict=True):
                msg = _decode(buf, topic, queue_id, at)
                if msg is not None:
                    out.fresh.append((at, msg))
            if result.next_begin_offset > offset:
                out.next_offset = result.next_begin_offset
            return out
        return out

    # -- ack / change / dlq -----------------------------------------------------------------
    def _current(
        self, group: str, topic: str, receipt_handle: str
    ) -> tuple[Key, QueueState, Receipt, InFlight]:
        """The live delivery a handle names, or InvalidReceiptHandle."""
        self._check_open()
        receipt = decode_receipt(group, topic, receipt_handle)
        key = (group, topic, receipt.queue_id)
        state = self._table.states.get(key)
        entry = state.is_current(receipt.queue_offset, receipt.nonce) if state is not None else None
        if state is None or entry is None:
            raise InvalidReceiptHandle(
                f"receipt handle of {topic} queue {receipt.queue_id} offset {receipt.queue_offset} is stale "
                "(acked, or delivered again since)"
            )
        if entry.invisible_until_ms <= self._clock_ms():
            raise InvalidReceiptHandle(
                f"receipt handle of {topic} queue {receipt.queue_id} offset {receipt.queue_offset} expired "
                f"at {entry.invisible_until_ms}"
            )
        return key, state, receipt, entry

    def _record_ack(self, key: Key, state: QueueState, offset: int) -> int:
        state.ack(offset)
        seq = self._append(ack_record(self._table.key_ids[key], offset))
        self._commit_offset(key, state)
        self._wake_topic(key[1])
        return seq

    async def ack(self, *, group: str, topic: str, receipt_handle: str) -> None:
        """Ack one delivery; durable before it returns. Raises InvalidReceiptHandle for a
        malformed handle, one of another group or topic, a stale one or an expired one."""
        key, state, receipt, _entry = self._current(group, topic, receipt_handle)
        if self.ctx.trace is not None:
            self.ctx.trace.pop_acked(group, topic, receipt.queue_id, receipt.queue_offset)
        await self._durable(self._record_ack(key, state, receipt.queue_offset))

    async def change_invisible(
        self, *, group: str, topic: str, receipt_handle: str, invisible_ms: int
    ) -> str:
        """Make the message invisible until now + ``invisible_ms`` (same attempt); returns the
        new receipt handle (the old one goes stale)."""
        if not 0 <= invisible_ms <= MAX_INVISIBLE_MS:
            raise InvalidParameter(f"invisible_ms={invisible_ms} is outside 0..{MAX_INVISIBLE_MS}")
        key, state, receipt, entry = self._current(group, topic, receipt_handle)
        if self.ctx.trace is not None:
            self.ctx.trace.pop_nacked(group, topic, receipt.queue_id, receipt.queue_offset)
        until = self._clock_ms() + invisible_ms
        nonce = secrets.randbits(64)
        offset = receipt.queue_offset
        state.deliver(offset, entry.attempt, until, nonce)
        seq = self._append(deliver_record(self._table.key_ids[key], offset, entry.attempt, until, nonce))
        self._wake_topic(topic)
        await self._durable(seq)
        return encode_receipt(group, topic, Receipt(receipt.queue_id, offset, entry.attempt, until, nonce))

    async def forward_to_dlq(self, *, group: str, topic: str, receipt_handle: str) -> None:
        """Write the message to ``%DLQ%<group>`` and ack it."""
        key, state, receipt, entry = self._current(group, topic, receipt_handle)
        offset = receipt.queue_offset
        read = await self._run(self._read, group, topic, receipt.queue_id, [offset], None, 0)
        msg = read.again.get(offset)
        if msg is not None:
            await self._put_dlq(group, msg, reason="forwarded by the consumer")
        if state.is_current(offset, entry.nonce) is None:
            return  # acked or redelivered while the DLQ write ran; the DLQ copy stands
        await self._durable(self._record_ack(key, state, offset))

    async def _put_dlq(self, group: str, msg: MessageExt, *, reason: str) -> None:
        ctx = self.ctx
        topic = dlq_topic(group)
        tc = ctx.topics.create_in_send_back(topic, DLQ_NUMS_PER_GROUP, PERM_WRITE | PERM_READ)
        props = dict(msg.properties)
        props.setdefault(PROPERTY_RETRY_TOPIC, msg.topic)
        props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, msg.msg_id)
        props.pop(PROPERTY_DELAY_TIME_LEVEL, None)
        inner = BrokerMessage.from_ext(
            msg,
            topic=topic,
            queue_id=random.randrange(max(1, tc.write_queue_nums)),
            properties=props,
            reconsume_times=msg.reconsume_times + 1,
        )
        await ctx.topics_durable()
        result = await self._run(ctx.store.put_message, inner)
        if result.status is not PutMessageStatus.PUT_OK:
            raise RocketqError(f"writing message {msg.msg_id} to {topic} failed: {result.status.value}")
        if ctx.trace is not None:
            ctx.trace.pop_dead_lettered(group, msg, topic, result)
        log.info("pop group %s: message %s of %s to %s (%s)", group, msg.msg_id, msg.topic, topic, reason)

    # -- dead-letter sweeper ----------------------------------------------------------------
    async def _sweep_forever(self) -> None:
        while not self._closing:
            try:
                await self.sweep_dead_letters()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("pop dead-letter sweep failed; retrying")
            await asyncio.sleep(DLQ_SWEEP_INTERVAL_MS / 1000)

    async def sweep_dead_letters(self) -> int:
        """One pass: every expired in-flight message on its last attempt goes to its group's
        DLQ and is acked (durably). Returns how many were moved."""
        moved = 0
        for key, state in list(self._table.states.items()):
            if self._closing:
                break
            group = key[0]
            max_attempts = self.max_delivery_attempts(group)
            now = self._clock_ms()
            if not any(state.in_flight[o].attempt >= max_attempts for o in state.expired(now)):
                continue
            moved += await self._sweep_queue(key, state, max_attempts)
        return moved

    async def _sweep_queue(self, key: Key, state: QueueState, max_attempts: int) -> int:
        group, topic, queue_id = key
        async with self._lock(key):
            if self._closing:
                return 0
            now = self._clock_ms()
            last = [o for o in state.expired(now) if state.in_flight[o].attempt >= max_attempts]
            if not last:
                return 0
            read = await self._run(self._read, group, topic, queue_id, last, None, 0)
            key_id = self._table.key_ids[key]
            records: list[bytes] = []
            moved = 0
            for offset in last:
                msg = read.again.get(offset)
                if msg is not None:
                    await self._put_dlq(group, msg, reason="max delivery attempts reached")
                    moved += 1
                if state.ack(offset):
                    records.append(ack_record(key_id, offset))
            seq = self._append(b"".join(records)) if records else self._appended
            self._commit_offset(key, state)
        await self._durable(seq)
        self.swept_to_dlq += moved
        return moved

    # -- long-polling wake-ups --------------------------------------------------------------
    def arrival_listener(self, requests: Sequence[ArrivalRequest]) -> None:
        """Dispatcher hook (runs on the dispatcher thread, or on the loop for an inline
        dispatch): wake receives waiting on a topic that got messages. Cheap when nothing waits."""
        waiters = self._waiters
        loop = self._loop
        if not waiters or loop is None:
            return
        topics = {r.topic for r in requests if r.topic in waiters}
        if topics:
            if asyncio._get_running_loop() is loop:  # an inline dispatch on the loop itself
                self._wake_topics(topics)
                return
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing waits any more
                loop.call_soon_threadsafe(self._wake_topics, topics)

    def _wake_topics(self, topics: set[str]) -> None:
        for topic in topics:
            self._wake_topic(topic)

    def _wake_topic(self, topic: str) -> None:
        for waiter in list(self._waiters.get(topic, ())):
            if not waiter.done():
                waiter.set_result(None)


def _decode(buf: bytes, topic: str, queue_id: int, offset: int) -> MessageExt | None:
    """The message of a stored record; None (logged at ERROR: the pop skips it) when the record
    does not parse. Bodies are not inflated nor CRC-checked here: consumers do that."""
    view = rec.decode_record(buf, 0, check_crc=False)
    if view.kind is not rec.RecordKind.MESSAGE:
        log.error(
            "pop: record at offset %d of %s/%d does not parse (%s); skipped",
            offset, topic, queue_id, view.reason or view.kind.name,
        )  # fmt: skip
        return None
    return view_to_message(view)


__all__ = ["MAX_BATCH", "MAX_INVISIBLE_MS", "PopService", "PoppedMessage"]
