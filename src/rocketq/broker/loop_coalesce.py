"""Coalesced hand-offs between the event loop and the store's threads.

Two directions, one rule: at most one hand-off per loop iteration, never a delay beyond it.

::

    loop thread                                   dispatch thread (ReputMessageService)
    put (in data_received) ─► LoopWakeup ──┐
    put (in data_received) ─► LoopWakeup ──┤ one call_soon per iteration
                                           ├─► on_loop(): small window, thread idle:
                                           │     dispatch here, notify held pulls directly
                                           └─► else wake() ────────► Event.set → parse window
                                                                        │
    notify(all pending items) ◄── one call_soon_threadsafe ◄── post() ──┤ (per window)
                                  while none is in flight      post() ──┘

* :class:`LoopWakeup` replaces a per-append ``Event.set`` made on the loop thread: the first
  append of an iteration schedules one ``call_soon``; later appends of the same iteration only
  see the flag. The wake-up runs after the iteration's callbacks, so the dispatch thread starts
  after the acknowledgements of that iteration are written and finds all of its records in one
  window (one parse, one ConsumeQueue write, one notification instead of one per message). A
  call from any other thread (pop, transactions, worker threads) wakes at once, as before; a
  closed loop also falls back to waking at once. No polling, no timer. With ``min_interval_s``
  (a DLedger leader, whose puts complete a few per iteration) wake-ups are also at least that
  far apart: one asked for sooner is made by a timer at the end of the interval, so under a
  steady stream of puts the dispatch thread is woken at most once an interval and finds that
  interval's records in one window; after a quiet interval the first put wakes it at once.
  While puts come less than 1 ms apart that timer wakes nothing: the loop's wait ends on the
  next read first (epoll's timeout is rounded up to the millisecond, the timerfd selector keeps
  the same slack) and the due timer runs in that read's iteration, after its answer. Taking the
  window from that put instead (``call_soon``) only cost a loop iteration per window
  (docs/benchmarks.md, "The loop's waits without a timeout").
  ``interval_of`` (a DLedger member: longer on a follower) gives the interval after each
  wake-up, read when the wake-up runs.
* ``on_loop`` (the broker passes the store's ``dispatch_inline`` bounded by
  ``inline_dispatch_max_bytes``): the wake-up that runs on the loop first offers the work to the
  loop itself; only when that declines (a window over the bound, the dispatch thread busy) is
  the thread woken. A small window then costs the loop its dispatch and no thread wake-up: a
  lone send's window is about 28 µs of the loop's CPU where the thread spent 38–47 µs on it, its
  wake-up and the GIL passing included (docs/benchmarks.md, "Dispatch on the loop"). Not with
  ``min_interval_s`` (DLedger keeps its thread; ``settle_on_loop`` lets a read that finds a
  window waiting for its interval take it on the loop all the same).
* ``hop_from_threads`` (SYNC_FLUSH in the broker: the group commit's round makes records
  dispatchable on the flush thread): a call from another thread is carried to the loop by one
  ``call_soon_threadsafe`` in flight at a time and runs there as a loop call, at the end of the
  iteration after the round's completions, so the sends are answered before the dispatch. The
  loop is being woken by those completions anyway; the hop adds no thread wake-up.
* :class:`ThreadsafeBatcher` replaces one ``call_soon_threadsafe`` per dispatched window: items
  posted while a delivery is already scheduled join it, so the loop is woken (self-pipe write,
  one extra epoll return) at most once per iteration however many windows the dispatch thread
  finished meanwhile. Items are delivered in posting order; a delivery takes everything posted
  before it ran. A post made on the loop itself (arrivals of an inline dispatch) is delivered in
  the call, after whatever is pending: no self-pipe hop.

Invariant of both: the "scheduled" flag is set before the callback is scheduled and cleared by
the callback *before* it does its work, so an item (or append) racing with the callback is
either taken by it or schedules the next one; nothing is left behind.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

log = logging.getLogger(__name__)


class LoopWakeup:
    """A ``wake()`` callable that, on the loop's thread, runs at most once per loop iteration."""

    __slots__ = (
        "_elsewhere",
        "_handle",
        "_hop",
        "_hopping",
        "_interval",
        "_interval_of",
        "_loop",
        "_next_at",
        "_on_loop",
        "_scheduled",
        "_settle_on_loop",
        "_thread_id",
        "_wake",
        "handled_on_loop",
        "puts",
        "wakeups",
        "window_puts",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        wake: Callable[[], None],
        min_interval_s: float = 0.0,
        *,
        on_loop: Callable[[], bool] | None = None,
        hop_from_threads: bool = False,
        settle_elsewhere: Callable[[], object] | None = None,
        settle_on_loop: Callable[[], bool] | None = None,
        interval_of: Callable[[], float] | None = None,
    ) -> None:
        self._loop = loop
        self._wake = wake
        #: a call from another thread is carried to the loop (one call_soon_threadsafe in
        #: flight) instead of waking at once: for the group commit's rounds, whose sends the
        #: loop answers anyway
        self._hop = hop_from_threads
        self._hopping = False
        #: tried first when the wake-up runs on the loop; True: done there, ``wake`` is not called
        self._on_loop = on_loop
        self._thread_id = threading.get_ident()  # built on the loop's thread
        self._scheduled = False
        #: the scheduled wake-up's handle (``call_soon`` or the interval's timer), for :meth:`settle`
        self._handle: asyncio.Handle | None = None
        #: what :meth:`settle` does when called from another thread while a wake-up is pending
        self._elsewhere = settle_elsewhere
        #: what :meth:`settle` tries first on the loop's thread (default ``on_loop``); True: done
        #: there, ``wake`` is not called
        self._settle_on_loop = settle_on_loop if settle_on_loop is not None else on_loop
        #: wake-ups on the loop at least this far apart (0: once per iteration, no timer)
        self._interval = min_interval_s
        #: with an interval: the interval after each wake-up, asked when it runs (None: the
        #: fixed ``min_interval_s``)
        self._interval_of = interval_of
        #: loop time before which a wake-up waits for the timer (with an interval)
        self._next_at = 0.0
        #: how many times ``wake`` actually ran (tests and stats)
        self.wakeups = 0
        #: how many wake-ups ``on_loop`` handled instead (tests and stats)
        self.handled_on_loop = 0
        #: calls on the loop's thread (appends) since the last wake-up ran
        self.puts = 0
        #: the calls on the loop's thread the running (or last) wake-up covers, for ``on_loop``
        #: (the broker bounds the window it dispatches on the loop by them)
        self.window_puts = 0

    def __call__(self) -> None:
        if threading.get_ident() != self._thread_id:
            if self._hop:
                self._hop_to_loop()
            else:
                self._fire_now()
            return
        self.puts += 1
        if self._scheduled:
            return
        self._scheduled = True
        try:
            if self._interval:
                delay = self._next_at - self._loop.time()
                if delay > 0:
                    self._handle = self._loop.call_later(delay, self._fire)
                    return
            self._handle = self._loop.call_soon(self._fire)
        except RuntimeError:  # the loop is closed: nobody will run the callback
            self._scheduled = False
            self._fire_now()

    def next_interval(self) -> float:
        """The interval the next wake-up sets before the one after it (0: none)."""
        of = self._interval_of
        return self._interval if of is None or not self._interval else of()

    @property
    def pending(self) -> bool:
        """A wake-up is scheduled and has not run yet (appends wait for it)."""
        return self._scheduled

    def settle(self) -> None:
        """Run a pending wake-up now instead of at its time, so that whatever reads next sees
        the work it covers (the broker's reads of ConsumeQueues and the index, with a dispatch
        interval). On the loop's thread the scheduled callback is cancelled and run here, with
        ``settle_on_loop`` (default ``on_loop``) tried first in its place; from another thread
        ``settle_elsewhere`` runs (the store waits, bounded, for the dispatch thread, which it
        wakes); nothing when no wake-up is pending."""
        if not self._scheduled:
            return
        if threading.get_ident() != self._thread_id:
            if self._elsewhere is not None:
                self._elsewhere()
            return
        handle = self._handle
        if handle is not None:
            handle.cancel()
        self._run(self._settle_on_loop)

    def _hop_to_loop(self) -> None:
        if self._hopping:
            return  # the callback in flight has not run yet: it covers this call
        self._hopping = True
        try:
            self._loop.call_soon_threadsafe(self._arrived)
        except RuntimeError:  # the loop is closed: nobody will run the callback
            self._hopping = False
            self._fire_now()

    def _arrived(self) -> None:
        self._hopping = False
        self()  # on the loop: at the end of the next iteration, after the callbacks queued now

    def _fire(self) -> None:
        self._run(self._on_loop)

    def _run(self, on_loop: Callable[[], bool] | None) -> None:
        self._scheduled = False
        self._handle = None
        self.window_puts = self.puts
        self.puts = 0
        if self._interval:
            self._next_at = self._loop.time() + self.next_interval()
        if on_loop is not None:
            try:
                handled = on_loop()
            except Exception:  # never leave the work undone: the thread takes it
                log.exception("work on the loop failed; waking the thread instead")
                handled = False
            if handled:
                self.handled_on_loop += 1
                return
        self._fire_now()

    def _fire_now(self) -> None:
        self.wakeups += 1
        self._wake()


