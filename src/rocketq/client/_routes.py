"""Topic routes for producers: a cache fed by GET_ROUTEINFO_BY_TOPIC (105) and queue selection.

A route (``TopicRouteData``, spec §3.1) becomes a :class:`TopicPublishInfo`: the writable queues
(``QueueData.perm`` has WRITE) of every broker name that has a master (brokerId 0), sorted by
broker name then queue id, as Java's ``topicRouteData2TopicPublishInfo`` does.

Name servers are asked round-robin: each query starts at the next address and tries every
address once. A topic the name servers do not know (TOPIC_NOT_EXIST) is published through the
``TBW102`` template route (at most 4 queues per broker), so the first send auto-creates it on the
broker (spec §8); the real route replaces it on the next refresh.

Cached routes are refreshed every ``refresh_interval_s`` (30 s) by the producer; a refresh that
fails keeps the cached route, so sends go on while the name servers are down.

Queue selection (:meth:`TopicPublishInfo.select`): round-robin over the writable queues,
skipping brokers in back-off (:mod:`rocketq.client._fault`) and, on a retry, the broker that just
failed. Sharding keys use :func:`hash_queue_index`: Java ``String.hashCode`` of the key, absolute
value, modulo the queue count (RocketMQ's ``SelectMessageQueueByHash``), so a key always maps to
the same queue while the route does not change.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rocketq.client._fault import LatencyFaultTolerance
from rocketq.errors import NameServerUnavailable, RemotingError, ResponseCode, TopicNotExist
from rocketq.message import java_string_hash
from rocketq.protocol.queue import MessageQueue
from rocketq.protocol.route import MASTER_ID, TopicRouteData
from rocketq.protocol.topic import AUTO_CREATE_TOPIC_KEY_TOPIC, PERM_WRITE
from rocketq.remoting import RemotingClient, RequestCode, create_request

log = logging.getLogger(__name__)

#: Queues per broker a producer uses for a topic published through TBW102 (Java: 4).
DEFAULT_TOPIC_QUEUE_NUMS = 4


def hash_queue_index(key: str, queue_count: int) -> int:
    """The queue index for a sharding key: ``abs(String.hashCode(key)) % queue_count``."""
    if queue_count <= 0:
        raise ValueError("queue_count must be positive")
    return abs(java_string_hash(key)) % queue_count


@dataclass(slots=True)
class TopicPublishInfo:
    """The writable queues of one topic and the master address of every broker serving it."""

    topic: str
    queues: tuple[MessageQueue, ...]
    broker_addrs: Mapping[str, str]
    from_template: bool = False
    _counter: itertools.count[int] = field(default_factory=itertools.count)

    @classmethod
    def from_route(
        cls, topic: str, route: TopicRouteData, *, from_template: bool = False
    ) -> TopicPublishInfo:
        masters = {
            bd.broker_name: bd.broker_addrs[MASTER_ID]
            for bd in route.broker_datas
            if bd.broker_addrs.get(MASTER_ID)
        }
        queues: list[MessageQueue] = []
        for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
            if not qd.perm & PERM_WRITE or qd.broker_name not in masters:
                continue
            n = qd.write_queue_nums
            if from_template:
                n = min(n, DEFAULT_TOPIC_QUEUE_NUMS)
            queues.extend(MessageQueue(topic, qd.broker_name, i) for i in range(n))
        return cls(topic, tuple(queues), masters, from_template)

    def select(
        self, faults: LatencyFaultTolerance | None = None, avoid_broker: str | None = None
    ) -> MessageQueue:
        """The next queue round-robin, preferring available brokers other than ``avoid_broker``."""
        queues = self.queues
        if not queues:
            raise TopicNotExist(f"topic {self.topic!r} has no writable queue on any master broker")
        start = next(self._counter)
        n = len(queues)
        if avoid_broker is None and (faults is None or not faults.items):
            return queues[start % n]  # no broker in back-off, none to avoid: the loop's first
        for i in range(n):
            mq = queues[(start + i) % n]
            if mq.broker_name != avoid_broker and (faults is None or faults.is_available(mq.broker_name)):
                return mq  # most often the first one: no list of the whole order is made
        order = [queues[(start + i) % n] for i in range(n)]
        if faults is not None:
            # Every broker is in back-off (or is the one to avoid): take the one recovering first.
            names = {mq.broker_name for mq in queues if mq.broker_name != avoid_broker}
            best = faults.least_bad(names)
            if best is not None:
                return next(mq for mq in order if mq.broker_name == best)
        return order[0]


class RouteCache:
    """Topic → :class:`TopicPublishInfo`, fetched from the name servers on demand and on refresh."""

    def __init__(self, remoting: RemotingClient, namesrv_addrs: Sequence[str], timeout_s: float) -> None:
        if not namesrv_addrs:
            raise ValueError("at least one name server address is required")
        self._remoting = remoting
        self._namesrv_addrs = list(namesrv_addrs)
        self._timeout_s = timeout_s
        self._next_namesrv = 0
        self._infos: dict[str, TopicPublishInfo] = {}

    @property
    def topics(self) -> list[str]:
        return list(self._infos)

    def cached(self, topic: str) -> TopicPublishInfo | None:
        return self._infos.get(topic)

    def invalidate(self, topic: str) -> None:
        self._infos.pop(topic, None)

    async def fetch_route(self, topic: str) -> TopicRouteData:
        """Ask the name servers (round-robin) for ``topic``'s route.

        Raises TopicNotExist when a name server does not know the topic and
        NameServerUnavailable when none answered."""
        addrs = self._namesrv_addrs
        first = self._next_namesrv
        self._next_namesrv = (first + 1) % len(addrs)
        errors: list[str] = []
        for i in range(len(addrs)):
            addr = addrs[(first + i) % len(addrs)]
            request = create_request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
            try:
                response = await self._remoting.invoke(addr, request, self._timeout_s)
            except RemotingError as exc:
                errors.append(f"{addr}: {exc}")
                continue
            if response.code == ResponseCode.SUCCESS:
                return TopicRouteData.decode(response.body)
            if response.code == ResponseCode.TOPIC_NOT_EXIST:
                raise TopicNotExist(f"name server {addr} has no route for topic {topic!r}")
            errors.append(f"{addr}: response code {response.code} ({response.remark})")
        raise NameServerUnavailable(
            f"no name server answered the route query for topic {topic!r}: " + "; ".join(errors)
        )

    async def refresh(self, topic: str) -> TopicPublishInfo:
        """Fetch ``topic``'s route now (TBW102 template when the topic is unknown) and cache it."""
        try:
            route = await self.fetch_route(topic)
            info = TopicPublishInfo.from_route(topic, route)
        except TopicNotExist:
            template = await self.fetch_route(AUTO_CREATE_TOPIC_KEY_TOPIC)
            info = TopicPublishInfo.from_route(topic, template, from_template=True)
        old = self._infos.get(topic)
        if old is not None and old.queues == info.queues and old.broker_addrs == info.broker_addrs:
            old.from_template = info.from_template
            return old  # keep the round-robin position
        self._infos[topic] = info
        log.debug(
            "route of topic %s: %d writable queues on %s", topic, len(info.queues), list(info.broker_addrs)
        )
        return info

    async def publish_info(self, topic: str) -> TopicPublishInfo:
        """The cached publish info of ``topic``, fetched first if there is none usable."""
        info = self._infos.get(topic)
        if info is not None and info.queues:
            return info
        try:
            return await self.refresh(topic)
        except NameServerUnavailable:
            if info is not None:
                return info
            raise

    async def refresh_all(self) -> None:
        """Refresh every cached topic; failures are logged and the cached route is kept."""
        for topic in list(self._infos):
            try:
                await self.refresh(topic)
            except Exception as exc:  # a periodic refresh must not die
                log.warning("route refresh of topic %s failed, keeping the cached route: %s", topic, exc)

    def broker_addr(self, broker_name: str, topic: str) -> str | None:
        info = self._infos.get(topic)
        if info is not None and broker_name in info.broker_addrs:
            return info.broker_addrs[broker_name]
        for other in self._infos.values():
            addr = other.broker_addrs.get(broker_name)
            if addr:
                return addr
        return None


__all__ = [
    "DEFAULT_TOPIC_QUEUE_NUMS",
    "RouteCache",
    "TopicPublishInfo",
    "hash_queue_index",
]
