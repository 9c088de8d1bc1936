"""Pop consumption in ``rocketmq_messages_out_total`` / ``rocketmq_throughput_out_total``: an
in-process broker with metrics on and the RocketMQ 5 gRPC endpoint; messages sent through
SendMessage count in, and messages received through ReceiveMessage, a redelivery, and a remoting
POP_MESSAGE of another group show up exactly in the scraped counters, labelled with their
consumer group."""

from __future__ import annotations

import asyncio
import pathlib
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc
from procs import small_store_config

from _support.metrics import Samples, check_exposition, scrape, value
from _support.wait import collect_until_async
from rocketq.broker import Broker, BrokerConfig
from rocketq.client.lite_pull import decode_messages
from rocketq.errors import ResponseCode
from rocketq.message import MessageExt
from rocketq.protocol.topic import TopicConfig
from rocketq.proxy.server import GrpcConfig, GrpcEndpoint
from rocketq.proxy.v2 import definition_pb2 as pb
from rocketq.proxy.v2 import service_pb2 as spb
from rocketq.proxy.v2 import service_pb2_grpc
from rocketq.remoting import RemotingClient, RequestCode, create_request
from rocketq.store.message_store import MessageStore

TOPIC = "MetPop"
GROUP = "MetPopGrpc"
REMOTING_GROUP = "MetPopRemoting"
SENT = 20
TIMEOUT_S = 10.0
WAIT_S = 30.0
META = (("x-mq-client-id", "metrics-pop@1"),)


@asynccontextmanager
async def endpoint(tmp_path: pathlib.Path) -> AsyncIterator[tuple[Broker, Any]]:
    config = BrokerConfig(
        broker_name="broker-a",
        broker_ip1="127.0.0.1",
        bind_address="127.0.0.1",
        listen_port=0,
        namesrv_addr=None,
        metrics_exporter_type="PROM",
        metrics_prom_exporter_port=0,
    )
    broker = Broker(config, small_store_config(tmp_path / "store"))
    await broker.start()
    ep = GrpcEndpoint(broker, GrpcConfig("127.0.0.1", 0))
    await ep.start()
    assert broker.ctx is not None
    broker.ctx.topics.update(TopicConfig(TOPIC, 4, 4))
    channel = grpc.aio.insecure_channel(ep.address)
    try:
        yield broker, service_pb2_grpc.MessagingServiceStub(channel)
    finally:
        await channel.close()
        await ep.stop()
        await broker.shutdown()


async def samples_of(broker: Broker) -> Samples:
    url = broker.metrics_url
    assert url is not None
    return check_exposition(await asyncio.to_thread(scrape, url))


def out_labels(group: str) -> dict[str, str]:
    return {"topic": TOPIC, "consumer_group": group, "is_retry": "false", "is_system": "false"}


async def receive(stub: Any, invisible_s: int) -> list[pb.Message]:
    responses = [
        x
        async for x in stub.ReceiveMessage(
            spb.ReceiveMessageRequest(
                group=pb.Resource(name=GROUP),
                message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC)),
                filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
                batch_size=8,
                invisible_duration={"seconds": invisible_s},
                long_polling_timeout={"seconds": 2},
            ),
            timeout=TIMEOUT_S,
            metadata=META,
        )
    ]
    return [x.message for x in responses if x.WhichOneof("content") == "message"]


async def remoting_pop(client: RemotingClient, addr: str) -> list[MessageExt]:
    fields = {
        "consumerGroup": REMOTING_GROUP,
        "topic": TOPIC,
        "queueId": -1,
        "maxMsgNums": 32,
        "invisibleTime": 60_000,
        "pollTime": 2_000,
        "bornTime": time.time_ns() // 1_000_000,
        "initMode": 0,
        "expType": "TAG",
        "exp": "*",
        "order": "false",
    }
    response = await client.invoke(addr, create_request(RequestCode.POP_MESSAGE, fields), 30.0)
    if response.code != ResponseCode.SUCCESS:
        return []
    return decode_messages(response.body or b"")


