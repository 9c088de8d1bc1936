"""Conversions between the gRPC ``Message`` (apache.rocketmq.v2) and the store's records.

Pure functions, no I/O. How a gRPC message is kept in the store (the property names are
RocketMQ's, so the remoting side and Apache RocketMQ tools read the same record)::

    gRPC field                              store record
    --------------------------------------  -----------------------------------------------
    system_properties.message_id            UNIQ_KEY (echoed back in SendResultEntry)
    system_properties.tag                   TAGS
    system_properties.keys                  KEYS (space separated)
    system_properties.message_group         __SHARDINGKEY (FIFO: queue = hash(group) % n)
    system_properties.delivery_timestamp    TIMER_DELIVER_MS (epoch ms; seconds > 1e11 are ms)
    message_type TRANSACTION                TRAN_MSG=true, PGROUP=<topic> (the half message path)
    system_properties.born_timestamp        record born timestamp (ms)
    user_properties                         the remaining properties (reserved names refused)
    body                                    body (GZIP-encoded bodies are stored inflated)

A stored body with sysFlag COMPRESSED (a remoting producer's zlib body) goes out inflated; one
that does not inflate (a poison message) goes out as stored, logged at ERROR: the consumer acks
it or lets it reach the group's DLQ after its maximum deliveries, and the queue goes on.

On the way out every message carries ``body_encoding`` IDENTITY and a ``body_digest`` MD5 of 32
upper-case hex digits, as the Java proxy sends: the official SDKs refuse ENCODING_UNSPECIFIED
and flag a digest they compute differently as corrupted. MD5 is the one digest both compare the
same way (for CRC32 the Python SDK expects 8 upper-case hex digits, the Node.js SDK a decimal
number). The message type is derived from the properties, as RocketMQ 5 does
(``TopicMessageType.parseFromMessageProperty``): TRAN_MSG → TRANSACTION, a timer or delay
property → DELAY, __SHARDINGKEY → FIFO, otherwise NORMAL.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import zlib
from collections.abc import Mapping

from google.protobuf import duration_pb2, timestamp_pb2

from rocketq.errors import InvalidParameter
from rocketq.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_SHARDING_KEY,
    PROPERTY_TAGS,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    MessageExt,
)
from rocketq.proxy.v2 import definition_pb2 as pb

log = logging.getLogger(__name__)

PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
PROPERTY_START_DELIVER_TIME = "__STARTDELIVERTIME"
KEY_SEPARATOR = " "
#: ``delivery_timestamp.seconds`` above this is taken as milliseconds (some SDK versions send ms).
SECONDS_AS_MS_THRESHOLD = 100_000_000_000

#: Property names a user may not set (RocketMQ ``MessageConst.STRING_HASH_SET`` and the timer keys).
RESERVED_PROPERTIES = frozenset(
    {
        "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID", "TRAN_MSG", "PGROUP",
        "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG", "CORRECTION_FLAG",
        "MQ2_FLAG", "RECONSUME_TIME", "MSG_REGION", "TRACE_ON", "UNIQ_KEY", "MAX_RECONSUME_TIMES",
        "CONSUME_START_TIME", "TRAN_PREPARED_QUEUE_OFFSET", "TRANSACTION_CHECK_TIMES",
        "CHECK_IMMUNITY_TIME_IN_SECONDS", "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL",
        "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE", "__SHARDINGKEY", "POP_CK",
        "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "__STARTDELIVERTIME", "TIMER_OUT_MS",
        "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES", "TIMER_DEL_UNIQKEY", "__CRC32#",
    }
)  # fmt: skip

_TIMER_PROPERTIES = (
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_START_DELIVER_TIME,
)


class MessageTypeError(InvalidParameter):
    """A message whose fields contradict its declared type (gRPC MESSAGE_PROPERTY_CONFLICT_WITH_TYPE)."""


def body_digest_crc32(body: bytes) -> str:
    """CRC32 of ``body`` as the Python SDK compares it: 8 upper-case hex digits."""
    return format(zlib.crc32(body) & 0xFFFFFFFF, "08X")


def body_digest_md5(body: bytes) -> str:
    """MD5 of ``body`` as every SDK compares it: 32 upper-case hex digits."""
    return hashlib.md5(body, usedforsecurity=False).hexdigest().upper()


def timestamp_ms(ts: timestamp_pb2.Timestamp) -> int:
    """Epoch ms of a protobuf Timestamp; a ``seconds`` value that is clearly ms is taken as ms."""
    if ts.seconds > SECONDS_AS_MS_THRESHOLD:
        return int(ts.seconds)
    return int(ts.seconds) * 1000 + int(ts.nanos) // 1_000_000


def ms_timestamp(ms: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def duration_ms(d: duration_pb2.Duration) -> int:
    return int(d.seconds) * 1000 + int(d.nanos) // 1_000_000


def invisible_ms(d: duration_pb2.Duration) -> int:
    """The invisible duration of a ChangeInvisibleDuration in ms; InvalidParameter if negative."""
    ms = duration_ms(d)
    if ms < 0:
        raise InvalidParameter(f"invisible duration {ms} ms is negative")
    return ms


def ms_duration(ms: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def declared_type(msg: pb.Message) -> pb.MessageType:
    """The message type the client declared, or one derived from its fields when unspecified."""
    sp = msg.system_properties
    if sp.message_type != pb.MESSAGE_TYPE_UNSPECIFIED:
        return sp.message_type
    if sp.HasField("message_group"):
        return pb.FIFO
    if sp.HasField("delivery_timestamp"):
        return pb.DELAY
    return pb.NORMAL


def type_of_properties(props: Mapping[str, str]) -> pb.MessageType:
    """RocketMQ 5's message type of a stored message (``parseFromMessageProperty``)."""
    if props.get(PROPERTY_TRANSACTION_PREPARED, "").lower() == "true":
        return pb.TRANSACTION
    if any(k in props for k in _TIMER_PROPERTIES) or props.get(PROPERTY_DELAY_TIME_LEVEL, "0") not in (
        "",
        "0",
    ):
        return pb.DELAY
    if props.get(PROPERTY_SHARDING_KEY):
        return pb.FIFO
    return pb.NORMAL


