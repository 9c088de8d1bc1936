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

Where recovery starts scanning the CommitLog (beyond RocketMQ, which uses store timestamps):
the checkpoint extension records ``dispatched_phy_offset`` (ConsumeQueues and index flushed up to
there) and ``masterFlushedOffset`` (CommitLog flushed up to there); both are record boundaries.
Recovery scans from the lower of the two, so its time is proportional to the un-checkpointed tail,
not to the store size. Without a usable checkpoint (a store written by Apache RocketMQ) it falls
back to RocketMQ's rules: the last three segments after a clean shutdown; after a crash, the last
segment whose first record is older than the checkpoint's timestamps.
"""

from __future__ import annotations

import bisect
import datetime as _dt
import errno
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import TracebackType

from rocketq.config import FlushDiskType, StoreConfig
from rocketq.errors import ConfigError, DiskFull, StoreLocked, SystemBusy
from rocketq.message import (
    TOPIC_PATTERN,
    BrokerMessage,
    Message,
    MessageExt,
    decode_offset_msg_id,
    pack_socket_addr,
)
from rocketq.metrics.exposition import ThreadHistograms
from rocketq.protocol import record as rec
from rocketq.protocol.record import view_to_message
from rocketq.store.checkpoint import StoreCheckpoint
from rocketq.store.commitlog import CommitLog, PutMessageResult
from rocketq.store.consume_queue import FILLER_SIZE, ConsumeQueue, ConsumeQueueStore
from rocketq.store.cq_repair import collect_units, dedupe, unit_mismatch
from rocketq.store.dispatch import Dispatcher, ReputMessageService, parse_delay_levels
from rocketq.store.index_file import IndexService
from rocketq.store.quarantine import QUARANTINE_DIR, ResyncPolicy, list_quarantined
from rocketq.store.record_scan import SCHEDULE_TOPIC, DispatchRequest
from rocketq.store.recovery import (
    DispatchState,
    RecoveryReport,
    choose_abnormal_start,
    recover_commitlog,
)
from rocketq.store.retention import NOTHING_NEEDED, RetentionService, Segment, Unconsumed
from rocketq.store.schedule import ScheduleMessageService, delay_level_of, to_schedule_topic
from rocketq.store.timer import (
    TIMER_TOPIC,
    TimerMessageService,
    TimerPolicy,
    TimerServiceConfig,
    may_be_timer,
    to_timer_topic,
)

log = logging.getLogger(__name__)

#: After an abnormal stop, how many of the last units of each queue are checked against their
#: records at start (about 10 µs each).
_CRASH_CHECK_UNITS = 1024
_perf_ns = time.perf_counter_ns
#: One put in this many is timed for ``put_latency``: two clock reads per put would cost the
#: send path more than every counter of the broker together (docs/metrics.md, Cost).
PUT_LATENCY_SAMPLE = 16
_bisect_left = bisect.bisect_left


class GetMessageStatus(StrEnum):
    """RocketMQ ``GetMessageStatus``."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass(slots=True)
class GetMessageResult:
    """Result of :meth:`MessageStore.get_message`. ``buffers`` are the raw CommitLog records (what
    a pull response carries); ``messages`` decodes them."""

    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    buffers: list[bytes] = field(default_factory=list)
    queue_offsets: list[int] = field(default_factory=list)
    buffer_total_size: int = 0

    @property
    def messages(self) -> list[MessageExt]:
        out = []
        for buf in self.buffers:
            view = rec.decode_record(buf, 0, check_crc=False)
            if view.kind is rec.RecordKind.MESSAGE:
                out.append(view_to_message(view))
        return out

    @property
    def message_count(self) -> int:
        return len(self.buffers)


@dataclass(frozen=True, slots=True)
class QueryMessageResult:
    messages: list[MessageExt]
    index_last_update_timestamp: int
    index_last_update_phy_offset: int


@dataclass(slots=True)
class StoreStats:
    put_count: int = 0
    put_bytes: int = 0
    put_failures: int = 0
    get_count: int = 0
    get_found: int = 0
    queues_rebuilt: int = 0


