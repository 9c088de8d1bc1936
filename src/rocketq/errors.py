"""The rocketq error tree.

Every error rocketq raises derives from :class:`RocketqError`. Each class carries the RocketMQ
wire response code a broker would answer with (``code``) and the client's retry policy for it:
``retriable`` (the producer sends again, on another broker when there is one),
``refresh_route`` (the producer drops its cached route of the topic before that next attempt)
and ``recheck_route`` (the broker's address may no longer be its group's master: the producer
re-checks the topic's route with the name servers before the next attempt, keeping the cached
one until they answer; :mod:`rocketq.client._routes`)::

    RocketqError                      SYSTEM_ERROR (1)
    ├── ConfigError                   bad configuration value (local, never on the wire)
    ├── MessageIllegal                MESSAGE_ILLEGAL (13)
    │   ├── MessageBodyTooLarge
    │   ├── PropertiesTooLarge
    │   ├── TopicNameInvalid
    │   └── TimerMessageIllegal       a delivery time that is not a number, too far ahead, or timers off
    ├── ServiceNotAvailable           SERVICE_NOT_AVAILABLE (14), retriable, recheck_route (waits)
    │   ├── DiskFull                  no space left (also an OSError with errno ENOSPC)
    │   ├── StoreShutdown
    │   └── StoreNotWritable
    ├── SystemBusy                    SYSTEM_BUSY (2), retriable
    │   └── WriteBufferPoolExhausted
    ├── StoreError                    local storage failures (SYSTEM_ERROR)
    │   ├── StoreLocked               another process holds the store directory
    │   ├── CorruptFileError          a file that does not have RocketMQ's layout
    │   └── SegmentAllocationError    a segment could not be created
    ├── FlushDiskTimeout              FLUSH_DISK_TIMEOUT (10): stored, not yet durable; retriable
    ├── NoPermission                  NO_PERMISSION (16): topic, group or broker; retriable, refresh_route
    ├── TopicNotExist                 TOPIC_NOT_EXIST (17), retriable, refresh_route
    ├── MessageNotFound               QUERY_NOT_FOUND (22): no message for the id, key or offset
    ├── InvalidParameter              INVALID_PARAMETER (29): bad request header value
    │   └── InvalidReceiptHandle      a pop receipt handle that is malformed, stale or expired
    ├── SubscriptionParseFailed       SUBSCRIPTION_PARSE_FAILED (23)
    ├── SubscriptionNotExist          SUBSCRIPTION_NOT_EXIST (24)
    ├── SubscriptionNotLatest         SUBSCRIPTION_NOT_LATEST (25)
    ├── SubscriptionGroupNotExist     SUBSCRIPTION_GROUP_NOT_EXIST (26)
    ├── BodyFormatError               a request/response body that is not the document its code calls for
    ├── RequestHeaderError            a required request header field is missing or malformed
    └── RemotingError                 the remoting transport (SYSTEM_ERROR when it reaches the wire)
        ├── FrameError                bytes or a command that break the remoting (or gRPC) protocol
        │   ├── LocalProtocolError    this side was about to send something invalid (a caller's bug)
        │   └── RemoteProtocolError   the peer sent something invalid; its connection is closed
        ├── RemotingTimeout           no response within the deadline, retriable, recheck_route
        ├── ConnectionClosed          the connection dropped with the call in flight, retriable, recheck_route
        ├── RemotingConnectError      no connection could be made, retriable, recheck_route (waits)
        └── NameServerUnavailable     no name server answered a route query (client), retriable

Client-side (never on the wire)::

    RocketqError
    ├── ClientStateError              the client is not started or already shut down
    └── BrokerResponseError           an error code with no class of its own (``response_code``)
        ├── ServerError               SYSTEM_ERROR (1) answered by a broker or name server, retriable
        ├── NoBuyerId                 NO_BUYER_ID (204), retriable (unit-aware RocketMQ deployments)
        └── NotInCurrentUnit          NOT_IN_CURRENT_UNIT (205), retriable (idem)

:func:`for_code` maps a wire code to its class: the one class that declares that ``code`` in its
own body (subclasses inherit the code but do not claim it); codes no class declares map to
:class:`BrokerResponseError`. :func:`error_for_code` builds the exception a client raises for an
error response. A second class declaring a code already claimed is a ``TypeError`` at import.

The producer's retry policy, from the class attributes (RocketMQ's
``DefaultMQProducerImpl.retryResponseCodes`` are TOPIC_NOT_EXIST, SERVICE_NOT_AVAILABLE,
SYSTEM_ERROR, NO_PERMISSION, NO_BUYER_ID and NOT_IN_CURRENT_UNIT; SYSTEM_BUSY is retried too, as
the Java client does since apache/rocketmq#5845; a FLUSH_DISK_TIMEOUT answer to a send is a
result with its status, not an error)::

    code                        class                 retriable   refresh_route   recheck_route
    1   SYSTEM_ERROR            ServerError           yes         no              no
    2   SYSTEM_BUSY             SystemBusy            yes         no              no
    10  FLUSH_DISK_TIMEOUT      FlushDiskTimeout      yes         no              no
    13  MESSAGE_ILLEGAL         MessageIllegal        no          no              no
    14  SERVICE_NOT_AVAILABLE   ServiceNotAvailable   yes         no              yes, waits
    16  NO_PERMISSION           NoPermission          yes         yes (perm)      no
    17  TOPIC_NOT_EXIST         TopicNotExist         yes         yes             no
    22  QUERY_NOT_FOUND         MessageNotFound       no          no              no
    23  SUBSCRIPTION_PARSE_FAILED .. 26 SUBSCRIPTION_GROUP_NOT_EXIST    no    no    no
    29  INVALID_PARAMETER       InvalidParameter      no          no              no
    204 NO_BUYER_ID             NoBuyerId             yes         no              no
    205 NOT_IN_CURRENT_UNIT     NotInCurrentUnit      yes         no              no
    any other code              BrokerResponseError   no          no              no
    (local) RemotingTimeout, ConnectionClosed                             yes   no   yes
    (local) RemotingConnectError                                          yes   no   yes, waits

``recheck_route`` marks the failures that say the address may have stopped being the master;
"waits" (``await_new_master``) the ones that say it has: a DLedger follower refuses writes with
SERVICE_NOT_AVAILABLE (naming its leader), a stopped master refuses the connection. For those a
re-check that still finds the address listed pauses (about 0.9 s at most, within the send's
deadline) for the new master to register, unless another broker group can take the send. A
connection that closed with the call in flight may be a master that died (the next attempt
gets a refusal, which waits) or an idle connection to a broker that restarted in place (the next
attempt, on a new connection, succeeds): one look at the route, no pause. A timeout counts too:
a master whose host went away answers nothing at all, and its group's new leader is only found
through the name servers; when the broker is merely slow the cost is one route query (at most
one per topic per 50 ms). NoPermission is not in it (its remedy is the route itself, dropped
and fetched).

Messages always name the thing and the limit, e.g.
``message body 5242881 B exceeds max 4194304 B``.
"""

