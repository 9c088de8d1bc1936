"""The producer's retry decision follows the error classes' ``retriable`` and ``refresh_route``.

A scripted name server and two scripted brokers (real remoting servers on 127.0.0.1) answer
every send with one response code: brokers whose code has a class raise that class in their
handler (the transport answers its wire code, as a real broker's handler does), the others
answer the bare code. The test counts the sends and the route queries the producer makes.
"""

from __future__ import annotations

import asyncio

import pytest

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

    def __init__(self, code: int) -> None:
        self.code = code
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
    # the route is fetched once, and again before every retry of a refresh_route code
    assert cluster.route_queries == (1 + RETRIES if cls.retriable and cls.refresh_route else 1)


def test_unknown_code_is_not_retried() -> None:
    exc, cluster = asyncio.run(send_once(777))
    assert isinstance(exc, BrokerResponseError) and exc.response_code == 777
    assert sum(cluster.sends.values()) == 1 and cluster.route_queries == 1
