"""SQL92 filtering on a real in-process broker over the remoting protocol (raw requests)."""

from __future__ import annotations

import asyncio
import json

from test_broker_server import (
    WAIT_S,
    decode_records,
    dispatched,
    run,
    running_broker,
)

from _support.requests import send_request
from _support.wait import wait_until_async
from rocketq.config import StoreConfig
from rocketq.errors import ResponseCode
from rocketq.message import decode_properties
from rocketq.protocol.headers import PULL_FLAG_SUBSCRIPTION, PULL_FLAG_SUSPEND, PullMessageRequestHeader
from rocketq.remoting import RemotingClient, RequestCode, create_request
from rocketq.remoting.command import RemotingCommand

TOPIC = "FilterT"


def sql_pull(
    offset: int,
    expression: str | None,
    *,
    expression_type: str = "SQL92",
    suspend: bool = False,
    max_msgs: int = 32,
    group: str = "CG",
) -> RemotingCommand:
    flag = PULL_FLAG_SUSPEND if suspend else 0
    if expression is not None:
        flag |= PULL_FLAG_SUBSCRIPTION
    header = PullMessageRequestHeader(
        consumer_group=group,
        topic=TOPIC,
        queue_id=0,
        queue_offset=offset,
        max_msg_nums=max_msgs,
        sys_flag=flag,
        commit_offset=0,
        suspend_timeout_millis=15_000,
        sub_version=0,
        subscription=expression,
        expression_type=expression_type,
    )
    return create_request(RequestCode.PULL_MESSAGE, header.to_ext_fields())


def heartbeat(group: str, expression: str, expression_type: str = "SQL92") -> RemotingCommand:
    body = {
        "clientID": "127.0.0.1@filter-test",
        "producerDataSet": [],
        "consumerDataSet": [
            {
                "groupName": group,
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                "unitMode": False,
                "subscriptionDataSet": [
                    {
                        "topic": TOPIC,
                        "subString": expression,
                        "tagsSet": [],
                        "codeSet": [],
                        "subVersion": 1,
                        "expressionType": expression_type,
                        "classFilterMode": False,
                    }
                ],
            }
        ],
    }
    return create_request(RequestCode.HEART_BEAT, {}, json.dumps(body).encode())


async def send_numbered(client: RemotingClient, addr: str, count: int, start: int = 0) -> None:
    """Messages with a = i, color red/blue alternating, tag TagA/TagB alternating."""
    for i in range(start, start + count):
        props = {"a": str(i), "color": "red" if i % 2 else "blue", "TAGS": "TagA" if i % 2 else "TagB"}
        response = await client.invoke(addr, send_request(TOPIC, f"m{i}".encode(), properties=props))
        assert response.code == 0, response.remark


def a_values(response: RemotingCommand) -> list[int]:
    return [int(decode_properties(v.properties)["a"]) for v in decode_records(response.body)]


def test_sql92_pull_returns_matching_messages_and_skips_the_rest(store_config: StoreConfig) -> None:
    async def main() -> None:
        async with running_broker(store_config) as (broker, client, addr):
            await send_numbered(client, addr, 10)
            await dispatched(broker)
            response = await client.invoke(addr, sql_pull(0, "a >= 5 AND color = 'red'"))
            assert response.code == ResponseCode.SUCCESS, response.remark
            assert a_values(response) == [5, 7, 9]
            assert response.ext_fields["nextBeginOffset"] == "10"

            response = await client.invoke(addr, sql_pull(0, "TAGS = 'TagB' AND a BETWEEN 2 AND 6"))
            assert a_values(response) == [2, 4, 6]

            # a batch where nothing matches still moves the offset past what was scanned
            response = await client.invoke(addr, sql_pull(0, "a > 100", max_msgs=4))
            assert response.code == ResponseCode.PULL_RETRY_IMMEDIATELY
            assert response.body in (b"", None)
            assert response.ext_fields["nextBeginOffset"] == "4"

            # messages without the property: unknown → not delivered
            await client.invoke(addr, send_request(TOPIC, b"plain", properties={"other": "1"}))
            await dispatched(broker)
            response = await client.invoke(addr, sql_pull(10, "a IS NULL"))
            assert [v.body for v in decode_records(response.body)] == [b"plain"]
            response = await client.invoke(addr, sql_pull(10, "a < 5"))
            assert response.code == ResponseCode.PULL_RETRY_IMMEDIATELY
            assert response.ext_fields["nextBeginOffset"] == "11"

            # the TAG path is unchanged
            response = await client.invoke(addr, sql_pull(0, "TagA", expression_type="TAG"))
            assert a_values(response) == [1, 3, 5, 7, 9]

    run(main())


