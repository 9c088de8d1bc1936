"""Administration of a RocketMQ cluster: topics, routes, stats, consumer progress, messages.

:class:`AsyncAdmin` talks to the name servers and brokers with the remoting requests mqadmin
uses (spec §2.2/§2.3); :class:`Admin` is its blocking facade on a private event-loop thread, as
:class:`rocketq.client.Producer` is for :class:`~rocketq.client.aio.AsyncProducer`.

* Routes, cluster and topic lists come from the name servers (105, 106, 206, 216), asked in
  turn; :class:`~rocketq.errors.NameServerUnavailable` names every address that failed.
* Topic creation (17) and deletion (215) go to the master of every broker of a cluster (or to
  one broker address); deletion then removes the route from every name server (216).
* Stats (202, 208) are read from every master serving the topic (or, for a group's progress
  over all topics, every master of every cluster).
* Offsets are reset to a time (222) on every master of the topic; the brokers tell the group's
  online consumers (220).
* Messages are found by offset message id (33 to the broker the id names), by key (12 on every
  broker of the topic) and by queue offset (11, one pull).
"""

from __future__ import annotations

import base64
import datetime
import json
import time
import zlib
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from rocketq.client._facade import BlockingFacade
from rocketq.client.aio import AsyncProducer, SendResult, error_for_response
from rocketq.client.config import ClientConfig, resolve_config
from rocketq.errors import (
    BodyFormatError,
    ClientStateError,
    ConfigError,
    InvalidParameter,
    NameServerUnavailable,
    RemotingError,
    ResponseCode,
    RocketqError,
    TopicNotExist,
)
from rocketq.message import (
    Message,
    PropertyAccessors,
    create_offset_msg_id,
    decode_offset_msg_id,
    decode_properties,
    unpack_socket_addr,
)
from rocketq.protocol import fastjson
from rocketq.protocol.fastjson import OBJECT_KEYS
from rocketq.protocol.headers import PULL_FLAG_SUBSCRIPTION, PullMessageRequestHeader
from rocketq.protocol.queue import MessageQueue, message_queue_table
from rocketq.protocol.record import RecordKind, decode_record
from rocketq.protocol.route import MASTER_ID, ClusterInfo, TopicList, TopicRouteData
from rocketq.remoting import RemotingClient, RemotingCommand, RequestCode, create_request
from rocketq.wallclock import local_to_epoch_ms

T = TypeVar("T")

DEFAULT_TIMEOUT_MS = 5_000
#: The group admin pulls use (Java ``MixAll.TOOLS_CONSUMER_GROUP``).
TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"
#: The group admin sends use.
TOOLS_PRODUCER_GROUP = "TOOLS_PRODUCER"
_SYS_FLAG_COMPRESSED = 0x1
_MAX_PULL_BATCH = 32
_LONG_MAX = (1 << 63) - 1


class MessageNotFound(RocketqError):
    """No message matches the id, key or queue offset that was asked for."""

    code = ResponseCode.QUERY_NOT_FOUND


# -- results -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class BrokerEntry:
    """One broker instance of a cluster (``clusterList``)."""

    cluster: str
    broker_name: str
    broker_id: int
    addr: str


@dataclass(frozen=True, slots=True)
class QueueStatus:
    """One queue's offsets (``topicStatus``)."""

    broker_name: str
    queue_id: int
    min_offset: int
    max_offset: int
    last_update_timestamp: int


@dataclass(frozen=True, slots=True)
class QueueProgress:
    """One queue's consumption by a group (``consumerProgress``)."""

    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    last_timestamp: int

    @property
    def lag(self) -> int:
        return max(0, self.broker_offset - self.consumer_offset)


@dataclass(frozen=True, slots=True)
class ConsumerProgress:
    """A group's consumption over its queues, with totals."""

    group: str
    queues: tuple[QueueProgress, ...]
    consume_tps: float = 0.0

    @property
    def total_broker_offset(self) -> int:
        return sum(q.broker_offset for q in self.queues)

    @property
    def total_consumer_offset(self) -> int:
        return sum(q.consumer_offset for q in self.queues)

    @property
    def total_lag(self) -> int:
        return sum(q.lag for q in self.queues)