from __future__ import annotations

import errno
from enum import IntEnum
from typing import Any, ClassVar


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
    NO_BUYER_ID = 204
    NOT_IN_CURRENT_UNIT = 205


#: wire code → the class that declares it (filled as the classes are defined)
_BY_CODE: dict[int, type[RocketqError]] = {}


class RocketqError(Exception):
    """Root of every error rocketq raises."""

    #: the RocketMQ response code a server answers this error with
    code: ClassVar[int] = ResponseCode.SYSTEM_ERROR
    #: whether the producer sends again after it (on another broker when there is one)
    retriable: ClassVar[bool] = False
    #: whether the producer drops its cached route of the topic before the next attempt
    refresh_route: ClassVar[bool] = False
    #: whether the failure says the broker's address may no longer be its group's master: the
    #: producer re-checks the topic's route with the name servers before the next attempt
    recheck_route: ClassVar[bool] = False
    #: whether the failure says the address is not the master (any more): a re-check that finds
    #: it still listed pauses for a new master to register (only with ``recheck_route``)
    await_new_master: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "code" not in cls.__dict__:
            return
        code = int(cls.__dict__["code"])
        claimed = _BY_CODE.get(code)
        if claimed is not None and (claimed.__module__, claimed.__qualname__) != (
            cls.__module__,
            cls.__qualname__,
        ):
            raise TypeError(
                f"{cls.__qualname__} declares wire code {code}, which {claimed.__qualname__} already declares"
            )
        _BY_CODE[code] = cls


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
    """The store does not accept writes right now (another broker may)."""

    code = ResponseCode.SERVICE_NOT_AVAILABLE
    retriable = True
    recheck_route = True
    await_new_master = True


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
    retriable = True
    refresh_route = True


