"""The push consumer: the client pulls in the background and calls the application's listener.

:class:`AsyncPushConsumer` composes a :class:`~rocketq.client.consumer_core.ConsumerCore`
for group membership (HEART_BEAT with ``consumeType`` CONSUME_PASSIVELY, rebalance with
the ``allocate_strategy``, NOTIFY_CONSUMER_IDS_CHANGED), pulls, offset queries and commits; on top
of it, in clustering mode:

* it also subscribes to ``%RETRY%<group>`` (``"*"``), where the broker re-delivers messages sent
  back; a retried message is handed to the listener with its original topic (``RETRY_TOPIC``);
* one pull loop per owned queue, each pull suspended on the broker up to 15 s (long polling);
* one *process queue* per owned queue holding the pulled, not yet consumed messages; its loop
  stops pulling while more than ``pull_threshold_for_queue`` (1,000) messages or
  ``pull_threshold_size_for_queue_mib`` (100 MiB) of bodies are cached;
* ``consume_thread_nums`` (20) consume workers call the listener with batches of at most
  ``consume_message_batch_max_size`` (1) messages of one queue;
* CONSUME_SUCCESS (or ``None``) removes the batch; RECONSUME_LATER or an exception sends each
  message back with CONSUMER_SEND_MSG_BACK (36), ``delayLevel = 3 + reconsumeTimes``, and then
  removes it. The broker moves a message whose ``reconsumeTimes`` reached
  ``max_reconsume_times`` (16) to ``%DLQ%<group>``. A send-back that fails keeps the message and
  consumes it again a second later;
* a queue's committed offset is the smallest offset still in its process queue (the next pull
  offset when it is empty), stored every ``auto_commit_interval_ms`` (5 s), before a rebalance
  gives the queue away and at :meth:`AsyncPushConsumer.shutdown`. Delivery is at least once.

Orderly listeners (``register_listener(fn, orderly=True)``) replace the shared consume workers
with one consume task per queue that holds the queue's broker lock and retries a failed batch
locally (:mod:`rocketq.client.orderly`).

Broadcasting (``message_model="BROADCASTING"``): every member owns every queue, offsets live in a
local file (:mod:`rocketq.client.offset_store`), the retry topic is not subscribed and a failed
message is dropped with a warning, not sent back (as RocketMQ).

Poison records (a record a pull cannot decode: CRC mismatch, a body marked compressed that does
not inflate; :func:`~rocketq.client.consumer_core.decode_pull_body`) never reach the listener
and never stall their queue. The pull logs each at ERROR; in clustering mode the consumer then
sends it straight to ``%DLQ%<group>`` (CONSUMER_SEND_MSG_BACK with ``delayLevel`` -1, the
record copied as stored) before the pulled messages are handed on, so the queue's committed
offset passes it only once it is in the DLQ. While the broker cannot be reached the send-back is
tried again every second; a broker that refuses it is logged at ERROR and the record skipped.
Broadcasting consumers skip it (as RocketMQ drops failed broadcast messages). A record that does
not parse at all cannot be sent back: it is skipped, as are the records after it in that pull's
body, which the next pull reads again.

An offset reset relayed by a broker (RESET_CONSUMER_CLIENT_OFFSET 220) drops the cached messages
of each affected owned queue and restarts its pull loop at the new offset.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from rocketq.client._facade import BlockingFacade, takes_arguments_of
from rocketq.client.allocate import AllocateStrategy
from rocketq.client.config import ClientConfig, ConsumeFromWhere, MessageModel
from rocketq.client.consumer_api import ConsumerApi, ConsumerFacade
from rocketq.client.consumer_core import (
    DEFAULT_PULL_BATCH_SIZE,
    DEFAULT_REBALANCE_INTERVAL_MS,
    ERROR_BACKOFF_S,
    MAX_SUSPEND_MS,
    ConsumerCore,
    PoisonRecord,
    QueueState,
)
from rocketq.client.offset_store import DEFAULT_OFFSET_STORE_DIR
from rocketq.client.orderly import (
    DEFAULT_LOCK_INTERVAL_MS,
    DEFAULT_SUSPEND_CURRENT_QUEUE_TIME_MS,
    ConsumeOrderlyStatus,
    OrderlyConsumeService,
)
from rocketq.client.process_queue import ProcessQueue
from rocketq.client.send_back import SEND_BACK_RETRY_S, dead_letter, send_back
from rocketq.errors import ClientStateError, ConfigError, RocketqError
from rocketq.message import PROPERTY_RETRY_TOPIC, MessageExt
from rocketq.protocol.queue import MessageQueue
from rocketq.protocol.topic import dlq_topic, retry_topic

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_CONSUME_THREAD_NUMS = 20
DEFAULT_CONSUME_MESSAGE_BATCH_MAX_SIZE = 1
DEFAULT_MAX_RECONSUME_TIMES = 16
DEFAULT_PULL_THRESHOLD_FOR_QUEUE = 1_000
DEFAULT_PULL_THRESHOLD_SIZE_FOR_QUEUE_MIB = 100
#: Longest wait of a flow-controlled pull loop before it looks at its process queue again.
FLOW_CONTROL_WAIT_S = 0.05


class ConsumeStatus(enum.Enum):
    """What a concurrent listener answers for its batch."""

    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


ListenerResult = ConsumeStatus | ConsumeOrderlyStatus | None
AsyncListener = Callable[[list[MessageExt]], "Awaitable[ListenerResult] | ListenerResult"]


class AsyncPushConsumer(ConsumerApi):
    """A RocketMQ push consumer (clustering, concurrent listener) on the running event loop.

    ``register_listener(fn)`` takes ``fn(list[MessageExt])`` returning a :class:`ConsumeStatus`
    (or ``None``, meaning success), or an awaitable of one. Settings shared with the other
    clients come from ``config`` (:class:`~rocketq.client.config.ClientConfig`); the keyword
    arguments of the same meaning override it when given (``auto_commit_interval_ms`` is the
    config's ``persist_consumer_offset_interval_ms``). The membership, rebalance and offset
    keywords are those of :class:`~rocketq.client.consumer_core.ConsumerCore`."""

    def __init__(
        self,
        group: str,
        *,
        config: ClientConfig | None = None,
        namesrv_addr: str | Sequence[str] | None = None,
        instance_name: str | None = None,
        client_ip: str | None = None,
        consume_from_where: ConsumeFromWhere | str = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp_ms: int | None = None,
        consume_thread_nums: int = DEFAULT_CONSUME_THREAD_NUMS,
        consume_message_batch_max_size: int = DEFAULT_CONSUME_MESSAGE_BATCH_MAX_SIZE,
        max_reconsume_times: int = DEFAULT_MAX_RECONSUME_TIMES,
        pull_batch_size: int = DEFAULT_PULL_BATCH_SIZE,
        pull_threshold_for_queue: int = DEFAULT_PULL_THRESHOLD_FOR_QUEUE,
        pull_threshold_size_for_queue_mib: int = DEFAULT_PULL_THRESHOLD_SIZE_FOR_QUEUE_MIB,
        auto_commit_interval_ms: int | None = None,
        suspend_current_queue_time_ms: int = DEFAULT_SUSPEND_CURRENT_QUEUE_TIME_MS,
        lock_interval_ms: int = DEFAULT_LOCK_INTERVAL_MS,
        heartbeat_interval_ms: int | None = None,
        rebalance_interval_ms: int = DEFAULT_REBALANCE_INTERVAL_MS,
        request_timeout_ms: int | None = None,
        allocate_strategy: str | AllocateStrategy = "AVG",
        message_model: MessageModel | str = MessageModel.CLUSTERING,
        offset_store_dir: str = DEFAULT_OFFSET_STORE_DIR,
    ) -> None:
        problems = []
        for name, value in (
            ("consume_thread_nums", consume_thread_nums),
            ("consume_message_batch_max_size", consume_message_batch_max_size),
            ("pull_threshold_for_queue", pull_threshold_for_queue),
            ("pull_threshold_size_for_queue_mib", pull_threshold_size_for_queue_mib),
            ("lock_interval_ms", lock_interval_ms),
        ):
            if value <= 0:
                problems.append(f"{name}={value} must be > 0")
        if suspend_current_queue_time_ms < 0:
            problems.append(f"suspend_current_queue_time_ms={suspend_current_queue_time_ms} must be >= 0")
        if max_reconsume_times < 0:
            problems.append(f"max_reconsume_times={max_reconsume_times} must be >= 0")
        if problems:
            raise ConfigError("invalid push consumer config: " + "; ".join(problems))
        self._core = ConsumerCore.of_facade("CONSUME_PASSIVELY", locals())
        self.consume_thread_nums = consume_thread_nums
        self.consume_message_batch_max_size = consume_message_batch_max_size
        self.max_reconsume_times = max_reconsume_times
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.pull_threshold_size_for_queue = pull_threshold_size_for_queue_mib * 1024 * 1024
        self.suspend_current_queue_time_ms = suspend_current_queue_time_ms
        self.lock_interval_ms = lock_interval_ms
        self._listener: AsyncListener | None = None
        self._orderly_listener = False
        self._orderly: OrderlyConsumeService | None = None
        self._releases: set[asyncio.Task[None]] = set()
        self._pqs: dict[MessageQueue, ProcessQueue] = {}
        self._pull_tasks: dict[MessageQueue, asyncio.Task[None]] = {}
        self._work: asyncio.Queue[tuple[ProcessQueue, list[MessageExt]] | None] | None = None
        self._workers: list[asyncio.Task[None]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._state = "created"
        if self._core.clustering:
            self._core.poison_action = f"sending it to {dlq_topic(group)}"
        else:
            self._core.poison_action = "skipped (broadcasting)"

    def register_listener(self, listener: AsyncListener, *, orderly: bool = False) -> None:
        """Set the function called with each batch of messages (before :meth:`start`).

        ``orderly=True`` consumes each queue one batch at a time in queue order, holding the
        queue's lock at its broker (see :mod:`rocketq.client.orderly`); the listener answers
        :class:`~rocketq.client.orderly.ConsumeOrderlyStatus` (or a :class:`ConsumeStatus`)."""
        if self._state != "created":
            raise ClientStateError("register_listener() must be called before start()")
        self._listener = listener
        self._orderly_listener = orderly

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        if self._state == "running":
            return
        if self._state != "created":
            raise ClientStateError(f"consumer {self.group} was shut down and cannot be restarted")
        if self._listener is None:
            raise ClientStateError("register_listener() must be called before start()")
        if self._core.clustering:
            self._core.subscribe(retry_topic(self.group), "*")
        self._core.reset_listener = self._on_reset_offset
        self._work = asyncio.Queue()
        loop = asyncio.get_running_loop()
        if self._orderly_listener:
            self._orderly = OrderlyConsumeService(
                self._core,
                self._call_listener,
                self._store_offset,
                batch_max_size=self.consume_message_batch_max_size,
                suspend_ms=self.suspend_current_queue_time_ms,
                lock_interval_ms=self.lock_interval_ms,
            )
            self._tasks.append(
                loop.create_task(self._orderly.renew_loop(), name=f"rocketq-push-{self.group}-lock")
            )
        else:
            self._workers = [
                loop.create_task(self._consume_worker(), name=f"rocketq-push-{self.group}-consume-{i}")
                for i in range(self.consume_thread_nums)
            ]
        self._state = "running"
        try:
            await self._core.start()
        except BaseException:
            await self._stop_tasks()
            self._state = "shutdown"
            raise
        self._tasks.append(
            loop.create_task(self._assignment_loop(), name=f"rocketq-push-{self.group}-assign")
        )
        self._reconcile()
        log.info("push consumer %s started as %s", self.group, self.client_id)

    async def shutdown(self) -> None:
        """Stop pulling, finish the batches being consumed, commit offsets, leave the group."""
        if self._state != "running":
            self._state = "shutdown"
            return
        self._state = "stopping"
        try:
            await self._stop_tasks()
            if self._orderly is not None:
                await self._orderly.release_all()
        finally:
            self._state = "shutdown"
            await self._core.shutdown()
        log.info("push consumer %s shut down", self.group)

    async def _stop_tasks(self) -> None:
        pulls = [*self._tasks, *self._pull_tasks.values()]
        for task in pulls:
            task.cancel()
        await asyncio.gather(*pulls, return_exceptions=True)
        self._tasks.clear()
        self._pull_tasks.clear()
        work = self._work
        if work is not None:
            while not work.empty():
                work.get_nowait()
            for _ in self._workers:
                work.put_nowait(None)
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers.clear()
        await asyncio.gather(*self._releases, return_exceptions=True)

    # -- queues ------------------------------------------------------------------------------
    async def _assignment_loop(self) -> None:
        event = self._core.assignment_changed
        while True:
            await event.wait()
            event.clear()
            self._reconcile()

    def _reconcile(self) -> None:
        """Start a pull loop for every newly owned queue, drop the queues given away."""
        if self._state != "running":
            return
        owned = set(self._core.assignment())
        loop = asyncio.get_running_loop()
        for mq in [mq for mq in self._pqs if mq not in owned]:
            pq = self._pqs.pop(mq)
            pq.dropped = True
            task = self._pull_tasks.pop(mq, None)
            if task is not None:
                task.cancel()
            if self._orderly is not None:
                release = loop.create_task(self._orderly.release(pq), name=f"rocketq-orderly-release-{mq}")
                self._releases.add(release)
                release.add_done_callback(self._releases.discard)
            log.info("push consumer %s dropped %s", self.client_id, mq)
        for mq in sorted(owned - set(self._pull_tasks)):
            self._pull_tasks[mq] = loop.create_task(self._pull_loop(mq), name=f"rocketq-push-pull-{mq}")

    def _core_state(self, mq: MessageQueue) -> QueueState | None:
        return self._core.queue_state(mq)

    async def _pull_loop(self, mq: MessageQueue) -> None:
        pq: ProcessQueue | None = None
        while pq is None:
            state = self._core_state(mq)
            if state is None:
                return
            # an orderly queue's committed offset is read only once the previous owner unlocked it
            if not await self._lock_for_orderly(mq, state):
                return
            try:
                offset = state.offset if state.offset is not None else await self._core.initial_offset(mq)
            except RocketqError as exc:
                log.warning("start offset of %s unavailable: %s", mq, exc)
                await asyncio.sleep(ERROR_BACKOFF_S)
                continue
            if self._core_state(mq) is not state:
                return
            state.offset = offset
            pq = ProcessQueue(mq, offset)
            self._pqs[mq] = pq
            if self._orderly is not None:
                self._orderly.start_queue(pq)
        while not pq.dropped:
            if pq.over_threshold(self.pull_threshold_for_queue, self.pull_threshold_size_for_queue):
                pq.freed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(pq.freed.wait(), FLOW_CONTROL_WAIT_S)
                continue
            try:
                # the committed offset rides on the pull (not for orderly queues, whose offset is
                # committed before the queue is unlocked and must not be overtaken)
                ride = None if self._orderly is not None else self._core.ride_along_offset(mq)
                pulled = await self._core.pull(mq, pq.pull_offset, MAX_SUSPEND_MS, commit_offset=ride)
            except RocketqError as exc:
                log.warning("pull of %s failed: %s", mq, exc)
                await asyncio.sleep(ERROR_BACKOFF_S)
                continue
            if pq.dropped or pulled.offset != pq.pull_offset:
                return
            if pulled.poison and not await self._dead_letter(pq, pulled.poison):
                return
            added = pq.add(pulled.messages, pulled.next_offset)
            if not pq.messages:
                self._store_offset(pq, pq.committable())
            self._dispatch(pq, added)

    async def _lock_for_orderly(self, mq: MessageQueue, state: QueueState) -> bool:
        orderly = self._orderly
        if orderly is None or not orderly.clustering:
            return True
        return await orderly.acquire(mq, lambda: self._core_state(mq) is not state)

    def _dispatch(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        if self._orderly is not None:
            if messages:
                self._orderly.notify(pq)
            return
        work = self._work
        assert work is not None
        size = self.consume_message_batch_max_size
        for i in range(0, len(messages), size):
            work.put_nowait((pq, messages[i : i + size]))

    def _store_offset(self, pq: ProcessQueue, offset: int) -> None:
        state = self._core_state(pq.mq)
        if state is not None and not pq.dropped:
            state.offset = offset

    # -- consuming ---------------------------------------------------------------------------
    async def _consume_worker(self) -> None:
        work = self._work
        assert work is not None
        while True:
            item = await work.get()
            if item is None:
                return
            pq, batch = item
            if pq.dropped:
                continue
            await self._consume(pq, batch)

    async def _call_listener(self, mq: MessageQueue, batch: list[MessageExt]) -> bool:
        """Run the listener on ``batch``; True when it succeeded."""
        for m in batch:
            origin = m.properties.get(PROPERTY_RETRY_TOPIC)
            if origin and m.topic == retry_topic(self.group):
                m.topic = origin
        listener = self._listener
        assert listener is not None
        status: ListenerResult
        try:
            result = listener(batch)
            status = await result if inspect.isawaitable(result) else result
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("listener of group %s failed on %d message(s) of %s", self.group, len(batch), mq)
            return False
        return status is None or status in (ConsumeStatus.CONSUME_SUCCESS, ConsumeOrderlyStatus.SUCCESS)

    async def _consume(self, pq: ProcessQueue, batch: list[MessageExt]) -> None:
        if await self._call_listener(pq.mq, batch):
            self._store_offset(pq, pq.remove(batch))
            return
        if not self._core.clustering:
            # as RocketMQ: a broadcast message that failed is not retried
            log.warning(
                "broadcast consumer %s drops %d failed message(s) of %s", self.client_id, len(batch), pq.mq
            )
            self._store_offset(pq, pq.remove(batch))
            return
        failed: list[MessageExt] = []
        done: list[MessageExt] = []
        for m in batch:
            (done if await self._send_back(pq.mq, m) else failed).append(m)
        self._store_offset(pq, pq.remove(done))
        if failed and not pq.dropped:
            asyncio.get_running_loop().call_later(SEND_BACK_RETRY_S, self._redispatch, pq, failed)

    async def _on_reset_offset(self, table: dict[MessageQueue, int]) -> None:
        """A broker relayed an offset reset: drop the cached messages of each owned queue in
        ``table`` and pull it again from its new offset."""
        for mq, offset in table.items():
            state = self._core_state(mq)
            if state is None:
                continue
            pq = self._pqs.pop(mq, None)
            task = self._pull_tasks.pop(mq, None)
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            if pq is not None:
                pq.dropped = True
                if self._orderly is not None:
                    await self._orderly.release(pq, unlock=False)
            state.move_to(offset)
            log.info("push consumer %s: %s reset to offset %d", self.client_id, mq, offset)
        self._reconcile()

    def _redispatch(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        if self._state == "running" and not pq.dropped:
            self._dispatch(pq, messages)

    async def _send_back(self, mq: MessageQueue, m: MessageExt) -> bool:
        try:
            await self._send_back_request(mq, m, 3 + m.reconsume_times)
        except RocketqError as exc:
            log.warning("send back of message %s of %s failed: %s", m.msg_id, mq, exc)
            return False
        return True

    async def _send_back_request(self, mq: MessageQueue, m: MessageExt, delay_level: int) -> None:
        await send_back(self._core, mq, m, delay_level, self.max_reconsume_times)

    async def _dead_letter(self, pq: ProcessQueue, poison: list[PoisonRecord]) -> bool:
        return await dead_letter(self._core, pq, poison, self.max_reconsume_times)


Listener = Callable[[list[MessageExt]], ListenerResult]


class PushConsumer(ConsumerFacade[AsyncPushConsumer]):
    """A push consumer with blocking methods; same arguments as :class:`AsyncPushConsumer`.

    ``start()`` creates one event loop and one daemon thread (``rocketq-push-<group>``) running
    the core, and a pool of ``consume_thread_nums`` threads that run the listener.

    >>> c = PushConsumer("CG", namesrv_addr="127.0.0.1:9876")          # doctest: +SKIP
    >>> c.subscribe("T", "TagA || TagB")                                 # doctest: +SKIP
    >>> c.register_listener(lambda msgs: ConsumeStatus.CONSUME_SUCCESS)  # doctest: +SKIP
    >>> c.start(); ...; c.shutdown()                                     # doctest: +SKIP
    """

    @takes_arguments_of(AsyncPushConsumer)
    def __init__(self, group: str, **kwargs: Any) -> None:
        self._listener: Listener | None = None
        self._pool: ThreadPoolExecutor | None = None
        BlockingFacade.__init__(
            self, AsyncPushConsumer(group, **kwargs), f"rocketq-push-{group}", f"consumer {group}"
        )

    def register_listener(self, listener: Listener, *, orderly: bool = False) -> None:
        """Set ``listener(list[MessageExt]) -> ConsumeStatus | None`` (before :meth:`start`)."""

        async def run(batch: list[MessageExt]) -> ListenerResult:
            pool = self._pool
            assert pool is not None
            return await asyncio.get_running_loop().run_in_executor(pool, listener, batch)

        self._core.register_listener(run, orderly=orderly)
        self._listener = listener

    def _on_loop_started(self) -> None:
        self._pool = ThreadPoolExecutor(
            self._core.consume_thread_nums, thread_name_prefix=f"rocketq-push-{self.group}-consume"
        )

    def _on_loop_stopped(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)


__all__ = ["AsyncPushConsumer", "ConsumeOrderlyStatus", "ConsumeStatus", "ProcessQueue", "PushConsumer"]
