"""Flush and commit services of the CommitLog (RocketMQ ``CommitLog`` inner services).

SYNC_FLUSH: :class:`GroupCommitService` (group commit, leader/follower)::

    writer: append under the put lock → wait(next_offset, timeout)
      no round running and every recently active writer queued → lead:
          fdatasync until flushed ≥ everything appended → wake the covered writers
          → hand the next round to the first writer not covered (if any)
      otherwise → queue and sleep on an own lock (the first one queued leads after ≤ 1 ms)
    broker (event loop): put_deferred(put) → the put on the loop, its wait only noted
      → submit(next_offset) → Future, completed by the round that covers it

  One ``fdatasync`` serves every writer whose record was appended before it started, so eight
  writers cost about one sync per round instead of eight. Invariants: a writer returns True
  only once ``flushed_where`` passes its record; at most one round syncs at a time; a writer
  not covered by its deadline (``sync_flush_timeout_ms``) leaves the queue and reports
  FLUSH_DISK_TIMEOUT, and the record stays stored.

ASYNC_FLUSH: :class:`FlushRealTimeService` flushes every ``flush_interval_commit_log_ms`` when at
least ``flush_commit_log_least_pages`` dirty pages accumulated, and everything every
``flush_commit_log_thorough_interval_ms``.

Write-buffer pool: :class:`CommitRealTimeService` copies committed bytes from the write buffers
into the files every ``commit_interval_commit_log_ms`` (or when woken by a put) and then wakes
the flush service.

``fdatasync`` releases the GIL, so writers keep appending while a flush runs.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from rocketq.metrics.exposition import Histogram
from rocketq.store.mapped_file import MappedFileQueue
from rocketq.store.service import ServiceThread

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

FlushListener = Callable[[int], None]  # receives the store timestamp of the last flushed message

#: Bounds (seconds) of the flush-latency histograms: one fdatasync takes from tens of µs (a
#: page on a fast SSD) to seconds (a slow disk under writeback pressure).
FLUSH_SECONDS_BOUNDS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0)
#: Bounds of the group-commit size histogram: requests made durable by one round.
GROUP_COMMIT_SIZE_BOUNDS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: How long the group-commit thread sleeps when nothing waits and everything is durable.
IDLE_CHECK_S = 1.0


class _Waiter:
    """One writer blocked in :meth:`GroupCommitService.wait`; woken through its own lock."""

    __slots__ = ("lead", "offset", "signal")

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self.lead = False
        self.signal = threading.Lock()
        self.signal.acquire()


class GroupCommitService(ServiceThread):
    """Group commit for SYNC_FLUSH, leader/follower style.

    A writer that needs its record durable calls :meth:`wait`. The writer that finds no round
    running and every active writer queued becomes the leader: it syncs everything appended so
    far (its own record and those of the writers queued before it), then wakes the writers it
    covered. A lone writer therefore pays one ``fdatasync`` and no thread hand-off; N writers
    share one sync per round. Each waiter sleeps on its own lock, so waking N writers is not a
    convoy on one lock.

    Gathering: the writers a round releases come straight back with their next record, one at
    a time (each needs the GIL for its put). The leader of the next round is the writer whose
    arrival completes the set of recently active writers: it is running already, so starting
    the sync costs no wake-up. If the set does not complete (a writer went away), the first
    writer that queued leads after at most ``max_gather_s``. Rounds stay full instead of
    settling at half the writers (which is what syncing whoever is queued at once gives: the
    writers a round releases always miss the round that starts as they are released).

    A writer that arrives while a sync runs waits for it; the leader then hands the next round
    to the first writer it did not cover.

    Event-loop callers (the broker) use :meth:`submit`, which returns a future; the service
    thread waits for them like a writer, and every round completes the futures it covers. A
    put made through :meth:`put_deferred` does not wait at all: the store's call of
    :meth:`wait` only notes the offset, and the caller submits it. The event loop then appends
    (a memory copy, as under ASYNC_FLUSH) and this service's thread syncs, one round for every
    record appended since the last: no worker thread per send.
    """

    name = "GroupCommitService"
    wait_first = True

    def __init__(self, queue: MappedFileQueue, on_flushed: FlushListener | None = None) -> None:
        super().__init__(0.01)
        self._queue = queue
        self._on_flushed = on_flushed
        self._lock = threading.Lock()
        self._leading = False  # a leader is syncing (or about to)
        self._waiters: list[_Waiter] = []
        self._gathering: _Waiter | None = None  # the first writer queued while no round runs
        self._gather_target = 0
        self._recent_writers: dict[int, int] = {}  # thread id → round in which it last waited
        self.max_gather_s = 0.001
        self._service_ident = self._thread.ident
        self._futures: list[tuple[int, concurrent.futures.Future[bool]]] = []
        self.rounds = 0
        #: Seconds each round's sync took, and the requests (writers and submitted futures) it
        #: made durable; written under ``_lock`` by the round's leader, read at scrape time.
        self.flush_seconds = Histogram(FLUSH_SECONDS_BOUNDS)
        self.round_sizes = Histogram(GROUP_COMMIT_SIZE_BOUNDS)
        self._deferral = threading.local()  # .offset: set while this thread runs put_deferred
        #: The wake-up signal, a lock used as a binary semaphore (held: none pending): waking
        #: the service is one release, its wait one acquire; an Event would add its condition
        #: lock, which the woken thread takes again while the waker may still hold it.
        self._signal = threading.Lock()
        self._signal.acquire()

    @property
    def flushed_where(self) -> int:
        return self._queue.flushed_where

    def wakeup(self) -> None:
        try:
            self._signal.release()
        except RuntimeError:
            pass  # a wake-up is pending already

    def stop(self) -> None:
        super().stop()
        self.wakeup()

    def idle_seconds(self) -> float | None:
        """Every record is appended by a writer that waits or a caller that submits, and both
        get their round without this thread polling; the periodic round (every 10 ms) is kept
        only while something appended is not durable yet. With everything durable the thread
        sleeps until woken, checking again every :data:`IDLE_CHECK_S`."""
        queue = self._queue
        if queue.flushed_where < queue.max_offset:
            return self.interval_s
        return IDLE_CHECK_S

    def wait_for_running(self, timeout_s: float | None) -> None:
        if timeout_s is None:
            self._signal.acquire()
        else:
            self._signal.acquire(timeout=timeout_s)

    def wait(self, next_offset: int, timeout_s: float) -> bool:
        """Block until everything before ``next_offset`` is durable; False after ``timeout_s``."""
        queue = self._queue
        if queue.flushed_where >= next_offset:
            return True
        deferral = self._deferral
        noted = getattr(deferral, "offset", None)
        if noted is not None:  # inside put_deferred: the caller waits through submit
            if next_offset > noted:
                deferral.offset = next_offset
            return True
        deadline = time.monotonic() + timeout_s
        with self._lock:
            if queue.flushed_where >= next_offset:
                return True
            ident = threading.get_ident()
            if ident != self._service_ident:  # the service thread is no writer to gather
                self._recent_writers[ident] = self.rounds
            gather = False
            if not self._leading and len(self._waiters) + 1 >= self._gather_target:
                # Everyone expected is here: lead now, covering every queued writer.
                self._leading = True
                self._gathering = None
                waiter = None
            else:
                waiter = _Waiter(next_offset)
                self._waiters.append(waiter)
                gather = not self._leading and self._gathering is None
                if gather:
                    self._gathering = waiter
        if waiter is not None:
            if not self._sleep(waiter, deadline, gather):
                return False
            if not waiter.lead:
                return queue.flushed_where >= next_offset
        self._round()
        return queue.flushed_where >= next_offset

    def _sleep(self, waiter: _Waiter, deadline: float, gather: bool) -> bool:
        """Wait to be covered by a round or handed the lead. False on timeout (the waiter has
        then left the queue). The gathering writer leads itself after ``max_gather_s``."""
        if gather:
            limit = min(self.max_gather_s, deadline - time.monotonic())
            if waiter.signal.acquire(timeout=max(0.0, limit)):
                return True
            with self._lock:
                if self._gathering is waiter and not self._leading:
                    # The set did not complete in time: sync whoever is here.
                    self._gathering = None
                    self._leading = True
                    self._waiters.remove(waiter)
                    waiter.lead = True
                    return True
        if waiter.signal.acquire(timeout=max(0.0, deadline - time.monotonic())):
            return True
        with self._lock:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
                if self._gathering is waiter:
                    self._gathering = None
                return False
        waiter.signal.acquire()  # woken concurrently with the timeout: take the signal
        return True

    def _round(self) -> None:
        """Sync everything appended so far, then wake the covered writers and hand over."""
        queue = self._queue
        began = time.perf_counter()
        try:
            target = queue.max_offset
            # A round may span a segment boundary: each flush(0) covers one segment.
            for _ in range(1000):
                if queue.flushed_where >= target:
                    break
                if queue.flush(0) and queue.flushed_where < target:
                    time.sleep(0.001)  # nothing moved: data not committed into the file yet
        finally:
            flushed = queue.flushed_where
            with self._lock:
                self.rounds += 1
                covered = [w for w in self._waiters if w.offset <= flushed]
                if len(covered) == len(self._waiters):
                    self._waiters = []
                else:
                    self._waiters = [w for w in self._waiters if w.offset > flushed]
                if self._gathering is not None and self._gathering.offset <= flushed:
                    self._gathering = None
                if self._waiters:
                    # Writers that queued during the sync: the first leads the next round now.
                    handed = self._waiters.pop(0)
                    handed.lead = True
                    if self._gathering is handed:
                        self._gathering = None
                    next_leader: _Waiter | None = handed
                else:
                    next_leader = None
                    self._leading = False
                recent = self._recent_writers
                if len(recent) > len(self._waiters) + 1:
                    horizon = self.rounds - 4
                    for ident in [i for i, r in recent.items() if r < horizon]:
                        del recent[ident]
                self._gather_target = len(recent)
                futures = self._take_covered_futures(flushed)
                self.flush_seconds.observe(time.perf_counter() - began)
                leader = 0 if threading.get_ident() == self._service_ident else 1
                self.round_sizes.observe(len(covered) + len(futures) + leader)
            for w in covered:
                w.signal.release()
            if next_leader is not None:
                next_leader.signal.release()
            for fut in futures:
                if not fut.done():
                    fut.set_result(True)
        if self._on_flushed is not None and queue.store_timestamp > 0:
            self._on_flushed(queue.store_timestamp)

    def _take_covered_futures(self, flushed: int) -> list[concurrent.futures.Future[bool]]:
        if not self._futures:
            return []
        done = [fut for off, fut in self._futures if off <= flushed]
        self._futures = [(off, fut) for off, fut in self._futures if off > flushed]
        return done

    def put_deferred(self, put: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> tuple[T, int]:
        """Call ``put`` (a store put) on this thread without waiting for durability: every
        :meth:`wait` it makes returns True at once. Returns the put's result and the offset
        the put would have waited for (0: none, it was durable already); the caller must not
        acknowledge before :meth:`submit` of that offset completes True."""
        deferral = self._deferral
        deferral.offset = 0
        try:
            result = put(*args, **kwargs)
            return result, deferral.offset
        finally:
            deferral.offset = None

    def submit(self, next_offset: int) -> concurrent.futures.Future[bool]:
        """A future that completes True once ``flushed_where >= next_offset``."""
        fut: concurrent.futures.Future[bool] = concurrent.futures.Future()
        with self._lock:
            if self._queue.flushed_where >= next_offset:
                fut.set_result(True)
                return fut
            self._futures.append((next_offset, fut))
        self.wakeup()
        return fut

    def step(self) -> None:
        """Make durable what event-loop callers submitted (else everything appended)."""
        self._service_ident = threading.get_ident()
        with self._lock:
            target = max((off for off, _ in self._futures), default=-1)
        if target < 0:
            # Records appended without waiting (WAIT=false) still become durable promptly.
            target = self._queue.max_offset
        if target > self._queue.flushed_where:
            self.wait(target, 60.0)

    def on_shutdown(self) -> None:
        self.wait(self._queue.max_offset, 60.0)
        with self._lock:
            futures, self._futures = self._futures, []
        flushed = self._queue.flushed_where
        for off, fut in futures:
            if not fut.done():
                fut.set_result(flushed >= off)


class _PeriodicService(ServiceThread):
    """A service that acts every ``interval_ms`` on at least ``least_pages`` dirty pages, and on
    everything once ``thorough_interval_ms`` has passed since it last did."""

    def __init__(
        self, queue: MappedFileQueue, *, interval_ms: int, least_pages: int, thorough_interval_ms: int
    ) -> None:
        super().__init__(interval_ms / 1000)
        self._queue = queue
        self.least_pages = least_pages
        self._thorough = thorough_interval_ms / 1000
        self._last_thorough = time.monotonic()
        #: Wall-clock ms (as store timestamps) from which the next act is thorough: lets the put
        #: path tell, without a call, whether waking the service would get anything done.
        self.thorough_due_ms = time.time_ns() // 1_000_000 + thorough_interval_ms

    def _mark_thorough(self, now: float) -> None:
        self._last_thorough = now
        self.thorough_due_ms = time.time_ns() // 1_000_000 + int(self._thorough * 1000)

    def _pages_due(self) -> int:
        now = time.monotonic()
        if now >= self._last_thorough + self._thorough:
            self._mark_thorough(now)
            return 0
        return self.least_pages


class FlushRealTimeService(_PeriodicService):
    name = "FlushRealTimeService"
    wait_first = True

    def __init__(
        self,
        queue: MappedFileQueue,
        *,
        interval_ms: int,
        least_pages: int,
        thorough_interval_ms: int,
        timed: bool,
        on_flushed: FlushListener | None = None,
    ) -> None:
        super().__init__(
            queue, interval_ms=interval_ms, least_pages=least_pages, thorough_interval_ms=thorough_interval_ms
        )
        self._timed = timed
        self._on_flushed = on_flushed
        #: Seconds each flush that wrote something took (this service's thread only).
        self.flush_seconds = Histogram(FLUSH_SECONDS_BOUNDS)

    def idle(self) -> None:
        if self._timed:  # flushCommitLogTimed: a plain sleep, wake-ups do not shorten it
            self._stopped.wait(self.interval_s)
        else:
            self.wait_for_running(self.interval_s)

    def step(self) -> None:
        queue = self._queue
        before = queue.flushed_where
        began = time.perf_counter()
        queue.flush(self._pages_due())
        if queue.flushed_where != before:
            self.flush_seconds.observe(time.perf_counter() - began)
        if self._on_flushed is not None and self._queue.store_timestamp > 0:
            self._on_flushed(self._queue.store_timestamp)

    def on_shutdown(self) -> None:
        for _ in range(10):
            if self._queue.flush(0):
                break


class CommitRealTimeService(_PeriodicService):
    name = "CommitRealTimeService"

    def __init__(
        self,
        queue: MappedFileQueue,
        *,
        interval_ms: int,
        least_pages: int,
        thorough_interval_ms: int,
        flush_service: ServiceThread,
    ) -> None:
        super().__init__(
            queue, interval_ms=interval_ms, least_pages=least_pages, thorough_interval_ms=thorough_interval_ms
        )
        self._flush_service = flush_service

    def step(self) -> None:
        if not self._queue.commit(self._pages_due()):
            self._mark_thorough(time.monotonic())
            self._flush_service.wakeup()

    def on_shutdown(self) -> None:
        for _ in range(10):
            if self._queue.commit(0):
                break
