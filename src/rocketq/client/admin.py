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

import datetime
import json
import time
from collections.abc import Callable
from typing import Any

from rocketq.client._facade import BlockingFacade, blocking, takes_arguments_of
from rocketq.client.admin_messages import AdminMessages
from rocketq.client.admin_views import (
    BrokerEntry,
    ConsumerProgress,
    MessageView,
    QueueProgress,
    QueueStatus,
    _int,
    decode_messages,
)
from rocketq.client.aio import error_for_response
from rocketq.errors import (
    BodyFormatError,
    ConfigError,
    InvalidParameter,
    MessageNotFound,
    NameServerUnavailable,
    RemotingError,
    ResponseCode,
    TopicNotExist,
)
from rocketq.protocol.fastjson import OBJECT_KEYS
from rocketq.protocol.queue import MessageQueue, message_queue_table
from rocketq.protocol.route import TopicRouteData
from rocketq.remoting import RequestCode, create_request
from rocketq.wallclock import local_to_epoch_ms


class AsyncAdmin(AdminMessages):
    """Admin operations on the running asyncio event loop.

    ``namesrv_addr`` is ``"host:port"`` or several separated by ``;``; ``timeout_ms`` bounds
    every request. Both override ``config`` (:class:`~rocketq.client.config.ClientConfig`, whose
    ``request_timeout_ms`` is the timeout; without a config the timeout is 5 s). Call
    :meth:`start` first and :meth:`shutdown` at the end (or ``async with``). The connection and
    name server views are :class:`~rocketq.client.admin_requests.AdminRequests`', the message
    operations :class:`~rocketq.client.admin_messages.AdminMessages`'.
    """

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
        table = await self._broker_table(
            broker_addr,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
            "subscriptionGroupTable",
            "subscription groups",
            "no subscriptionGroupTable in the answer",
        )
        return {str(k): v for k, v in table.items() if isinstance(v, dict)}

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
        doc = _object_keys_json(body, what)
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
            doc = _object_keys_json(response.body, what)
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
            doc = _object_keys_json(response.body, what)
            members = doc.get("consumerTable") if isinstance(doc, dict) else None
            for cid, table in (members or {}).items():
                queues = out.setdefault(str(cid), {})
                for mq, value in message_queue_table(table).items():
                    queues[mq] = _int(value)
        return {cid: dict(sorted(q.items())) for cid, q in sorted(out.items())}


def _object_keys_json(body: bytes, what: str) -> Any:
    """A broker's object-keyed JSON body (:data:`OBJECT_KEYS`); BodyFormatError naming
    ``what`` when it does not parse."""
    try:
        return OBJECT_KEYS.loads(body)
    except ValueError as exc:
        raise BodyFormatError(f"{what}: {exc}") from None


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
class Admin(BlockingFacade[AsyncAdmin]):
    """:class:`AsyncAdmin` with blocking methods, run on a private event-loop thread; same
    arguments, same methods.

    >>> with Admin("127.0.0.1:9876") as admin:        # doctest: +SKIP
    ...     admin.create_topic("T", cluster="DefaultCluster")
    ...     print(admin.topic_status("T"))
    """

    @takes_arguments_of(AsyncAdmin)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        BlockingFacade.__init__(self, AsyncAdmin(*args, **kwargs), "rocketq-admin", "admin")

    create_topic = blocking(AsyncAdmin.create_topic)
    delete_topic = blocking(AsyncAdmin.delete_topic)
    create_subscription_group = blocking(AsyncAdmin.create_subscription_group)
    delete_subscription_group = blocking(AsyncAdmin.delete_subscription_group)
    subscription_groups = blocking(AsyncAdmin.subscription_groups)
    broker_runtime_info = blocking(AsyncAdmin.broker_runtime_info)
    delete_expired_commitlog = blocking(AsyncAdmin.delete_expired_commitlog)
    topic_list = blocking(AsyncAdmin.topic_list)
    topic_route = blocking(AsyncAdmin.topic_route)
    topic_status = blocking(AsyncAdmin.topic_status)
    cluster_info = blocking(AsyncAdmin.cluster_info)
    cluster_list = blocking(AsyncAdmin.cluster_list)
    dledger_leadership_transfer = blocking(AsyncAdmin.dledger_leadership_transfer)
    consumer_progress = blocking(AsyncAdmin.consumer_progress)
    query_msg_by_id = blocking(AsyncAdmin.query_msg_by_id)
    query_msg_by_key = blocking(AsyncAdmin.query_msg_by_key)
    query_msg_by_offset = blocking(AsyncAdmin.query_msg_by_offset)
    query_msg_trace_by_id = blocking(AsyncAdmin.query_msg_trace_by_id)
    send_message = blocking(AsyncAdmin.send_message)
    consume_message = blocking(AsyncAdmin.consume_message)
    reset_offset_by_time = blocking(AsyncAdmin.reset_offset_by_time)
    consumer_status = blocking(AsyncAdmin.consumer_status)


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
