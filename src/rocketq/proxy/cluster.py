"""``apache.rocketmq.v2.MessagingService`` in front of a cluster (``rocketq proxy``, cluster mode).

One idea: the MessagingService calls translated into remoting requests to a cluster's name servers and
brokers (the table below, one row per call).

The proxy holds no messages: it turns gRPC calls into remoting requests to the name servers and
brokers, like RocketMQ 5's proxy in cluster mode::

    gRPC call                 remoting
    ------------------------  ------------------------------------------------------------------
    QueryRoute                GET_ROUTEINFO_BY_TOPIC (105) to a name server; every queue of a
                              master broker, with this proxy's address as the broker endpoints;
                              the topic's ``message.type`` from GET_ALL_TOPIC_CONFIG (21) of one
                              of its masters (cached ``TOPIC_TYPE_TTL_S``)
    SendMessage               SEND_MESSAGE_V2 (310) to the master of the chosen queue: FIFO by
                              hash of the message group over the writable queues of all masters,
                              others round-robin; TRANSACTION as a half (sysFlag PREPARED); a
                              definite refusal (no master, connection refused, codes 14 and 2)
                              is retried with the route fetched again, on another broker when
                              there is one (:mod:`rocketq.proxy.failover`)
    EndTransaction            END_TRANSACTION (37, oneway) to the broker holding the half
    Heartbeat, Telemetry,     answered by the proxy (settings as in local mode)
    NotifyClientTermination
    QueryAssignment           every readable queue of each master broker (as QueryRoute)
    ReceiveMessage            POP_MESSAGE (200050, queueId -1) to the master named by the
                              request's queue, else to the next readable master (round-robin);
                              long poll capped at ``MAX_POLL_MS``; definite refusals retried as
                              for SendMessage (pops go to masters only, as in RocketMQ 5)
    AckMessage                ACK_MESSAGE (200051) to the broker named in the receipt handle
    ChangeInvisibleDuration   CHANGE_MESSAGE_INVISIBLETIME (200053), same broker; new handle
    ForwardMessageTo-         CONSUMER_SEND_MSG_BACK (36, delay level -1: straight to
    DeadLetterQueue           %DLQ%<group>) then ACK_MESSAGE, same broker

Receipt handles given to gRPC clients are ``<broker's POP_CK handle>@<broker name>@<commit-log
offset, hex>``: ack and change go to the master of that broker name in the topic's route, a
forward to the DLQ names the message by its commit-log offset; the delivery attempt is the
popped record's ``reconsumeTimes`` + 1.

Transaction ids are ``<commit-log offset:016X><half queue offset:016X>@<broker name>``: the
broker is found again through the topic's route. For orphaned halves the proxy heartbeats every
master of a topic some live gRPC producer publishes as a producer of group = topic, and pushes the
brokers' CHECK_TRANSACTION_STATE (39) to such a producer as ``recover_orphaned_transaction_command``
(:mod:`rocketq.proxy.cluster_checks`); its EndTransaction(SOURCE_SERVER_CHECK) goes out as
END_TRANSACTION with ``fromTransactionCheck=true``.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import random
import time
from collections.abc import AsyncIterator, Callable, Sequence

import grpc

from rocketq.client._routes import RouteCache, TopicPublishInfo, hash_queue_index
from rocketq.errors import (
    InvalidParameter,
    InvalidReceiptHandle,
    NoPermission,
    RemoteProtocolError,
    RemotingError,
    ResponseCode,
    RocketqError,
    ServiceNotAvailable,
    SystemBusy,
    TopicNotExist,
)
from rocketq.message import (
    PROPERTY_POP_CK,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    MessageExt,
    decode_offset_msg_id,
    encode_properties,
)
from rocketq.protocol import record as rec
from rocketq.protocol.headers import MAX_POLL_MS
from rocketq.protocol.queue import MessageQueue
from rocketq.protocol.record import view_to_message
from rocketq.protocol.route import MASTER_ID, TopicRouteData
from rocketq.protocol.topic import PERM_WRITE, TopicConfig, is_readable
from rocketq.proxy import convert, route, status
from rocketq.proxy.cluster_checks import OrphanChecks, encode_transaction_id
from rocketq.proxy.failover import NoMaster, retry_deadline, retrying
from rocketq.proxy.servicer import consumer_group_name as _group_name
from rocketq.proxy.servicer import message_body, receive_batch_size, receive_timing_ms, topic_name
from rocketq.proxy.session import ClientSessionServicer, ack_entries
from rocketq.proxy.settings import ServerSettings, reply_settings
from rocketq.proxy.status import InvalidTransactionId
from rocketq.proxy.telemetry import Session
from rocketq.proxy.v2 import definition_pb2 as pb
from rocketq.proxy.v2 import service_pb2 as spb
from rocketq.remoting import RemotingClient, RemotingCommand, RequestCode, create_request

log = logging.getLogger(__name__)

#: How long a topic's message type fetched from a broker is reused.
TOPIC_TYPE_TTL_S = 10.0
#: ``MessageSysFlag.TRANSACTION_PREPARED_TYPE``.
SYS_FLAG_TRANSACTION_PREPARED = 0x4
#: ``commitOrRollback`` of END_TRANSACTION.
END_COMMIT, END_ROLLBACK = 8, 12
#: How long a send or receive refused by a broker group without a writable master waits for one
#: at most (less when the call's deadline is nearer; :mod:`rocketq.proxy.failover`).
FAILOVER_WAIT_S = 15.0
NOT_IN_PROXY_MODE = "not supported in proxy mode yet; connect to the broker's own gRPC endpoint"


def decode_transaction_id(text: str) -> tuple[int, int, str]:
    """(commit-log offset, half queue offset, broker name); InvalidTransactionId otherwise."""
    offsets, sep, broker_name = text.partition("@")
    if not sep or not broker_name or len(offsets) != 32:
        raise InvalidTransactionId(f"transaction id {text[:64]!r} was not issued by this proxy")
    try:
        return int(offsets[:16], 16), int(offsets[16:], 16), broker_name
    except ValueError:
        raise InvalidTransactionId(f"transaction id {text[:64]!r} was not issued by this proxy") from None


def encode_receipt_handle(broker_handle: str, broker_name: str, commit_log_offset: int) -> str:
    """The gRPC receipt handle of a message popped from ``broker_name``: the broker's handle, the
    broker, and the message's commit-log offset (which a forward to the DLQ sends back)."""
    return f"{broker_handle}@{broker_name}@{commit_log_offset:x}"


