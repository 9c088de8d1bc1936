"""Remoting requests the broker tests send by hand: one PULL_MESSAGE builder for all of them."""

from __future__ import annotations

from rocketq.broker.headers import (
    PULL_FLAG_COMMIT_OFFSET,
    PULL_FLAG_SUBSCRIPTION,
    PULL_FLAG_SUSPEND,
    PullMessageRequestHeader,
)
from rocketq.remoting import RemotingCommand, RequestCode, create_request

#: What the Java and Node clients send as the long-polling suspend time.
SUSPEND_MS = 15_000


def pull_request(
    topic: str,
    offset: int,
    *,
    queue_id: int = 0,
    group: str = "CG",
    suspend: bool = False,
    subscription: str | None = "*",
    expression_type: str | None = None,
    suspend_ms: int = SUSPEND_MS,
    commit_offset: int | None = None,
    max_msgs: int = 32,
) -> RemotingCommand:
    """A PULL_MESSAGE request as a client builds it: the subscription flag when ``subscription``
    is given, the suspend flag when ``suspend``, the commit-offset flag when ``commit_offset``."""
    flag = 0
    if suspend:
        flag |= PULL_FLAG_SUSPEND
    if subscription is not None:
        flag |= PULL_FLAG_SUBSCRIPTION
    if commit_offset is not None:
        flag |= PULL_FLAG_COMMIT_OFFSET
    header = PullMessageRequestHeader(
        consumer_group=group,
        topic=topic,
        queue_id=queue_id,
        queue_offset=offset,
        max_msg_nums=max_msgs,
        sys_flag=flag,
        commit_offset=commit_offset or 0,
        suspend_timeout_millis=suspend_ms,
        sub_version=0,
        subscription=subscription,
        expression_type=expression_type,
    )
    return create_request(RequestCode.PULL_MESSAGE, header.to_ext_fields())
