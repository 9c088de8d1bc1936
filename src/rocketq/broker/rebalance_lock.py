"""Queue locks for orderly consumers: LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42).

A Java consumer that consumes a queue in order first locks it on the queue's broker and renews
the lock every 20 s (``RebalanceLockManager``). Bodies (spec §3.5)::

    request   {"consumerGroup":"g","clientId":"ip@pid","onlyThisBroker":false,
               "mqSet":[{"brokerName":"broker-a","queueId":0,"topic":"t"}, ...]}
    response  {"lockOKMQSet":[...]}     the queues now held by this client id

A lock belongs to (group, queue) and a client id; it expires 60 s after its last renewal
(``rocketmq.broker.rebalance.lockMaxLiveTime``). Locking a queue another client holds with a
live lock fails for that queue; an expired lock is taken over. Unlocking releases only the
caller's own locks.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rocketq.protocol.fastjson import as_bool, as_str
from rocketq.protocol.queue import MessageQueue

#: A lock not renewed for this long is free (RocketMQ's default, in ms).
LOCK_MAX_LIVE_TIME_MS = 60_000


@dataclass(frozen=True, slots=True)
class LockBatchRequest:
    consumer_group: str
    client_id: str
    mq_set: tuple[MessageQueue, ...]
    only_this_broker: bool = False


def parse_lock_body(body: bytes) -> LockBatchRequest:
    """Decode a Lock/UnlockBatchRequestBody; raises ValueError when it is not one."""
    try:
        obj = json.loads(body.decode("utf-8", "replace"))
    except RecursionError:
        raise ValueError("lock body is nested too deeply") from None
    if not isinstance(obj, dict):
        raise ValueError(f"lock body is a JSON {type(obj).__name__}, not an object")
    mqs = obj.get("mqSet") or []
    if not isinstance(mqs, list):
        raise ValueError("lock body field 'mqSet' is not a list")
    return LockBatchRequest(
        consumer_group=as_str(obj.get("consumerGroup"), ""),
        client_id=as_str(obj.get("clientId"), ""),
        mq_set=tuple(MessageQueue.from_json(m) for m in mqs if isinstance(m, dict)),
        only_this_broker=as_bool(obj.get("onlyThisBroker"), False),
    )


def encode_lock_response(locked: Iterable[MessageQueue]) -> bytes:
    return json.dumps({"lockOKMQSet": [mq.to_json() for mq in locked]}, separators=(",", ":")).encode()


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass(slots=True)
class _Lock:
    client_id: str
    last_update_ms: int


class RebalanceLockManager:
    """Locks by (group, queue). Call from one thread (the event loop)."""

    def __init__(
        self, *, lock_max_live_time_ms: int = LOCK_MAX_LIVE_TIME_MS, clock_ms: Callable[[], int] = _now_ms
    ) -> None:
        self.lock_max_live_time_ms = lock_max_live_time_ms
        self._clock_ms = clock_ms
        self._table: dict[str, dict[MessageQueue, _Lock]] = {}

    def _expired(self, lock: _Lock, now: int) -> bool:
        return now - lock.last_update_ms > self.lock_max_live_time_ms

    def try_lock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> list[MessageQueue]:
        """Lock (or renew) each queue; returns the ones this client holds afterwards."""
        now = self._clock_ms()
        locks = self._table.setdefault(group, {})
        held: list[MessageQueue] = []
        for mq in mqs:
            lock = locks.get(mq)
            if lock is None or lock.client_id == client_id or self._expired(lock, now):
                locks[mq] = _Lock(client_id, now)
                held.append(mq)
        return held

    def unlock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> None:
        locks = self._table.get(group)
        if not locks:
            return
        for mq in mqs:
            lock = locks.get(mq)
            if lock is not None and lock.client_id == client_id:
                del locks[mq]
        if not locks:
            del self._table[group]

    def is_locked(self, group: str, mq: MessageQueue, client_id: str) -> bool:
        lock = self._table.get(group, {}).get(mq)
        return lock is not None and lock.client_id == client_id and not self._expired(lock, self._clock_ms())


__all__ = [
    "LOCK_MAX_LIVE_TIME_MS",
    "LockBatchRequest",
    "RebalanceLockManager",
    "encode_lock_response",
    "parse_lock_body",
]
