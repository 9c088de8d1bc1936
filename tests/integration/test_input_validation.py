"""Small input gaps, each answered with a clear error code and remark (never a traceback or a
SYSTEM_ERROR): over the remoting protocol with raw frames as a non-Python client could send them,
over gRPC with our own stubs, and in the Python client before anything is sent."""

from __future__ import annotations

import asyncio
import json
import pathlib
import socket
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from test_proxy_endpoint import META, TIMEOUT_S, endpoint, message, send

from rocketq.client import Producer
from rocketq.errors import LocalProtocolError, MessageIllegal, ResponseCode
from rocketq.message import Message, encode_properties
from rocketq.proxy.v2 import definition_pb2 as pb
from rocketq.proxy.v2 import service_pb2 as spb
from rocketq.remoting import RemotingCommand, create_request, encode
from rocketq.remoting.codec import FrameDecoder
from rocketq.testing import InProcessCluster

TOPIC = "ValidT"
LONG_GROUP = "G" * 300


@pytest.fixture(scope="module")
def cluster() -> Iterator[InProcessCluster]:
    with InProcessCluster() as c:
        c.create_topic(TOPIC, 4)
        yield c


def call(cluster: InProcessCluster, code: int, ext: dict[str, Any], body: bytes = b"") -> RemotingCommand:
    """One request as a JSON header written by a foreign client (``json.dumps`` escapes a lone
    surrogate as ``\\ud800``), answered on a plain socket."""
    (addr,) = cluster.broker_addrs.values()
    host, port = addr.rsplit(":", 1)
    header = json.dumps(
        {"code": code, "flag": 0, "language": "JAVA", "opaque": 7, "version": 401, "extFields": ext}
    ).encode()
    frame = struct.pack(">iI", 4 + len(header) + len(body), len(header)) + header + body
    decoder = FrameDecoder()
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(frame)
        while True:
            chunk = s.recv(65536)
            assert chunk, "the broker closed the connection"
            for cmd in decoder.feed(chunk):
                return cmd


def send_header(**changes: str) -> dict[str, Any]:
    fields = {"a": "PG", "b": TOPIC, "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "0"}
    return {**fields, "h": "0", "i": "", "j": "0", "k": "false", **changes}


@pytest.mark.parametrize("queue_nums", ["0", "-3"])
def test_auto_create_with_non_positive_default_topic_queue_nums(
    cluster: InProcessCluster, queue_nums: str
) -> None:
    topic = f"AutoT{queue_nums.replace('-', 'm')}"
    r = call(cluster, 310, send_header(b=topic, d=queue_nums), b"x")
    assert r.code == ResponseCode.INVALID_PARAMETER
    expected = f"defaultTopicQueueNums={queue_nums} cannot create topic {topic}: it must be at least 1"
    assert r.remark == expected
    assert topic not in cluster.broker("broker-a").ctx.topics  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("queue_id", "offset", "remark"),
    [
        ("-1", "0", "queueId=-1 is out of range: topic ValidT has queues 0..3"),
        ("4", "0", "queueId=4 is out of range: topic ValidT has queues 0..3"),
        ("0", "-5", "commitOffset=-5 is negative (topic ValidT, queueId 0)"),
    ],
)
def test_update_consumer_offset_out_of_range(
    cluster: InProcessCluster, queue_id: str, offset: str, remark: str
) -> None:
    ext = {"consumerGroup": "CG", "topic": TOPIC, "queueId": queue_id, "commitOffset": offset}
    r = call(cluster, 15, ext)
    assert (r.code, r.remark) == (ResponseCode.INVALID_PARAMETER, remark)
    ok = call(cluster, 15, {**ext, "queueId": "3", "commitOffset": "0"})
    assert ok.code == ResponseCode.SUCCESS


def test_update_consumer_offset_with_a_too_long_group(cluster: InProcessCluster) -> None:
    ext = {"consumerGroup": LONG_GROUP, "topic": TOPIC, "queueId": "0", "commitOffset": "1"}
    r = call(cluster, 15, ext)
    assert (r.code, r.remark) == (
        ResponseCode.INVALID_PARAMETER,
        "consumer group name of 300 chars exceeds max 255 chars",
    )