class MessageStore:
    """The embedded RocketMQ-compatible message store (see the module docstring)."""

    def __init__(self, config: StoreConfig | None = None) -> None:
        self.config = config = config or StoreConfig()
        self.root = config.store_path_root_dir
        self.delay_levels = parse_delay_levels(config.message_delay_level)
        self.commitlog = self._new_commitlog(config)
        self.consume_queues = ConsumeQueueStore(config)
        self.commitlog.reserve_queue_file = self.consume_queues.reserve
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
        self._lock_fd: int | None = None
        self._sync = config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        self._logics_flusher: threading.Thread | None = None
        self._stopping = threading.Event()
        self.last_exit_ok = True
        self.recovery: RecoveryReport | None = None
        self.recovery_seconds = 0.0
        self.started = False
        self.stats = StoreStats()
        #: Seconds a put_message / put_messages call takes (the flush wait under SYNC_FLUSH
        #: included), one put in PUT_LATENCY_SAMPLE timed, per calling thread; None (the
        #: default) measures nothing. Set by the broker when it serves metrics.
        self.put_latency: ThreadHistograms | None = None
        self._puts_seen = 0
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
    def abort_file(self) -> str:
        return os.path.join(self.root, "abort")

    @property
    def quarantine_dir(self) -> str:
        """Where recovery keeps the bytes of damaged CommitLog ranges it skipped."""
        return os.path.join(self.root, QUARANTINE_DIR)

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

    def _check_room_for_segments(self) -> None:
        """Refuse to start when the disk cannot hold the CommitLog segments the first write
        creates: the segment itself (unless the last one has room) and the next one, which the
        allocator always creates ahead. Otherwise the broker would report ready and then fail
        every send after waiting for the allocation."""
        size = self.commitlog.file_size
        last = self.commitlog.queue.last()
        if last is not None and not last.is_full():
            return  # the current segment is reserved already; the next one is disk pressure
        need = 2 * size
        directory = self.config.commit_log_dir
        os.makedirs(directory, exist_ok=True)
        st = os.statvfs(directory)
        free = st.f_bavail * st.f_frsize
        if free < need:
            raise DiskFull(
                f"cannot start: CommitLog segments of {size} B (mapped_file_size_commit_log, "
                f"broker.conf mappedFileSizeCommitLog) need {need} B free (this segment and the "
                f"next, created ahead) but {directory} has {free} B free; use smaller segments "
                "or free disk space"
            )

    def _load_and_recover(self) -> None:
        cfg = self.config
        self.last_exit_ok = not os.path.exists(self.abort_file)
        self.commitlog.load()
        self.consume_queues.load()
        self.checkpoint = StoreCheckpoint(os.path.join(self.root, "checkpoint"))
        self.consume_queues.checkpoint = self.checkpoint
        if cfg.message_index_enable:
            self._index_dir_missing = not os.path.isdir(os.path.join(self.root, "index"))
            self.index_service = IndexService(cfg, self.checkpoint)
            self.index_service.load(self.last_exit_ok)
        cq_high = self.consume_queues.recover()
        start = self._recovery_start()
        dispatched = DispatchState(cq_high, self.checkpoint.dispatched_phy_offset, self.last_exit_ok)
        cp = self.checkpoint
        # Data was flushed up to here before the stop: damage below it is not a torn tail.
        known_end = cp.master_flushed_offset if cp.dispatched_phy_offset >= 0 else -1
        self.recovery = recover_commitlog(
            self.commitlog,
            check_crc=cfg.check_crc_on_recover,
            start_offset=start,
            dispatch=dispatched,
            resync=ResyncPolicy(known_end if known_end > 0 else -1, self.last_exit_ok),
            quarantine_dir=self.quarantine_dir,
        )
        plan = self.recovery.plan
        self.quarantined = list_quarantined(self.quarantine_dir)
        process = plan.process_offset
        if self.index_service is not None:
            self.index_service.discard_beyond(process)
        if not self.commitlog.queue.files:
            self.consume_queues.destroy()
        elif plan.cut_queues:
            log.warning("ConsumeQueues point past the CommitLog end %d; truncating them", process)
            self.consume_queues.truncate_dirty(process)
        self.consume_queues.correct_min_offsets(max(0, self.commitlog.min_offset))
        self.commitlog.topic_queue_table.clear()
        self.commitlog.topic_queue_table.update(self.consume_queues.max_offsets())
        # Dispatch what the ConsumeQueues or the index do not have yet, then rebuild the table.
        self.reput = ReputMessageService(
            self.commitlog,
            self._dispatchers(),
            limit=self._dispatch_limit,
            roll_next_file=self.commitlog.roll_next_file,
            min_offset=lambda: max(0, self.commitlog.min_offset),
            delay_levels=self.delay_levels,
        )
        self.reput.damaged = {r.offset: r.end for r in plan.quarantined}
        self.reput.reput_from_offset = self._reput_start(plan.redispatch_from)
        caught_up = self.reput.do_reput()
        if caught_up:
            log.info("re-dispatched %d records after recovery", caught_up)
        damaged = self._check_consume_queues(plan.start_offset)
        # What the CommitLog's re-verified range says each queue's next offset is: a queue that
        # ends before that was cut short, and no new send may get an offset it already holds.
        log_next = dict(plan.queue_next)
        for key, nxt in list(log_next.items()):
            if not TOPIC_PATTERN.match(key[0]):
                # a record whose topic bytes are damaged (the body CRC does not cover them)
                log.error("the CommitLog holds records of an invalid topic %r; ignored", key[0][:64])
                del log_next[key]
                continue
            cq = self.consume_queues.find(*key)
            have = cq.max_offset_in_queue if cq is not None else 0
            if have < nxt and key not in damaged:
                damaged[key] = f"the CommitLog holds queue offset {nxt - 1}, the queue ends at {have}"
        if damaged:
            self.rebuild_queues(damaged)
            for key in damaged:
                # the rebuilt queue has every consistent record; a larger QUEUEOFFSET in the log
                # is damage (the field is not covered by the body CRC)
                log_next.pop(key, None)
        table = self.commitlog.topic_queue_table
        for key, nxt in [*self.consume_queues.max_offsets().items(), *log_next.items()]:
            if nxt > table.get(key, 0):
                table[key] = nxt

    # -- ConsumeQueue checks and repair (store/cq_repair.py) ---------------------------------------
    def _unit_problem(self, cq: ConsumeQueue, index: int) -> str | None:
        unit = cq.get_unit(index)
        if unit is None or unit.size == FILLER_SIZE:
            return None
        if unit.offset < self.commitlog.min_offset:
            return None  # removed by retention
        data = self.commitlog.read(unit.offset, unit.size) if unit.size > 0 else None
        return unit_mismatch(data, unit.offset, unit.size, cq.topic.encode(), cq.queue_id, index)

    def _check_consume_queues(self, tail_from: int) -> dict[tuple[str, int], str]:
        """The queues recovery must rebuild, with why: structural damage found by their recovery,
        a first or last unit that disagrees with its record, and after an abnormal stop any of the
        last :data:`_CRASH_CHECK_UNITS` units pointing at or after ``tail_from`` (the range the
        CommitLog scan re-verified) that does (units a crash can have torn are the last written;
        reads check every unit)."""
        out: dict[tuple[str, int], str] = {}
        for cq in self.consume_queues:
            key = (cq.topic, cq.queue_id)
            if cq.damaged:
                out[key] = cq.damaged
                continue
            low, high = cq.min_offset_in_queue, cq.max_offset_in_queue
            if high <= low:
                continue
            problem = self._unit_problem(cq, high - 1) or self._unit_problem(cq, low)
            index = high - 2
            stop = max(low, high - _CRASH_CHECK_UNITS)
            while problem is None and not self.last_exit_ok and index > stop:
                unit = cq.get_unit(index)
                if unit is None or unit.offset < tail_from:
                    break
                problem = self._unit_problem(cq, index)
                index -= 1
            if problem is not None:
                out[key] = problem
        return out

    def rebuild_queues(self, damaged: dict[tuple[str, int], str]) -> None:
        """Rebuild the ConsumeQueues ``damaged`` (key → why) from the CommitLog, each unit at its
        record's queue offset; the queue-offset table for new sends is raised to match, so no
        queue offset is given out twice. Dispatch waits meanwhile."""
        cqs = self.consume_queues
        began = time.monotonic()
        with cqs.repair_lock:
            reput = self.reput
            end = reput.reput_from_offset if reput is not None else self.commitlog.max_offset
            found = collect_units(
                self.commitlog,
                damaged.keys(),
                end,
                delay_levels=self.delay_levels,
                damaged=reput.damaged if reput is not None else None,
            )
            for (topic, queue_id), units in sorted(found.items()):
                old = cqs.find(topic, queue_id)
                old_max = old.max_offset_in_queue if old is not None else 0
                kept, dropped = dedupe(units)
                cq = cqs.replace(topic, queue_id)
                # (no correct_min_offset: the walk starts at the CommitLog's minimum, and the
                # filler units of holes would stop its search)
                holes = cq.fill_from(kept)
                cq.flush(0)
                with self.commitlog._put_lock:
                    table = self.commitlog.topic_queue_table
                    table[(topic, queue_id)] = max(table.get((topic, queue_id), 0), cq.max_offset_in_queue)
                log.error(
                    "ConsumeQueue %s-%d disagreed with the CommitLog (%s): rebuilt from the CommitLog "
                    "with %d units, queue offsets [%d, %d) (it ended at %d before); %d holes filled, "
                    "%d duplicate queue offsets dropped (%.0f ms)",
                    topic,
                    queue_id,
                    damaged[(topic, queue_id)],
                    len(kept),
                    cq.min_offset_in_queue,
                    cq.max_offset_in_queue,
                    old_max,
                    holes,
                    dropped,
                    (time.monotonic() - began) * 1000,
                )
        self.stats.queues_rebuilt += len(found)

    def _recovery_start(self) -> int | None:
        """Where the CommitLog scan starts (None: RocketMQ's last-three-segments rule).

        With a checkpoint rocketq wrote: the start of the segment holding the lower of "flushed up
        to" and "dispatched up to" (as RocketMQ 5 starts at the last segment below its dispatch
        offset). Everything from there is re-verified with CRCs, so a damaged record near the end
        is found even after a clean shutdown, and the scan never covers more than the
        un-checkpointed tail plus one segment.
        """
        cp = self.checkpoint
        files = self.commitlog.queue.files
        if cp is None or not files:
            return None
        # Only a checkpoint rocketq wrote (its extension present) carries offsets recovery can trust;
        # RocketMQ leaves masterFlushedOffset at 0 or uses it for replication.
        if cp.dispatched_phy_offset >= 0:
            start = cp.dispatched_phy_offset
            if cp.master_flushed_offset > 0:
                start = min(start, cp.master_flushed_offset)
            if self.last_exit_ok:
                # Clean shutdown: re-verify a bounded tail, from a record start that a ConsumeQueue
                # unit names about ``clean_recover_verify_bytes`` before the end.
                low = start - self.config.clean_recover_verify_bytes
                if low <= files[0].file_from_offset:
                    return files[0].file_from_offset  # the whole CommitLog is within the bound
                boundary = self._record_start_before(low)
                if boundary is not None and self.commitlog.queue.find_by_offset(boundary) is not None:
                    return boundary
            mf = self.commitlog.queue.find_by_offset(start)
            if mf is not None:
                return mf.file_from_offset
            if start >= self.commitlog.queue.max_wrote_position:
                return files[-1].file_from_offset
            log.warning("checkpoint offset %d is outside the CommitLog; using RocketMQ's rules", start)
        if self.last_exit_ok:
            return None
        safe = self.config.message_index_safe
        return choose_abnormal_start(
            self.commitlog.queue.files, cp.min_timestamp_index() if safe else cp.min_timestamp()
        )

    def _record_start_before(self, phy_offset: int) -> int | None:
        if phy_offset <= 0:
            return None
        best: int | None = None
        for cq in self.consume_queues:
            found = cq.last_record_start_at_or_before(phy_offset)
            if found is not None and (best is None or found > best):
                best = found
        return best

    def _reput_start(self, start: int) -> int:
        """Where dispatch resumes: the recovery plan's choice (the earliest record a ConsumeQueue
        may lack), or earlier where the index ends."""
        low = max(0, self.commitlog.min_offset)
        end = self.commitlog.max_offset
        if self.index_service is not None:
            start = min(start, self._index_high_water(low, start))
        return max(low, min(start, end))

    def _index_high_water(self, low: int, otherwise: int) -> int:
        """End of the last indexed record; ``low`` when the index is empty (rebuild it all)."""
        assert self.index_service is not None
        if self.index_service.rebuild_from is not None:
            # Index files the crash left incomplete were destroyed: index their messages again.
            return max(low, self.index_service.rebuild_from)
        files = self.index_service.files
        if not files or all(f.index_count <= 1 for f in files):
            # No index directory (deleted to rebuild it): index everything again. Otherwise an
            # empty index means nothing had keys (destroyed files are covered by rebuild_from).
            return low if self._index_dir_missing else otherwise
        last = self.index_service.max_phy_offset
        if not self.last_exit_ok:
            # Resume at the last indexed message itself: some of its keys may have gone with a
            # destroyed file; the index adds only the keys it does not hold yet.
            return last
        view = self.commitlog.read_record(last)
        end = last + view.size if view is not None else last
        # Records after the last indexed one may carry no keys at all; the checkpoint says
        # whether dispatch (index included) already went past them.
        return max(end, otherwise)

    def _dispatchers(self) -> list[Dispatcher]:
        out: list[Dispatcher] = [self.consume_queues.put_batch]
        if self.index_service is not None:
            out.append(self._build_index)
        return out

    def _build_index(self, reqs: list[DispatchRequest]) -> None:
        """Index a dispatch window. On a full disk the window's keys are left out (an ERROR
        once): the messages are in their ConsumeQueues already and stay readable by queue offset
        and message id, where waiting for space would hide every later message from consumers."""
        assert self.index_service is not None
        try:
            self.index_service.build_index_batch(reqs)
        except DiskFull as exc:
            self.index_windows_skipped += 1
            if not self._index_disk_full:
                self._index_disk_full = True
                at = self.reput.reput_from_offset if self.reput is not None else -1
                log.error(
                    "%s: keys of messages from CommitLog offset %d on are not indexed until space "
                    "is back (queries by key miss them; delete the index directory and restart to "
                    "index them again)",
                    exc,
                    at,
                )
            return
        if self._index_disk_full:
            self._index_disk_full = False
            skipped = self.index_windows_skipped
            log.warning("indexing keys again (%d dispatch windows were not indexed)", skipped)

    def _dispatch_limit(self) -> int:
        if self._sync:
            return min(self.commitlog.flushed_where, self.commitlog.max_offset)
        return self.commitlog.max_offset

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
            self.reput.wakeup()

    def _flush_logics_loop(self) -> None:
        interval = self.config.flush_interval_consume_queue_ms / 1000
        thorough = self.config.flush_consume_queue_thorough_interval_ms / 1000
        last_thorough = time.monotonic()
        while not self._stopping.wait(interval):
            now = time.monotonic()
            least = self.config.flush_consume_queue_least_pages
            if now - last_thorough >= thorough:
                least = 0
                last_thorough = now
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
        if behind == 0 and self.commitlog.writable:
            try:
                os.unlink(self.abort_file)
            except FileNotFoundError:
                pass
        else:
            log.warning("dispatch is %d B behind at shutdown; the next start recovers abnormally", behind)
        self._unlock_dir()
        log.info("MessageStore shut down")

    # -- writes -----------------------------------------------------------------------------
    def _inner(self, msg: Message | BrokerMessage, queue_id: int | None) -> BrokerMessage:
        if isinstance(msg, BrokerMessage):
            if queue_id is not None:
                msg.queue_id = queue_id
            inner = msg
        else:
            inner = BrokerMessage.from_message(msg, queue_id or 0, born_host=self._born_host)
        if may_be_timer(inner.properties):
            inner = to_timer_topic(inner, self._timer_policy, time.time_ns() // 1_000_000)
        if b"DELAY\x01" in inner.properties and delay_level_of(inner.properties) > 0:
            inner = to_schedule_topic(inner, len(self.delay_levels))
        return inner

    def _throttle(self) -> None:
        """Back-pressure: dispatch must not fall unboundedly behind the writers.

        Soft: above ``dispatch_yield_lag_bytes`` a put first yields the GIL. A writer that never
        blocks (a tight put loop in this interpreter) would otherwise hold the GIL while the
        dispatch thread gets it only at the switch interval (5 ms) and loses it again at every
        NumPy call that releases it, so dispatch would crawl although it is faster than the
        writer. Hard: a writer that finds dispatch more than ``max_dispatch_lag_bytes`` behind
        waits until it is under half that."""
        reput = self.reput
        if reput is None:
            return
        lag = self.commitlog.max_offset - reput.reput_from_offset
        soft = self.config.dispatch_yield_lag_bytes
        if 0 < soft < lag:
            time.sleep(0)
        limit = self.config.max_dispatch_lag_bytes
        if limit <= 0 or lag <= limit:
            return
        target = self.commitlog.max_offset - limit // 2
        if not reput.wait_dispatched(target, self.config.put_message_timeout_ms / 1000):
            lag = self.commitlog.max_offset - reput.reput_from_offset
            raise SystemBusy(
                f"dispatch is {lag} B behind the CommitLog (limit {limit} B) after waiting "
                f"{self.config.put_message_timeout_ms} ms; try again later"
            )

    def put_message(self, msg: Message | BrokerMessage, queue_id: int | None = None) -> PutMessageResult:
        """Store one message in ``queue_id`` (default 0; a BrokerMessage keeps its own)."""
        timed = self.put_latency
        began = 0
        if timed is not None:
            self._puts_seen = seen = self._puts_seen + 1
            if not seen % PUT_LATENCY_SAMPLE:
                began = _perf_ns()
        self._throttle()
        try:
            r = self.commitlog.put_message(self._inner(msg, queue_id))
        except Exception:
            self.stats.put_failures += 1
            raise
        self.stats.put_count += 1
        self.stats.put_bytes += r.size
        if began and timed is not None:
            hist = timed.local()
            seconds = (_perf_ns() - began) / 1e9
            hist.counts[_bisect_left(hist.bounds, seconds)] += 1
            hist.sum += seconds
        return r

    def put_messages(
        self, msgs: Sequence[Message | BrokerMessage], queue_id: int | None = None
    ) -> PutMessageResult:
        """Store a batch under one lock acquisition; consecutive queue offsets per queue."""
        timed = self.put_latency
        began = 0
        if timed is not None:
            self._puts_seen = seen = self._puts_seen + 1
            if not seen % PUT_LATENCY_SAMPLE:
                began = _perf_ns()
        self._throttle()
        try:
            r = self.commitlog.put_messages([self._inner(m, queue_id) for m in msgs])
        except Exception:
            self.stats.put_failures += 1
            raise
        self.stats.put_count += r.msg_num
        self.stats.put_bytes += r.size
        if began and timed is not None:
            hist = timed.local()
            seconds = (_perf_ns() - began) / 1e9
            hist.counts[_bisect_left(hist.bounds, seconds)] += 1
            hist.sum += seconds
        return r

    def put_redelivered(self, msg: BrokerMessage) -> bool:
        """Re-put used by delayed delivery; False when the store refuses it now."""
        try:
            self.commitlog.put_message(msg)
        except Exception as exc:
            log.warning("re-put of a delayed message to %s failed: %s", msg.topic, exc)
            return False
        return True

    def wait_dispatched(self, timeout_s: float = 10.0) -> bool:
        """Block until every stored message is in its ConsumeQueue and the index."""
        assert self.reput is not None
        return self.reput.wait_dispatched(self._dispatch_limit(), timeout_s)

    def dispatch_behind_bytes(self) -> int:
        return self.reput.behind() if self.reput is not None else 0

    # -- consume queue reads ----------------------------------------------------------------
    def find_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.consume_queues.find(topic, queue_id)

    def get_max_offset(self, topic: str, queue_id: int) -> int:
        """The next queue offset to be written (0 for an unknown queue)."""
        cq = self.consume_queues.find(topic, queue_id)
        return cq.max_offset_in_queue if cq is not None else 0

    def get_min_offset(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queues.find(topic, queue_id)
        return cq.min_offset_in_queue if cq is not None else -1

    def get_offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset stored at or after ``timestamp_ms`` (RocketMQ semantics)."""
        cq = self.consume_queues.find(topic, queue_id)
        if cq is None:
            return 0
        return cq.get_offset_in_queue_by_time(timestamp_ms, self._store_time_of)

    def _store_time_of(self, physical_offset: int, size: int) -> int | None:
        data = self.commitlog.read(physical_offset, min(size, 64))
        if data is None or len(data) < 56:
            return None
        sys_flag = int.from_bytes(data[36:40], "big", signed=True)
        pos = 48 + rec.host_width(sys_flag, store=False)
        if len(data) < pos + 8:
            return None
        return int.from_bytes(data[pos : pos + 8], "big", signed=True)

    def get_commitlog_offset_in_queue(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self.consume_queues.find(topic, queue_id)
        unit = cq.get_unit(offset) if cq is not None else None
        return unit.offset if unit is not None else 0

    def get_message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self.consume_queues.find(topic, queue_id)
        unit = cq.get_unit(offset) if cq is not None else None
        if unit is None or unit.size == FILLER_SIZE:
            return -1
        return self._store_time_of(unit.offset, unit.size) or -1

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queues.find(topic, queue_id)
        if cq is None:
            return -1
        return self.get_message_store_timestamp(topic, queue_id, cq.min_offset_in_queue)

    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int = 32,
        tags_codes: Collection[int] | None = None,
        *,
        max_bytes: int = 256 * 1024,
        _repaired: bool = False,
    ) -> GetMessageResult:
        """Read up to ``max_count`` messages of a queue from ``offset`` (RocketMQ ``getMessage``).

        ``tags_codes``: the subscription's tag hash codes; None (or ``"*"``) matches every message.
        Statuses and the next offset follow RocketMQ's rules for offsets outside ``[min, max)``.
        """
        self.stats.get_count += 1
        cq = self.consume_queues.find(topic, queue_id)
        if cq is None:
            return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        min_off = cq.min_offset_in_queue
        max_off = cq.max_offset_in_queue
        if max_off == 0:
            return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, min_off, max_off)
        if offset < min_off:
            return GetMessageResult(GetMessageStatus.OFFSET_TOO_SMALL, min_off, min_off, max_off)
        if offset == max_off:
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, min_off, max_off)
        if offset > max_off:
            nxt = min_off if min_off == 0 else max_off
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_BADLY, nxt, min_off, max_off)
        result = GetMessageResult(GetMessageStatus.NO_MATCHED_MESSAGE, offset, min_off, max_off)
        units = cq.get_units(offset, max(max_count, 1) * 4 if tags_codes else max(max_count, 1))
        if len(units) == 0:
            result.status = GetMessageStatus.OFFSET_FOUND_NULL
            result.next_begin_offset = offset + 1 if offset + 1 < max_off else offset
            return result
        commitlog_min = self.commitlog.min_offset
        status = GetMessageStatus.NO_MATCHED_MESSAGE
        scanned = 0
        codes = None if tags_codes is None else set(tags_codes)
        topic_b = topic.encode()
        for phy, size, tags in zip(
            units["offset"].tolist(), units["size"].tolist(), units["tags"].tolist(), strict=True
        ):
            if len(result.buffers) >= max_count or (
                result.buffers and result.buffer_total_size + size > max_bytes
            ):
                break
            scanned += 1
            if size == FILLER_SIZE or size <= 0:
                continue
            if phy < commitlog_min:
                status = GetMessageStatus.MESSAGE_WAS_REMOVING
                continue
            if codes is not None and tags not in codes:
                continue
            data = self.commitlog.read(phy, size)
            if data is None and phy + size <= self.commitlog.min_offset:
                status = GetMessageStatus.MESSAGE_WAS_REMOVING
                continue
            problem = unit_mismatch(data, phy, size, topic_b, queue_id, offset + scanned - 1)
            if problem is not None:
                if not _repaired:
                    # The unit disagrees with the CommitLog: rebuild the queue, then read again.
                    where = offset + scanned - 1
                    self.rebuild_queues({(topic, queue_id): f"unit {where} read: {problem}"})
                    again = (group, topic, queue_id, offset, max_count, tags_codes)
                    return self.get_message(*again, max_bytes=max_bytes, _repaired=True)
                log.error(
                    "%s-%d: unit %d still disagrees after a rebuild (%s); skipped",
                    topic,
                    queue_id,
                    offset + scanned - 1,
                    problem,
                )
                continue
            if data is None:
                continue
            result.buffers.append(data)
            result.queue_offsets.append(offset + scanned - 1)
            result.buffer_total_size += size
        result.next_begin_offset = offset + scanned
        if result.buffers:
            status = GetMessageStatus.FOUND
            self.stats.get_found += len(result.buffers)
        result.status = status
        return result

    # -- delayed delivery hooks -------------------------------------------------------------
    def schedule_queue_bounds(self, queue_id: int) -> tuple[int, int]:
        cq = self.consume_queues.find(SCHEDULE_TOPIC, queue_id)
        if cq is None:
            return 0, 0
        return cq.min_offset_in_queue, cq.max_offset_in_queue

    def schedule_queue_units(self, queue_id: int, start: int, max_count: int) -> list[tuple[int, int, int]]:
        cq = self.consume_queues.find(SCHEDULE_TOPIC, queue_id)
        if cq is None:
            return []
        units = cq.get_units(start, max_count)
        return [
            (-1, 0, 0) if size == FILLER_SIZE else (phy, size, tags)
            for phy, size, tags in zip(
                units["offset"].tolist(), units["size"].tolist(), units["tags"].tolist(), strict=True
            )
        ]

    # -- lookups ----------------------------------------------------------------------------
    def look_message_by_offset(self, physical_offset: int, size: int | None = None) -> MessageExt | None:
        """The message whose record starts at ``physical_offset``."""
        return self.commitlog.get_message(physical_offset, size)

    def select_one_message_by_offset(self, physical_offset: int, size: int | None = None) -> bytes | None:
        """The raw record starting at ``physical_offset`` (the bytes VIEW_MESSAGE_BY_ID and
        QUERY_MESSAGE answer with), or None when no message record starts there."""
        if size is None:
            head = self.commitlog.read(physical_offset, 4)
            if head is None or len(head) < 4:
                return None
            size = int.from_bytes(head, "big", signed=True)
        if size <= 0:
            return None
        data = self.commitlog.read(physical_offset, size)
        if data is None:
            return None
        view = rec.decode_record(data, 0, check_crc=False, read_body=False)
        if view.kind is not rec.RecordKind.MESSAGE or view.physical_offset != physical_offset:
            return None
        return data

    def look_message_by_id(self, msg_id: str) -> MessageExt | None:
        """Look up by offset message id (the broker-generated ``msgId``)."""
        try:
            parsed = decode_offset_msg_id(msg_id)
        except ValueError:
            return None
        return self.look_message_by_offset(parsed.offset)

    def query_messages_by_key(
        self,
        topic: str,
        key: str,
        max_count: int = 32,
        begin_ms: int = 0,
        end_ms: int | None = None,
    ) -> QueryMessageResult:
        """Messages of ``topic`` indexed under ``key`` (a KEYS entry or the UNIQ_KEY) in the time
        range, oldest first. Beyond RocketMQ: hash collisions are filtered out here by checking the
        message's real keys."""
        if self.index_service is None:
            return QueryMessageResult([], 0, 0)
        end = end_ms if end_ms is not None else time.time_ns() // 1_000_000 + 1
        max_count = max(1, min(max_count, self.config.max_msgs_num_batch))
        found: dict[int, MessageExt] = {}
        last_ts = last_phy = 0
        for _ in range(3):  # RocketMQ narrows the window up to three times
            q = self.index_service.query_offset(topic, key, max_count, begin_ms, end)
            last_ts, last_phy = q.index_last_update_timestamp, q.index_last_update_phy_offset
            if not q.phy_offsets:
                break
            for phy in sorted(q.phy_offsets):
                if phy in found:
                    continue
                m = self.look_message_by_offset(phy)
                if m is None or m.topic != topic or (key not in m.keys and m.uniq_key != key):
                    continue
                found[phy] = m
                if len(found) >= max_count:
                    break
            if len(found) >= max_count or len(q.phy_offsets) < max_count:
                break
            first_ts = min(m.store_timestamp for m in found.values()) if found else end
            if first_ts >= end:
                break
            end = first_ts
        msgs = sorted(found.values(), key=lambda m: m.commit_log_offset)[:max_count]
        return QueryMessageResult(msgs, last_ts, last_phy)

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
        self.commitlog.set_writable(not full, reason, error=DiskFull if full else None)

    # -- stats ------------------------------------------------------------------------------
    def get_max_phy_offset(self) -> int:
        return self.commitlog.max_offset

    def get_min_phy_offset(self) -> int:
        return self.commitlog.min_offset

    def runtime_info(self) -> dict[str, str]:
        """Store figures in the spirit of RocketMQ's broker runtime info."""
        return {
            "commitLogMinOffset": str(self.commitlog.min_offset),
            "commitLogMaxOffset": str(self.commitlog.max_offset),
            "commitLogFlushedOffset": str(self.commitlog.flushed_where),
            "dispatchBehindBytes": str(self.dispatch_behind_bytes()),
            "putMessageTimesTotal": str(self.stats.put_count),
            "putMessageSizeTotal": str(self.stats.put_bytes),
            "putMessageFailedTimes": str(self.stats.put_failures),
            "getMessageTimesTotal": str(self.stats.get_count),
            "getMessageFoundTotal": str(self.stats.get_found),
            "consumeQueueCount": str(len(self.consume_queues)),
            "startupRecoverMillis": str(int(self.recovery_seconds * 1000)),
            "lastExitOk": str(self.last_exit_ok).lower(),
            "commitLogQuarantinedRanges": str(len(self.quarantined)),
            "consumeQueuesRebuilt": str(self.stats.queues_rebuilt),
            # offset:bytes of each damaged range recovery skipped (files in quarantine/)
            "commitLogQuarantine": ",".join(f"{off}:{size}" for off, size, _ in self.quarantined),
        }


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
