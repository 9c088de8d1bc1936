"""The route re-check after a send failed on a master that may have moved (RouteCache.suspect).

A real :class:`RouteCache` over a scripted name-server answer (an object with the remoting
client's ``invoke``, no sockets): which route it hands out, how many queries it makes, when it
pauses and when it stops. The clock of the rate limit is injected where the test is about it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import cast

import pytest

from _support.wait import wait_until_async
from rocketq.client._fault import LatencyFaultTolerance
from rocketq.client._routes import (
    FOLLOW_UP_PAUSES_S,
    RECHECK_MIN_INTERVAL_S,
    RECHECK_PAUSES_S,
    RouteCache,
    TopicPublishInfo,
)
from rocketq.errors import NameServerUnavailable
from rocketq.protocol.route import BrokerData, QueueData, TopicRouteData
from rocketq.remoting import RemotingClient, RemotingCommand, RequestCode, create_response

TOPIC = "RecheckT"
OLD = "10.0.0.1:10911"
NEW = "10.0.0.2:10911"
OTHER = "10.0.0.3:10911"


def route(masters: dict[str, str | None]) -> TopicRouteData:
    """The route of TOPIC with 2 queues on each broker name; None: no master listed."""
    return TopicRouteData(
        queue_datas=tuple(QueueData(name, 2, 2, 6) for name in masters),
        broker_datas=tuple(
            BrokerData("C", name, {} if addr is None else {0: addr}) for name, addr in masters.items()
        ),
    )


class ScriptedNameServer:
    """Answers route queries with ``answer(n)`` for the n-th query (0-based); None: unreachable."""

    def __init__(self, answer: Callable[[int], TopicRouteData | None]) -> None:
        self.answer = answer
        self.queries = 0
        self.times: list[float] = []

    async def invoke(self, addr: str, request: RemotingCommand, timeout_s: float) -> RemotingCommand:
        assert request.code == RequestCode.GET_ROUTEINFO_BY_TOPIC
        n = self.queries
        self.queries += 1
        self.times.append(time.monotonic())
        await asyncio.sleep(0)  # an answer comes later, as over a socket
        data = self.answer(n)
        if data is None:
            raise NameServerUnavailable("scripted: no answer")
        return create_response(request, 0, body=data.encode())


def cache(ns: ScriptedNameServer, **kwargs: object) -> RouteCache:
    return RouteCache(cast(RemotingClient, ns), ["ns:9876"], 3.0, **kwargs)  # type: ignore[arg-type]


def test_a_suspected_route_is_hidden_and_re_fetched_once_for_concurrent_sends() -> None:
    async def main() -> None:
        ns = ScriptedNameServer(lambda n: route({"a": OLD if n == 0 else NEW}))
        moved: list[str] = []
        routes = cache(ns, on_master_moved=moved.append)
        assert (await routes.publish_info(TOPIC)).broker_addrs == {"a": OLD}
        assert routes.cached(TOPIC) is not None
        routes._asked_at.clear()  # the first fetch is old news: the re-check must ask
        routes.suspect(TOPIC, "a", OLD)
        assert routes.cached(TOPIC) is None  # senders must ask publish_info
        assert routes.last_known(TOPIC) is not None  # heartbeats still know the brokers
        infos = await asyncio.gather(*(routes.publish_info(TOPIC) for _ in range(20)))
        assert {info.broker_addrs["a"] for info in infos} == {NEW}
        assert ns.queries == 2, "twenty sends waiting share one query"
        assert routes.suspected(TOPIC) == {}
        cached = routes.cached(TOPIC)
        assert cached is not None and cached.broker_addrs == {"a": NEW}
        assert moved == ["a"]

    asyncio.run(main())


def test_a_route_asked_for_lately_is_reused_not_asked_again() -> None:
    async def main() -> None:
        now = [100.0]
        ns = ScriptedNameServer(lambda n: route({"a": OLD, "b": OTHER}))
        routes = cache(ns, clock=lambda: now[0])
        await routes.publish_info(TOPIC)
        now[0] += RECHECK_MIN_INTERVAL_S / 2
        routes.suspect(TOPIC, "a", OLD)
        info = await routes.publish_info(TOPIC)
        assert ns.queries == 1, "asked for less than the interval ago: reused"
        assert info.broker_addrs == {"a": OLD, "b": OTHER}
        now[0] += RECHECK_MIN_INTERVAL_S
        routes.suspect(TOPIC, "a", OLD)
        await routes.publish_info(TOPIC)
        assert ns.queries == 2, "older than the interval: asked again"

    asyncio.run(main())


async def rechecked_beside_another_group(ns: ScriptedNameServer, **kwargs: object) -> RouteCache:
    """A cache whose route of TOPIC was fetched, "a" at OLD suspected and re-checked while "b"
    has queues: the re-check asks once and returns at once, "a" still at OLD."""
    routes = cache(ns, **kwargs)
    await routes.publish_info(TOPIC)
    routes._asked_at.clear()
    routes.suspect(TOPIC, "a", OLD)
    began = time.monotonic()
    info = await routes.publish_info(TOPIC)
    assert time.monotonic() - began < RECHECK_PAUSES_S[0]
    assert ns.queries == 2 and info.broker_addrs == {"a": OLD, "b": OTHER}  # the send goes to "b" next
    assert routes.suspected(TOPIC) == {}
    return routes


def test_an_unmoved_master_with_another_group_needs_no_pause() -> None:
    async def main() -> None:
        await rechecked_beside_another_group(ScriptedNameServer(lambda n: route({"a": OLD, "b": OTHER})))

    asyncio.run(main())


def test_the_re_check_pauses_and_asks_again_until_the_master_moved() -> None:
    async def main() -> None:
        # the name server lists the old master for 3 queries, no master for 1, then the new one
        ns = ScriptedNameServer(lambda n: route({"a": OLD if n < 3 else None if n == 3 else NEW}))
        routes = cache(ns)
        await routes.publish_info(TOPIC)
        routes.suspect(TOPIC, "a", OLD)  # within the interval: the first round reuses query 0
        info = await routes.publish_info(TOPIC)
        assert info.broker_addrs == {"a": NEW}
        assert ns.queries == 5
        # round 1 reused query 0, then paused before each query: the pauses, growing
        gaps = [b - a for a, b in zip(ns.times, ns.times[1:], strict=False)]
        assert gaps[0] >= RECHECK_PAUSES_S[0] * 0.9, gaps
        assert all(g >= p * 0.9 for g, p in zip(gaps[1:], RECHECK_PAUSES_S[1:], strict=False)), gaps

    asyncio.run(main())


def test_a_master_that_never_moves_is_used_again_after_the_pauses() -> None:
    async def main() -> None:
        ns = ScriptedNameServer(lambda n: route({"a": OLD}))
        routes = cache(ns)
        await routes.publish_info(TOPIC)
        routes._asked_at.clear()
        routes.suspect(TOPIC, "a", OLD)
        began = time.monotonic()
        info = await routes.publish_info(TOPIC)
        took = time.monotonic() - began
        assert info.broker_addrs == {"a": OLD}  # a broker restarted in place is tried again
        assert ns.queries == 1 + len(RECHECK_PAUSES_S) + 1
        assert sum(RECHECK_PAUSES_S) * 0.9 <= took < sum(RECHECK_PAUSES_S) + 1.0
        assert routes.cached(TOPIC) is not None and routes.suspected(TOPIC) == {}

    asyncio.run(main())


def test_a_failure_that_only_may_mean_a_move_gets_one_look_and_no_pause() -> None:
    async def main() -> None:
        ns = ScriptedNameServer(lambda n: route({"a": OLD}))
        routes = cache(ns)
        await routes.publish_info(TOPIC)
        routes._asked_at.clear()
        routes.suspect(TOPIC, "a", OLD, wait=False)  # e.g. a pooled connection found closed
        began = time.monotonic()
        info = await routes.publish_info(TOPIC)
        assert time.monotonic() - began < RECHECK_PAUSES_S[0]
        assert info.broker_addrs == {"a": OLD} and ns.queries == 2
        # a refusal noted meanwhile on the same address makes it wait after all
        routes.suspect(TOPIC, "a", OLD, wait=True)
        routes.suspect(TOPIC, "a", OLD, wait=False)
        assert routes.suspected(TOPIC) == {"a": (OLD, True)}

    asyncio.run(main())


def test_a_waiter_that_gives_up_leaves_the_re_check_to_the_others() -> None:
    async def main() -> None:
        ns = ScriptedNameServer(lambda n: route({"a": OLD if n < 3 else NEW}))
        routes = cache(ns)
        await routes.publish_info(TOPIC)
        routes.suspect(TOPIC, "a", OLD)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(routes.publish_info(TOPIC), 0.01)
        info = await routes.publish_info(TOPIC)  # joins the same re-check
        assert info.broker_addrs == {"a": NEW} and ns.queries == 4

    asyncio.run(main())


def test_name_servers_down_keep_the_cached_route() -> None:
    async def main() -> None:
        ns = ScriptedNameServer(lambda n: route({"a": OLD, "b": OTHER}) if n == 0 else None)
        routes = cache(ns)
        await routes.publish_info(TOPIC)
        routes._asked_at.clear()
        routes.suspect(TOPIC, "b", OTHER)
        info = await routes.publish_info(TOPIC)
        assert info.broker_addrs == {"a": OLD, "b": OTHER} and ns.queries == 2

    asyncio.run(main())


def test_close_stops_a_re_check_in_progress() -> None:
    async def main() -> None:
        ns = ScriptedNameServer(lambda n: route({"a": OLD}))
        routes = cache(ns)
        await routes.publish_info(TOPIC)
        routes.suspect(TOPIC, "a", OLD)
        waiter = asyncio.ensure_future(routes.publish_info(TOPIC))
        await asyncio.sleep(0)
        assert routes._rechecks
        await routes.close()
        assert not routes._rechecks
        with pytest.raises(asyncio.CancelledError):
            await waiter

    asyncio.run(main())


def test_a_re_check_that_ends_on_another_group_follows_the_moved_group_up() -> None:
    """The sends go on through "b" at once; the route is fetched again in the background until
    "a" lists its new master, which is then cached (and its back-off reset), with no periodic
    refresh and no send failing again."""

    async def main() -> None:
        # "a": the old master for the first 3 queries, none for 1, then the new one
        ns = ScriptedNameServer(lambda n: route({"a": OLD if n < 3 else None if n == 3 else NEW, "b": OTHER}))
        moved: list[str] = []
        routes = await rechecked_beside_another_group(ns, on_master_moved=moved.append)
        await wait_until_async(
            lambda: (c := routes.last_known(TOPIC)) is not None and c.broker_addrs.get("a") == NEW,
            "the follow-up finding a's new master",
            sum(FOLLOW_UP_PAUSES_S),
            0.01,
        )
        assert ns.queries == 5 and moved == ["a"]
        await wait_until_async(lambda: not routes._follow_ups, "the follow-up ended", 5, 0.01)
        assert ns.queries == 5, "no query once the new master is listed"
        await routes.close()

    asyncio.run(main())


def test_close_stops_a_follow_up() -> None:
    async def main() -> None:
        ns = ScriptedNameServer(lambda n: route({"a": OLD, "b": OTHER}))  # "a" never moves
        routes = await rechecked_beside_another_group(ns)
        [task] = routes._follow_ups.values()
        await routes.close()
        assert task.cancelled() and not routes._follow_ups

    asyncio.run(main())


def test_plain_target_is_cached_then_select_then_the_routes_address_in_one_call() -> None:
    """The producer's plain send takes its route, queue and address from plain_target: what
    cached, select and the route's address give, round-robin and fault back-off included, and
    None whenever cached gives None (not fetched, suspected) or the route has no queue."""

    async def main() -> None:
        ns = ScriptedNameServer(lambda n: route({"a": OLD, "b": OTHER}))
        routes = cache(ns)
        assert routes.plain_target(TOPIC, None) is None  # not fetched yet
        await routes.publish_info(TOPIC)
        info = routes.cached(TOPIC)
        assert info is not None
        twin = TopicPublishInfo.from_route(TOPIC, route({"a": OLD, "b": OTHER}))
        clock = [0.0]
        faults = LatencyFaultTolerance(clock=lambda: clock[0])
        for want_faults in (None, faults):
            for _ in range(8):
                target = routes.plain_target(TOPIC, want_faults)
                mq = twin.select(want_faults)
                assert target == (info, mq, twin.broker_addrs[mq.broker_name])
        faults.update("b", 0, failed=True)  # b in back-off: only a's queues
        picked = [routes.plain_target(TOPIC, faults) for _ in range(6)]
        assert {t[1].broker_name for t in picked if t is not None} == {"a"} and None not in picked
        routes.suspect(TOPIC, "a", OLD)
        assert routes.plain_target(TOPIC, None) is None  # to be re-checked: the general way
        routes._suspects.clear()
        routes._infos[TOPIC] = TopicPublishInfo(TOPIC, (), {})
        assert routes.plain_target(TOPIC, None) is None  # no writable queue

    asyncio.run(main())
