"""Flush and commit services of the CommitLog (RocketMQ ``CommitLog`` inner services).

SYNC_FLUSH: :class:`GroupCommitService` (group commit)::

    writer: append under the put lock → submit(next_offset) → Future ──► wait (bounded)
    service: wake → swap the request list → fdatasync until flushed ≥ max(next_offset)
             → complete every request in the batch (PUT_OK) → next batch

  One ``fdatasync`` serves every writer whose record was appended before it started, so eight
  writers cost about one sync per round instead of eight. A request not completed by its
  deadline (``sync_flush_timeout_ms``) reports FLUSH_DISK_TIMEOUT; the record stays stored.

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

from rocketq.store.mapped_file import MappedFileQueue

log = logging.getLogger(__name__)

FlushListener = Callable[[int], None]  # receives the store timestamp of the last flushed message


class _Service:
    name = "service"

    def __init__(self) -> None:
        self._wakeup = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def wakeup(self) -> None:
        if not self._wakeup.is_set():
            self._wakeup.set()

    def shutdown(self) -> None:
        self._stopped.set()
        self._wakeup.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def _loop(self) -> None:
        log.info("%s started", self.name)
        while not self._stopped.is_set():
            try:
                self.run_once()
            except Exception as exc:  # keep serving; the error is visible to callers
                self.error = exc
                log.exception("%s failed", self.name)
                self._stopped.wait(0.01)
        try:
            self.on_shutdown()
        except Exception:
            log.exception("%s failed during shutdown", self.name)
        log.info("%s stopped", self.name)

    def _wait(self, seconds: float) -> None:
        self._wakeup.wait(seconds)
        self._wakeup.clear()

    def run_once(self) -> None:
        raise NotImplementedError

    def on_shutdown(self) -> None:
        pass


class _Waiter:
    """One writer blocked in :meth:`GroupCommitService.wait`; woken through its own lock."""

    __slots__ = ("lead", "offset", "signal")

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self.lead = False
        self.signal = threading.Lock()
        self.signal.acquire()


class GroupCommitService(_Service):
    """Group commit for SYNC_FLUSH, leader/follower style.

    A writer that needs its record durable calls :meth:`wait`. With no round running it becomes
    the leader: it syncs everything appended so far (its own record and every record appended by
    writers queued behind it). Otherwise it queues and sleeps on its own lock. When a round ends
    the leader wakes the writers it covered and hands leadership to the first writer it did not
    cover. A lone writer pays one ``fdatasync`` and no thread hand-off; N writers share one sync
    per round. Each waiter is woken individually, so waking N writers is not a convoy on one lock.

    Gathering: the writers a round releases come straight back with their next record. A new
    leader waits briefly (at most ``max_gather_s``) until as many writers queue as were active in
    the last rounds, so rounds stay full instead of settling at half the writers.

    Event-loop callers (the broker) use :meth:`submit`, which returns a future; the service
    thread waits for them like a writer, and every round completes the futures it covers.
    """

    name = "GroupCommitService"

    def __init__(self, queue: MappedFileQueue, on_flushed: FlushListener | None = None) -> None:
        super().__init__()
        self._queue = queue
        self._on_flushed = on_flushed
        self._lock = threading.Lock()
        self._leading = False
        self._waiters: list[_Waiter] = []
        self._gather_event = threading.Event()
        self._gather_target = 0
        self._recent_writers: dict[int, int] = {}  # thread id → round in which it last waited
        self.max_gather_s = 0.001
        self._service_ident = self._thread.ident
        self._futures: list[tuple[int, concurrent.futures.Future[bool]]] = []
        self.rounds = 0

    @property
    def flushed_where(self) -> int:
        return self._queue.flushed_where

    def wait(self, next_offset: int, timeout_s: float) -> bool:
        """Block until everything before ``next_offset`` is durable; False after ``timeout_s``."""
        queue = self._queue
        if queue.flushed_where >= next_offset:
            return True
        deadline = time.monotonic() + timeout_s
        with self._lock:
            if queue.flushed_where >= next_offset:
                return True
            ident = threading.get_ident()
            if ident != self._service_ident:  # the service thread is no writer to gather
                self._recent_writers[ident] = self.rounds
            waiter: _Waiter | None = None
            if self._leading:
                waiter = _Waiter(next_offset)
                self._waiters.append(waiter)
                if len(self._waiters) + 1 >= self._gather_target:
                    self._gather_event.set()
            else:
                self._leading = True
        if waiter is not None:
            if not waiter.signal.acquire(timeout=max(0.0, deadline - time.monotonic())):
                with self._lock:
                    if waiter in self._waiters:
                        self._waiters.remove(waiter)
                        return False
                waiter.signal.acquire()  # woken concurrently with the timeout: take the signal
            if not waiter.lead:
                return queue.flushed_where >= next_offset
        self._gather(deadline)
        self._round()
        return queue.flushed_where >= next_offset

    def _gather(self, deadline: float) -> None:
        with self._lock:
            if len(self._waiters) + 1 >= self._gather_target:
                return
            self._gather_event.clear()
        self._gather_event.wait(max(0.0, min(self.max_gather_s, deadline - time.monotonic())))

    def _round(self) -> None:
        """Sync everything appended so far, then wake the covered writers and hand over."""
        queue = self._queue
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
                self._waiters = [w for w in self._waiters if w.offset > flushed]
                if self._waiters:
                    self._waiters[0].lead = True
                    next_leader: _Waiter | None = self._waiters.pop(0)
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

    def run_once(self) -> None:
        self._service_ident = threading.get_ident()
        self._wait(0.01)
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


class _PeriodicService(_Service):
    """A service that acts every ``interval_ms`` on at least ``least_pages`` dirty pages, and on
    everything once ``thorough_interval_ms`` has passed since it last did."""

    def __init__(
        self, queue: MappedFileQueue, *, interval_ms: int, least_pages: int, thorough_interval_ms: int
    ) -> None:
        super().__init__()
        self._queue = queue
        self._interval = interval_ms / 1000
        self._least_pages = least_pages
        self._thorough = thorough_interval_ms / 1000
        self._last_thorough = time.monotonic()

    def _pages_due(self) -> int:
        now = time.monotonic()
        if now >= self._last_thorough + self._thorough:
            self._last_thorough = now
            return 0
        return self._least_pages


class FlushRealTimeService(_PeriodicService):
    name = "FlushRealTimeService"

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

    def run_once(self) -> None:
        least = self._pages_due()
        if self._timed:
            self._stopped.wait(self._interval)
        else:
            self._wait(self._interval)
        self._queue.flush(least)
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
        flush_service: _Service,
    ) -> None:
        super().__init__(
            queue, interval_ms=interval_ms, least_pages=least_pages, thorough_interval_ms=thorough_interval_ms
        )
        self._flush_service = flush_service

    def run_once(self) -> None:
        if not self._queue.commit(self._pages_due()):
            self._last_thorough = time.monotonic()
            self._flush_service.wakeup()
        self._wait(self._interval)

    def on_shutdown(self) -> None:
        for _ in range(10):
            if self._queue.commit(0):
                break
