"""Subscription-group and topic removal admin requests: UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200),
DELETE_SUBSCRIPTIONGROUP (207), DELETE_TOPIC_IN_BROKER (215).

Every change is in its file (``subscriptionGroup.json``, ``topics.json``,
``consumerOffset.json``) before the request is answered.

* 200: the body is a ``SubscriptionGroupConfig`` JSON object; missing fields take RocketMQ's
  defaults, an invalid group name answers INVALID_PARAMETER (29).
* 207: header ``groupName``, optional ``cleanOffset`` (also removes the group's committed offsets);
  deleting a group that does not exist succeeds, as in RocketMQ.
* 215: header ``topic``; system topics are refused with SYSTEM_ERROR (1). The topic config and
  every group's committed offsets for it are removed; the stored messages stay (they age out
  with the CommitLog) and the name servers learn of the change at the next registration.
"""

from __future__ import annotations

import logging

from rocketq.broker.context import BrokerContext
from rocketq.broker.subscription_group import SubscriptionGroupConfig, group_name_problem
from rocketq.errors import InvalidParameter, ResponseCode
from rocketq.protocol import fastjson
from rocketq.protocol.headers import get_bool, get_str
from rocketq.remoting.command import RemotingCommand, create_response
from rocketq.remoting.connection import Connection

log = logging.getLogger(__name__)


def parse_group_config(body: bytes | None) -> SubscriptionGroupConfig:
    """A ``SubscriptionGroupConfig`` request body → the config (InvalidParameter if unusable)."""
    if not body:
        raise InvalidParameter("the subscription group config body is missing")
    try:
        obj = fastjson.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidParameter(f"the subscription group config does not parse: {exc}") from None
    if not isinstance(obj, dict):
        raise InvalidParameter("the subscription group config is not a JSON object")
    name = obj.get("groupName")
    if not isinstance(name, str):
        raise InvalidParameter("groupName is missing")
    problem = group_name_problem(name)
    if problem is not None:
        raise InvalidParameter(problem)
    return SubscriptionGroupConfig.from_json(name, obj)


class AdminGroupProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    async def update_and_create_subscription_group(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        config = parse_group_config(request.body)
        self.ctx.groups.update(config)
        log.info("subscription group %s updated by %s", config.group_name, conn.remote_address)
        await self.ctx.groups_durable()
        return create_response(request, ResponseCode.SUCCESS)

    async def delete_subscription_group(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        ctx = self.ctx
        group = get_str(request.ext_fields, "groupName")
        if ctx.groups.delete(group) is not None:
            log.info("subscription group %s deleted by %s", group, conn.remote_address)
        if get_bool(request.ext_fields, "cleanOffset"):
            for topic in ctx.offsets.topics_of_group(group):
                ctx.offsets.remove(topic, group)
        await ctx.groups_durable()
        await ctx.offsets_durable()
        return create_response(request, ResponseCode.SUCCESS)

    async def delete_topic_in_broker(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        ctx = self.ctx
        topic = get_str(request.ext_fields, "topic").strip()
        if not topic:
            return create_response(request, ResponseCode.SYSTEM_ERROR, "The specified topic is blank.")
        if ctx.topics.is_system(topic):
            return create_response(
                request, ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic."
            )
        if ctx.topics.delete(topic) is not None:
            log.info("topic %s deleted by %s", topic, conn.remote_address)
        for group in ctx.offsets.groups_of_topic(topic):
            ctx.offsets.remove(topic, group)
        await ctx.topics_durable()
        await ctx.offsets_durable()
        return create_response(request, ResponseCode.SUCCESS)


__all__ = ["AdminGroupProcessor", "parse_group_config"]
