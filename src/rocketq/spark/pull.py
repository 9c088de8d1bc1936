"""Reading one queue's offset range ``[start, end)`` from its broker, pipelined.

This runs inside Spark executors (``read()``), with only what the input partition carries: the
broker's address, the queue and the range. Pulls are LITE_PULL_MESSAGE (361) requests without
suspension and with subscription ``*`` (tags are filtered by the caller), so a pull at offset
``o`` answers the messages at ``o, o+1, ...`` up to the batch size::

    window k = [start + k*b, start + (k+1)*b) ∩ [start, end)        b = pull batch size
    up to ``depth`` windows are in flight; results are used strictly in window order
    a short answer (byte limit) → the rest of the window is pulled again before moving on
    messages starting after the expected offset, or OFFSET_MOVED → offsets lost to retention:
        ``on_loss(expected, got)`` decides (raise, or skip with a warning)
    an answer with nothing past the expected offset (PULL_NOT_FOUND at the queue's end) ends
        the range early: the queue holds fewer messages than planned
    a poison record (body CRC mismatch, a body marked compressed that does not inflate) is
        logged at ERROR and read like the others, its body as stored (rows carry bytes anyway);
        a record that does not parse at all is a loss of its one offset (``on_loss``)

Invariant: the yielded messages are in queue-offset order, each offset in ``[start, end)`` at
most once.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from rocketq.client.aio import error_for_response
from rocketq.client.consumer_core import decode_pull_body, log_poison
from rocketq.errors import ResponseCode
from rocketq.message import MessageExt
from rocketq.protocol.headers import PULL_FLAG_LITE_PULL
from rocketq.remoting import RemotingClient, RequestCode, create_request

log = logging.getLogger(__name__)

DEFAULT_PIPELINE_DEPTH = 8
#: The reader's consumer group on the broker (pulls never commit offsets).
READER_GROUP = "SPARK_ROCKETQ_READER"

_OK_CODES = (
    ResponseCode.SUCCESS,
    ResponseCode.PULL_NOT_FOUND,
    ResponseCode.PULL_RETRY_IMMEDIATELY,
    ResponseCode.PULL_OFFSET_MOVED,
)


@dataclass(frozen=True, slots=True)
class Pulled:
    code: int
    next_offset: int
    messages: list[MessageExt]
    #: The offset of a record that does not parse (the answer's records after it are missing).
    broken: int | None = None


async def pull_once(
    client: RemotingClient,
    addr: str,
    topic: str,
    queue_id: int,
    offset: int,
    max_count: int,
    timeout_s: float,
    group: str = READER_GROUP,
) -> Pulled:
    """One non-suspending pull of up to ``max_count`` messages from ``offset``."""
    fields: dict[str, object] = {
        "consumerGroup": group,
        "topic": topic,
        "queueId": queue_id,
        "queueOffset": offset,
        "maxMsgNums": max_count,
        "sysFlag": PULL_FLAG_LITE_PULL,
        "commitOffset": 0,
        "suspendTimeoutMillis": 0,
        "subscription": "*",
        "subVersion": 0,
        "expressionType": "TAG",
    }
    response = await client.invoke(addr, create_request(RequestCode.LITE_PULL_MESSAGE, fields), timeout_s)
    if response.code not in _OK_CODES:
        raise error_for_response(response, addr)
    next_offset = int(response.ext_fields.get("nextBeginOffset", offset))
    if response.code != ResponseCode.SUCCESS:
        return Pulled(response.code, next_offset, [])
    return decoded_pull(response.code, next_offset, response.body, f"{topic}/{queue_id} from {addr}", offset)


def decoded_pull(code: int, next_offset: int, body: bytes, what: str, offset: int) -> Pulled:
    """The messages of a pull answer in queue order, poison records (:func:`decode_pull_body`)
    included with their bodies as stored; ``broken`` set when a record does not parse."""
    decoded = decode_pull_body(body, first_offset=offset)
    messages = decoded.messages
    broken: int | None = None
    if decoded.poison:
        log_poison(f"Spark read of {what}", decoded.poison, "read with its body as stored")
        raw = [p.message for p in decoded.poison if p.message is not None]
        messages = sorted(messages + raw, key=lambda m: m.queue_offset)
        broken = next((p.queue_offset for p in decoded.poison if p.message is None), None)
    return Pulled(code, next_offset, messages, broken)


async def read_range(
    client: RemotingClient,
    addr: str,
    topic: str,
    queue_id: int,
    start: int,
    end: int,
    *,
    batch_size: int,
    timeout_s: float,
    on_loss: Callable[[int, int], None],
    depth: int = DEFAULT_PIPELINE_DEPTH,
) -> AsyncIterator[list[MessageExt]]:
    """Yield the messages of ``[start, end)`` in offset order, a pull's worth at a time."""
    loop = asyncio.get_running_loop()
    windows: collections.deque[tuple[int, int, asyncio.Task[Pulled]]] = collections.deque()
    next_window = start

    def launch() -> None:
        nonlocal next_window
        while len(windows) < depth and next_window < end:
            count = min(batch_size, end - next_window)
            task = loop.create_task(pull_once(client, addr, topic, queue_id, next_window, count, timeout_s))
            windows.append((next_window, next_window + count, task))
            next_window += count

    position = start
    try:
        launch()
        while windows:
            _, window_end, task = windows.popleft()
            pulled = await task
            launch()
            if position >= window_end:
                continue  # covered already (a loss skipped past it)
            while True:
                before = position
                got = [m for m in pulled.messages if position <= m.queue_offset < window_end]
                first = got[0].queue_offset if got else None
                if pulled.code == ResponseCode.PULL_OFFSET_MOVED or (first is not None and first > position):
                    resume = min(first if first is not None else pulled.next_offset, end)
                    if resume > position:
                        on_loss(position, resume)
                        position = resume
                if got:
                    yield got
                    position = got[-1].queue_offset + 1
                if pulled.broken is not None and pulled.broken == position < window_end:
                    on_loss(position, position + 1)  # a record that does not parse
                    position += 1
                if position >= window_end:
                    break
                if position == before:
                    log.warning(
                        "%s/%d on %s ends at offset %d, before the planned end %d",
                        topic,
                        queue_id,
                        addr,
                        position,
                        end,
                    )
                    return
                # a short answer: pull the rest of this window before the next one
                pulled = await pull_once(
                    client, addr, topic, queue_id, position, window_end - position, timeout_s
                )
    finally:
        for _, _, task in windows:
            task.cancel()
        await asyncio.gather(*(t for _, _, t in windows), return_exceptions=True)


__all__ = ["READER_GROUP", "Pulled", "decoded_pull", "pull_once", "read_range"]
