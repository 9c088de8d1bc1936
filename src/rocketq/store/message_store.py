"""MessageStore: the façade of the embedded storage engine.

Lifecycle::

    start():  lock the directory (``lock``; a second opener gets StoreLocked)
              load CommitLog segments, ConsumeQueues, checkpoint, index files
              recover (normal, or abnormal when ``abort`` exists):
                ConsumeQueues: last three files each, torn units cut
                CommitLog: scan from the checkpointed point with CRC checks, torn tail cut
                ConsumeQueue units pointing past the CommitLog end are cut
              dispatch what the ConsumeQueues or the index lack, then rebuild the queue-offset table
              start services (flush, allocation, dispatch, delay and timed delivery, retention) → ``abort``
    put_message / put_messages / get_message / queries ...
    shutdown(): stop services, dispatch and flush everything, write the checkpoint, delete
              ``abort`` (only when everything was dispatched, as RocketMQ), unlock

This module holds the lifecycle, the services and what retention asks of the store. The rest
of the store's API comes from its base classes: ``store_recovery.py`` (recovery, where its scan
starts, ConsumeQueue checks and rebuilds, the dispatch wiring), ``store_queries.py`` (pulls,
lookups by offset, id, key and time, stats) and ``store_puts.py`` (the write API: conversions,
timer and delay-level topics, dispatch back-pressure), which hold no state of their own, and
``put_latency.py`` (the sampled put latency of the metrics).
"""

from __future__ import annotations

import datetime as _dt
import errno
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from types import TracebackType

from rocketq.config import FlushDiskType, StoreConfig
from rocketq.errors import ConfigError, DiskFull, StoreLocked
from rocketq.message import pack_socket_addr
from rocketq.store.checkpoint import StoreCheckpoint
from rocketq.store.commitlog import CommitLog
from rocketq.store.commitlog_lifecycle import PutLane
from rocketq.store.consume_queue import FILLER_SIZE, ConsumeQueueStore
from rocketq.store.dispatch import ReputMessageService, parse_delay_levels
from rocketq.store.index_file import IndexService
from rocketq.store.put_latency import PutLatencySampling
from rocketq.store.record_scan import SCHEDULE_TOPIC
from rocketq.store.recovery import RecoveryReport
from rocketq.store.retention import NOTHING_NEEDED, CleanDecision, RetentionService, Segment, Unconsumed
from rocketq.store.schedule import ScheduleMessageService
from rocketq.store.store_puts import LANE_STORE_PUT, LagCount, StorePuts, _plan_messages, lag_look_every
from rocketq.store.store_queries import StoreQueries, StoreStats
from rocketq.store.store_recovery import StoreRecovery
from rocketq.store.timer import (
    TIMER_TOPIC,
    TimerMessageService,
    TimerPolicy,
    TimerServiceConfig,
)

log = logging.getLogger(__name__)


