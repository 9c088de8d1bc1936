"""Client registration and consumer offsets: HEART_BEAT (34), UNREGISTER_CLIENT (35),
GET_CONSUMER_LIST_BY_GROUP (38), QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15),
LOCK_BATCH_MQ (41), UNLOCK_BATCH_MQ (42), GET_CONSUMER_CONNECTION_LIST (203),
GET_PRODUCER_CONNECTION_LIST (204).

HEART_BEAT is handled without awaiting anything: the consumer is registered before the handler
returns, so a GET_CONSUMER_LIST_BY_GROUP that follows on the same connection (ali-ons sends them
back to back) always sees it. For each consumer group the heartbeat also finds or auto-creates
the subscription group and creates ``%RETRY%<group>`` (retryQueueNums queues, RW); persisting
and re-registering with the name servers happen in the background. The answer carries
``IS_SUPPORT_HEART_BEAT_V2=false`` so Java clients keep sending full heartbeats.

QUERY_CONSUMER_OFFSET (``ConsumerManageProcessor.queryConsumerOffset``): a committed offset ≥ 0
→ SUCCESS; otherwise, unless ``setZeroIfNotFound=false``, a queue whose min offset is ≤ 0 and
whose first message is still in memory answers offset 0 (a new group reads the queue from the
start); else 22 QUERY_NOT_FOUND. A stored negative offset (ali-ons commits -1 for 0) is "none".
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Iterable
from typing import Any

from rocketq.broker.client_manager import ClientChannelInfo
from rocketq.broker.context import BrokerContext
from rocketq.broker.rebalance_lock import encode_lock_response, parse_lock_body
from rocketq.errors import (
    InvalidParameter,
    ResponseCode,
    RocketqError,
    SubscriptionGroupNotExist,
    SubscriptionParseFailed,
    TopicNotExist,
)
from rocketq.protocol.headers import get_int, get_long, get_str, opt_bool
from rocketq.protocol.heartbeat import parse_heartbeat
from rocketq.protocol.topic import PERM_READ, PERM_WRITE, group_name_too_long, retry_topic
from rocketq.remoting.codes import LanguageCode
from rocketq.remoting.command import RemotingCommand, create_response
from rocketq.remoting.connection import Connection
from rocketq.store.message_store import MessageStore

log = logging.getLogger(__name__)

#: RocketMQ ``accessMessageInMemoryMaxRatio``: data within this share of RAM counts as in memory.
ACCESS_MESSAGE_IN_MEMORY_MAX_RATIO_PERCENT = 40


@functools.cache
def _physical_memory_bytes() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def check_in_disk_by_consume_offset(store: MessageStore, topic: str, queue_id: int, offset: int) -> bool:
    """``checkInDiskByConsumeOffset``: is the message at ``offset`` too far behind the CommitLog
    end to be in the page cache? False when the queue has no such message."""
    cq = store.find_consume_queue(topic, queue_id)
    if cq is None:
        return False
    unit = cq.get_unit(offset)
    if unit is None:
        return False
    limit = _physical_memory_bytes() * ACCESS_MESSAGE_IN_MEMORY_MAX_RATIO_PERCENT // 100
    return store.get_max_phy_offset() - unit.offset > limit


def _language_name(language: int) -> str:
    try:
        return LanguageCode(language).name
    except ValueError:
        return "OTHER"


def _connection_set(clients: Iterable[ClientChannelInfo]) -> list[dict[str, Any]]:
    """The ``connectionSet`` of a GET_CONSUMER/PRODUCER_CONNECTION_LIST answer."""
    return [
        {
            "clientAddr": c.channel.remote_address,
            "clientId": c.client_id,
            "language": c.language,
            "version": c.version,
        }
        for c in clients
    ]


class ConsumerManageProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    # -- HEART_BEAT / UNREGISTER_CLIENT -----------------------------------------------------
    async def heartbeat(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        ctx = self.ctx
        try:
            data = parse_heartbeat(request.body)
        except SubscriptionParseFailed:
            raise
        except ValueError as exc:
            raise RocketqError(f"heartbeat body does not parse: {exc}") from None
        language = _language_name(request.language)
        problems = [group_name_too_long(c.group_name, "consumer") for c in data.consumers]
        problems += [group_name_too_long(g, "producer") for g in data.producer_groups]
        problem = next((p for p in problems if p is not None), None)
        if problem is not None:
            raise InvalidParameter(f"heartbeat refused: {problem}")
        for consumer in data.consumers:
            group = consumer.group_name
            group_cfg = ctx.groups.find(group)
            if group_cfg is not None and group_cfg.retry_queue_nums > 0:
                ctx.topics.create_in_send_back(
                    retry_topic(group), group_cfg.retry_queue_nums, PERM_WRITE | PERM_READ
                )
            ctx.consumers.register_consumer(
                group,
                ClientChannelInfo(conn, data.client_id, language, request.version),
                consumer.consume_type,
                consumer.message_model,
                consumer.consume_from_where,
                None if data.without_sub else consumer.subscriptions,
            )
        for group in data.producer_groups:
            ctx.producers.register_producer(
                group, ClientChannelInfo(conn, data.client_id, language, request.version)
            )
        return create_response(
            request,
            ResponseCode.SUCCESS,
            ext_fields={"IS_SUPPORT_HEART_BEAT_V2": "false", "IS_SUB_CHANGE": "false"},
        )

    async def unregister_client(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        ext = request.ext_fields
        producer_group = ext.get("producerGroup")
        consumer_group = ext.get("consumerGroup")
        if producer_group:
            self.ctx.producers.unregister_producer(producer_group, conn)
        if consumer_group:
            self.ctx.consumers.unregister_consumer(consumer_group, conn)
        return create_response(request, ResponseCode.SUCCESS)

    # -- GET_CONSUMER_LIST_BY_GROUP ---------------------------------------------------------
    async def get_consumer_list_by_group(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        group = get_str(request.ext_fields, "consumerGroup")
        info = self.ctx.consumers.get(group)
        ids = info.client_ids() if info is not None else []
        if not ids:
            raise RocketqError(f"no consumer for this group, {group}")
        body = json.dumps({"consumerIdList": ids}, separators=(",", ":")).encode()
        return create_response(request, ResponseCode.SUCCESS, body=body)

    async def get_consumer_connection_list(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        group = get_str(request.ext_fields, "consumerGroup")
        info = self.ctx.consumers.get(group)
        if info is None or not info.channels:
            return create_response(request, 206, f"the consumer group[{group}] not online")
        body = {
            "connectionSet": _connection_set(info.channels.values()),
            "consumeFromWhere": info.consume_from_where,
            "consumeType": info.consume_type,
            "messageModel": info.message_model,
            "subscriptionTable": {t: s.to_json() for t, s in info.subscriptions.items()},
        }
        return create_response(
            request, ResponseCode.SUCCESS, body=json.dumps(body, separators=(",", ":")).encode()
        )

    async def get_producer_connection_list(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        group = get_str(request.ext_fields, "producerGroup")
        channels = self.ctx.producers.group_channels(group)
        if not channels:
            return create_response(
                request, ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist"
            )
        body = {"connectionSet": _connection_set(channels)}
        return create_response(
            request, ResponseCode.SUCCESS, body=json.dumps(body, separators=(",", ":")).encode()
        )

    # -- LOCK_BATCH_MQ / UNLOCK_BATCH_MQ ----------------------------------------------------
    async def lock_batch_mq(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        try:
            body = parse_lock_body(request.body)
        except ValueError as exc:
            raise RocketqError(f"lock request body does not parse: {exc}") from None
        locked = self.ctx.locks.try_lock_batch(body.consumer_group, body.mq_set, body.client_id)
        return create_response(request, ResponseCode.SUCCESS, body=encode_lock_response(locked))

    async def unlock_batch_mq(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        try:
            body = parse_lock_body(request.body)
        except ValueError as exc:
            raise RocketqError(f"unlock request body does not parse: {exc}") from None
        self.ctx.locks.unlock_batch(body.consumer_group, body.mq_set, body.client_id)
        return create_response(request, ResponseCode.SUCCESS)

    # -- offsets ----------------------------------------------------------------------------
    async def query_consumer_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        ctx = self.ctx
        ext = request.ext_fields
        group = get_str(ext, "consumerGroup")
        topic = get_str(ext, "topic")
        queue_id = get_int(ext, "queueId")
        offset = ctx.offsets.query_offset(group, topic, queue_id)
        if offset >= 0:
            return create_response(request, ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})
        if opt_bool(ext, "setZeroIfNotFound") is not False:
            min_offset = ctx.store.get_min_offset(topic, queue_id)
            if min_offset <= 0 and not await ctx.blocking(
                check_in_disk_by_consume_offset, ctx.store, topic, queue_id, 0
            ):
                return create_response(request, ResponseCode.SUCCESS, ext_fields={"offset": "0"})
        return create_response(
            request,
            ResponseCode.QUERY_NOT_FOUND,
            "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first",
        )

    def update_consumer_offset_now(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand | None:
        """UPDATE_CONSUMER_OFFSET answered inside the transport's ``data_received`` (no task per
        commit), or None for :meth:`update_consumer_offset` to take it: while another request of
        the connection is still being handled (its commits, e.g. an offset riding on a pull,
        keep their order) or while ``consumerOffset.json`` cannot be written (the commit then
        waits for a write)."""
        persister = self.ctx.offsets_persister
        if conn.running_requests or (persister is not None and persister.failing):
            return None
        self._commit_offset(conn, request)
        return create_response(request, ResponseCode.SUCCESS)

    async def update_consumer_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        self._commit_offset(conn, request)
        ctx = self.ctx
        persister = ctx.offsets_persister
        if persister is not None and persister.failing:
            # consumerOffset.json could not be written last time (a full disk): write now and
            # answer with the error (DiskFull, SERVICE_NOT_AVAILABLE) instead of a success a
            # restart would forget. The offset stays in memory and is written once space is back.
            await ctx.offsets_durable()
        return create_response(request, ResponseCode.SUCCESS)

    def _commit_offset(self, conn: Connection, request: RemotingCommand) -> None:
        """The checks and the commit of an UPDATE_CONSUMER_OFFSET request."""
        ctx = self.ctx
        ext = request.ext_fields
        group = get_str(ext, "consumerGroup")
        topic = get_str(ext, "topic")
        queue_id = get_int(ext, "queueId")
        offset = get_long(ext, "commitOffset")
        problem = group_name_too_long(group, "consumer")
        if problem is not None:
            raise InvalidParameter(problem)
        if ctx.groups.find(group) is None:
            raise SubscriptionGroupNotExist(f"subscription group not exist, {group}")
        tc = ctx.topics.select(topic)
        if tc is None:
            raise TopicNotExist(f"topic[{topic}] not exist, apply first please!")
        queues = max(tc.read_queue_nums, tc.write_queue_nums)
        if not 0 <= queue_id < queues:
            raise InvalidParameter(
                f"queueId={queue_id} is out of range: topic {topic} has queues 0..{queues - 1}"
            )
        if offset < 0:
            raise InvalidParameter(f"commitOffset={offset} is negative (topic {topic}, queueId {queue_id})")
        ctx.offsets.commit_offset(conn.remote_address, group, topic, queue_id, offset)
        if ctx.trace is not None:
            ctx.trace.committed(conn.remote_address, group, topic, queue_id, offset)


__all__ = ["ConsumerManageProcessor", "check_in_disk_by_consume_offset"]
