"""The producer's values and checks, apart from its I/O: what a send returns (:class:`SendResult`,
:class:`SendStatus`), the steps of the I/O-free send loop (:class:`RouteStep`,
:class:`InvokeStep`) that the asyncio producer and the blocking facade both carry out, the
checks RocketMQ's ``Validators`` make before anything is sent, and the error for a broker's
answer. :mod:`rocketq.client.aio` re-exports every public name.
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import cast

from rocketq.errors import (
    ConfigError,
    MessageBodyTooLarge,
    MessageIllegal,
    RocketqError,
    TopicNameInvalid,
    error_for_code,
)
from rocketq.message import Message, validate_topic
from rocketq.protocol.batch import encode_batch_entries
from rocketq.protocol.queue import MessageQueue
from rocketq.remoting import RemotingCommand

#: Topics clients may not send to (``TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET``).
NOT_ALLOWED_SEND_TOPICS = frozenset(
    {
        "SCHEDULE_TOPIC_XXXX",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "rmq_sys_REVIVE_LOG_",
    }
)
#: A client-side topic name is at most 127 chars (``TopicValidator.TOPIC_MAX_LENGTH``).
TOPIC_MAX_LENGTH = 127
GROUP_MAX_LENGTH = 255
_GROUP_PATTERN = re.compile(r"[%|a-zA-Z0-9_-]+")
SYS_FLAG_COMPRESSED = 0x1


class SendStatus(enum.Enum):
    """RocketMQ ``SendStatus``: stored, possibly without the requested durability."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


_STATUS_BY_CODE = {
    0: SendStatus.SEND_OK,
    10: SendStatus.FLUSH_DISK_TIMEOUT,
    11: SendStatus.SLAVE_NOT_AVAILABLE,
    12: SendStatus.FLUSH_SLAVE_TIMEOUT,
}


@dataclass(frozen=True, slots=True)
class RouteStep:
    """A step of :meth:`AsyncProducer._send_steps`: the publish info of ``topic``, within
    ``timeout_s`` (TimeoutError otherwise)."""

    topic: str
    timeout_s: float


@dataclass(frozen=True, slots=True)
class InvokeStep:
    """A step of :meth:`AsyncProducer._send_steps`: the response of the broker at ``addr`` to
    ``request``, within ``timeout_s``."""

    addr: str
    request: RemotingCommand
    timeout_s: float


@dataclass(frozen=True, slots=True)
class SendResult:
    """The outcome of a send.

    ``msg_id`` is the client id (``UNIQ_KEY``; comma-joined for batches), ``offset_msg_id`` the
    broker's offset message id(s), ``queue_offset`` the logical offset of the (first) message."""

    status: SendStatus
    msg_id: str
    offset_msg_id: str
    message_queue: MessageQueue
    queue_offset: int
    transaction_id: str | None = None


@dataclass(slots=True)
class SendAttempts:
    """The attempts of one send so far, within its one ``send_timeout_ms`` ``deadline``
    (``time.monotonic()`` s): how many failed, on which broker the last one, its error, and a
    line per failure (the note the send's final error gets)."""

    deadline: float
    count: int = 0
    last_broker: str | None = None
    last_exc: RocketqError | None = None
    failures: list[str] = field(default_factory=list)


#: The I/O-free send (:meth:`AsyncProducer._send_steps`): yields its steps, takes their results
#: and returns the SendResult.
SendSteps = Generator[RouteStep | InvokeStep, object, SendResult]


def resume_send(steps: SendSteps, outcome: object) -> RouteStep | InvokeStep | SendResult:
    """Resume a send with ``outcome``, what its last step gave (an exception it raised is thrown
    in): its next step, or its SendResult once it has finished. The one way both drivers of
    the send loop (the asyncio producer, the blocking facade) hand it their I/O's results."""
    try:
        if isinstance(outcome, BaseException):
            return steps.throw(outcome)
        return steps.send(outcome)
    except StopIteration as done:
        return cast(SendResult, done.value)