class MessageStore(StoreRecovery, StoreQueries, StorePuts, PutLatencySampling):
    """The embedded RocketMQ-compatible message store (see the module docstring)."""

    def __init__(self, config: StoreConfig | None = None) -> None:
        self.config = config = config or StoreConfig()
        self.root = config.store_path_root_dir
        self.delay_levels = parse_delay_levels(config.message_delay_level)
        self.commitlog = self._new_commitlog(config)
        self.consume_queues = ConsumeQueueStore(config)
        self.commitlog.reserve_queue_file = self.consume_queues.reserve
        #: Batches of plain Messages go to the CommitLog as a PackedBatch (``plan_messages``) only
        #: where it packs them from the batch's body (not the DLedger CommitLog, which would build
        #: the messages back from it).
        self._plan_messages = _plan_messages if type(self.commitlog) is CommitLog else None
        self.checkpoint: StoreCheckpoint | None = None
        self.index_service: IndexService | None = None
        self.reput: ReputMessageService | None = None
        self.schedule: ScheduleMessageService | None = None
        self.timer: TimerMessageService | None = None
        self._timer_policy = TimerPolicy(
            config.timer_wheel_enable, config.timer_max_delay_sec, config.timer_precision_ms
        )
        self.retention: RetentionService | None = None
        #: Installed by the broker: per (topic, queue id) the smallest committed offset of its
        #: consumer groups. Retention keeps every message at or after it (store/retention.py).
        self.consumer_progress: Callable[[], Mapping[tuple[str, int], int]] | None = None
        self._born_host = pack_socket_addr(config.store_host)
        #: The dispatch lag is looked at (``_throttle``) once this many bytes were put since the
        #: last look (:func:`~rocketq.store.store_puts.lag_look_every`).
        self._throttle_every = lag_look_every(config)
        self._lag_count: LagCount | PutLane = LagCount()
        self._lock_fd: int | None = None
        self._sync = config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        #: Installed by the broker under SYNC_FLUSH: what a flush round calls to have its
        #: records dispatched (the broker's loop, which answers those sends); None: wake the
        #: dispatch thread.
        self.flushed_dispatch_wake: Callable[[], None] | None = None
        self._logics_flusher: threading.Thread | None = None
        self._stopping = threading.Event()
        self.last_exit_ok = True
        self.recovery: RecoveryReport | None = None
        self.recovery_seconds = 0.0
        self.started = False
        self.stats = StoreStats()
        PutLatencySampling.__init__(self)
        #: The CommitLog's compiled single put, fronted here (None: the Python path).
        self._lane = lane = self.commitlog._lane if LANE_STORE_PUT else None
        if lane is not None:
            lane.stats = self.stats
            lane.born_host = self._born_host
            lane.every = self._throttle_every
            self._lag_count = lane
        self._index_dir_missing = False
        self._index_disk_full = False
        #: Dispatch windows whose keys a full disk kept out of the index.
        self.index_windows_skipped = 0
        #: (CommitLog offset, bytes, file name) of every quarantined damaged range (``quarantine/``).
        self.quarantined: list[tuple[int, int, str]] = []

    def _new_commitlog(self, config: StoreConfig) -> CommitLog:
        """The CommitLog implementation (DLedger mode overrides it: store/dledger_store.py)."""
        return CommitLog(config, on_flushed=self._on_commitlog_flushed)

    # -- lifecycle --------------------------------------------------------------------------
    def __enter__(self) -> MessageStore:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.shutdown()

    @property
    def config_dir(self) -> str:
        return os.path.join(self.root, "config")

    def _lock_dir(self) -> None:
        os.makedirs(self.root, exist_ok=True)
        fd = os.open(os.path.join(self.root, "lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreLocked(
                f"store directory {self.root} is in use by another process (lock held)"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, b"lock")
        self._lock_fd = fd

    def _unlock_dir(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def start(self) -> None:
        began = time.monotonic()
        self._lock_dir()
        try:
            self._load_and_recover()
            self._check_room_for_segments()
            self._start_services()
            try:
                with open(self.abort_file, "w") as f:
                    f.write(str(os.getpid()))
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise DiskFull(f"disk full: cannot start: cannot write {self.abort_file}") from exc
                raise
        except BaseException:
            self._abandon()
            raise
        self.started = True
        self.recovery_seconds = time.monotonic() - began
        log.info(
            "MessageStore started in %s in %.0f ms (%s shutdown last time); CommitLog [%d, %d)",
            self.root,
            self.recovery_seconds * 1000,
            "clean" if self.last_exit_ok else "unclean",
            self.commitlog.min_offset,
            self.commitlog.max_offset,
        )

    def _abandon(self) -> None:
        self._stopping.set()
        for svc in (self.reput, self.schedule, self.timer, self.retention):
            if svc is not None:
                try:
                    svc.shutdown()
                except Exception:
                    log.exception("stopping %s failed", type(svc).__name__)
        self.commitlog.queue.shutdown()
        self.consume_queues.shutdown()
        if self.index_service is not None:
            self.index_service.shutdown()
        if self.checkpoint is not None:
            self.checkpoint.shutdown()
        self._unlock_dir()

    def _start_services(self) -> None:
        assert self.reput is not None
        self.commitlog.start()
        self.reput.start()
        self.commitlog.append_listener = None if self._sync else self.reput.wakeup
        self.schedule = ScheduleMessageService(
            self, self.delay_levels, self.config_dir, born_host=self._born_host
        )
        self.schedule.load()
        self.reput.add_arrival_listener(self.schedule.on_dispatch, topic=SCHEDULE_TOPIC)
        self.schedule.start()
        self.timer = TimerMessageService(
            self,
            os.path.join(self.root, "timer"),
            TimerServiceConfig(
                precision_ms=self.config.timer_precision_ms,
                roll_window_ms=self.config.timer_roll_window_slot * self.config.timer_precision_ms,
                snapshot_interval_ms=self.config.timer_snapshot_interval_ms,
            ),
        )
        self.timer.load()
        self.reput.add_arrival_listener(self.timer.on_dispatch, topic=TIMER_TOPIC)
        self.timer.start()
        self.retention = self.retention_service()
        self.retention.start()
        self._stopping.clear()
        self._logics_flusher = threading.Thread(
            target=self._flush_logics_loop, name="FlushConsumeQueue", daemon=True
        )
        self._logics_flusher.start()

    def _on_commitlog_flushed(self, store_timestamp: int) -> None:
        if self.checkpoint is not None:
            self.checkpoint.physic_msg_timestamp = store_timestamp
        if self._sync and self.reput is not None:
            (self.flushed_dispatch_wake or self.reput.wakeup)()

    def _flush_logics_loop(self) -> None:
        interval = self.config.flush_interval_consume_queue_ms / 1000
        thorough = self.config.flush_consume_queue_thorough_interval_ms / 1000
        # the first flush after a start is thorough (RocketMQ's FlushConsumeQueueService starts
        # from lastFlushTimestamp 0), and so is the first one after dispatch has moved on from
        # where the start left it (the first flush may come before anything is put): the
        # checkpoint gets a dispatched position within a flush interval of the first dispatch,
        # so a store killed in its first minute resumes dispatch from there instead of
        # rebuilding every ConsumeQueue and the index
        reput = self.reput
        start_dispatched = reput.reput_from_offset if reput is not None else -1
        first_dispatch_pending = reput is not None
        last_thorough = time.monotonic() - thorough
        while not self._stopping.wait(interval):
            now = time.monotonic()
            least = self.config.flush_consume_queue_least_pages
            moved = (
                first_dispatch_pending and reput is not None and reput.reput_from_offset > start_dispatched
            )
            if moved or now - last_thorough >= thorough:
                least = 0
                last_thorough = now
                if moved:
                    first_dispatch_pending = False
            try:
                self.flush_logics(least, checkpoint=least == 0)
            except Exception:
                log.exception("ConsumeQueue flush failed")

    def flush_logics(self, least_pages: int = 0, *, checkpoint: bool = True) -> None:
        """Flush ConsumeQueues and the index; with ``checkpoint``, record how far that covers."""
        reput = self.reput
        dispatched = reput.reput_from_offset if reput is not None else -1
        flushed = self.commitlog.flushed_where
        self.consume_queues.flush(least_pages)
        if self.index_service is not None and least_pages == 0:
            self.index_service.flush()
        cp = self.checkpoint
        if checkpoint and cp is not None and least_pages == 0:
            if self.commitlog.queue.store_timestamp > 0:
                cp.physic_msg_timestamp = self.commitlog.queue.store_timestamp
            cp.dispatched_phy_offset = dispatched
            cp.master_flushed_offset = flushed
            cp.flush()

    def shutdown(self) -> None:
        if not self.started:
            return
        self.started = False
        self._stopping.set()
        for svc in (self.schedule, self.timer, self.retention):
            if svc is not None:
                svc.shutdown()
        if self._logics_flusher is not None:
            self._logics_flusher.join(10)
        self.commitlog.shutdown_writes()
        reput = self.reput
        if reput is not None:
            reput.shutdown()
        behind = reput.behind() if reput is not None else 0
        self.commitlog.shutdown()
        self.flush_logics(0)
        self.consume_queues.shutdown()
        if self.index_service is not None:
            self.index_service.shutdown()
        if self.checkpoint is not None:
            self.checkpoint.shutdown()
        if behind == 0 and not self.commitlog.refused_for_a_fault():  # a follower's role is none
            try:
                os.unlink(self.abort_file)
            except FileNotFoundError:
                pass
        else:
            log.warning("dispatch is %d B behind at shutdown; the next start recovers abnormally", behind)
        self._unlock_dir()
        log.info("MessageStore shut down")

    # -- retention --------------------------------------------------------------------------
    def retention_service(
        self,
        *,
        usage: Callable[[], float] | None = None,
        now: Callable[[], _dt.datetime] | None = None,
        config: StoreConfig | None = None,
    ) -> RetentionService:
        """A retention service over this store (``start`` runs one; tests drive their own
        with a given disk usage and clock)."""
        return RetentionService(
            config or self.config,
            segments=self._segments,
            min_needed=self.min_needed_phy_offset,
            delete_segments=self._delete_segments,
            delete_logics=self._delete_expired_logics,
            set_disk_full=self._set_disk_full,
            unconsumed_below=self.unconsumed_below,
            usage=usage,
            now=now or _dt.datetime.now,
        )

    def run_retention_now(self) -> CleanDecision:
        """One retention run at once, as if at a ``delete_when`` hour
        (:meth:`RetentionService.run_now`; the DELETE_EXPIRED_COMMITLOG request)."""
        service = self.retention if self.retention is not None else self.retention_service()
        return service.run_now()

    def _segments(self) -> list[Segment]:
        size = self.commitlog.file_size
        out = []
        for mf in self.commitlog.queue.files:
            try:
                mtime = int(os.path.getmtime(mf.file_name) * 1000)
            except FileNotFoundError:
                mtime = 0
            out.append(Segment(mf.file_from_offset, mf.file_from_offset + size, mtime))
        return out

    def _queue_progress(self) -> dict[tuple[str, int], int]:
        """Per (topic, queue id): the smallest queue offset a consumer has committed (the
        broker's groups through ``consumer_progress``, plus the store's own delay-level and timer
        services). A queue missing here has no consumer."""
        progress = dict(self.consumer_progress()) if self.consumer_progress is not None else {}
        if self.schedule is not None:
            for level, offset in list(self.schedule.offset_table.items()):
                progress[(SCHEDULE_TOPIC, level - 1)] = offset
        if self.timer is not None:
            progress[(TIMER_TOPIC, 0)] = self.timer.cq_offset
        return progress

    def min_needed_phy_offset(self) -> int:
        """The smallest CommitLog offset of a message some queue still needs: the message at
        the smallest committed offset of a consumed queue, the first message of a queue nobody
        consumes (those go only by retention time); ``NOTHING_NEEDED`` when no queue needs any."""
        progress = self._queue_progress()
        low = NOTHING_NEEDED
        for cq in self.consume_queues:
            first = cq.min_offset_in_queue
            end = cq.max_offset_in_queue
            committed = progress.get((cq.topic, cq.queue_id), first)
            index = max(first, committed)
            while index < end:
                unit = cq.get_unit(index)
                if unit is None:
                    break
                if unit.size != FILLER_SIZE and unit.size > 0:
                    low = min(low, unit.offset)
                    break
                index += 1
        return low

    def unconsumed_below(self, phy_offset: int) -> Unconsumed:
        """How many messages stored below ``phy_offset`` some queue has not consumed yet (what
        forced cleaning up to there loses), and in how many queues."""
        progress = self._queue_progress()
        messages = queues = 0
        for cq in self.consume_queues:
            first = cq.min_offset_in_queue
            lo = max(first, progress.get((cq.topic, cq.queue_id), first))
            hi = cq.max_offset_in_queue
            # first queue offset whose message is at or above phy_offset (offsets grow with
            # queue offsets); fillers and unreadable units count as below
            a, b = lo, hi
            while a < b:
                mid = (a + b) // 2
                unit = cq.get_unit(mid)
                if unit is None or unit.size == FILLER_SIZE or unit.offset < phy_offset:
                    a = mid + 1
                else:
                    b = mid
            if a > lo:
                messages += a - lo
                queues += 1
        return Unconsumed(messages, queues)

    def _delete_segments(self, count: int) -> int:
        return self.commitlog.queue.delete_leading(count)

    def _delete_expired_logics(self) -> int:
        low = max(0, self.commitlog.min_offset)
        n = self.consume_queues.delete_expired(low)
        self.consume_queues.correct_min_offsets(low)
        if self.index_service is not None:
            n += self.index_service.delete_expired_file(low)
        return n

    def _set_disk_full(self, full: bool, reason: str) -> None:
        self.commitlog.set_writable(not full, reason, error=DiskFull if full else None, cause="disk")


def open_message_store(config: StoreConfig) -> MessageStore:
    """The store ``config`` asks for: DLedger mode (``enable_dleger_commit_log``) or plain. A
    plain start of a store that holds DLedger entries is refused: its ConsumeQueues would be cut
    back to the old CommitLog and every message since the switch hidden."""
    if config.enable_dleger_commit_log:
        from rocketq.store.dledger_store import DLedgerMessageStore  # noqa: PLC0415 - it imports this module

        return DLedgerMessageStore(config)
    root = config.store_path_root_dir
    held = sorted(n for n in os.listdir(root) if n.startswith("dledger-")) if os.path.isdir(root) else []
    if held:
        raise ConfigError(
            f"store {root} holds DLedger entries ({', '.join(held)}): start it with "
            "enableDLegerCommitLog=true (a plain start would hide every message written since)"
        )
    return MessageStore(config)
