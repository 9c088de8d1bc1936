"""gRPC ``Status`` values: how rocketq errors are answered to RocketMQ 5 SDKs.

RocketMQ 5 answers business errors inside the response (``status.code`` of the ``Code`` enum,
with a message) and keeps the gRPC status OK; the SDKs read the in-body code. Only malformed
requests that cannot be answered in their own shape end the call with a gRPC status. The table
(most specific class first)::

    rocketq error                         Code
    ------------------------------------  -------------------------------------------
    TopicNotExist                         TOPIC_NOT_FOUND 40402
    TopicNameInvalid                      ILLEGAL_TOPIC 40002
    MessageBodyTooLarge                   MESSAGE_BODY_TOO_LARGE 41301
    PropertiesTooLarge                    MESSAGE_PROPERTIES_TOO_LARGE 43101
    MessageTypeError                      MESSAGE_PROPERTY_CONFLICT_WITH_TYPE 40014
    ReservedPropertyError                 ILLEGAL_MESSAGE_PROPERTY_KEY 40007
    IllegalTagError                       ILLEGAL_MESSAGE_TAG 40004
    InvalidReceiptHandle                  INVALID_RECEIPT_HANDLE 40013
    InvalidTransactionId                  INVALID_TRANSACTION_ID 40008
    SubscriptionParseFailed               ILLEGAL_FILTER_EXPRESSION 40010
    SubscriptionGroupNotExist             CONSUMER_GROUP_NOT_FOUND 40403
    IllegalConsumerGroup                  ILLEGAL_CONSUMER_GROUP 40003
    NoPermission                          FORBIDDEN 40300
    NotSupported                          UNSUPPORTED 50500
    SystemBusy                            TOO_MANY_REQUESTS 42900
    MessageIllegal / InvalidParameter     BAD_REQUEST 40000
    anything else                         INTERNAL_SERVER_ERROR 50001
"""

from __future__ import annotations

import logging

from rocketq.errors import (
    InvalidParameter,
    InvalidReceiptHandle,
    MessageBodyTooLarge,
    MessageIllegal,
    NoPermission,
    PropertiesTooLarge,
    RocketqError,
    SubscriptionGroupNotExist,
    SubscriptionParseFailed,
    SystemBusy,
    TopicNameInvalid,
    TopicNotExist,
)
from rocketq.proxy.convert import IllegalTagError, MessageTypeError, ReservedPropertyError
from rocketq.proxy.v2 import definition_pb2 as pb


class InvalidTransactionId(InvalidParameter):
    """An EndTransaction whose transaction id this broker did not hand out."""


class IllegalConsumerGroup(InvalidParameter):
    """A consumer group name that breaks the naming rules (too long, bad characters)."""


class NotSupported(RocketqError):
    """A feature of the protocol this endpoint does not offer (gRPC UNSUPPORTED)."""


_TABLE: tuple[tuple[type[BaseException], pb.Code], ...] = (
    (TopicNotExist, pb.TOPIC_NOT_FOUND),
    (TopicNameInvalid, pb.ILLEGAL_TOPIC),
    (MessageBodyTooLarge, pb.MESSAGE_BODY_TOO_LARGE),
    (PropertiesTooLarge, pb.MESSAGE_PROPERTIES_TOO_LARGE),
    (MessageTypeError, pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
    (ReservedPropertyError, pb.ILLEGAL_MESSAGE_PROPERTY_KEY),
    (IllegalTagError, pb.ILLEGAL_MESSAGE_TAG),
    (InvalidReceiptHandle, pb.INVALID_RECEIPT_HANDLE),
    (InvalidTransactionId, pb.INVALID_TRANSACTION_ID),
    (SubscriptionParseFailed, pb.ILLEGAL_FILTER_EXPRESSION),
    (SubscriptionGroupNotExist, pb.CONSUMER_GROUP_NOT_FOUND),
    (IllegalConsumerGroup, pb.ILLEGAL_CONSUMER_GROUP),
    (NoPermission, pb.FORBIDDEN),
    (NotSupported, pb.UNSUPPORTED),
    (SystemBusy, pb.TOO_MANY_REQUESTS),
    (MessageIllegal, pb.BAD_REQUEST),
    (InvalidParameter, pb.BAD_REQUEST),
)


def code_of(exc: BaseException) -> pb.Code:
    """The ``Code`` an error is answered with (see the module table)."""
    for cls, code in _TABLE:
        if isinstance(exc, cls):
            return code
    return pb.INTERNAL_SERVER_ERROR


def ok(message: str = "OK") -> pb.Status:
    return pb.Status(code=pb.OK, message=message)


def status(code: pb.Code, message: str) -> pb.Status:
    return pb.Status(code=code, message=message)


def of_error(exc: BaseException) -> pb.Status:
    return pb.Status(code=code_of(exc), message=str(exc) or type(exc).__name__)


def of_failure(what: str, exc: BaseException, log: logging.Logger) -> pb.Status:
    """:func:`of_error` of a call ``what`` that failed, logged on ``log``: a refusal (a
    RocketqError) at INFO, anything else with its traceback."""
    if isinstance(exc, RocketqError):
        log.info("%s refused: %s", what, exc)
    else:
        log.exception("%s failed", what)
    return of_error(exc)


__all__ = ["InvalidTransactionId", "NotSupported", "code_of", "of_error", "of_failure", "ok", "status"]


def of_entries(statuses: list[pb.Status], what: str = "entry") -> pb.Status:
    """The top-level status of a request made of entries (AckMessage): OK when every entry is,
    the entry's own status when all failed, MULTIPLE_RESULTS when some did."""
    failed = [s for s in statuses if s.code != pb.OK]
    if not statuses:
        return status(pb.BAD_REQUEST, f"no {what}")
    if not failed:
        return ok()
    if len(failed) == len(statuses):
        return failed[0]
    return status(pb.MULTIPLE_RESULTS, f"{len(failed)} of {len(statuses)} entries failed")
