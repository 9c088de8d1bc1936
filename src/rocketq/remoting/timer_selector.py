"""An epoll selector whose waits carry no timeout: the loop's next timer is a timerfd.

Why. asyncio's loop passes ``select`` the time to its earliest timer, and a server process
always has one pending (the broker's periodic tasks: statistics every second, the held pulls'
check, the client channels' scan), so every ``epoll_wait`` of a loop that goes to sleep between
requests is a timed one: the kernel arms a high-resolution timer for the sleep and cancels it on
the wake-up, once per sleep, on this machine a few µs of the process's CPU each
(docs/benchmarks.md, "The loop's waits without a timeout").

How. :class:`TimerfdSelector` keeps one timerfd (``CLOCK_MONOTONIC``, the clock of
``loop.time()``) in its epoll set, outside the selector's map, so the loop never sees it. A
``select`` with a timeout waits without one (``epoll_wait(-1)``) and leaves the timerfd set to
that timeout's end plus :data:`SLACK_S`; it calls ``timerfd_settime`` only when the timerfd is
not set, or set before that end (it would wake the loop early, for a timer since cancelled or
run) or more than :data:`SLACK_S` (and :data:`JITTER_S`) after it (it would wake the loop
late). While the earliest timer stays where it is, a wait costs no timer work at all; a timer
added nearer, or removed, costs one ``timerfd_settime``. When the timerfd fires it ends the
wait like a read; ``select`` reads it (it is level-triggered) and returns no event for it, and
the loop runs its due timers as after a timed wait that ran out.

The slack is epoll's own: ``EpollSelector`` rounds a timeout up to the millisecond, so a timer
may run up to 1 ms late there too, and a read that comes within that time ends the wait first
and runs the due timer in its iteration (the broker's 1 ms dispatch windows are taken that way
while sends come: the timer never wakes the loop). A ``select`` with a timeout of 0 or None is
the plain epoll wait (a timerfd still set may end a ``None`` wait once; the loop then finds
nothing to do and waits again).

Where. :func:`new_event_loop` is the factory :func:`rocketq.remoting.eventloop.run` uses for
asyncio's loop in server processes; on a system without timerfd (not Linux), or with
``ROCKETQ_LOOP_TIMERFD=0``, it is asyncio's default loop. The calls go through ctypes (Python
3.11 has no ``os.timerfd_*``), holding the GIL, about once per change of the loop's earliest
timer. A ``timerfd_settime`` costs 3.6 µs in a loop of its own on the benchmark VM and 16–18 µs
of thread CPU in a broker answering lone sends (docs/benchmarks.md, "The loop's waits without a
timeout"; the timed wait it replaces arms a kernel timer once per sleep).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import os
import select
import selectors
import time
from typing import Any, Final

#: Environment variable that turns the timerfd selector off (``0``).
LOOP_TIMERFD_ENV: Final = "ROCKETQ_LOOP_TIMERFD"
#: How late past its time the timerfd is set to fire (epoll's timeout rounding: 1 ms).
SLACK_S: Final = 0.001
#: How much further from that a timerfd already set may be and stay: the same timer's end,
#: computed again at each wait, moves by the few µs between the loop's clock read and the
#: selector's
JITTER_S: Final = 0.0002

_TFD_TIMER_ABSTIME: Final = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc_timerfd() -> tuple[Any, Any] | None:
    """libc's ``timerfd_create`` and ``timerfd_settime``; None where there are none."""
    if not hasattr(select, "epoll"):
        return None
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        # PyDLL: the calls keep the GIL (they never block); a CDLL call releases and takes it
        # again, letting a thread that waits for it run first
        libc = ctypes.PyDLL(name, use_errno=True)
        create, settime = libc.timerfd_create, libc.timerfd_settime
    except (OSError, AttributeError):
        return None
    create.argtypes = [ctypes.c_int, ctypes.c_int]
    create.restype = ctypes.c_int
    settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec), ctypes.c_void_p]
    settime.restype = ctypes.c_int
    return create, settime


_TIMERFD = _libc_timerfd()


def available() -> bool:
    """This system has epoll and timerfd."""
    return _TIMERFD is not None


class TimerfdSelector(selectors.EpollSelector):
    """``EpollSelector`` whose waits have no timeout; a timerfd ends them at the loop's next
    timer (see the module docstring)."""

    def __init__(self) -> None:
        if _TIMERFD is None:
            raise OSError("timerfd is not available here")
        super().__init__()
        create, self._settime = _TIMERFD
        fd = create(time.CLOCK_MONOTONIC, os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            errno = ctypes.get_errno()
            super().close()
            raise OSError(errno, f"timerfd_create: {os.strerror(errno)}")
        self._tfd = fd
        self._epoll().register(fd, select.EPOLLIN)
        #: monotonic time the timerfd is set to fire at; 0.0: not set (or fired and read)
        self._fires_at = 0.0
        self._spec = _Itimerspec()
        #: ``timerfd_settime`` calls and waits the timerfd ended (tests and stats)
        self.sets = 0
        self.timer_wakeups = 0

    def _epoll(self) -> select.epoll:
        return self._selector  # type: ignore[attr-defined,no-any-return]

    def _set(self, at: float) -> None:
        sec = int(at)
        self._spec.it_value.tv_sec = sec
        self._spec.it_value.tv_nsec = int((at - sec) * 1e9)
        if self._settime(self._tfd, _TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"timerfd_settime: {os.strerror(errno)}")
        self._fires_at = at
        self.sets += 1

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            wait = -1.0
        elif timeout <= 0:
            wait = 0.0
        else:
            wait = -1.0
            end = time.monotonic() + timeout
            fires_at = self._fires_at
            if not fires_at or fires_at < end or fires_at > end + SLACK_S + JITTER_S:
                self._set(end + SLACK_S)
        ready: list[tuple[selectors.SelectorKey, int]] = []
        try:
            events = self._epoll().poll(wait, len(self._fd_to_key) + 1)  # type: ignore[attr-defined]
        except InterruptedError:
            return ready
        tfd = self._tfd
        for fd, event in events:
            if fd == tfd:
                self._drain()
                continue
            key = self._key_from_fd(fd)  # type: ignore[attr-defined]
            if key:
                mask = (selectors.EVENT_WRITE if event & ~select.EPOLLIN else 0) | (
                    selectors.EVENT_READ if event & ~select.EPOLLOUT else 0
                )
                ready.append((key, mask & key.events))
        return ready

    def _drain(self) -> None:
        try:
            os.read(self._tfd, 8)
        except BlockingIOError:  # already read (set again meanwhile)
            return
        self._fires_at = 0.0
        self.timer_wakeups += 1

    def close(self) -> None:
        if self._tfd >= 0:
            os.close(self._tfd)
            self._tfd = -1
        super().close()


def new_event_loop() -> asyncio.AbstractEventLoop:
    """asyncio's selector loop on a :class:`TimerfdSelector` where timerfd is available and not
    turned off (``ROCKETQ_LOOP_TIMERFD=0``); else asyncio's default loop."""
    if _TIMERFD is None or os.environ.get(LOOP_TIMERFD_ENV, "1").strip() == "0":
        return asyncio.new_event_loop()
    return asyncio.SelectorEventLoop(TimerfdSelector())


__all__ = ["JITTER_S", "LOOP_TIMERFD_ENV", "SLACK_S", "TimerfdSelector", "available", "new_event_loop"]
