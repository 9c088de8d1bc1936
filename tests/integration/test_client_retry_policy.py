"""The producer's retry decision follows the error classes' ``retriable``, ``refresh_route`` and
``recheck_route``.

A scripted name server and two scripted brokers (real remoting servers on 127.0.0.1) answer
every send with one response code: brokers whose code has a class raise that class in their
handler (the transport answers its wire code, as a real broker's handler does), the others
answer the bare code. The test counts the sends and the route queries the producer makes.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from rocketq.client import Producer
from rocketq.client.aio import AsyncProducer, SendStatus
from rocketq.errors import BrokerResponseError, ResponseCode, RocketqError, for_code
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
TOPIC = "RetryPolicyT"
RETRIES = 2
#: every code a broker may refuse a send with; 0/10/11/12 are results, not errors
REFUSALS = sorted(
    {int(c) for c in ResponseCode}
    - {
        ResponseCode.SUCCESS,
        ResponseCode.FLUSH_DISK_TIMEOUT,
        ResponseCode.SLAVE_NOT_AVAILABLE,
        ResponseCode.FLUSH_SLAVE_TIMEOUT,
    }
)


class ScriptedCluster:
    """A name server with a route of two brokers that answer every send with ``code``."""

    def __init__(self, code: int, answered: int = 0) -> None:
        self.code = code
        #: sends answered SUCCESS before the refusals begin
        self.answered = answered
        self.sends: dict[str, int] = {"broker-a": 0, "broker-b": 0}
        self.route_queries = 0
        self.namesrv = RemotingServer(HOST, 0, self._namesrv)
        self.brokers = {name: RemotingServer(HOST, 0, self._broker(name)) for name in self.sends}

    async def start(self) -> None:
        await self.namesrv.start()
        for server in self.brokers.values():
            await server.start()

    async def close(self) -> None:
        for server in (self.namesrv, *self.brokers.values()):
            await server.close()

    async def _namesrv(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        assert request.code == RequestCode.GET_ROUTEINFO_BY_TOPIC, request
        self.route_queries += 1
        route = TopicRouteData(
            queue_datas=tuple(QueueData(name, 2, 2, 6) for name in self.brokers),
            broker_datas=tuple(
                BrokerData("C", name, {0: server.address}) for name, server in self.brokers.items()
            ),
        )
        return create_response(request, 0, body=route.encode())

    def _broker(self, name: str) -> RequestHandler:
        async def handle(conn: Connection, request: RemotingCommand) -> RemotingCommand:
            assert request.code == RequestCode.SEND_MESSAGE_V2, request
            self.sends[name] += 1
            if self.answered > 0:
                self.answered -= 1
                return create_response(request, ResponseCode.SUCCESS, ext_fields={"queueOffset": 0})
            cls = for_code(self.code)
            if cls is not BrokerResponseError:
                raise cls(f"scripted refusal {self.code}")
            return create_response(request, self.code, f"scripted refusal {self.code}")

        return handle


async def send_once(code: int) -> tuple[BaseException | None, ScriptedCluster]:
    cluster = ScriptedCluster(code)
    await cluster.start()
    try:
        async with AsyncProducer(
            "PG", namesrv_addr=cluster.namesrv.address, retry_times_when_send_failed=RETRIES
        ) as producer:
            try:
                result = await producer.send(Message(TOPIC, b"x"))
            except RocketqError as exc:
                return exc, cluster
            assert result.status is SendStatus.SEND_OK
            return None, cluster
    finally:
        await cluster.close()


@pytest.mark.parametrize("code", REFUSALS, ids=lambda c: ResponseCode(c).name)
def test_send_is_retried_exactly_for_retriable_codes(code: int) -> None:
    exc, cluster = asyncio.run(send_once(code))
    cls = for_code(code)
    assert type(exc) is cls, exc
    if isinstance(exc, BrokerResponseError):
        assert exc.response_code == code
    attempts = sum(cluster.sends.values())
    if cls.retriable:
        assert attempts == 1 + RETRIES, cluster.sends
        # each retry goes to the other broker
        assert cluster.sends == {"broker-a": 2, "broker-b": 1} or cluster.sends == {
            "broker-a": 1,
            "broker-b": 2,
        }
        assert f"failed {1 + RETRIES} time(s)" in "".join(getattr(exc, "__notes__", []))
    else:
        assert attempts == 1, cluster.sends
    assert_route_queries(cls, cluster.route_queries)


def assert_route_queries(cls: type[RocketqError], queries: int) -> None:
    """The route is fetched once, and again before every retry of a refresh_route code; a
    recheck_route code has it re-checked before each retry, and a route asked for less than
    50 ms before is reused (the other broker is there: no pause)."""
    if cls.retriable and cls.refresh_route:
        assert queries == 1 + RETRIES
    elif cls.retriable and cls.recheck_route:
        assert 1 <= queries <= 1 + RETRIES
    else:
        assert queries == 1


def test_unknown_code_is_not_retried() -> None:
    exc, cluster = asyncio.run(send_once(777))
    assert isinstance(exc, BrokerResponseError) and exc.response_code == 777
    assert sum(cluster.sends.values()) == 1 and cluster.route_queries == 1


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop in a thread of its own, for scripted servers that blocking producers call."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


@pytest.mark.parametrize("code", REFUSALS, ids=lambda c: ResponseCode(c).name)
def test_blocking_send_is_retried_exactly_for_retriable_codes(
    code: int, loop: asyncio.AbstractEventLoop
) -> None:
    """The blocking producer's own first attempt (its route cached by an answered send) hands
    its failure to the same retries: as many attempts, the other broker, the same error."""
    cluster = ScriptedCluster(code, answered=1)
    asyncio.run_coroutine_threadsafe(cluster.start(), loop).result(10)
    try:
        with Producer("PG", namesrv_addr=cluster.namesrv.address, retry_times_when_send_failed=RETRIES) as p:
            assert p.send(Message(TOPIC, b"x")).status is SendStatus.SEND_OK  # the route is cached now
            first = dict(cluster.sends)
            with pytest.raises(RocketqError) as caught:
                p.send(Message(TOPIC, b"x"))
    finally:
        asyncio.run_coroutine_threadsafe(cluster.close(), loop).result(10)
    exc = caught.value
    cls = for_code(code)
    assert type(exc) is cls, exc
    attempts = {name: n - first[name] for name, n in cluster.sends.items()}
    if cls.retriable:
        assert sorted(attempts.values()) == [1, 2], attempts  # each retry on the other broker
        assert f"failed {1 + RETRIES} time(s)" in "".join(getattr(exc, "__notes__", []))
    else:
        assert sum(attempts.values()) == 1, attempts
    assert_route_queries(cls, cluster.route_queries)
