"""``apache.rocketmq.v2.MessagingService`` served from inside a broker process (local mode).

Handlers are thin: they validate the request, call the broker's parts (topic table, store,
TransactionService, PopService) and build the reply with the pure helpers of
:mod:`~rocketq.proxy.convert`, :mod:`~rocketq.proxy.route`, :mod:`~rocketq.proxy.settings` and
:mod:`~rocketq.proxy.status`. Business errors are answered in the response's ``status`` (the SDKs
read it there) and the call itself ends OK; a handler never lets an exception out, so one bad
request cannot disturb other clients.

Transaction ids are ``<commit-log offset:016X><half queue offset:016X>`` of the half message:
EndTransaction needs nothing else to find it, after a restart too, and a checked copy of the half
gets its own id.

ReceiveMessage streams ``status`` → ``message`` × n → ``delivery_timestamp`` (Java proxy order);
with nothing to deliver ``status MESSAGE_NOT_FOUND`` → ``delivery_timestamp``. Long polling waits
at most the client's ``long_polling_timeout`` and never past the call deadline minus
:data:`DEADLINE_MARGIN_MS`.

Not offered: PullMessage, UpdateOffset, GetOffset, QueryOffset, RecallMessage and
SyncLiteSubscription (UNIMPLEMENTED; the official SDKs' Producer, SimpleConsumer and PushConsumer
do not call them).
"""

from __future__ import annotations

import itertools
import logging
import random
import time
from collections.abc import AsyncIterator, Callable

import grpc

from rocketq.broker.context import BrokerContext
from rocketq.broker.metrics import TRANSACTION
from rocketq.broker.pop.service import PopService
from rocketq.broker.subscription_group import group_name_problem
from rocketq.broker.transaction import TransactionService, ensure_half_topics, to_half_message
from rocketq.config import FlushDiskType
from rocketq.errors import (
    InvalidParameter,
    MessageBodyTooLarge,
    NoPermission,
    SubscriptionGroupNotExist,
    TopicNameInvalid,
    TopicNotExist,
)
from rocketq.filter import compile_filter
from rocketq.message import (
    PROPERTY_REAL_TOPIC,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    BrokerMessage,
    MessageExt,
    born_host_of,
    encode_properties,
    java_string_hash,
    validate_topic,
)
from rocketq.protocol.topic import TopicConfig, group_name_too_long, is_readable, topic_max_length
from rocketq.proxy import convert, route, status
from rocketq.proxy.session import ClientSessionServicer, ack_entries
from rocketq.proxy.settings import ServerSettings, reply_settings
from rocketq.proxy.status import IllegalConsumerGroup, InvalidTransactionId, NotSupported
from rocketq.proxy.telemetry import CLIENT_ID_HEADER, Session, metadata_value
from rocketq.proxy.v2 import definition_pb2 as pb
from rocketq.proxy.v2 import service_pb2 as spb
from rocketq.store.commitlog import PutMessageResult

log = logging.getLogger(__name__)

#: Long polling ends this long before the call's deadline so the answer arrives in time.
DEADLINE_MARGIN_MS = 1_500
#: Invisible time of a receive that names none (PushConsumer), as RocketMQ 5's proxy default.
DEFAULT_INVISIBLE_MS = 60_000
MIN_INVISIBLE_MS = 1_000
MAX_BATCH_SIZE = 1_024
PROPERTY_CLUSTER = "CLUSTER"


def encode_transaction_id(commit_log_offset: int, queue_offset: int) -> str:
    return f"{commit_log_offset:016X}{queue_offset:016X}"


def decode_transaction_id(text: str) -> tuple[int, int]:
    """(commit-log offset, half queue offset) of a transaction id; InvalidTransactionId otherwise."""
    if len(text) != 32:
        raise InvalidTransactionId(f"transaction id {text[:64]!r} was not issued by this broker")
    try:
        return int(text[:16], 16), int(text[16:], 16)
    except ValueError:
        raise InvalidTransactionId(f"transaction id {text[:64]!r} was not issued by this broker") from None


def fifo_queue(message_group: str, queue_count: int) -> int:
    """Queue of a FIFO message: a stable hash of its group (all of a group lands in one queue)."""
    return abs(java_string_hash(message_group)) % queue_count