def decode_receipt_handle(text: str) -> tuple[str, str, int]:
    """(broker's own handle, broker name, commit-log offset); InvalidReceiptHandle if this proxy
    did not issue it."""
    parts = text.split("@")
    if len(parts) != 3 or not parts[0] or not parts[1]:
        raise InvalidReceiptHandle(f"receipt handle {text[:64]!r} was not issued by this proxy")
    try:
        offset = int(parts[2], 16)
    except ValueError:
        raise InvalidReceiptHandle(f"receipt handle {text[:64]!r} was not issued by this proxy") from None
    return parts[0], parts[1], offset


def decode_popped(body: bytes) -> list[tuple[str, MessageExt]]:
    """(broker receipt handle, message) of each record of a POP_MESSAGE body; ``POP_CK`` is
    taken out of the message's properties. A body that is not such records is the broker's
    protocol error (RemoteProtocolError)."""
    out: list[tuple[str, MessageExt]] = []
    pos = 0
    while pos < len(body):
        view = rec.decode_record(body, pos, check_crc=True)
        if view.kind is not rec.RecordKind.MESSAGE:
            raise RemoteProtocolError(f"popped record at byte {pos} is not a message: {view.reason}")
        message = view_to_message(view)
        handle = message.properties.pop(PROPERTY_POP_CK, "")
        if not handle:
            raise RemoteProtocolError(f"popped message at byte {pos} has no {PROPERTY_POP_CK} property")
        out.append((handle, message))
        pos += view.size
    return out


def route_queues(
    topic: str,
    route_data: TopicRouteData,
    topic_type: str,
    *,
    endpoints: pb.Endpoints,
    namespace: str = "",
) -> list[pb.MessageQueue]:
    """The gRPC queues of a remoting route: every queue of each broker name with a master."""
    masters = {bd.broker_name for bd in route_data.broker_datas if bd.broker_addrs.get(MASTER_ID)}
    out: list[pb.MessageQueue] = []
    for qd in sorted(route_data.queue_datas, key=lambda q: q.broker_name):
        if qd.broker_name not in masters:
            continue
        tc = TopicConfig(
            topic, qd.read_queue_nums, qd.write_queue_nums, qd.perm, attributes={"message.type": topic_type}
        )
        out.extend(
            route.message_queues(
                tc, broker_name=qd.broker_name, broker_endpoints=endpoints, namespace=namespace
            )
        )
    return out


