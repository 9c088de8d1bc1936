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

Re-checks after a failed send (a master that moved). A send that failed in a way that says the
broker's address may no longer be its group's master (the error class's ``recheck_route``:
SERVICE_NOT_AVAILABLE, as a DLedger follower answers; a connection refused or closed; a
timeout) makes the producer call :meth:`RouteCache.suspect`. Until the topic's route has been
re-checked, :meth:`RouteCache.cached` hides it, so the send's next attempt (and every other send
of the topic) asks :meth:`RouteCache.publish_info`, which re-checks it once for all of them: one
task per topic, which everyone waiting shares. The re-check reuses a route fetched less than
:data:`RECHECK_MIN_INTERVAL_S` ago and otherwise fetches it, so a topic is never asked for more
often than that, however many sends fail.

* A failure that only *may* mean a move (a connection closed with the call in flight, which is
  also what an idle pooled connection to a broker restarted in place gives; a timeout): one
  look at the route; the next attempt goes to the master it names, on a new connection.
* A failure that says the address is not the master (the error's ``await_new_master``:
  SERVICE_NOT_AVAILABLE, connection refused): the re-check ends as soon as no such broker still
  has the suspected address as its master (a new master registered: a DLedger hand-over
  registers the new leader about 0.1 s after the old one stopped), or another broker group has
  writable queues (the next attempt goes there, and a follow-up in the background fetches the
  route after each of :data:`FOLLOW_UP_PAUSES_S`, about 13 s in all, until the group lists a
  new master, so the group is used again within a pause of that), or after the pauses of
  :data:`RECHECK_PAUSES_S`, about 0.9 s in all, each followed by a fetch (at once when a
  periodic refresh changed the route meanwhile): then the next attempt goes to the same address,
  which may be back (a broker restarted in place).

