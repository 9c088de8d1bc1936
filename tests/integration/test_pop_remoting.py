"""POP_MESSAGE / ACK_MESSAGE / CHANGE_MESSAGE_INVISIBLETIME over the remoting protocol against an
in-process broker: pop, ack (nothing comes back), change invisible (comes back with attempt 2),
bad handles refused without losing the message."""

from __future__ import annotations

import time

from _support.pop import broker_config, run, send
from _support.wait import collect_until_async
from rocketq.broker import Broker
from rocketq.client.lite_pull import decode_messages
from rocketq.config import StoreConfig
from rocketq.errors import ResponseCode
from rocketq.message import PROPERTY_POP_CK, MessageExt
from rocketq.remoting import RemotingClient, RequestCode, create_request

TOPIC = "PopRemoting"
GROUP = "PopRemotingGroup"
WAIT_S = 20.0


async def pop(
    client: RemotingClient, addr: str, *, poll_ms: int = 0, invisible_ms: int = 60_000, queue_id: int = -1
) -> tuple[int, list[MessageExt]]:
    fields = {
        "consumerGroup": GROUP,
        "topic": TOPIC,
        "queueId": queue_id,
        "maxMsgNums": 32,
        "invisibleTime": invisible_ms,
        "pollTime": poll_ms,
        "bornTime": time.time_ns() // 1_000_000,
        "initMode": 0,
        "expType": "TAG",
        "exp": "*",
        "order": "false",
    }
    response = await client.invoke(addr, create_request(RequestCode.POP_MESSAGE, fields), 30.0)
    if response.code != ResponseCode.SUCCESS:
        return response.code, []
    assert int(response.ext_fields["invisibleTime"]) == invisible_ms
    return response.code, decode_messages(response.body or b"")


async def pop_all(client: RemotingClient, addr: str, n: int) -> list[MessageExt]:
    async def popped() -> list[MessageExt]:
        return (await pop(client, addr, poll_ms=2_000))[1]

    return await collect_until_async(popped, n, "popped messages", WAIT_S)


def ack_fields(m: MessageExt, handle: str | None = None) -> dict[str, object]:
    return {
        "consumerGroup": GROUP,
        "topic": TOPIC,
        "queueId": m.queue_id,
        "offset": m.queue_offset,
        "extraInfo": handle if handle is not None else m.properties[PROPERTY_POP_CK],
    }


def test_pop_ack_and_change_invisible_over_remoting(store_config: StoreConfig) -> None:
    async def go() -> None:
        client = RemotingClient()
        broker = Broker(broker_config(), store_config)
        await broker.start()
        try:
            addr = f"127.0.0.1:{broker.port}"
            # the topic does not exist before the first send
            assert (await pop(client, addr, poll_ms=100)) == (ResponseCode.TOPIC_NOT_EXIST, [])
            for i in range(6):
                await send(client, addr, TOPIC, f"m{i}".encode(), i % 2)
            got = await pop_all(client, addr, 6)
            assert sorted(m.body for m in got) == [f"m{i}".encode() for i in range(6)]
            assert all(m.reconsume_times == 0 and m.topic == TOPIC for m in got)
            by_body = {m.body: m for m in got}

            for body in (b"m0", b"m1", b"m2", b"m4", b"m5"):
                response = await client.invoke(
                    addr, create_request(RequestCode.ACK_MESSAGE, ack_fields(by_body[body]))
                )
                assert response.code == ResponseCode.SUCCESS, response.remark
            # acking the same delivery again: stale handle
            again = await client.invoke(
                addr, create_request(RequestCode.ACK_MESSAGE, ack_fields(by_body[b"m0"]))
            )
            assert again.code == ResponseCode.INVALID_PARAMETER and "stale" in (again.remark or "")

            m3 = by_body[b"m3"]
            # a handle presented with the wrong offset, or garbage, is refused and changes nothing
            wrong = dict(ack_fields(m3), offset=m3.queue_offset + 7)
            bad = await client.invoke(addr, create_request(RequestCode.ACK_MESSAGE, wrong))
            assert bad.code == ResponseCode.INVALID_PARAMETER
            junk = await client.invoke(addr, create_request(RequestCode.ACK_MESSAGE, ack_fields(m3, "1.zz")))
            assert junk.code == ResponseCode.INVALID_PARAMETER
            missing = await client.invoke(
                addr, create_request(RequestCode.POP_MESSAGE, {"consumerGroup": GROUP, "topic": TOPIC})
            )
            assert missing.code == ResponseCode.INVALID_PARAMETER and "maxMsgNums" in (missing.remark or "")

            change = await client.invoke(
                addr,
                create_request(
                    RequestCode.CHANGE_MESSAGE_INVISIBLETIME, dict(ack_fields(m3), invisibleTime=300)
                ),
            )
            assert change.code == ResponseCode.SUCCESS, change.remark
            new_handle = change.ext_fields["extraInfo"]
            assert new_handle != m3.properties[PROPERTY_POP_CK]

            # m3 comes back with attempt 2 (reconsumeTimes 1); nothing acked comes back
            code, back = await pop(client, addr, poll_ms=5_000)
            assert code == ResponseCode.SUCCESS
            assert [(m.body, m.reconsume_times) for m in back] == [(b"m3", 1)]
            # the handle returned by the change is stale now (a new delivery happened)
            stale = await client.invoke(
                addr, create_request(RequestCode.ACK_MESSAGE, ack_fields(back[0], new_handle))
            )
            assert stale.code == ResponseCode.INVALID_PARAMETER
            done = await client.invoke(addr, create_request(RequestCode.ACK_MESSAGE, ack_fields(back[0])))
            assert done.code == ResponseCode.SUCCESS, done.remark
            assert (await pop(client, addr, poll_ms=200)) == (ResponseCode.PULL_NOT_FOUND, [])
        finally:
            await broker.shutdown()
            await client.close()

    run(go())
