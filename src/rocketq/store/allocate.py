"""AllocateMappedFileService: creates CommitLog segments ahead of the writer (seed 001).

When the writer asks for segment N it also queues N+1, so when N fills up its successor already
exists and rolling never waits for file creation or warm-up::

    writer ── allocate(N, N+1) ──► request table {path → request}  +  priority queue
                                     (larger size first, then smaller start offset)
    service thread: pop → create MappedFile (borrowing a write buffer, warming if asked) → signal

Semantics kept from RocketMQ:

* a path already in the request table is not queued twice;
* with the write-buffer pool on and ``fast_fail_if_no_buffer_in_store_pool``, requests are limited
  to the free buffers (minus queued requests); with none left, allocation fails at once;
* an error in the service is recorded (``has_exception``) and the request is put back to be
  retried; while the flag is set a caller does not wait, it gets a clear error instead of a hang;
* a caller waits at most ``wait_timeout_ms`` for its segment.

Unlike RocketMQ, a failure is never reported as a bare ``null``: the caller gets
:class:`~rocketq.errors.SegmentAllocationError` naming the path and the cause.
"""

from __future__ import annotations

import heapq
import logging
import os
import threading
import time
from dataclasses import dataclass, field

from rocketq.errors import (
    RocketqError,
    SegmentAllocationError,
    ServiceNotAvailable,
    WriteBufferPoolExhausted,
)
from rocketq.metrics.exposition import Histogram
from rocketq.store.mapped_file import MappedFile
from rocketq.store.service import ServiceThread
from rocketq.store.transient_pool import TransientStorePool

log = logging.getLogger(__name__)

#: Bounds (seconds) of the segment-creation histogram (fallocate, mmap, optional warm-up).
ALLOCATE_SECONDS_BOUNDS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0)


@dataclass(order=True)
class AllocateRequest:
    sort_key: tuple[int, int]
    path: str = field(compare=False)
    file_size: int = field(compare=False)
    done: threading.Event = field(default_factory=threading.Event, compare=False)
    mapped_file: MappedFile | None = field(default=None, compare=False)
    error: BaseException | None = field(default=None, compare=False)


def _failure(message: str, cause: BaseException | None) -> RocketqError:
    """The error a caller sees: a full disk stays DiskFull (SERVICE_NOT_AVAILABLE on the wire)."""
    if isinstance(cause, ServiceNotAvailable):
        return type(cause)(message)
    return SegmentAllocationError(message)


def _request(path: str, file_size: int) -> AllocateRequest:
    # Larger files first, then the smaller start offset (AllocateRequest.compareTo).
    return AllocateRequest((-file_size, int(os.path.basename(path))), path, file_size)


class AllocateMappedFileService(ServiceThread):
    """Creates requested segments (and the one after) ahead of need, largest first.

    Its thread sleeps until a request arrives (no interval); each step creates one segment."""

    name = "AllocateMappedFileService"
    join_timeout_s = 5.0

    def __init__(
        self,
        *,
        transient_pool: TransientStorePool | None = None,
        fast_fail_if_no_buffer: bool = False,
        warm_mapped_file: bool = False,
        warm_min_size: int = 0,
        sync_flush: bool = False,
        flush_least_pages_when_warm: int = 4096,
        wait_timeout_ms: int = 5000,
        retry_interval_ms: int = 100,
    ) -> None:
        super().__init__(None)  # idle until a request arrives
        self.transient_pool = transient_pool
        self.fast_fail_if_no_buffer = fast_fail_if_no_buffer
        self.warm_mapped_file = warm_mapped_file
        self.warm_min_size = warm_min_size
        self.sync_flush = sync_flush
        self.flush_least_pages_when_warm = flush_least_pages_when_warm
        self.wait_timeout_ms = wait_timeout_ms
        self.retry_interval_ms = retry_interval_ms
        self._table: dict[str, AllocateRequest] = {}
        self._queue: list[AllocateRequest] = []
        self._lock = threading.Lock()  # _table and _queue
        self.has_exception = False
        self.last_error: BaseException | None = None
        #: Segments created, failed attempts, and seconds per creation (this service's thread
        #: writes them; read at scrape time).
        self.created = 0
        self.failures = 0
        self.create_seconds = Histogram(ALLOCATE_SECONDS_BOUNDS)

    def shutdown(self) -> None:
        super().shutdown()
        # Pre-created segments nobody asked for yet are deleted, as RocketMQ does.
        for req in list(self._table.values()):
            if req.mapped_file is not None:
                log.info("deleting pre-allocated segment %s", req.path)
                req.mapped_file.destroy(1000)
        self._table.clear()

    def pending(self) -> int:
        return len(self._queue)

    # -- caller side ------------------------------------------------------------------------
    def allocate(self, next_path: str, next_next_path: str, file_size: int) -> MappedFile:
        can_submit = 2
        pool = self.transient_pool
        if pool is not None and self.fast_fail_if_no_buffer:
            can_submit = pool.available_buffer_count() - len(self._queue)
        with self._lock:
            if next_path not in self._table:
                if can_submit <= 0:
                    raise WriteBufferPoolExhausted(
                        f"write-buffer pool has no free buffer for {next_path} "
                        f"({pool.available_buffer_count() if pool else 0} free, {len(self._queue)} queued)"
                    )
                self._enqueue(_request(next_path, file_size))
                can_submit -= 1
            if next_next_path not in self._table and can_submit > 0:
                self._enqueue(_request(next_next_path, file_size))
            req = self._table[next_path]
            if self.has_exception:
                raise _failure(
                    f"segment allocation is failing ({self.last_error}); retrying", self.last_error
                )
        if not req.done.wait(self.wait_timeout_ms / 1000):
            raise _failure(
                f"timed out after {self.wait_timeout_ms} ms waiting for segment {next_path}"
                + (f" ({req.error})" if req.error else ""),
                req.error,
            )
        with self._lock:
            self._table.pop(next_path, None)
        if req.mapped_file is None:
            raise _failure(f"could not create segment {next_path}: {req.error}", req.error)
        return req.mapped_file

    def _enqueue(self, req: AllocateRequest) -> None:
        self._table[req.path] = req
        heapq.heappush(self._queue, req)
        self.wakeup()

    # -- service side -----------------------------------------------------------------------
    def step(self) -> bool:
        """Create the first queued segment; True while more are queued."""
        with self._lock:
            if not self._queue:
                return False
            req = heapq.heappop(self._queue)
            withdrawn = self._table.get(req.path) is not req
        if not withdrawn:
            self._create(req)
        with self._lock:
            return bool(self._queue)

    def _create(self, req: AllocateRequest) -> None:
        if req.mapped_file is not None:
            return
        began = time.perf_counter()
        try:
            os.makedirs(os.path.dirname(req.path) or ".", exist_ok=True)
            mf = MappedFile(req.path, req.file_size, transient_pool=self.transient_pool)
            if self.warm_mapped_file and req.file_size >= self.warm_min_size:
                mf.warm_up(self.sync_flush, self.flush_least_pages_when_warm)
        except Exception as exc:
            self.failures += 1
            if not self.has_exception or str(exc) != str(self.last_error):
                log.warning("creating segment %s failed, will retry: %s", req.path, exc)
            self.has_exception = True
            self.last_error = exc
            req.error = exc
            if not self._stopped.wait(self.retry_interval_ms / 1000):
                with self._lock:
                    heapq.heappush(self._queue, req)
            return
        self.has_exception = False
        self.last_error = None
        self.created += 1
        self.create_seconds.observe(time.perf_counter() - began)
        req.mapped_file = mf
        req.done.set()