def receive_timing_ms(
    request: spb.ReceiveMessageRequest, context: grpc.aio.ServicerContext
) -> tuple[int, int]:
    """(invisible ms, long-poll ms) of a ReceiveMessage: the invisible duration defaults to
    :data:`DEFAULT_INVISIBLE_MS` and may not be below :data:`MIN_INVISIBLE_MS`; the long poll
    ends :data:`DEADLINE_MARGIN_MS` before the call's deadline."""
    invisible_ms = (
        convert.duration_ms(request.invisible_duration)
        if request.HasField("invisible_duration")
        else DEFAULT_INVISIBLE_MS
    )
    if invisible_ms < MIN_INVISIBLE_MS:
        raise InvalidParameter(f"invisible duration {invisible_ms} ms is below {MIN_INVISIBLE_MS} ms")
    poll_ms = (
        convert.duration_ms(request.long_polling_timeout) if request.HasField("long_polling_timeout") else 0
    )
    if poll_ms < 0:
        raise InvalidParameter(f"long polling timeout {poll_ms} ms is negative")
    remaining = context.time_remaining()
    if remaining is not None:
        poll_ms = max(0, min(poll_ms, int(remaining * 1000) - DEADLINE_MARGIN_MS))
    return invisible_ms, poll_ms


def receive_batch_size(request: spb.ReceiveMessageRequest) -> int:
    """The messages a ReceiveMessage may get: its ``batch_size``, at most :data:`MAX_BATCH_SIZE`;
    InvalidParameter when it is not positive."""
    if request.batch_size <= 0:
        raise InvalidParameter(f"batch_size={request.batch_size} must be positive")
    return min(request.batch_size, MAX_BATCH_SIZE)


def topic_name(resource: pb.Resource) -> str:
    """The topic a request names; TopicNameInvalid when it is empty or not a valid topic name."""
    name = resource.name
    if not name:
        raise TopicNameInvalid("topic name is empty")
    try:
        validate_topic(name, topic_max_length(name))
    except TopicNameInvalid as exc:
        raise TopicNameInvalid(f"topic {name[:64]!r} is invalid: {exc}") from None
    return name


def message_body(message: pb.Message, limit: int) -> bytes:
    """The body of a message to send, inflated when the client compressed it; MessageBodyTooLarge
    when the body as sent or as inflated exceeds ``limit`` bytes."""
    if len(message.body) > limit:
        raise MessageBodyTooLarge(f"message body {len(message.body)} B exceeds max {limit} B")
    body = convert.decoded_body(message, limit)
    if len(body) > limit:
        raise MessageBodyTooLarge(f"inflated message body exceeds max {limit} B")
    return body


def consumer_group_name(resource: pb.Resource) -> str:
    """The group a consumer request names; InvalidParameter when empty, IllegalConsumerGroup
    when longer than a client may make it."""
    name = resource.name
    if not name:
        raise InvalidParameter("consumer group is empty")
    problem = group_name_too_long(name, "consumer")
    if problem is not None:
        raise IllegalConsumerGroup(problem)
    return name


