"""TransientStorePool: reusable write buffers in front of the CommitLog (RocketMQ's write-buffer pool).

With the pool on, a new CommitLog segment borrows one buffer (one segment in size). Appends go to
the buffer, not to the mapping; the commit service (``flush.CommitRealTimeService``) copies
``buffer[committed:wrote]`` into the file with ``pwrite`` every 200 ms (or when woken by a put),
then the flush service makes it durable. When a segment is wholly committed its buffer returns
to the pool.

Durability trade-off (seed 002 §12-13): appends never touch the page cache of the file, so
writers do not contend with the kernel's writeback of the mapping, and the buffer memory is not
evicted. The price is a second window of loss: a message acknowledged under ASYNC_FLUSH sits in
process memory until it is committed (up to ``commit_interval_commit_log_ms``), so unlike the
page cache it does **not** survive a crash of the broker process, and readers only see it once it
is committed. That is why RocketMQ allows the pool only with ASYNC_FLUSH on a master, and so
does rocketq (:attr:`rocketq.config.StoreConfig.transient_store_pool_active`).

Buffers are anonymous shared mappings: their pages are allocated lazily, on first write, and
count as the process's anonymous memory. RocketMQ also ``mlock``s them; rocketq does not, to stay
friendly to small machines.
"""

from __future__ import annotations

import collections
import logging
import mmap
import threading

log = logging.getLogger(__name__)


class TransientStorePool:
    def __init__(self, pool_size: int, buffer_size: int) -> None:
        self.size = pool_size
        self.buffer_size = buffer_size
        self._available: collections.deque[mmap.mmap] = collections.deque()
        self._lock = threading.Lock()

    def init(self) -> None:
        for _ in range(self.size):
            self._available.append(mmap.mmap(-1, self.buffer_size))
        log.info("write-buffer pool ready: %d buffers of %d B", self.size, self.buffer_size)

    def destroy(self) -> None:
        with self._lock:
            while self._available:
                self._available.popleft().close()

    def borrow_buffer(self) -> mmap.mmap | None:
        with self._lock:
            if not self._available:
                return None
            buf = self._available.popleft()
        if len(self._available) < self.size * 0.4:
            log.warning("write-buffer pool running low: %d of %d left", len(self._available), self.size)
        return buf

    def return_buffer(self, buf: mmap.mmap) -> None:
        with self._lock:
            self._available.append(buf)

    def available_buffer_count(self) -> int:
        return len(self._available)
