"""ACL on the gRPC endpoint: a broker with ``aclEnable=true`` and its endpoint, called through
our own stubs with the metadata the RocketMQ 5 SDKs send (``authorization: MQv2-HMAC-SHA1 …``
and ``x-mq-date-time``); right keys pass, missing or wrong ones answer UNAUTHORIZED and missing
permissions FORBIDDEN in the response's status; Telemetry without a signature is aborted."""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
from collections.abc import AsyncIterator

import grpc
import pytest
from test_proxy_tls import new_broker

from _support.acl import ACL_FILE, ADMIN, PUB_ONLY, SUB_ONLY, write_acl_file
from rocketq.broker import Broker
from rocketq.protocol.topic import TopicConfig
from rocketq.proxy.auth import authorization_header, grpc_signature, parse_authorization
from rocketq.proxy.server import GrpcConfig, GrpcEndpoint
from rocketq.proxy.v2 import definition_pb2 as pb
from rocketq.proxy.v2 import service_pb2 as spb
from rocketq.proxy.v2 import service_pb2_grpc

TIMEOUT_S = 10.0
TOPIC = "GrpcAclTopic"
DATE = "20231227T194619Z"


def test_signature_vector_and_header_shapes() -> None:
    # printf 20231227T194619Z | openssl dgst -sha1 -hmac 12345678
    assert grpc_signature("12345678", DATE) == "b78a646b41b898e9a4b565927a888b247ea32e86"
    assert authorization_header("ak", "12345678", DATE) == (
        "MQv2-HMAC-SHA1 Credential=ak, SignedHeaders=x-mq-date-time, "
        "Signature=b78a646b41b898e9a4b565927a888b247ea32e86"
    )
    # the Java SDK appends /region/service to the key
    assert parse_authorization(
        "MQv2-HMAC-SHA1 Credential=ak/r/s, SignedHeaders=x-mq-date-time, Signature=AB"
    ) == (
        "ak",
        "AB",
    )
    with pytest.raises(ValueError, match="not MQv2-HMAC-SHA1"):
        parse_authorization("Basic abc")


def meta(
    keys: tuple[str, str] | None, *, upper: bool = False, secret: str | None = None
) -> tuple[tuple[str, str], ...]:
    base = (("x-mq-client-id", "acl-client@1"), ("x-mq-date-time", DATE))
    if keys is None:
        return base
    header = authorization_header(keys[0], secret or keys[1], DATE)
    if upper:
        head, _, sig = header.rpartition("=")
        header = f"{head}={sig.upper()}"
    return (*base, ("authorization", header))


def send_request(body: bytes) -> spb.SendMessageRequest:
    return spb.SendMessageRequest(
        messages=[
            pb.Message(
                topic=pb.Resource(name=TOPIC),
                body=body,
                system_properties=pb.SystemProperties(message_id=body.decode(), message_type=pb.NORMAL),
            )
        ]
    )


def receive_request(group: str) -> spb.ReceiveMessageRequest:
    return spb.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=-1, permission=pb.READ_WRITE),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        batch_size=4,
        auto_renew=False,
    )


def new_acl_broker(tmp_path: pathlib.Path, acl_text: str) -> Broker:
    acl_file = write_acl_file(tmp_path, acl_text)
    return new_broker(tmp_path, acl_enable=True, acl_file=str(acl_file))


@contextlib.asynccontextmanager
async def acl_stub(
    tmp_path: pathlib.Path, acl_text: str
) -> AsyncIterator[service_pb2_grpc.MessagingServiceStub]:
    """A started ACL broker with :data:`TOPIC` and its gRPC endpoint; a stub on a channel to it."""
    broker = new_acl_broker(tmp_path, acl_text)
    await broker.start()
    ep = GrpcEndpoint(broker, GrpcConfig("127.0.0.1", 0))
    try:
        await ep.start()
        assert broker.ctx is not None
        broker.ctx.topics.update(TopicConfig(TOPIC, 1, 1))
        async with grpc.aio.insecure_channel(ep.address) as channel:
            yield service_pb2_grpc.MessagingServiceStub(channel)
    finally:
        await ep.stop()
        await broker.shutdown()