def test_bad_expressions_answer_subscription_parse_failed(store_config: StoreConfig) -> None:
    async def main() -> None:
        async with running_broker(store_config) as (broker, client, addr):
            await send_numbered(client, addr, 2)
            await dispatched(broker)
            response = await client.invoke(addr, sql_pull(0, "a > 'x'"))
            assert response.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
            assert "column 3" in (response.remark or "")
            response = await client.invoke(addr, sql_pull(0, "a = 1", expression_type="XPATH"))
            assert response.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
            assert "unknown expression type" in (response.remark or "")

            # a heartbeat with a bad SQL92 subscription is refused and registers nothing
            response = await client.invoke(addr, heartbeat("BadGroup", "a >"))
            assert response.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
            assert "BadGroup" in (response.remark or "") and "column 4" in (response.remark or "")
            assert broker.ctx is not None and broker.ctx.consumers.get("BadGroup") is None

            # the broker keeps serving
            response = await client.invoke(addr, sql_pull(0, "a = 1"))
            assert a_values(response) == [1]

    run(main())


def test_heartbeat_subscription_filters_pulls_without_an_expression(store_config: StoreConfig) -> None:
    async def main() -> None:
        async with running_broker(store_config) as (broker, client, addr):
            response = await client.invoke(addr, heartbeat("HbGroup", "color = 'blue' AND a > 2"))
            assert response.code == 0, response.remark
            await send_numbered(client, addr, 8)
            await dispatched(broker)
            response = await client.invoke(addr, sql_pull(0, None, group="HbGroup"))
            assert response.code == 0, response.remark
            assert a_values(response) == [4, 6]

    run(main())


def test_property_filter_disabled(store_config: StoreConfig) -> None:
    async def main() -> None:
        async with running_broker(store_config, enable_property_filter=False) as (broker, client, addr):
            await send_numbered(client, addr, 2)
            await dispatched(broker)
            response = await client.invoke(addr, sql_pull(0, "a = 1"))
            assert response.code == ResponseCode.SYSTEM_ERROR
            assert response.remark == "The broker does not support consumer to filter message by SQL92"
            response = await client.invoke(addr, sql_pull(0, "TagA", expression_type="TAG"))
            assert a_values(response) == [1]

    run(main())


def test_held_sql92_pull_wakes_only_for_a_matching_message(store_config: StoreConfig) -> None:
    async def main() -> None:
        async with running_broker(store_config) as (broker, client, addr):
            assert broker.ctx is not None
            await send_numbered(client, addr, 1)  # creates the topic; offset 1 is the end
            await dispatched(broker)
            hold = broker.ctx.hold
            pull = asyncio.ensure_future(client.invoke(addr, sql_pull(1, "a >= 100", suspend=True), 30))
            # an unfiltered pull held on the same queue: its answer shows an arrival was processed
            probe = asyncio.ensure_future(
                client.invoke(addr, sql_pull(1, "*", expression_type="TAG", suspend=True), 30)
            )
            await wait_until_async(lambda: hold.held_count == 2, "both pulls to be held", WAIT_S, 0.005)
            await send_numbered(client, addr, 1, start=1)  # a = 1: no match
            response = await asyncio.wait_for(probe, WAIT_S)
            assert a_values(response) == [1]
            assert not pull.done() and hold.held_count == 1
            await send_numbered(client, addr, 1, start=100)
            response = await asyncio.wait_for(pull, WAIT_S)
            assert response.code == 0, response.remark
            assert a_values(response) == [100]
            assert response.ext_fields["nextBeginOffset"] == "3"
            assert hold.wakeups["arrived"] >= 1

    run(main())
