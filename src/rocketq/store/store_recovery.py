"""Start-up of the MessageStore: recovery of its files and the wiring of dispatch.

Theory of operation (``MessageStore.start`` calls, in this order)::

    _load_and_recover():
        load CommitLog segments, ConsumeQueues, the checkpoint, index files
        ConsumeQueues recover (last three files each, torn units cut)
        CommitLog scan from _recovery_start() with CRC checks, the torn tail cut, damaged ranges
            resynced past and quarantined (store/recovery.py)
        index and ConsumeQueue units past the CommitLog end cut
        the ReputMessageService built and run once from _reput_start(): what the ConsumeQueues
            or the index lack is dispatched before anything new is written
        _check_consume_queues(): queues whose units disagree with their records (or end before
            the queue offsets the re-verified CommitLog range holds) are rebuilt from the CommitLog
        the queue-offset table rebuilt from the ConsumeQueues and that range
    _check_room_for_segments(): refuse to start on a disk that cannot hold the next segments

Where the CommitLog scan starts (beyond RocketMQ, which uses store timestamps): the checkpoint
extension records ``dispatched_phy_offset`` (ConsumeQueues and index flushed up to there) and
``masterFlushedOffset`` (CommitLog flushed up to there); both are record boundaries. Recovery
scans from the lower of the two, so its time is proportional to the un-checkpointed tail, not to
the store size. Without a usable checkpoint (a store written by Apache RocketMQ) it falls back to
RocketMQ's rules: the last three segments after a clean shutdown; after a crash, the last segment
whose first record is older than the checkpoint's timestamps.

``rebuild_queues`` also serves reads: a unit that disagrees with its record at read time gets
its queue rebuilt the same way. :class:`StoreRecovery` is a base class of
:class:`~rocketq.store.message_store.MessageStore`; it holds no state of its own.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Collection

from rocketq.config import StoreConfig
from rocketq.errors import DiskFull
from rocketq.message import TOPIC_PATTERN
from rocketq.store.checkpoint import StoreCheckpoint
from rocketq.store.commitlog import CommitLog
from rocketq.store.consume_queue import FILLER_SIZE, ConsumeQueue, ConsumeQueueStore
from rocketq.store.cq_repair import Key, Unit, collect_units, dedupe, unit_mismatch
from rocketq.store.dispatch import Dispatcher, ReputMessageService
from rocketq.store.index_file import IndexService
from rocketq.store.quarantine import QUARANTINE_DIR, ResyncPolicy, list_quarantined
from rocketq.store.record_scan import DispatchRequest
from rocketq.store.recovery import (
    DispatchState,
    RecoveryReport,
    choose_abnormal_start,
    recover_commitlog,
)
from rocketq.store.store_queries import StoreStats

#: the façade's logger: recovery's messages read as the store's
log = logging.getLogger("rocketq.store.message_store")

#: After an abnormal stop, how many of the last units of each queue are checked against their
#: records at start (about 10 µs each).
_CRASH_CHECK_UNITS = 1024


class StoreRecovery:
    """Recovery, ConsumeQueue checks and repair, and dispatch wiring of the MessageStore."""

    config: StoreConfig
    root: str
    commitlog: CommitLog
    consume_queues: ConsumeQueueStore
    checkpoint: StoreCheckpoint | None
    index_service: IndexService | None
    reput: ReputMessageService | None
    delay_levels: dict[int, int]
    last_exit_ok: bool
    recovery: RecoveryReport | None
    quarantined: list[tuple[int, int, str]]
    stats: StoreStats
    index_windows_skipped: int
    _sync: bool
    _index_dir_missing: bool
    _index_disk_full: bool

    @property
    def abort_file(self) -> str:
        return os.path.join(self.root, "abort")

    @property
    def quarantine_dir(self) -> str:
        """Where recovery keeps the bytes of damaged CommitLog ranges it skipped."""
        return os.path.join(self.root, QUARANTINE_DIR)

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
        keep = self._replicated_logics_from()
        index = self.index_service
        if index is not None and (keep is None or index.max_phy_offset < keep):
            index.discard_beyond(process)
        if not self.commitlog.queue.files:
            if keep is None:
                self.consume_queues.destroy()
        elif plan.cut_queues:
            # units at or past ``keep`` belong to the replicated part, which its owner checks
            dirty = [q for q in self.consume_queues if keep is None or q.max_physic_offset < keep]
            if dirty:
                log.warning("ConsumeQueues point past the CommitLog end %d; truncating them", process)
            for q in dirty:
                q.truncate_dirty_logic_files(process)
        self.consume_queues.correct_min_offsets(max(0, self.commitlog.min_offset))
        self.commitlog.topic_queue_table.replace(self.consume_queues.max_offsets())
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
        self.reput.inline_guard = self.consume_queues.repair_lock
        self.reput.reput_from_offset = self._reput_start(plan.redispatch_from)
        caught_up = self.reput.do_reput()
        if caught_up:
            log.info("re-dispatched %d records after recovery", caught_up)
        damaged = self._check_consume_queues(plan.start_offset, keep)
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

    def _check_consume_queues(self, tail_from: int, keep: int | None = None) -> dict[tuple[str, int], str]:
        """The queues recovery must rebuild, with why: structural damage found by their recovery,
        a first or last unit that disagrees with its record, and after an abnormal stop any of the
        last :data:`_CRASH_CHECK_UNITS` units pointing at or after ``tail_from`` (the range the
        CommitLog scan re-verified) that does (units a crash can have torn are the last written;
        reads check every unit). Queues with units at or past ``keep`` (the replicated part, not
        readable yet) are checked for structural damage only."""
        out: dict[tuple[str, int], str] = {}
        for cq in self.consume_queues:
            key = (cq.topic, cq.queue_id)
            if cq.damaged:
                out[key] = cq.damaged
                continue
            if keep is not None and cq.max_physic_offset >= keep:
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
            cqs.repair_generation += 1  # odd: reads that overlap this read again (get_message)
            try:
                self._rebuild_queues(damaged, began)
            finally:
                cqs.repair_generation += 1

    def _collect_queue_units(self, keys: Collection[Key], end: int) -> dict[Key, list[Unit]]:
        """The units of the queues ``keys`` the CommitLog holds below ``end``, in CommitLog order
        (:func:`~rocketq.store.cq_repair.collect_units`; a DLedger store adds its entries')."""
        reput = self.reput
        return collect_units(
            self.commitlog,
            keys,
            end,
            delay_levels=self.delay_levels,
            damaged=reput.damaged if reput is not None else None,
        )

    def _consistent_units(self, units: list[Unit]) -> tuple[list[Unit], int]:
        """The units a rebuilt queue keeps, and how many were dropped
        (:func:`~rocketq.store.cq_repair.dedupe`)."""
        return dedupe(units)

    def _rebuild_queues(self, damaged: dict[tuple[str, int], str], began: float) -> None:
        """:meth:`rebuild_queues` with :attr:`ConsumeQueueStore.repair_lock` held."""
        cqs = self.consume_queues
        reput = self.reput
        end = reput.reput_from_offset if reput is not None else self.commitlog.max_offset
        found = self._collect_queue_units(damaged.keys(), end)
        for (topic, queue_id), units in sorted(found.items()):
            old = cqs.find(topic, queue_id)
            old_max = old.max_offset_in_queue if old is not None else 0
            kept, dropped = self._consistent_units(units)
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

    def _replicated_logics_from(self) -> int | None:
        """Where a replicated part of the CommitLog starts, whose ConsumeQueue units and index
        entries the recovery of the local CommitLog leaves alone (DLedger mode); None here."""
        return None

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
