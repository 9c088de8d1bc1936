"""The rocketq error tree.

Every error rocketq raises derives from :class:`RocketqError`. Each class carries the RocketMQ
wire response code a broker would answer with (``code``) and whether a client may retry the same
request (``retriable``)::

    RocketqError                      SYSTEM_ERROR (1)
    ├── ConfigError                   bad configuration value (local, never on the wire)
    ├── MessageIllegal                MESSAGE_ILLEGAL (13)
    │   ├── MessageBodyTooLarge
    │   ├── PropertiesTooLarge
    │   ├── TopicNameInvalid
    │   └── TimerMessageIllegal       a delivery time that is not a number, too far ahead, or timers off
    ├── ServiceNotAvailable           SERVICE_NOT_AVAILABLE (14)
    │   ├── DiskFull                  no space left (also an OSError with errno ENOSPC)
    │   ├── StoreShutdown
    │   └── StoreNotWritable
    ├── SystemBusy                    SYSTEM_BUSY (2), retriable
    │   └── WriteBufferPoolExhausted
    ├── StoreError                    local storage failures (SYSTEM_ERROR)
    │   ├── StoreLocked               another process holds the store directory
    │   ├── CorruptFileError          a file that does not have RocketMQ's layout
    │   └── SegmentAllocationError    a segment could not be created
    ├── FlushDiskTimeout              FLUSH_DISK_TIMEOUT (10): stored, but not yet durable
    ├── NoPermission                  NO_PERMISSION (16): topic, group or broker permission
    ├── TopicNotExist                 TOPIC_NOT_EXIST (17)
    ├── InvalidParameter              INVALID_PARAMETER (29): bad request header value
    │   └── InvalidReceiptHandle      a pop receipt handle that is malformed, stale or expired
    ├── SubscriptionParseFailed       SUBSCRIPTION_PARSE_FAILED (23)
    ├── SubscriptionNotExist          SUBSCRIPTION_NOT_EXIST (24)
    ├── SubscriptionNotLatest         SUBSCRIPTION_NOT_LATEST (25)
    ├── SubscriptionGroupNotExist     SUBSCRIPTION_GROUP_NOT_EXIST (26)
    ├── BodyFormatError               a request/response body that is not the document its code calls for
    ├── RequestHeaderError            a required request header field is missing or malformed
    └── RemotingError                 the remoting transport (SYSTEM_ERROR when it reaches the wire)
        ├── FrameError                a frame that breaks the protocol; its connection is closed
        ├── RemotingTimeout           no response within the deadline, retriable
        ├── ConnectionClosed          the connection dropped with the call in flight, retriable
        ├── RemotingConnectError      no connection could be made, retriable
        └── NameServerUnavailable     no name server answered a route query (client), retriable

Client-side (never on the wire)::

    RocketqError
    ├── ClientStateError              the client is not started or already shut down
    └── BrokerResponseError           a broker answered a request with an error code (``code`` per instance)

Messages always name the thing and the limit, e.g.
``message body 5242881 B exceeds max 4194304 B``.
"""

from __future__ import annotations

import errno
from enum import IntEnum
from typing import ClassVar


class ResponseCode(IntEnum):
    """RocketMQ remoting response codes (``ResponseCode.java``)."""

    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    TRANSACTION_FAILED = 4
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    INVALID_PARAMETER = 29


class RocketqError(Exception):
    """Root of every error rocketq raises."""

    code: ClassVar[int] = ResponseCode.SYSTEM_ERROR
    retriable: ClassVar[bool] = False


class ConfigError(RocketqError, ValueError):
    """A configuration value is invalid; the message lists every bad field."""


class ClusterStartError(RocketqError):
    """An in-process test cluster (:mod:`rocketq.testing`) or one of its brokers did not come up;
    the message names what and why."""


class MessageIllegal(RocketqError, ValueError):
    """The message breaks a limit or a naming rule; nothing was written."""

    code = ResponseCode.MESSAGE_ILLEGAL


class MessageBodyTooLarge(MessageIllegal):
    pass


class PropertiesTooLarge(MessageIllegal):
    pass


class TopicNameInvalid(MessageIllegal):
    pass


class TimerMessageIllegal(MessageIllegal):
    """RocketMQ ``WHEEL_TIMER_MSG_ILLEGAL`` / ``WHEEL_TIMER_NOT_ENABLE`` (both answer 13)."""