def test_globally_white_listed_peer_needs_no_signature(tmp_path: pathlib.Path) -> None:
    async def run() -> None:
        async with acl_stub(tmp_path, "globalWhiteRemoteAddresses:\n  - 127.0.0.1\n" + ACL_FILE) as stub:
            sent = await stub.SendMessage(send_request(b"W-1"), timeout=TIMEOUT_S, metadata=meta(None))
            assert sent.status.code == pb.OK, sent.status

    asyncio.run(run())


def test_grpc_calls_checked_against_plain_acl(tmp_path: pathlib.Path) -> None:
    async def run() -> None:
        async with acl_stub(tmp_path, ACL_FILE) as stub:
            route = spb.QueryRouteRequest(topic=pb.Resource(name=TOPIC))
            r = await stub.QueryRoute(route, timeout=TIMEOUT_S, metadata=meta(SUB_ONLY))
            assert r.status.code == pb.OK, r.status
            r = await stub.QueryRoute(route, timeout=TIMEOUT_S, metadata=meta(None))
            assert r.status.code == pb.UNAUTHORIZED
            assert "No authorization in gRPC call QueryRoute" in r.status.message
            r = await stub.QueryRoute(
                route, timeout=TIMEOUT_S, metadata=meta(SUB_ONLY, secret="wrong-secret")
            )
            assert (r.status.code, r.status.message) == (
                pb.UNAUTHORIZED,
                "signature mismatch for accessKey subonly1",
            )
            r = await stub.QueryRoute(route, timeout=TIMEOUT_S, metadata=meta(("nobody1", "x")))
            assert (
                r.status.code == pb.UNAUTHORIZED and "No acl config for accessKey nobody1" in r.status.message
            )

            sent = await stub.SendMessage(
                send_request(b"M-1"), timeout=TIMEOUT_S, metadata=meta(PUB_ONLY, upper=True)
            )
            assert sent.status.code == pb.OK, sent.status
            sent = await stub.SendMessage(send_request(b"M-2"), timeout=TIMEOUT_S, metadata=meta(SUB_ONLY))
            assert sent.status.code == pb.FORBIDDEN
            assert sent.status.message == f"No permission to PUB topic {TOPIC} for accessKey subonly1"

            async def receive(keys: tuple[str, str]) -> list[spb.ReceiveMessageResponse]:
                call = stub.ReceiveMessage(
                    receive_request("AclGroup"), timeout=TIMEOUT_S, metadata=meta(keys)
                )
                return [response async for response in call]

            refused = await receive(PUB_ONLY)  # a PUB-only account cannot consume
            assert [x.status.code for x in refused] == [pb.FORBIDDEN]
            assert "No permission to SUB" in refused[0].status.message
            got = await receive(SUB_ONLY)
            assert [m.body for x in got if x.HasField("message") for m in [x.message]] == [b"M-1"]
            handle = next(x.message.system_properties.receipt_handle for x in got if x.HasField("message"))
            ack = spb.AckMessageRequest(
                group=pb.Resource(name="AclGroup"),
                topic=pb.Resource(name=TOPIC),
                entries=[spb.AckMessageEntry(message_id="M-1", receipt_handle=handle)],
            )
            acked = await stub.AckMessage(ack, timeout=TIMEOUT_S, metadata=meta(PUB_ONLY))
            assert acked.status.code == pb.FORBIDDEN
            acked = await stub.AckMessage(ack, timeout=TIMEOUT_S, metadata=meta(ADMIN))
            assert acked.status.code == pb.OK, acked.status

            telemetry = stub.Telemetry(metadata=meta(None), timeout=TIMEOUT_S)
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await telemetry.read()
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "No authorization in gRPC call Telemetry" in (info.value.details() or "")

    asyncio.run(run())
