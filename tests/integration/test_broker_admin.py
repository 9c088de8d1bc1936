"""Admin requests against a real Broker on 127.0.0.1 through a real RemotingClient: consume
stats, topic stats, who consumes a topic, subscription-group admin, topic deletion."""

from __future__ import annotations

import json
import pathlib
import time

from test_broker_server import dispatched, heartbeat_body, run, running_broker

from _support.requests import send_request
from rocketq.config import StoreConfig
from rocketq.errors import ResponseCode
from rocketq.protocol import fastjson
from rocketq.protocol.fastjson import OBJECT_KEYS
from rocketq.protocol.queue import MessageQueue, message_queue_table
from rocketq.remoting import RemotingClient, RemotingCommand, RequestCode, create_request

TOPIC = "AdminTopic"
GROUP = "AdminCG"


async def commit(client: RemotingClient, addr: str, queue_id: int, offset: int) -> None:
    update = create_request(
        RequestCode.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": GROUP, "topic": TOPIC, "queueId": queue_id, "commitOffset": offset},
    )
    r = await client.invoke(addr, update)
    assert r.code == 0, r.remark


def config_file(store_config: StoreConfig, name: str) -> dict[str, object]:
    path = pathlib.Path(store_config.store_path_root_dir) / "config" / name
    loaded = fastjson.loads(path.read_text())
    assert isinstance(loaded, dict)
    return loaded


def test_consume_and_topic_stats(store_config: StoreConfig) -> None:
    async def main() -> None:
        async with running_broker(store_config) as (broker, client, addr):
            began = time.time_ns() // 1_000_000
            for n in range(5):  # queue 0 gets 3 messages, queue 1 gets 2
                r = await client.invoke(
                    addr, send_request(TOPIC, b"m%d" % n, queue_id=n % 2, default_topic_queue_nums=2)
                )
                assert r.code == 0, r.remark
            await dispatched(broker)
            await commit(client, addr, 0, 1)
            await commit(client, addr, 1, 2)

            stats = await client.invoke(
                addr,
                create_request(RequestCode.GET_CONSUME_STATS, {"consumerGroup": GROUP, "topic": TOPIC}),
            )
            assert stats.code == 0, stats.remark
            assert stats.body is not None
            assert b'{"brokerName":"broker-a","queueId":0,"topic":"AdminTopic"}:{' in stats.body
            parsed = OBJECT_KEYS.loads(stats.body)
            assert parsed["consumeTps"] == 0.0
            table = message_queue_table(parsed["offsetTable"])
            mq0, mq1 = MessageQueue(TOPIC, "broker-a", 0), MessageQueue(TOPIC, "broker-a", 1)
            assert set(table) == {mq0, mq1}
            assert (table[mq0]["brokerOffset"], table[mq0]["consumerOffset"]) == (3, 1)
            assert (table[mq1]["brokerOffset"], table[mq1]["consumerOffset"]) == (2, 2)
            assert table[mq0]["pullOffset"] == 1
            for mq in (mq0, mq1):
                assert began - 1000 <= table[mq]["lastTimestamp"] <= time.time_ns() // 1_000_000 + 1000
                assert sorted(table[mq]) == ["brokerOffset", "consumerOffset", "lastTimestamp", "pullOffset"]

            # without a topic: every topic the group has offsets for
            all_topics = await client.invoke(
                addr, create_request(RequestCode.GET_CONSUME_STATS, {"consumerGroup": GROUP})
            )
            assert all_topics.body is not None
            assert set(message_queue_table(OBJECT_KEYS.loads(all_topics.body)["offsetTable"])) == {
                mq0,
                mq1,
            }
            nobody = await client.invoke(
                addr, create_request(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "NoSuchGroup"})
            )
            assert nobody.code == 0 and nobody.body is not None
            assert OBJECT_KEYS.loads(nobody.body)["offsetTable"] == {}

            topic_stats = await client.invoke(
                addr, create_request(RequestCode.GET_TOPIC_STATS_INFO, {"topic": TOPIC})
            )
            assert topic_stats.code == 0, topic_stats.remark
            assert topic_stats.body is not None
            assert b'{"brokerName":"broker-a","queueId":1,"topic":"AdminTopic"}:{' in topic_stats.body
            offsets = message_queue_table(OBJECT_KEYS.loads(topic_stats.body)["offsetTable"])
            assert {mq: (v["minOffset"], v["maxOffset"]) for mq, v in offsets.items()} == {
                mq0: (0, 3),
                mq1: (0, 2),
            }
            assert all(v["lastUpdateTimestamp"] >= began - 1000 for v in offsets.values())

            unknown = await client.invoke(
                addr, create_request(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "NoSuchTopic"})
            )
            assert unknown.code == ResponseCode.TOPIC_NOT_EXIST
            assert "NoSuchTopic" in (unknown.remark or "")

            who = await client.invoke(
                addr, create_request(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": TOPIC})
            )
            assert who.code == 0 and who.body is not None
            assert json.loads(who.body) == {"groupList": [GROUP]}

            # an online group that does not subscribe to the topic gets no entries for it
            hb = create_request(RequestCode.HEART_BEAT, body=heartbeat_body("c1@1", GROUP, {"Other": "*"}))
            assert (await client.invoke(addr, hb)).code == 0
            skipped = await client.invoke(
                addr,
                create_request(RequestCode.GET_CONSUME_STATS, {"consumerGroup": GROUP, "topic": TOPIC}),
            )
            assert skipped.body is not None
            assert OBJECT_KEYS.loads(skipped.body)["offsetTable"] == {}

    run(main())


def test_subscription_group_admin_round_trip(store_config: StoreConfig) -> None:
    def get_all() -> RemotingCommand:
        return create_request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)

    async def main() -> None:
        async with running_broker(store_config) as (_broker, client, addr):
            body = {"groupName": "AdminGroup", "retryMaxTimes": 3, "consumeMessageOrderly": True}
            create = create_request(
                RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json.dumps(body).encode()
            )
            r = await client.invoke(addr, create)
            assert r.code == 0, r.remark
            # written before the answer
            table = config_file(store_config, "subscriptionGroup.json")["subscriptionGroupTable"]
            assert isinstance(table, dict)
            assert table["AdminGroup"]["retryMaxTimes"] == 3
            assert table["AdminGroup"]["consumeMessageOrderly"] is True
            assert table["AdminGroup"]["retryQueueNums"] == 1  # default for a missing field

            listed = await client.invoke(addr, get_all())
            assert listed.body is not None
            assert (
                fastjson.loads(listed.body.decode())["subscriptionGroupTable"]["AdminGroup"]["retryMaxTimes"]
                == 3
            )

            bad = create_request(
                RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=b'{"groupName":"bad group!"}'
            )
            assert (await client.invoke(addr, bad)).code == ResponseCode.INVALID_PARAMETER

            delete = create_request(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "AdminGroup"})
            assert (await client.invoke(addr, delete)).code == 0
            table = config_file(store_config, "subscriptionGroup.json")["subscriptionGroupTable"]
            assert isinstance(table, dict) and "AdminGroup" not in table
            listed = await client.invoke(addr, get_all())
            assert listed.body is not None
            assert "AdminGroup" not in fastjson.loads(listed.body.decode())["subscriptionGroupTable"]

        async with running_broker(store_config) as (broker, _client, _addr):
            assert broker.ctx is not None and "AdminGroup" not in broker.ctx.groups

    run(main())