class MessagingServicer(ClientSessionServicer):
    """The gRPC service of one broker (see the module docstring); Heartbeat,
    NotifyClientTermination and Telemetry come from :class:`ClientSessionServicer`."""

    def __init__(
        self,
        ctx: BrokerContext,
        transactions: TransactionService | None,
        *,
        advertised_host: str,
        advertised_port: Callable[[], int],
        server_settings: ServerSettings | None = None,
    ) -> None:
        super().__init__()
        self.ctx = ctx
        self.transactions = transactions
        self.advertised_host = advertised_host
        self.advertised_port = advertised_port
        self.settings = server_settings or ServerSettings(
            max_body_size_bytes=ctx.store.config.max_message_size
        )
        self._rr = itertools.count(random.randrange(1 << 16))
        cfg = ctx.store.config
        # a DLedger put waits for its quorum, and the log may share this loop: never on the loop
        self._sync = cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH or cfg.enable_dleger_commit_log
        if transactions is not None:
            transactions.external_checker = self.check_orphaned_transaction

    # -- helpers ----------------------------------------------------------------------------
    def _broker_endpoints(self, requested: pb.Endpoints | None) -> pb.Endpoints:
        if requested is not None and len(requested.addresses) > 0:
            return requested
        return route.endpoints(self.advertised_host, self.advertised_port())

    def _topic(self, resource: pb.Resource) -> TopicConfig:
        name = topic_name(resource)
        tc = self.ctx.topics.select(name)
        if tc is None:
            raise TopicNotExist(f"topic {name} does not exist; create it first (rocketq admin updateTopic)")
        return tc

    def _group(self, resource: pb.Resource) -> str:
        name = consumer_group_name(resource)
        cfg = self.ctx.groups.find(name)
        if cfg is None:
            problem = group_name_problem(name)
            if problem is not None:
                raise IllegalConsumerGroup(problem)
            raise SubscriptionGroupNotExist(f"consumer group {name} does not exist")
        if not cfg.consume_enable:
            raise NoPermission(f"consumer group {name} is not allowed to consume")
        return name

    async def _put(self, msg: BrokerMessage) -> PutMessageResult:
        store = self.ctx.store
        if self._sync or store.dispatch_behind_bytes() > store.config.max_dispatch_lag_bytes // 2:
            return await self.ctx.blocking(store.put_message, msg)
        return store.put_message(msg)

    def _pop(self) -> PopService:
        pop = self.ctx.pop
        if pop is None:
            raise NotSupported("pop consumption is not available on this broker")
        return pop

    # -- QueryRoute / QueryAssignment -------------------------------------------------------
    async def QueryRoute(
        self, request: spb.QueryRouteRequest, context: grpc.aio.ServicerContext
    ) -> spb.QueryRouteResponse:
        try:
            queues = self._message_queues(self._topic(request.topic), request)
        except Exception as exc:
            return spb.QueryRouteResponse(status=self._error("QueryRoute", exc))
        return spb.QueryRouteResponse(status=status.ok(), message_queues=queues)

    async def QueryAssignment(
        self, request: spb.QueryAssignmentRequest, context: grpc.aio.ServicerContext
    ) -> spb.QueryAssignmentResponse:
        try:
            tc = self._topic(request.topic)
            self._group(request.group)
            queues = self._message_queues(tc, request)
        except Exception as exc:
            return spb.QueryAssignmentResponse(status=self._error("QueryAssignment", exc))
        return spb.QueryAssignmentResponse(status=status.ok(), assignments=route.assignments(queues))

    def _message_queues(
        self, tc: TopicConfig, request: spb.QueryRouteRequest | spb.QueryAssignmentRequest
    ) -> list[pb.MessageQueue]:
        """The queues of ``tc`` on this broker, as the request's endpoints reach it."""
        return route.message_queues(
            tc,
            broker_name=self.ctx.config.broker_name,
            broker_endpoints=self._broker_endpoints(request.endpoints),
            namespace=request.topic.resource_namespace,
        )

    # -- Telemetry --------------------------------------------------------------------------
    def telemetry_settings(self, session: Session, client: pb.Settings) -> pb.Settings:
        """The group's FIFO flag and delivery attempts (PopService's when it has them)."""
        fifo = False
        attempts = 17
        if client.HasField("subscription") and client.subscription.group.name:
            cfg = self.ctx.groups.find(client.subscription.group.name)
            if cfg is not None:
                fifo = cfg.consume_message_orderly
                attempts = cfg.retry_max_times + 1
            pop = self.ctx.pop
            if pop is not None:
                try:
                    attempts = int(pop.max_delivery_attempts(client.subscription.group.name))
                except Exception:
                    log.debug("max delivery attempts unavailable", exc_info=True)
        return reply_settings(client, self.settings, fifo=fifo, max_delivery_attempts=attempts)

    def check_orphaned_transaction(self, producer_group: str, half: MessageExt) -> bool:
        """TransactionService hook: ask a live gRPC producer of the half's topic to resolve it."""
        topic = half.properties.get(PROPERTY_REAL_TOPIC, producer_group)
        message = convert.to_grpc_message(half, topic=topic)
        command = spb.TelemetryCommand(
            recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
                message=message,
                transaction_id=encode_transaction_id(half.commit_log_offset, half.queue_offset),
            )
        )
        return self.sessions.push_to_producer(topic, command)

    # -- SendMessage / EndTransaction -------------------------------------------------------
    async def SendMessage(
        self, request: spb.SendMessageRequest, context: grpc.aio.ServicerContext
    ) -> spb.SendMessageResponse:
        if len(request.messages) == 0:
            return spb.SendMessageResponse(status=status.status(pb.BAD_REQUEST, "no message to send"))
        client_id = metadata_value(context, CLIENT_ID_HEADER)
        entries: list[spb.SendResultEntry] = []
        try:
            for message in request.messages:
                entries.append(await self._send_one(message, client_id, context.peer() or ""))
        except Exception as exc:
            return spb.SendMessageResponse(status=self._error("SendMessage", exc))
        return spb.SendMessageResponse(status=status.ok(), entries=entries)

    async def _send_one(self, message: pb.Message, client_id: str, peer: str) -> spb.SendResultEntry:
        ctx = self.ctx
        tc = self._topic(message.topic)
        topic = tc.topic_name
        if not tc.writeable:
            raise NoPermission(f"topic {topic} is not writeable")
        if tc.write_queue_nums <= 0:
            raise NoPermission(f"topic {topic} has no write queues")
        body = message_body(message, self.settings.max_body_size_bytes)
        message_type = convert.declared_type(message)
        route.check_message_type(topic, route.topic_message_type(tc), message_type)
        props = convert.store_properties(message, message_type, topic=topic)
        props[PROPERTY_CLUSTER] = ctx.config.broker_cluster_name
        sp = message.system_properties
        if message_type == pb.FIFO:
            queue_id = fifo_queue(sp.message_group, tc.write_queue_nums)
        else:
            queue_id = next(self._rr) % tc.write_queue_nums
        now_ms = time.time_ns() // 1_000_000
        msg = BrokerMessage(
            topic=topic,
            body=body,
            properties=encode_properties(props).encode("utf-8"),
            queue_id=queue_id,
            born_timestamp=convert.born_timestamp_ms(message, now_ms),
            born_host=born_host_of(_peer_address(peer, sp.born_host)),
        )
        half = message_type == pb.TRANSACTION
        if half:
            if ctx.config.reject_transaction_message:
                raise NoPermission("this broker does not accept transaction messages")
            ensure_half_topics(ctx)
            msg = to_half_message(msg, props)
        await ctx.topics_durable()
        result = await self._put(msg)
        if ctx.metrics is not None:  # rocketmq_messages_in_total etc., as a remoting send counts
            ctx.metrics.stored(topic, TRANSACTION if half else props, result.size, result.msg_num)
        self.sessions.note_send(client_id, topic)
        return spb.SendResultEntry(
            status=status.ok(),
            message_id=props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX],
            transaction_id=encode_transaction_id(result.physical_offset, result.queue_offset) if half else "",
            offset=result.queue_offset,
        )

    async def EndTransaction(
        self, request: spb.EndTransactionRequest, context: grpc.aio.ServicerContext
    ) -> spb.EndTransactionResponse:
        try:
            if self.transactions is None:
                raise NotSupported("transactions are not available on this broker")
            tc = self._topic(request.topic)
            commit_log_offset, queue_offset = decode_transaction_id(request.transaction_id)
            if request.resolution not in (pb.COMMIT, pb.ROLLBACK):
                raise InvalidParameter("resolution must be COMMIT or ROLLBACK")
            problem = await self.transactions.resolve(
                producer_group=tc.topic_name,
                tran_state_offset=queue_offset,
                commit_log_offset=commit_log_offset,
                commit=request.resolution == pb.COMMIT,
                msg_id=request.message_id,
            )
            if problem:
                raise InvalidTransactionId(f"transaction {request.transaction_id}: {problem}")
        except Exception as exc:
            return spb.EndTransactionResponse(status=self._error("EndTransaction", exc))
        return spb.EndTransactionResponse(status=status.ok())

    # -- consumption (PopService) -----------------------------------------------------------
    async def ReceiveMessage(
        self, request: spb.ReceiveMessageRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[spb.ReceiveMessageResponse]:
        try:
            tc = self._topic(request.message_queue.topic)
            group = self._group(request.group)
            if not is_readable(tc.perm):
                raise NoPermission(f"topic {tc.topic_name} is not readable")
            pop = self._pop()
            expression = request.filter_expression
            kind = "SQL92" if expression.type == pb.SQL else "TAG"
            compiled = compile_filter(kind, expression.expression or "*")
            invisible_ms, long_poll_ms = receive_timing_ms(request, context)
            batch = receive_batch_size(request)
            cfg = self.ctx.groups.find(group)
            fifo = bool(cfg is not None and cfg.consume_message_orderly)
            popped = await pop.receive(
                group=group,
                topic=tc.topic_name,
                queue_id=None,
                max_messages=batch,
                invisible_ms=invisible_ms,
                long_poll_ms=long_poll_ms,
                fifo=fifo,
                message_filter=lambda m: compiled.match(m.tags, m.properties),
            )
        except Exception as exc:
            yield spb.ReceiveMessageResponse(status=self._error("ReceiveMessage", exc))
            yield spb.ReceiveMessageResponse(
                delivery_timestamp=convert.ms_timestamp(time.time_ns() // 1_000_000)
            )
            return
        if not popped:
            yield spb.ReceiveMessageResponse(status=status.status(pb.MESSAGE_NOT_FOUND, "no new message"))
        else:
            yield spb.ReceiveMessageResponse(status=status.ok())
            namespace = request.message_queue.topic.resource_namespace
            for item in popped:
                yield spb.ReceiveMessageResponse(
                    message=convert.to_grpc_message(
                        item.message,
                        topic=tc.topic_name,
                        namespace=namespace,
                        receipt_handle=item.receipt_handle,
                        delivery_attempt=item.delivery_attempt,
                        invisible_ms=invisible_ms,
                    )
                )
        yield spb.ReceiveMessageResponse(delivery_timestamp=convert.ms_timestamp(time.time_ns() // 1_000_000))

    async def AckMessage(
        self, request: spb.AckMessageRequest, context: grpc.aio.ServicerContext
    ) -> spb.AckMessageResponse:
        try:
            tc = self._topic(request.topic)
            group = self._group(request.group)
            pop = self._pop()
        except Exception as exc:
            return spb.AckMessageResponse(status=self._error("AckMessage", exc))

        async def ack(entry: spb.AckMessageEntry) -> None:
            await pop.ack(group=group, topic=tc.topic_name, receipt_handle=entry.receipt_handle)

        return await ack_entries(request, ack, self._error)

    async def ChangeInvisibleDuration(
        self, request: spb.ChangeInvisibleDurationRequest, context: grpc.aio.ServicerContext
    ) -> spb.ChangeInvisibleDurationResponse:
        try:
            tc = self._topic(request.topic)
            group = self._group(request.group)
            pop = self._pop()
            invisible_ms = convert.invisible_ms(request.invisible_duration)
            handle = await pop.change_invisible(
                group=group,
                topic=tc.topic_name,
                receipt_handle=request.receipt_handle,
                invisible_ms=invisible_ms,
            )
        except Exception as exc:
            # the SDK stores the handle before it looks at the status: always give one back
            return spb.ChangeInvisibleDurationResponse(
                status=self._error("ChangeInvisibleDuration", exc), receipt_handle=request.receipt_handle
            )
        return spb.ChangeInvisibleDurationResponse(status=status.ok(), receipt_handle=str(handle))

    async def ForwardMessageToDeadLetterQueue(
        self, request: spb.ForwardMessageToDeadLetterQueueRequest, context: grpc.aio.ServicerContext
    ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        try:
            tc = self._topic(request.topic)
            group = self._group(request.group)
            await self._pop().forward_to_dlq(
                group=group, topic=tc.topic_name, receipt_handle=request.receipt_handle
            )
        except Exception as exc:
            return spb.ForwardMessageToDeadLetterQueueResponse(status=self._error("ForwardToDLQ", exc))
        return spb.ForwardMessageToDeadLetterQueueResponse(status=status.ok())

    # -- errors -----------------------------------------------------------------------------
    @staticmethod
    def _error(what: str, exc: BaseException) -> pb.Status:
        return status.of_failure(what, exc, log)


def _peer_address(peer: str, born_host: str) -> str:
    """``host:port`` of the client for the record's born host (gRPC peers read ``ipv4:h:p``)."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4" and rest:
        return rest
    if kind == "ipv6" and rest:
        return rest.replace("%5B", "[").replace("%5D", "]")
    return f"{born_host or '127.0.0.1'}:0"


__all__ = [
    "CLIENT_ID_HEADER",
    "MessagingServicer",
    "decode_transaction_id",
    "encode_transaction_id",
    "fifo_queue",
]