class ServiceNotAvailable(RocketqError):
    """The store does not accept writes right now."""

    code = ResponseCode.SERVICE_NOT_AVAILABLE


class DiskFull(ServiceNotAvailable, OSError):
    """The disk has no room for a write (ENOSPC, or usage above the hard watermark); nothing
    was written. An :class:`OSError` too, so ``except OSError`` handlers of file writes see it."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.ENOSPC, message)

    def __str__(self) -> str:
        return str(self.strerror)


class StoreShutdown(ServiceNotAvailable):
    pass


class StoreNotWritable(ServiceNotAvailable):
    pass


class SystemBusy(RocketqError):
    """Back-pressure: try again after a short back-off."""

    code = ResponseCode.SYSTEM_BUSY
    retriable = True


class WriteBufferPoolExhausted(SystemBusy):
    pass


class StoreError(RocketqError):
    """A local storage failure."""


class StoreLocked(StoreError):
    pass


class CorruptFileError(StoreError):
    pass


class SegmentAllocationError(StoreError):
    pass


class FlushDiskTimeout(RocketqError):
    """The message was stored but the flush did not complete within the timeout."""

    code = ResponseCode.FLUSH_DISK_TIMEOUT
    retriable = True


class NoPermission(RocketqError):
    """The topic, the subscription group or the broker does not permit the operation."""

    code = ResponseCode.NO_PERMISSION


class TopicNotExist(RocketqError):
    """The topic is unknown to the broker and could not be created."""

    code = ResponseCode.TOPIC_NOT_EXIST


class InvalidParameter(RocketqError, ValueError):
    """A request header field is missing or out of range (names the field and the limit)."""

    code = ResponseCode.INVALID_PARAMETER


class InvalidReceiptHandle(InvalidParameter):
    """A pop receipt handle that does not parse, was already used, or whose invisible time ended."""


class SubscriptionParseFailed(RocketqError, ValueError):
    """A subscription expression does not parse."""

    code = ResponseCode.SUBSCRIPTION_PARSE_FAILED


class SubscriptionNotExist(RocketqError):
    """A pull relies on a heartbeat subscription the broker does not have."""

    code = ResponseCode.SUBSCRIPTION_NOT_EXIST


class SubscriptionNotLatest(RocketqError):
    """The heartbeat subscription is older than the one the pull refers to."""

    code = ResponseCode.SUBSCRIPTION_NOT_LATEST


class SubscriptionGroupNotExist(RocketqError):
    """The consumer group is unknown and auto-creation is disabled."""

    code = ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST


class RemotingError(RocketqError):
    """A failure of the remoting transport (framing, connection, deadline)."""


class FrameError(RemotingError, ValueError):
    """Bytes on a connection that are not a valid remoting frame, or a command that cannot be
    framed. A receiver closes the connection: after a bad frame the stream cannot be re-synced."""


class RemotingTimeout(RemotingError, TimeoutError):
    """No response arrived within the call's deadline (the request may still be processed)."""

    retriable = True


class ConnectionClosed(RemotingError, ConnectionError):
    """The connection closed while the call was in flight, or was already closed."""

    retriable = True


class RemotingConnectError(RemotingError, ConnectionError):
    """A connection to the address could not be established (refused, unreachable, timed out)."""

    retriable = True


class BodyFormatError(RocketqError, ValueError):
    """A command body that is not the JSON (or binary) document its request code calls for,
    e.g. a REGISTER_BROKER body that does not parse. Answered with SYSTEM_ERROR (1), as Java's
    ``RemotingCommandException`` is."""


class RequestHeaderError(RocketqError, ValueError):
    """A required request header field (extFields) is missing or not of its type. Java answers
    such requests with SYSTEM_ERROR (1) once the missing field is dereferenced; so do we, but
    with a message that names the field."""


class NameServerUnavailable(RemotingError):
    """No name server answered a route query (all unreachable or timing out); names them."""

    retriable = True


class ClientStateError(RocketqError, RuntimeError):
    """A client method was called before ``start()`` or after ``shutdown()``."""


class BrokerResponseError(RocketqError):
    """A broker answered with a response code that has no more specific class here.

    ``response_code`` is the wire code; ``retriable`` follows RocketMQ's producer, which retries
    SYSTEM_ERROR on another broker."""

    def __init__(self, message: str, response_code: int) -> None:
        super().__init__(message)
        self.response_code = response_code
