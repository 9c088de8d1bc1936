"""Sending a consumed message back to its broker (CONSUMER_SEND_MSG_BACK, 36).

The push consumer sends a message back when its listener failed on it: ``delayLevel`` is
``3 + reconsumeTimes``, and the broker re-delivers it through ``%RETRY%<group>`` later (or moves
it to ``%DLQ%<group>`` once ``maxReconsumeTimes`` is reached). A poison record (one a pull could
not decode) goes with ``delayLevel`` -1, straight to the DLQ, as stored: :func:`dead_letter`
tries each again every :data:`SEND_BACK_RETRY_S` while the broker cannot be reached and skips it,
with an ERROR line, when the broker refuses it.
"""

from __future__ import annotations

import asyncio
import logging

from rocketq.client.aio import error_for_response
from rocketq.client.consumer_core import ConsumerCore, PoisonRecord
from rocketq.client.process_queue import ProcessQueue
from rocketq.errors import ClientStateError, RemotingError, ResponseCode, RocketqError
from rocketq.message import PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_RETRY_TOPIC, MessageExt
from rocketq.protocol.queue import MessageQueue
from rocketq.protocol.topic import dlq_topic
from rocketq.remoting import RequestCode

log = logging.getLogger("rocketq.client.push")  # the push consumer's logger, as before the split

#: Delay before a message whose send-back failed is consumed (or sent back) again.
SEND_BACK_RETRY_S = 1.0


async def send_back(
    core: ConsumerCore, mq: MessageQueue, m: MessageExt, delay_level: int, max_reconsume_times: int
) -> None:
    """CONSUMER_SEND_MSG_BACK of ``m`` (``delay_level`` -1: straight to the DLQ); raises
    RocketqError when it failed."""
    fields = {
        "offset": m.commit_log_offset,
        "group": core.group,
        "delayLevel": delay_level,
        "originMsgId": m.properties.get(PROPERTY_ORIGIN_MESSAGE_ID) or m.msg_id,
        "originTopic": m.properties.get(PROPERTY_RETRY_TOPIC) or m.topic,
        "unitMode": False,
        "maxReconsumeTimes": max_reconsume_times,
    }
    response = await core.invoke(RequestCode.CONSUMER_SEND_MSG_BACK, mq, fields)
    if response.code != ResponseCode.SUCCESS:
        raise error_for_response(response, mq.broker_name)


async def dead_letter(
    core: ConsumerCore, pq: ProcessQueue, poison: list[PoisonRecord], max_reconsume_times: int
) -> bool:
    """Send each poison record of ``pq`` that parsed to the group's DLQ (clustering; the pull
    already logged them). Retried while the broker cannot be reached; skipped, with an ERROR
    line, when the broker refuses. False when the queue was dropped or the consumer stopped
    meanwhile (the pull's answer must then be left unused)."""
    if not core.clustering:
        return True
    dlq = dlq_topic(core.group)
    for p in poison:
        m = p.message
        if m is None:
            continue
        while True:
            if pq.dropped:
                return False
            try:
                await send_back(core, pq.mq, m, -1, max_reconsume_times)
            except ClientStateError:
                return False
            except RemotingError as exc:
                log.warning(
                    "poison message at offset %d of %s not yet in %s, trying again: %s",
                    m.queue_offset, pq.mq, dlq, exc,
                )  # fmt: skip
                await asyncio.sleep(SEND_BACK_RETRY_S)
                continue
            except RocketqError as exc:
                log.error(
                    "poison message at offset %d of %s could not be sent to %s: %s; skipped",
                    m.queue_offset, pq.mq, dlq, exc,
                )  # fmt: skip
            else:
                log.info("poison message at offset %d of %s is in %s", m.queue_offset, pq.mq, dlq)
            break
    return not pq.dropped
