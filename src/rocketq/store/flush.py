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


class GroupCommitService(_Service):
    name = "GroupCommitService"

    def __init__(self, queue: MappedFileQueue, on_flushed: FlushListener | None = None) -> None:
        super().__init__()
        self._queue = queue
        self._on_flushed = on_flushed
        self._lock = threading.Lock()
        self._requests: list[tuple[int, concurrent.futures.Future[bool]]] = []

    def submit(self, next_offset: int) -> concurrent.futures.Future[bool]:
        """A future that completes True once ``flushed_where >= next_offset``."""
        fut: concurrent.futures.Future[bool] = concurrent.futures.Future()
        with self._lock:
            self._requests.append((next_offset, fut))
        self.wakeup()
        return fut

    def run_once(self) -> None:
        self._wait(0.01)
        self._do_commit()

    def _do_commit(self) -> None:
        with self._lock:
            batch, self._requests = self._requests, []
        if batch:
            target = max(off for off, _ in batch)
            # A batch may span a segment boundary: each flush(0) covers one segment.
            for _ in range(1000):
                if self._queue.flushed_where >= target:
                    break
                if self._queue.flush(0) and self._queue.flushed_where < target:
                    time.sleep(0.001)  # the commit service has not caught up yet
            flushed = self._queue.flushed_where
            for off, fut in batch:
                if not fut.done():
                    fut.set_result(flushed >= off)
        else:
            self._queue.flush(0)
        if self._on_flushed is not None and self._queue.store_timestamp > 0:
            self._on_flushed(self._queue.store_timestamp)

    def on_shutdown(self) -> None:
        self._do_commit()
        while self._queue.flushed_where < self._queue.max_offset and not self._queue.flush(0):
            pass


class FlushRealTimeService(_Service):
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
        super().__init__()
        self._queue = queue
        self._interval = interval_ms / 1000
        self._least_pages = least_pages
        self._thorough = thorough_interval_ms / 1000
        self._timed = timed
        self._on_flushed = on_flushed
        self._last_thorough = time.monotonic()

    def run_once(self) -> None:
        least = self._least_pages
        now = time.monotonic()
        if now >= self._last_thorough + self._thorough:
            self._last_thorough = now
            least = 0
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


class CommitRealTimeService(_Service):
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
        super().__init__()
        self._queue = queue
        self._interval = interval_ms / 1000
        self._least_pages = least_pages
        self._thorough = thorough_interval_ms / 1000
        self._flush_service = flush_service
        self._last_thorough = time.monotonic()

    def run_once(self) -> None:
        least = self._least_pages
        now = time.monotonic()
        if now >= self._last_thorough + self._thorough:
            self._last_thorough = now
            least = 0
        if not self._queue.commit(least):
            self._last_thorough = time.monotonic()
            self._flush_service.wakeup()
        self._wait(self._interval)

    def on_shutdown(self) -> None:
        for _ in range(10):
            if self._queue.commit(0):
                break
