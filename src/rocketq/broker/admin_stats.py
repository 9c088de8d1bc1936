"""Consumption and topic statistics for admin tools: GET_TOPIC_STATS_INFO (202),
GET_CONSUME_STATS (208), QUERY_TOPIC_CONSUME_BY_WHO (300).

``ConsumeStats`` and ``TopicStatsTable`` are keyed by MessageQueue objects, written in fastjson's
object-key form (:data:`rocketq.protocol.fastjson.OBJECT_KEYS`) as Java admin tools expect::

    {"consumeTps":0.0,"offsetTable":{{"brokerName":"b","queueId":0,"topic":"t"}:
        {"brokerOffset":5,"consumerOffset":3,"lastTimestamp":1700000000000,"pullOffset":3}}}

GET_CONSUME_STATS (RocketMQ ``AdminBrokerProcessor.getConsumeStats``) covers the header's topic,
or every topic the group has committed offsets for. A topic the broker does not know is
skipped, as is one an online group does not subscribe to. Per read queue: brokerOffset = max
offset, consumerOffset = committed offset (none → 0), pullOffset = consumerOffset (the broker
keeps no separate pull offsets), lastTimestamp = store time of the message before
consumerOffset (0 when there is none). The offsets and timestamps are read in a worker thread.
"""

from __future__ import annotations

from typing import Any

from rocketq.broker.context import BrokerContext
from rocketq.errors import ResponseCode
from rocketq.protocol.fastjson import OBJECT_KEYS
from rocketq.protocol.headers import get_str, opt_str
from rocketq.protocol.queue import MessageQueue
from rocketq.remoting.command import RemotingCommand, create_response
from rocketq.remoting.connection import Connection
from rocketq.store.message_store import MessageStore


def _store_time_before(store: MessageStore, topic: str, queue_id: int, offset: int) -> int:
    """The store time of the message just before queue offset ``offset``; 0 when there is none."""
    if offset <= 0:
        return 0
    return max(0, store.get_message_store_timestamp(topic, queue_id, offset - 1))


def _topic_stats(store: MessageStore, broker_name: str, topic: str, queues: int) -> dict[Any, Any]:
    table: dict[Any, Any] = {}
    for queue_id in range(queues):
        max_offset = max(0, store.get_max_offset(topic, queue_id))
        min_offset = max(0, store.get_min_offset(topic, queue_id))
        table[MessageQueue(topic, broker_name, queue_id)] = {
            "lastUpdateTimestamp": _store_time_before(store, topic, queue_id, max_offset),
            "maxOffset": max_offset,
            "minOffset": min_offset,
        }
    return table


def _consume_stats(
    store: MessageStore, broker_name: str, queues: dict[str, dict[int, int]], read_nums: dict[str, int]
) -> dict[Any, Any]:
    table: dict[Any, Any] = {}
    for topic, committed in queues.items():
        for queue_id in range(read_nums[topic]):
            broker_offset = max(0, store.get_max_offset(topic, queue_id))
            consumer_offset = max(0, committed.get(queue_id, 0))
            table[MessageQueue(topic, broker_name, queue_id)] = {
                "brokerOffset": broker_offset,
                "consumerOffset": consumer_offset,
                "lastTimestamp": _store_time_before(store, topic, queue_id, consumer_offset),
                "pullOffset": consumer_offset,
            }
    return table


class AdminStatsProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    async def get_topic_stats_info(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        ctx = self.ctx
        topic = get_str(request.ext_fields, "topic")
        tc = ctx.topics.select(topic)
        if tc is None:
            return create_response(request, ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        table = await ctx.blocking(
            _topic_stats, ctx.store, ctx.config.broker_name, topic, tc.write_queue_nums
        )
        body = OBJECT_KEYS.dumps({"offsetTable": table, "topicPutTps": 0.0})
        return create_response(request, ResponseCode.SUCCESS, body=body.encode())

    async def get_consume_stats(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        ctx = self.ctx
        group = get_str(request.ext_fields, "consumerGroup")
        topic = opt_str(request.ext_fields, "topic")
        topics = [topic] if topic else sorted(ctx.offsets.topics_of_group(group))
        online = ctx.consumers.get(group)
        queues: dict[str, dict[int, int]] = {}
        read_nums: dict[str, int] = {}
        for name in topics:
            tc = ctx.topics.select(name)
            if tc is None:
                continue
            if online is not None and online.subscriptions and name not in online.subscriptions:
                continue
            queues[name] = ctx.offsets.query_offsets(group, name)
            read_nums[name] = tc.read_queue_nums
        table = await ctx.blocking(_consume_stats, ctx.store, ctx.config.broker_name, queues, read_nums)
        body = OBJECT_KEYS.dumps({"consumeTps": 0.0, "offsetTable": table})
        return create_response(request, ResponseCode.SUCCESS, body=body.encode())

    async def query_topic_consume_by_who(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        ctx = self.ctx
        topic = get_str(request.ext_fields, "topic")
        groups = set(ctx.consumers.groups_of_topic(topic)) | ctx.offsets.groups_of_topic(topic)
        body = OBJECT_KEYS.dumps({"groupList": sorted(groups)})
        return create_response(request, ResponseCode.SUCCESS, body=body.encode())


__all__ = ["AdminStatsProcessor"]
