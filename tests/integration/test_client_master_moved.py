"""A producer whose master moved finds the new one at once, not at its periodic route refresh.

Scripted servers on 127.0.0.1 (real sockets): a name server and two brokers of one broker name
``broker-a``, the old master and the new one. The producer (default route refresh interval,
30 s) caches the route naming the old master with a first send. Then the old master stops being
one: it refuses sends with SERVICE_NOT_AVAILABLE (as a DLedger follower does) or it is gone
(connection refused); the name server keeps listing it for a while (the new master registers
later), then lists the new one. The next send must be acknowledged by the new master, within
the send's deadline, with the attempts the retry policy allows. Without the re-check every
retry goes to the old address and the send fails.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

from rocketq.client import Producer
from rocketq.client.aio import AsyncProducer, SendStatus
from rocketq.errors import ServiceNotAvailable
from rocketq.message import Message
from rocketq.protocol.route import BrokerData, QueueData, TopicRouteData
from rocketq.remoting import (
    Connection,
    RemotingCommand,
    RemotingServer,
    RequestCode,
    RequestHandler,
    create_response,
)

HOST = "127.0.0.1"
TOPIC = "MasterMovedT"
#: how long the name server keeps listing the old master after it stopped being one
NEW_MASTER_LISTED_AFTER_S = 0.2


class MovingMaster:
    """broker-a's master at ``old`` until :meth:`demote` or :meth:`stop_old`, then at ``new``
    (listed by the name server ``NEW_MASTER_LISTED_AFTER_S`` later)."""

    def __init__(self) -> None:
        self.sends = {"old": 0, "new": 0}
        self.refused = 0
        self.route_queries = 0
        self.demoted_at: float | None = None
        #: the old master's address once it is closed
        self.old_addr: str | None = None
        #: False: the name server never lists the new master
        self.new_listed = True
        self.namesrv = RemotingServer(HOST, 0, self._namesrv)
        self.old = RemotingServer(HOST, 0, self._broker("old"))
        self.new = RemotingServer(HOST, 0, self._broker("new"))

    async def start(self) -> None:
        for server in (self.namesrv, self.old, self.new):
            await server.start()

    async def close(self) -> None:
        for server in (self.namesrv, self.old, self.new):
            await server.close()

    def demote(self) -> None:
        self.demoted_at = time.monotonic()

    async def stop_old(self) -> None:
        addr = self.old.address
        await self.old.close()
        self.old_addr = addr
        self.demote()

    @property
    def master(self) -> str:
        if (
            not self.new_listed
            or self.demoted_at is None
            or time.monotonic() - self.demoted_at < NEW_MASTER_LISTED_AFTER_S
        ):
            return self.old_addr or self.old.address
        return self.new.address

    async def _namesrv(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        assert request.code == RequestCode.GET_ROUTEINFO_BY_TOPIC, request
        self.route_queries += 1
        route = TopicRouteData(
            queue_datas=(QueueData("broker-a", 4, 4, 6),),
            broker_datas=(BrokerData("C", "broker-a", {0: self.master}),),
        )
        return create_response(request, 0, body=route.encode())

    def _broker(self, which: str) -> RequestHandler:
        async def handle(conn: Connection, request: RemotingCommand) -> RemotingCommand:
            assert request.code == RequestCode.SEND_MESSAGE_V2, request
            self.sends[which] += 1
            if which == "old" and self.demoted_at is not None:
                self.refused += 1
                raise ServiceNotAvailable("this broker is a DLedger follower; the leader is elsewhere")
            return create_response(request, 0, ext_fields={"queueOffset": self.sends[which]})

        return handle


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """The scripted servers' event loop, in a thread of its own."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


@pytest.fixture
def cluster(loop: asyncio.AbstractEventLoop) -> Iterator[MovingMaster]:
    cluster = MovingMaster()
    asyncio.run_coroutine_threadsafe(cluster.start(), loop).result(10)
    yield cluster
    asyncio.run_coroutine_threadsafe(cluster.close(), loop).result(10)


def move(cluster: MovingMaster, loop: asyncio.AbstractEventLoop, how: str) -> None:
    if how == "refused":
        cluster.demote()
    else:
        asyncio.run_coroutine_threadsafe(cluster.stop_old(), loop).result(10)


@pytest.mark.parametrize("how", ["refused", "gone"])
def test_the_async_producer_finds_the_new_master_within_the_send(
    cluster: MovingMaster, loop: asyncio.AbstractEventLoop, how: str
) -> None:
    async def main() -> float:
        async with AsyncProducer("PG", namesrv_addr=cluster.namesrv.address) as producer:
            assert producer.route_refresh_interval_ms == 30_000
            assert (await producer.send(Message(TOPIC, b"before"))).status is SendStatus.SEND_OK
            move(cluster, loop, how)
            began = time.monotonic()
            assert (await producer.send(Message(TOPIC, b"after"))).status is SendStatus.SEND_OK
            took = time.monotonic() - began
            # the next sends go straight to the new master
            for _ in range(5):
                await producer.send(Message(TOPIC, b"later"))
            return took

    took = asyncio.run(main())
    assert cluster.sends["new"] == 6, cluster.sends
    assert cluster.sends["old"] == (2 if how == "refused" else 1), cluster.sends
    assert took < 2.0, f"the send took {took:.2f} s"
    assert cluster.route_queries <= 8, cluster.route_queries