class ClusterServicer(ClientSessionServicer):
    """The gRPC service of a ``rocketq proxy`` process (see the module docstring); Heartbeat,
    NotifyClientTermination and Telemetry come from :class:`ClientSessionServicer`."""

    def __init__(
        self,
        remoting: RemotingClient,
        namesrv_addrs: Sequence[str],
        *,
        advertised_host: str,
        advertised_port: Callable[[], int],
        server_settings: ServerSettings | None = None,
        timeout_s: float = 5.0,
        failover_wait_s: float = FAILOVER_WAIT_S,
    ) -> None:
        super().__init__()
        self.failover_wait_s = failover_wait_s
        self.remoting = remoting
        self.routes = RouteCache(remoting, list(namesrv_addrs), timeout_s)
        self.timeout_s = timeout_s
        self.advertised_host = advertised_host
        self.advertised_port = advertised_port
        self.settings = server_settings or ServerSettings()
        self._rr = itertools.count(random.randrange(1 << 16))
        self._types: dict[str, tuple[float, str]] = {}
        client_id = f"{advertised_host}@rocketq-proxy-{os.getpid()}"
        self.checks = OrphanChecks(self.routes, self.sessions, client_id=client_id, timeout_s=timeout_s)
        self.checks.remoting.rpc_hook = remoting.rpc_hook  # its heartbeats are signed alike

    async def close(self) -> None:
        """Stop the producer heartbeats and close their broker connections."""
        await self.checks.close()

    # -- helpers ----------------------------------------------------------------------------
    def _endpoints(self, requested: pb.Endpoints | None) -> pb.Endpoints:
        if requested is not None and len(requested.addresses) > 0:
            return requested
        return route.endpoints(self.advertised_host, self.advertised_port())

    @staticmethod
    def _topic_name(resource: pb.Resource) -> str:
        return topic_name(resource)

    async def _topic_type(self, topic: str, route_data: TopicRouteData) -> str:
        cached = self._types.get(topic)
        now = time.monotonic()
        if cached is not None and now - cached[0] < TOPIC_TYPE_TTL_S:
            return cached[1]
        topic_type = await self._fetch_topic_type(topic, route_data)
        self._types[topic] = (now, topic_type)
        return topic_type

    async def _fetch_topic_type(self, topic: str, route_data: TopicRouteData) -> str:
        for bd in route_data.broker_datas:
            addr = bd.broker_addrs.get(MASTER_ID)
            if not addr:
                continue
            request = create_request(RequestCode.GET_ALL_TOPIC_CONFIG, {})
            try:
                response = await self.remoting.invoke(addr, request, self.timeout_s)
                table = json.loads(response.body or b"{}").get("topicConfigTable", {})
            except (RemotingError, ValueError, AttributeError) as exc:
                log.info("topic configs of %s unavailable: %s", addr, exc)
                continue
            if response.code == ResponseCode.SUCCESS and topic in table:
                return route.topic_message_type(TopicConfig.from_json(topic, table[topic]))
        return route.topic_message_type(TopicConfig(topic))

    async def _route_queues(
        self, topic: str, request: spb.QueryRouteRequest | spb.QueryAssignmentRequest
    ) -> list[pb.MessageQueue]:
        """The queues of ``topic``'s masters as the name servers route it, behind this proxy."""
        route_data = await self.routes.fetch_route(topic)
        return route_queues(
            topic,
            route_data,
            await self._topic_type(topic, route_data),
            endpoints=self._endpoints(request.endpoints),
            namespace=request.topic.resource_namespace,
        )

    # -- QueryRoute / Telemetry -------------------------------------------------------------
    async def QueryRoute(
        self, request: spb.QueryRouteRequest, context: grpc.aio.ServicerContext
    ) -> spb.QueryRouteResponse:
        try:
            topic = self._topic_name(request.topic)
            queues = await self._route_queues(topic, request)
            if not queues:
                raise TopicNotExist(f"topic {topic} has no queue on a master broker")
        except Exception as exc:
            return spb.QueryRouteResponse(status=_error("QueryRoute", exc))
        return spb.QueryRouteResponse(status=status.ok(), message_queues=queues)

    def telemetry_settings(self, session: Session, client: pb.Settings) -> pb.Settings:
        """Local mode's settings; a producer's topics are watched for orphaned transactions."""
        if session.is_producer and session.topics:
            self.checks.watch(session.topics)
        return reply_settings(client, self.settings)

    # -- SendMessage / EndTransaction -------------------------------------------------------
    async def SendMessage(
        self, request: spb.SendMessageRequest, context: grpc.aio.ServicerContext
    ) -> spb.SendMessageResponse:
        if not request.messages:
            return spb.SendMessageResponse(status=status.status(pb.BAD_REQUEST, "no message to send"))
        entries: list[spb.SendResultEntry] = []
        deadline = retry_deadline(context, self.failover_wait_s)
        try:
            for message in request.messages:
                entries.append(await self._send_one(message, deadline))
        except Exception as exc:
            return spb.SendMessageResponse(status=_error("SendMessage", exc))
        return spb.SendMessageResponse(status=status.ok(), entries=entries)

    def _send_queue(
        self, topic: str, route_data: TopicRouteData, fifo_group: str | None, avoid: str | None
    ) -> tuple[MessageQueue, str]:
        """The queue a message goes to and its master's address: FIFO by the hash of the message
        group, others round-robin, preferring a broker other than ``avoid`` (the one that just
        refused it)."""
        info = TopicPublishInfo.from_route(topic, route_data)
        if not info.queues:
            masterless = _masterless_writers(route_data)
            if masterless:
                raise NoMaster(f"topic {topic}: broker {', '.join(masterless)} has no master (fail-over?)")
            raise NoPermission(f"topic {topic} has no writable queue on a master broker")
        queues = info.queues
        if fifo_group is not None:
            mq = queues[hash_queue_index(fifo_group, len(queues))]
        else:
            others = [q for q in queues if q.broker_name != avoid] or list(queues)
            mq = others[next(self._rr) % len(others)]
        return mq, info.broker_addrs[mq.broker_name]

    async def _send_one(self, message: pb.Message, deadline: float) -> spb.SendResultEntry:
        topic = self._topic_name(message.topic)
        body = message_body(message, self.settings.max_body_size_bytes)
        route_data = await self.routes.fetch_route(topic)
        message_type = convert.declared_type(message)
        route.check_message_type(topic, await self._topic_type(topic, route_data), message_type)
        props = convert.store_properties(message, message_type, topic=topic)
        half = message_type == pb.TRANSACTION
        now_ms = time.time_ns() // 1_000_000
        fields: dict[str, object] = {
            "a": topic,  # producer group: as RocketMQ 5's proxy, a gRPC producer's group is its topic
            "b": topic,
            "c": "TBW102",
            "d": 4,
            "e": 0,
            "f": SYS_FLAG_TRANSACTION_PREPARED if half else 0,
            "g": convert.born_timestamp_ms(message, now_ms),
            "h": 0,
            "i": encode_properties(props),
            "j": 0,
            "k": False,
            "m": False,
            "n": "",
        }
        fifo_group = message.system_properties.message_group if message_type == pb.FIFO else None
        routes: list[TopicRouteData] = [route_data]
        tries: list[str | None] = []  # per attempt: the broker that refused it, if it got that far

        async def attempt() -> tuple[MessageQueue, RemotingCommand]:
            if tries:  # refused: the group may have a new master by now
                routes[0] = await self.routes.fetch_route(topic)
            avoid = tries[-1] if tries else None
            tries.append(None)
            mq, addr = self._send_queue(topic, routes[0], fifo_group, avoid)
            tries[-1] = mq.broker_name
            fields["e"], fields["n"] = mq.queue_id, mq.broker_name
            req = create_request(RequestCode.SEND_MESSAGE_V2, fields, body)
            response = await self.remoting.invoke(addr, req, self.timeout_s)
            if response.code != ResponseCode.SUCCESS:
                raise _send_error(
                    response.code, f"broker {mq.broker_name} at {addr} refused the message: {response.remark}"
                )
            return mq, response

        mq, response = await retrying(deadline, f"send to topic {topic}", attempt)
        ext = response.ext_fields
        queue_offset = int(ext.get("queueOffset", -1))
        transaction_id = ""
        if half:
            commit_log_offset = decode_offset_msg_id(ext.get("msgId", "")).offset
            transaction_id = encode_transaction_id(commit_log_offset, queue_offset, mq.broker_name)
        return spb.SendResultEntry(
            status=status.ok(),
            message_id=props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX],
            transaction_id=transaction_id,
            offset=queue_offset,
        )

    async def EndTransaction(
        self, request: spb.EndTransactionRequest, context: grpc.aio.ServicerContext
    ) -> spb.EndTransactionResponse:
        try:
            topic = self._topic_name(request.topic)
            commit_log_offset, queue_offset, broker_name = decode_transaction_id(request.transaction_id)
            if request.resolution not in (pb.COMMIT, pb.ROLLBACK):
                raise InvalidParameter("resolution must be COMMIT or ROLLBACK")
            route_data = await self.routes.fetch_route(topic)
            addr = next(
                (
                    bd.broker_addrs.get(MASTER_ID)
                    for bd in route_data.broker_datas
                    if bd.broker_name == broker_name
                ),
                None,
            )
            if not addr:
                raise InvalidTransactionId(
                    f"broker {broker_name} of transaction {request.transaction_id} is gone"
                )
            fields = {
                "producerGroup": topic,
                "tranStateTableOffset": str(queue_offset),
                "commitLogOffset": str(commit_log_offset),
                "commitOrRollback": str(END_COMMIT if request.resolution == pb.COMMIT else END_ROLLBACK),
                "fromTransactionCheck": "true" if request.source == pb.SOURCE_SERVER_CHECK else "false",
                "msgId": request.message_id,
                "transactionId": request.message_id,
                "topic": topic,
            }
            end = create_request(RequestCode.END_TRANSACTION, fields, oneway=True)
            await self.remoting.invoke_oneway(addr, end, self.timeout_s)
        except Exception as exc:
            return spb.EndTransactionResponse(status=_error("EndTransaction", exc))
        return spb.EndTransactionResponse(status=status.ok())

    # -- consumption: remoting pop codes to the broker owning the queue --------------------
    def _master(self, route_data: TopicRouteData, broker_name: str) -> str | None:
        for bd in route_data.broker_datas:
            if bd.broker_name == broker_name:
                return bd.broker_addrs.get(MASTER_ID) or None
        return None

    def _readable_brokers(self, route_data: TopicRouteData) -> list[str]:
        masters = {bd.broker_name for bd in route_data.broker_datas if bd.broker_addrs.get(MASTER_ID)}
        return sorted(
            {
                qd.broker_name
                for qd in route_data.queue_datas
                if qd.broker_name in masters and qd.read_queue_nums > 0 and is_readable(qd.perm)
            }
        )

    async def _broker_of_handle(self, topic: str, handle: str) -> tuple[str, str]:
        """(broker address, broker's own handle) of a receipt handle this proxy gave out."""
        broker_handle, broker_name, _ = decode_receipt_handle(handle)
        addr = self._master(await self.routes.fetch_route(topic), broker_name)
        if not addr:
            raise InvalidReceiptHandle(f"broker {broker_name} of the receipt handle has no master")
        return addr, broker_handle

    async def QueryAssignment(
        self, request: spb.QueryAssignmentRequest, context: grpc.aio.ServicerContext
    ) -> spb.QueryAssignmentResponse:
        try:
            topic = self._topic_name(request.topic)
            _group_name(request.group)
            queues = await self._route_queues(topic, request)
        except Exception as exc:
            return spb.QueryAssignmentResponse(status=_error("QueryAssignment", exc))
        return spb.QueryAssignmentResponse(status=status.ok(), assignments=route.assignments(queues))

    async def ReceiveMessage(
        self, request: spb.ReceiveMessageRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[spb.ReceiveMessageResponse]:
        try:
            topic = self._topic_name(request.message_queue.topic)
            group = _group_name(request.group)
            invisible_ms, _ = receive_timing_ms(request, context)
            deadline = retry_deadline(context, self.failover_wait_s)

            async def attempt() -> tuple[str, RemotingCommand]:
                # the long poll ends before the call's deadline, also after refused attempts
                poll_ms = min(receive_timing_ms(request, context)[1], MAX_POLL_MS)
                route_data = await self.routes.fetch_route(topic)
                brokers = self._readable_brokers(route_data)
                wanted = request.message_queue.broker.name
                if wanted in brokers:
                    broker_name = wanted
                elif brokers:
                    broker_name = brokers[next(self._rr) % len(brokers)]
                elif masterless := _masterless_readers(route_data):
                    raise NoMaster(
                        f"topic {topic}: broker {', '.join(masterless)} has no master (fail-over?)"
                    )
                else:
                    raise NoPermission(f"topic {topic} has no readable queue on a master broker")
                addr = self._master(route_data, broker_name)
                assert addr is not None  # _readable_brokers only names brokers with a master
                expression = request.filter_expression
                fields: dict[str, object] = {
                    "consumerGroup": group,
                    "topic": topic,
                    "queueId": -1,
                    "maxMsgNums": receive_batch_size(request),
                    "invisibleTime": invisible_ms,
                    "pollTime": poll_ms,
                    "bornTime": time.time_ns() // 1_000_000,
                    "initMode": 0,
                    "expType": "SQL92" if expression.type == pb.SQL else "TAG",
                    "exp": expression.expression or "*",
                    "order": "false",
                }
                req = create_request(RequestCode.POP_MESSAGE, fields)
                response = await self.remoting.invoke(addr, req, poll_ms / 1000 + self.timeout_s)
                if response.code not in (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND):
                    raise _remoting_error(response.code, f"broker {broker_name} at {addr}: {response.remark}")
                return broker_name, response

            broker_name, response = await retrying(deadline, f"receive from topic {topic}", attempt)
            popped = decode_popped(response.body or b"") if response.code == ResponseCode.SUCCESS else []
        except Exception as exc:
            yield spb.ReceiveMessageResponse(status=_error("ReceiveMessage", exc))
            yield spb.ReceiveMessageResponse(
                delivery_timestamp=convert.ms_timestamp(time.time_ns() // 1_000_000)
            )
            return
        if not popped:
            yield spb.ReceiveMessageResponse(status=status.status(pb.MESSAGE_NOT_FOUND, "no new message"))
        else:
            yield spb.ReceiveMessageResponse(status=status.ok())
            namespace = request.message_queue.topic.resource_namespace
            for handle, message in popped:
                yield spb.ReceiveMessageResponse(
                    message=convert.to_grpc_message(
                        message,
                        topic=topic,
                        namespace=namespace,
                        receipt_handle=encode_receipt_handle(handle, broker_name, message.commit_log_offset),
                        delivery_attempt=message.reconsume_times + 1,
                        invisible_ms=invisible_ms,
                    )
                )
        yield spb.ReceiveMessageResponse(delivery_timestamp=convert.ms_timestamp(time.time_ns() // 1_000_000))

    async def AckMessage(
        self, request: spb.AckMessageRequest, context: grpc.aio.ServicerContext
    ) -> spb.AckMessageResponse:
        try:
            topic = self._topic_name(request.topic)
            group = _group_name(request.group)
        except Exception as exc:
            return spb.AckMessageResponse(status=_error("AckMessage", exc))

        async def ack(entry: spb.AckMessageEntry) -> None:
            addr, handle = await self._broker_of_handle(topic, entry.receipt_handle)
            fields = {"consumerGroup": group, "topic": topic, "extraInfo": handle}
            response = await self.remoting.invoke(
                addr, create_request(RequestCode.ACK_MESSAGE, fields), self.timeout_s
            )
            if response.code != ResponseCode.SUCCESS:
                raise _handle_error(response.code, response.remark or "")

        return await ack_entries(request, ack, _error)

    async def ChangeInvisibleDuration(
        self, request: spb.ChangeInvisibleDurationRequest, context: grpc.aio.ServicerContext
    ) -> spb.ChangeInvisibleDurationResponse:
        try:
            topic = self._topic_name(request.topic)
            group = _group_name(request.group)
            invisible_ms = convert.invisible_ms(request.invisible_duration)
            addr, handle = await self._broker_of_handle(topic, request.receipt_handle)
            _, broker_name, commit_log_offset = decode_receipt_handle(request.receipt_handle)
            fields = {
                "consumerGroup": group,
                "topic": topic,
                "extraInfo": handle,
                "invisibleTime": invisible_ms,
            }
            response = await self.remoting.invoke(
                addr, create_request(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, fields), self.timeout_s
            )
            if response.code != ResponseCode.SUCCESS:
                raise _handle_error(response.code, response.remark or "")
            new_handle = response.ext_fields.get("extraInfo", "")
            if not new_handle:
                raise RocketqError(f"broker {broker_name} returned no receipt handle")
        except Exception as exc:
            # the SDK stores the handle before it looks at the status: always give one back
            return spb.ChangeInvisibleDurationResponse(
                status=_error("ChangeInvisibleDuration", exc), receipt_handle=request.receipt_handle
            )
        return spb.ChangeInvisibleDurationResponse(
            status=status.ok(),
            receipt_handle=encode_receipt_handle(new_handle, broker_name, commit_log_offset),
        )

    async def ForwardMessageToDeadLetterQueue(
        self, request: spb.ForwardMessageToDeadLetterQueueRequest, context: grpc.aio.ServicerContext
    ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        """CONSUMER_SEND_MSG_BACK with delay level -1 (straight to ``%DLQ%<group>``) to the
        broker that popped the message, then ACK_MESSAGE of its handle there."""
        try:
            topic = self._topic_name(request.topic)
            group = _group_name(request.group)
            addr, handle = await self._broker_of_handle(topic, request.receipt_handle)
            _, broker_name, commit_log_offset = decode_receipt_handle(request.receipt_handle)
            back = create_request(
                RequestCode.CONSUMER_SEND_MSG_BACK,
                {
                    "offset": commit_log_offset,
                    "group": group,
                    "delayLevel": -1,
                    "originMsgId": request.message_id,
                    "originTopic": topic,
                    "unitMode": "false",
                },
            )
            response = await self.remoting.invoke(addr, back, self.timeout_s)
            if response.code != ResponseCode.SUCCESS:
                raise _remoting_error(response.code, f"broker {broker_name}: {response.remark}")
            ack = create_request(
                RequestCode.ACK_MESSAGE, {"consumerGroup": group, "topic": topic, "extraInfo": handle}
            )
            response = await self.remoting.invoke(addr, ack, self.timeout_s)
            if response.code != ResponseCode.SUCCESS:
                raise _handle_error(response.code, response.remark or "")
        except Exception as exc:
            return spb.ForwardMessageToDeadLetterQueueResponse(
                status=_error("ForwardMessageToDeadLetterQueue", exc)
            )
        return spb.ForwardMessageToDeadLetterQueueResponse(status=status.ok())


def _masterless_writers(route_data: TopicRouteData) -> list[str]:
    """Broker names the route gives writable queues but no master (their group is electing one)."""
    masters = {bd.broker_name for bd in route_data.broker_datas if bd.broker_addrs.get(MASTER_ID)}
    return sorted(
        {
            qd.broker_name
            for qd in route_data.queue_datas
            if qd.perm & PERM_WRITE and qd.write_queue_nums > 0 and qd.broker_name not in masters
        }
    )


def _masterless_readers(route_data: TopicRouteData) -> list[str]:
    """Broker names the route gives readable queues but no master."""
    masters = {bd.broker_name for bd in route_data.broker_datas if bd.broker_addrs.get(MASTER_ID)}
    return sorted(
        {
            qd.broker_name
            for qd in route_data.queue_datas
            if is_readable(qd.perm) and qd.read_queue_nums > 0 and qd.broker_name not in masters
        }
    )


def _send_error(code: int, text: str) -> RocketqError:
    if code == ResponseCode.SERVICE_NOT_AVAILABLE:
        return ServiceNotAvailable(text)
    if code == ResponseCode.SYSTEM_BUSY:
        return SystemBusy(text)
    if code == ResponseCode.TOPIC_NOT_EXIST:
        return TopicNotExist(text)
    if code == ResponseCode.MESSAGE_ILLEGAL:
        return InvalidParameter(text)
    if code == ResponseCode.NO_PERMISSION:
        return NoPermission(text)
    return RocketqError(text)


def _remoting_error(code: int, text: str) -> RocketqError:
    """The error of a refused pop request."""
    if code == ResponseCode.INVALID_PARAMETER:
        return InvalidParameter(text)
    return _send_error(code, text)


def _handle_error(code: int, text: str) -> RocketqError:
    """The error of a refused ack / change: 29 means the handle is bad, stale or expired."""
    if code == ResponseCode.INVALID_PARAMETER:
        return InvalidReceiptHandle(text)
    return _remoting_error(code, text)


def _error(what: str, exc: BaseException) -> pb.Status:
    return status.of_failure(what, exc, log)


__all__ = [
    "NOT_IN_PROXY_MODE",
    "ClusterServicer",
    "decode_popped",
    "decode_receipt_handle",
    "decode_transaction_id",
    "encode_receipt_handle",
    "encode_transaction_id",
    "route_queues",
]
