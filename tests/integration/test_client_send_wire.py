"""The producer's send requests, field by field and byte by byte.

A scripted name server and broker (real remoting servers on 127.0.0.1, on their own event loop
in a helper thread) record every SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE they get and answer
SEND_OK. Each recorded request is compared with the frame built from the fields RocketMQ's
``SendMessageRequestHeaderV2`` carries (the keys in the order Java's DefaultMQProducer writes
them, every value as Java formats it), through ``create_request`` and ``encode``: the blocking
``Producer`` and the asyncio ``AsyncProducer`` must put exactly those bytes on the wire, whatever
message options, queue choice or batch the send has.
"""

from __future__ import annotations

import asyncio
import threading
import zlib
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from rocketq.client import Message, MessageQueue, Producer, SendResult, SendStatus
from rocketq.client.aio import AsyncProducer
from rocketq.message import decode_properties
from rocketq.protocol.batch import encode_batch_entries
from rocketq.protocol.route import BrokerData, QueueData, TopicRouteData
from rocketq.remoting import (
    Connection,
    RemotingCommand,
    RemotingServer,
    RequestCode,
    RequestHandler,
    create_request,
    create_response,
)
from rocketq.remoting.codec import encode

T = TypeVar("T")
HOST = "127.0.0.1"
TOPIC = "WireT"
QUEUES = 3


