"""Remoting requests the broker tests send by hand, one builder per request kind.

* :func:`pull_request`: PULL_MESSAGE as the Java and Node push/pull consumers send it.
* :func:`send_request`: SEND_MESSAGE_V2 (or SEND_MESSAGE / SEND_BATCH_MESSAGE through
  ``code``) as a producer sends it to a topic it may know only from ``TBW102``.
* :func:`create_topic_request` / :func:`create_topic_fields`: UPDATE_AND_CREATE_TOPIC with the
  fields ``mqadmin updateTopic`` sends (the fields alone for harnesses with their own client).
"""

from __future__ import annotations

import time

from rocketq.message import encode_properties
from rocketq.protocol import record as rec
from rocketq.protocol.headers import (
    PULL_FLAG_COMMIT_OFFSET,
    PULL_FLAG_SUBSCRIPTION,
    PULL_FLAG_SUSPEND,
    PullMessageRequestHeader,
    SendMessageRequestHeader,
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


def send_request(
    topic: str,
    body: bytes,
    *,
    queue_id: int = 0,
    group: str = "PG",
    properties: dict[str, str] | None = None,
    sys_flag: int = 0,
    default_topic_queue_nums: int = 4,
    reconsume_times: int | None = None,
    max_reconsume_times: int | None = None,
    broker_name: str | None = None,
    v2: bool = True,
    code: int | None = None,
) -> RemotingCommand:
    """A send request as a producer builds it (born now, flag 0, default topic ``TBW102``).
    ``code`` defaults to SEND_MESSAGE_V2 (one-letter header keys) or, with ``v2=False``,
    SEND_MESSAGE (V1 names); ``reconsume_times``, ``max_reconsume_times`` and ``broker_name``
    are left out of the header when None."""
    header = SendMessageRequestHeader(
        producer_group=group,
        topic=topic,
        default_topic="TBW102",
        default_topic_queue_nums=default_topic_queue_nums,
        queue_id=queue_id,
        sys_flag=sys_flag,
        born_timestamp=time.time_ns() // 1_000_000,
        flag=0,
        properties=encode_properties(properties or {}),
        reconsume_times=reconsume_times,
        max_reconsume_times=max_reconsume_times,
        broker_name=broker_name,
    )
    if code is None:
        code = RequestCode.SEND_MESSAGE_V2 if v2 else RequestCode.SEND_MESSAGE
    return create_request(code, header.to_ext_fields(v2=v2), body)


def create_topic_fields(topic: str, *, queues: int = 4, perm: int = 6) -> dict[str, object]:
    """The extFields of UPDATE_AND_CREATE_TOPIC as ``mqadmin updateTopic`` sends them: ``queues``
    read and write queues, ``perm`` 6 (read + write), default topic TBW102, SINGLE_TAG
    filtering, system flag 0, not ordered."""
    return {
        "topic": topic,
        "defaultTopic": "TBW102",
        "readQueueNums": queues,
        "writeQueueNums": queues,
        "perm": perm,
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": 0,
        "order": False,
    }


def create_topic_request(topic: str, *, queues: int = 4, perm: int = 6) -> RemotingCommand:
    """UPDATE_AND_CREATE_TOPIC with :func:`create_topic_fields`."""
    return create_request(
        RequestCode.UPDATE_AND_CREATE_TOPIC, create_topic_fields(topic, queues=queues, perm=perm)
    )


def pulled_records(body: bytes) -> list[rec.RecordView]:
    """The records of a pull answer's body, decoded one after the other with their CRCs checked."""
    views = []
    pos = 0
    while pos < len(body):
        view = rec.decode_record(body, pos, check_crc=True)
        views.append(view)
        pos += view.size
    return views
