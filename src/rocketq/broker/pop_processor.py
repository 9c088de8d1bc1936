"""POP_MESSAGE (200050), ACK_MESSAGE (200051), CHANGE_MESSAGE_INVISIBLETIME (200053) → PopService.

RocketMQ 5's remoting pop codes, as its proxy (cluster mode) and its remoting pop consumers send
them, served by the broker's :class:`~rocketq.broker.pop.service.PopService` (the engine the gRPC
endpoint uses, so both paths share one state per group)::

    code     request header fields (RocketMQ names)        response
    200050   consumerGroup, topic, queueId (-1 = any),      0 + body: one stored-message record per
             maxMsgNums, invisibleTime (ms), pollTime (ms),   message (the PULL body encoding), or
             bornTime, initMode, expType (TAG | SQL92),       19 PULL_NOT_FOUND after pollTime;
             exp, order                                       ext popTime, invisibleTime, reviveQid,
                                                              restNum
    200051   consumerGroup, topic, queueId, extraInfo,      0
             offset
    200053   consumerGroup, topic, queueId, extraInfo,      0; ext extraInfo = the new handle,
             offset, invisibleTime (ms)                       popTime, invisibleTime, reviveQid

Every popped record carries the delivery's receipt handle in the property ``POP_CK`` (RocketMQ
puts its own checkpoint string there; ours is the PopService handle, opaque to the client) and
``reconsumeTimes`` = delivery attempt - 1. ``extraInfo`` of an ack / change is that ``POP_CK``
value; ``queueId`` and ``offset``, when given, must name the same message as the handle.
``initMode`` and ``bornTime`` are accepted and ignored (a new group starts at the queue's first
offset, as PopService does). ``order=true`` or a group configured ``consumeMessageOrderly``
pops FIFO.

Errors are answered with the code of the rocketq error (29 INVALID_PARAMETER for a bad, stale or
expired handle; 17 TOPIC_NOT_EXIST; 14 when the pop service is not running).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from rocketq.broker.context import BrokerContext
from rocketq.broker.pop.receipt import decode_receipt
from rocketq.broker.pop.service import PoppedMessage, PopService
from rocketq.errors import InvalidReceiptHandle, ResponseCode, RocketqError, ServiceNotAvailable
from rocketq.filter import compile_filter
from rocketq.message import PROPERTY_POP_CK, encode_properties, pack_socket_addr
from rocketq.protocol.headers import MAX_POLL_MS, get_bool, get_int, get_long, get_str, opt_str
from rocketq.protocol.record import encode_record
from rocketq.remoting.command import RemotingCommand, create_response
from rocketq.remoting.connection import Connection

log = logging.getLogger(__name__)


def encode_popped(items: list[PoppedMessage]) -> bytes:
    """The POP_MESSAGE body: one record per message, with ``POP_CK`` and ``reconsumeTimes`` set."""
    out: list[bytes] = []
    for item in items:
        msg = item.message
        props = dict(msg.properties)
        props[PROPERTY_POP_CK] = item.receipt_handle
        out.append(
            encode_record(
                topic=msg.topic,
                body=msg.body,
                properties=encode_properties(props).encode("utf-8"),
                queue_id=item.queue_id,
                flag=msg.flag,
                queue_offset=item.queue_offset,
                physical_offset=msg.commit_log_offset,
                sys_flag=msg.sys_flag,
                born_timestamp=msg.born_timestamp,
                born_host=pack_socket_addr(msg.born_host or "127.0.0.1:0"),
                store_timestamp=msg.store_timestamp,
                store_host=pack_socket_addr(msg.store_host or "127.0.0.1:0"),
                reconsume_times=item.delivery_attempt - 1,
                prepared_transaction_offset=msg.prepared_transaction_offset,
            )
        )
    return b"".join(out)


def _check_names(ext: Mapping[str, str], group: str, topic: str, handle: str) -> None:
    """``queueId`` / ``offset`` of an ack or change, when present, must match the handle."""
    receipt = decode_receipt(group, topic, handle)
    queue_id = opt_str(ext, "queueId")
    offset = opt_str(ext, "offset")
    if queue_id is not None and get_int(ext, "queueId") != receipt.queue_id:
        raise InvalidReceiptHandle(f"queueId={queue_id} does not match the handle's queue {receipt.queue_id}")
    if offset is not None and get_long(ext, "offset") != receipt.queue_offset:
        raise InvalidReceiptHandle(
            f"offset={offset} does not match the handle's offset {receipt.queue_offset}"
        )


class PopMessageProcessor:
    """The three remoting pop handlers of a broker."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def _pop(self) -> PopService:
        pop = self.ctx.pop
        if pop is None:
            raise ServiceNotAvailable("pop service is not running")
        return pop

    @staticmethod
    def _refused(request: RemotingCommand, what: str, exc: Exception) -> RemotingCommand:
        if isinstance(exc, RocketqError):
            log.info("%s refused: %s", what, exc)
            return create_response(request, exc.code, str(exc) or type(exc).__name__)
        log.exception("%s failed", what)
        return create_response(request, ResponseCode.SYSTEM_ERROR, f"{what} failed: {exc}")

    async def pop_message(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        ext = request.ext_fields
        try:
            group = get_str(ext, "consumerGroup")
            topic = get_str(ext, "topic")
            queue_id = get_int(ext, "queueId", -1)
            max_nums = get_int(ext, "maxMsgNums")
            invisible_ms = get_long(ext, "invisibleTime")
            poll_ms = max(0, min(get_long(ext, "pollTime", 0), MAX_POLL_MS))
            compiled = compile_filter(opt_str(ext, "expType"), opt_str(ext, "exp") or "*")
            cfg = self.ctx.groups.find(group)
            fifo = get_bool(ext, "order") or bool(cfg is not None and cfg.consume_message_orderly)
            pop_time_ms = time.time_ns() // 1_000_000
            popped = await self._pop().receive(
                group=group,
                topic=topic,
                queue_id=None if queue_id < 0 else queue_id,
                max_messages=max_nums,
                invisible_ms=invisible_ms,
                long_poll_ms=poll_ms,
                fifo=fifo,
                message_filter=lambda m: compiled.match(m.tags, m.properties),
            )
        except Exception as exc:
            return self._refused(request, "POP_MESSAGE", exc)
        fields = {
            "popTime": str(pop_time_ms),
            "invisibleTime": str(invisible_ms),
            "reviveQid": "0",
            "restNum": "0",
        }
        if not popped:
            return create_response(request, ResponseCode.PULL_NOT_FOUND, "no new message", fields)
        return create_response(request, ResponseCode.SUCCESS, None, fields, encode_popped(popped))

    async def ack_message(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        ext = request.ext_fields
        try:
            group = get_str(ext, "consumerGroup")
            topic = get_str(ext, "topic")
            handle = get_str(ext, "extraInfo")
            _check_names(ext, group, topic, handle)
            await self._pop().ack(group=group, topic=topic, receipt_handle=handle)
        except Exception as exc:
            return self._refused(request, "ACK_MESSAGE", exc)
        return create_response(request, ResponseCode.SUCCESS)

    async def change_invisible_time(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand | None:
        ext = request.ext_fields
        try:
            group = get_str(ext, "consumerGroup")
            topic = get_str(ext, "topic")
            handle = get_str(ext, "extraInfo")
            invisible_ms = get_long(ext, "invisibleTime")
            _check_names(ext, group, topic, handle)
            pop_time_ms = time.time_ns() // 1_000_000
            new_handle = await self._pop().change_invisible(
                group=group, topic=topic, receipt_handle=handle, invisible_ms=invisible_ms
            )
        except Exception as exc:
            return self._refused(request, "CHANGE_MESSAGE_INVISIBLETIME", exc)
        fields = {
            "extraInfo": new_handle,
            "popTime": str(pop_time_ms),
            "invisibleTime": str(invisible_ms),
            "reviveQid": "0",
        }
        return create_response(request, ResponseCode.SUCCESS, None, fields)


__all__ = ["PopMessageProcessor", "encode_popped"]