@pytest.mark.parametrize("role", ["consumer", "producer"])
def test_heartbeat_with_a_too_long_group_registers_nothing(cluster: InProcessCluster, role: str) -> None:
    consumer = {
        "groupName": LONG_GROUP,
        "consumeType": "CONSUME_PASSIVELY",
        "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
        "subscriptionDataSet": [],
        "unitMode": False,
    }
    body = {"clientID": "c1", "consumerDataSet": [], "producerDataSet": []}
    if role == "consumer":
        body["consumerDataSet"] = [consumer]
    else:
        body["producerDataSet"] = [{"groupName": LONG_GROUP}]
    r = call(cluster, 34, {}, json.dumps(body).encode())
    assert r.code == ResponseCode.INVALID_PARAMETER
    assert r.remark == f"heartbeat refused: {role} group name of 300 chars exceeds max 255 chars"
    ctx = cluster.broker("broker-a").ctx
    assert ctx is not None and ctx.consumers.get(LONG_GROUP) is None


def test_send_with_a_too_long_producer_group(cluster: InProcessCluster) -> None:
    r = call(cluster, 310, send_header(a=LONG_GROUP), b"x")
    assert (r.code, r.remark) == (
        ResponseCode.INVALID_PARAMETER,
        "producer group name of 300 chars exceeds max 255 chars",
    )


@pytest.mark.parametrize(
    ("properties", "name", "char"),
    [("k\x01\ud800\x02", "'k'", "D800"), ("\udc00\x01v\x02", "'\\udc00'", "DC00")],
)
def test_lone_surrogates_in_properties_are_message_illegal(
    cluster: InProcessCluster, properties: str, name: str, char: str
) -> None:
    r = call(cluster, 310, send_header(i=properties), b"x")
    assert r.code == ResponseCode.MESSAGE_ILLEGAL
    assert r.remark == f"property {name} contains a lone surrogate (U+{char}), which UTF-8 cannot encode"
    assert call(cluster, 310, send_header(i="k\x01v\x02"), b"x").code == ResponseCode.SUCCESS


def test_lone_surrogates_are_refused_by_the_client_before_sending(cluster: InProcessCluster) -> None:
    with pytest.raises(MessageIllegal, match="lone surrogate"):
        encode_properties({"k": "a\udfffb"})
    with pytest.raises(LocalProtocolError, match="lone surrogate"):
        encode(create_request(14, ext_fields={"consumerGroup": "g\ud800"}))
    producer = Producer("PGS", namesrv_addr=cluster.namesrv_addr)
    producer.start()
    try:
        for msg in (Message(TOPIC, b"x", properties={"k": "\ud800"}), Message(TOPIC, b"x", tags="\ud800")):
            with pytest.raises(MessageIllegal, match="lone surrogate"):
                producer.send(msg)
        assert producer.send(Message(TOPIC, b"x", properties={"k": "\u00e9\U0001f600"})).msg_id
    finally:
        producer.shutdown()


def test_grpc_topic_group_and_batch_size_checks(tmp_path: pathlib.Path) -> None:
    async def receive(stub: Any, **fields: Any) -> list[Any]:
        request = spb.ReceiveMessageRequest(
            message_queue=pb.MessageQueue(topic=pb.Resource(name=fields.pop("topic", "TN"))),
            group=pb.Resource(name=fields.pop("group", "CG")),
            **fields,
        )
        call = stub.ReceiveMessage(request, timeout=TIMEOUT_S, metadata=META)
        return [r async for r in call]

    async def run() -> None:
        async with endpoint(tmp_path) as (_broker, stub, _address):
            r = await send(stub, message("T" * 300))
            assert r.status.code == pb.ILLEGAL_TOPIC and "300 chars exceeds max 127" in r.status.message
            for batch in (0, -1):
                (first, _) = await receive(stub, batch_size=batch)
                assert first.status.code == pb.BAD_REQUEST
                assert first.status.message.endswith(f"batch_size={batch} must be positive")
            (first, _) = await receive(stub, batch_size=1, group=LONG_GROUP)
            assert first.status.code == pb.ILLEGAL_CONSUMER_GROUP
            assert "300 chars exceeds max 255" in first.status.message
            (first, _) = await receive(stub, batch_size=1, topic="T" * 300)
            assert first.status.code == pb.ILLEGAL_TOPIC
            (first, _) = await receive(stub, batch_size=1, long_polling_timeout={"nanos": -1_000_000})
            assert first.status.code == pb.BAD_REQUEST
            assert first.status.message.endswith("long polling timeout -1 ms is negative")
            # a valid receive still works after all of that
            responses = await receive(
                stub, batch_size=1, long_polling_timeout={"seconds": 0}, invisible_duration={"seconds": 5}
            )
            assert responses[0].status.code in (pb.OK, pb.MESSAGE_NOT_FOUND)

    asyncio.run(run())
