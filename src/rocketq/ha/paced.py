"""The rhythm of a member's paced fsync thread: a turn every interval while there is work, asleep
while there is none.

::

    wait interval (or stop) ──► work pending? ──yes──► turn (the caller fsyncs)
                                     │ no
                                     ▼
                   idle() once, clear wake, look again ──still none──► sleep until wake

Invariants: a stop ends the turns within one interval, or at once when the thread sleeps (the
stopper sets ``stop`` then ``wake``); work that arrives between a look and the clear of ``wake``
is seen by the second look, so the thread never sleeps with work pending. The writer sets its
pending flag, then ``wake`` once per idle spell (not per write). Used by the Raft member's
flusher (``RaftGroupLog._flusher``) and a group of one's (``SingleNodeLog._paced_flushes``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator


def paced_turns(
    interval_s: float,
    stop: threading.Event,
    wake: threading.Event,
    pending: Callable[[], bool],
    idle: Callable[[], None] | None = None,
) -> Iterator[None]:
    """Yield once per ``interval_s`` while ``pending()`` is true, until ``stop`` is set. When it is
    false after a wait: ``idle()`` (when given), then sleep until ``wake`` is set."""
    while not stop.wait(interval_s):
        if pending():
            yield
            continue
        if idle is not None:
            idle()
        wake.clear()
        # pending and stop are looked at after the clear: work (or a stop) that came between the
        # look above and the clear is seen here, not slept through
        if not pending() and not stop.is_set():
            wake.wait()