def record_size(store: MessageStore, m: pb.Message) -> int:
    """Bytes of the stored record of a received message."""
    sp = m.system_properties
    result = store.get_message("any", TOPIC, sp.queue_id, sp.queue_offset, 1)
    assert result.queue_offsets[:1] == [sp.queue_offset], result
    return len(result.buffers[0])


def test_grpc_receive_and_remoting_pop_are_counted_as_messages_out(tmp_path: pathlib.Path) -> None:
    async def run() -> None:
        async with endpoint(tmp_path) as (broker, stub):
            assert broker.ctx is not None
            store = broker.ctx.store
            messages = [
                pb.Message(
                    topic=pb.Resource(name=TOPIC),
                    body=b"b" * (10 + 37 * i),  # records of different sizes
                    system_properties=pb.SystemProperties(message_id=f"MP{i:04d}", tag="T"),
                )
                for i in range(SENT)
            ]
            sent = await stub.SendMessage(
                spb.SendMessageRequest(messages=messages), timeout=TIMEOUT_S, metadata=META
            )
            assert sent.status.code == pb.OK, sent.status
            before = await samples_of(broker)
            # a gRPC send counts in as a remoting send does; nothing is out yet
            normal = {"topic": TOPIC, "message_type": "normal", "is_system": "false"}
            assert value(before, "rocketmq_messages_in_total", **normal) == SENT
            bytes_in = value(before, "rocketmq_throughput_in_total", **normal)
            assert value(before, "rocketmq_messages_out_total", topic=TOPIC) == 0

            async def received() -> list[pb.Message]:
                return await receive(stub, invisible_s=30)

            got = await collect_until_async(received, SENT, "messages received over gRPC", WAIT_S)
            assert sorted(m.system_properties.message_id for m in got) == [f"MP{i:04d}" for i in range(SENT)]
            samples = await samples_of(broker)
            assert value(samples, "rocketmq_messages_out_total", **out_labels(GROUP)) == SENT
            # every record once: the bytes out are the bytes the sends stored
            assert bytes_in == sum(record_size(store, m) for m in got)
            assert value(samples, "rocketmq_throughput_out_total", **out_labels(GROUP)) == bytes_in

            # one message comes back (its invisible time cut to 1 s): a second delivery counts again
            again = got[-1]
            change = await stub.ChangeInvisibleDuration(
                spb.ChangeInvisibleDurationRequest(
                    group=pb.Resource(name=GROUP),
                    topic=pb.Resource(name=TOPIC),
                    receipt_handle=again.system_properties.receipt_handle,
                    invisible_duration={"seconds": 1},
                    message_id=again.system_properties.message_id,
                ),
                timeout=TIMEOUT_S,
                metadata=META,
            )
            assert change.status.code == pb.OK, change.status
            redelivered = await collect_until_async(received, 1, "the redelivery", WAIT_S)
            assert [m.system_properties.message_id for m in redelivered] == [
                again.system_properties.message_id
            ]
            assert redelivered[0].system_properties.delivery_attempt == 2
            samples = await samples_of(broker)
            assert value(samples, "rocketmq_messages_out_total", **out_labels(GROUP)) == SENT + 1
            assert value(
                samples, "rocketmq_throughput_out_total", **out_labels(GROUP)
            ) == bytes_in + record_size(store, again)

            # remoting POP_MESSAGE (another group): counted under its own group
            client = RemotingClient()
            try:
                addr = f"127.0.0.1:{broker.port}"

                async def popped() -> list[MessageExt]:
                    return await remoting_pop(client, addr)

                await collect_until_async(popped, SENT, "messages popped over remoting", WAIT_S)
            finally:
                await client.close()
            samples = await samples_of(broker)
            assert value(samples, "rocketmq_messages_out_total", **out_labels(REMOTING_GROUP)) == SENT
            assert value(samples, "rocketmq_throughput_out_total", **out_labels(REMOTING_GROUP)) == bytes_in
            assert value(samples, "rocketmq_messages_out_total", **out_labels(GROUP)) == SENT + 1

    asyncio.run(asyncio.wait_for(run(), 120))