def type_name(message_type: int) -> str:
    """The enum name of a message type, or its number when the client sent an unknown one."""
    try:
        return str(pb.MessageType.Name(message_type))
    except ValueError:
        return f"message type {message_type}"


def store_properties(msg: pb.Message, message_type: pb.MessageType, *, topic: str) -> dict[str, str]:
    """The record properties of a gRPC message (see the module table). Raises
    :class:`InvalidParameter` subclasses for reserved user property names or missing fields."""
    sp = msg.system_properties
    props: dict[str, str] = {}
    for key, value in msg.user_properties.items():
        if not key:
            raise ReservedPropertyError("user property with an empty name")
        if key in RESERVED_PROPERTIES:
            raise ReservedPropertyError(f"user property {key!r} is a reserved system property name")
        props[key] = value
    if not sp.message_id:
        raise InvalidParameter("message_id is required")
    props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = sp.message_id
    if sp.HasField("tag"):
        if not sp.tag.strip() or "|" in sp.tag:
            raise IllegalTagError(f"tag {sp.tag!r} is empty or contains '|'")
        props[PROPERTY_TAGS] = sp.tag
    keys = [k for k in sp.keys if k.strip()]
    if keys:
        props[PROPERTY_KEYS] = KEY_SEPARATOR.join(keys)
    has_group = sp.HasField("message_group")
    has_delay = sp.HasField("delivery_timestamp")
    if message_type == pb.FIFO:
        if not has_group or not sp.message_group:
            raise MessageTypeError("FIFO message without message_group")
        props[PROPERTY_SHARDING_KEY] = sp.message_group
    elif has_group:
        raise MessageTypeError(f"message_group set on a {type_name(message_type)} message")
    if message_type == pb.DELAY:
        if not has_delay:
            raise MessageTypeError("DELAY message without delivery_timestamp")
        props[PROPERTY_TIMER_DELIVER_MS] = str(timestamp_ms(sp.delivery_timestamp))
    elif has_delay:
        raise MessageTypeError(f"delivery_timestamp set on a {type_name(message_type)} message")
    if message_type == pb.TRANSACTION:
        props[PROPERTY_TRANSACTION_PREPARED] = "true"
        props[PROPERTY_PRODUCER_GROUP] = topic
    elif message_type not in (pb.NORMAL, pb.FIFO, pb.DELAY):
        raise MessageTypeError(f"message type {message_type} is not supported")
    return props


class ReservedPropertyError(InvalidParameter):
    """A user property named like a system property (gRPC ILLEGAL_MESSAGE_PROPERTY_KEY)."""


class IllegalTagError(InvalidParameter):
    """A tag that is blank or contains ``|`` (gRPC ILLEGAL_MESSAGE_TAG)."""


def decoded_body(msg: pb.Message, max_body_bytes: int) -> bytes:
    """The body as stored: GZIP bodies are inflated (bounded by ``max_body_bytes``)."""
    body = bytes(msg.body)
    if msg.system_properties.body_encoding == pb.GZIP:
        try:
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            out = d.decompress(body, max_body_bytes + 1)
        except zlib.error as exc:
            raise InvalidParameter(f"GZIP body does not inflate: {exc}") from None
        if not d.eof and len(out) <= max_body_bytes:
            raise InvalidParameter(
                f"GZIP body of {len(body)} bytes is truncated (the gzip stream does not end)"
            )
        return out
    return body