class TopicNotExist(RocketqError):
    """The topic is unknown to the broker and could not be created."""

    code = ResponseCode.TOPIC_NOT_EXIST
    retriable = True
    refresh_route = True


class MessageNotFound(RocketqError):
    """No message matches the id, key or queue offset that was asked for (QUERY_NOT_FOUND)."""

    code = ResponseCode.QUERY_NOT_FOUND


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
    """A protocol violation: bytes on a connection that are not a valid remoting frame, or a
    command that cannot be framed. Raised as one of its two subclasses, which say whose fault
    it is: catch ``FrameError`` for both."""


class LocalProtocolError(FrameError):
    """This side was about to break the protocol (a command whose header or frame exceeds the
    format's limits, an opaque already in flight): a bug in the caller. Nothing was sent and
    the connection stays usable."""


class RemoteProtocolError(FrameError):
    """The peer sent something that breaks the protocol (a bad length, an undecodable header, a
    record that is not a message). A receiver closes the connection: after a bad frame the
    stream cannot be re-synced."""


class RemotingTimeout(RemotingError, TimeoutError):
    """No response arrived within the call's deadline (the request may still be processed)."""

    retriable = True
    recheck_route = True


class ConnectionClosed(RemotingError, ConnectionError):
    """The connection closed while the call was in flight, or was already closed."""

    retriable = True
    recheck_route = True


class RemotingConnectError(RemotingError, ConnectionError):
    """A connection to the address could not be established (refused, unreachable, timed out)."""

    retriable = True
    recheck_route = True
    await_new_master = True


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
    """A broker or name server answered with a response code that has no more specific class
    here (or with one of the client-only codes below). ``response_code`` is the wire code."""

    def __init__(self, message: str, response_code: int | None = None) -> None:
        super().__init__(message)
        self.response_code: int = type(self).code if response_code is None else response_code


class ServerError(BrokerResponseError):
    """A server answered SYSTEM_ERROR (1): its handler failed. RocketMQ's producer retries it on
    another broker."""

    code = ResponseCode.SYSTEM_ERROR
    retriable = True


class NoBuyerId(BrokerResponseError):
    """NO_BUYER_ID (204) of unit-aware RocketMQ deployments; the producer retries it."""

    code = ResponseCode.NO_BUYER_ID
    retriable = True


class NotInCurrentUnit(BrokerResponseError):
    """NOT_IN_CURRENT_UNIT (205) of unit-aware RocketMQ deployments; the producer retries it."""

    code = ResponseCode.NOT_IN_CURRENT_UNIT
    retriable = True


def for_code(code: int) -> type[RocketqError]:
    """The class of wire response ``code``: the one that declares it, else BrokerResponseError."""
    return _BY_CODE.get(code, BrokerResponseError)


def error_for_code(code: int, message: str) -> RocketqError:
    """The exception for an error response with ``code`` (its class from :func:`for_code`)."""
    cls = for_code(code)
    if issubclass(cls, BrokerResponseError):
        return cls(message, code)
    return cls(message)
