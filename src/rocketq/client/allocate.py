"""Queue allocation strategies: which of a topic's queues one member of a consumer group owns.

Every member computes its own share from the same inputs — the topic's readable queues and the
group's client ids, both sorted — so the members agree without talking to each other. A
strategy is a pure function ``(queues, consumer_ids, me) -> my queues``; the group is consistent
only while every member uses the same strategy (as in RocketMQ, where mixing strategies in one
group leaves queues unowned or doubly owned).

=====================  ================  =====================================================
name                   RocketMQ class    share of consumer ``i`` of ``c`` over ``n`` queues
=====================  ================  =====================================================
``AVG``                Averagely         one contiguous run; the first ``n mod c`` get one more
``AVG_BY_CIRCLE``      AveragelyByCircle queues ``i, i + c, i + 2c, …`` (dealt like cards)
``CONSISTENT_HASH``    ConsistentHash    each queue goes to the next virtual node clockwise on
                                         a hash ring of ``virtual_nodes`` (10) per consumer
=====================  ================  =====================================================

Consistent hashing keeps most queues where they are when a member joins or leaves (only the
queues between the newcomer's virtual nodes and their predecessors move). Its hash is RocketMQ's:
MD5 of the UTF-8 key, the first four digest bytes as a big-endian unsigned number; consumer
virtual nodes are keyed ``"<clientId>-<n>"`` and queues ``"MessageQueue [topic=T,
brokerName=B, queueId=Q]"``, so a group that mixes rocketq and Java consumers splits queues
identically.

Invariants (checked by the unit tests for every strategy): the shares of all members are
disjoint and together cover every queue; a client id not in the group owns nothing.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable, Sequence

from rocketq.errors import ConfigError
from rocketq.protocol.queue import MessageQueue

#: ``(queues, consumer_ids, me) -> me's queues``
AllocateStrategy = Callable[[Sequence[MessageQueue], Sequence[str], str], list[MessageQueue]]

#: Virtual nodes per consumer on the consistent-hash ring (RocketMQ's default).
DEFAULT_VIRTUAL_NODES = 10


def _prepare(
    queues: Sequence[MessageQueue], consumer_ids: Sequence[str], me: str
) -> tuple[list[MessageQueue], list[str], int]:
    mqs = sorted(set(queues))
    ids = sorted(set(consumer_ids))
    index = ids.index(me) if me in ids and mqs else -1
    return mqs, ids, index


def allocate_averagely(
    queues: Sequence[MessageQueue], consumer_ids: Sequence[str], me: str
) -> list[MessageQueue]:
    """``me``'s contiguous share of the sorted ``queues`` among the sorted ``consumer_ids``."""
    mqs, ids, index = _prepare(queues, consumer_ids, me)
    if index < 0:
        return []
    base, extra = divmod(len(mqs), len(ids))
    start = index * base + min(index, extra)
    count = base + (1 if index < extra else 0)
    return mqs[start : start + count]


def allocate_averagely_by_circle(
    queues: Sequence[MessageQueue], consumer_ids: Sequence[str], me: str
) -> list[MessageQueue]:
    """Every ``len(consumer_ids)``-th queue of the sorted ``queues``, starting at ``me``'s index."""
    mqs, ids, index = _prepare(queues, consumer_ids, me)
    if index < 0:
        return []
    return mqs[index :: len(ids)]


def ring_hash(key: str) -> int:
    """RocketMQ's consistent-hash ring position of ``key`` (first 4 MD5 bytes, big endian)."""
    return int.from_bytes(hashlib.md5(key.encode("utf-8"), usedforsecurity=False).digest()[:4], "big")


def queue_key(mq: MessageQueue) -> str:
    """The text a queue is hashed by (Java ``MessageQueue.toString()``)."""
    return f"MessageQueue [topic={mq.topic}, brokerName={mq.broker_name}, queueId={mq.queue_id}]"


def consistent_hash_strategy(virtual_nodes: int = DEFAULT_VIRTUAL_NODES) -> AllocateStrategy:
    """A consistent-hash strategy with ``virtual_nodes`` ring positions per consumer."""
    if virtual_nodes <= 0:
        raise ConfigError(f"virtual_nodes={virtual_nodes} must be > 0")

    def allocate(queues: Sequence[MessageQueue], consumer_ids: Sequence[str], me: str) -> list[MessageQueue]:
        mqs, ids, index = _prepare(queues, consumer_ids, me)
        if index < 0:
            return []
        ring = sorted((ring_hash(f"{cid}-{n}"), cid) for cid in ids for n in range(virtual_nodes))
        points = [h for h, _ in ring]
        mine = []
        for mq in mqs:
            at = bisect.bisect_left(points, ring_hash(queue_key(mq)))
            if ring[at % len(ring)][1] == me:
                mine.append(mq)
        return mine

    return allocate


allocate_consistent_hash = consistent_hash_strategy()

#: Strategies by their RocketMQ names (``AllocateMessageQueueStrategy.getName()``).
STRATEGIES: dict[str, AllocateStrategy] = {
    "AVG": allocate_averagely,
    "AVG_BY_CIRCLE": allocate_averagely_by_circle,
    "CONSISTENT_HASH": allocate_consistent_hash,
}


def resolve_strategy(strategy: str | AllocateStrategy) -> AllocateStrategy:
    """A strategy by name (``"AVG"``, ``"AVG_BY_CIRCLE"``, ``"CONSISTENT_HASH"``) or as given."""
    if callable(strategy):
        return strategy
    found = STRATEGIES.get(strategy.upper())
    if found is None:
        raise ConfigError(f"allocate strategy {strategy!r} is unknown; use one of {', '.join(STRATEGIES)}")
    return found


__all__ = [
    "DEFAULT_VIRTUAL_NODES",
    "STRATEGIES",
    "AllocateStrategy",
    "allocate_averagely",
    "allocate_averagely_by_circle",
    "allocate_consistent_hash",
    "consistent_hash_strategy",
    "queue_key",
    "resolve_strategy",
    "ring_hash",
]
