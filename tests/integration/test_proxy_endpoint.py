"""The gRPC endpoint in-process, spoken to with our own stubs: bad input gets the right status and
the server keeps serving; a forgotten transaction half is pushed to the producer's Telemetry stream."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc
from procs import small_store_config

from _support.wait import wait_until_async
from rocketq.broker import Broker, BrokerConfig
from rocketq.broker.subscription_group import SubscriptionGroupConfig
from rocketq.protocol.topic import TopicConfig
from rocketq.proxy.server import GrpcConfig, GrpcEndpoint
from rocketq.proxy.v2 import definition_pb2 as pb
from rocketq.proxy.v2 import service_pb2 as spb
from rocketq.proxy.v2 import service_pb2_grpc

TIMEOUT_S = 10.0
META = (("x-mq-client-id", "test-client@1"),)


@asynccontextmanager
async def endpoint(tmp_path: pathlib.Path, **broker_kwargs: Any) -> AsyncIterator[tuple[Broker, Any, str]]:
    base: dict[str, Any] = {
        "broker_name": "broker-a",
        "broker_ip1": "127.0.0.1",
        "bind_address": "127.0.0.1",
        "listen_port": 0,
        "namesrv_addr": None,
    }
    base.update(broker_kwargs)
    broker = Broker(BrokerConfig(**base), small_store_config(tmp_path / "store"))
    await broker.start()
    ep = GrpcEndpoint(broker, GrpcConfig("127.0.0.1", 0))
    await ep.start()
    assert broker.ctx is not None
    broker.ctx.topics.update(TopicConfig("TN", 4, 4))
    broker.ctx.topics.update(TopicConfig("TX", 2, 2, attributes={"message.type": "TRANSACTION"}))
    channel = grpc.aio.insecure_channel(ep.address)
    try:
        yield broker, service_pb2_grpc.MessagingServiceStub(channel), ep.address
    finally:
        await channel.close()
        await ep.stop()
        await broker.shutdown()


def message(topic: str, body: bytes = b"x", msg_id: str = "ID", **sp: Any) -> pb.Message:
    return pb.Message(
        topic=pb.Resource(name=topic),
        body=body,
        system_properties=pb.SystemProperties(message_id=msg_id, **sp),
    )


async def send(stub: Any, msg: pb.Message) -> Any:
    return await stub.SendMessage(spb.SendMessageRequest(messages=[msg]), timeout=TIMEOUT_S, metadata=META)


def test_bad_requests_get_their_codes_and_the_server_keeps_serving(tmp_path: pathlib.Path) -> None:
    async def run() -> None:
        async with endpoint(tmp_path) as (_broker, stub, address):
            r = await send(stub, message("Nope"))
            assert r.status.code == pb.TOPIC_NOT_FOUND and "Nope" in r.status.message
            r = await send(stub, message("TN", body=b"z" * (4 * 1024 * 1024 + 1)))
            assert r.status.code == pb.MESSAGE_BODY_TOO_LARGE
            r = await send(stub, message("TN", message_type=pb.FIFO, message_group="g"))
            assert r.status.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
            r = await send(stub, message("TN", message_type=pb.FIFO))
            assert r.status.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
            r = await send(stub, message("TN", msg_id=""))
            assert r.status.code == pb.BAD_REQUEST
            r = await send(stub, message("bad topic!"))
            assert r.status.code == pb.ILLEGAL_TOPIC
            r = await stub.SendMessage(spb.SendMessageRequest(), timeout=TIMEOUT_S)
            assert r.status.code == pb.BAD_REQUEST
            r = await stub.QueryRoute(
                spb.QueryRouteRequest(topic=pb.Resource(name="Nope")), timeout=TIMEOUT_S
            )
            assert r.status.code == pb.TOPIC_NOT_FOUND
            ack = await stub.AckMessage(
                spb.AckMessageRequest(
                    group=pb.Resource(name="G"),
                    topic=pb.Resource(name="TN"),
                    entries=[spb.AckMessageEntry(message_id="ID", receipt_handle="garbage")],
                ),
                timeout=TIMEOUT_S,
            )
            assert ack.status.code == pb.INVALID_RECEIPT_HANDLE
            change = await stub.ChangeInvisibleDuration(
                spb.ChangeInvisibleDurationRequest(
                    group=pb.Resource(name="G"), topic=pb.Resource(name="TN"), receipt_handle="garbage"
                ),
                timeout=TIMEOUT_S,
            )
            assert change.status.code == pb.INVALID_RECEIPT_HANDLE and change.receipt_handle == "garbage"
            end = await stub.EndTransaction(
                spb.EndTransactionRequest(
                    topic=pb.Resource(name="TX"), transaction_id="nope", resolution=pb.COMMIT
                ),
                timeout=TIMEOUT_S,
            )
            assert end.status.code == pb.INVALID_TRANSACTION_ID
            # bytes that are no protobuf message at all end the call, not the server
            channel = grpc.aio.insecure_channel(address)
            try:
                garbage = channel.unary_unary("/apache.rocketmq.v2.MessagingService/SendMessage")
                try:
                    await garbage(b"\xff\xff\xff\xff", timeout=TIMEOUT_S)
                    raise AssertionError("a malformed request was accepted")
                except grpc.aio.AioRpcError as exc:
                    assert exc.code() is grpc.StatusCode.UNKNOWN and "corrupt" in (exc.details() or "")
            finally:
                await channel.close()
            ok = await send(stub, message("TN", body=b"fine", msg_id="ID-OK", tag="A"))
            assert ok.status.code == pb.OK and ok.entries[0].message_id == "ID-OK"

    asyncio.run(run())


def test_send_route_and_receive_round_trip(tmp_path: pathlib.Path) -> None:
    async def run() -> None:
        async with endpoint(tmp_path) as (_broker, stub, _address):
            route = await stub.QueryRoute(
                spb.QueryRouteRequest(topic=pb.Resource(name="TN")), timeout=TIMEOUT_S, metadata=META
            )
            assert route.status.code == pb.OK and len(route.message_queues) == 4
            assert all(list(q.accept_message_types) == [pb.NORMAL] for q in route.message_queues)
            assert route.message_queues[0].broker.endpoints.addresses[0].port > 0
            r = await send(stub, message("TN", body=b"payload", msg_id="M1", tag="A"))
            assert r.status.code == pb.OK
            responses = [
                x
                async for x in stub.ReceiveMessage(
                    spb.ReceiveMessageRequest(
                        group=pb.Resource(name="G"),
                        message_queue=route.message_queues[0],
                        filter_expression=pb.FilterExpression(type=pb.TAG, expression="A"),
                        batch_size=8,
                        invisible_duration={"seconds": 30},
                        long_polling_timeout={"seconds": 5},
                    ),
                    timeout=TIMEOUT_S,
                    metadata=META,
                )
            ]
            kinds = [x.WhichOneof("content") for x in responses]
            assert kinds == ["status", "message", "delivery_timestamp"]
            got = responses[1].message
            assert got.body == b"payload" and got.system_properties.message_id == "M1"
            assert got.system_properties.delivery_attempt == 1 and got.system_properties.receipt_handle
            ack = await stub.AckMessage(
                spb.AckMessageRequest(
                    group=pb.Resource(name="G"),
                    topic=pb.Resource(name="TN"),
                    entries=[
                        spb.AckMessageEntry(
                            message_id="M1", receipt_handle=got.system_properties.receipt_handle
                        )
                    ],
                ),
                timeout=TIMEOUT_S,
            )
            assert ack.status.code == pb.OK

    asyncio.run(run())


def test_orphaned_transaction_is_pushed_to_the_producer_stream(tmp_path: pathlib.Path) -> None:
    async def run() -> None:
        async with endpoint(tmp_path, transaction_check_interval_ms=100, transaction_timeout_ms=200) as (
            broker,
            stub,
            _address,
        ):
            outbound: asyncio.Queue[spb.TelemetryCommand] = asyncio.Queue()
            settings = pb.Settings(
                client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="TX")])
            )
            outbound.put_nowait(spb.TelemetryCommand(settings=settings))

            async def commands() -> AsyncIterator[spb.TelemetryCommand]:
                while True:
                    yield await outbound.get()

            stream = stub.Telemetry(commands(), metadata=META)
            first = await asyncio.wait_for(stream.read(), TIMEOUT_S)
            assert first.status.code == pb.OK and first.settings.publishing.max_body_size > 0
            assert first.settings.backoff_policy.HasField("exponential_backoff")
            r = await send(stub, message("TX", body=b"half", msg_id="TX1", message_type=pb.TRANSACTION))
            assert r.status.code == pb.OK and r.entries[0].transaction_id

            async def orphan_check() -> spb.RecoverOrphanedTransactionCommand | None:
                cmd = await asyncio.wait_for(stream.read(), TIMEOUT_S * 2)
                if cmd.HasField("recover_orphaned_transaction_command"):
                    return cmd.recover_orphaned_transaction_command
                return None

            check = await wait_until_async(orphan_check, "an orphaned transaction check", TIMEOUT_S * 2, 0)
            assert check.message.system_properties.message_id == "TX1" and check.message.topic.name == "TX"
            end = await stub.EndTransaction(
                spb.EndTransactionRequest(
                    topic=pb.Resource(name="TX"),
                    message_id="TX1",
                    transaction_id=check.transaction_id,
                    resolution=pb.COMMIT,
                    source=pb.SOURCE_SERVER_CHECK,
                ),
                timeout=TIMEOUT_S,
            )
            assert end.status.code == pb.OK
            assert broker.ctx is not None
            ctx = broker.ctx
            await wait_until_async(
                lambda: sum(ctx.store.get_max_offset("TX", q) for q in range(2)) >= 1,
                "the committed message in its topic",
                TIMEOUT_S,
                0.05,
            )
            stream.cancel()

    asyncio.run(run())


def test_last_attempt_goes_to_the_dead_letter_queue_without_another_receive(tmp_path: pathlib.Path) -> None:
    async def run() -> None:
        async with endpoint(tmp_path) as (broker, stub, _address):
            assert broker.ctx is not None and broker.ctx.pop is not None
            broker.ctx.groups.update(SubscriptionGroupConfig("GOnce", retry_max_times=0))  # 1 attempt
            r = await send(stub, message("TN", body=b"doomed", msg_id="D1"))
            assert r.status.code == pb.OK
            route = await stub.QueryRoute(
                spb.QueryRouteRequest(topic=pb.Resource(name="TN")), timeout=TIMEOUT_S, metadata=META
            )
            responses = [
                x
                async for x in stub.ReceiveMessage(
                    spb.ReceiveMessageRequest(
                        group=pb.Resource(name="GOnce"),
                        message_queue=route.message_queues[0],
                        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
                        batch_size=8,
                        invisible_duration={"seconds": 1},
                        long_polling_timeout={"seconds": 5},
                    ),
                    timeout=TIMEOUT_S,
                    metadata=META,
                )
            ]
            got = [x.message for x in responses if x.WhichOneof("content") == "message"]
            assert [m.body for m in got] == [b"doomed"]
            # not acked; nobody receives again: the message must still reach %DLQ%GOnce
            store = broker.ctx.store

            def dead_letters() -> list[bytes]:
                return [m.body for m in store.get_message("X", "%DLQ%GOnce", 0, 0, 8).messages]

            bodies = await wait_until_async(dead_letters, "the message in %DLQ%GOnce", TIMEOUT_S, 0.1)
            assert bodies == [b"doomed"]
            # the sweep counts the move once its ack is durable, just after the DLQ write
            pop = broker.ctx.pop
            await wait_until_async(lambda: pop.swept_to_dlq >= 1, "the sweep to finish", TIMEOUT_S, 0.05)
            assert broker.ctx.pop.swept_to_dlq == 1
            # and it is done for the group: the handle is dead, nothing is redelivered
            again = [
                x
                async for x in stub.ReceiveMessage(
                    spb.ReceiveMessageRequest(
                        group=pb.Resource(name="GOnce"),
                        message_queue=route.message_queues[0],
                        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
                        batch_size=8,
                        invisible_duration={"seconds": 1},
                        long_polling_timeout={"seconds": 0},
                    ),
                    timeout=TIMEOUT_S,
                    metadata=META,
                )
            ]
            assert [x.status.code for x in again if x.WhichOneof("content") == "status"] == [
                pb.MESSAGE_NOT_FOUND
            ]

    asyncio.run(run())
