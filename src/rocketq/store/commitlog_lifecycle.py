"""The CommitLog's segments and services: start, stop, positions, and whether it takes writes.

A CommitLog owns a :class:`~rocketq.store.mapped_file.MappedFileQueue` of segments, the service
that creates the next segment ahead (``allocate.py``), the flush service (group commit under
SYNC_FLUSH, the periodic flush under ASYNC_FLUSH) and, with the write-buffer pool, the commit
service (``flush.py``). ``load`` maps the segments (recovery then sets the write position);
``start`` attaches a write buffer to the partly written last segment and starts the services;
``shutdown_writes`` refuses new puts, ``shutdown`` stops the services and commits and syncs what
they left. The put path reads one flag, ``_accepting`` (running and writable), kept here; and it
calls ``_after_put`` after every put, outside the lock: the append listener (which wakes
dispatch) and, with the write-buffer pool, a check whether the commit service is due. Both are
copied into the compiled put's state (:class:`PutLane`) whenever they change.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from rocketq.errors import ServiceNotAvailable, StoreNotWritable, StoreShutdown
from rocketq.store.allocate import AllocateMappedFileService
from rocketq.store.flush import CommitRealTimeService, FlushRealTimeService, GroupCommitService
from rocketq.store.mapped_file import MappedFile, MappedFileQueue
from rocketq.store.service import ServiceThread
from rocketq.store.transient_pool import TransientStorePool

if TYPE_CHECKING:
    from rocketq.message import BrokerMessage, Message
    from rocketq.store.commitlog import PutMessageResult

log = logging.getLogger("rocketq.store.commitlog")


class PutLane(Protocol):
    """The compiled single put of one CommitLog (``rocketq._speedups.put_lane``; see the module
    docstring of :mod:`rocketq.store.commitlog`): the state its fast path reads, which the
    CommitLog (and the store in front of it) keep current, and its two entry points."""

    cur: MappedFile | None
    target: object
    cur_from: int
    accepting: bool
    after_put: Callable[[], None] | None
    wake_event: threading.Event | None
    stats: object
    born_host: bytes | None
    every: int
    since: int
    timed: bool
    clock: Callable[[], int] | None

    def put(self, msg: BrokerMessage, /) -> PutMessageResult | None: ...

    def store_put(self, msg: Message | BrokerMessage, queue_id: int | None, /) -> PutMessageResult | None: ...


class CommitLogLifecycle:
    """The lifecycle half of :class:`~rocketq.store.commitlog.CommitLog` (a base class of it)."""

    file_size: int
    queue: MappedFileQueue
    allocator: AllocateMappedFileService
    transient_pool: TransientStorePool | None
    group_commit: GroupCommitService | None
    flush_service: GroupCommitService | FlushRealTimeService
    commit_service: CommitRealTimeService | None
    writable: bool
    not_writable_reason: str
    _refusals: dict[str, tuple[str, type[ServiceNotAvailable]]]
    _put_lock: threading.Lock
    _running: bool
    _started: bool
    _accepting: bool
    _not_writable_error: type[ServiceNotAvailable]
    _cur: MappedFile | None
    _append_listener: Callable[[], None] | None
    _after_put: Callable[[], None] | None
    _lane: PutLane | None
    _wake_commit: bool
    _sync_timeout_s: float

    @property
    def append_listener(self) -> Callable[[], None] | None:
        """Called after every append, outside the put lock (wakes the dispatcher)."""
        return self._append_listener

    @append_listener.setter
    def append_listener(self, listener: Callable[[], None] | None) -> None:
        self._append_listener = listener
        self._update_after_put()

    def _update_after_put(self) -> None:
        listener = self._append_listener
        commit = self._commit_waker() if self._wake_commit else None
        if listener is not None and commit is not None:
            wake_commit, wake_listener = commit, listener

            def both() -> None:
                wake_commit()
                wake_listener()

            self._after_put = both
        else:
            self._after_put = listener or commit
        if self._lane is not None:
            self._lane.wake_event = None  # never beside another after_put than its service's
            self._lane.after_put = self._after_put
            # a service's wakeup (dispatch's) does nothing while its event is set: the compiled
            # put reads the event's flag instead of calling it
            owner = getattr(listener, "__self__", None)
            event = None
            if (
                commit is None
                and isinstance(owner, ServiceThread)
                and getattr(listener, "__func__", None) is ServiceThread.wakeup
            ):
                event = owner._wakeup
            self._lane.wake_event = event

    def _commit_waker(self) -> Callable[[], None] | None:
        """With the write-buffer pool: what a put calls to wake the commit service.

        The service commits only when at least ``commit_commit_log_least_pages`` pages of the
        current segment are uncommitted or a thorough commit is due; woken otherwise it finds
        nothing to do. So a put wakes it only then: two comparisons instead of an ``Event.set``
        (a condition variable under a lock) and a spurious round of the service per put.
        """
        svc = self.commit_service
        if svc is None:
            return None
        least = svc.least_pages
        wakeup = svc.wakeup

        def wake_commit_if_due() -> None:
            mf = self._cur
            if (
                mf is None
                or (mf.wrote_position >> 12) - (mf.committed_position >> 12) >= least
                or mf.store_timestamp >= svc.thorough_due_ms
            ):
                wakeup()

        return wake_commit_if_due

    # -- lifecycle --------------------------------------------------------------------------
    def load(self) -> None:
        """Map the existing segments (recovery then sets the write position)."""
        self.queue.load()
        log.info("CommitLog loaded %d segments from %s", len(self.queue.files), self.queue.directory)

    def start(self) -> None:
        if self.transient_pool is not None:
            self.transient_pool.init()
            self._attach_write_buffer()
        self.allocator.start()
        self.flush_service.start()
        if self.commit_service is not None:
            self.commit_service.start()
        self._running = True
        self._started = True
        self._update_accepting()

    def _attach_write_buffer(self) -> None:
        """After recovery, the partly written last segment also appends through a write buffer."""
        last = self.queue.last()
        pool = self.transient_pool
        if last is None or pool is None or last.is_full() or last.write_buffer is not None:
            return
        buf = pool.borrow_buffer()
        if buf is None:
            return
        pos = last.wrote_position
        buf[0:pos] = last.mm[0:pos]
        last.write_buffer = buf
        last._transient_pool = pool

    def shutdown_writes(self) -> None:
        """Refuse new puts (StoreShutdown); under SYNC_FLUSH make what is written durable."""
        with self._put_lock:
            self._running = False
            self._update_accepting()
        if self.group_commit is not None:
            self.group_commit.wait(self.max_offset, self._sync_timeout_s)

    def shutdown(self) -> None:
        """Stop accepting writes and make everything durable."""
        if not self._started:
            self.queue.shutdown()
            return
        self._started = False
        self.shutdown_writes()
        if self.commit_service is not None:
            self.commit_service.shutdown()
        self.flush_service.shutdown()
        # Whatever the services left (e.g. the tail of a write buffer) is committed and synced here.
        while not self.queue.commit(0):
            pass
        for _ in range(10):
            if self.queue.flush(0):
                break
        end = self.max_offset
        self.allocator.shutdown()
        self.queue.shutdown()
        if self.transient_pool is not None:
            self.transient_pool.destroy()
        log.info("CommitLog shut down at offset %d", end)

    # -- positions --------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        first = self.queue.first()
        if first is None:
            return -1
        return first.file_from_offset

    @property
    def max_offset(self) -> int:
        """End of data readers can see (committed data with the write-buffer pool)."""
        return self.queue.max_offset

    @property
    def flushed_where(self) -> int:
        return self.queue.flushed_where

    def roll_next_file(self, offset: int) -> int:
        return offset + self.file_size - offset % self.file_size

    def set_writable(
        self,
        writable: bool,
        reason: str = "",
        *,
        error: type[ServiceNotAvailable] | None = None,
        cause: str = "store",
    ) -> None:
        """Accept or refuse writes for ``cause`` (``"disk"``: disk full, ``"role"``: a DLedger
        member that is not the caught-up leader, ``"store"``: anything else); ``reason``
        appears in the error. The causes are independent: writes are taken when none refuses
        them (a disk that has room again does not make a follower writable), and a put is
        refused with the role's error first (it names the leader), else the earliest other."""
        with self._put_lock:
            refusals = self._refusals
            if writable:
                refusals.pop(cause, None)
            else:
                refusals[cause] = (reason, error or StoreNotWritable)
            self.writable = not refusals
            first = refusals.get("role") or next(iter(refusals.values()), ("", StoreNotWritable))
            self.not_writable_reason, self._not_writable_error = first
            self._update_accepting()

    def refused_for_a_fault(self) -> bool:
        """Writes are refused for something other than the member's role (a full disk, a
        store error): a shutdown then leaves the abort file, so the next start recovers as
        after a crash (RocketMQ's ``runningFlags.isWriteable()`` at shutdown)."""
        return any(cause != "role" for cause in self._refusals)

    def _update_accepting(self) -> None:
        self._accepting = self._running and self.writable
        if self._lane is not None:
            self._lane.accepting = self._accepting

    def _check_writable(self) -> None:
        if not self._running:
            raise StoreShutdown("message store is shut down")
        if not self.writable:
            raise self._not_writable_error(f"message store is not writable: {self.not_writable_reason}")

    def _after_append(self) -> None:
        if self.commit_service is not None:
            self.commit_service.wakeup()

    def submit_flush(self, next_offset: int) -> concurrent.futures.Future[bool]:
        """Future completing once everything before ``next_offset`` is durable (SYNC_FLUSH)."""
        if self.group_commit is None:
            fut: concurrent.futures.Future[bool] = concurrent.futures.Future()
            fut.set_result(True)
            return fut
        return self.group_commit.submit(next_offset)
