"""Pop state of one (group, topic, queue): pure, in memory, no clock and no I/O.

The state of a queue for a group is two things::

    next_offset   the next queue offset never handed out yet (fresh pops start here)
    in_flight     offset → InFlight(attempt, invisible_until_ms, nonce) for every message that
                  was delivered and not acked yet

Every offset below ``next_offset`` that is not in ``in_flight`` is *done*: acked, forwarded to
the DLQ, rejected by the consumer's filter, or absent from the store. So the acked set above the
committed watermark needs no table of its own, and the watermark (the group's consumer offset:
the lowest offset not yet done) is ``min(in_flight)`` or ``next_offset`` when nothing is in
flight.

The four mutations are exactly the journal's record types (:mod:`rocketq.broker.pop.journal`),
so replaying a journal rebuilds the state::

    advance(offset)              next_offset = max(next_offset, offset)
    deliver(offset, a, t, n)     in_flight[offset] = (a, t, n); next_offset = max(next_offset, offset + 1)
    ack(offset)                  in_flight.pop(offset)
    (key)                        a journal-only record naming the (group, topic, queue) of a key id

Invariants kept: ``in_flight`` keys are all below ``next_offset``; ``next_offset`` never moves
back; attempts of an offset only grow (a redelivery is ``deliver`` with attempt + 1; a change of
the invisible time keeps the attempt).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class InFlight:
    """One delivered, not yet acked message."""

    attempt: int
    invisible_until_ms: int
    nonce: int


@dataclass(slots=True)
class QueueState:
    """Pop progress of one group on one queue (see the module docstring)."""

    next_offset: int = 0
    in_flight: dict[int, InFlight] = field(default_factory=dict)
    #: Lazy min-heap over in-flight offsets (may hold offsets that were acked since).
    _heap: list[int] = field(default_factory=list, repr=False)

    # -- mutations --------------------------------------------------------------------------
    def advance(self, offset: int) -> None:
        """Everything below ``offset`` that is not in flight is done."""
        self.next_offset = max(self.next_offset, offset)

    def deliver(self, offset: int, attempt: int, invisible_until_ms: int, nonce: int) -> None:
        """Record a delivery (first or again) or a new invisible time of ``offset``."""
        if offset not in self.in_flight:
            heapq.heappush(self._heap, offset)
        self.in_flight[offset] = InFlight(attempt, invisible_until_ms, nonce)
        if offset >= self.next_offset:
            self.next_offset = offset + 1

    def ack(self, offset: int) -> bool:
        """Mark ``offset`` done; False if it was not in flight."""
        return self.in_flight.pop(offset, None) is not None

    # -- queries ----------------------------------------------------------------------------
    @property
    def committed(self) -> int:
        """The lowest offset not yet done (the group's consumer offset for this queue)."""
        heap = self._heap
        while heap and heap[0] not in self.in_flight:
            heapq.heappop(heap)
        return heap[0] if heap else self.next_offset

    def is_current(self, offset: int, nonce: int) -> InFlight | None:
        """The in-flight entry of ``offset`` if ``nonce`` is its current one."""
        entry = self.in_flight.get(offset)
        return entry if entry is not None and entry.nonce == nonce else None

    def expired(self, now_ms: int) -> list[int]:
        """In-flight offsets whose invisible time has passed, in offset order."""
        return sorted(o for o, e in self.in_flight.items() if e.invisible_until_ms <= now_ms)

    def fifo_blocked(self, now_ms: int) -> bool:
        """True while any in-flight message is still invisible: in FIFO mode the queue then
        delivers nothing (neither the expired ones nor fresh ones), so order holds."""
        return any(e.invisible_until_ms > now_ms for e in self.in_flight.values())

    def next_deadline_ms(self) -> int | None:
        """The earliest invisible deadline among in-flight messages (None when none)."""
        if not self.in_flight:
            return None
        return min(e.invisible_until_ms for e in self.in_flight.values())

    def done(self, offset: int) -> bool:
        """True if ``offset`` was handed out and is finished."""
        return offset < self.next_offset and offset not in self.in_flight

    def __iter__(self) -> Iterator[tuple[int, InFlight]]:
        return iter(sorted(self.in_flight.items()))


#: (group, topic, queue_id)
Key = tuple[str, str, int]


class PopTable:
    """Every queue state, and the small integer id each (group, topic, queue) has in the journal."""

    def __init__(self) -> None:
        self.states: dict[Key, QueueState] = {}
        self.key_ids: dict[Key, int] = {}
        self._by_id: dict[int, Key] = {}

    def define(self, key_id: int, key: Key) -> QueueState:
        """Bind ``key_id`` to ``key`` (a KEY record) and return the key's state."""
        self.key_ids[key] = key_id
        self._by_id[key_id] = key
        state = self.states.get(key)
        if state is None:
            state = self.states[key] = QueueState()
        return state

    def by_id(self, key_id: int) -> QueueState:
        key = self._by_id.get(key_id)
        if key is None:
            raise KeyError(f"pop journal refers to key id {key_id} before defining it")
        return self.states[key]

    def next_key_id(self) -> int:
        return max(self._by_id, default=0) + 1


__all__ = ["InFlight", "Key", "PopTable", "QueueState"]
