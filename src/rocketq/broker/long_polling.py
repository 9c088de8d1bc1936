"""Long polling: pulls that found nothing wait for a message instead of returning at once.

RocketMQ's ``PullRequestHoldService``. A pull with the SUSPEND flag that would answer
PULL_NOT_FOUND (19) is parked under its queue ``(topic, queueId)``; the pull processor then
re-runs it once (no suspension, no offset commit) when the hold ends::

    why the hold ends                                   how it is noticed
    a message for that queue was dispatched and its     dispatcher thread → arrival listener →
      tags code (and, for SQL92, its properties)        ThreadsafeBatcher (one call_soon_threadsafe
      pass the pull's filter                            per loop iteration, all windows) → wake;
                                                        dispatched on the loop (a small window):
                                                        arrival listener → wake, in the call
    the queue's max offset passed the pull's offset     periodic check (5 s; 1 s without long
      (also covers filtered-out arrivals)                 polling) and once right after parking
    the hold time passed                                one timer per held pull
    the client's connection closed / broker shutdown    close callback / stop()

Invariants and the races they close:

* the arrival listener runs on the dispatcher thread (or on the loop, for a window the loop
  dispatched itself); it only reads the held-queue table (a
  dict membership test) and hands matching ``(queue, new max offset, tags code)`` triples to the
  event loop; everything else happens on the loop thread;
* dispatch updates the ConsumeQueue *before* it calls arrival listeners, and a pull re-checks
  the queue's max offset right after parking; so a message dispatched between the pull's read and
  its parking is seen by that re-check, and one dispatched later reaches the listener;
* every held pull ends exactly once (its future is resolved once, its timer cancelled, and it is
  removed from the table), whichever of the reasons comes first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from rocketq.broker.loop_coalesce import ThreadsafeBatcher
from rocketq.filter import MessageFilter

log = logging.getLogger(__name__)

#: Periodic re-check with long polling on / off (RocketMQ's intervals).
LONG_POLLING_CHECK_INTERVAL_S = 5.0
SHORT_POLLING_CHECK_INTERVAL_S = 1.0

QueueKey = tuple[str, int]
#: (queue, its new max offset, tags code, properties when a filter may need them)
ArrivalHit = tuple[QueueKey, int, int, dict[str, str] | None]

ARRIVED = "arrived"
CHECKED = "checked"
TIMEOUT = "timeout"
CLOSED = "closed"
SHUTDOWN = "shutdown"


class ArrivalRequest(Protocol):
    """What the arrival listener reads of a dispatched record (``DispatchRequest`` fits)."""

    topic: str
    queue_id: int
    consume_queue_offset: int
    tags_code: int


class Closable(Protocol):
    def add_close_callback(self, callback: Callable[..., None]) -> None: ...

    def remove_close_callback(self, callback: Callable[..., None]) -> None: ...


@dataclass(eq=False, slots=True)
class _Held:
    key: QueueKey
    offset: int
    codes: frozenset[int] | None
    future: asyncio.Future[str]
    message_filter: MessageFilter | None = None
    timer: asyncio.TimerHandle | None = None
    on_close: Callable[..., None] | None = field(default=None, repr=False)


class PullRequestHoldService:
    """Parks pulls per queue until a message arrives or their hold time ends."""

    def __init__(
        self,
        max_offset: Callable[[str, int], int],
        *,
        check_interval_s: float = LONG_POLLING_CHECK_INTERVAL_S,
    ) -> None:
        self._max_offset = max_offset
        self.check_interval_s = check_interval_s
        self._table: dict[QueueKey, list[_Held]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._arrivals: ThreadsafeBatcher[ArrivalHit] | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._stopped = False
        self.wakeups: dict[str, int] = {ARRIVED: 0, CHECKED: 0, TIMEOUT: 0, CLOSED: 0, SHUTDOWN: 0}

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        """Start the periodic check on the running event loop."""
        self._loop = asyncio.get_running_loop()
        # arrivals of every window dispatched while a delivery is pending join that delivery:
        # one loop wake-up (self-pipe write) per iteration instead of one per window
        self._arrivals = ThreadsafeBatcher(self._loop, self.notify_arrivals)
        self._stopped = False
        if self._ticker is None:
            self._ticker = self._loop.create_task(self._tick_loop(), name="PullRequestHoldService")

    async def stop(self) -> None:
        """Stop checking and end every hold (the pulls answer with what they find)."""
        self._stopped = True
        ticker, self._ticker = self._ticker, None
        if ticker is not None:
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker
        for held_list in list(self._table.values()):
            for held in list(held_list):
                self._wake(held, SHUTDOWN)

    @property
    def held_count(self) -> int:
        return sum(len(v) for v in self._table.values())

    # -- holding ----------------------------------------------------------------------------
    async def suspend(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        codes: frozenset[int] | None,
        timeout_s: float,
        channel: Closable | None = None,
        message_filter: MessageFilter | None = None,
    ) -> str:
        """Wait until a message at or after ``offset`` may be there; returns why the hold ended
        (``arrived``, ``checked``, ``timeout``, ``closed`` or ``shutdown``). With
        ``message_filter``, an arrival whose properties it rejects does not end the hold."""
        if self._stopped:
            return SHUTDOWN
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        future: asyncio.Future[str] = loop.create_future()
        key = (topic, queue_id)
        held = _Held(key, offset, codes, future, message_filter)
        self._table.setdefault(key, []).append(held)
        held.timer = loop.call_later(max(0.0, timeout_s), self._wake, held, TIMEOUT)
        if channel is not None:

            def on_close(_conn: object) -> None:
                self._wake(held, CLOSED)

            held.on_close = on_close
            channel.add_close_callback(on_close)
        if self._max_offset(topic, queue_id) > offset:
            self._wake(held, CHECKED)
        try:
            return await future
        finally:
            self._remove(held)
            if channel is not None and held.on_close is not None:
                channel.remove_close_callback(held.on_close)

    def _remove(self, held: _Held) -> None:
        if held.timer is not None:
            held.timer.cancel()
            held.timer = None
        held_list = self._table.get(held.key)
        if held_list is None:
            return
        with contextlib.suppress(ValueError):
            held_list.remove(held)
        if not held_list:
            del self._table[held.key]

    def _wake(self, held: _Held, reason: str) -> None:
        self._remove(held)
        if not held.future.done():
            held.future.set_result(reason)
            self.wakeups[reason] = self.wakeups.get(reason, 0) + 1

    # -- wake-ups ---------------------------------------------------------------------------
    def arrival_listener(self, requests: Sequence[ArrivalRequest]) -> None:
        """Dispatcher hook (runs on the dispatcher thread): hand arrivals on held queues to the
        event loop. Cheap when nothing is held."""
        table = self._table
        arrivals = self._arrivals
        if not table or arrivals is None:
            return
        hits: list[ArrivalHit] | None = None
        for r in requests:
            key = (r.topic, r.queue_id)
            held_list = table.get(key)
            if held_list:
                if hits is None:
                    hits = []
                # the properties (decoded from the record's bytes on access) only matter to a
                # pull held with a property filter; without one, skip decoding them per record.
                # A filtered pull parked after this check sees props None and is woken to re-run
                # its filter in the pull itself, which is correct, just not minimal.
                props: dict[str, str] | None = None
                if any(h.message_filter is not None for h in held_list):
                    props = getattr(r, "properties", None)
                hits.append((key, r.consume_queue_offset + 1, r.tags_code, props))
        if hits:
            arrivals.post(hits)  # dropped if the loop is closed: nothing is held any more

    def notify_arrivals(
        self, arrivals: Sequence[tuple[QueueKey, int, int] | tuple[QueueKey, int, int, dict[str, str] | None]]
    ) -> None:
        """On the loop: wake held pulls whose queue grew past their offset with a matching tag
        (and matching properties, for pulls held with a property filter)."""
        for key, new_max, tags_code, *rest in arrivals:
            held_list = self._table.get(key)
            if not held_list:
                continue
            props = rest[0] if rest else None
            for held in list(held_list):
                if new_max > held.offset and (held.codes is None or tags_code in held.codes):
                    f = held.message_filter
                    if f is None or props is None or f.match(props.get("TAGS"), props):
                        self._wake(held, ARRIVED)

    def check_now(self) -> int:
        """Wake every held pull whose queue's max offset is past its offset; returns how many."""
        woken = 0
        for key, held_list in list(self._table.items()):
            max_offset = self._max_offset(*key)
            for held in list(held_list):
                if max_offset > held.offset:
                    self._wake(held, CHECKED)
                    woken += 1
        return woken

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(self.check_interval_s)
            try:
                self.check_now()
            except Exception:
                log.exception("periodic check of held pulls failed")


__all__ = [
    "ARRIVED",
    "CHECKED",
    "CLOSED",
    "LONG_POLLING_CHECK_INTERVAL_S",
    "SHORT_POLLING_CHECK_INTERVAL_S",
    "SHUTDOWN",
    "TIMEOUT",
    "PullRequestHoldService",
]
