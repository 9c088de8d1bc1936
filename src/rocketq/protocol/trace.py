"""Message trace records: the text RocketMQ's clients (``enableMsgTrace``) and rocketq's broker
write to the trace topic (default ``RMQ_SYS_TRACE_TOPIC``), and that ``queryMsgTraceById`` reads.

A trace message's body is UTF-8 text: records, each ended by ``\\x02`` (FIELD_SPLITOR), their
fields separated by ``\\x01`` (CONTENT_SPLITOR). The first field names the type; the fields of
each type, in order (RocketMQ ``TraceDataEncoder``):

``Pub``
    type, timeStamp, regionId, groupName (producer group), topic, msgId, tags, keys, storeHost,
    bodyLength, costTime, msgType (``MessageType`` ordinal), offsetMsgId, success. Readers also
    accept the older 13-field form (no offsetMsgId) and a 15th field, clientHost.
``SubBefore``
    type, timeStamp, regionId, groupName (consumer group), requestId, msgId, retryTimes, keys.
``SubAfter``
    type, requestId, msgId, costTime, success, keys, contextCode (``ConsumeReturnType``
    ordinal), then timeStamp and groupName (absent in the older form and from cloud clients).
``EndTransaction``
    type, timeStamp, regionId, groupName, topic, msgId, tags, keys, storeHost, msgType,
    transactionId, transactionState (``COMMIT_MESSAGE``/``ROLLBACK_MESSAGE``/``UNKNOW``),
    fromTransactionCheck.
``Recall``
    type, timeStamp, regionId, groupName, topic, msgId, success.

Booleans are Java's ``true``/``false``; a Java ``null`` string is written ``null``. Like Java's
``String.split``, the decoder drops trailing empty fields. The trace message's KEYS are the traced
msgIds and their keys (space separated), so a query by key on the trace topic finds them; its
born host is the client the records are about (``queryMsgTraceById`` shows it as ClientHost).
"""

from __future__ import annotations

from dataclasses import dataclass

from rocketq.errors import BodyFormatError

TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
CONTENT_SPLITOR = "\x01"
FIELD_SPLITOR = "\x02"

PUB = "Pub"
RECALL = "Recall"
SUB_BEFORE = "SubBefore"
SUB_AFTER = "SubAfter"
END_TRANSACTION = "EndTransaction"
TRACE_TYPES = (PUB, RECALL, SUB_BEFORE, SUB_AFTER, END_TRANSACTION)

#: ``MessageType`` ordinals (Normal, Trans, TransCommit, Delay, Order).
MSG_TYPE_NORMAL = 0
MSG_TYPE_TRANS_HALF = 1
MSG_TYPE_TRANS_COMMIT = 2
MSG_TYPE_DELAY = 3
MSG_TYPE_ORDER = 4

#: ``ConsumeReturnType`` ordinals (the SubAfter contextCode).
CONSUME_SUCCESS = 0
CONSUME_TIME_OUT = 1
CONSUME_EXCEPTION = 2
CONSUME_RETURN_NULL = 3
CONSUME_FAILED = 4

COMMIT_MESSAGE = "COMMIT_MESSAGE"
ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
UNKNOW = "UNKNOW"


@dataclass(slots=True)
class TraceRecord:
    """One record, every type's fields in one shape; the fields a type does not carry keep
    their defaults. ``offset_msg_id``/``client_host`` (Pub) and ``timestamp``/``group``
    (SubAfter) are None when the record is in the older, shorter form."""

    type: str
    timestamp: int | None = 0
    region_id: str = ""
    group: str | None = ""
    topic: str = ""
    msg_id: str = ""
    tags: str = ""
    keys: str = ""
    store_host: str = ""
    body_length: int = 0
    cost_ms: int = 0
    msg_type: int = MSG_TYPE_NORMAL
    offset_msg_id: str | None = ""
    success: bool = True
    client_host: str | None = None
    request_id: str = ""
    retry_times: int = 0
    context_code: int | None = CONSUME_SUCCESS
    transaction_id: str = ""
    transaction_state: str = ""
    from_transaction_check: bool = False

    def key_list(self) -> list[str]:
        """The KEYS this record adds to its trace message: the msgId, then its keys."""
        out = [self.msg_id]
        if self.keys and self.keys != "null":
            out.extend(k for k in self.keys.split(" ") if k)
        return out


def _b(value: bool) -> str:
    return "true" if value else "false"


