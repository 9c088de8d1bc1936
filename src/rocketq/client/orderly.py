"""Orderly consumption for the push consumer: one message at a time per queue, in queue order.

A message queue keeps the order in which messages were stored; an orderly listener sees a queue's
messages in that order, never two of one queue at once, and a message is not skipped because it
failed. Across queues, consumption runs in parallel (one task per owned queue).

In clustering mode a queue is consumed only while this client holds its *lock* on the queue's
broker (LOCK_BATCH_MQ 41 / UNLOCK_BATCH_MQ 42, body ``{"consumerGroup","clientId",
"onlyThisBroker","mqSet"}``, answer ``{"lockOKMQSet"}``), so that during a rebalance the old and
the new owner never consume one queue at the same time::

    newly owned queue  → lock it (retry every LOCK_RETRY_S while another client holds it)
                       → only then read its committed offset and start pulling
    every lock_interval_ms (20 s)  → renew the locks of every owned queue, per broker
    a lock older than LOCK_EXPIRE_MS (30 s) without renewal  → stop consuming until relocked
    queue given away / shutdown  → let the message being consumed finish, commit the offset,
                                   then unlock (the next owner reads that committed offset)

The broker drops a lock 60 s after its last renewal, so a consumer that dies without unlocking
holds its queues for at most a minute. Broadcasting consumers read every queue on their own and
take no locks.

Per queue, the consume task takes the ``consume_message_batch_max_size`` (1) lowest-offset
messages of the process queue and calls the listener:

* success → the messages leave the process queue, the commit offset moves past them;
* failure (:attr:`ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT`, ``RECONSUME_LATER`` or an
  exception) → the queue is suspended for ``suspend_current_queue_time_ms`` (1 s) and the *same*
  messages are offered again with ``reconsume_times`` one higher. There is no limit (RocketMQ's
  orderly default), so a message that always fails blocks its queue: fix the listener or reset
  the group's offset past it.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from rocketq.client.aio import error_for_response
from rocketq.errors import ResponseCode, RocketqError
from rocketq.message import MessageExt
from rocketq.protocol.queue import MessageQueue
from rocketq.remoting import RemotingCommand, RequestCode

if TYPE_CHECKING:
    from rocketq.client.consumer_core import ConsumerCore
    from rocketq.client.process_queue import ProcessQueue

log = logging.getLogger(__name__)

DEFAULT_LOCK_INTERVAL_MS = 20_000
DEFAULT_SUSPEND_CURRENT_QUEUE_TIME_MS = 1_000
#: A client-side lock not renewed for this long no longer allows consuming (RocketMQ: 30 s).
LOCK_EXPIRE_MS = 30_000
#: Pause between attempts to lock a queue another client still holds.
LOCK_RETRY_S = 0.5
#: How long giving a queue away waits for the listener call in progress.
RELEASE_WAIT_S = 30.0


class ConsumeOrderlyStatus(enum.Enum):
    """What an orderly listener answers for its messages."""

    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def lock_body(group: str, client_id: str, mqs: Iterable[MessageQueue]) -> bytes:
    """A Lock/UnlockBatchRequestBody."""
    body = {
        "consumerGroup": group,
        "clientId": client_id,
        "onlyThisBroker": False,
        "mqSet": [{"brokerName": mq.broker_name, "queueId": mq.queue_id, "topic": mq.topic} for mq in mqs],
    }
    return json.dumps(body, separators=(",", ":")).encode()


def parse_locked(body: bytes) -> set[MessageQueue]:
    """The ``lockOKMQSet`` of a LOCK_BATCH_MQ answer."""
    doc = json.loads(body.decode("utf-8", "replace")) if body else {}
    items = doc.get("lockOKMQSet") if isinstance(doc, dict) else None
    return {
        MessageQueue(str(m.get("topic", "")), str(m.get("brokerName", "")), int(m.get("queueId", -1)))
        for m in items or []
        if isinstance(m, dict)
    }


class _OrderlyQueue:
    """Consumption state of one owned queue."""

    def __init__(self, pq: ProcessQueue) -> None:
        self.pq = pq
        self.locked_at_ms: int | None = None
        self.arrived = asyncio.Event()
        self.task: asyncio.Task[None] | None = None


RunListener = Callable[[MessageQueue, list[MessageExt]], Awaitable[bool]]
StoreOffset = Callable[["ProcessQueue", int], None]


class OrderlyConsumeService:
    """The per-queue consume tasks and broker locks of one orderly push consumer."""

    def __init__(
        self,
        core: ConsumerCore,
        run_listener: RunListener,
        store_offset: StoreOffset,
        *,
        batch_max_size: int,
        suspend_ms: int = DEFAULT_SUSPEND_CURRENT_QUEUE_TIME_MS,
        lock_interval_ms: int = DEFAULT_LOCK_INTERVAL_MS,
    ) -> None:
        self.core = core
        self.run_listener = run_listener
        self.store_offset = store_offset
        self.batch_max_size = batch_max_size
        self.suspend_ms = suspend_ms
        self.lock_interval_ms = lock_interval_ms
        self.clustering = core.clustering
        self._queues: dict[MessageQueue, _OrderlyQueue] = {}
        self._locks: dict[MessageQueue, int] = {}  # queue -> last successful lock (monotonic ms)

    # -- broker locks ---------------------------------------------------------------------------
    async def lock(self, mqs: Sequence[MessageQueue]) -> set[MessageQueue]:
        """Lock (or renew) ``mqs`` on their brokers; the ones this client holds now."""
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            by_broker.setdefault(mq.broker_name, []).append(mq)
        held: set[MessageQueue] = set()
        for broker_name, group in sorted(by_broker.items()):
            try:
                response = await self._invoke(RequestCode.LOCK_BATCH_MQ, group)
                if response.code != ResponseCode.SUCCESS:
                    raise error_for_response(response, broker_name)
                got = parse_locked(response.body)
            except (RocketqError, ValueError) as exc:
                log.warning("locking %d queue(s) on %s failed: %s", len(group), broker_name, exc)
                continue
            held.update(mq for mq in group if mq in got)
        now = _now_ms()
        for mq in mqs:
            if mq in held:
                self._locks[mq] = now
            else:
                self._locks.pop(mq, None)
        return held

    async def unlock(self, mqs: Sequence[MessageQueue]) -> None:
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            self._locks.pop(mq, None)
            by_broker.setdefault(mq.broker_name, []).append(mq)
        for broker_name, group in sorted(by_broker.items()):
            try:
                await self._invoke(RequestCode.UNLOCK_BATCH_MQ, group)
            except RocketqError as exc:
                log.warning("unlocking %d queue(s) on %s failed: %s", len(group), broker_name, exc)

    async def _invoke(self, code: int, mqs: list[MessageQueue]) -> RemotingCommand:
        core = self.core
        return await core.invoke(code, mqs[0], {}, lock_body(core.group, core.client_id, mqs))

    def lock_valid(self, mq: MessageQueue) -> bool:
        if not self.clustering:
            return True
        at = self._locks.get(mq)
        return at is not None and _now_ms() - at <= LOCK_EXPIRE_MS

    async def acquire(self, mq: MessageQueue, dropped: Callable[[], bool]) -> bool:
        """Wait until ``mq`` is locked by this client; False when it was dropped meanwhile."""
        while not dropped():
            if self.lock_valid(mq) or mq in await self.lock([mq]):
                return True
            await asyncio.sleep(LOCK_RETRY_S)
        return False

    async def renew_loop(self) -> None:
        """Renew the locks of every owned queue every ``lock_interval_ms``."""
        while True:
            await asyncio.sleep(self.lock_interval_ms / 1000)
            if self.clustering and self._queues:
                await self.lock(sorted(self._queues))

    # -- per-queue consumption ------------------------------------------------------------------
    def start_queue(self, pq: ProcessQueue) -> None:
        oq = self._queues.get(pq.mq)
        if oq is not None and oq.pq is pq:
            return
        oq = self._queues[pq.mq] = _OrderlyQueue(pq)
        oq.task = asyncio.get_running_loop().create_task(
            self._consume_loop(oq), name=f"rocketq-orderly-{pq.mq}"
        )

    def notify(self, pq: ProcessQueue) -> None:
        """New messages arrived in ``pq``."""
        oq = self._queues.get(pq.mq)
        if oq is not None and oq.pq is pq:
            oq.arrived.set()

    async def release(self, pq: ProcessQueue, *, unlock: bool = True) -> None:
        """Stop consuming ``pq`` (already marked dropped) after the listener call in progress,
        commit its offset, then unlock it at the broker."""
        oq = self._queues.get(pq.mq)
        if oq is None or oq.pq is not pq:
            return
        del self._queues[pq.mq]
        oq.arrived.set()
        if oq.task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(oq.task), RELEASE_WAIT_S)
            except TimeoutError:
                log.warning(
                    "listener still busy on %s after %.0f s; releasing it anyway", pq.mq, RELEASE_WAIT_S
                )
                oq.task.cancel()
            except asyncio.CancelledError:
                oq.task.cancel()
                raise
        state = self.core.queue_state(pq.mq)
        if state is not None:
            state.offset = pq.committable()
        if not self.clustering:
            return
        await self._commit(pq.mq, pq.committable())
        if unlock:
            await self.unlock([pq.mq])

    async def release_all(self) -> None:
        for oq in list(self._queues.values()):
            oq.pq.dropped = True
        await asyncio.gather(*(self.release(oq.pq) for oq in list(self._queues.values())))

    async def _commit(self, mq: MessageQueue, offset: int) -> None:
        try:
            await self.core.update_broker_offset(mq, offset)
        except RocketqError as exc:
            log.warning("commit of offset %d of %s failed: %s", offset, mq, exc)

    async def _consume_loop(self, oq: _OrderlyQueue) -> None:
        pq = oq.pq
        while not pq.dropped:
            if not pq.messages:
                oq.arrived.clear()
                await oq.arrived.wait()
                continue
            if not self.lock_valid(pq.mq):
                if not await self.acquire(pq.mq, lambda: pq.dropped):
                    return
                continue
            batch = [pq.messages[k] for k in sorted(pq.messages)[: self.batch_max_size]]
            if await self.run_listener(pq.mq, batch):
                self.store_offset(pq, pq.remove(batch))
                continue
            for m in batch:
                m.reconsume_times += 1
            if not pq.dropped:
                await asyncio.sleep(self.suspend_ms / 1000)


__all__ = [
    "DEFAULT_LOCK_INTERVAL_MS",
    "DEFAULT_SUSPEND_CURRENT_QUEUE_TIME_MS",
    "LOCK_EXPIRE_MS",
    "ConsumeOrderlyStatus",
    "OrderlyConsumeService",
    "lock_body",
    "parse_locked",
]
