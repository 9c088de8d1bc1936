"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320), CONSUMER_SEND_MSG_BACK (36).

Send path (``SendMessageProcessor.sendMessage`` + ``msgCheck``)::

    broker writable                                   else 16 NO_PERMISSION
    topic name valid (``[%|a-zA-Z0-9_-]``, ≤127; ≤255 for %RETRY%/%DLQ%)   else 29
    topic not a "no send" system topic                else 16
    topic known, or created from the template (TBW102), or a %RETRY% topic (1 queue, RW)  else 17
      (a topic created or changed is written to topics.json before any message is stored)
    topic writable; queueId < max(read, write queues) else 16 / 29; queueId < 0 → random
    build the record: properties decoded and re-encoded, POP_CK dropped, UNIQ_KEY added when
      missing, CLUSTER added; born host = the peer (IPv4; IPv6 peers other than mapped/loopback
      are written as 0.0.0.0 so every client can decode the record), store host = this broker
    %RETRY%<group>: the group must exist (26); reconsumeTimes > max (header ``l`` from clients at
      V3_4_9+, else the group's retryMaxTimes) → %DLQ%<group> (1 queue, RW), DELAY dropped
    sysFlag honoured (:func:`check_sys_flag`, else 13 MESSAGE_ILLEGAL naming the problem):
      COMPRESSED (0x1) with compression type 0 or 3 (zlib) and a body that inflates to its end
      (every entry of a batch); LZ4/ZSTD/other types, NEED_UNWRAP (0x40) and INNER_BATCH (0x80)
      are refused. The body is inflated only when the COMPRESSED bit is set.
    transaction half messages (TRAN_MSG=true / PREPARED sysFlag) are stored in
      RMQ_SYS_TRANS_HALF_TOPIC queue 0 (``rocketq.broker.transaction``); refused (16) under
      reject_transaction_message

The put itself runs on the event loop (a memory copy); under SYNC_FLUSH the send then awaits the
group commit's fsync of its offset (no thread per send); when dispatch is far behind it runs in a
worker thread (the store's back-pressure may wait). On a DLedger leader (a Raft group) the send
is taken inside ``data_received`` too and answered from the put's completion once the quorum has
it (:meth:`SendMessageProcessor._send_replicated`: no task per send; the usual single send
through one function, :meth:`SendMessageProcessor._replicated_plain`, with the checks and record
of :meth:`SendMessageProcessor.send_lone`). Such a send looks at the dispatch lag only once
so many bytes of entries committed since its last look (:meth:`SendMessageProcessor.send_message_now`),
as the store's puts do. The sysFlag checks are in
:mod:`rocketq.broker.sys_flag`. Store errors keep their wire codes: MessageIllegal 13 (body/properties
over the limit, named in the remark), ServiceNotAvailable 14 (disk full, shut down), SystemBusy 2.
A FLUSH_DISK_TIMEOUT put answers 10 with the full response header (the message is stored).

Response header: msgId (offset id; comma-joined for a batch), queueId, queueOffset (of the first
message), transactionId (the UNIQ_KEY), and the extFields MSG_REGION and TRACE_ON that Java
clients read unconditionally.

CONSUMER_SEND_MSG_BACK: the consumed message (found by commit-log offset) is re-sent to
%RETRY%<group> with DELAY = 3 + reconsumeTimes (or the requested level), reconsumeTimes + 1,
RETRY_TOPIC and ORIGIN_MESSAGE_ID kept/added; once reconsumeTimes reaches the maximum (or the
requested delay level is negative) it goes to %DLQ%<group> instead.

With one request in flight a producer's send arrives as one read of one frame: the connection
hands such a read to :meth:`SendMessageProcessor.send_lone` first, which decodes it in one call
(:mod:`rocketq.broker.send_frame`) and does what :meth:`SendMessageProcessor.send_message_now`
does for the usual send, in one function; it leaves anything else to the general path.

The common case's codecs are compiled when the C accelerator is in use (:mod:`rocketq.speedups`):
the header (:func:`rocketq.protocol.headers.decode_send_header`), the properties
(:func:`rocketq.broker.send_properties.sent_properties`) and the SUCCESS answer
(:func:`send_ok_frame`); each hands what it does not take to its pure function.

One idea: a send request's way from header to stored record and answer (``msgCheck``, the
record, the put by flush type, the response), for every send code; the record's properties are
built in :mod:`rocketq.broker.send_properties`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from rocketq import speedups as _speedups
from rocketq.broker.context import BrokerContext
from rocketq.broker.metrics import NORMAL, TRANSACTION, SendKind
from rocketq.broker.send_frame import lone_send
from rocketq.broker.send_properties import (
    batch_entry_properties,
    cluster_property,
    delay_level,
    properties_as_sent,
    sent_properties,
)
from rocketq.broker.sys_flag import CHECKED_SYS_FLAGS, check_sys_flag
from rocketq.broker.transaction import ensure_half_topics, to_half_message
from rocketq.config import FlushDiskType
from rocketq.errors import (
    InvalidParameter,
    MessageIllegal,
    NoPermission,
    ResponseCode,
    RocketqError,
    SubscriptionGroupNotExist,
    TopicNameInvalid,
    TopicNotExist,
)
from rocketq.ha.entry_format import BODY_OFFSET
from rocketq.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_POP_CK,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    PROPERTY_WAIT_STORE_MSG_OK,
    BrokerMessage,
    UniqueIdGenerator,
    born_host_of,
    decode_properties,
    encode_properties,
    validate_topic,
)
from rocketq.protocol.batch import decode_batch_entries
from rocketq.protocol.headers import (
    SendMessageRequestHeader,
    decode_send_header,
    get_int,
    get_long,
    get_str,
    opt_int,
)
from rocketq.protocol.topic import (
    DLQ_NUMS_PER_GROUP,
    GROUP_NAME_MAX_LENGTH,
    NOT_ALLOWED_SEND_TOPICS,
    PERM_READ,
    PERM_WRITE,
    RETRY_GROUP_TOPIC_PREFIX,
    TOPIC_MAX_LENGTH,
    TopicConfig,
    dlq_topic,
    group_name_too_long,
    is_retry_topic,
    is_writeable,
    retry_topic,
    topic_max_length,
)
from rocketq.remoting.codec import success_frame
from rocketq.remoting.codes import CURRENT_VERSION, DEFAULT_LANGUAGE, FLAG_RESPONSE, RequestCode, Version
from rocketq.remoting.command import RemotingCommand, create_response
from rocketq.remoting.connection import DEFERRED, Connection, Deferred
from rocketq.store.commitlog import PutMessageResult, PutMessageStatus
from rocketq.store.dledger_appends import PutThen
from rocketq.store.flush import GroupCommitService
from rocketq.store.packed_batch import plan_batch
from rocketq.store.store_puts import lag_look_every