#: ``selector(queues, message) -> queue``: picks one of the topic's writable queues.
QueueSelector = Callable[[Sequence[MessageQueue], Message], MessageQueue]


def validate_group(group: str) -> None:
    """RocketMQ ``Validators.checkGroup``: non-empty, ``[%|a-zA-Z0-9_-]``, at most 255 chars."""
    if not group or not group.strip():
        raise ConfigError("producer group name is empty")
    if len(group) > GROUP_MAX_LENGTH:
        raise ConfigError(f"producer group name of {len(group)} chars exceeds max {GROUP_MAX_LENGTH} chars")
    if _GROUP_PATTERN.fullmatch(group) is None:
        raise ConfigError(f"producer group name {group[:64]!r} has characters outside [%|a-zA-Z0-9_-]")


def validate_message(msg: Message, max_body_bytes: int) -> None:
    """Check topic and body as RocketMQ's ``Validators.checkMessage`` does, before any I/O."""
    validate_send_topic(msg.topic)
    validate_body(msg, max_body_bytes)


@functools.lru_cache(maxsize=1024)
def validate_send_topic(topic: str) -> None:
    """The topic checks of :func:`validate_message` (name rules, not a system topic). A topic
    that passed is remembered (the 1024 most recent), so a producer's sends to its few topics do
    not run the name pattern again; one that fails raises every time."""
    validate_topic(topic, TOPIC_MAX_LENGTH)
    if topic in NOT_ALLOWED_SEND_TOPICS:
        raise TopicNameInvalid(f"topic {topic!r} is a system topic that clients may not send to")


def validate_body(msg: Message, max_body_bytes: int) -> None:
    """The body checks of :func:`validate_message` (a batch's later messages, whose topic is the
    first one's, already checked)."""
    if not isinstance(msg.body, bytes | bytearray | memoryview):
        raise MessageIllegal(f"message body must be bytes, not {type(msg.body).__name__}")
    if len(msg.body) == 0:
        raise MessageIllegal("message body is empty")
    if len(msg.body) > max_body_bytes:
        raise MessageBodyTooLarge(f"message body {len(msg.body)} B exceeds max {max_body_bytes} B")


def error_for_response(response: RemotingCommand, broker: str) -> RocketqError:
    """The exception for a broker's error response (code and remark kept in the message), of
    the class :func:`rocketq.errors.for_code` gives for the code."""
    text = f"broker {broker} answered code {response.code}: {response.remark or ''}".rstrip(": ")
    return error_for_code(response.code, text)


def send_result_of(response: RemotingCommand, msg_id: str, mq: MessageQueue, broker: str) -> SendResult:
    """The SendResult of the broker's ``response`` to a send of ``msg_id`` to ``mq``; the
    exception of its code (:func:`error_for_response`, ``broker`` named in it) when it is not a
    status code."""
    status = _STATUS_BY_CODE.get(response.code)
    if status is None:
        raise error_for_response(response, broker)
    ext = response.ext_fields
    queue_id = int(ext.get("queueId", mq.queue_id))
    return SendResult(
        status,
        msg_id,
        ext.get("msgId", ""),
        mq if queue_id == mq.queue_id else MessageQueue(mq.topic, mq.broker_name, queue_id),
        int(ext.get("queueOffset", -1)),
        ext.get("transactionId"),
    )


def encode_batch_body(entries: Sequence[tuple[bytes, bytes, int]]) -> bytes:
    """The SEND_BATCH_MESSAGE body (spec §3.8) from ``(body, properties, flag)`` entries."""
    return encode_batch_entries(entries)


@dataclass(slots=True)
class _Prepared:
    """A message (or batch) ready to go on the wire."""

    topic: str
    body: bytes
    properties: str
    sys_flag: int
    flag: int
    msg_id: str
    batch: bool