_SYS_FLAG_COMPRESSED = 0x1
#: A stored compressed body is inflated for gRPC consumers up to this size (a body that would
#: inflate further, a zlib bomb, is delivered as stored); producers check the 4 MiB message
#: limit before compressing, so real bodies stay far below it.
MAX_INFLATED_BODY_BYTES = 64 * 1024 * 1024


def delivered_body(ext: MessageExt) -> bytes:
    """The body a consumer gets: inflated when the record is marked zlib-compressed (sysFlag
    0x1, compression type 0 or 3); as stored, with an ERROR line, when it does not inflate."""
    if not ext.sys_flag & _SYS_FLAG_COMPRESSED:
        return ext.body
    problem = ""
    ctype = (ext.sys_flag & 0x700) >> 8
    if ctype in (0, 3):
        try:
            d = zlib.decompressobj()
            out = d.decompress(ext.body, MAX_INFLATED_BODY_BYTES + 1)
            if d.eof:
                return out
            problem = (
                f"body marked compressed inflates beyond {MAX_INFLATED_BODY_BYTES} B"
                if len(out) > MAX_INFLATED_BODY_BYTES
                else "body marked compressed is truncated (the zlib stream does not end)"
            )
        except zlib.error as exc:
            problem = f"body marked compressed does not inflate: {exc}"
    else:
        problem = f"body compressed with type {ctype}; only zlib is supported"
    log.error(
        "poison message: topic %s queue %d offset %d (commit-log offset %d, sysFlag 0x%X): %s; "
        "delivered with its body as stored",
        ext.topic, ext.queue_id, ext.queue_offset, ext.commit_log_offset, ext.sys_flag, problem,
    )  # fmt: skip
    return ext.body


def born_timestamp_ms(msg: pb.Message, now_ms: int) -> int:
    sp = msg.system_properties
    return timestamp_ms(sp.born_timestamp) if sp.HasField("born_timestamp") else now_ms


def user_properties(props: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in props.items() if k not in RESERVED_PROPERTIES}


def to_grpc_message(
    ext: MessageExt,
    *,
    topic: str | None = None,
    namespace: str = "",
    receipt_handle: str | None = None,
    delivery_attempt: int | None = None,
    invisible_ms: int | None = None,
) -> pb.Message:
    """A stored message as the SDKs read it (see the module docstring)."""
    props = ext.properties
    body = delivered_body(ext)
    sp = pb.SystemProperties(
        message_id=props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or ext.msg_id,
        body_digest=pb.Digest(type=pb.MD5, checksum=body_digest_md5(body)),
        body_encoding=pb.IDENTITY,
        message_type=type_of_properties(props),
        born_timestamp=ms_timestamp(ext.born_timestamp),
        born_host=ext.born_host.rsplit(":", 1)[0] if ext.born_host else "",
        store_timestamp=ms_timestamp(ext.store_timestamp),
        store_host=ext.store_host,
        queue_id=ext.queue_id,
        queue_offset=ext.queue_offset,
    )
    tags = props.get(PROPERTY_TAGS)
    if tags:
        sp.tag = tags
    keys = [k for k in props.get(PROPERTY_KEYS, "").split(KEY_SEPARATOR) if k]
    if keys:
        sp.keys.extend(keys)
    group = props.get(PROPERTY_SHARDING_KEY)
    if group:
        sp.message_group = group
    deliver = props.get(PROPERTY_TIMER_DELIVER_MS, "")
    if deliver.isdigit():
        sp.delivery_timestamp.CopyFrom(ms_timestamp(int(deliver)))
    if receipt_handle is not None:
        sp.receipt_handle = receipt_handle
    if delivery_attempt is not None:
        sp.delivery_attempt = delivery_attempt
    if invisible_ms is not None:
        sp.invisible_duration.CopyFrom(ms_duration(invisible_ms))
    return pb.Message(
        topic=pb.Resource(name=topic if topic is not None else ext.topic, resource_namespace=namespace),
        user_properties=user_properties(props),
        system_properties=sp,
        body=body,
    )


def gzip_body(body: bytes) -> bytes:
    """GZIP-encode a body (used by tests and load generators that send GZIP bodies)."""
    return gzip.compress(body)


__all__ = [
    "RESERVED_PROPERTIES",
    "IllegalTagError",
    "MessageTypeError",
    "ReservedPropertyError",
    "body_digest_crc32",
    "body_digest_md5",
    "born_timestamp_ms",
    "declared_type",
    "decoded_body",
    "delivered_body",
    "duration_ms",
    "ms_duration",
    "ms_timestamp",
    "store_properties",
    "timestamp_ms",
    "to_grpc_message",
    "type_of_properties",
]
