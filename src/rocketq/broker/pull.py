"""PULL_MESSAGE (11): read a consume queue from an offset, hold the pull when there is nothing.

Checks, in RocketMQ's order (``PullMessageProcessor.processRequest``)::

    broker readable                          else 16 NO_PERMISSION
    subscription group found / auto-created  else 26; group consume disabled → 16
    topic exists, readable, queueId < readQueueNums     else 17 / 16 / 29
    subscription: SUBSCRIPTION flag → parse the request's expression (23 on error);
                  otherwise the heartbeat's (24 none, 25 older subVersion than the pull's);
                  without either, an expression the request carries anyway is used
    SQL92 with enable_property_filter off    1 SYSTEM_ERROR

Then the store read and the status → code mapping. The read runs on the event loop when the
first record is within RocketMQ's in-memory window (``checkInDiskByConsumeOffset``: less than 40 %
of RAM behind the CommitLog end, so in the page cache) or the queue has nothing at the offset;
older data is read in a worker thread, as it may wait for the disk::

    GetMessageStatus                          code                       nextBeginOffset
    FOUND                                     0 SUCCESS (body = records) last scanned + 1
    NO_MATCHED_MESSAGE, MESSAGE_WAS_REMOVING  20 PULL_RETRY_IMMEDIATELY  last scanned + 1
    OFFSET_OVERFLOW_ONE, OFFSET_FOUND_NULL    19 PULL_NOT_FOUND          offset
    NO_MESSAGE_IN_QUEUE, NO_MATCHED_LOGIC_QUEUE  21 if offset != 0 else 19   0
    OFFSET_TOO_SMALL                          21 PULL_OFFSET_MOVED       min offset
    OFFSET_OVERFLOW_BADLY                     21 PULL_OFFSET_MOVED       max (0 when min is 0)

Every response carries nextBeginOffset, minOffset, maxOffset and suggestWhichBrokerId (Java
clients unbox all four; ali-ons reads them on every code); the remark is the status name.

Who may answer 21 PULL_OFFSET_MOVED (else 20 PULL_RETRY_IMMEDIATELY, nextBeginOffset = the
requested offset, as a RocketMQ slave with ``offsetCheckInSlave`` off answers): the master
(``ctx.is_master``, brokerId 0) only. In DLedger mode also only the master of the log's current
term (``DLedgerRoleHandler.leads_current_term``), and for an offset past the queue's end only
when it is beyond the queue's next offset in the queue-offset table, so no message, committed
or not, can be there: a ConsumeQueue that is merely behind what the member holds (dispatch not
there yet, a queue being rebuilt, a member whose queues lack entries it has) never moves a
consumer back to 0 on a fail-over (issue 17; docs/replication.md, Roles). Every move answered
is logged at INFO (the queue's bounds, the requested and the new offset).

A SQL92 subscription is compiled once per (group, topic, expression, subVersion); the records the
store found are then matched on their properties (plus ``TAGS``) and the rejected ones dropped,
with nextBeginOffset still past them, as RocketMQ counts filtered messages as consumed. When
nothing is left, the answer is 20 (NO_MATCHED_MESSAGE) and the client pulls on at once; a held
pull re-runs through the same filter.

COMMIT_OFFSET flag: the request's ``commitOffset`` is stored as the group's offset, on the first
execution only. SUSPEND flag and code 19: the pull is held (:mod:`rocketq.broker.long_polling`)
for ``suspendTimeoutMillis`` (``short_polling_time_mills`` without long polling; never longer
than ``long_polling_max_hold_ms``, well under the clients' 30 s timeout), then executed once
more without suspension or commit, and that answer is sent.
"""

from __future__ import annotations

import logging
import time

from rocketq.broker.consumer_manage import check_in_disk_by_consume_offset
from rocketq.broker.context import BrokerContext
from rocketq.broker.long_polling import CLOSED
from rocketq.config import BrokerRole
from rocketq.errors import (
    InvalidParameter,
    NoPermission,
    ResponseCode,
    RocketqError,
    SubscriptionGroupNotExist,
    SubscriptionNotExist,
    SubscriptionNotLatest,
    TopicNotExist,
)
from rocketq.filter import MessageFilter, compile_filter
from rocketq.message import decode_properties
from rocketq.protocol.headers import PullMessageRequestHeader, decode_pull_header
from rocketq.protocol.heartbeat import EXPRESSION_TAG, SubscriptionData, build_subscription
from rocketq.protocol.record import RecordKind, decode_record
from rocketq.protocol.route import MASTER_ID
from rocketq.protocol.topic import is_readable
from rocketq.remoting.command import RemotingCommand, create_response
from rocketq.remoting.connection import Connection
from rocketq.store.store_queries import GetMessageResult, GetMessageStatus

