"""Admin and offset-lookup requests: UPDATE_AND_CREATE_TOPIC (17), GET_ALL_TOPIC_CONFIG (21),
GET_BROKER_RUNTIME_INFO (28), SEARCH_OFFSET_BY_TIMESTAMP (29), GET_MAX_OFFSET (30),
GET_MIN_OFFSET (31), GET_EARLIEST_MSG_STORETIME (32), GET_ALL_CONSUMER_OFFSET (43),
GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201), DELETE_EXPIRED_COMMITLOG (329).

Offsets of an unknown topic or queue are answered, not refused (max 0, min 0, earliest store
time -1), as RocketMQ does. Lookups that read the CommitLog (by time, earliest time, runtime
info) run in a worker thread.

GET_BROKER_RUNTIME_INFO answers a ``KVTable`` ``{"table":{...}}`` of strings with the keys
``mqadmin clusterList``/``brokerStatus`` read (``brokerVersionDesc``, ``putTps``,
``getTransferredTps``, ``msgPutTotalTodayNow``, ``commitLogDiskRatio``, ...) plus the store's
own figures.
"""

from __future__ import annotations

import json
import shutil
import time

from rocketq.broker.context import BrokerContext
from rocketq.errors import InvalidParameter, ResponseCode, RocketqError, TopicNameInvalid
from rocketq.message import validate_topic
from rocketq.protocol.headers import get_bool, get_int, get_long, get_str
from rocketq.protocol.topic import SINGLE_TAG, TOPIC_FILTER_TYPES, TopicConfig, topic_max_length
from rocketq.remoting.codes import CURRENT_VERSION, Version
from rocketq.remoting.command import RemotingCommand, create_response
from rocketq.remoting.connection import Connection
from rocketq.store.message_store import MessageStore


def parse_attributes(text: str | None) -> tuple[dict[str, str], set[str]]:
    """``+k1=v1,+k2=v2,-k3`` (admin syntax) → (attributes to set, attributes to delete)."""
    add: dict[str, str] = {}
    delete: set[str] = set()
    if not text:
        return add, delete
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        if item[0] == "+":
            key, sep, value = item[1:].partition("=")
            if not key or not sep:
                raise InvalidParameter(f"attribute {item!r} is not +key=value")
            add[key] = value
        elif item[0] == "-":
            if not item[1:]:
                raise InvalidParameter(f"attribute {item!r} names no key")
            delete.add(item[1:])
        else:
            raise InvalidParameter(f"attribute {item!r} must start with + or -")
    return add, delete


def _version_desc(version: int) -> str:
    try:
        return Version(version).name
    except ValueError:
        return str(version)


def disk_figures(store: MessageStore) -> tuple[float, int]:
    """(CommitLog disk usage ratio, store time of the oldest message or -1); reads the disk."""
    try:
        usage = shutil.disk_usage(store.commitlog.disk_dir())
        disk_ratio = usage.used / usage.total if usage.total else 0.0
    except OSError:
        disk_ratio = 0.0
    earliest = -1
    min_phy = store.get_min_phy_offset()
    if min_phy >= 0:
        first = store.look_message_by_offset(min_phy)
        if first is not None:
            earliest = first.store_timestamp
    return disk_ratio, earliest


async def runtime_info(ctx: BrokerContext) -> dict[str, str]:
    """The KVTable of GET_BROKER_RUNTIME_INFO: in-memory figures read on the event loop, disk
    figures in a worker thread."""
    store: MessageStore = ctx.store
    tps = ctx.tps
    table = {
        "brokerVersionDesc": _version_desc(CURRENT_VERSION),
        "brokerVersion": str(CURRENT_VERSION),
        "brokerActive": "true",
        "bootTimestamp": str(ctx.boot_timestamp_ms),
        "runtime": f"{(time.time_ns() // 1_000_000 - ctx.boot_timestamp_ms) // 1000} s",
        "msgPutTotalTodayNow": str(store.stats.put_count),
        "msgGetTotalTodayNow": str(store.stats.get_found),
        "msgPutTotalTodayMorning": str(tps.put_today_morning),
        "msgGetTotalTodayMorning": str(tps.get_today_morning),
        "msgPutTotalYesterdayMorning": str(tps.put_yesterday_morning),
        "msgGetTotalYesterdayMorning": str(tps.get_yesterday_morning),
        "putTps": tps.put_tps(),
        "getTransferredTps": tps.get_tps(),
        "getFoundTps": tps.get_tps(),
        "commitLogDirCapacity": store.commitlog.disk_dir(),
        "pageCacheLockTimeMills": "0",
        "sendThreadPoolQueueSize": "0",
        "sendThreadPoolQueueCapacity": "0",
        "pullThreadPoolQueueSize": "0",
        "pullThreadPoolQueueCapacity": "0",
        "remainTransientStoreBufferNumbs": "0",
        "heldPullRequests": str(ctx.hold.held_count),
        "brokerName": ctx.config.broker_name,
        "brokerAddr": ctx.broker_addr,
    }
    table.update(store.runtime_info())
    disk_ratio, earliest = await ctx.blocking(disk_figures, store)
    table["commitLogDiskRatio"] = f"{disk_ratio:.4f}"
    table["earliestMessageTimeStamp"] = str(earliest)
    return table


class AdminBrokerProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    # -- topics -----------------------------------------------------------------------------
    async def update_and_create_topic(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        ctx = self.ctx
        ext = request.ext_fields
        topic = get_str(ext, "topic")
        try:
            validate_topic(topic, topic_max_length(topic))
        except TopicNameInvalid as exc:
            raise InvalidParameter(f"the specified topic is invalid: {exc}") from None
        if ctx.topics.is_system(topic) and topic not in ctx.topics:
            raise RocketqError(f"The topic[{topic}] is conflict with system topic.")
        read = get_int(ext, "readQueueNums", 16)
        write = get_int(ext, "writeQueueNums", 16)
        for name, n in (("readQueueNums", read), ("writeQueueNums", write)):
            if not 0 <= n <= 65535:
                raise InvalidParameter(f"{name}={n} is outside [0, 65535]")
        perm = get_int(ext, "perm", 6)
        filter_type = ext.get("topicFilterType", SINGLE_TAG)
        if filter_type not in TOPIC_FILTER_TYPES:
            raise InvalidParameter(f"topicFilterType={filter_type!r} is not SINGLE_TAG or MULTI_TAG")
        old = ctx.topics.select(topic)
        attributes = dict(old.attributes) if old is not None else {}
        add, delete = parse_attributes(ext.get("attributes"))
        attributes.update(add)
        for key in delete:
            attributes.pop(key, None)
        tc = TopicConfig(
            topic,
            read,
            write,
            perm,
            topic_filter_type=filter_type,
            topic_sys_flag=get_int(ext, "topicSysFlag", 0),
            order=get_bool(ext, "order"),
            attributes=attributes,
        )
        ctx.topics.update(tc)
        await ctx.topics_durable()
        return create_response(request, ResponseCode.SUCCESS)

    async def get_all_topic_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        ctx = self.ctx
        body = ctx.topics.wrapper()
        body["mappingDataVersion"] = ctx.topics.data_version.to_json()
        body["topicQueueMappingDetailMap"] = {}
        body["topicQueueMappingInfoMap"] = {}
        return create_response(
            request,
            ResponseCode.SUCCESS,
            ext_fields={"totalTopicNum": str(len(ctx.topics))},
            body=json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode(),
        )

    async def get_all_consumer_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return create_response(request, ResponseCode.SUCCESS, body=self.ctx.offsets.encode().encode())

    async def get_all_subscription_group(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return create_response(request, ResponseCode.SUCCESS, body=self.ctx.groups.encode().encode())

    async def get_broker_runtime_info(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        table = await runtime_info(self.ctx)
        body = json.dumps({"table": table}, separators=(",", ":"), ensure_ascii=False).encode()
        return create_response(request, ResponseCode.SUCCESS, body=body)

    async def delete_expired_commitlog(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """DELETE_EXPIRED_COMMITLOG (329, mqadmin ``deleteExpiredCommitLog``): one retention run
        now, as if at a ``deleteWhen`` hour (in a worker thread); the remark says what it did."""
        store = self.ctx.store
        before = store.commitlog.min_offset
        decision = await self.ctx.blocking(store.run_retention_now)
        after = store.commitlog.min_offset
        remark = f"CommitLog min offset {before} -> {after} at {decision.usage:.0%} disk use"
        return create_response(request, ResponseCode.SUCCESS, remark)

    # -- offsets ----------------------------------------------------------------------------
    async def search_offset_by_timestamp(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        ext = request.ext_fields
        topic = get_str(ext, "topic")
        queue_id = get_int(ext, "queueId")
        timestamp = get_long(ext, "timestamp")
        offset = await self.ctx.blocking(self.ctx.store.get_offset_by_time, topic, queue_id, timestamp)
        return create_response(request, ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})

    async def get_max_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        ext = request.ext_fields
        offset = self.ctx.store.get_max_offset(get_str(ext, "topic"), get_int(ext, "queueId"))
        return create_response(request, ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})

    async def get_min_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        ext = request.ext_fields
        offset = max(0, self.ctx.store.get_min_offset(get_str(ext, "topic"), get_int(ext, "queueId")))
        return create_response(request, ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})

    async def get_earliest_msg_storetime(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        ext = request.ext_fields
        topic = get_str(ext, "topic")
        queue_id = get_int(ext, "queueId")
        timestamp = await self.ctx.blocking(self.ctx.store.get_earliest_message_time, topic, queue_id)
        return create_response(request, ResponseCode.SUCCESS, ext_fields={"timestamp": str(timestamp)})


__all__ = ["AdminBrokerProcessor", "disk_figures", "parse_attributes", "runtime_info"]
