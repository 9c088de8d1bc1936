"""Broker → client requests on an admin's behalf: INVOKE_BROKER_TO_RESET_OFFSET (222) and
INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223), RocketMQ's ``Broker2Client``.

Resetting a consumer group's offsets to a point in time (222):

mqadmin's ``resetOffsetByTime`` sends 222 to the master of every broker of the topic::

    request header   topic, group, timestamp (ms; -1 = the end of each queue), isForce
    response body    ResetOffsetBody {"offsetTable":{{"brokerName","queueId","topic"}:offset,...}}
                     (fastjson, queue objects as map keys)

Per queue of the topic (``write_queue_nums`` of them), as RocketMQ's ``Broker2Client.resetOffset``:
the *time offset* is the first queue offset stored at or after ``timestamp`` (the queue's max
offset when every message is older); the new offset is the time offset when ``isForce`` or when
it lies before the group's committed offset, else the committed offset stays (without force,
a reset only ever rewinds). A queue the group has no committed offset for takes the time offset.

Then the broker tells every online consumer of the group with RESET_CONSUMER_CLIENT_OFFSET (220,
oneway; same header fields, same body), and running clients move their owned queues to the new
offsets at once (``ClientRemotingProcessor.resetOffset``).

Beyond RocketMQ, which answers CONSUMER_NOT_ONLINE (206) when the group has no online member
and leaves the stored offsets alone, this broker also commits the new offsets to its own offset
table and persists it before answering: a group that is offline is reset too, and a member that
joins later starts from the new offsets. (Not for a broadcasting group whose members are online:
their offsets live in their own files, so the broker only relays the reset.)

Asking the online consumers where they are (223, mqadmin ``getConsumerStatus``)::

    request header   topic, group, clientAddr (a client id; empty = every member)
    to each member   GET_CONSUMER_STATUS_FROM_CLIENT (221), header topic, group; answer body
                     GetConsumerStatusBody {"messageQueueTable":{{queue}:offset,...}}
    response body    GetConsumerStatusBody {"consumerTable":{"<clientId>":{{queue}:offset,...}}}

Members are asked one after another, each within CONSUMER_STATUS_TIMEOUT_S; one that does not
answer is left out (and logged). No member online (or none with that client id) answers
SYSTEM_ERROR naming the group.
"""

from __future__ import annotations

import logging

from rocketq.broker.context import BrokerContext
from rocketq.errors import (
    ConnectionClosed,
    RemotingError,
    ResponseCode,
    SubscriptionGroupNotExist,
    TopicNotExist,
)
from rocketq.protocol.fastjson import OBJECT_KEYS
from rocketq.protocol.headers import get_bool, get_long, get_str
from rocketq.protocol.queue import MessageQueue, message_queue_table
from rocketq.remoting.codes import RequestCode
from rocketq.remoting.command import RemotingCommand, create_request, create_response
from rocketq.remoting.connection import Connection

log = logging.getLogger(__name__)

#: The ``timestamp`` that means "the end of every queue".
TIMESTAMP_END = -1
#: How long the broker waits for each member's GET_CONSUMER_STATUS_FROM_CLIENT answer.
CONSUMER_STATUS_TIMEOUT_S = 5.0


def choose_offset(committed: int, time_offset: int, *, force: bool) -> int:
    """The offset a queue is reset to (``committed`` < 0: the group has none)."""
    if force or committed < 0 or time_offset < committed:
        return time_offset
    return committed


def encode_reset_body(table: dict[MessageQueue, int]) -> bytes:
    return OBJECT_KEYS.dumps(
        {"offsetTable": dict(sorted(table.items(), key=lambda kv: kv[0].queue_id))}
    ).encode()


class ResetOffsetProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    async def reset_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        ctx = self.ctx
        ext = request.ext_fields
        topic = get_str(ext, "topic")
        group = get_str(ext, "group")
        timestamp = get_long(ext, "timestamp")
        force = get_bool(ext, "isForce", True)
        config = ctx.topics.select(topic)
        if config is None:
            raise TopicNotExist(
                f"[reset-offset] topic {topic!r} does not exist on broker {ctx.config.broker_name}"
            )
        known = group in ctx.groups.table or ctx.offsets.topics_of_group(group) or ctx.consumers.get(group)
        if not known:  # looked up without auto-creating: a typo must not create a group
            raise SubscriptionGroupNotExist(f"[reset-offset] subscription group {group!r} does not exist")
        online = ctx.consumers.get(group)
        # a broadcasting group's offsets live with its members; the broker only relays them
        store_here = online is None or online.message_model != "BROADCASTING"
        table: dict[MessageQueue, int] = {}
        for queue_id in range(config.write_queue_nums):
            if timestamp == TIMESTAMP_END:
                time_offset = ctx.store.get_max_offset(topic, queue_id)
            else:
                time_offset = await ctx.blocking(ctx.store.get_offset_by_time, topic, queue_id, timestamp)
            committed = ctx.offsets.query_offset(group, topic, queue_id)
            new = choose_offset(committed, time_offset, force=force)
            table[MessageQueue(topic, ctx.config.broker_name, queue_id)] = new
            if store_here and new != committed:
                ctx.offsets.commit_offset(conn.remote_address, group, topic, queue_id, new)
        await ctx.offsets_durable()
        body = encode_reset_body(table)
        notified = self._notify_clients(topic, group, timestamp, force, body)
        log.info(
            "offsets of group %s on topic %s reset to time %d (force=%s) over %d queue(s); %d client(s) told",
            group,
            topic,
            timestamp,
            force,
            len(table),
            notified,
        )
        return create_response(request, ResponseCode.SUCCESS, body=body)

    async def get_consumer_status(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        ext = request.ext_fields
        topic = get_str(ext, "topic")
        group = get_str(ext, "group")
        origin = ext.get("clientAddr") or ""
        info = self.ctx.consumers.get(group)
        members = [] if info is None else [c for c in info.channels.values() if not c.channel.closed]
        if origin:
            members = [c for c in members if c.client_id == origin]
        if not members:
            who = f"client {origin!r} of " if origin else ""
            return create_response(
                request, ResponseCode.SYSTEM_ERROR, f"no consumer online: {who}consumer group {group!r}"
            )
        table: dict[str, dict[MessageQueue, int]] = {}
        for member in members:
            channel = member.channel
            if not isinstance(channel, Connection):
                continue
            ask = create_request(
                RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT, {"topic": topic, "group": group}
            )
            try:
                answer = await channel.invoke(ask, CONSUMER_STATUS_TIMEOUT_S)
                if answer.code != ResponseCode.SUCCESS:
                    raise ValueError(f"answered code {answer.code}: {answer.remark}")
                doc = OBJECT_KEYS.loads(answer.body) if answer.body else {}
                queues = message_queue_table(doc.get("messageQueueTable") if isinstance(doc, dict) else {})
            except (RemotingError, ValueError) as exc:
                log.warning("consumer %s of group %s gave no status: %s", member.client_id, group, exc)
                continue
            table[member.client_id] = {mq: int(off) for mq, off in queues.items() if isinstance(off, int)}
        body = OBJECT_KEYS.dumps({"consumerTable": table, "messageQueueTable": {}}).encode()
        return create_response(request, ResponseCode.SUCCESS, body=body)

    def _notify_clients(self, topic: str, group: str, timestamp: int, force: bool, body: bytes) -> int:
        info = self.ctx.consumers.get(group)
        if info is None:
            return 0
        fields = {"topic": topic, "group": group, "timestamp": timestamp, "isForce": force}
        told = 0
        for channel in info.all_channels():
            if channel.closed:
                continue
            request = create_request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, fields, body, oneway=True)
            try:
                channel.send_oneway(request)
                told += 1
            except ConnectionClosed:
                log.info("consumer %s closed before hearing of the offset reset", channel.remote_address)
        return told


__all__ = [
    "CONSUMER_STATUS_TIMEOUT_S",
    "TIMESTAMP_END",
    "ResetOffsetProcessor",
    "choose_offset",
    "encode_reset_body",
]
