"""Pop consumption in a real Broker: messages sent over the remoting protocol, received through
``Broker.ctx.pop``, lag visible through GET_CONSUME_STATS, state kept across a broker restart."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from _support.pop import broker_config, consume_stats, run, send
from _support.wait import collect_until_async, wait_until_async
from rocketq.broker import Broker
from rocketq.broker.pop.service import PoppedMessage, PopService
from rocketq.config import StoreConfig
from rocketq.errors import InvalidReceiptHandle
from rocketq.remoting import RemotingClient

TOPIC = "PopTopic"
GROUP = "PopGroup"
WAIT_S = 20.0


def pop_of(broker: Broker) -> PopService:
    assert broker.ctx is not None and broker.ctx.pop is not None
    return broker.ctx.pop


async def receive(pop: PopService, **kw: Any) -> list[PoppedMessage]:
    args: dict[str, Any] = {
        "group": GROUP,
        "topic": TOPIC,
        "queue_id": None,
        "max_messages": 32,
        "invisible_ms": 60_000,
        "long_poll_ms": 5_000,
    }
    args.update(kw)
    return await pop.receive(**args)


async def receive_all(pop: PopService, n: int, **kw: Any) -> list[PoppedMessage]:
    return await collect_until_async(lambda: receive(pop, **kw), n, "popped messages", WAIT_S)


def test_pop_through_a_real_broker_and_restart(store_config: StoreConfig) -> None:
    store_config = dataclasses.replace(store_config, flush_disk_type="SYNC_FLUSH")

    async def go() -> None:
        client = RemotingClient()
        broker = Broker(broker_config(), store_config)
        await broker.start()
        try:
            addr = f"127.0.0.1:{broker.port}"
            for i in range(10):
                await send(client, addr, TOPIC, f"m{i}".encode(), i % 2)
            pop = pop_of(broker)
            got = await receive_all(pop, 10)
            assert sorted(m.message.body for m in got) == sorted(f"m{i}".encode() for i in range(10))
            by_body = {m.message.body: m for m in got}
            # ack m0, m2, m4 (queue 0 offsets 0..2) and m1 (queue 1 offset 0)
            for body in (b"m0", b"m2", b"m4", b"m1"):
                await pop.ack(group=GROUP, topic=TOPIC, receipt_handle=by_body[body].receipt_handle)
            assert await consume_stats(client, addr, TOPIC, GROUP) == {0: (5, 3), 1: (5, 1)}
            short = await pop.change_invisible(
                group=GROUP, topic=TOPIC, receipt_handle=by_body[b"m3"].receipt_handle, invisible_ms=200
            )
            # a held receive is woken by a message sent over the network
            held = asyncio.create_task(receive(pop, queue_id=0, long_poll_ms=15_000))
            await wait_until_async(lambda: TOPIC in pop._waiters, "the receive to be held", WAIT_S, 0.002)
            await send(client, addr, TOPIC, b"late", 0)
            late = await asyncio.wait_for(held, WAIT_S)
            assert [m.message.body for m in late] == [b"late"]
            # the shortened one comes back with attempt 2 once its invisible time passed
            again = await receive(pop, queue_id=1, long_poll_ms=10_000)
            assert [(m.message.body, m.delivery_attempt) for m in again] == [(b"m3", 2)]
            with pytest.raises(InvalidReceiptHandle):
                await pop.ack(group=GROUP, topic=TOPIC, receipt_handle=short)
            keep = by_body[b"m6"].receipt_handle
        finally:
            await broker.shutdown()

        broker = Broker(broker_config(), store_config)
        await broker.start()
        try:
            addr = f"127.0.0.1:{broker.port}"
            pop = pop_of(broker)
            assert await consume_stats(client, addr, TOPIC, GROUP) == {0: (6, 3), 1: (5, 1)}
            # a handle from before the restart is still good
            await pop.ack(group=GROUP, topic=TOPIC, receipt_handle=keep)
            assert await receive(pop, long_poll_ms=0) == []  # the rest is still invisible
            state0 = pop.table.states[(GROUP, TOPIC, 0)]
            state1 = pop.table.states[(GROUP, TOPIC, 1)]
            assert sorted(state0.in_flight) == [4, 5] and sorted(state1.in_flight) == [1, 2, 3, 4]
            assert state1.in_flight[1].attempt == 2
        finally:
            await broker.shutdown()
            await client.close()

    run(go())
