"""Dispatch: from CommitLog records to ConsumeQueue units and index entries (ReputMessageService).

::

    CommitLog ──append──► wake ──► ReputMessageService (one thread)
                                     reput_from → decode record (no body) → DispatchRequest
                                       → dispatchers in order: ConsumeQueue, IndexService
                                       → arrival listeners (long-polling pulls)
                                     reput_from += record size

* The dispatcher reads only what is safe to expose: up to the flushed offset under SYNC_FLUSH
  (a consumer never sees a message a crash could take back), up to the readable end otherwise.
* Beyond RocketMQ: the service is woken by appends (and by flush rounds under SYNC_FLUSH) instead
  of polling every millisecond; it waits at most ``idle_wait_s`` when nothing happens. The broker
  coalesces the append wake-ups of its event loop to one per loop iteration
  (:mod:`rocketq.broker.loop_coalesce`), so records sent together are dispatched as one window.
* One dispatcher at a time, not always this thread: in the broker, the event loop that put the
  records dispatches a small window itself (:meth:`ReputMessageService.dispatch_inline`, at
  most ``inline_dispatch_max_bytes`` behind) at the end of the loop iteration instead of waking
  the thread (for a small window the wake-up is a large share of the thread's cost), and
  the same ``do_reput`` runs there: same dispatchers, same order, same damage handling, the
  arrival listeners called on the loop. Whoever dispatches holds the dispatch lock: the thread
  for each step, the caller of :meth:`shutdown` for the last pass; the loop only *tries* it,
  and when it cannot (the thread is dispatching), or the window is larger (a catch-up after a
  restart, a burst), or an inline pass failed since the thread's last good step, the loop
  wakes the thread as before. Once shutdown has dispatched what was left nothing dispatches.
* ``dispatch_behind_bytes`` (limit − reput_from) is the dispatch lag.
* A BLANK marker moves to the next segment; a record that does not decode inside readable data
  is a bug or damage: it is logged and skipped by its size when the size is plausible, exactly
  as RocketMQ does, otherwise dispatch stops there until new data arrives.
* After a restart dispatch resumes from the recovered high-water mark; re-dispatching a record
  that is already in a ConsumeQueue or the index is harmless (both skip it).

Window parsing is not here: :func:`rocketq.store.record_scan.parse_window` turns a window into
requests (a :class:`~rocketq.store.record_scan.DispatchBatch` of columns for V1/IPv4 records,
which the ConsumeQueue and index dispatchers read in bulk) and says what stopped it (BLANK, END,
CORRUPT or the end of the window); this service moves the positions accordingly. Listeners
registered for one topic (:meth:`ReputMessageService.add_arrival_listener`) are only called with
that topic's requests, so the delay and timer services do not make every record's object just
to look for their topic.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from rocketq.errors import DiskFull
from rocketq.protocol import record as rec
from rocketq.store.commitlog import CommitLog
from rocketq.store.quarantine import ResyncPolicy, find_resync
from rocketq.store.record_scan import DispatchBatch, DispatchRequest, RequestList, parse_window
from rocketq.store.service import ServiceThread

log = logging.getLogger(__name__)


def parse_delay_levels(spec: str) -> dict[int, int]:
    """``"1s 5s 10s 1m 2h"`` → {level: delay ms} (RocketMQ ``parseDelayLevel``; units s/m/h/d)."""
    units = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    table: dict[int, int] = {}
    for level, item in enumerate(spec.split(), start=1):
        unit = units.get(item[-1:])
        if unit is None or not item[:-1].isdigit():
            raise ValueError(f"delay level {level} {item!r} is not a number followed by s, m, h or d")
        table[level] = int(item[:-1]) * unit
    return table


#: A dispatcher receives the requests of one read window, in CommitLog order.
Dispatcher = Callable[[list[DispatchRequest]], object]


class ReputMessageService(ServiceThread):
    """Builds ConsumeQueue units and index entries from the CommitLog, in CommitLog order.

    Its thread waits up to ``idle_wait_s`` for a wakeup (a put), then dispatches everything
    readable (:meth:`step`); the broker's loop may dispatch a small window itself
    (:meth:`dispatch_inline`), never at the same time."""

    name = "ReputMessageService"
    wait_first = True
    error_backoff_s = 0.05

    def __init__(
        self,
        commitlog: CommitLog,
        dispatchers: list[Dispatcher],
        *,
        limit: Callable[[], int],
        roll_next_file: Callable[[int], int],
        min_offset: Callable[[], int],
        delay_levels: dict[int, int] | None = None,
        idle_wait_s: float = 1.0,
    ) -> None:
        super().__init__(idle_wait_s)
        self._commitlog = commitlog
        self.dispatchers = dispatchers
        self.arrival_listeners: list[Dispatcher] = []
        #: listeners that only care about one topic: called with that topic's requests, if any
        self.topic_listeners: list[tuple[str, Dispatcher]] = []
        self._limit = limit
        self._roll_next_file = roll_next_file
        self._min_offset = min_offset
        self._delay_levels = delay_levels
        self.reput_from_offset = 0
        self.dispatched_records = 0
        #: damaged ranges (start → end) recovery left in place: dispatch steps over them
        self.damaged: dict[int, int] = {}
        #: everything below the limit is whole (a walk over data at rest, as a ConsumeQueue
        #: rebuild does): zeros there are damage, not a record still being written
        self.at_rest = False
        #: bytes read per window; a window is parsed and dispatched as one batch, so a larger one
        #: spreads the per-window NumPy call overhead over more records (4 MiB: ~13k records of
        #: 300 B; measured ~7% less CPU per record than 1 MiB)
        self.window_bytes = 4 << 20
        self._stopped_hard = False
        self._waiting_for_space = False
        self._progress = threading.Condition()
        self._progress_waiters = 0  # threads in wait_dispatched (changed under _progress)
        #: held by whoever dispatches: the service's thread (:meth:`step`), an event loop
        #: (:meth:`dispatch_inline`, which only tries it) or the caller of :meth:`shutdown`
        self._dispatch_lock = threading.Lock()
        #: set (under the lock) once shutdown has finished dispatching: nothing dispatches after
        self._closed = False
        #: an inline dispatch failed: leave dispatch to the thread until one of its steps succeeds
        self._inline_failed = False
        #: windows dispatched by :meth:`dispatch_inline` (tests and stats)
        self.inline_dispatches = 0
        #: a lock the dispatchers wait for (the ConsumeQueues' repair lock, held through a
        #: rebuild): :meth:`dispatch_inline` only tries it, so the loop never waits for a rebuild
        self.inline_guard: threading.RLock | None = None

    # -- control ----------------------------------------------------------------------------
    def add_arrival_listener(self, listener: Dispatcher, *, topic: str | None = None) -> None:
        """Call ``listener`` after each dispatched window with its requests, or, with ``topic``,
        with the requests of that topic only (and not at all for windows without it: a window
        dispatched in columns then never builds request objects for the other topics)."""
        if topic is None:
            self.arrival_listeners.append(listener)
        else:
            self.topic_listeners.append((topic, listener))

    def shutdown(self) -> None:
        """Stop after dispatching what is available (RocketMQ waits up to 5 s the same way).
        A dispatch that cannot go on (a full disk: the ConsumeQueues and the index cannot grow)
        is not waited for, and what it leaves is logged, not raised: the store stays behind
        (its ``abort`` file stays), so the next start dispatches the rest."""
        deadline = time.monotonic() + 5
        while (
            self.behind() > 0
            and time.monotonic() < deadline
            and self._thread.is_alive()
            and not self._waiting_for_space
        ):
            self.wakeup()
            self.wait_dispatched(self._limit(), 0.05)
        super().shutdown()
        with self._dispatch_lock:  # waits for an inline dispatch under way
            if self.behind() > 0:
                try:
                    self.do_reput()  # the thread is gone: finish in the caller
                except Exception as exc:
                    log.error(
                        "dispatch stopped at offset %d at shutdown (%s); the next start dispatches the rest",
                        self.reput_from_offset,
                        exc,
                    )
            self._closed = True

    def behind(self) -> int:
        """Dispatch lag in bytes."""
        lag = self._limit() - self.reput_from_offset  # read per send: no max() call
        return lag if lag > 0 else 0

    def wait_dispatched(self, offset: int, timeout_s: float) -> bool:
        """Block until everything before ``offset`` is dispatched (or the timeout passes)."""
        deadline = time.monotonic() + timeout_s
        with self._progress:
            self._progress_waiters += 1
            try:
                while self.reput_from_offset < offset:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    self.wakeup()
                    self._progress.wait(min(remaining, 0.1))
            finally:
                self._progress_waiters -= 1
        return True

    def catch_up(self, timeout_s: float) -> bool:
        """Block until every record readable now is dispatched (waking the thread), or the
        timeout passes: what a read from another thread does while a window waits on the loop."""
        return self.wait_dispatched(self._limit(), timeout_s)

    # -- work -------------------------------------------------------------------------------
    def on_start(self) -> None:
        log.info("ReputMessageService started at offset %d", self.reput_from_offset)

    def on_stopped(self) -> None:
        log.info("ReputMessageService stopped at offset %d", self.reput_from_offset)

    def on_error(self, exc: Exception) -> None:
        self.error = exc
        if not isinstance(exc, DiskFull):
            log.exception("dispatch failed at offset %d", self.reput_from_offset)
            self._stopped.wait(self.error_backoff_s)
            return
        if not self._waiting_for_space:  # once, not at every retry
            self._waiting_for_space = True
            log.error("dispatch waits for disk space at offset %d: %s", self.reput_from_offset, exc)
        self._stopped.wait(0.5)

    def step(self) -> None:
        with self._dispatch_lock:
            if self._closed:
                return
            self.do_reput()
        self._inline_failed = False
        if self._waiting_for_space:
            self._waiting_for_space = False
            log.warning("dispatch resumed at offset %d", self.reput_from_offset)

    def dispatch_inline(self, max_bytes: int) -> bool:
        """Dispatch in the calling thread (the broker's event loop) when at most ``max_bytes``
        wait and nobody else is dispatching; True when nothing is left for the thread to do.

        False (the caller wakes the thread instead): more than ``max_bytes`` behind (a catch-up
        or a burst is the thread's), the thread holds the dispatch lock (it is dispatching: it
        finds these records too once woken), a ConsumeQueue rebuild holds :attr:`inline_guard`,
        the service is stopped or closed, or dispatch failed lately (the thread retries with its
        back-off and logging)."""
        if self._closed or self._stopped.is_set() or self._inline_failed or self._waiting_for_space:
            return False
        behind = self._limit() - self.reput_from_offset
        if behind <= 0:
            return True  # already dispatched (reput_from_offset moves after the dispatchers ran)
        if behind > max_bytes or not self._dispatch_lock.acquire(blocking=False):
            return False
        guard = self.inline_guard
        try:
            if self._closed or (guard is not None and not guard.acquire(blocking=False)):
                return False
            try:
                if self.do_reput():
                    self.inline_dispatches += 1
            except Exception:
                self._inline_failed = True
                log.warning(
                    "inline dispatch failed at offset %d; the dispatch thread takes over",
                    self.reput_from_offset,
                )
                return False
            finally:
                if guard is not None:
                    guard.release()
        finally:
            self._dispatch_lock.release()
        return True

    def do_reput(self) -> int:
        """Dispatch every record between ``reput_from_offset`` and the limit; returns the count."""
        count = 0
        min_offset = self._min_offset()
        if self.reput_from_offset < min_offset:
            log.warning(
                "dispatch offset %d is below the CommitLog minimum %d; skipping ahead",
                self.reput_from_offset,
                min_offset,
            )
            self.reput_from_offset = min_offset
        queue = self._commitlog.queue
        file_size = self._commitlog.file_size
        while not self._stopped_hard:
            limit = self._limit()
            start = self.reput_from_offset
            if start >= limit:
                break
            mf = queue.find_by_offset(start)
            if mf is None:
                break
            pos = start - mf.file_from_offset
            readable = min(mf.read_position, limit - mf.file_from_offset)
            if pos >= readable:
                if readable >= file_size:
                    self.reput_from_offset = self._roll_next_file(start)
                    continue
                break
            data = mf.read(pos, min(readable - pos, self.window_bytes))
            if data is not None and len(data) >= 4:
                first = int.from_bytes(data[:4], "big", signed=True)
                if len(data) < first <= readable - pos:  # a record larger than the window
                    data = mf.read(pos, first)
            if data is None:
                break
            reqs, used, stop = parse_window(data, start, self._delay_levels)
            if stop is rec.RecordKind.END and self.at_rest and start + used < limit:
                stop = rec.RecordKind.CORRUPT  # zeros inside data known to be whole: damage
            if not reqs and stop is None and len(data) >= 8:
                # A size no record can have here (past the segment end or the largest legal
                # record) is damage, not a record still being written.
                first = int.from_bytes(data[:4], "big", signed=True)
                if first > file_size - pos or first > self._commitlog._max_record:
                    stop = rec.RecordKind.CORRUPT
            if reqs:
                count += self._dispatch(reqs)
                self.reput_from_offset = start + used
                self._notify_progress()
            if stop is rec.RecordKind.BLANK:
                self.reput_from_offset = self._roll_next_file(start + used)
            elif stop is rec.RecordKind.CORRUPT:
                if not self._skip_damage(start + used, limit):
                    break
            elif stop is rec.RecordKind.END or not reqs:
                break
        self.dispatched_records += count
        self._notify_progress()
        return count

    def _dispatch(self, reqs: list[DispatchRequest]) -> int:
        """Hand ``reqs`` to the dispatchers, the arrival listeners and the listeners of their
        topics; returns how many there were."""
        if not reqs:
            return 0
        for dispatcher in self.dispatchers:
            dispatcher(reqs)
        for listener in self.arrival_listeners:
            listener(reqs)
        for topic, listener in self.topic_listeners:
            if isinstance(reqs, DispatchBatch):
                mine = reqs.of_topic(topic)
            elif isinstance(reqs, RequestList) and reqs.topics is not None and topic not in reqs.topics:
                continue  # the scan saw every topic of the window: none of this listener's
            else:
                mine = [r for r in reqs if r.topic == topic]
            if mine:
                listener(mine)
        return len(reqs)

    def _skip_damage(self, start: int, limit: int) -> bool:
        """A record inside readable data that does not decode: a bug or damage. Like RocketMQ,
        log it and skip it by its size when the size is plausible."""
        end = self.damaged.get(start)
        if end is None:
            # Damage recovery did not scan (it lies before the re-verified tail): step to the
            # next intact record, found as recovery finds it.
            log_ = self._commitlog
            policy = ResyncPolicy(limit, clean_shutdown=True)
            found = find_resync(log_.queue.find_by_offset, log_.file_size, start, policy)
            if found is not None:
                end = found.end
                self.damaged[start] = end
                log.error(
                    "record at offset %d does not decode (%s); dispatch skips %d bytes (%d record(s)) to "
                    "the next intact record at %d",
                    start,
                    found.reason,
                    found.size,
                    found.records,
                    end,
                )
        if end is not None and end <= limit:
            self.reput_from_offset = end
            return True
        head = self._commitlog.read(start, 8)
        if head is None:
            return False
        size = int.from_bytes(head[:4], "big", signed=True)
        if size > 0 and start + size <= limit:
            log.error("[BUG] record at offset %d does not decode; skipping its %d bytes", start, size)
            self.reput_from_offset = start + size
            return True
        log.error("[BUG] record at offset %d does not decode; dispatch waits here", start)
        return False

    def _notify_progress(self) -> None:
        # Most passes have nobody waiting: skip the condition's lock. A waiter counts itself
        # under that lock before it reads reput_from_offset, and reput_from_offset is written
        # before this check, so a waiter either sees the new offset or is counted here.
        if self._progress_waiters:
            with self._progress:
                self._progress.notify_all()