def test_delete_topic_in_broker(store_config: StoreConfig) -> None:
    def all_topics(response: RemotingCommand) -> dict[str, object]:
        assert response.body is not None
        table = json.loads(response.body)["topicConfigTable"]
        assert isinstance(table, dict)
        return table

    async def main() -> None:
        async with running_broker(store_config) as (broker, client, addr):
            assert (
                await client.invoke(addr, send_request(TOPIC, b"x", default_topic_queue_nums=2))
            ).code == 0
            await dispatched(broker)
            await commit(client, addr, 0, 1)
            get_all = create_request(RequestCode.GET_ALL_TOPIC_CONFIG)
            assert TOPIC in all_topics(await client.invoke(addr, get_all))

            delete = create_request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": TOPIC})
            r = await client.invoke(addr, delete)
            assert r.code == 0, r.remark
            topics = config_file(store_config, "topics.json")["topicConfigTable"]
            assert isinstance(topics, dict) and TOPIC not in topics
            offsets = config_file(store_config, "consumerOffset.json")["offsetTable"]
            assert isinstance(offsets, dict) and f"{TOPIC}@{GROUP}" not in offsets
            assert TOPIC not in all_topics(
                await client.invoke(addr, create_request(RequestCode.GET_ALL_TOPIC_CONFIG))
            )
            stats = await client.invoke(
                addr, create_request(RequestCode.GET_TOPIC_STATS_INFO, {"topic": TOPIC})
            )
            assert stats.code == ResponseCode.TOPIC_NOT_EXIST

            system = create_request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "TBW102"})
            refused = await client.invoke(addr, system)
            assert refused.code == ResponseCode.SYSTEM_ERROR and "TBW102" in (refused.remark or "")

    run(main())
