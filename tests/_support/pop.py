"""What the pop-consumption integration tests share: an in-process broker's config, a bounded
``asyncio.run``, a plain SEND_MESSAGE_V2 and the per-queue offsets of GET_CONSUME_STATS."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from _support.requests import send_request
from rocketq.broker import BrokerConfig
from rocketq.protocol.fastjson import OBJECT_KEYS
from rocketq.protocol.queue import MessageQueue, message_queue_table
from rocketq.remoting import RemotingClient, RequestCode, create_request

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, 120)

    return asyncio.run(bounded())


def broker_config() -> BrokerConfig:
    return BrokerConfig(
        broker_name="broker-a",
        broker_ip1="127.0.0.1",
        bind_address="127.0.0.1",
        listen_port=0,
        namesrv_addr=None,
        fast_listen_port_enable=False,
        default_topic_queue_nums=2,
    )


async def send(client: RemotingClient, addr: str, topic: str, body: bytes, queue_id: int) -> None:
    response = await client.invoke(
        addr, send_request(topic, body, queue_id=queue_id, default_topic_queue_nums=2)
    )
    assert response.code == 0, response.remark


async def consume_stats(
    client: RemotingClient, addr: str, topic: str, group: str
) -> dict[int, tuple[int, int]]:
    """{queue id: (broker offset, consumer offset)} of queues 0 and 1 on broker-a."""
    response = await client.invoke(
        addr, create_request(RequestCode.GET_CONSUME_STATS, {"consumerGroup": group, "topic": topic})
    )
    assert response.code == 0 and response.body is not None
    table = message_queue_table(OBJECT_KEYS.loads(response.body)["offsetTable"])
    return {
        q: (
            table[MessageQueue(topic, "broker-a", q)]["brokerOffset"],
            table[MessageQueue(topic, "broker-a", q)]["consumerOffset"],
        )
        for q in (0, 1)
    }
