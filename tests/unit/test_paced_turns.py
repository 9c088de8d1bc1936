"""rocketq.ha.paced.paced_turns, the rhythm of a member's paced fsync thread: a turn per interval
while work is pending, idle() and a sleep until woken when none is, and no sleep with work
pending or after a stop. Driven in one thread with events whose waits return at once."""

from __future__ import annotations

import threading
from collections.abc import Callable

from rocketq.ha.paced import paced_turns

INTERVAL_S = 0.01


class Flag:
    """An event whose ``wait`` returns at once (recording its timeout) after calling ``on_wait``."""

    def __init__(self, on_wait: Callable[[], None] | None = None) -> None:
        self.flag = False
        self.waits: list[float | None] = []
        self.on_wait = on_wait

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        if self.on_wait is not None:
            self.on_wait()
        return self.flag

    def is_set(self) -> bool:
        return self.flag

    def set(self) -> None:
        self.flag = True

    def clear(self) -> None:
        self.flag = False


def turns(stop: Flag, wake: Flag, pending: Callable[[], bool], idle: Callable[[], None] | None = None) -> int:
    n = 0
    for _ in paced_turns(INTERVAL_S, stop, wake, pending, idle):  # type: ignore[arg-type]
        n += 1
    return n


def test_a_turn_per_interval_while_pending_then_idle_once_and_asleep_until_woken() -> None:
    work = [True, True, True]  # three intervals with writes, then none
    idles: list[int] = []
    stop = Flag()
    wake = Flag(on_wait=stop.set)  # the thread sleeps: the test stops it there
    done = turns(stop, wake, lambda: bool(work and work.pop()), lambda: idles.append(1))
    assert done == 3
    assert idles == [1]
    # three turns, the look that found nothing, and the one after the sleep that sees the stop
    assert stop.waits == [INTERVAL_S] * 5
    assert wake.waits == [None]  # asleep with no timeout: no wake-ups while idle


def test_work_that_comes_between_the_look_and_the_clear_is_not_slept_through() -> None:
    looks = iter([False, True, True, False, False])  # found by the second look, after the clear
    stop = Flag()
    wake = Flag(on_wait=stop.set)
    assert turns(stop, wake, lambda: next(looks)) == 1
    assert wake.waits == [None]  # slept once, only after the turn and two empty looks


def test_a_stop_while_idle_ends_the_turns_without_a_sleep() -> None:
    stop = Flag()
    wake = Flag()

    def idle() -> None:
        stop.set()  # a stop (then a wake) between the look and the clear

    assert turns(stop, wake, lambda: False, idle) == 0
    assert wake.waits == []
    assert stop.waits == [INTERVAL_S] * 2  # the empty look, and the next that sees the stop


def test_real_events_a_writer_wakes_the_sleeping_thread_and_a_stop_ends_it() -> None:
    stop, wake = threading.Event(), threading.Event()
    pending = threading.Event()
    turned = threading.Event()
    asleep = threading.Event()

    def idle() -> None:
        asleep.set()

    def run() -> None:
        for _ in paced_turns(INTERVAL_S, stop, wake, pending.is_set, idle):
            pending.clear()
            turned.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert asleep.wait(10)  # nothing written: idle, then asleep
    pending.set()
    wake.set()  # the writer: its flag, then the wake-up
    assert turned.wait(10)
    stop.set()
    wake.set()
    thread.join(10)
    assert not thread.is_alive()