def encode_record(r: TraceRecord) -> str:
    """The text of one record, its FIELD_SPLITOR included."""
    t = r.type
    if t == PUB:
        fields = [t, str(r.timestamp), r.region_id, str(r.group), r.topic, r.msg_id, r.tags, r.keys]
        fields += [r.store_host, str(r.body_length), str(r.cost_ms), str(r.msg_type)]
        if r.offset_msg_id is not None:
            fields.append(r.offset_msg_id)
        fields.append(_b(r.success))
        if r.client_host is not None:
            fields.append(r.client_host)
    elif t == SUB_BEFORE:
        fields = [t, str(r.timestamp), r.region_id, str(r.group), r.request_id, r.msg_id]
        fields += [str(r.retry_times), r.keys]
    elif t == SUB_AFTER:
        fields = [t, r.request_id, r.msg_id, str(r.cost_ms), _b(r.success), r.keys]
        if r.context_code is not None:
            fields.append(str(r.context_code))
        if r.timestamp is not None:
            fields += [str(r.timestamp), str(r.group)]
        elif r.context_code is not None:
            fields.append("")  # a cloud client ends the record with a CONTENT_SPLITOR
    elif t == END_TRANSACTION:
        fields = [t, str(r.timestamp), r.region_id, str(r.group), r.topic, r.msg_id, r.tags, r.keys]
        fields += [r.store_host, str(r.msg_type), r.transaction_id, r.transaction_state]
        fields.append(_b(r.from_transaction_check))
    elif t == RECALL:
        fields = [t, str(r.timestamp), r.region_id, str(r.group), r.topic, r.msg_id, _b(r.success)]
    else:
        raise ValueError(f"unknown trace type {t!r}")
    return CONTENT_SPLITOR.join(fields) + FIELD_SPLITOR


def encode_records(records: list[TraceRecord]) -> str:
    return "".join(encode_record(r) for r in records)


def _int(fields: list[str], i: int, what: str) -> int:
    try:
        return int(fields[i])
    except (IndexError, ValueError):
        raise BodyFormatError(f"trace record {fields[0]}: field {i} ({what}) is not an integer") from None


def _need(fields: list[str], n: int) -> None:
    if len(fields) < n:
        raise BodyFormatError(f"trace record {fields[0]} has {len(fields)} fields, at least {n} expected")


def _bool(text: str) -> bool:
    return text.lower() == "true"  # Java's Boolean.parseBoolean


def _stamped(f: list[str], n: int) -> TraceRecord:
    """A record of type ``f[0]`` with at least ``n`` fields, its timeStamp, regionId and
    groupName (fields 1 to 3, where every type but SubAfter has them) read; the caller reads
    the rest."""
    _need(f, n)
    return TraceRecord(f[0], timestamp=_int(f, 1, "timeStamp"), region_id=f[2], group=f[3])


def decode_record(text: str) -> TraceRecord | None:
    """One record's text (without its FIELD_SPLITOR); None for a type this reader does not know
    (RocketMQ's decoder skips those too). BodyFormatError when a known type lacks fields."""
    f = text.split(CONTENT_SPLITOR)
    while f and f[-1] == "":
        f.pop()  # Java's String.split drops trailing empty strings
    if not f:
        return None
    t = f[0]
    if t == PUB:
        r = _stamped(f, 13)
        r.topic, r.msg_id, r.tags, r.keys, r.store_host = f[4:9]
        r.body_length = _int(f, 9, "bodyLength")
        r.cost_ms = _int(f, 10, "costTime")
        r.msg_type = _int(f, 11, "msgType")
        if len(f) == 13:
            r.offset_msg_id = None
            r.success = _bool(f[12])
        else:
            r.offset_msg_id = f[12]
            r.success = _bool(f[13])
            if len(f) >= 15:
                r.client_host = f[14]
        return r
    if t == SUB_BEFORE:
        r = _stamped(f, 8)
        r.request_id, r.msg_id = f[4:6]
        r.retry_times = _int(f, 6, "retryTimes")
        r.keys = f[7]
        return r
    if t == SUB_AFTER:
        _need(f, 6)
        return TraceRecord(
            t,
            request_id=f[1],
            msg_id=f[2],
            cost_ms=_int(f, 3, "costTime"),
            success=_bool(f[4]),
            keys=f[5],
            context_code=_int(f, 6, "contextCode") if len(f) >= 7 else None,
            timestamp=_int(f, 7, "timeStamp") if len(f) >= 9 else None,
            group=f[8] if len(f) >= 9 else None,
        )
    if t == END_TRANSACTION:
        r = _stamped(f, 13)
        r.topic, r.msg_id, r.tags, r.keys, r.store_host = f[4:9]
        r.msg_type = _int(f, 9, "msgType")
        r.transaction_id, r.transaction_state = f[10:12]
        r.from_transaction_check = _bool(f[12])
        return r
    if t == RECALL:
        r = _stamped(f, 7)
        r.topic, r.msg_id = f[4:6]
        r.success = _bool(f[6])
        return r
    return None


def decode_trace_data(text: str) -> list[TraceRecord]:
    """Every record of a trace message's body, in order."""
    out: list[TraceRecord] = []
    for part in text.split(FIELD_SPLITOR):
        if part:
            r = decode_record(part)
            if r is not None:
                out.append(r)
    return out


__all__ = [
    "COMMIT_MESSAGE",
    "CONSUME_FAILED",
    "CONSUME_SUCCESS",
    "CONTENT_SPLITOR",
    "END_TRANSACTION",
    "FIELD_SPLITOR",
    "PUB",
    "RECALL",
    "ROLLBACK_MESSAGE",
    "SUB_AFTER",
    "SUB_BEFORE",
    "TRACE_TOPIC",
    "TraceRecord",
    "decode_record",
    "decode_trace_data",
    "encode_record",
    "encode_records",
]