class RecordingCluster:
    """A name server whose route has two brokers of ``QUEUES`` writable queues, and the brokers,
    which record each send request and answer SEND_OK with the queue id they were asked for."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="test-wire", daemon=True)
        self.requests: list[tuple[str, RemotingCommand]] = []
        self.namesrv: RemotingServer | None = None
        self.brokers: dict[str, RemotingServer] = {}

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def start(self) -> None:
        self.thread.start()

        async def start() -> None:
            self.namesrv = RemotingServer(HOST, 0, self._namesrv)
            await self.namesrv.start()
            for name in ("broker-a", "broker-b"):
                server = RemotingServer(HOST, 0, self._broker(name))
                await server.start()
                self.brokers[name] = server

        self.call(start())

    def stop(self) -> None:
        async def stop() -> None:
            for server in (self.namesrv, *self.brokers.values()):
                if server is not None:
                    await server.close()

        self.call(stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    @property
    def namesrv_addr(self) -> str:
        assert self.namesrv is not None
        return self.namesrv.address

    async def _namesrv(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        assert request.code == RequestCode.GET_ROUTEINFO_BY_TOPIC, request
        route = TopicRouteData(
            queue_datas=tuple(QueueData(name, QUEUES, QUEUES, 6) for name in self.brokers),
            broker_datas=tuple(
                BrokerData("C", name, {0: server.address}) for name, server in self.brokers.items()
            ),
        )
        return create_response(request, 0, body=route.encode())

    def _broker(self, name: str) -> RequestHandler:
        async def handle(conn: Connection, request: RemotingCommand) -> RemotingCommand:
            self.requests.append((name, request))
            ext = {"msgId": "0" * 32, "queueId": request.ext_fields["e"], "queueOffset": "7"}
            return create_response(request, 0, ext_fields=ext)

        return handle


@pytest.fixture(scope="module")
def cluster() -> Iterator[RecordingCluster]:
    c = RecordingCluster()
    c.start()
    try:
        yield c
    finally:
        c.stop()


def expected_frame(
    got: RemotingCommand,
    broker: str,
    *,
    group: str,
    properties: str,
    body: bytes,
    sys_flag: int = 0,
    flag: int = 0,
    batch: bool = False,
) -> bytes:
    """The frame of the request DefaultMQProducer would send, with ``got``'s opaque, queue id
    and born timestamp (the values a send picks at run time)."""
    fields: dict[str, object] = {
        "a": group,
        "b": TOPIC,
        "c": "TBW102",
        "d": 4,
        "e": int(got.ext_fields["e"]),
        "f": sys_flag,
        "g": int(got.ext_fields["g"]),
        "h": flag,
        "i": properties,
        "j": 0,
        "k": False,
        "m": batch,
        "n": broker,
    }
    code = RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2
    request = create_request(code, fields, body)
    request.opaque = got.opaque
    return encode(request)


def uniq(msg_id: str) -> str:
    return f"UNIQ_KEY\x01{msg_id}\x02"


WAIT = "WAIT\x01true\x02"


def check_single_sends(cluster: RecordingCluster, send: Callable[..., SendResult], group: str) -> None:
    """Sends of every kind through ``send`` (a blocking call), each request checked."""
    cases: list[tuple[Message, dict[str, Any], str, bytes, int]] = [
        (Message(TOPIC, b"plain"), {}, "", b"plain", 0),
        (
            Message(TOPIC, b"opts", tags="TagA", keys=["k1", "", "k2"], properties={"p": "v"}, flag=5),
            {},
            "p\x01v\x02TAGS\x01TagA\x02KEYS\x01k1 k2\x02",
            b"opts",
            0,
        ),
        (Message(TOPIC, b"late", delay_level=3), {}, "DELAY\x013\x02", b"late", 0),
        (Message(TOPIC, b"ordered"), {"sharding_key": "order-9"}, "", b"ordered", 0),
        (
            Message(TOPIC, b"named"),
            {"queue": MessageQueue(TOPIC, "broker-b", 2)},
            "",
            b"named",
            0,
        ),
        (
            Message(TOPIC, b"picked"),
            {"selector": lambda queues, m: queues[-1]},
            "",
            b"picked",
            0,
        ),
        (Message(TOPIC, b"z" * 5000), {}, "", zlib.compress(b"z" * 5000, 5), 1),
    ]
    for round_ in range(2):  # the second round runs on what the first one cached
        for msg, kwargs, props, body, sys_flag in cases:
            before = len(cluster.requests)
            result = send(msg, **kwargs)
            assert result.status is SendStatus.SEND_OK
            assert len(cluster.requests) == before + 1
            broker, got = cluster.requests[-1]
            assert got.code == RequestCode.SEND_MESSAGE_V2
            assert result.message_queue == MessageQueue(TOPIC, broker, int(got.ext_fields["e"]))
            assert result.queue_offset == 7
            want = expected_frame(
                got,
                broker,
                group=group,
                properties=props + uniq(result.msg_id) + WAIT,
                body=body,
                sys_flag=sys_flag,
                flag=msg.flag,
            )
            assert encode(got) == want, (round_, msg)
    own = Message(TOPIC, b"own id", properties={"UNIQ_KEY": "MYID", "WAIT": "false"})
    result = send(own)
    broker, got = cluster.requests[-1]
    assert result.msg_id == "MYID"
    assert encode(got) == expected_frame(
        got, broker, group=group, properties="UNIQ_KEY\x01MYID\x02WAIT\x01false\x02", body=b"own id"
    )


def test_blocking_producer_requests_are_javas(cluster: RecordingCluster) -> None:
    with Producer("WirePG", namesrv_addr=cluster.namesrv_addr) as p:
        check_single_sends(cluster, p.send, "WirePG")
        assert p._pool is not None  # the blocking path made these calls
        msgs = [Message(TOPIC, b"b1", tags="T1"), Message(TOPIC, b"b2", keys=["k"])]
        result = p.send_batch(msgs)
        broker, got = cluster.requests[-1]
        assert got.code == RequestCode.SEND_BATCH_MESSAGE
        ids = result.msg_id.split(",")
        entries = [
            (b"b1", ("TAGS\x01T1\x02" + uniq(ids[0]) + WAIT).encode(), 0),
            (b"b2", ("KEYS\x01k\x02" + uniq(ids[1]) + WAIT).encode(), 0),
        ]
        batch_props = got.ext_fields["i"]
        assert decode_properties(batch_props)["WAIT"] == "true"
        assert encode(got) == expected_frame(
            got,
            broker,
            group="WirePG",
            properties=batch_props,
            body=encode_batch_entries(entries),
            batch=True,
        )


def test_async_producer_requests_are_javas(cluster: RecordingCluster) -> None:
    loop = asyncio.new_event_loop()
    producer = AsyncProducer("WireAsyncPG", namesrv_addr=cluster.namesrv_addr)
    loop.run_until_complete(producer.start())
    try:

        def send(msg: Message, **kwargs: Any) -> SendResult:
            return loop.run_until_complete(producer.send(msg, **kwargs))

        check_single_sends(cluster, send, "WireAsyncPG")
    finally:
        loop.run_until_complete(producer.shutdown())
        loop.close()