@dataclass(frozen=True, slots=True)
class MessageView(PropertyAccessors):
    """A stored message as admin tools show it; ``msg_id`` is the offset message id."""

    topic: str
    msg_id: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    body: bytes
    properties: dict[str, str] = field(default_factory=dict, hash=False)
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: str = ""
    store_timestamp: int = 0
    store_host: str = ""
    reconsume_times: int = 0

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict; the body as UTF-8 text (``body``) and exactly (``bodyBase64``)."""
        return {
            "topic": self.topic,
            "msgId": self.msg_id,
            "uniqKey": self.uniq_key,
            "queueId": self.queue_id,
            "queueOffset": self.queue_offset,
            "commitLogOffset": self.commit_log_offset,
            "tags": self.tags,
            "keys": self.keys,
            "properties": dict(self.properties),
            "flag": self.flag,
            "sysFlag": self.sys_flag,
            "bornTimestamp": self.born_timestamp,
            "bornHost": self.born_host,
            "storeTimestamp": self.store_timestamp,
            "storeHost": self.store_host,
            "reconsumeTimes": self.reconsume_times,
            "body": self.body.decode("utf-8", "replace"),
            "bodyBase64": base64.b64encode(self.body).decode("ascii"),
        }


def decode_messages(body: bytes, what: str) -> list[MessageView]:
    """The stored records of a PULL/QUERY/VIEW response body (spec §3.9), in order."""
    out: list[MessageView] = []
    pos = 0
    while pos < len(body):
        view = decode_record(body, pos, check_crc=False)
        if view.kind is RecordKind.END:
            break
        if view.kind is not RecordKind.MESSAGE or view.size <= 0:
            raise BodyFormatError(
                f"{what}: undecodable record at byte {pos}: {view.reason or view.kind.name}"
            )
        raw = view.body or b""
        if view.sys_flag & _SYS_FLAG_COMPRESSED:
            try:
                raw = zlib.decompress(raw)
            except zlib.error as exc:
                raise BodyFormatError(f"{what}: compressed body does not inflate: {exc}") from None
        out.append(
            MessageView(
                topic=view.topic,
                msg_id=create_offset_msg_id(view.store_host, view.physical_offset),
                queue_id=view.queue_id,
                queue_offset=view.queue_offset,
                commit_log_offset=view.physical_offset,
                body=raw,
                properties=decode_properties(view.properties),
                flag=view.flag,
                sys_flag=view.sys_flag,
                born_timestamp=view.born_timestamp,
                born_host=_host(view.born_host),
                store_timestamp=view.store_timestamp,
                store_host=_host(view.store_host),
                reconsume_times=view.reconsume_times,
            )
        )
        pos += view.size
    return out


def _host(raw: bytes) -> str:
    try:
        return unpack_socket_addr(raw)
    except ValueError:
        return ""


def _int(value: object, default: int = 0) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return default
    return default


# -- the asyncio admin -------------------------------------------------------------------------
class AsyncAdmin:
    """Admin operations on the running asyncio event loop.

    ``namesrv_addr`` is ``"host:port"`` or several separated by ``;``; ``timeout_ms`` bounds
    every request. Both override ``config`` (:class:`~rocketq.client.config.ClientConfig`, whose
    ``request_timeout_ms`` is the timeout; without a config the timeout is 5 s). Call
    :meth:`start` first and :meth:`shutdown` at the end (or ``async with``).
    """

    def __init__(
        self,
        namesrv_addr: str | Sequence[str] | None = None,
        *,
        config: ClientConfig | None = None,
        timeout_ms: int | None = None,
    ) -> None:
        if timeout_ms is None and config is None:
            timeout_ms = DEFAULT_TIMEOUT_MS
        if timeout_ms is not None and timeout_ms <= 0:
            raise ConfigError(f"invalid admin config: timeout_ms={timeout_ms} must be > 0")
        self.config = resolve_config(config, namesrv_addr=namesrv_addr, request_timeout_ms=timeout_ms)
        self.namesrv_addrs = self.config.namesrv_addrs()
        self.timeout_s = self.config.request_timeout_ms / 1000
        self._remoting: RemotingClient | None = None
        self._producer: AsyncProducer | None = None
        self._state = "created"

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        if self._state == "running":
            return
        if self._state != "created":
            raise ClientStateError("admin was shut down and cannot be restarted")
        self._remoting = RemotingClient()
        self._state = "running"

    async def shutdown(self) -> None:
        """Close the producer (if one was used) and every connection; idempotent."""
        running = self._state == "running"
        self._state = "shutdown"
        if not running:
            return
        if self._producer is not None:
            await self._producer.shutdown()
        if self._remoting is not None:
            await self._remoting.close()

    async def __aenter__(self) -> AsyncAdmin:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    def _client(self) -> RemotingClient:
        if self._state != "running" or self._remoting is None:
            raise ClientStateError("admin is not started")
        return self._remoting

    # -- plumbing --------------------------------------------------------------------------------
    async def _namesrv(
        self, code: int, fields: dict[str, object] | None = None
    ) -> tuple[str, RemotingCommand]:
        """Ask the name servers in turn; the first answer (any code) wins."""
        client = self._client()
        errors: list[str] = []
        for addr in self.namesrv_addrs:
            try:
                return addr, await client.invoke(addr, create_request(code, fields), self.timeout_s)
            except RemotingError as exc:
                errors.append(f"{addr}: {exc}")
        raise NameServerUnavailable(f"no name server answered (request code {code}): " + "; ".join(errors))

    async def _broker(
        self, addr: str, code: int, fields: dict[str, object] | None = None, *, ok: Iterable[int] = (0,)
    ) -> RemotingCommand:
        response = await self._client().invoke(addr, create_request(code, fields), self.timeout_s)
        if response.code not in set(ok):
            raise error_for_response(response, addr)
        return response

    async def _masters(self, cluster: str | None) -> dict[str, str]:
        """Broker name → master address of every broker of ``cluster`` (all clusters if None)."""
        info = await self.cluster_info()
        if cluster is None:
            names: Iterable[str] = info.broker_addr_table
        elif cluster in info.cluster_addr_table:
            names = info.cluster_addr_table[cluster]
        else:
            known = ", ".join(sorted(info.cluster_addr_table)) or "none"
            raise ConfigError(f"cluster {cluster!r} is unknown to the name server (clusters: {known})")
        masters: dict[str, str] = {}
        for name in sorted(names):
            bd = info.broker_addr_table.get(name)
            addr = bd.broker_addrs.get(MASTER_ID) if bd is not None else None
            if addr:
                masters[name] = addr
        return masters

    async def _topic_masters(self, topic: str) -> dict[str, str]:
        route = await self.topic_route(topic)
        masters = {
            bd.broker_name: bd.broker_addrs[MASTER_ID]
            for bd in route.broker_datas
            if bd.broker_addrs.get(MASTER_ID)
        }
        if not masters:
            raise TopicNotExist(f"topic {topic!r} has no master broker in its route")
        return dict(sorted(masters.items()))

    async def _broker_addr(self, topic: str, broker_name: str) -> str:
        masters = await self._topic_masters(topic)
        addr = masters.get(broker_name)
        if addr is None:
            raise TopicNotExist(
                f"topic {topic!r} is not served by broker {broker_name!r} (brokers: {', '.join(masters)})"
            )
        return addr

    # -- name server views -----------------------------------------------------------------------
    async def topic_route(self, topic: str) -> TopicRouteData:
        """The topic's route; TopicNotExist when the name server does not know it."""
        addr, response = await self._namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            raise TopicNotExist(f"topic {topic!r} has no route on name server {addr}")
        if response.code != ResponseCode.SUCCESS:
            raise error_for_response(response, f"name server {addr}")
        return TopicRouteData.decode(response.body)

    async def topic_list(self) -> list[str]:
        """Every topic the name server knows, sorted."""
        addr, response = await self._namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        if response.code != ResponseCode.SUCCESS:
            raise error_for_response(response, f"name server {addr}")
        return sorted(TopicList.decode(response.body).topic_list)

    async def cluster_info(self) -> ClusterInfo:
        addr, response = await self._namesrv(RequestCode.GET_BROKER_CLUSTER_INFO)
        if response.code != ResponseCode.SUCCESS:
            raise error_for_response(response, f"name server {addr}")
        return ClusterInfo.decode(response.body)

    async def cluster_list(self) -> list[BrokerEntry]:
        """Every broker instance, sorted by cluster, broker name and broker id."""
        info = await self.cluster_info()
        entries: list[BrokerEntry] = []
        for cluster, names in info.cluster_addr_table.items():
            for name in names:
                bd = info.broker_addr_table.get(name)
                if bd is None:
                    continue
                for broker_id, addr in bd.broker_addrs.items():
                    entries.append(BrokerEntry(cluster, name, broker_id, addr))
        return sorted(entries, key=lambda e: (e.cluster, e.broker_name, e.broker_id))

    # -- topics ----------------------------------------------------------------------------------
    async def create_topic(
        self,
        topic: str,
        read_queue_nums: int = 8,
        write_queue_nums: int = 8,
        perm: int = 6,
        *,
        cluster: str | None = None,
        broker_addr: str | None = None,
        attributes: str | None = None,
    ) -> list[str]:
        """Create or update ``topic`` on ``broker_addr`` or on the master of every broker of
        ``cluster`` (the only cluster when neither is given); returns the addresses used.
        ``attributes`` is mqadmin's ``-a`` (``+message.type=FIFO``, ``-key``).
        The brokers register the topic with the name servers shortly after."""
        addrs = await self._target_brokers(f"create topic {topic!r} in", cluster, broker_addr)
        fields: dict[str, object] = {
            "topic": topic,
            "defaultTopic": "TBW102",
            "readQueueNums": read_queue_nums,
            "writeQueueNums": write_queue_nums,
            "perm": perm,
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": 0,
            "order": False,
        }
        if attributes:
            fields["attributes"] = attributes
        for addr in addrs:
            await self._broker(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, fields)
        return addrs

    async def _target_brokers(self, doing: str, cluster: str | None, broker_addr: str | None) -> list[str]:
        """``[broker_addr]``, or the master of every broker of ``cluster`` (of the only cluster
        when neither is given)."""
        if cluster is not None and broker_addr is not None:
            raise ConfigError("give either a cluster or a broker address, not both")
        if broker_addr is not None:
            return [broker_addr]
        if cluster is None:
            clusters = sorted((await self.cluster_info()).cluster_addr_table)
            if len(clusters) != 1:
                raise ConfigError(f"name the cluster to {doing} (clusters: {clusters})")
            cluster = clusters[0]
        addrs = list((await self._masters(cluster)).values())
        if not addrs:
            raise ConfigError(f"cluster {cluster!r} has no master broker")
        return addrs

    async def delete_topic(self, topic: str, cluster: str) -> list[str]:
        """Delete ``topic`` from every master of ``cluster``, then from every name server."""
        addrs = list((await self._masters(cluster)).values())
        for addr in addrs:
            await self._broker(addr, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic})
        client = self._client()
        for addr in self.namesrv_addrs:
            request = create_request(
                RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": topic, "clusterName": cluster}
            )
            try:
                response = await client.invoke(addr, request, self.timeout_s)
            except RemotingError as exc:
                raise NameServerUnavailable(
                    f"name server {addr} did not delete topic {topic!r}: {exc}"
                ) from exc
            if response.code != ResponseCode.SUCCESS:
                raise error_for_response(response, f"name server {addr}")
        return addrs

    # -- subscription groups ---------------------------------------------------------------------
    async def create_subscription_group(
        self,
        group: str,
        *,
        cluster: str | None = None,
        broker_addr: str | None = None,
        consume_enable: bool = True,
        consume_from_min_enable: bool = False,
        consume_broadcast_enable: bool = False,
        consume_message_orderly: bool = False,
        retry_queue_nums: int = 1,
        retry_max_times: int = 16,
        broker_id: int = 0,
        which_broker_when_consume_slowly: int = 1,
        notify_consumer_ids_changed_enable: bool = True,
    ) -> list[str]:
        """Create or replace the subscription group ``group`` (mqadmin ``updateSubGroup``) on
        ``broker_addr`` or on the master of every broker of ``cluster`` (the only cluster when
        neither is given); returns the addresses used. The defaults are mqadmin's: settings
        left out are reset to them, not kept. ``consume_message_orderly=True`` is what a
        RocketMQ 5 FIFO consumer group needs."""
        addrs = await self._target_brokers(f"create subscription group {group!r} in", cluster, broker_addr)
        config = {
            "groupName": group,
            "consumeEnable": consume_enable,
            "consumeFromMinEnable": consume_from_min_enable,
            "consumeBroadcastEnable": consume_broadcast_enable,
            "consumeMessageOrderly": consume_message_orderly,
            "retryQueueNums": retry_queue_nums,
            "retryMaxTimes": retry_max_times,
            "brokerId": broker_id,
            "whichBrokerWhenConsumeSlowly": which_broker_when_consume_slowly,
            "notifyConsumerIdsChangedEnable": notify_consumer_ids_changed_enable,
            "groupSysFlag": 0,
        }
        body = json.dumps(config, separators=(",", ":")).encode()
        for addr in addrs:
            request = create_request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)
            response = await self._client().invoke(addr, request, self.timeout_s)
            if response.code != 0:
                raise error_for_response(response, addr)
        return addrs

    async def delete_subscription_group(
        self,
        group: str,
        *,
        cluster: str | None = None,
        broker_addr: str | None = None,
        clean_offset: bool = False,
    ) -> list[str]:
        """Delete the subscription group ``group`` (mqadmin ``deleteSubGroup``) from
        ``broker_addr`` or every master of ``cluster``; ``clean_offset`` also removes its
        committed offsets. A group that does not exist is no error (as in RocketMQ)."""
        addrs = await self._target_brokers(f"delete subscription group {group!r} from", cluster, broker_addr)
        fields = {"groupName": group, "cleanOffset": clean_offset}
        for addr in addrs:
            await self._broker(addr, RequestCode.DELETE_SUBSCRIPTIONGROUP, fields)
        return addrs

    async def subscription_groups(self, broker_addr: str) -> dict[str, dict[str, Any]]:
        """Every subscription group a broker has, name → its config as RocketMQ's JSON keys
        (GET_ALL_SUBSCRIPTIONGROUP_CONFIG)."""
        response = await self._broker(broker_addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        try:
            table = fastjson.loads((response.body or b"").decode("utf-8")).get("subscriptionGroupTable")
        except (UnicodeDecodeError, ValueError, AttributeError) as exc:
            raise BodyFormatError(f"broker {broker_addr}: subscription groups do not parse: {exc}") from None
        if not isinstance(table, dict):
            raise BodyFormatError(f"broker {broker_addr}: no subscriptionGroupTable in the answer")
        return {str(k): v for k, v in table.items() if isinstance(v, dict)}

    async def broker_runtime_info(self, broker_addr: str) -> dict[str, str]:
        """A broker's runtime figures (GET_BROKER_RUNTIME_INFO's ``table``), what mqadmin's
        ``brokerStatus`` prints."""
        response = await self._broker(broker_addr, RequestCode.GET_BROKER_RUNTIME_INFO)
        try:
            table = fastjson.loads((response.body or b"").decode("utf-8")).get("table")
        except (UnicodeDecodeError, ValueError, AttributeError) as exc:
            raise BodyFormatError(f"broker {broker_addr}: runtime info does not parse: {exc}") from None
        if not isinstance(table, dict):
            raise BodyFormatError(f"broker {broker_addr}: no table in the runtime info")
        return {str(k): str(v) for k, v in table.items()}

    async def topic_status(self, topic: str) -> list[QueueStatus]:
        """Min/max offset and last update time of every queue of ``topic``."""
        out: list[QueueStatus] = []
        for name, addr in (await self._topic_masters(topic)).items():
            response = await self._broker(addr, RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic})
            table = self._offset_table(response.body, f"topic stats of {topic!r} from {addr}")
            for mq, value in table.items():
                v = value if isinstance(value, dict) else {}
                out.append(
                    QueueStatus(
                        mq.broker_name or name,
                        mq.queue_id,
                        _int(v.get("minOffset")),
                        _int(v.get("maxOffset")),
                        _int(v.get("lastUpdateTimestamp")),
                    )
                )
        return sorted(out, key=lambda q: (q.broker_name, q.queue_id))

    @staticmethod
    def _offset_table(body: bytes, what: str) -> dict[MessageQueue, Any]:
        try:
            doc = OBJECT_KEYS.loads(body)
        except ValueError as exc:
            raise BodyFormatError(f"{what}: {exc}") from None
        if not isinstance(doc, dict):
            raise BodyFormatError(f"{what}: not a JSON object")
        return message_queue_table(doc.get("offsetTable"))

    async def consumer_progress(self, group: str, topic: str | None = None) -> ConsumerProgress:
        """Broker offset, committed offset and lag of every queue ``group`` consumes (of
        ``topic`` only, when given), read from the brokers of the topic (of every cluster)."""
        masters = await self._topic_masters(topic) if topic is not None else await self._masters(None)
        fields: dict[str, object] = {"consumerGroup": group, "topic": topic}
        queues: list[QueueProgress] = []
        tps = 0.0
        for addr in masters.values():
            response = await self._broker(addr, RequestCode.GET_CONSUME_STATS, fields)
            what = f"consume stats of group {group!r} from {addr}"
            try:
                doc = OBJECT_KEYS.loads(response.body)
            except ValueError as exc:
                raise BodyFormatError(f"{what}: {exc}") from None
            if isinstance(doc, dict) and isinstance(doc.get("consumeTps"), int | float):
                tps += float(doc["consumeTps"])
            for mq, value in self._offset_table(response.body, what).items():
                v = value if isinstance(value, dict) else {}
                queues.append(
                    QueueProgress(
                        mq.topic,
                        mq.broker_name,
                        mq.queue_id,
                        _int(v.get("brokerOffset")),
                        max(0, _int(v.get("consumerOffset"))),
                        _int(v.get("lastTimestamp")),
                    )
                )
        queues.sort(key=lambda q: (q.topic, q.broker_name, q.queue_id))
        return ConsumerProgress(group, tuple(queues), tps)

    # -- messages --------------------------------------------------------------------------------
    async def query_msg_by_id(self, msg_id: str) -> MessageView:
        """The message with offset message id ``msg_id`` (store host:port + commit-log offset)."""
        try:
            parsed = decode_offset_msg_id(msg_id.strip())
        except ValueError as exc:
            raise InvalidParameter(f"{exc} (an offset message id is expected)") from None
        response = await self._client().invoke(
            parsed.address,
            create_request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": parsed.offset}),
            self.timeout_s,
        )
        if response.code != ResponseCode.SUCCESS:
            raise MessageNotFound(
                f"broker {parsed.address} has no message at commit-log offset {parsed.offset} "
                f"(id {msg_id}): {response.remark or f'code {response.code}'}"
            )
        found = decode_messages(response.body, f"message {msg_id} from {parsed.address}")
        if not found:
            raise MessageNotFound(f"broker {parsed.address} returned no message for id {msg_id}")
        return found[0]

    async def query_msg_by_key(self, topic: str, key: str, max_num: int = 32) -> list[MessageView]:
        """Messages of ``topic`` whose KEYS (or UNIQ_KEY) contain ``key``, from every broker of
        the topic, oldest first, at most ``max_num``; empty when there is none."""
        if max_num <= 0:
            raise InvalidParameter(f"max_num={max_num} must be > 0")
        fields: dict[str, object] = {
            "topic": topic,
            "key": key,
            "maxNum": max_num,
            "beginTimestamp": 0,
            "endTimestamp": _LONG_MAX,
        }
        found: list[MessageView] = []
        for addr in (await self._topic_masters(topic)).values():
            response = await self._broker(
                addr, RequestCode.QUERY_MESSAGE, fields, ok=(0, ResponseCode.QUERY_NOT_FOUND)
            )
            if response.code != ResponseCode.SUCCESS:
                continue
            for m in decode_messages(response.body, f"query of key {key!r} on {addr}"):
                if m.topic == topic and (key in m.keys or m.uniq_key == key):
                    found.append(m)
        found.sort(key=lambda m: (m.store_timestamp, m.store_host, m.commit_log_offset))
        return found[:max_num]

    async def _pull(
        self, addr: str, topic: str, queue_id: int, offset: int, max_nums: int
    ) -> tuple[int, list[MessageView], str]:
        header = PullMessageRequestHeader(
            consumer_group=TOOLS_CONSUMER_GROUP,
            topic=topic,
            queue_id=queue_id,
            queue_offset=offset,
            max_msg_nums=max_nums,
            sys_flag=PULL_FLAG_SUBSCRIPTION,
            commit_offset=0,
            suspend_timeout_millis=0,
            sub_version=0,
            subscription="*",
        )
        ok = (
            0,
            ResponseCode.PULL_NOT_FOUND,
            ResponseCode.PULL_RETRY_IMMEDIATELY,
            ResponseCode.PULL_OFFSET_MOVED,
        )
        response = await self._client().invoke(
            addr, create_request(RequestCode.PULL_MESSAGE, header.to_ext_fields()), self.timeout_s
        )
        if response.code not in ok:
            raise error_for_response(response, addr)
        if response.code != ResponseCode.SUCCESS:
            return -1, [], response.remark or f"code {response.code}"
        messages = decode_messages(response.body, f"pull of {topic}/{queue_id} at {offset} from {addr}")
        return _int(response.ext_fields.get("nextBeginOffset"), offset + len(messages)), messages, ""

    async def query_msg_by_offset(
        self, topic: str, broker_name: str, queue_id: int, offset: int
    ) -> MessageView:
        """The message at logical ``offset`` of one queue (one PULL_MESSAGE)."""
        addr = await self._broker_addr(topic, broker_name)
        _, messages, why = await self._pull(addr, topic, queue_id, offset, 1)
        if not messages or messages[0].queue_offset != offset:
            raise MessageNotFound(
                f"no message at offset {offset} of {topic}/{broker_name}/{queue_id}: {why or 'not found'}"
            )
        return messages[0]

    async def consume_message(
        self,
        topic: str,
        queue: MessageQueue | int,
        offset: int = 0,
        count: int = 32,
        *,
        broker_name: str | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> list[MessageView]:
        """Up to ``count`` messages of one queue from logical ``offset`` on (pulls, no commit).

        ``queue`` is a :class:`MessageQueue` or a queue id on ``broker_name`` (default: the
        first broker of the topic's route); ``progress(read, count)`` is called after each pull."""
        if count <= 0:
            raise InvalidParameter(f"count={count} must be > 0")
        if isinstance(queue, MessageQueue):
            topic, broker_name, queue_id = queue.topic, queue.broker_name, queue.queue_id
        else:
            queue_id = queue
        masters = await self._topic_masters(topic)
        if broker_name is None:
            broker_name = next(iter(masters))
        addr = masters.get(broker_name)
        if addr is None:
            raise TopicNotExist(f"topic {topic!r} is not served by broker {broker_name!r}")
        out: list[MessageView] = []
        while len(out) < count:
            next_offset, messages, _ = await self._pull(
                addr, topic, queue_id, offset, min(_MAX_PULL_BATCH, count - len(out))
            )
            if not messages:
                break
            out.extend(messages)
            if progress is not None:
                progress(min(len(out), count), count)
            if next_offset <= offset:
                break
            offset = next_offset
        return out[:count]

    async def send_message(
        self, topic: str, body: bytes | str, tags: str | None = None, keys: str | Sequence[str] | None = None
    ) -> SendResult:
        """Send one message through a producer of group ``TOOLS_PRODUCER``."""
        self._client()
        if self._producer is None:
            producer = AsyncProducer(
                TOOLS_PRODUCER_GROUP,
                namesrv_addr=self.namesrv_addrs,
                send_timeout_ms=int(self.timeout_s * 1000),
            )
            await producer.start()
            self._producer = producer
        key_list = keys.split() if isinstance(keys, str) else list(keys or ())
        data = body.encode("utf-8") if isinstance(body, str) else bytes(body)
        return await self._producer.send(Message(topic, data, tags=tags, keys=key_list))

    # -- offsets ---------------------------------------------------------------------------------
    async def reset_offset_by_time(
        self,
        group: str,
        topic: str,
        timestamp_ms: int,
        *,
        force: bool = True,
        progress: Callable[[int, int], None] | None = None,
    ) -> dict[MessageQueue, int]:
        """Move ``group``'s offsets on ``topic`` to the first message stored at or after
        ``timestamp_ms`` (-1: the end of every queue) with INVOKE_BROKER_TO_RESET_OFFSET (222)
        on every master of the topic; without ``force`` a queue only moves backwards. Online
        consumers of the group jump to the new offsets. Returns the new offset of every queue;
        ``progress(done, total)`` is called after each broker."""
        masters = await self._topic_masters(topic)
        fields: dict[str, object] = {
            "topic": topic,
            "group": group,
            "timestamp": timestamp_ms,
            "isForce": force,
        }
        out: dict[MessageQueue, int] = {}
        for done, addr in enumerate(masters.values(), start=1):
            response = await self._broker(addr, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, fields)
            table = self._offset_table(response.body, f"reset offsets of group {group!r} from {addr}")
            out.update((mq, _int(value)) for mq, value in table.items())
            if progress is not None:
                progress(done, len(masters))
        return dict(sorted(out.items()))

    async def consumer_status(
        self, group: str, topic: str, client_id: str | None = None
    ) -> dict[str, dict[MessageQueue, int]]:
        """Where each online member of ``group`` is in ``topic``'s queues (client id → queue →
        offset), asked by every master of the topic (INVOKE_BROKER_TO_GET_CONSUMER_STATUS, 223,
        which asks the members with GET_CONSUMER_STATUS_FROM_CLIENT, 221); only ``client_id``
        when given."""
        masters = await self._topic_masters(topic)
        fields: dict[str, object] = {"topic": topic, "group": group, "clientAddr": client_id or ""}
        out: dict[str, dict[MessageQueue, int]] = {}
        for addr in masters.values():
            response = await self._broker(addr, RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS, fields)
            what = f"consumer status of group {group!r} from {addr}"
            try:
                doc = OBJECT_KEYS.loads(response.body)
            except ValueError as exc:
                raise BodyFormatError(f"{what}: {exc}") from None
            members = doc.get("consumerTable") if isinstance(doc, dict) else None
            for cid, table in (members or {}).items():
                queues = out.setdefault(str(cid), {})
                for mq, value in message_queue_table(table).items():
                    queues[mq] = _int(value)
        return {cid: dict(sorted(q.items())) for cid, q in sorted(out.items())}


def parse_reset_timestamp(text: str, *, now_ms: int | None = None) -> int:
    """mqadmin's ``-s`` of resetOffsetByTime: ``now``, epoch milliseconds, or local time as
    ``yyyy-MM-dd#HH:mm:ss:SSS``; InvalidParameter otherwise.

    As in mqadmin, ``SSS`` is a number of milliseconds (``:5`` is 5 ms, not half a second), and a
    local time that occurs twice (the hour repeated when the clocks go back) is the second one,
    in standard time; one that does not occur (the hour skipped) is read with the offset before
    the change (:func:`rocketq.wallclock.local_to_epoch_ms`)."""
    value = text.strip()
    if value.lower() == "now":
        return now_ms if now_ms is not None else time.time_ns() // 1_000_000
    if value.lstrip("-").isdigit():
        return int(value)
    head, _, millis = value.rpartition(":")
    try:
        if not (millis.isdigit() and millis.isascii() and len(millis) <= 3):
            raise ValueError(millis)
        parsed = datetime.datetime.strptime(head, "%Y-%m-%d#%H:%M:%S")
    except ValueError:
        raise InvalidParameter(
            f"timestamp {text!r} is not 'now', epoch milliseconds or yyyy-MM-dd#HH:mm:ss:SSS"
        ) from None
    return local_to_epoch_ms(parsed) + int(millis)


# -- the blocking facade -----------------------------------------------------------------------
class Admin(BlockingFacade):
    """:class:`AsyncAdmin` with blocking methods, run on a private event-loop thread.

    >>> with Admin("127.0.0.1:9876") as admin:        # doctest: +SKIP
    ...     admin.create_topic("T", cluster="DefaultCluster")
    ...     print(admin.topic_status("T"))
    """

    def __init__(
        self,
        namesrv_addr: str | Sequence[str] | None = None,
        *,
        config: ClientConfig | None = None,
        timeout_ms: int | None = None,
    ) -> None:
        self._core = AsyncAdmin(namesrv_addr, config=config, timeout_ms=timeout_ms)
        BlockingFacade.__init__(self, "rocketq-admin", "admin")

    @property
    def core(self) -> AsyncAdmin:
        return self._core

    @property
    def config(self) -> ClientConfig:
        return self._core.config

    def _core_start(self) -> Coroutine[Any, Any, None]:
        return self._core.start()

    def _core_shutdown(self) -> Coroutine[Any, Any, None]:
        return self._core.shutdown()

    def create_topic(
        self,
        topic: str,
        read_queue_nums: int = 8,
        write_queue_nums: int = 8,
        perm: int = 6,
        *,
        cluster: str | None = None,
        broker_addr: str | None = None,
        attributes: str | None = None,
    ) -> list[str]:
        return self._call(
            self._core.create_topic(
                topic,
                read_queue_nums,
                write_queue_nums,
                perm,
                cluster=cluster,
                broker_addr=broker_addr,
                attributes=attributes,
            )
        )

    def delete_topic(self, topic: str, cluster: str) -> list[str]:
        return self._call(self._core.delete_topic(topic, cluster))

    def create_subscription_group(
        self,
        group: str,
        *,
        cluster: str | None = None,
        broker_addr: str | None = None,
        consume_enable: bool = True,
        consume_from_min_enable: bool = False,
        consume_broadcast_enable: bool = False,
        consume_message_orderly: bool = False,
        retry_queue_nums: int = 1,
        retry_max_times: int = 16,
        broker_id: int = 0,
        which_broker_when_consume_slowly: int = 1,
        notify_consumer_ids_changed_enable: bool = True,
    ) -> list[str]:
        return self._call(
            self._core.create_subscription_group(
                group,
                cluster=cluster,
                broker_addr=broker_addr,
                consume_enable=consume_enable,
                consume_from_min_enable=consume_from_min_enable,
                consume_broadcast_enable=consume_broadcast_enable,
                consume_message_orderly=consume_message_orderly,
                retry_queue_nums=retry_queue_nums,
                retry_max_times=retry_max_times,
                broker_id=broker_id,
                which_broker_when_consume_slowly=which_broker_when_consume_slowly,
                notify_consumer_ids_changed_enable=notify_consumer_ids_changed_enable,
            )
        )

    def delete_subscription_group(
        self,
        group: str,
        *,
        cluster: str | None = None,
        broker_addr: str | None = None,
        clean_offset: bool = False,
    ) -> list[str]:
        return self._call(
            self._core.delete_subscription_group(
                group, cluster=cluster, broker_addr=broker_addr, clean_offset=clean_offset
            )
        )

    def subscription_groups(self, broker_addr: str) -> dict[str, dict[str, Any]]:
        return self._call(self._core.subscription_groups(broker_addr))

    def broker_runtime_info(self, broker_addr: str) -> dict[str, str]:
        return self._call(self._core.broker_runtime_info(broker_addr))

    def topic_list(self) -> list[str]:
        return self._call(self._core.topic_list())

    def topic_route(self, topic: str) -> TopicRouteData:
        return self._call(self._core.topic_route(topic))

    def topic_status(self, topic: str) -> list[QueueStatus]:
        return self._call(self._core.topic_status(topic))

    def cluster_info(self) -> ClusterInfo:
        return self._call(self._core.cluster_info())

    def cluster_list(self) -> list[BrokerEntry]:
        return self._call(self._core.cluster_list())

    def consumer_progress(self, group: str, topic: str | None = None) -> ConsumerProgress:
        return self._call(self._core.consumer_progress(group, topic))

    def query_msg_by_id(self, msg_id: str) -> MessageView:
        return self._call(self._core.query_msg_by_id(msg_id))

    def query_msg_by_key(self, topic: str, key: str, max_num: int = 32) -> list[MessageView]:
        return self._call(self._core.query_msg_by_key(topic, key, max_num))

    def query_msg_by_offset(self, topic: str, broker_name: str, queue_id: int, offset: int) -> MessageView:
        return self._call(self._core.query_msg_by_offset(topic, broker_name, queue_id, offset))

    def send_message(
        self, topic: str, body: bytes | str, tags: str | None = None, keys: str | Sequence[str] | None = None
    ) -> SendResult:
        return self._call(self._core.send_message(topic, body, tags, keys))

    def consume_message(
        self,
        topic: str,
        queue: MessageQueue | int,
        offset: int = 0,
        count: int = 32,
        *,
        broker_name: str | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> list[MessageView]:
        return self._call(
            self._core.consume_message(
                topic, queue, offset, count, broker_name=broker_name, progress=progress
            )
        )

    def reset_offset_by_time(
        self,
        group: str,
        topic: str,
        timestamp_ms: int,
        *,
        force: bool = True,
        progress: Callable[[int, int], None] | None = None,
    ) -> dict[MessageQueue, int]:
        return self._call(
            self._core.reset_offset_by_time(group, topic, timestamp_ms, force=force, progress=progress)
        )

    def consumer_status(
        self, group: str, topic: str, client_id: str | None = None
    ) -> dict[str, dict[MessageQueue, int]]:
        return self._call(self._core.consumer_status(group, topic, client_id))


def wait_for_route(admin: Admin, topic: str, timeout_s: float = 10.0) -> TopicRouteData:
    """Poll until the name server has a route for ``topic`` (brokers register a new topic
    shortly after creating it); TopicNotExist after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return admin.topic_route(topic)
        except TopicNotExist:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


__all__ = [
    "Admin",
    "AsyncAdmin",
    "BrokerEntry",
    "ConsumerProgress",
    "MessageNotFound",
    "MessageView",
    "QueueProgress",
    "QueueStatus",
    "decode_messages",
    "parse_reset_timestamp",
    "wait_for_route",
]