@pytest.mark.parametrize("how", ["refused", "gone"])
def test_the_blocking_producer_finds_the_new_master_within_the_send(
    cluster: MovingMaster, loop: asyncio.AbstractEventLoop, how: str
) -> None:
    with Producer("PG", namesrv_addr=cluster.namesrv.address) as producer:
        assert producer.send(Message(TOPIC, b"before")).status is SendStatus.SEND_OK
        move(cluster, loop, how)
        began = time.monotonic()
        assert producer.send(Message(TOPIC, b"after")).status is SendStatus.SEND_OK
        took = time.monotonic() - began
        for _ in range(5):
            producer.send(Message(TOPIC, b"later"))
    assert cluster.sends["new"] == 6, cluster.sends
    assert cluster.sends["old"] == (2 if how == "refused" else 1), cluster.sends
    assert took < 2.0, f"the send took {took:.2f} s"
    assert cluster.route_queries <= 8, cluster.route_queries


def test_a_re_check_is_bounded_by_the_send_deadline(cluster: MovingMaster) -> None:
    """The old master refuses and the name server never lists another: the send waits for the
    re-check no longer than its own deadline and fails with the refusal, not a route timeout."""
    cluster.new_listed = False

    async def main() -> tuple[BaseException, float]:
        async with AsyncProducer("PG", namesrv_addr=cluster.namesrv.address, send_timeout_ms=300) as producer:
            await producer._route_cache.publish_info(TOPIC)
            cluster.demote()  # refused, and still listed
            began = time.monotonic()
            with pytest.raises(ServiceNotAvailable) as caught:
                await producer.send(Message(TOPIC, b"x"))
            return caught.value, time.monotonic() - began

    exc, took = asyncio.run(main())
    assert 0.25 <= took < 0.9, f"the send took {took:.2f} s"
    assert "outlasted the deadline" in "".join(getattr(exc, "__notes__", [])), exc.__notes__
    assert cluster.sends["old"] == 1 and cluster.sends["new"] == 0, cluster.sends


class TwoGroups(MovingMaster):
    """:class:`MovingMaster` with a second broker group, ``broker-b``, that never moves."""

    def __init__(self) -> None:
        super().__init__()
        self.sends["b"] = 0
        self.other = RemotingServer(HOST, 0, self._broker("b"))

    async def start(self) -> None:
        await super().start()
        await self.other.start()

    async def close(self) -> None:
        await super().close()
        await self.other.close()

    async def _namesrv(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        self.route_queries += 1
        route = TopicRouteData(
            queue_datas=(QueueData("broker-a", 4, 4, 6), QueueData("broker-b", 4, 4, 6)),
            broker_datas=(
                BrokerData("C", "broker-a", {0: self.master}),
                BrokerData("C", "broker-b", {0: self.other.address}),
            ),
        )
        return create_response(request, 0, body=route.encode())


def test_a_moved_group_of_a_topic_on_two_groups_is_used_again_once_its_new_master_is_listed(
    loop: asyncio.AbstractEventLoop,
) -> None:
    """The send refused by broker-a's old master goes on to broker-b at once; broker-a's new
    master, listed 0.2 s later, takes its share of the sends again within about a second (a
    follow-up of the route in the background), not at the 30 s refresh."""
    cluster = TwoGroups()
    asyncio.run_coroutine_threadsafe(cluster.start(), loop).result(10)
    try:

        async def main() -> float:
            async with AsyncProducer("PG", namesrv_addr=cluster.namesrv.address) as producer:
                for _ in range(8):  # round-robin: broker-a's four queues, then broker-b's
                    await producer.send(Message(TOPIC, b"before"))
                assert cluster.sends["old"] == 4 and cluster.sends["b"] == 4
                cluster.demote()
                began = time.monotonic()
                while cluster.sends["new"] == 0:
                    assert time.monotonic() - began < 5.0, cluster.sends
                    assert (await producer.send(Message(TOPIC, b"after"))).status is SendStatus.SEND_OK
                    await asyncio.sleep(0.02)  # a steady trickle of sends, not a test wait
                return time.monotonic() - began

        took = asyncio.run(main())
        assert took < 2.0, f"broker-a was used again after {took:.2f} s"
        # the old master's refusal put broker-a in back-off: only the new master's listing,
        # found by the follow-up, lets the producer pick it again
        assert cluster.refused == 1, cluster.sends
    finally:
        asyncio.run_coroutine_threadsafe(cluster.close(), loop).result(10)