log = logging.getLogger(__name__)

FAQ_URL = "https://rocketmq.apache.org/docs/bestPractice/06FAQ"
#: Compiled SQL92 filters kept per (group, topic, type, expression, subVersion).
FILTER_CACHE_SIZE = 1024

FilterKey = tuple[str, str, str, str, int]


def filter_pulled(result: GetMessageResult, message_filter: MessageFilter) -> None:
    """Drop the records ``message_filter`` rejects (RocketMQ's ``isMatchedByCommitLog``).

    ``next_begin_offset`` stays past them: filtered messages count as consumed by this pull.
    Nothing left of a FOUND result makes it NO_MATCHED_MESSAGE (the client pulls on at once).
    """
    if not result.buffers:
        return
    offsets = result.queue_offsets if len(result.queue_offsets) == len(result.buffers) else None
    kept: list[bytes] = []
    kept_offsets: list[int] = []
    for i, buf in enumerate(result.buffers):
        view = decode_record(buf, 0, check_crc=False, read_body=False)
        if view.kind is not RecordKind.MESSAGE:
            continue
        props = decode_properties(view.properties)
        if message_filter.match(props.get("TAGS"), props):
            kept.append(buf)
            if offsets is not None:
                kept_offsets.append(offsets[i])
    result.buffers = kept
    result.queue_offsets = kept_offsets
    result.buffer_total_size = sum(len(b) for b in kept)
    if not kept and result.status is GetMessageStatus.FOUND:
        result.status = GetMessageStatus.NO_MATCHED_MESSAGE


def pull_status_to_code(status: GetMessageStatus, request_offset: int) -> int:
    """The response code RocketMQ answers a pull with, for a store status."""
    if status is GetMessageStatus.FOUND:
        return ResponseCode.SUCCESS
    if status in (GetMessageStatus.NO_MATCHED_MESSAGE, GetMessageStatus.MESSAGE_WAS_REMOVING):
        return ResponseCode.PULL_RETRY_IMMEDIATELY
    if status in (GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, GetMessageStatus.NO_MESSAGE_IN_QUEUE):
        return ResponseCode.PULL_OFFSET_MOVED if request_offset != 0 else ResponseCode.PULL_NOT_FOUND
    if status in (GetMessageStatus.OFFSET_OVERFLOW_ONE, GetMessageStatus.OFFSET_FOUND_NULL):
        return ResponseCode.PULL_NOT_FOUND
    if status in (GetMessageStatus.OFFSET_TOO_SMALL, GetMessageStatus.OFFSET_OVERFLOW_BADLY):
        return ResponseCode.PULL_OFFSET_MOVED
    return ResponseCode.SYSTEM_ERROR


def pull_response_fields(result: GetMessageResult, suggest_broker_id: int = MASTER_ID) -> dict[str, str]:
    """``PullMessageResponseHeader``: always all four fields."""
    return {
        "nextBeginOffset": str(result.next_begin_offset),
        "minOffset": str(result.min_offset),
        "maxOffset": str(result.max_offset),
        "suggestWhichBrokerId": str(suggest_broker_id),
    }


def _pull_text(header: PullMessageRequestHeader, result: GetMessageResult) -> str:
    """The queue, group, requested offset and queue bounds of a pull, for the offset-move log."""
    return (
        f"{header.topic}-{header.queue_id} of group {header.consumer_group}, requested offset "
        f"{header.queue_offset}, queue [{result.min_offset}, {result.max_offset})"
    )


class PullMessageProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self._filters: dict[FilterKey, MessageFilter] = {}
        self._not_moved_logged = float("-inf")

    def _message_filter(self, group: str, sub: SubscriptionData) -> MessageFilter | None:
        """The compiled property filter of a non-TAG subscription (cached), else None."""
        if sub.expression_type == EXPRESSION_TAG or sub.class_filter_mode:
            return None
        key = (group, sub.topic, sub.expression_type, sub.sub_string, sub.sub_version)
        found = self._filters.get(key)
        if found is None:
            if len(self._filters) >= FILTER_CACHE_SIZE:
                self._filters.clear()
            found = self._filters[key] = compile_filter(sub.expression_type, sub.sub_string)
        return found

    def _read(
        self,
        header: PullMessageRequestHeader,
        max_count: int,
        codes: frozenset[int] | None,
        max_bytes: int,
        message_filter: MessageFilter | None,
    ) -> GetMessageResult:
        """Worker thread: the store read, then the property filter over what it found."""
        result = self.ctx.store.get_message(
            header.consumer_group,
            header.topic,
            header.queue_id,
            header.queue_offset,
            max_count,
            codes,
            max_bytes=max_bytes,
        )
        if message_filter is not None:
            filter_pulled(result, message_filter)
        return result

    async def process(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        header = decode_pull_header(request.ext_fields)
        return await self._process(conn, request, header, allow_suspend=True)

    def _subscription(self, conn: Connection, header: PullMessageRequestHeader) -> SubscriptionData:
        ctx = self.ctx
        group = header.consumer_group
        topic = header.topic
        if header.has_subscription_flag:
            return build_subscription(topic, header.subscription, header.expression_type, header.sub_version)
        info = ctx.consumers.get(group)
        if info is None or topic not in info.subscriptions:
            if header.subscription is not None:
                # no SUBSCRIPTION flag but an expression all the same (no Java or ali-ons client
                # sends that): use it rather than refusing the pull
                return build_subscription(
                    topic, header.subscription, header.expression_type, header.sub_version
                )
            if info is None:
                raise SubscriptionNotExist(f"the consumer's group info not exist, group {group}")
        group_cfg = ctx.groups.get(group)
        if (
            group_cfg is not None
            and not group_cfg.consume_broadcast_enable
            and info.message_model == "BROADCASTING"
        ):
            raise NoPermission(f"the consumer group[{group}] can not consume by broadcast way")
        sub = info.subscriptions.get(topic)
        if sub is None:
            raise SubscriptionNotExist(f"the consumer's subscription not exist, group {group} topic {topic}")
        if sub.sub_version < header.sub_version:
            raise SubscriptionNotLatest(
                f"the consumer's subscription not latest, group {group} topic {topic}: broker has "
                f"subVersion {sub.sub_version}, the pull refers to {header.sub_version}"
            )
        return sub

    def process_now(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        """The answer to a pull computed inside the transport's ``data_received``, or None to
        take :meth:`process` (a task) as before.

        Only a pull whose queue already has a message at its offset is answered here (the read
        is a memory copy: the records are within the in-memory window); a pull that finds
        nothing may be held, and a read of older data goes through a worker thread, so both
        keep the task path. Saves a task and its loop iterations per pull that finds messages.
        The checks and the read are the same code as the task path's, in the same order.
        """
        header = decode_pull_header(request.ext_fields)
        if self.ctx.store.get_max_offset(header.topic, header.queue_id) <= header.queue_offset:
            return None  # nothing there yet (or an unknown queue): the task path decides
        plan = self._plan(conn, header)
        if check_in_disk_by_consume_offset(
            self.ctx.store, header.topic, header.queue_id, header.queue_offset
        ):
            return None
        result = self._read(header, *plan)
        code = self._code(header, result)
        if code == ResponseCode.PULL_NOT_FOUND and header.has_suspend_flag:
            return None  # raced with a truncation: the task path reads again and may hold it
        return self._answer(conn, request, header, result, code, allow_suspend=True)

    def _code(self, header: PullMessageRequestHeader, result: GetMessageResult) -> int:
        """The response code of a read (:func:`pull_status_to_code`) under RocketMQ's slave rule
        (``nextOffsetCorrection`` with ``offsetCheckInSlave`` off): a broker that is not the
        master (a slave, a DLedger follower, a new leader still catching up) may not have
        dispatched what the consumer already read, so it never moves a consumer's offset:
        PULL_OFFSET_MOVED becomes PULL_RETRY_IMMEDIATELY at the requested offset. (Found by the
        chaos campaign, seed 128: consumers pulled from a restarted member before it had rebuilt
        its queues, were moved to offset 0 and read every queue again.) In DLedger mode the
        master moves an offset only when :meth:`_may_move` proves it wrong. Every move answered
        is logged at INFO (the queue's bounds, the requested offset, the new one)."""
        ctx = self.ctx
        code = pull_status_to_code(result.status, header.queue_offset)
        if code != ResponseCode.PULL_OFFSET_MOVED:
            return code
        if ctx.is_master and ctx.config.broker_id == MASTER_ID:
            beyond = self._may_move(header, result)
            if beyond is not None:
                log.info(
                    "PULL_OFFSET_MOVED as master: %s%s, %s: next offset %d",
                    _pull_text(header, result),
                    beyond,
                    result.status.value,
                    result.next_begin_offset,
                )
                return code
        result.next_begin_offset = header.queue_offset
        return ResponseCode.PULL_RETRY_IMMEDIATELY

    def _may_move(self, header: PullMessageRequestHeader, result: GetMessageResult) -> str | None:
        """Whether the master may move the consumer's offset: None when not, else what the log
        line adds. Always on a plain broker. In DLedger mode only the master of the log's
        current term moves one (:meth:`DLedgerRoleHandler.leads_current_term`), and past the
        queue's end (OFFSET_OVERFLOW_BADLY, NO_MESSAGE_IN_QUEUE, no queue) only when the
        requested offset is beyond the queue's next offset in the queue-offset table: the table
        was rebuilt from the queues after every committed entry was dispatched, and every
        message appended since counts in it, so no message of the group, committed or not, is
        at or after that offset. A queue that is only behind (dispatch not there yet, a queue
        being rebuilt, a member whose queues lack entries it has) never moves a consumer back:
        PULL_RETRY_IMMEDIATELY at the requested offset, as on a slave."""
        role = self.ctx.dledger_role
        if role is None:
            return ""
        term = role.role.term
        if not role.leads_current_term():
            self._not_moved(header, result, f"not the master of the log's term (applied term {term})")
            return None
        if result.status is GetMessageStatus.OFFSET_TOO_SMALL:  # forward, to the queue's minimum
            return f", term {term}"
        assigned = role.store.next_queue_offset(header.topic, header.queue_id)
        if header.queue_offset > assigned:
            return f", term {term}, next queue offset {assigned}"
        self._not_moved(header, result, f"the queue's next offset is {assigned} (term {term})")
        return None

    def _not_moved(self, header: PullMessageRequestHeader, result: GetMessageResult, why: str) -> None:
        """Log (INFO, at most once a second) a move a DLedger master did not answer."""
        now = time.monotonic()
        if now - self._not_moved_logged < 1.0:
            return
        self._not_moved_logged = now
        log.info(
            "PULL_OFFSET_MOVED not answered: %s, %s: %s; PULL_RETRY_IMMEDIATELY at the requested offset",
            _pull_text(header, result),
            result.status.value,
            why,
        )

    def _plan(
        self, conn: Connection, header: PullMessageRequestHeader
    ) -> tuple[int, frozenset[int] | None, int, MessageFilter | None]:
        """The checks of the module docstring, then (max count, tags codes, max bytes, property
        filter) of the read."""
        ctx = self.ctx
        cfg = ctx.config
        group = header.consumer_group
        topic = header.topic
        if not is_readable(cfg.broker_permission):
            raise NoPermission(f"the broker[{cfg.broker_ip1}] pulling message is forbidden")
        group_cfg = ctx.groups.find(group)
        if group_cfg is None:
            raise SubscriptionGroupNotExist(f"subscription group [{group}] does not exist, {FAQ_URL}")
        if not group_cfg.consume_enable:
            raise NoPermission(f"subscription group no permission, {group}")
        tc = ctx.topics.select(topic)
        if tc is None:
            raise TopicNotExist(f"topic[{topic}] not exist, apply first please! {FAQ_URL}")
        if not tc.readable:
            raise NoPermission(f"the topic[{topic}] pulling message is forbidden")
        if not 0 <= header.queue_id < tc.read_queue_nums:
            raise InvalidParameter(
                f"queueId[{header.queue_id}] is illegal, topic:[{topic}] "
                f"topicConfig.readQueueNums:[{tc.read_queue_nums}] consumer:[{conn.remote_address}]"
            )
        sub = self._subscription(conn, header)
        if sub.expression_type != EXPRESSION_TAG and not cfg.enable_property_filter:
            raise RocketqError(
                f"The broker does not support consumer to filter message by {sub.expression_type}"
            )
        codes = None if header.has_class_filter_flag else sub.tags_codes()
        message_filter = self._message_filter(group, sub)

        max_count = max(1, min(header.max_msg_nums, cfg.max_transfer_count_on_message_in_memory))
        max_bytes = cfg.max_transfer_bytes_on_message_in_memory
        if header.max_msg_bytes is not None and header.max_msg_bytes > 0:
            max_bytes = min(max_bytes, header.max_msg_bytes)
        return max_count, codes, max_bytes, message_filter

    def _answer(
        self,
        conn: Connection,
        request: RemotingCommand,
        header: PullMessageRequestHeader,
        result: GetMessageResult,
        code: int,
        *,
        allow_suspend: bool,
    ) -> RemotingCommand:
        """The offset commit (first execution only) and the response of a pull that is not held."""
        if allow_suspend:
            self._commit_pulled_offset(conn, header)
        body = result.body if code == ResponseCode.SUCCESS else b""
        if self.ctx.trace is not None and body:
            self.ctx.trace.delivered(conn.remote_address, header.consumer_group, header.topic, result.buffers)
        metrics = self.ctx.metrics
        if metrics is not None and body:
            metrics.pulled(
                header.topic,
                header.consumer_group,
                result.message_count,
                len(body),
                header.queue_id,
                result.next_begin_offset,
            )
        return create_response(
            request,
            code,
            result.status.value,
            ext_fields=pull_response_fields(result),
            body=body,
        )

    def _commit_pulled_offset(self, conn: Connection, header: PullMessageRequestHeader) -> None:
        """Store the offset the consumer sent along with its pull (never on a slave, nor on a
        DLedger follower)."""
        ctx = self.ctx
        if (
            header.has_commit_offset_flag
            and ctx.is_master
            and ctx.store.config.broker_role is not BrokerRole.SLAVE
        ):
            ctx.offsets.commit_offset(
                conn.remote_address,
                header.consumer_group,
                header.topic,
                header.queue_id,
                header.commit_offset,
            )
            if self.ctx.trace is not None:
                self.ctx.trace.committed(
                    conn.remote_address,
                    header.consumer_group,
                    header.topic,
                    header.queue_id,
                    header.commit_offset,
                )

    async def _process(
        self,
        conn: Connection,
        request: RemotingCommand,
        header: PullMessageRequestHeader,
        *,
        allow_suspend: bool,
    ) -> RemotingCommand | None:
        ctx = self.ctx
        cfg = ctx.config
        plan = self._plan(conn, header)
        _, codes, _, message_filter = plan
        if check_in_disk_by_consume_offset(ctx.store, header.topic, header.queue_id, header.queue_offset):
            result = await ctx.blocking(self._read, header, *plan)
        else:
            # The records are within RocketMQ's in-memory window (the page cache), or there are
            # none: the read is a memory copy, done here rather than through a worker thread
            # (which costs two thread hand-offs and a GIL round trip per pull).
            result = self._read(header, *plan)
        code = self._code(header, result)

        if code == ResponseCode.PULL_NOT_FOUND and allow_suspend and header.has_suspend_flag:
            self._commit_pulled_offset(conn, header)
            hold_ms = (
                header.suspend_timeout_millis if cfg.long_polling_enable else cfg.short_polling_time_mills
            )
            hold_ms = max(0, min(hold_ms, cfg.long_polling_max_hold_ms))
            reason = await ctx.hold.suspend(
                header.topic,
                header.queue_id,
                header.queue_offset,
                codes,
                hold_ms / 1000,
                channel=conn,
                message_filter=message_filter,
            )
            if reason == CLOSED:
                return None
            return await self._process(conn, request, header, allow_suspend=False)
        return self._answer(conn, request, header, result, code, allow_suspend=allow_suspend)


__all__ = [
    "PullMessageProcessor",
    "filter_pulled",
    "pull_response_fields",
    "pull_status_to_code",
]
