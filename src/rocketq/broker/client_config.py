"""CHECK_CLIENT_CONFIG (46): may a consumer subscribe with this filter on this broker?

A Java consumer sends this to every broker of its topics before it starts when it subscribes with
an expression that is not a tag list (``checkClientInBroker``). The request has no header fields;
the body is ``CheckClientRequestBody`` as JSON::

    {"clientId":"10.0.0.1@123","group":"CG",
     "subscriptionData":{"topic":"T","subString":"a > 5","expressionType":"SQL92",
                         "tagsSet":[],"codeSet":[],"subVersion":1700000000000,"classFilterMode":false}}

Answer (``ClientManageProcessor.checkClientConfig``), first rule that applies:

=========================================================  ===================================
no body, or no ``subscriptionData``                        0 SUCCESS
expression type TAG (or none)                              0 SUCCESS (tags always work)
``enable_property_filter`` is off                          1 SYSTEM_ERROR, "The broker does not
                                                           support consumer to filter message
                                                           by <type>"
the expression does not compile (``compile_filter``),      23 SUBSCRIPTION_PARSE_FAILED, remark
or the type is neither TAG nor SQL92                       names the group, topic and problem
otherwise                                                  0 SUCCESS
=========================================================  ===================================

A body that is not a JSON object answers 1 with a remark saying so (Java fails with a decoding
exception there). Like RocketMQ, the group is not required to exist yet: the consumer checks
before its first heartbeat, which is what creates an auto-created group.
"""

from __future__ import annotations

import logging
from typing import Any

from rocketq.broker.context import BrokerContext
from rocketq.errors import BodyFormatError, ResponseCode, SubscriptionParseFailed
from rocketq.filter import compile_filter
from rocketq.protocol.fastjson import as_str
from rocketq.protocol.heartbeat import EXPRESSION_TAG, SubscriptionData, loads_body
from rocketq.remoting.command import RemotingCommand, create_response
from rocketq.remoting.connection import Connection

log = logging.getLogger(__name__)


def _load_body(body: bytes) -> dict[str, Any] | None:
    """The body as a JSON object; None for an empty body. Raises BodyFormatError."""
    if not body:
        return None
    try:
        obj = loads_body(body)
    except ValueError as exc:
        raise BodyFormatError(f"CHECK_CLIENT_CONFIG body ({len(body)} B) is not JSON: {exc}") from None
    if obj is None:
        return None
    if not isinstance(obj, dict):
        raise BodyFormatError(f"CHECK_CLIENT_CONFIG body is a JSON {type(obj).__name__}, not an object")
    return obj


def check_client_config(body: bytes, *, enable_property_filter: bool) -> tuple[int, str | None]:
    """The (response code, remark) for a CHECK_CLIENT_CONFIG body (pure; see the module table)."""
    try:
        obj = _load_body(body)
    except BodyFormatError as exc:
        return int(ResponseCode.SYSTEM_ERROR), str(exc)
    raw_sub = obj.get("subscriptionData") if obj is not None else None
    if not isinstance(raw_sub, dict):
        return int(ResponseCode.SUCCESS), None
    assert obj is not None
    sub = SubscriptionData.from_json(raw_sub)
    if sub.expression_type == EXPRESSION_TAG:
        return int(ResponseCode.SUCCESS), None
    if not enable_property_filter:
        return (
            int(ResponseCode.SYSTEM_ERROR),
            f"The broker does not support consumer to filter message by {sub.expression_type}",
        )
    try:
        compile_filter(sub.expression_type, sub.sub_string)
    except SubscriptionParseFailed as exc:
        group = as_str(obj.get("group"), "")
        client_id = as_str(obj.get("clientId"), "")
        log.warning(
            "client %s@%s filters by %s but the expression does not compile: %s",
            client_id,
            group,
            sub.expression_type,
            exc,
        )
        return int(ResponseCode.SUBSCRIPTION_PARSE_FAILED), f"group {group} topic {sub.topic}: {exc}"
    return int(ResponseCode.SUCCESS), None


class ClientConfigProcessor:
    """Answers CHECK_CLIENT_CONFIG with the broker's ``enable_property_filter``."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    async def check_client_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        code, remark = check_client_config(
            request.body, enable_property_filter=self.ctx.config.enable_property_filter
        )
        return create_response(request, code, remark)


__all__ = ["ClientConfigProcessor", "check_client_config"]