A re-check that cannot reach the name servers keeps the cached route. Each waiting send bounds
its wait by its own deadline; the re-check goes on for the others. When any refresh finds a
broker name with a new master address (against the last master any route named for it, also
across routes that listed the group with no master meanwhile), ``on_master_moved`` (the
producer's fault back-off reset) is told, since the back-off was earned by the old master.

Queue selection (:meth:`TopicPublishInfo.select`): round-robin over the writable queues,
skipping brokers in back-off (:mod:`rocketq.client._fault`) and, on a retry, the broker that just
failed. Sharding keys use :func:`hash_queue_index`: Java ``String.hashCode`` of the key, absolute
value, modulo the queue count (RocketMQ's ``SelectMessageQueueByHash``), so a key always maps to
the same queue while the route does not change.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rocketq.client._fault import LatencyFaultTolerance
from rocketq.errors import NameServerUnavailable, RemotingError, ResponseCode, RocketqError, TopicNotExist
from rocketq.message import java_string_hash
from rocketq.protocol.queue import MessageQueue
from rocketq.protocol.route import MASTER_ID, TopicRouteData
from rocketq.protocol.topic import AUTO_CREATE_TOPIC_KEY_TOPIC, PERM_WRITE
from rocketq.remoting import RemotingClient, RequestCode, create_request

log = logging.getLogger(__name__)

#: Queues per broker a producer uses for a topic published through TBW102 (Java: 4).
DEFAULT_TOPIC_QUEUE_NUMS = 4
#: A re-check after a failed send reuses a route fetched less than this long ago (s): at most one
#: route query per topic per interval, however many sends fail at once.
RECHECK_MIN_INTERVAL_S = 0.05
#: The pauses (s) of a re-check while a suspected master is still the route's, each followed by
#: a fetch (or cut short by a periodic refresh that changed the route); growing, as a
#: hand-over's new master registers about 0.1 s after the old one stopped but an election after
#: a crash takes longer.
RECHECK_PAUSES_S: tuple[float, ...] = (0.05, 0.05, 0.1, 0.1, 0.2, 0.4)
#: The pauses (s) of a follow-up: a re-check that ended early because another broker group took
#: the sends, while a suspected master was still the route's, looks for that group's new master
#: in the background (nobody waits for it), a fetch after each pause, about 13 s in all.
FOLLOW_UP_PAUSES_S: tuple[float, ...] = (*RECHECK_PAUSES_S, 0.8, 1.6, 3.2, 6.4)


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

    def __init__(
        self,
        remoting: RemotingClient,
        namesrv_addrs: Sequence[str],
        timeout_s: float,
        *,
        on_master_moved: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not namesrv_addrs:
            raise ValueError("at least one name server address is required")
        self._remoting = remoting
        self._namesrv_addrs = list(namesrv_addrs)
        self._timeout_s = timeout_s
        self._next_namesrv = 0
        self._infos: dict[str, TopicPublishInfo] = {}
        self._on_master_moved = on_master_moved
        #: broker name → the master address the last route naming one gave (kept while a route
        #: lists the group without a master, as between an old master's exit and a new one's
        #: registration: a move across that gap is still a move)
        self._masters: dict[str, str] = {}
        self._clock = clock
        #: topic → broker name → (the master address a send to it failed on, whether to wait
        #: for a new master), not yet re-checked; written by failing sends on any thread (the
        #: blocking producer's), so under _lock
        self._suspects: dict[str, dict[str, tuple[str, bool]]] = {}
        self._lock = threading.Lock()
        #: topic → the re-check in progress, shared by every send waiting for it
        self._rechecks: dict[str, asyncio.Task[TopicPublishInfo]] = {}
        #: topic → the follow-up looking for a moved group's new master (nobody waits for it)
        self._follow_ups: dict[str, asyncio.Task[None]] = {}
        #: topic → when its route was last asked for (clock s)
        self._asked_at: dict[str, float] = {}
        #: topic → set when a refresh changes its cached route (a re-check pausing wakes)
        self._route_changed: dict[str, asyncio.Event] = {}

    @property
    def topics(self) -> list[str]:
        return list(self._infos)

    def cached(self, topic: str) -> TopicPublishInfo | None:
        """The cached publish info of ``topic``; None while it is to be re-checked, so that
        senders ask :meth:`publish_info`."""
        if self._suspects and topic in self._suspects:
            return None
        return self._infos.get(topic)

    def plain_target(
        self, topic: str, faults: LatencyFaultTolerance | None
    ) -> tuple[TopicPublishInfo, MessageQueue, str | None] | None:
        """What :meth:`cached`, then :meth:`TopicPublishInfo.select` with ``faults`` and no
        broker to avoid, then the route's address of the queue's broker give, in one call (the
        producer's plain send makes it for every message): ``(info, queue, address or None)``,
        or None when the route is not cached, is to be re-checked or has no writable queue."""
        suspects = self._suspects
        if suspects and topic in suspects:
            return None
        info = self._infos.get(topic)
        if info is None:
            return None
        queues = info.queues
        if not queues:
            return None
        if faults is None or not faults.items:  # select's first case: no broker in back-off
            mq = queues[next(info._counter) % len(queues)]
        else:
            mq = info.select(faults)
        return info, mq, info.broker_addrs.get(mq.broker_name)

    def last_known(self, topic: str) -> TopicPublishInfo | None:
        """The cached publish info of ``topic``, also while it is to be re-checked."""
        return self._infos.get(topic)

    def suspect(self, topic: str, broker_name: str, addr: str, *, wait: bool = True) -> None:
        """A send of ``topic`` to ``broker_name``'s master at ``addr`` failed in a way that says
        ``addr`` may no longer be the master: the topic's route is re-checked before it is used
        again (see the module docstring). ``wait``: the failure says the address is not the
        master (a refusal, a connection refused), so the re-check pauses for a new master while
        the route still names it; otherwise (a connection that closed, a timeout) one look at
        the route is enough. Any thread may call this."""
        with self._lock:
            brokers = self._suspects.setdefault(topic, {})
            known = brokers.get(broker_name)
            brokers[broker_name] = (addr, wait or (known is not None and known == (addr, True)))

    def suspected(self, topic: str) -> dict[str, tuple[str, bool]]:
        """Broker name → (suspected master address, whether to wait) of ``topic``, not yet
        re-checked."""
        with self._lock:
            return dict(self._suspects.get(topic, {}))

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
        self._asked_at[topic] = self._clock()
        try:
            route = await self.fetch_route(topic)
            info = TopicPublishInfo.from_route(topic, route)
        except TopicNotExist:
            template = await self.fetch_route(AUTO_CREATE_TOPIC_KEY_TOPIC)
            info = TopicPublishInfo.from_route(topic, template, from_template=True)
        masters = self._masters
        for name, new_addr in info.broker_addrs.items():
            addr = masters.get(name)
            if addr != new_addr:
                masters[name] = new_addr
                if addr is not None:
                    log.info("topic %s: master of broker %s moved from %s to %s", topic, name, addr, new_addr)
                    if self._on_master_moved is not None:
                        self._on_master_moved(name)
        old = self._infos.get(topic)
        if old is not None and old.queues == info.queues and old.broker_addrs == info.broker_addrs:
            old.from_template = info.from_template
            return old  # keep the round-robin position
        self._infos[topic] = info
        changed = self._route_changed.get(topic)
        if changed is not None:
            changed.set()
        log.debug(
            "route of topic %s: %d writable queues on %s", topic, len(info.queues), list(info.broker_addrs)
        )
        return info

    async def publish_info(self, topic: str) -> TopicPublishInfo:
        """The cached publish info of ``topic``, fetched first if there is none usable, or
        re-checked first when a send suspected one of its masters."""
        if self._suspects and topic in self._suspects:
            return await self._recheck(topic)
        info = self._infos.get(topic)
        if info is not None and info.queues:
            return info
        try:
            return await self.refresh(topic)
        except NameServerUnavailable:
            if info is not None:
                return info
            raise

    async def _recheck(self, topic: str) -> TopicPublishInfo:
        """The re-checked publish info of ``topic``: joins the re-check in progress or starts
        one. A caller that gives up (its deadline) leaves it running for the others."""
        task = self._rechecks.get(topic)
        if task is None:
            task = asyncio.get_running_loop().create_task(
                self._recheck_rounds(topic), name=f"rocketq-route-recheck-{topic}"
            )
            self._rechecks[topic] = task
            task.add_done_callback(lambda t: self._recheck_done(topic, t))
        return await asyncio.shield(task)

    def _recheck_done(self, topic: str, task: asyncio.Task[TopicPublishInfo]) -> None:
        if self._rechecks.get(topic) is task:
            del self._rechecks[topic]
        if not task.cancelled():
            task.exception()  # retrieved: every waiter may have given up

    async def _recheck_rounds(self, topic: str) -> TopicPublishInfo:
        examined = self.suspected(topic)
        changed = self._route_changed[topic] = asyncio.Event()
        try:
            for pause in (*RECHECK_PAUSES_S, None):
                info = await self._recent_route(topic)
                changed.clear()  # from here on, only a refresh made during the pause counts
                # a broker missing from the route has no master yet: still waiting for one
                stuck = {
                    name
                    for name, (addr, wait) in examined.items()
                    if wait and info.broker_addrs.get(name, addr) == addr
                }
                if not stuck or pause is None:
                    return info
                if any(mq.broker_name not in stuck for mq in info.queues):
                    # the sends go on through another group; its new master is looked for
                    self._follow_up(topic, {name: examined[name][0] for name in stuck})
                    return info
                log.debug("topic %s: master of %s not moved yet, re-checking in %.2f s", topic, stuck, pause)
                with contextlib.suppress(TimeoutError):  # a periodic refresh may bring the news
                    await asyncio.wait_for(changed.wait(), pause)
            raise AssertionError("unreachable: the last round returns")
        finally:
            if self._route_changed.get(topic) is changed:
                del self._route_changed[topic]
            with self._lock:
                left = self._suspects.get(topic)
                if left is not None:
                    for name, suspicion in examined.items():
                        if left.get(name) == suspicion:
                            del left[name]
                    if not left:
                        del self._suspects[topic]

    def _follow_up(self, topic: str, stuck: dict[str, str]) -> None:
        """Fetch ``topic``'s route after each of FOLLOW_UP_PAUSES_S until no broker of
        ``stuck`` (name → the suspected master address) still has it as its master: a moved group
        is used again within about a pause of its new master's registration, not at the next
        periodic refresh (and its fault back-off goes with the old master: ``on_master_moved``)."""
        if topic in self._follow_ups:
            return
        task = asyncio.get_running_loop().create_task(
            self._follow_up_rounds(topic, stuck), name=f"rocketq-route-follow-up-{topic}"
        )
        self._follow_ups[topic] = task
        task.add_done_callback(lambda t: self._follow_ups.pop(topic, None))

    async def _follow_up_rounds(self, topic: str, stuck: dict[str, str]) -> None:
        for pause in FOLLOW_UP_PAUSES_S:
            await asyncio.sleep(pause)
            try:
                info = await self._recent_route(topic)
            except RocketqError as exc:  # nothing cached: nobody sends to the topic any more
                log.debug("route follow-up of topic %s ended: %s", topic, exc)
                return
            if all(info.broker_addrs.get(name, addr) != addr for name, addr in stuck.items()):
                return

    async def _recent_route(self, topic: str) -> TopicPublishInfo:
        """``topic``'s route asked for less than RECHECK_MIN_INTERVAL_S ago, else fetched now;
        the cached one when the name servers do not answer."""
        info = self._infos.get(topic)
        asked_at = self._asked_at.get(topic, float("-inf"))
        if info is not None and self._clock() - asked_at < RECHECK_MIN_INTERVAL_S:
            return info
        try:
            return await self.refresh(topic)
        except RocketqError as exc:
            if info is None:
                raise
            log.warning("route re-check of topic %s failed, keeping the cached route: %s", topic, exc)
            return info

    async def close(self) -> None:
        """Stop the re-checks and follow-ups in progress."""
        tasks: list[asyncio.Task[Any]] = [*self._rechecks.values(), *self._follow_ups.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

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
    "FOLLOW_UP_PAUSES_S",
    "RECHECK_MIN_INTERVAL_S",
    "RECHECK_PAUSES_S",
    "RouteCache",
    "TopicPublishInfo",
    "hash_queue_index",
]
