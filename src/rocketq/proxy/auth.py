"""ACL on the gRPC endpoint: the RocketMQ 5 SDKs' signature, checked against ``plain_acl.yml``.

Every SDK with credentials sends two metadata entries on every call::

    x-mq-date-time: 20231227T194619Z
    authorization:  MQv2-HMAC-SHA1 Credential=<accessKey>, SignedHeaders=x-mq-date-time, Signature=<hex>

where ``<hex>`` is HMAC-SHA1 keyed with the UTF-8 secret key over the UTF-8 ``x-mq-date-time``
value, hex-encoded (lower case from the Java, Python, Go and Rust SDKs, upper case from C# and
C++; compared case-insensitively, as RocketMQ's proxy decodes it). ``Credential`` may carry
``/region/service`` after the key (Java, Go, C++): the key is the part before the first ``/``.
The date is not checked for freshness (RocketMQ does not either).

:class:`GrpcAclInterceptor` applies the rules of :func:`rocketq.acl.plain.decide` per call: a
globally white-listed peer passes; otherwise the call needs a known key; the account's
``whiteRemoteAddress`` passes; otherwise the signature must match (refusals answer
``Code.UNAUTHORIZED``); then the resources the call touches need their permission (refusals
answer ``Code.FORBIDDEN``): PUB on the topic for SendMessage, EndTransaction and RecallMessage;
SUB on the topic and the group for ReceiveMessage, AckMessage, ChangeInvisibleDuration,
ForwardMessageToDeadLetterQueue, QueryAssignment, PullMessage and the offset calls. Other calls
(QueryRoute, Heartbeat, NotifyClientTermination, Telemetry, …) need a valid signature only.
Refusals are answered in the response's ``status`` (where the SDKs look); Telemetry, which has
no such status, is aborted with ``UNAUTHENTICATED``. Refusals are logged like the remoting ones.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from rocketq.acl.address import host_of
from rocketq.acl.plain import (
    PERM_PUB,
    PERM_SUB,
    PlainAclValidator,
    RateLimitedLog,
    describe_resource,
    group_resource,
    perm_allows,
    perm_name,
)
from rocketq.proxy import status
from rocketq.proxy.v2 import definition_pb2 as pb
from rocketq.proxy.v2 import service_pb2 as spb

log = logging.getLogger(__name__)

AUTHORIZATION = "authorization"
DATE_TIME = "x-mq-date-time"
ALGORITHM = "MQv2-HMAC-SHA1"

_PUB_METHODS = frozenset({"SendMessage", "EndTransaction", "RecallMessage"})
_SUB_METHODS = frozenset(
    {
        "ReceiveMessage",
        "AckMessage",
        "ChangeInvisibleDuration",
        "ForwardMessageToDeadLetterQueue",
        "QueryAssignment",
        "PullMessage",
        "UpdateOffset",
        "GetOffset",
        "QueryOffset",
    }
)


def grpc_signature(secret_key: str, date_time: str) -> str:
    """The ``Signature`` an SDK sends: hex of HMAC-SHA1(secret key, date-time), lower case."""
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()


def authorization_header(access_key: str, secret_key: str, date_time: str) -> str:
    """The ``authorization`` value of a call signed at ``date_time``."""
    signature = grpc_signature(secret_key, date_time)
    return f"{ALGORITHM} Credential={access_key}, SignedHeaders={DATE_TIME}, Signature={signature}"


def parse_authorization(value: str) -> tuple[str, str]:
    """``(access key, signature)`` of an ``authorization`` value; ValueError when malformed."""
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise ValueError(f"authorization is not {ALGORITHM}")
    parts: dict[str, str] = {}
    for item in rest.split(","):
        key, sep, val = item.strip().partition("=")
        if sep:
            parts[key.strip()] = val.strip()
    credential, signature = parts.get("Credential", ""), parts.get("Signature", "")
    access_key = credential.split("/", 1)[0]
    if not access_key or not signature:
        raise ValueError("authorization has no Credential or no Signature")
    return access_key, signature


def signature_matches(signature: str, secret_key: str, date_time: str) -> bool:
    try:
        sent = bytes.fromhex(signature)
    except ValueError:
        return False
    expected = hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).digest()
    return hmac.compare_digest(sent, expected)


def _host_of_peer(peer: str) -> str:
    """``ipv4:1.2.3.4:5`` → ``1.2.3.4``; ``ipv6:[::1]:5`` → ``::1``."""
    return host_of(peer.partition(":")[2])


def needed_resources(method: str, request: Any) -> dict[str, int]:
    """Resource (topic, or ``%RETRY%group``) → permission a ``method`` call needs."""
    need: dict[str, int] = {}
    if method in _PUB_METHODS:
        if method == "SendMessage":
            for message in request.messages:
                need[message.topic.name] = PERM_PUB
        elif request.topic.name:
            need[request.topic.name] = PERM_PUB
    elif method in _SUB_METHODS:
        topic = request.message_queue.topic.name if hasattr(request, "message_queue") else request.topic.name
        if topic:
            need[topic] = PERM_SUB
        if request.group.name:
            need[group_resource(request.group.name)] = PERM_SUB
    return need


class Refusal(Exception):
    def __init__(self, code: pb.Code, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class GrpcAclInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Checks every MessagingService call against ``validator``'s rules (module doc)."""

    def __init__(self, validator: PlainAclValidator, refusals: RateLimitedLog | None = None) -> None:
        self.validator = validator
        self._refusals = refusals or RateLimitedLog(log)

    def check(self, method: str, metadata: dict[str, str], peer: str, request: Any | None) -> None:
        """Raise :class:`Refusal` unless the call may go on."""
        config = self.validator.config
        host = _host_of_peer(peer)
        if config.globally_white(host):
            return
        header = metadata.get(AUTHORIZATION)
        if not header:
            raise Refusal(
                pb.UNAUTHORIZED, f"No authorization in gRPC call {method} from {host}; ACL is enabled"
            )
        try:
            access_key, signature = parse_authorization(header)
        except ValueError as exc:
            raise Refusal(pb.UNAUTHORIZED, f"malformed authorization in gRPC call {method}: {exc}") from None
        account = config.accounts.get(access_key)
        if account is None:
            raise Refusal(pb.UNAUTHORIZED, f"No acl config for accessKey {access_key}")
        if account.white_match(host):
            return
        if not signature_matches(signature, account.secret_key, metadata.get(DATE_TIME, "")):
            raise Refusal(pb.UNAUTHORIZED, f"signature mismatch for accessKey {access_key}")
        if request is None or (account.admin and account.resource_perms is None):
            return
        for resource, needed in needed_resources(method, request).items():
            if not perm_allows(needed, account.owned_perm(resource)):
                what = f"{perm_name(needed)} {describe_resource(resource)}"
                raise Refusal(pb.FORBIDDEN, f"No permission to {what} for accessKey {access_key}")

    def _refuse(self, refusal: Refusal, peer: str) -> pb.Status:
        self._refusals.warning(refusal.reason, peer)
        return status.status(refusal.code, refusal.reason)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method = handler_call_details.method.rsplit("/", 1)[-1]
        response_type = getattr(spb, f"{method}Response", None)
        has_status = response_type is not None and "status" in response_type.DESCRIPTOR.fields_by_name
        inner_unary = handler.unary_unary
        inner_stream = handler.unary_stream
        checker = self

        def metadata_of(context: grpc.aio.ServicerContext[Any, Any]) -> dict[str, str]:
            return {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}

        async def refused(
            request: Any, context: grpc.aio.ServicerContext[Any, Any], answer: bool, code: grpc.StatusCode
        ) -> Any:
            """None when the call passes the check; else the refusal is logged and either answered
            by a response carrying its status (``answer``, and the method's response has one) or
            the call is aborted with ``code``."""
            try:
                checker.check(method, metadata_of(context), context.peer(), request)
            except Refusal as refusal:
                st = checker._refuse(refusal, context.peer())
                if answer and has_status:
                    assert response_type is not None
                    return response_type(status=st)
                await context.abort(code, refusal.reason)
            return None

        if inner_unary is not None:

            async def unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
                answer = await refused(request, context, True, grpc.StatusCode.PERMISSION_DENIED)
                if answer is not None:
                    return answer
                return await inner_unary(request, context)

            return grpc.unary_unary_rpc_method_handler(
                unary,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if inner_stream is not None:

            async def stream(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
                answer = await refused(request, context, True, grpc.StatusCode.PERMISSION_DENIED)
                if answer is not None:
                    yield answer
                    return
                async for response in inner_stream(request, context):
                    yield response

            return grpc.unary_stream_rpc_method_handler(
                stream,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        inner_bidi = handler.stream_stream
        if inner_bidi is not None:

            async def bidi(requests: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
                await refused(None, context, False, grpc.StatusCode.UNAUTHENTICATED)
                async for response in inner_bidi(requests, context):
                    yield response

            return grpc.stream_stream_rpc_method_handler(
                bidi,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler


__all__ = [
    "GrpcAclInterceptor",
    "authorization_header",
    "grpc_signature",
    "needed_resources",
    "parse_authorization",
]
