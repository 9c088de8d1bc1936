"""``queryMsgTraceById``: the trace of one message, from the records in the trace topic.

The records are those a rocketq broker writes (``brokerTraceEnable``) and those RocketMQ clients
with ``enableMsgTrace`` write themselves; both are RocketMQ's trace format
(:mod:`rocketq.protocol.trace`). They are found by key: every trace message carries the msgIds
it is about among its KEYS.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rocketq.protocol import trace as tr
from rocketq.protocol.topic import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX

if TYPE_CHECKING:
    from rocketq.client.admin import AsyncAdmin, MessageView


@dataclass(frozen=True, slots=True)
class TraceEvent:
    """One step of a message's life.

    ``type`` is the record type (Pub, SubBefore, SubAfter, EndTransaction, Recall); ``event``
    says what happened: ``send``, ``deliver``, ``consumed``, ``consume_failed``, ``retry`` (a
    Pub to ``%RETRY%group``), ``dlq`` (a Pub to ``%DLQ%group``), ``commit``, ``rollback``,
    ``unknown`` (a transaction left open) or ``recall``. ``attempt`` is the reconsume times of a
    delivery (SubBefore's retryTimes), also given to its outcome (SubAfter, by request id) and,
    for a retry or dead-letter Pub, the attempt the message goes on to. ``client_host`` is the
    born host of the trace message (the client, for broker-written records)."""

    type: str
    event: str
    timestamp: int
    group: str
    client_host: str
    msg_id: str
    topic: str = ""
    tags: str = ""
    keys: str = ""
    attempt: int | None = None
    success: bool = True
    cost_ms: int = 0
    request_id: str = ""
    store_host: str = ""
    offset_msg_id: str = ""
    transaction_state: str = ""
    from_transaction_check: bool = False

    @property
    def status(self) -> str:
        """``success`` or ``failed``, as ``mqadmin queryMsgTraceById`` prints it."""
        return "success" if self.success else "failed"


def _text(value: str | None) -> str:
    return "" if value is None or value == "null" else value


def _event(r: tr.TraceRecord) -> str:
    if r.type == tr.PUB:
        if r.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return "retry"
        if r.topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
            return "dlq"
        return "send"
    if r.type == tr.SUB_BEFORE:
        return "deliver"
    if r.type == tr.SUB_AFTER:
        return "consumed" if r.success else "consume_failed"
    if r.type == tr.END_TRANSACTION:
        return {tr.COMMIT_MESSAGE: "commit", tr.ROLLBACK_MESSAGE: "rollback"}.get(
            r.transaction_state, "unknown"
        )
    return "recall"


def trace_events(msg_id: str, messages: list[MessageView]) -> list[TraceEvent]:
    """The events about ``msg_id`` in trace ``messages``, oldest first (stable on equal times,
    so records written together keep their order)."""
    found: list[tuple[tr.TraceRecord, str]] = []
    for m in sorted(messages, key=lambda m: (m.store_timestamp, m.commit_log_offset)):
        for r in tr.decode_trace_data(m.body.decode("utf-8", "replace")):
            if r.msg_id == msg_id:
                found.append((r, m.born_host))
    before = {r.request_id: r for r, _ in found if r.type == tr.SUB_BEFORE}
    last_failed: dict[str, int] = {}  # group → attempt of its last failed delivery
    out: list[TraceEvent] = []
    for r, born_host in sorted(found, key=lambda item: item[0].timestamp or 0):
        group = r.group
        attempt: int | None = None
        timestamp = r.timestamp
        if r.type == tr.SUB_BEFORE:
            attempt = r.retry_times
        elif r.type == tr.SUB_AFTER:
            sub = before.get(r.request_id)
            if sub is not None:
                attempt = sub.retry_times
                group = group or sub.group
                timestamp = timestamp if timestamp is not None else sub.timestamp
            if not r.success and attempt is not None and group:
                last_failed[group] = attempt
        elif r.type == tr.PUB and r.topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
            failed = last_failed.get(str(group))
            attempt = None if failed is None else failed + 1
        out.append(
            TraceEvent(
                type=r.type,
                event=_event(r),
                timestamp=timestamp or 0,
                group=group or "",
                client_host=born_host,
                msg_id=r.msg_id,
                topic=r.topic,
                tags=_text(r.tags),
                keys=_text(r.keys),
                attempt=attempt,
                success=r.success,
                cost_ms=r.cost_ms,
                request_id=r.request_id,
                store_host=r.store_host,
                offset_msg_id=_text(r.offset_msg_id),
                transaction_state=r.transaction_state,
                from_transaction_check=r.from_transaction_check,
            )
        )
    return out


async def query_msg_trace_by_id(
    admin: AsyncAdmin, msg_id: str, trace_topic: str = tr.TRACE_TOPIC, max_num: int = 64
) -> list[TraceEvent]:
    """The trace of ``msg_id`` (the message's msgId, i.e. its UNIQ_KEY): the trace messages of
    ``trace_topic`` keyed by it (at most ``max_num``), decoded, oldest event first."""
    messages = await admin.query_msg_by_key(trace_topic, msg_id.strip(), max_num)
    return trace_events(msg_id.strip(), messages)


def _when(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) + f".{ms % 1000:03d}"


def format_trace(events: list[TraceEvent]) -> str:
    """The timeline as text: mqadmin's columns (type, group, client host, time, cost, status),
    then the attempt and what the record is about (topic, transaction state)."""
    lines = [
        f"{'#Type':<15} {'#Group':<24} {'#ClientHost':<22} {'#Time':<24} {'#CostTimes':<10} "
        f"{'#Status':<8} {'#Attempt':<8} #Detail"
    ]
    for e in events:
        detail = e.topic if e.type == tr.PUB else e.transaction_state or e.event
        if e.type == tr.END_TRANSACTION and e.from_transaction_check:
            detail += " (check)"
        attempt = "" if e.attempt is None else str(e.attempt)
        lines.append(
            f"{e.type:<15} {e.group:<24} {e.client_host:<22} {_when(e.timestamp):<24} "
            f"{str(e.cost_ms) + 'ms':<10} {e.status:<8} {attempt:<8} {detail}"
        )
    if not events:
        lines.append("(no trace records)")
    return "\n".join(lines)


def print_trace(events: list[TraceEvent]) -> None:
    print(format_trace(events))


__all__ = ["TraceEvent", "format_trace", "print_trace", "query_msg_trace_by_id", "trace_events"]
