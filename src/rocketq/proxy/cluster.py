"""``apache.rocketmq.v2.MessagingService`` in front of a cluster (``rocketq proxy``, cluster mode).

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
                              others round-robin; TRANSACTION as a half (sysFlag PREPARED)
    EndTransaction            END_TRANSACTION (37, oneway) to the broker holding the half
    Heartbeat, Telemetry,     answered by the proxy (settings as in local mode)
    NotifyClientTermination
    consumption RPCs          status UNSUPPORTED "not supported in proxy mode yet"

Transaction ids are ``<commit-log offset:016X><half queue offset:016X>@<broker name>``: the
broker is found again through the topic's route. Orphaned halves are not pushed to gRPC producers
in this mode (the brokers' checks find no remoting producer and keep the half until their limit).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import random
import time
from collections.abc import AsyncIterator, Callable, Sequence

import grpc

from rocketq.broker.topic_config import TopicConfig
from rocketq.client._routes import MASTER_ID, RouteCache, TopicPublishInfo, hash_queue_index
from rocketq.errors import (
    InvalidParameter,
    MessageBodyTooLarge,
    NoPermission,
    RemotingError,
    RocketqError,
    TopicNameInvalid,
    TopicNotExist,
)
from rocketq.message import (
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    decode_offset_msg_id,
    encode_properties,
    validate_topic,
)
from rocketq.namesrv.bodies import TopicRouteData
from rocketq.proxy import convert, route, status
from rocketq.proxy.settings import ServerSettings, reply_settings
from rocketq.proxy.status import InvalidTransactionId
from rocketq.proxy.telemetry import Session, SessionRegistry
from rocketq.proxy.v2 import definition_pb2 as pb
from rocketq.proxy.v2 import service_pb2 as spb
from rocketq.proxy.v2 import service_pb2_grpc
from rocketq.remoting import RemotingClient, RequestCode, create_request

log = logging.getLogger(__name__)

#: How long a topic's message type fetched from a broker is reused.
TOPIC_TYPE_TTL_S = 10.0
#: ``MessageSysFlag.TRANSACTION_PREPARED_TYPE``.
SYS_FLAG_TRANSACTION_PREPARED = 0x4
#: ``commitOrRollback`` of END_TRANSACTION.
END_COMMIT, END_ROLLBACK = 8, 12
CLIENT_ID_HEADER = "x-mq-client-id"
NOT_IN_PROXY_MODE = "not supported in proxy mode yet; connect to the broker's own gRPC endpoint"


def encode_transaction_id(commit_log_offset: int, queue_offset: int, broker_name: str) -> str:
    return f"{commit_log_offset:016X}{queue_offset:016X}@{broker_name}"


def decode_transaction_id(text: str) -> tuple[int, int, str]:
    """(commit-log offset, half queue offset, broker name); InvalidTransactionId otherwise."""
    offsets, sep, broker_name = text.partition("@")
    if not sep or not broker_name or len(offsets) != 32:
        raise InvalidTransactionId(f"transaction id {text[:64]!r} was not issued by this proxy")
    try:
        return int(offsets[:16], 16), int(offsets[16:], 16), broker_name
    except ValueError:
        raise InvalidTransactionId(f"transaction id {text[:64]!r} was not issued by this proxy") from None


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


def _metadata(context: grpc.aio.ServicerContext, key: str) -> str:
    for k, v in context.invocation_metadata() or ():
        if k == key:
            return str(v)
    return ""


class ClusterServicer(service_pb2_grpc.MessagingServiceServicer):
    """The gRPC service of a ``rocketq proxy`` process (see the module docstring)."""

    def __init__(
        self,
        remoting: RemotingClient,
        namesrv_addrs: Sequence[str],
        *,
        advertised_host: str,
        advertised_port: Callable[[], int],
        server_settings: ServerSettings | None = None,
        timeout_s: float = 5.0,
    ) -> None:
        self.remoting = remoting
        self.routes = RouteCache(remoting, list(namesrv_addrs), timeout_s)
        self.timeout_s = timeout_s
        self.advertised_host = advertised_host
        self.advertised_port = advertised_port
        self.settings = server_settings or ServerSettings()
        self.sessions = SessionRegistry()
        self._rr = itertools.count(random.randrange(1 << 16))
        self._types: dict[str, tuple[float, str]] = {}

    # -- helpers ----------------------------------------------------------------------------
    def _endpoints(self, requested: pb.Endpoints | None) -> pb.Endpoints:
        if requested is not None and len(requested.addresses) > 0:
            return requested
        return route.endpoints(self.advertised_host, self.advertised_port())

    @staticmethod
    def _topic_name(resource: pb.Resource) -> str:
        name = resource.name
        if not name:
            raise TopicNameInvalid("topic name is empty")
        try:
            validate_topic(name)
        except TopicNameInvalid as exc:
            raise TopicNameInvalid(f"topic {name[:64]!r} is invalid: {exc}") from None
        return name

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
            if response.code == 0 and topic in table:
                return route.topic_message_type(TopicConfig.from_json(topic, table[topic]))
        return route.topic_message_type(TopicConfig(topic))

    # -- QueryRoute / Heartbeat / NotifyClientTermination / Telemetry -----------------------
    async def QueryRoute(
        self, request: spb.QueryRouteRequest, context: grpc.aio.ServicerContext
    ) -> spb.QueryRouteResponse:
        try:
            topic = self._topic_name(request.topic)
            route_data = await self.routes.fetch_route(topic)
            queues = route_queues(
                topic,
                route_data,
                await self._topic_type(topic, route_data),
                endpoints=self._endpoints(request.endpoints),
                namespace=request.topic.resource_namespace,
            )
            if not queues:
                raise TopicNotExist(f"topic {topic} has no queue on a master broker")
        except Exception as exc:
            return spb.QueryRouteResponse(status=_error("QueryRoute", exc))
        return spb.QueryRouteResponse(status=status.ok(), message_queues=queues)

    async def Heartbeat(
        self, request: spb.HeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> spb.HeartbeatResponse:
        return spb.HeartbeatResponse(status=status.ok())

    async def NotifyClientTermination(
        self, request: spb.NotifyClientTerminationRequest, context: grpc.aio.ServicerContext
    ) -> spb.NotifyClientTerminationResponse:
        self.sessions.terminate(_metadata(context, CLIENT_ID_HEADER))
        return spb.NotifyClientTerminationResponse(status=status.ok())

    async def Telemetry(
        self, request_iterator: AsyncIterator[spb.TelemetryCommand], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[spb.TelemetryCommand]:
        session = self.sessions.open(_metadata(context, CLIENT_ID_HEADER))
        reader = asyncio.get_running_loop().create_task(self._read_telemetry(request_iterator, session))
        try:
            while True:
                command = await session.outbound.get()
                if command is None:
                    return
                yield command
        finally:
            reader.cancel()
            self.sessions.close(session)

    async def _read_telemetry(
        self, request_iterator: AsyncIterator[spb.TelemetryCommand], session: Session
    ) -> None:
        try:
            async for command in request_iterator:
                if command.HasField("settings"):
                    self.sessions.update_settings(session, command.settings)
                    reply = reply_settings(command.settings, self.settings)
                    session.outbound.put_nowait(spb.TelemetryCommand(status=status.ok(), settings=reply))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.info("telemetry stream of %s ended: %s", session.client_id, exc)
        session.close()

    # -- SendMessage / EndTransaction -------------------------------------------------------
    async def SendMessage(
        self, request: spb.SendMessageRequest, context: grpc.aio.ServicerContext
    ) -> spb.SendMessageResponse:
        if not request.messages:
            return spb.SendMessageResponse(status=status.status(pb.BAD_REQUEST, "no message to send"))
        entries: list[spb.SendResultEntry] = []
        try:
            for message in request.messages:
                entries.append(await self._send_one(message))
        except Exception as exc:
            return spb.SendMessageResponse(status=_error("SendMessage", exc))
        return spb.SendMessageResponse(status=status.ok(), entries=entries)

    async def _send_one(self, message: pb.Message) -> spb.SendResultEntry:
        topic = self._topic_name(message.topic)
        limit = self.settings.max_body_size_bytes
        if len(message.body) > limit:
            raise MessageBodyTooLarge(f"message body {len(message.body)} B exceeds max {limit} B")
        body = convert.decoded_body(message, limit)
        if len(body) > limit:
            raise MessageBodyTooLarge(f"inflated message body exceeds max {limit} B")
        route_data = await self.routes.fetch_route(topic)
        message_type = convert.declared_type(message)
        route.check_message_type(topic, await self._topic_type(topic, route_data), message_type)
        props = convert.store_properties(message, message_type, topic=topic)
        info = TopicPublishInfo.from_route(topic, route_data)
        if not info.queues:
            raise NoPermission(f"topic {topic} has no writable queue on a master broker")
        if message_type == pb.FIFO:
            mq = info.queues[hash_queue_index(message.system_properties.message_group, len(info.queues))]
        else:
            mq = info.queues[next(self._rr) % len(info.queues)]
        addr = info.broker_addrs[mq.broker_name]
        half = message_type == pb.TRANSACTION
        now_ms = time.time_ns() // 1_000_000
        fields: dict[str, object] = {
            "a": topic,  # producer group: as RocketMQ 5's proxy, a gRPC producer's group is its topic
            "b": topic,
            "c": "TBW102",
            "d": 4,
            "e": mq.queue_id,
            "f": SYS_FLAG_TRANSACTION_PREPARED if half else 0,
            "g": convert.born_timestamp_ms(message, now_ms),
            "h": 0,
            "i": encode_properties(props),
            "j": 0,
            "k": False,
            "m": False,
            "n": mq.broker_name,
        }
        req = create_request(RequestCode.SEND_MESSAGE_V2, fields, body)
        response = await self.remoting.invoke(addr, req, self.timeout_s)
        if response.code != 0:
            raise _send_error(
                response.code, f"broker {mq.broker_name} refused the message: {response.remark}"
            )
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

    # -- consumption: not in proxy mode -----------------------------------------------------
    async def QueryAssignment(
        self, request: spb.QueryAssignmentRequest, context: grpc.aio.ServicerContext
    ) -> spb.QueryAssignmentResponse:
        return spb.QueryAssignmentResponse(status=status.status(pb.UNSUPPORTED, NOT_IN_PROXY_MODE))

    async def ReceiveMessage(
        self, request: spb.ReceiveMessageRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[spb.ReceiveMessageResponse]:
        yield spb.ReceiveMessageResponse(status=status.status(pb.UNSUPPORTED, NOT_IN_PROXY_MODE))
        yield spb.ReceiveMessageResponse(delivery_timestamp=convert.ms_timestamp(time.time_ns() // 1_000_000))

    async def AckMessage(
        self, request: spb.AckMessageRequest, context: grpc.aio.ServicerContext
    ) -> spb.AckMessageResponse:
        return spb.AckMessageResponse(status=status.status(pb.UNSUPPORTED, NOT_IN_PROXY_MODE))

    async def ChangeInvisibleDuration(
        self, request: spb.ChangeInvisibleDurationRequest, context: grpc.aio.ServicerContext
    ) -> spb.ChangeInvisibleDurationResponse:
        return spb.ChangeInvisibleDurationResponse(
            status=status.status(pb.UNSUPPORTED, NOT_IN_PROXY_MODE), receipt_handle=request.receipt_handle
        )

    async def ForwardMessageToDeadLetterQueue(
        self, request: spb.ForwardMessageToDeadLetterQueueRequest, context: grpc.aio.ServicerContext
    ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        return spb.ForwardMessageToDeadLetterQueueResponse(
            status=status.status(pb.UNSUPPORTED, NOT_IN_PROXY_MODE)
        )


#: Remoting response codes of a refused send → the error the gRPC status is made from.
_TOPIC_NOT_EXIST = 17
_MESSAGE_ILLEGAL = 13
_NO_PERMISSION = 16


def _send_error(code: int, text: str) -> RocketqError:
    if code == _TOPIC_NOT_EXIST:
        return TopicNotExist(text)
    if code == _MESSAGE_ILLEGAL:
        return InvalidParameter(text)
    if code == _NO_PERMISSION:
        return NoPermission(text)
    return RocketqError(text)


def _error(what: str, exc: BaseException) -> pb.Status:
    if isinstance(exc, RocketqError):
        log.info("%s refused: %s", what, exc)
    else:
        log.exception("%s failed", what)
    return status.of_error(exc)


__all__ = [
    "NOT_IN_PROXY_MODE",
    "ClusterServicer",
    "decode_transaction_id",
    "encode_transaction_id",
    "route_queues",
]