class ThreadsafeBatcher(Generic[T]):
    """Deliver items posted from any thread to ``deliver`` on the loop, batched: one
    ``call_soon_threadsafe`` in flight at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop, deliver: Callable[[list[T]], object]) -> None:
        self._loop = loop
        self._deliver = deliver
        self._lock = threading.Lock()
        self._pending: list[T] = []
        self._scheduled = False
        #: how many deliveries ran (tests and stats)
        self.deliveries = 0

    def post(self, items: list[T]) -> None:
        """Queue ``items`` for the loop (any thread). Dropped if the loop is closed. On the
        loop's own thread (an inline dispatch) they are delivered at once, after anything still
        pending, without a self-pipe hop."""
        if asyncio._get_running_loop() is self._loop:
            with self._lock:
                if self._pending:
                    items = self._pending + items
                    self._pending = []
            self.deliveries += 1
            self._deliver(items)
            return
        with self._lock:
            self._pending.extend(items)
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._run)
        except RuntimeError:  # the loop is closed: nothing waits for these any more
            with self._lock:
                self._pending.clear()
                self._scheduled = False

    def _run(self) -> None:
        with self._lock:
            items, self._pending = self._pending, []
            self._scheduled = False
        if items:
            self.deliveries += 1
            self._deliver(items)


__all__ = ["LoopWakeup", "ThreadsafeBatcher"]
