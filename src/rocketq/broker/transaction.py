"""Transactional messages: half messages, END_TRANSACTION (37), the transaction check service.

Half message (``TransactionalMessageBridge.parseHalfMessageInner``)::

    a send with TRAN_MSG=true (or a PREPARED sysFlag) is stored in RMQ_SYS_TRANS_HALF_TOPIC
    queue 0, with REAL_TOPIC / REAL_QID naming its target and the transaction bits of the
    sysFlag reset to NOT_TYPE (so the half is in the half topic's consume queue, and nowhere
    a consumer of the real topic could read it)

END_TRANSACTION (``EndTransactionProcessor``), sent oneway by Java clients::

    commitOrRollback 0 (unknown)     nothing happens
    the half at commitLogOffset must exist, belong to producerGroup and sit at queue offset
      tranStateTableOffset                                        else SYSTEM_ERROR (1)
    commit (8): re-put to REAL_TOPIC / REAL_QID with REAL_TOPIC, REAL_QID and TRAN_MSG cleared,
      sysFlag COMMIT, PREPARED TRANSACTION OFFSET = the half's commit-log offset
    rollback (12): nothing becomes visible
    both: an "op" message in RMQ_SYS_TRANS_OP_HALF_TOPIC queue 0, tag "d", body = the half's
      queue offset as text, so the check service never asks about the half again; a commit
      appends the committed message and its op in one CommitLog append (one commit point), so
      after a crash both are there or neither (RocketMQ appends them separately, and a broker
      killed between the two has published a message its op queue does not know about)

A half resolved once is not resolved a second time while the broker runs (a duplicate commit
from a retried END_TRANSACTION or a late answer to a check is ignored).

Check service (``TransactionalMessageServiceImpl.check``), every transaction_check_interval_ms::

    walk the half queue from the CID_RMQ_SYS_TRANS consumer offset; halves named by an op message
      (directly, or through TRAN_PREPARED_QUEUE_OFFSET for a checked copy) are done
    stop at a half stored after this pass began or younger than transaction_timeout_ms (born time)
    TRANSACTION_CHECK_TIMES >= transaction_check_max: move to TRANS_CHECK_MAX_TIME_TOPIC
    otherwise: store a copy with TRANSACTION_CHECK_TIMES + 1 at the end of the half queue, then
      send CHECK_TRANSACTION_STATE (39, oneway, body = that copy's record) to one live channel of
      the PGROUP producer group; the producer answers with END_TRANSACTION about the copy
    commit the half and op consumer offsets (the op offset moves over ops for halves already
      passed)
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from rocketq.broker.context import BrokerContext
from rocketq.config import FlushDiskType
from rocketq.errors import ConnectionClosed, ResponseCode
from rocketq.message import (
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    BrokerMessage,
    MessageExt,
    born_host_of,
    encode_properties,
    number_property,
)
from rocketq.protocol.headers import get_bool, get_int, get_long, get_str, opt_str
from rocketq.protocol.record import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_MASK,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from rocketq.protocol.topic import (
    PERM_READ,
    PERM_WRITE,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)
from rocketq.remoting.codes import RequestCode
from rocketq.remoting.command import RemotingCommand, create_request, create_response
from rocketq.remoting.connection import Connection
from rocketq.store.commitlog import PutMessageResult

log = logging.getLogger(__name__)

#: Consumer group whose offsets track the check service's progress (``TransactionalMessageUtil``).
TRANS_CHECK_GROUP = "CID_RMQ_SYS_TRANS"
#: Tag of op messages (``TransactionalMessageUtil.REMOVETAG``).
OP_REMOVE_TAG = "d"
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
HALF_QUEUE_ID = 0
#: Upper bound on halves one check pass looks at (the next pass goes on from there).
MAX_SCAN_PER_PASS = 10_000


def is_half_message(sys_flag: int, props: dict[str, str]) -> bool:
    """A transaction half message: PREPARED sysFlag or ``TRAN_MSG=true``."""
    if (sys_flag & TRANSACTION_MASK) == TRANSACTION_PREPARED_TYPE:
        return True
    return props.get(PROPERTY_TRANSACTION_PREPARED, "").lower() == "true"


def to_half_message(msg: BrokerMessage, props: dict[str, str]) -> BrokerMessage:
    """``parseHalfMessageInner``: the half-topic form of ``msg`` (whose properties are ``props``)."""
    half_props = dict(props)
    half_props[PROPERTY_REAL_TOPIC] = msg.topic
    half_props[PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
    msg.properties = encode_properties(half_props).encode("utf-8")
    msg.sys_flag = (msg.sys_flag & ~TRANSACTION_MASK) | TRANSACTION_NOT_TYPE
    msg.topic = TRANS_HALF_TOPIC
    msg.queue_id = HALF_QUEUE_ID
    return msg


def ensure_half_topics(ctx: BrokerContext) -> None:
    """The half and op topics exist as 1-queue RW topics (``selectTopicConfig``)."""
    for topic in (TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC):
        if ctx.topics.select(topic) is None:
            ctx.topics.create_in_send_back(topic, 1, PERM_WRITE | PERM_READ)


@dataclass(slots=True)
class _CheckAction:
    """What a check pass decided for one unresolved half."""

    queue_offset: int
    message: MessageExt
    discard: bool


@dataclass(slots=True)
class _ScanResult:
    actions: list[_CheckAction]
    next_half_offset: int
    next_op_offset: int


class TransactionService:
    """END_TRANSACTION processing and the periodic transaction state check."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        cfg = ctx.store.config
        # a DLedger put waits for its quorum, and the log may share this loop: never on the loop
        self._sync = cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH or cfg.enable_dleger_commit_log
        #: Half queue offsets (own or original) resolved while this broker runs.
        self._resolved: set[int] = set()
        self._check_lock = asyncio.Lock()
        #: Completed check passes and CHECK_TRANSACTION_STATE requests sent (observability).
        self.check_passes = 0
        self.checks_sent = 0
        self.discarded = 0
        #: Asks producers of other protocols (gRPC) about a renewed half; True when one was asked.
        self.external_checker: Callable[[str, MessageExt], bool] | None = None

    async def _put(self, *msgs: BrokerMessage) -> PutMessageResult:
        """Store ``msgs`` in one append: after a crash all of them are there or none is."""
        store = self.ctx.store
        if self._sync or store.dispatch_behind_bytes() > store.config.max_dispatch_lag_bytes // 2:
            return await self.ctx.blocking(store.put_messages, msgs)
        return store.put_messages(msgs)

    # -- END_TRANSACTION --------------------------------------------------------------------
    async def end_transaction(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        ext = request.ext_fields
        producer_group = get_str(ext, "producerGroup")
        tran_state_offset = get_long(ext, "tranStateTableOffset")
        commit_log_offset = get_long(ext, "commitLogOffset")
        kind = get_int(ext, "commitOrRollback")
        from_check = get_bool(ext, "fromTransactionCheck")
        msg_id = opt_str(ext, "msgId") or ""
        if kind not in (TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE):
            if kind != TRANSACTION_NOT_TYPE:
                return create_response(request, ResponseCode.SYSTEM_ERROR, f"illegal commitOrRollback {kind}")
            log.info(
                "producer %s (group %s) reports transaction %s unknown%s",
                conn.remote_address,
                producer_group,
                msg_id,
                " on check" if from_check else "",
            )
            return None
        problem = await self.resolve(
            producer_group=producer_group,
            tran_state_offset=tran_state_offset,
            commit_log_offset=commit_log_offset,
            commit=kind == TRANSACTION_COMMIT_TYPE,
            msg_id=msg_id,
            client=conn.remote_address,
            from_check=from_check,
        )
        if problem:
            return create_response(request, ResponseCode.SYSTEM_ERROR, problem)
        return create_response(request, ResponseCode.SUCCESS)

    async def resolve(
        self,
        *,
        producer_group: str,
        tran_state_offset: int,
        commit_log_offset: int,
        commit: bool,
        msg_id: str = "",
        client: str = "",
        from_check: bool = False,
    ) -> str:
        """Commit or roll back the half at ``commit_log_offset``; "" on success, else what is
        wrong (the remark of a SYSTEM_ERROR answer). Also used by the gRPC endpoint."""
        ctx = self.ctx
        half = await ctx.blocking(ctx.store.look_message_by_offset, commit_log_offset)
        if half is None or half.topic != TRANS_HALF_TOPIC:
            return "Find prepared transaction message failed"
        problem = self._check_prepare_message(half, producer_group, tran_state_offset, commit_log_offset)
        if problem:
            return problem
        origin = _origin_offset(half)
        if half.queue_offset in self._resolved or origin in self._resolved:
            log.info("transaction of half %d (msg %s) already resolved; ignored", half.queue_offset, msg_id)
            return ""
        self._resolved.add(half.queue_offset)
        self._resolved.add(origin)
        if ctx.trace is not None:
            ctx.trace.end_transaction(client, producer_group, half, commit, from_check)
        if not commit:
            await self._put(self._op_message(half))
            return ""
        # The committed message and its op record go in one append (one commit point in the
        # CommitLog): a broker killed between two separate appends would have published the
        # message with no record that the half was resolved, and a commit retried after the
        # restart would publish it a second time (a window RocketMQ has).
        try:
            await self._put(
                self._end_message(half, tran_state_offset, commit_log_offset), self._op_message(half)
            )
        except Exception:
            self._resolved.discard(half.queue_offset)
            self._resolved.discard(origin)
            raise
        return ""

    @staticmethod
    def _check_prepare_message(
        half: MessageExt, producer_group: str, tran_state_offset: int, commit_log_offset: int
    ) -> str:
        pgroup = half.properties.get(PROPERTY_PRODUCER_GROUP)
        if pgroup != producer_group:
            return "The producer group wrong"
        if half.queue_offset != tran_state_offset:
            return "The transaction state table offset wrong"
        if half.commit_log_offset != commit_log_offset:
            return "The commit log offset wrong"
        return ""

    def _end_message(self, half: MessageExt, tran_state_offset: int, commit_log_offset: int) -> BrokerMessage:
        """``endMessageTransaction``: the committed message for the real topic."""
        props = dict(half.properties)
        topic = props.pop(PROPERTY_REAL_TOPIC, "")
        queue_id = int(props.pop(PROPERTY_REAL_QUEUE_ID, "0") or 0)
        props.pop(PROPERTY_TRANSACTION_PREPARED, None)
        props.pop(PROPERTY_TRANSACTION_CHECK_TIMES, None)
        props.pop(PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET, None)
        return BrokerMessage.from_ext(
            half,
            topic=topic,
            queue_id=queue_id,
            properties=props,
            sys_flag=(half.sys_flag & ~TRANSACTION_MASK) | TRANSACTION_COMMIT_TYPE,
            prepared_transaction_offset=commit_log_offset,
        )

    def _op_message(self, half: MessageExt) -> BrokerMessage:
        """``deletePrepareMessage``: the record of the half's resolution in the op topic."""
        ensure_half_topics(self.ctx)
        return BrokerMessage(
            topic=TRANS_OP_HALF_TOPIC,
            body=str(half.queue_offset).encode("ascii"),
            properties=encode_properties({PROPERTY_TAGS: OP_REMOVE_TAG}).encode("utf-8"),
            queue_id=half.queue_id,
            born_timestamp=time.time_ns() // 1_000_000,
            born_host=born_host_of(self.ctx.broker_addr),
        )

    # -- check service ----------------------------------------------------------------------
    async def check(self) -> None:
        """One pass of the transaction state check (none on a DLedger follower)."""
        if self._check_lock.locked() or not self.ctx.is_master:
            return
        async with self._check_lock:
            await self._check()
            self.check_passes += 1

    async def _check(self) -> None:
        ctx = self.ctx
        if ctx.store.find_consume_queue(TRANS_HALF_TOPIC, HALF_QUEUE_ID) is None:
            return
        start_ms = time.time_ns() // 1_000_000
        scan = await ctx.blocking(self._scan, start_ms)
        for action in scan.actions:
            half = action.message
            if action.queue_offset in self._resolved or _origin_offset(half) in self._resolved:
                continue
            if action.discard:
                await self._discard(half)
            else:
                await self._check_half(half)
        offsets = ctx.offsets
        offsets.commit_offset(
            ctx.broker_addr, TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, HALF_QUEUE_ID, scan.next_half_offset
        )
        offsets.commit_offset(
            ctx.broker_addr, TRANS_CHECK_GROUP, TRANS_OP_HALF_TOPIC, HALF_QUEUE_ID, scan.next_op_offset
        )
        self._resolved = {o for o in self._resolved if o >= scan.next_half_offset}

    def _scan(self, start_ms: int) -> _ScanResult:
        """Decide, from the store (in a worker thread), which halves to check or discard."""
        ctx = self.ctx
        cfg = ctx.config
        store = ctx.store
        half_cq = store.find_consume_queue(TRANS_HALF_TOPIC, HALF_QUEUE_ID)
        assert half_cq is not None
        half_offset = max(
            ctx.offsets.query_offset(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, HALF_QUEUE_ID),
            half_cq.min_offset_in_queue,
        )
        half_max = half_cq.max_offset_in_queue
        op_cq = store.find_consume_queue(TRANS_OP_HALF_TOPIC, HALF_QUEUE_ID)
        ops: list[tuple[int, int]] = []  # (op queue offset, half queue offset it resolves)
        op_offset = 0
        if op_cq is not None:
            op_offset = max(
                ctx.offsets.query_offset(TRANS_CHECK_GROUP, TRANS_OP_HALF_TOPIC, HALF_QUEUE_ID),
                op_cq.min_offset_in_queue,
            )
            for i in range(op_offset, op_cq.max_offset_in_queue):
                op = _message_at(ctx, TRANS_OP_HALF_TOPIC, i)
                resolved = -1
                if op is not None and op.tags == OP_REMOVE_TAG:
                    text = op.body.decode("ascii", "replace").strip()
                    resolved = number_property(text, -1)
                ops.append((i, resolved))
        removed = {h for _, h in ops if h >= 0}
        actions: list[_CheckAction] = []
        offset = half_offset
        while offset < half_max and offset - half_offset < MAX_SCAN_PER_PASS:
            if offset in removed:
                offset += 1
                continue
            half = _message_at(ctx, TRANS_HALF_TOPIC, offset)
            if half is None:
                offset += 1
                continue
            if half.store_timestamp >= start_ms:
                break
            if _origin_offset(half) in removed:
                offset += 1
                continue
            times = _check_times(half)
            if times >= cfg.transaction_check_max:
                actions.append(_CheckAction(offset, half, discard=True))
                offset += 1
                continue
            if start_ms - half.born_timestamp < cfg.transaction_timeout_ms:
                break
            actions.append(_CheckAction(offset, half, discard=False))
            offset += 1
        next_op = op_offset
        for op_index, resolved in ops:
            if resolved >= offset:
                break
            next_op = op_index + 1
        return _ScanResult(actions, offset, next_op)

    async def _discard(self, half: MessageExt) -> None:
        """``resolveDiscardMsg``: a half checked too often goes to TRANS_CHECK_MAX_TIME_TOPIC."""
        ctx = self.ctx
        if ctx.topics.select(TRANS_CHECK_MAX_TIME_TOPIC) is None:
            ctx.topics.create_in_send_back(TRANS_CHECK_MAX_TIME_TOPIC, 1, PERM_READ)
        msg = BrokerMessage.from_ext(
            half, topic=TRANS_CHECK_MAX_TIME_TOPIC, queue_id=0, properties=half.properties
        )
        result = await self._put(msg)
        self.discarded += 1
        log.warning(
            "half message %s of group %s checked %d times: moved to %s (%s)",
            half.uniq_key,
            half.properties.get(PROPERTY_PRODUCER_GROUP),
            _check_times(half),
            TRANS_CHECK_MAX_TIME_TOPIC,
            result.status.value,
        )

    async def _check_half(self, half: MessageExt) -> None:
        """``putBackHalfMsgQueue`` + ``resolveHalfMsg``: renew the half, ask its producer."""
        ctx = self.ctx
        props = dict(half.properties)
        props[PROPERTY_TRANSACTION_CHECK_TIMES] = str(_check_times(half) + 1)
        props[PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET] = str(_origin_offset(half))
        renewed = BrokerMessage.from_ext(
            half, topic=TRANS_HALF_TOPIC, queue_id=HALF_QUEUE_ID, properties=props
        )
        result = await self._put(renewed)
        group = props.get(PROPERTY_PRODUCER_GROUP, "")
        channels = [info.channel for info in ctx.producers.group_channels(group) if not info.channel.closed]
        if not channels and self.external_checker is not None:
            copy = await ctx.blocking(ctx.store.look_message_by_offset, result.physical_offset)
            if copy is not None and self.external_checker(group, copy):
                self.checks_sent += 1
                return
        if not channels:
            log.info("no live producer of group %s to check transaction %s", group, half.uniq_key)
            return
        record = await ctx.blocking(ctx.store.select_one_message_by_offset, result.physical_offset)
        if record is None:
            return
        uniq = props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, "")
        header = {
            "tranStateTableOffset": str(result.queue_offset),
            "commitLogOffset": str(result.physical_offset),
            "msgId": uniq,
            "transactionId": uniq,
            "offsetMsgId": result.msg_id,
            "topic": props.get(PROPERTY_REAL_TOPIC, ""),
            "brokerName": ctx.config.broker_name,
        }
        request = create_request(RequestCode.CHECK_TRANSACTION_STATE, header, record, oneway=True)
        channel = random.choice(channels)
        try:
            channel.send_oneway(request)
        except ConnectionClosed:
            log.info("producer channel %s closed before the transaction check", channel.remote_address)
            return
        self.checks_sent += 1


def _message_at(ctx: BrokerContext, topic: str, offset: int) -> MessageExt | None:
    cq = ctx.store.find_consume_queue(topic, HALF_QUEUE_ID)
    unit = cq.get_unit(offset) if cq is not None else None
    if unit is None or unit.is_filler:
        return None
    return ctx.store.look_message_by_offset(unit.offset, unit.size)


def _check_times(half: MessageExt) -> int:
    raw = half.properties.get(PROPERTY_TRANSACTION_CHECK_TIMES, "0")
    return number_property(raw, 0)


def _origin_offset(half: MessageExt) -> int:
    """The queue offset of the first copy of a half (checked copies name it)."""
    raw = half.properties.get(PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET, "")
    return number_property(raw, half.queue_offset)


__all__ = [
    "OP_REMOVE_TAG",
    "PROPERTY_TRANSACTION_CHECK_TIMES",
    "TRANS_CHECK_GROUP",
    "TransactionService",
    "ensure_half_topics",
    "is_half_message",
    "to_half_message",
]
