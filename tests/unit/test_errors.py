"""The error tree: wire codes map to classes through the classes themselves, and the classes
carry the producer's retry policy (``retriable``, ``refresh_route``)."""

from __future__ import annotations

import pytest

# these modules define error classes of their own
import rocketq.client.admin
import rocketq.proxy.cluster
import rocketq.proxy.status
import rocketq.testing
from rocketq.errors import (
    BrokerResponseError,
    ConnectionClosed,
    FrameError,
    LocalProtocolError,
    MessageNotFound,
    NameServerUnavailable,
    NoPermission,
    RemoteProtocolError,
    RemotingConnectError,
    RemotingError,
    RemotingTimeout,
    ResponseCode,
    RocketqError,
    ServerError,
    ServiceNotAvailable,
    StoreNotWritable,
    SystemBusy,
    TopicNotExist,
    error_for_code,
    for_code,
)


def all_error_classes() -> list[type[RocketqError]]:
    found: list[type[RocketqError]] = []
    todo: list[type[RocketqError]] = [RocketqError]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in found:
                found.append(sub)
                todo.append(sub)
    return sorted(found, key=lambda c: (c.__module__, c.__qualname__))


def declaring_class(cls: type[RocketqError]) -> type[RocketqError]:
    return next(c for c in cls.__mro__ if "code" in vars(c))


@pytest.mark.parametrize("cls", all_error_classes(), ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_every_error_class_round_trips_through_its_wire_code(cls: type[RocketqError]) -> None:
    wire = for_code(cls.code)
    assert wire.code == cls.code
    declaring = declaring_class(cls)
    if declaring is RocketqError:
        # local failures answered as SYSTEM_ERROR come back as the server's SYSTEM_ERROR
        assert cls.code == ResponseCode.SYSTEM_ERROR and wire is ServerError
    else:
        assert wire is declaring and issubclass(cls, wire)
    exc = error_for_code(cls.code, "refused")
    assert type(exc) is wire and exc.code == cls.code and str(exc) == "refused"


def test_codes_without_a_class_are_broker_response_errors_with_the_code() -> None:
    for code in (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, ResponseCode.TOPIC_EXIST_ALREADY, 999):
        assert for_code(code) is BrokerResponseError
        exc = error_for_code(code, "no")
        assert isinstance(exc, BrokerResponseError) and exc.response_code == code
        assert not exc.retriable and not exc.refresh_route
    server = error_for_code(ResponseCode.SYSTEM_ERROR, "handler failed")
    assert isinstance(server, BrokerResponseError) and server.response_code == 1


#: code → (retriable, refresh_route): RocketMQ's DefaultMQProducerImpl.retryResponseCodes
#: (1, 14, 16, 17, 204, 205) plus SYSTEM_BUSY; every other code is raised at once.
RETRY_TABLE = {
    ResponseCode.QUERY_NOT_FOUND: (False, False),
    ResponseCode.SYSTEM_ERROR: (True, False),
    ResponseCode.SYSTEM_BUSY: (True, False),
    ResponseCode.REQUEST_CODE_NOT_SUPPORTED: (False, False),
    ResponseCode.TRANSACTION_FAILED: (False, False),
    ResponseCode.FLUSH_DISK_TIMEOUT: (True, False),
    ResponseCode.MESSAGE_ILLEGAL: (False, False),
    ResponseCode.SERVICE_NOT_AVAILABLE: (True, False),
    ResponseCode.VERSION_NOT_SUPPORTED: (False, False),
    ResponseCode.NO_PERMISSION: (True, True),
    ResponseCode.TOPIC_NOT_EXIST: (True, True),
    ResponseCode.TOPIC_EXIST_ALREADY: (False, False),
    ResponseCode.SUBSCRIPTION_PARSE_FAILED: (False, False),
    ResponseCode.SUBSCRIPTION_NOT_EXIST: (False, False),
    ResponseCode.SUBSCRIPTION_NOT_LATEST: (False, False),
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: (False, False),
    ResponseCode.INVALID_PARAMETER: (False, False),
    ResponseCode.NO_BUYER_ID: (True, False),
    ResponseCode.NOT_IN_CURRENT_UNIT: (True, False),
}


@pytest.mark.parametrize(("code", "policy"), RETRY_TABLE.items(), ids=lambda v: str(getattr(v, "name", v)))
def test_retry_table(code: int, policy: tuple[bool, bool]) -> None:
    cls = for_code(code)
    assert (cls.retriable, cls.refresh_route) == policy
    # only a refusal that says "not the master (any more)" has the route re-checked
    assert cls.recheck_route == (code == ResponseCode.SERVICE_NOT_AVAILABLE)


def test_the_failures_of_a_master_that_may_have_moved_have_the_route_re_checked() -> None:
    moved = (RemotingTimeout, ConnectionClosed, RemotingConnectError, ServiceNotAvailable, StoreNotWritable)
    for cls in moved:
        assert cls.retriable and cls.recheck_route and not cls.refresh_route, cls
    # a refusal or a refused connection says "not the master": the re-check waits for a new one
    waits = {c for c in moved if c.await_new_master}
    assert waits == {RemotingConnectError, ServiceNotAvailable, StoreNotWritable}
    for cls in (NameServerUnavailable, RemoteProtocolError, SystemBusy, NoPermission):
        assert not cls.recheck_route and not cls.await_new_master, cls


def test_a_wire_code_is_declared_by_one_class_only() -> None:
    with pytest.raises(TypeError, match="TopicNotExist already declares"):

        class Again(RocketqError):
            code = ResponseCode.TOPIC_NOT_EXIST

    assert for_code(ResponseCode.TOPIC_NOT_EXIST) is TopicNotExist
    assert for_code(ResponseCode.NO_PERMISSION) is NoPermission
    assert for_code(ResponseCode.QUERY_NOT_FOUND) is rocketq.client.admin.MessageNotFound is MessageNotFound


def test_protocol_errors_say_whose_fault() -> None:
    for cls in (LocalProtocolError, RemoteProtocolError):
        assert issubclass(cls, FrameError) and issubclass(cls, RemotingError) and issubclass(cls, ValueError)
        assert not cls.retriable
    assert not issubclass(LocalProtocolError, RemoteProtocolError)
    assert not issubclass(RemoteProtocolError, LocalProtocolError)
    with pytest.raises(RemoteProtocolError, match="is not a message"):
        rocketq.proxy.cluster.decode_popped(b"\x00" * 64)
