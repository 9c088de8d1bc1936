"""Latency-based broker fault avoidance (RocketMQ's ``LatencyFaultTolerance`` and ``MQFaultStrategy``).

Every send reports the broker it went to and how long it took. The latency is looked up in
RocketMQ's two tables; the broker is then skipped by queue selection until the matching back-off
has passed::

    latency ≥  50 ms   100 ms   550 ms   1 s    2 s     3 s     15 s
    back-off    0       0       30 s     60 s   120 s   180 s   600 s

A failed send (timeout, connection error, retriable broker error) counts as a latency of
:data:`FAILURE_LATENCY_MS` (30 s), i.e. the broker is avoided for 600 s, as RocketMQ 4.x does
with ``isolation=true``. A later successful send through the same broker (e.g. when every other
broker is avoided too) replaces the entry, so a recovered broker is used again at once.

Invariants: an entry only ever describes the most recent report for its broker; a broker with
no entry is available. The clock is injectable (``time.monotonic`` seconds) for tests.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

#: RocketMQ ``MQFaultStrategy.latencyMax`` (ms).
LATENCY_MAX_MS: tuple[int, ...] = (50, 100, 550, 1_000, 2_000, 3_000, 15_000)
#: RocketMQ ``MQFaultStrategy.notAvailableDuration`` (ms), index-aligned with LATENCY_MAX_MS.
NOT_AVAILABLE_DURATION_MS: tuple[int, ...] = (0, 0, 30_000, 60_000, 120_000, 180_000, 600_000)
#: The latency a failed send is charged with (RocketMQ: 30 000 ms when isolating a broker).
FAILURE_LATENCY_MS = 30_000


#: Latencies below this get no back-off (the first row with a non-zero back-off: 550 ms).
NO_BACK_OFF_BELOW_MS = min(
    limit for limit, duration in zip(LATENCY_MAX_MS, NOT_AVAILABLE_DURATION_MS, strict=True) if duration
)


def not_available_duration_ms(latency_ms: float) -> int:
    """The back-off (ms) for a send that took ``latency_ms``: the largest table row it reaches."""
    for limit, duration in zip(reversed(LATENCY_MAX_MS), reversed(NOT_AVAILABLE_DURATION_MS), strict=True):
        if latency_ms >= limit:
            return duration
    return 0


@dataclass(slots=True)
class FaultItem:
    broker_name: str
    latency_ms: float
    available_at: float  # clock seconds


class LatencyFaultTolerance:
    """Per-broker back-off derived from send latency (thread-safe)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        #: The brokers with an entry (in back-off, or with one that has passed); the senders' fast
        #: paths read it without the lock: while it is empty every broker is available.
        self.items: dict[str, FaultItem] = {}
        self._lock = threading.Lock()

    def update(self, broker_name: str, latency_ms: float, *, failed: bool = False) -> None:
        """Record a send through ``broker_name`` that took ``latency_ms`` (or failed)."""
        if not failed and latency_ms < NO_BACK_OFF_BELOW_MS:  # the common case: no back-off
            if broker_name in self.items:
                with self._lock:
                    self.items.pop(broker_name, None)
            return
        charged = FAILURE_LATENCY_MS if failed else latency_ms
        back_off_s = not_available_duration_ms(charged) / 1000
        with self._lock:
            if back_off_s <= 0:
                self.items.pop(broker_name, None)
            else:
                self.items[broker_name] = FaultItem(broker_name, charged, self._clock() + back_off_s)

    def is_available(self, broker_name: str) -> bool:
        item = self.items.get(broker_name)  # one dict read: atomic, no lock needed
        return item is None or self._clock() >= item.available_at

    def remove(self, broker_name: str) -> None:
        with self._lock:
            self.items.pop(broker_name, None)

    def least_bad(self, broker_names: Iterable[str]) -> str | None:
        """Among ``broker_names``, an available one, else the one whose back-off ends first."""
        best: tuple[float, str] | None = None
        with self._lock:
            for name in broker_names:
                item = self.items.get(name)
                when = item.available_at if item is not None else float("-inf")
                if best is None or when < best[0]:
                    best = (when, name)
        return None if best is None else best[1]


__all__ = [
    "FAILURE_LATENCY_MS",
    "LATENCY_MAX_MS",
    "NOT_AVAILABLE_DURATION_MS",
    "NO_BACK_OFF_BELOW_MS",
    "FaultItem",
    "LatencyFaultTolerance",
    "not_available_duration_ms",
]