log = logging.getLogger(__name__)

T = TypeVar("T")
_SEND_MESSAGE_V2 = int(RequestCode.SEND_MESSAGE_V2)

#: Names :meth:`SendMessageProcessor.msg_check` remembers as checked (the set starts over when full).
CHECKED_TOPICS_MAX = 4096

PROPERTY_MSG_REGION = "MSG_REGION"
PROPERTY_TRACE_SWITCH = "TRACE_ON"
TRANSACTION_TYPE_MASK = 0xC
TRANSACTION_PREPARED_TYPE = 0x4
FAQ_URL = "https://rocketmq.apache.org/docs/bestPractice/06FAQ"
#: sysFlag bits that make a send other than plain: those checked (compression, unwrap, inner
#: batch) and the transaction type.
_NOT_PLAIN_SYS_FLAGS = CHECKED_SYS_FLAGS | TRANSACTION_TYPE_MASK


def plain_send(topic: str, sys_flag: int, properties: str | None) -> bool:
    """True for a send :meth:`SendMessageProcessor._prepare` stores as it comes: no transaction
    (neither a type in ``sys_flag`` nor the ``TRAN_MSG`` name anywhere in the properties), no
    sysFlag bit to check, not a retry topic. False sends take those branches of ``_prepare``
    (and never :meth:`SendMessageProcessor.send_lone`)."""
    return not (
        sys_flag & _NOT_PLAIN_SYS_FLAGS
        or topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
        or (properties is not None and PROPERTY_TRANSACTION_PREPARED in properties)
    )


def send_response_fields(
    result: PutMessageResult, queue_id: int, transaction_id: str | None, region_id: str, trace_on: bool
) -> dict[str, str]:
    fields = {
        "msgId": result.msg_id,
        "queueId": str(queue_id),
        "queueOffset": str(result.queue_offset),
        PROPERTY_MSG_REGION: region_id,
        PROPERTY_TRACE_SWITCH: "true" if trace_on else "false",
    }
    if transaction_id:
        fields["transactionId"] = transaction_id
    return fields


_quote = json.encoder.encode_basestring  # a str as a JSON string literal (C), as fastjson writes UTF-8
_SEND_OK_EXT = '{"msgId":"%s","queueId":"%d","queueOffset":"%d","MSG_REGION":%s,"TRACE_ON":"%s"%s}'


def send_ok_ext_json(
    result: PutMessageResult, queue_id: int, transaction_id: str | None, region_id: str, trace_on: bool
) -> str:
    """:func:`send_response_fields` already written as the JSON object the response header
    carries (same keys, same order, same escaping; message ids are hex digits and commas)."""
    return _SEND_OK_EXT % (
        result.msg_id,
        queue_id,
        result.queue_offset,
        _quote(region_id),
        "true" if trace_on else "false",
        ',"transactionId":' + _quote(transaction_id) if transaction_id else "",
    )


def send_ok_frame(
    opaque: int,
    result: PutMessageResult,
    queue_id: int,
    transaction_id: str | None,
    region_id: str,
    trace_on: bool,
) -> bytes:
    """The whole SUCCESS answer frame of a send to request ``opaque``: :func:`success_frame` of
    :func:`send_ok_ext_json`. Compiled when the C accelerator is in use (a single message's
    answer whose texts need no JSON escaping; anything else by :data:`pure_send_ok_frame`)."""
    return success_frame(opaque, send_ok_ext_json(result, queue_id, transaction_id, region_id, trace_on))


#: The pure-Python send_ok_frame, whichever implementation the name is bound to.
pure_send_ok_frame = send_ok_frame
if _speedups.COMPILED is not None:
    _speedups.COMPILED.setup_send_ok_frame(
        pure_send_ok_frame, PutMessageResult, FLAG_RESPONSE, DEFAULT_LANGUAGE.name, CURRENT_VERSION
    )
    send_ok_frame = _speedups.COMPILED.send_ok_frame


#: ``BrokerMessage(topic, body, properties, queue_id, flag, sys_flag, born_timestamp, born_host,
#: reconsume_times)``: the class itself, or its compiled constructor when the C accelerator is in
#: use (``rocketq._speedups.broker_message``: the same instance, without the generated __init__).
new_broker_message: Callable[..., BrokerMessage] = (
    BrokerMessage if _speedups.COMPILED is None else _speedups.COMPILED.broker_message
)


class SendMessageProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self._ids = UniqueIdGenerator()
        cfg = ctx.store.config
        # a DLedger put may wait for its quorum (or an fsync): never on the event loop
        self._sync = cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH or cfg.enable_dleger_commit_log
        #: DLedger mode on a Raft group: the put awaited on this loop while the log's loop waits
        #: for the quorum, no worker thread in between (DLedgerMessageStore.quorum_put)
        quorum_put = getattr(ctx.store, "quorum_put", None)
        #: topic names that passed the name checks of msg_check (valid, not a system topic
        #: that refuses sends), so a send to a known name skips the pattern match
        self._checked_topics: set[str] = set()
        self._ledger_put: Callable[[Sequence[BrokerMessage]], Awaitable[PutMessageResult]] | None = (
            quorum_put() if quorum_put is not None else None
        )
        #: the same put with a completion callback: a send answered from data_received and
        #: its completion, no task per request (:meth:`_send_replicated`)
        quorum_put_then = getattr(ctx.store, "quorum_put_then", None)
        self._ledger_put_then: PutThen | None = quorum_put_then() if quorum_put_then is not None else None
        #: SYNC_FLUSH on a plain CommitLog: the put runs on this loop with its group-commit wait
        #: deferred (GroupCommitService.put_deferred), and the send awaits the round that makes
        #: it durable; no worker thread per send
        group_commit = getattr(getattr(ctx.store, "commitlog", None), "group_commit", None)
        self._group_commit: GroupCommitService | None = (
            group_commit
            if isinstance(group_commit, GroupCommitService) and not cfg.enable_dleger_commit_log
            else None
        )
        #: a DLedger leader's sends look at the dispatch lag once this many bytes of entries
        #: committed since the last look (``_lag_since``, counted by their completions): the
        #: store's own spacing (:func:`~rocketq.store.store_puts.lag_look_every`)
        self._lag_every = lag_look_every(cfg)
        self._lag_since = 0
        #: :meth:`send_lone` can take sends: ASYNC_FLUSH on a plain CommitLog (no wait per put)
        self.lone_possible = not self._sync and self._ledger_put is None and self._ledger_put_then is None
        #: :meth:`send_lone` takes sends now (the broker opens it once ready, when nothing it
        #: skips applies: ACL, request timing; closes it when shutting down)
        self.lone_open = False

    # -- shared checks ----------------------------------------------------------------------
    def _check_broker_writeable(self) -> None:
        cfg = self.ctx.config
        if not is_writeable(cfg.broker_permission):
            raise NoPermission(f"the broker[{cfg.broker_ip1}] sending message is forbidden")

    def usual_topic(self, topic: str, queue_id: int, producer_group: str) -> TopicConfig | None:
        """The topic config :meth:`msg_check` returns when every one of its checks passes at once:
        a writable broker, a topic name checked before, a producer group of legal length, a topic
        that exists and is writable, a queue id below its queue count (or negative: picked). None
        when any of them does not hold: :meth:`msg_check` then runs the checks one by one, raises
        what fails or creates the topic. The one definition of the usual send's target, shared by
        :meth:`msg_check` and :meth:`send_lone`; a new check of ``msg_check`` belongs here too."""
        if (
            not self.ctx.config.broker_permission & PERM_WRITE
            or topic not in self._checked_topics
            or len(producer_group) > GROUP_NAME_MAX_LENGTH
        ):
            return None
        tc = self.ctx.topics.select(topic)
        if tc is None or not tc.perm & PERM_WRITE or queue_id >= max(tc.write_queue_nums, tc.read_queue_nums):
            return None
        return tc

    def msg_check(self, conn: Connection, header: SendMessageRequestHeader) -> TopicConfig:
        """``AbstractSendMessageProcessor.msgCheck``: the topic config to send to (at once when
        :meth:`usual_topic` has it)."""
        tc = self.usual_topic(header.topic, header.queue_id, header.producer_group)
        if tc is not None:
            return tc
        ctx = self.ctx
        topic = header.topic
        self._check_broker_writeable()
        checked = self._checked_topics
        if topic not in checked:  # both checks depend on the name alone: once per name
            try:
                validate_topic(topic, topic_max_length(topic))
            except TopicNameInvalid as exc:
                raise InvalidParameter(f"the specified topic is invalid: {exc}") from None
            if topic in NOT_ALLOWED_SEND_TOPICS:
                raise NoPermission(f"Sending message to topic[{topic}] is forbidden.")
            if len(checked) >= CHECKED_TOPICS_MAX:
                checked.clear()
            checked.add(topic)
        if len(header.producer_group) > GROUP_NAME_MAX_LENGTH:
            raise InvalidParameter(str(group_name_too_long(header.producer_group, "producer")))
        tc = ctx.topics.select(topic)
        if tc is None:
            tc = ctx.topics.create_in_send(
                topic, header.default_topic, conn.remote_address, header.default_topic_queue_nums
            )
            if tc is None and is_retry_topic(topic):
                tc = ctx.topics.create_in_send_back(topic, 1, PERM_WRITE | PERM_READ)
            if tc is None:
                raise TopicNotExist(f"topic[{topic}] not exist, apply first please! {FAQ_URL}")
        if not tc.writeable:
            raise NoPermission(f"the topic[{topic}] sending message is forbidden")
        valid = max(tc.write_queue_nums, tc.read_queue_nums)
        if header.queue_id >= valid:
            raise InvalidParameter(
                f"request queueId[{header.queue_id}] is illegal, topic {topic} has {valid} queues "
                f"(read {tc.read_queue_nums}, write {tc.write_queue_nums}); producer {conn.remote_address}"
            )
        return tc

    @staticmethod
    def _pick_queue(tc: TopicConfig, requested: int) -> int:
        if requested >= 0:
            return requested
        if tc.write_queue_nums <= 0:
            raise InvalidParameter(f"topic {tc.topic_name} has no write queues")
        return random.randrange(tc.write_queue_nums)

    def _check_transaction(self, sys_flag: int, props: dict[str, str]) -> bool:
        """True for a transaction half message; refused (16) under rejectTransactionMessage."""
        prepared = (sys_flag & TRANSACTION_TYPE_MASK) == TRANSACTION_PREPARED_TYPE
        if prepared or props.get(PROPERTY_TRANSACTION_PREPARED, "").lower() == "true":
            cfg = self.ctx.config
            if cfg.reject_transaction_message:
                raise NoPermission(f"the broker[{cfg.broker_ip1}] sending transaction message is forbidden")
            return True
        return False

    def _must_wait(self) -> bool:
        """The put must run in a worker thread: SYNC_FLUSH waits for its group commit, and far
        behind dispatch the store's back-pressure may make it wait."""
        store = self.ctx.store
        return self._sync or store.dispatch_behind_bytes() > store.config.max_dispatch_lag_bytes // 2

    def _topics_pending(self) -> bool:
        persister = self.ctx.topics_persister
        return persister is not None and persister.pending

    def _ledger_put_now(self) -> bool:
        """DLedger mode with dispatch in bounds: put through :attr:`_ledger_put`."""
        if self._ledger_put is None or not self.ctx.accepting:
            return False
        store = self.ctx.store
        return store.dispatch_behind_bytes() <= store.config.max_dispatch_lag_bytes // 2

    def _dispatch_behind(self) -> bool:
        store = self.ctx.store
        return store.dispatch_behind_bytes() > store.config.max_dispatch_lag_bytes // 2

    async def _put_deferred(self, put: Callable[[T], PutMessageResult], arg: T) -> PutMessageResult:
        """``put(arg)`` on this loop with its sync-flush wait deferred, then the wait awaited:
        the result once the record is durable, FLUSH_DISK_TIMEOUT (the record stays stored)
        when no round covered it within ``sync_flush_timeout_ms``, as the store's own wait."""
        group_commit = self._group_commit
        assert group_commit is not None
        result, offset = group_commit.put_deferred(put, arg)
        if not offset:
            return result
        timeout_s = self.ctx.store.config.sync_flush_timeout_ms / 1000
        durable = group_commit.submit(offset)
        if not durable.done():
            try:
                await asyncio.wait_for(asyncio.wrap_future(durable), timeout_s)
            except TimeoutError:
                log.warning("sync flush of offset %d timed out after %.1f s", offset, timeout_s)
                return result.with_status(PutMessageStatus.FLUSH_DISK_TIMEOUT)
        if not durable.result():
            return result.with_status(PutMessageStatus.FLUSH_DISK_TIMEOUT)
        return result

    async def _put(self, msg: BrokerMessage) -> PutMessageResult:
        store = self.ctx.store
        if self._ledger_put is not None and self._ledger_put_now():
            return await self._ledger_put((msg,))
        if self._group_commit is not None and not self._dispatch_behind():
            return await self._put_deferred(store.put_message, msg)
        if self._must_wait():
            return await self.ctx.blocking(store.put_message, msg)
        return store.put_message(msg)

    async def _put_batch(self, msgs: list[BrokerMessage]) -> PutMessageResult:
        store = self.ctx.store
        if self._ledger_put is not None and self._ledger_put_now():
            return await self._ledger_put(msgs)
        if self._group_commit is not None and not self._dispatch_behind():
            return await self._put_deferred(store.put_messages, msgs)
        if self._must_wait():
            return await self.ctx.blocking(store.put_messages, msgs)
        return store.put_messages(msgs)

    def _response(
        self, request: RemotingCommand, result: PutMessageResult, queue_id: int, transaction_id: str | None
    ) -> RemotingCommand:
        cfg = self.ctx.config
        fields = send_response_fields(result, queue_id, transaction_id, cfg.region_id, cfg.trace_on)
        if result.status is PutMessageStatus.FLUSH_DISK_TIMEOUT:
            timeout = self.ctx.store.config.sync_flush_timeout_ms
            return create_response(
                request,
                ResponseCode.FLUSH_DISK_TIMEOUT,
                f"message stored but not flushed to disk within {timeout} ms",
                ext_fields=fields,
            )
        # every value is already a str: build the response directly rather than through
        # create_response, which copies and coerces the fields (one dict copy per message)
        return RemotingCommand(
            ResponseCode.SUCCESS, opaque=request.opaque, flag=FLAG_RESPONSE, ext_fields=fields
        )

    # -- SEND_MESSAGE / SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE -----------------------------------
    def send_message_now(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand | bytes | Deferred | None:
        """The answer to a send computed without awaiting anything, or None when the send has
        to wait (see :meth:`_must_wait`, or a topic change not yet in topics.json) and
        :meth:`send_message` must take it.

        Under ASYNC_FLUSH a put is a memory copy, so the whole send runs inside the transport's
        ``data_received``: no task, no loop iteration, no thread hand-off per message. When this
        send itself creates its topic, the checks and the record are redone by
        :meth:`send_message` (idempotent: the topic exists by then); that happens once per topic.
        """
        put_then = self._ledger_put_then
        if put_then is not None:  # DLedger on a Raft group (a put always waits there): one look
            # at what _must_wait, _topics_pending and _ledger_put_now look at
            if self._topics_pending() or not self.ctx.accepting:
                return None
            # the dispatch lag (far behind: the task path, whose put may wait in a thread) is
            # looked at once _lag_every bytes of entries committed since the last look, not per
            # send: dispatch may fall that much (at most 256 KiB) further behind unseen. A send
            # that finds it behind leaves the count, so the next one looks again.
            if self._lag_since >= self._lag_every:
                if self._dispatch_behind():
                    return None
                self._lag_since = 0
            return self._send_replicated(conn, request, put_then)
        if self._must_wait() or self._topics_pending():
            return None
        header, batch, msgs, queue_id, transaction_id, kind = self._prepare_send(conn, request)
        if self._topics_pending():
            return None
        store = self.ctx.store
        result = store.put_messages(msgs) if batch else store.put_message(msgs[0])
        self._record(conn, header, msgs, result, kind)
        return self._answer_now(request, result, queue_id, transaction_id)

    def send_lone(self, conn: Connection, data: bytes, max_body: int) -> bytes | None:
        """The answer frame to a read that is one whole SEND_MESSAGE_V2 request of the usual kind,
        stored at once (the connection's :data:`~rocketq.remoting.connection.LoneHandler`), or
        None with nothing done: the frame decoder and :meth:`send_message_now` (or
        :meth:`send_message`) then take the bytes as they always did.

        The usual kind: what :meth:`send_message_now` stores at once and answers PUT_OK without
        trace or metrics to record, through the same steps in one function: a target
        :meth:`usual_topic` gives at once (a writable broker, a topic whose name was checked
        before and that exists and is writable, a queue it has), a queue id given, a
        :func:`plain_send` (no retry topic, no transaction, no sysFlag to check), dispatch in
        bounds, no topic change waiting for topics.json, properties that encode. The header is
        decoded by :func:`~rocketq.broker.send_frame.lone_send`; the record, the put and the
        answer are those of :meth:`_prepare` and :meth:`_answer_now`, and an error of the put
        is answered as the connection answers a handler's exception."""
        ctx = self.ctx
        if not self.lone_open or ctx.trace is not None or ctx.metrics is not None:
            return None
        try:  # nothing is done until the put: an error here leaves the read to the general path
            taken = lone_send(data, max_body)
            if taken is None:
                return None
            request, header = taken
            topic = header.topic
            queue_id = header.queue_id
            properties = header.properties
            cfg = ctx.config
            if (
                queue_id < 0
                or not plain_send(topic, header.sys_flag, properties)
                or self._dispatch_behind()
                or self._topics_pending()
                or self.usual_topic(topic, queue_id, header.producer_group) is None
            ):
                return None
        except Exception:  # which meets it again and answers it as a handler's exception
            return None
        try:  # from here on, an error is the answer, as _prepare's and the put's are
            props, encoded = sent_properties(properties, cfg.broker_cluster_name, self._ids.next_id)
            if encoded is None:  # refused: _prepare raises the encoder's error
                return None
            # positional, as in _prepare
            msg = new_broker_message(
                topic,
                request.body,
                encoded,
                queue_id,
                header.flag,
                header.sys_flag,
                header.born_timestamp,
                born_host_of(conn.remote_address),
                header.reconsume_times or 0,
            )
            result = ctx.store.put_message(msg)
            transaction_id = props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
            if result.status is PutMessageStatus.PUT_OK:
                return send_ok_frame(
                    request.opaque, result, queue_id, transaction_id, cfg.region_id, cfg.trace_on
                )
            answer: RemotingCommand | Exception = self._response(request, result, queue_id, transaction_id)
        except Exception as exc:
            answer = exc
        return conn.response_frame(request, answer)

    def _prepare_send(
        self, conn: Connection, request: RemotingCommand
    ) -> tuple[SendMessageRequestHeader, bool, list[BrokerMessage], int, str | None, SendKind]:
        """The header, checks and records of a send request: (header, whether it is a batch,
        its messages, queue id, transaction id, what the metrics type it by)."""
        header = decode_send_header(request.ext_fields, v2=request.code != RequestCode.SEND_MESSAGE)
        if request.code == RequestCode.SEND_BATCH_MESSAGE or header.batch:
            msgs, queue_id, transaction_id = self._prepare_batch(conn, request, header)
            return header, True, msgs, queue_id, transaction_id, NORMAL
        msg, queue_id, transaction_id, kind = self._prepare(conn, request, header)
        return header, False, [msg], queue_id, transaction_id, kind

    def _record(
        self,
        conn: Connection,
        header: SendMessageRequestHeader,
        msgs: list[BrokerMessage],
        result: PutMessageResult,
        kind: SendKind,
    ) -> None:
        """What a stored send records: its trace, and its metrics (one call, compiled when the
        C accelerator is in use)."""
        ctx = self.ctx
        if ctx.trace is not None:
            ctx.trace.sent(conn.remote_address, header.producer_group, msgs, result)
        metrics = ctx.metrics
        if metrics is not None:
            metrics.sent(header.topic, kind, result)

    def _answer_now(
        self, request: RemotingCommand, result: PutMessageResult, queue_id: int, transaction_id: str | None
    ) -> RemotingCommand | bytes:
        """The answer to a put: the common one (PUT_OK) written straight to bytes (a response
        command and its generic encoding cost a send several µs more; tests check the bytes are
        the same), any other by :meth:`_response`."""
        if result.status is PutMessageStatus.PUT_OK:
            cfg = self.ctx.config
            return send_ok_frame(
                request.opaque, result, queue_id, transaction_id, cfg.region_id, cfg.trace_on
            )
        return self._response(request, result, queue_id, transaction_id)

    def _send_replicated(
        self,
        conn: Connection,
        request: RemotingCommand,
        put_then: PutThen,
    ) -> Deferred | None:
        """A send on a DLedger leader, taken inside ``data_received``: decoded and checked as
        :meth:`send_message_now` does, the put handed to the replicated log's batches, and the
        answer written from the put's completion (:class:`_ReplicatedSend`) once the quorum has
        it: the responses and errors of :meth:`send_message`, without a task per request. None
        (the task path) when this send created its topic, as in :meth:`send_message_now`."""
        ctx = self.ctx
        if request.code == _SEND_MESSAGE_V2 and ctx.trace is None and ctx.metrics is None:
            header = decode_send_header(request.ext_fields, v2=True)
            taken = self._replicated_plain(conn, request, header, put_then)
            if taken is not None:
                return taken
        header, _batch, msgs, queue_id, transaction_id, kind = self._prepare_send(conn, request)
        if self._topics_pending():
            return None
        deferred = ctx.deferred
        send = _ReplicatedSend(self, conn, request, header, msgs, queue_id, transaction_id, kind)
        send.began = deferred.begin()
        try:
            put_then(msgs, send, conn.loop)  # this loop: no lookup (a getpid system call) per send
        except BaseException:
            deferred.dropped()  # not taken after all: the error is the immediate answer
            raise
        return DEFERRED

    def _replicated_plain(
        self,
        conn: Connection,
        request: RemotingCommand,
        header: SendMessageRequestHeader,
        put_then: PutThen,
    ) -> Deferred | None:
        """:meth:`_send_replicated` of the usual send (the kind :meth:`send_lone` takes: a
        :meth:`usual_topic` target, a queue id given, a :func:`plain_send`, properties that
        encode; no trace or metrics to record), its steps in one function and its completion
        the lean :class:`_PlainReplicatedSend`; None, with nothing done, for any other (the
        general steps then take it, errors included)."""
        topic = header.topic
        queue_id = header.queue_id
        properties = header.properties
        if (
            header.batch
            or queue_id < 0
            or not plain_send(topic, header.sys_flag, properties)
            or self.usual_topic(topic, queue_id, header.producer_group) is None
        ):
            return None
        props, encoded = sent_properties(properties, self.ctx.config.broker_cluster_name, self._ids.next_id)
        if encoded is None:  # refused: _prepare raises the encoder's error
            return None
        # positional, as in _prepare
        msg = new_broker_message(
            topic,
            request.body,
            encoded,
            queue_id,
            header.flag,
            header.sys_flag,
            header.born_timestamp,
            born_host_of(conn.remote_address),
            header.reconsume_times or 0,
        )
        deferred = self.ctx.deferred
        transaction_id = props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        send = _PlainReplicatedSend(self, conn, request, queue_id, transaction_id)
        send.began = deferred.begin()
        try:
            put_then((msg,), send, conn.loop)
        except BaseException:
            deferred.dropped()  # not taken after all: the error is the immediate answer
            raise
        return DEFERRED

    async def send_message(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header, batch, msgs, queue_id, transaction_id, kind = self._prepare_send(conn, request)
        await self.ctx.topics_durable()
        result = await (self._put_batch(msgs) if batch else self._put(msgs[0]))
        self._record(conn, header, msgs, result, kind)
        return self._response(request, result, queue_id, transaction_id)

    def _prepare(
        self, conn: Connection, request: RemotingCommand, header: SendMessageRequestHeader
    ) -> tuple[BrokerMessage, int, str | None, SendKind]:
        """Checks and the record of a single send: (message, queue id, transaction id, what the
        metrics derive the ``message_type`` label from: ``transaction``, or its properties, which
        BrokerMetrics.sent types at once; nothing is computed for them here, metrics on or off)."""
        tc = self.msg_check(conn, header)
        queue_id = self._pick_queue(tc, header.queue_id)
        # the record's properties and their bytes (None: encode_properties refuses them, and
        # raises below, after the checks that come first)
        props, encoded = sent_properties(
            header.properties, self.ctx.config.broker_cluster_name, self._ids.next_id
        )
        topic = header.topic
        reconsume_times = header.reconsume_times or 0
        half = False
        if not plain_send(topic, header.sys_flag, header.properties):
            half = self._check_transaction(header.sys_flag, props)
            if header.sys_flag & CHECKED_SYS_FLAGS:
                check_sys_flag(header.sys_flag, request.body, f"message to {topic}")
            if is_retry_topic(topic):
                topic, queue_id = self._retry_or_dlq(request, header, props, topic, queue_id, reconsume_times)
                encoded = None  # props may have changed (a DLQ drops the delay level)
        # positional (topic, body, properties, queue_id, flag, sys_flag, born_timestamp,
        # born_host, reconsume_times): keywords cost this constructor 0.3 us more per send
        msg = new_broker_message(
            topic,
            request.body,
            encoded if encoded is not None else encode_properties(props).encode("utf-8"),
            queue_id,
            header.flag,
            header.sys_flag,
            header.born_timestamp,
            born_host_of(conn.remote_address),
            reconsume_times,
        )
        if half:
            ensure_half_topics(self.ctx)
            msg = to_half_message(msg, props)
        kind: SendKind = TRANSACTION if half else props
        return msg, queue_id, props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX), kind

    def _retry_or_dlq(
        self,
        request: RemotingCommand,
        header: SendMessageRequestHeader,
        props: dict[str, str],
        topic: str,
        queue_id: int,
        reconsume_times: int,
    ) -> tuple[str, int]:
        """``handleRetryAndDLQ``: keep a %RETRY% send, or divert it to the group's DLQ."""
        ctx = self.ctx
        group = topic[len(RETRY_GROUP_TOPIC_PREFIX) :]
        group_cfg = ctx.groups.find(group)
        if group_cfg is None:
            raise SubscriptionGroupNotExist(f"subscription group not exist, {group} {FAQ_URL}")
        max_times = group_cfg.retry_max_times
        if request.version >= Version.V3_4_9 and header.max_reconsume_times is not None:
            max_times = header.max_reconsume_times
        if reconsume_times <= max_times:
            return topic, queue_id
        dlq = dlq_topic(group)
        tc = ctx.topics.create_in_send_back(dlq, DLQ_NUMS_PER_GROUP, PERM_WRITE | PERM_READ)
        if not tc.writeable:
            raise NoPermission(f"the topic[{dlq}] sending message is forbidden")
        props.pop(PROPERTY_DELAY_TIME_LEVEL, None)
        log.info(
            "message of %s reconsumed %d times (max %d): moved to %s", topic, reconsume_times, max_times, dlq
        )
        if ctx.metrics is not None:
            ctx.metrics.sent_to_dlq(props.get(PROPERTY_RETRY_TOPIC, topic), group)
        return dlq, random.randrange(max(1, tc.write_queue_nums))

    # -- SEND_BATCH_MESSAGE -----------------------------------------------------------------
    def _prepare_batch(
        self, conn: Connection, request: RemotingCommand, header: SendMessageRequestHeader
    ) -> tuple[list[BrokerMessage], int, str | None]:
        """Checks and the records of a batch send: (messages, queue id, transaction id)."""
        topic = header.topic
        if len(topic) > TOPIC_MAX_LENGTH:
            raise MessageIllegal(f"batch topic of {len(topic)} chars exceeds max {TOPIC_MAX_LENGTH} chars")
        if is_retry_topic(topic):
            raise MessageIllegal(f"batch request does not support retry group {topic}")
        tc = self.msg_check(conn, header)
        queue_id = self._pick_queue(tc, header.queue_id)
        if header.sys_flag & TRANSACTION_TYPE_MASK:
            raise MessageIllegal("batch messages cannot be transactional")
        batch_props = decode_properties(header.properties or "")
        if delay_level(batch_props) > 0:
            raise MessageIllegal("batch messages do not support delay levels")
        shared = {
            k: v
            for k, v in batch_props.items()
            if k not in (PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, PROPERTY_POP_CK, PROPERTY_DELAY_TIME_LEVEL)
        }
        born_host = born_host_of(conn.remote_address)
        sys_flag = header.sys_flag
        born_timestamp = header.born_timestamp
        checked = sys_flag & CHECKED_SYS_FLAGS
        cluster = self.ctx.config.broker_cluster_name
        cluster_suffix = cluster_property(cluster)
        if cluster_suffix is not None and not checked:
            # the usual batch of a RocketMQ client: packed into the CommitLog from its body
            packed = plan_batch(
                request.body,
                cluster_suffix,
                tuple(k.encode() for k in shared),
                topic=topic,
                queue_id=queue_id,
                sys_flag=sys_flag,
                born_timestamp=born_timestamp,
                born_host=born_host,
            )
            if packed is not None:
                return packed, queue_id, batch_props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        msgs: list[BrokerMessage] = []
        for index, (body, raw, flag) in enumerate(decode_batch_entries(request.body)):
            if checked:
                check_sys_flag(sys_flag, body, f"batch message {index} to {topic}")
            text = raw.decode("utf-8", "replace")
            props = decode_properties(text)
            properties = (
                None
                if cluster_suffix is None
                else properties_as_sent(raw, text, props, shared, cluster_suffix)
            )
            if properties is None:
                properties = batch_entry_properties(props, shared, cluster, self._ids.next_id, index)
            msgs.append(
                BrokerMessage(
                    topic, body, properties, queue_id, flag, sys_flag, born_timestamp, born_host=born_host
                )
            )
        return msgs, queue_id, batch_props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)

    # -- CONSUMER_SEND_MSG_BACK -------------------------------------------------------------
    async def consumer_send_msg_back(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        ctx = self.ctx
        ext = request.ext_fields
        offset = get_long(ext, "offset")
        group = get_str(ext, "group")
        delay_level = get_int(ext, "delayLevel", 0)
        header_max = opt_int(ext, "maxReconsumeTimes")
        group_cfg = ctx.groups.find(group)
        if group_cfg is None:
            raise SubscriptionGroupNotExist(f"subscription group not exist, {group} {FAQ_URL}")
        self._check_broker_writeable()
        if group_cfg.retry_queue_nums <= 0:
            return create_response(request, ResponseCode.SUCCESS)
        new_topic = retry_topic(group)
        queue_id = random.randrange(group_cfg.retry_queue_nums)
        tc = ctx.topics.create_in_send_back(new_topic, group_cfg.retry_queue_nums, PERM_WRITE | PERM_READ)
        if not tc.writeable:
            raise NoPermission(f"the topic[{new_topic}] sending message is forbidden")
        original = await ctx.blocking(ctx.store.look_message_by_offset, offset)
        if original is None:
            raise RocketqError(f"look message by offset failed, {offset}")
        props = dict(original.properties)
        props.setdefault(PROPERTY_RETRY_TOPIC, original.topic)
        props[PROPERTY_WAIT_STORE_MSG_OK] = "false"
        max_times = group_cfg.retry_max_times
        if request.version >= Version.V3_4_9 and header_max is not None:
            max_times = header_max
        if original.reconsume_times >= max_times or delay_level < 0:
            new_topic = dlq_topic(group)
            dlq = ctx.topics.create_in_send_back(new_topic, DLQ_NUMS_PER_GROUP, PERM_WRITE | PERM_READ)
            if not dlq.writeable:
                raise NoPermission(f"the topic[{new_topic}] sending message is forbidden")
            queue_id = random.randrange(max(1, dlq.write_queue_nums))
            props.pop(PROPERTY_DELAY_TIME_LEVEL, None)
            if ctx.metrics is not None:
                ctx.metrics.sent_to_dlq(props[PROPERTY_RETRY_TOPIC], group)
        else:
            if delay_level == 0:
                delay_level = 3 + original.reconsume_times
            props[PROPERTY_DELAY_TIME_LEVEL] = str(delay_level)
        if not props.get(PROPERTY_ORIGIN_MESSAGE_ID):
            props[PROPERTY_ORIGIN_MESSAGE_ID] = original.msg_id
        born_host = (
            born_host_of(original.born_host) if original.born_host else born_host_of(conn.remote_address)
        )
        msg = BrokerMessage.from_ext(
            original,
            topic=new_topic,
            queue_id=queue_id,
            properties=props,
            born_host=born_host,
            reconsume_times=original.reconsume_times + 1,
        )
        await ctx.topics_durable()
        result = await self._put(msg)
        if result.status is not PutMessageStatus.PUT_OK:
            return create_response(request, ResponseCode.SYSTEM_ERROR, result.status.value)
        if ctx.trace is not None:
            ctx.trace.sent_back(conn.remote_address, group, original, new_topic, result)
        return create_response(request, ResponseCode.SUCCESS)


class _ReplicatedSend:
    """The completion of a send taken by :meth:`SendMessageProcessor._send_replicated`: called
    with the put's result or exception on the broker's loop, it records what
    :meth:`SendMessageProcessor.send_message` records and answers the request."""

    __slots__ = ("began", "conn", "header", "kind", "msgs", "proc", "queue_id", "request", "transaction_id")

    def __init__(
        self,
        proc: SendMessageProcessor,
        conn: Connection,
        request: RemotingCommand,
        header: SendMessageRequestHeader,
        msgs: list[BrokerMessage],
        queue_id: int,
        transaction_id: str | None,
        kind: SendKind,
    ) -> None:
        self.proc = proc
        self.conn = conn
        self.request = request
        self.header = header
        self.msgs = msgs
        self.queue_id = queue_id
        self.transaction_id = transaction_id
        self.kind = kind
        self.began = 0

    def __call__(self, outcome: PutMessageResult | Exception) -> None:
        proc = self.proc
        request = self.request
        response: RemotingCommand | bytes | Exception
        if isinstance(outcome, Exception):
            response = outcome
        else:
            proc._lag_since += outcome[2] + outcome[6] * BODY_OFFSET  # size, msg_num: entries' bytes
            try:
                proc._record(self.conn, self.header, self.msgs, outcome, self.kind)
                response = proc._answer_now(request, outcome, self.queue_id, self.transaction_id)
            except Exception as exc:  # answered as the task path answers a handler's exception
                response = exc
        proc.ctx.deferred.answer(self.conn, request, response, self.began)


class _PlainReplicatedSend:
    """The completion of a send taken by :meth:`SendMessageProcessor._replicated_plain`: what
    :class:`_ReplicatedSend` does for it (nothing to record), with the fields it needs only."""

    __slots__ = ("began", "conn", "proc", "queue_id", "request", "transaction_id")

    def __init__(
        self,
        proc: SendMessageProcessor,
        conn: Connection,
        request: RemotingCommand,
        queue_id: int,
        transaction_id: str | None,
    ) -> None:
        self.proc = proc
        self.conn = conn
        self.request = request
        self.queue_id = queue_id
        self.transaction_id = transaction_id
        self.began = 0

    def __call__(self, outcome: PutMessageResult | Exception) -> None:
        proc = self.proc
        request = self.request
        response: RemotingCommand | bytes | Exception
        if isinstance(outcome, Exception):
            response = outcome
        else:
            proc._lag_since += outcome[2] + BODY_OFFSET  # the entry's bytes (record and header)
            try:
                if outcome[0] is PutMessageStatus.PUT_OK:  # _answer_now's, without its call
                    cfg = proc.ctx.config
                    queue_id, transaction_id = self.queue_id, self.transaction_id
                    response = send_ok_frame(
                        request.opaque, outcome, queue_id, transaction_id, cfg.region_id, cfg.trace_on
                    )
                else:
                    response = proc._answer_now(request, outcome, self.queue_id, self.transaction_id)
            except Exception as exc:  # answered as the task path answers a handler's exception
                response = exc
        proc.ctx.deferred.answer(self.conn, request, response, self.began)

    @staticmethod
    def answer_all(results: list[tuple[Any, PutMessageResult]]) -> None:
        """:meth:`__call__` of the sends of a committed run at once (their PUT_OK results, in
        order: :class:`~rocketq.store.dledger_appends.AnswerAll`): the SEND_OK frames made here,
        each connection's consecutive ones answered in one call
        (:meth:`~rocketq.remoting.connection.Connection.answer_frames`), the deferred count
        taken down once. With request timing on (a latency per answer), each by
        :meth:`__call__`; a frame that cannot be made answers its send with the error."""
        send: _PlainReplicatedSend = results[0][0]
        proc = send.proc
        ctx = proc.ctx
        deferred = ctx.deferred
        if deferred.rpc is not None:
            for send, result in results:
                send(result)
            return
        cfg = ctx.config
        region_id, trace_on = cfg.region_id, cfg.trace_on
        conn: Connection | None = None
        frames: list[tuple[RemotingCommand, bytes]] = []
        lag = alone = 0  # alone: the sends answered on their own (their count taken down there)
        try:
            for send, result in results:
                if send.proc is not proc:  # (another broker's, on the same loop)
                    alone += 1
                    send(result)
                    continue
                lag += result[2] + BODY_OFFSET  # the entry's bytes (record and header)
                request = send.request
                try:
                    frame = send_ok_frame(
                        request.opaque, result, send.queue_id, send.transaction_id, region_id, trace_on
                    )
                except Exception as exc:  # answered as the task path answers a handler's exception
                    alone += 1
                    deferred.answer(send.conn, request, exc, send.began)
                    continue
                if send.conn is not conn:
                    if conn is not None:
                        conn.answer_frames(frames)
                        frames = []
                    conn = send.conn
                frames.append((request, frame))
            if conn is not None:
                conn.answer_frames(frames)
        finally:  # every other send counted down, even when something above failed (no drain waits for it)
            proc._lag_since += lag
            deferred.answered(len(results) - alone)


__all__ = ["SendMessageProcessor", "born_host_of", "send_response_fields"]
