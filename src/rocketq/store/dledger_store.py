"""MessageStore in DLedger mode (``enable_dleger_commit_log``; docs/replication.md §4).

Start-up, after :class:`~rocketq.store.message_store.MessageStore` recovered the old CommitLog
(an adopted store's segments; none in a store that was always in DLedger mode):

1. pad the last old segment with a BLANK and mark it full; ``divided_offset`` is its end
   (RocketMQ's ``dividedCommitlogOffset``), or where the entry store's first data file starts;
2. open the replicated log (a factory: a group of one, or the Raft driver) with its first data
   file at ``divided_offset``, and start it on its event loop: a loop thread of its own, or the
   broker's loop (:meth:`DLedgerMessageStore.run_ledger_on`; the store is then opened in a
   worker thread while that loop runs);
3. resume dispatch (:meth:`DLedgerMessageStore._resume_dispatch`; the old CommitLog's recovery
   leaves the replicated part's units and index files alone) at R, the checkpoint's dispatched
   position, no further than the committed position: the ConsumeQueues and the index were
   flushed up to R before it was written. Units at or past R are cut and dispatched again,
   index files past the committed position are destroyed; without a usable R (missing, below
   the entries, not an entry start, a queue's last unit not its record) the replicated part is
   rebuilt from its first entry, logged. Then the queue-offset table from the ConsumeQueues.

A member that leads a term its queue-offset table was not rebuilt for (every new leader, with
or without a broker around it) refuses puts until its log is caught up and dispatched, and
then has the table rebuilt by the dispatch thread, once per term (:mod:`rocketq.store.dledger_lead`).

Dispatch walks committed entries only, on every node (:mod:`rocketq.store.dledger_reput`).
A queue rebuilt at a read (a unit that disagrees with its record: ``rebuild_queues``) gets the
units of the old segments and then of the committed entries up to where dispatch stands
(:meth:`DLedgerMessageStore._collect_queue_units`), each at its own queue offset.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import logging
import os
import struct
from collections.abc import Awaitable, Callable, Collection, Sequence

from rocketq.config import FlushDiskType, StoreConfig
from rocketq.ha.entry_store import EntryStore
from rocketq.ha.group_config import (
    LedgerFactory,
    LedgerSpec,
    open_ledger,
    parse_broker_addresses,
    parse_peers,
)
from rocketq.ha.replicated_log import ReplicatedLog
from rocketq.message import BrokerMessage
from rocketq.protocol import record as rec
from rocketq.store.commitlog import CommitLog, PutMessageResult
from rocketq.store.cq_repair import Key, Unit, dedupe, unit_collector
from rocketq.store.dledger_appends import LedgerLoop, PutCallback, PutThen
from rocketq.store.dledger_commitlog import DLedgerCommitLog
from rocketq.store.dledger_lead import LeaderTable, queue_table_nexts
from rocketq.store.dledger_reput import DLedgerReputService
from rocketq.store.dledger_retention import DataFile, EntryRetentionService, Holds, data_file_mtime_ms
from rocketq.store.message_store import MessageStore
from rocketq.store.retention import RetentionService, Segment

log = logging.getLogger(__name__)
_BLANK = struct.Struct(">ii")


class DLedgerMessageStore(MessageStore):
    """See the module docstring. ``ledger_factory`` builds the replicated log (default:
    :func:`rocketq.ha.group_config.open_ledger`)."""

    commitlog: DLedgerCommitLog

    #: The broker wakes dispatch for its committed puts (a follower: for the commit's
    #: advances) at most this often (LoopWakeup): the puts complete a few per loop iteration,
    #: and each wake-up of the dispatch thread and its window's fixed cost came to about as
    #: much as dispatching the records (2 ms: the dispatch thread 6-8 µs per message, 10 ms:
    #: 3.6). A put after a quiet interval wakes it at once; under load records reach the
    #: ConsumeQueues up to this much later, but a read of the queues or the index on the
    #: broker first takes a window still waiting (``StoreQueries.dispatch_window``).
    DISPATCH_WAKE_INTERVAL_S = 0.010
    #: The same on a member that does not lead (``lead_term`` -1: a follower, a candidate): its
    #: records reach its ConsumeQueues and index up to this long after their commit reached it,
    #: under load (at once after a quiet interval; a read on it first takes a window still
    #: waiting). Nobody consumes from a follower while its leader serves; fewer, larger windows
    #: cost its dispatch thread a third less per message (docs/benchmarks.md, "A member's
    #: dispatch thread per message"). A member that becomes leader is woken at its role change.
    FOLLOWER_DISPATCH_WAKE_INTERVAL_S = 0.030

    def __init__(
        self, config: StoreConfig | None = None, *, ledger_factory: LedgerFactory | None = None
    ) -> None:
        super().__init__(config)
        self.ledger_factory = ledger_factory or open_ledger
        self.ledger: ReplicatedLog | None = None
        self.ledger_loop: LedgerLoop | None = None
        #: the running loop the log is to live on (:meth:`run_ledger_on`); None: a thread of its own
        self._host_loop: asyncio.AbstractEventLoop | None = None
        #: rebuilds the queue-offset table for each term this member leads (once the log is open)
        self.leader_table: LeaderTable | None = None

    def run_ledger_on(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the replicated log on ``loop`` (the broker's, running) instead of a loop thread
        of its own; called before :meth:`start`, which must then run in another thread than
        ``loop``'s (it waits for the log's start there). The owner keeps ``loop`` running until
        the store is shut down (from another thread too)."""
        if self.ledger_loop is not None:
            raise RuntimeError("the replicated log is already started")
        self._host_loop = loop

    def _new_commitlog(self, config: StoreConfig) -> CommitLog:
        return DLedgerCommitLog(config, on_flushed=self._on_commitlog_flushed)

    def ledger_spec(self, data_start_offset: int) -> LedgerSpec:
        cfg = self.config
        self_id = cfg.d_leger_self_id or "n0"
        peers = parse_peers(cfg.d_leger_peers) if cfg.d_leger_peers else {self_id: "127.0.0.1:40911"}
        return LedgerSpec(
            base_dir=cfg.store_path_dledger_commit_log or self.root,
            group=cfg.d_leger_group,
            self_id=self_id,
            peers=peers,
            data_file_size=cfg.mapped_file_size_commit_log,
            data_start_offset=data_start_offset,
            fsync=cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH,
            preferred_leader_id=cfg.preferred_leader_id or None,
            enable_batch_push=cfg.enable_batch_push,
            max_batch_bytes=cfg.max_batch_push_size,
            broker_address=cfg.store_host,
            broker_addresses=parse_broker_addresses(cfg.d_leger_broker_addresses),
            election_timeout_ms=cfg.d_leger_election_timeout_ms or None,
            heartbeat_interval_ms=cfg.d_leger_heartbeat_interval_ms or None,
            event_log_path=cfg.d_leger_event_log_path or None,
            flush_file_interval_ms=cfg.flush_file_interval_ms,
        )

    def _load_and_recover(self) -> None:
        rebuilt = self.stats.queues_rebuilt
        super()._load_and_recover()  # the old CommitLog: recovered, dispatched, units past it cut
        rebuilt_queues = self.stats.queues_rebuilt > rebuilt
        cl = self.commitlog
        divided = self._pad_old_commitlog()
        spec = self.ledger_spec(divided)
        if divided == 0:
            divided = _first_data_file(os.path.join(spec.base_dir, f"dledger-{spec.self_id}", "data"))
        host = self._host_loop
        loop = LedgerLoop() if host is None else LedgerLoop.adopt(host)
        try:
            ledger = self.ledger_factory(spec)
            loop.run(ledger.start(), 60)
        except BaseException:
            loop.stop()
            raise
        self.ledger, self.ledger_loop = ledger, loop
        cl.attach(ledger, loop, divided)
        if divided > 0 and cl.queue.last() is None:
            log.info("DLedger entries start at %d (no old CommitLog segments)", divided)
        self.reput = DLedgerReputService(cl, ledger, self._dispatchers(), delay_levels=self.delay_levels)
        self.leader_table = lead = LeaderTable(self, ledger)  # follows the log's role from here on
        self.reput.after_step = lead.check
        start = self._resume_dispatch(divided, rebuilt_queues)
        # the old CommitLog's recovery set these before the entries were readable
        self.consume_queues.correct_min_offsets(max(0, cl.min_offset))
        self.reput.reput_from_offset = start
        dispatched = self.reput.do_reput()
        log.info(
            "DLedger CommitLog from %d, committed up to %d: %d records dispatched from %d",
            divided,
            cl.max_offset,
            dispatched,
            start,
        )
        if not lead.check():  # not a caught-up leader (a group of one is one): rebuilt all the same
            self.recover_topic_queue_table()

    def _replicated_logics_from(self) -> int | None:
        """Where the entries start (the old CommitLog's last segment's end, or the entry store's
        first data file): the old CommitLog's recovery leaves units and index entries from there
        on to :meth:`_resume_dispatch`. None when there are no entries yet."""
        last = self.commitlog.queue.last()
        if last is not None:
            return last.file_from_offset + last.file_size
        spec = self.ledger_spec(0)
        directory = os.path.join(spec.base_dir, f"dledger-{spec.self_id}", "data")
        if not os.path.isdir(directory) or not any(n.isdigit() for n in os.listdir(directory)):
            return None
        return _first_data_file(directory)

    def _resume_dispatch(self, divided: int, rebuilt_queues: bool) -> int:
        """Cut the ConsumeQueue units that may be incomplete or uncommitted and return where
        dispatch resumes: the checkpoint's dispatched position R (every record before it had its
        unit and index entries flushed before the checkpoint was written: ``flush_logics``), no
        further than the committed position. Units at or after R are cut (a queue's tail may
        have reached the disk without another's), index files holding an offset at or after the
        committed position are destroyed (their records are indexed again). Falls back to
        rebuilding the replicated part from ``divided`` when R is missing or does not fit this
        log (logged)."""
        cp = self.checkpoint
        committed = self.commitlog.max_offset
        saved = cp.dispatched_phy_offset if cp is not None else -1
        why = None
        start = min(saved, committed)
        if saved < 0:
            why = "the checkpoint holds no dispatched position"
        elif saved < divided:
            why = f"the checkpoint's dispatched position {saved} is below the entries' start {divided}"
        elif rebuilt_queues:
            why = "the old CommitLog's recovery rebuilt ConsumeQueues"
        elif start > divided and self.consume_queues.max_physic_offset() < divided:
            why = "no ConsumeQueue holds a unit of the entries (deleted?)"
        else:
            at = self._entry_at_or_after(start)
            if at is None and start < committed:
                why = f"no committed entry at or after the checkpoint's dispatched position {start}"
            elif at is not None and at != start:
                if at == self._first_entry_pos():
                    log.info("dispatched position %d is below the first retained entry %d", start, at)
                    start = at
                elif self._ends_entry_before(start, at):
                    # dispatch had stopped after a data file's last entry: the rest of that file
                    # is padding, and the next entry begins the next file
                    start = at
                else:
                    why = f"the checkpoint's dispatched position {start} is not where an entry starts"
        if why is None:
            self.consume_queues.truncate_dirty(start)
            if self.index_service is not None:
                # Index entries below the committed position name records that stay, and the
                # index skips records below its last one; cutting at ``start`` would destroy
                # whole index files and index their records again.
                self.index_service.discard_beyond(committed)
            why = self._last_unit_problem(max(divided, self._first_entry_pos() or 0))
        if why is not None:
            level = logging.WARNING if committed > divided else logging.INFO  # INFO: no entries yet
            log.log(level, "%s: rebuilding ConsumeQueues and index of the entries from %d", why, divided)
            start = divided
            self.consume_queues.truncate_dirty(divided)
            if self.index_service is not None:
                self.index_service.discard_beyond(divided)
            return divided
        index = self.index_service
        if index is not None and self._index_dir_missing:
            log.info("no index directory: indexing the entries again from %d", divided)
            start = divided  # the ConsumeQueues skip the units they hold
        elif index is not None and index.rebuild_from is not None:
            start = max(divided, min(start, index.rebuild_from))
        log.info("resuming dispatch at %d (checkpoint %d, committed %d)", start, saved, committed)
        return start

    def _last_unit_problem(self, readable_from: int) -> str | None:
        """Why the last unit of some queue disagrees with its record (a unit at or after
        ``readable_from``), or None: a ConsumeQueue left by another log is not resumed."""
        for cq in self.consume_queues:
            high = cq.max_offset_in_queue
            if high <= cq.min_offset_in_queue:
                continue
            unit = cq.get_unit(high - 1)
            if unit is None or unit.offset < readable_from:
                continue
            problem = self._unit_problem(cq, high - 1)
            if problem is not None:
                return f"the last unit of {cq.topic}-{cq.queue_id} disagrees with its record ({problem})"
        return None

    def _ends_entry_before(self, end: int, at: int) -> bool:
        """Whether the entry just before the one at position ``at`` ends at ``end`` (only
        padding lies between them: ``at`` begins a data file)."""
        entries = self._entry_store()
        if entries is None or entries.ledger_begin_index < 0:
            return False
        lo, hi = entries.ledger_begin_index, entries.ledger_end_index
        while lo < hi:  # the entry at ``at``: the first whose position is not below it
            mid = (lo + hi) // 2
            if entries.pos_at(mid) < at:
                lo = mid + 1
            else:
                hi = mid
        if lo <= entries.ledger_begin_index or entries.pos_at(lo) != at:
            return False
        return entries.entry_end(lo - 1) == end

    def _entry_at_or_after(self, pos: int) -> int | None:
        """The position of the first committed entry at or after ``pos`` (None: none)."""
        assert self.ledger is not None
        for at, _ in self.ledger.entries_from(pos):
            return at
        return None

    def _first_entry_pos(self) -> int | None:
        entries = self._entry_store()
        if entries is None or entries.ledger_begin_index < 0:
            return None
        return entries.pos_at(entries.ledger_begin_index)

    def _start_services(self) -> None:
        super()._start_services()
        assert self.reput is not None
        # every committed append wakes dispatch, whatever the flush type (no group commit here)
        self.commitlog.append_listener = self.reput.wakeup
        on_commit = getattr(self.ledger, "on_commit", None)
        if on_commit is not None:
            # so does every advance of the commit, a follower's too (called on the log's loop:
            # the current listener, which the broker replaces with its loop's coalesced wake-up)
            on_commit(self._commit_advanced)

    def dispatch_wake_interval_s(self) -> float:
        """The broker's interval between dispatch wake-ups from now on (its ``LoopWakeup`` asks
        after each wake-up): :attr:`DISPATCH_WAKE_INTERVAL_S` while this member leads, else
        :attr:`FOLLOWER_DISPATCH_WAKE_INTERVAL_S`."""
        if self.commitlog.lead_term >= 0:
            return self.DISPATCH_WAKE_INTERVAL_S
        return self.FOLLOWER_DISPATCH_WAKE_INTERVAL_S

    def _commit_advanced(self) -> None:
        listener = self.commitlog.append_listener
        if listener is not None and self.started:
            listener()

    def quorum_put(self) -> Callable[[Sequence[BrokerMessage]], Awaitable[PutMessageResult]] | None:
        """:meth:`put_messages_async` when a put waits for a quorum (a Raft group); None for a
        group of one, whose append never waits and is best made in the writer's own thread."""
        ledger = self.ledger
        if ledger is None or getattr(ledger, "append_completes_at_once", False):
            return None
        return self.put_messages_async

    async def put_messages_async(self, msgs: Sequence[BrokerMessage]) -> PutMessageResult:
        """:meth:`put_messages` for a caller on an event loop (the broker's sends), awaiting the
        appends' quorum with no worker thread (:meth:`DLedgerCommitLog.put_messages_async`).
        No back-pressure wait: a caller that finds dispatch far behind uses :meth:`put_messages`
        in a thread instead."""
        began = next(self._put_samples)  # the latency sample: 0 unless this put is timed
        try:
            r = await self.commitlog.put_messages_async([self._inner(m, None) for m in msgs])
        except Exception:
            self.stats.put_failures += 1
            raise
        self.stats.put_count += r.msg_num
        self.stats.put_bytes += r.size
        if began:
            self._put_timed(began)
        return r

    def quorum_put_then(self) -> PutThen | None:
        """:meth:`put_messages_then` when a put waits for a quorum (see :meth:`quorum_put`)."""
        return None if self.quorum_put() is None else self.put_messages_then

    def put_messages_then(
        self,
        msgs: Sequence[BrokerMessage],
        done: PutCallback,
        caller: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        """:meth:`put_messages_async` for a caller that wants no task or coroutine per put (the
        broker's sends answered from ``data_received``): the same batches and outcomes, handed
        to ``done(result or exception)`` on the caller's loop
        (:meth:`DLedgerCommitLog.put_messages_then`; ``caller``: that loop, the running one,
        when the caller has it at hand, else None). Errors found before anything is appended
        raise here."""
        began = next(self._put_samples)  # the latency sample: 0 unless this put is timed
        stats = self.stats
        if not began and len(msgs) == 1:  # the usual send: the put counts itself, no closure
            try:
                self.commitlog.put_one_then(self._inner(msgs[0], None), done, stats, caller)
            except Exception:
                stats.put_failures += 1
                raise
            return
        timed = self._put_timed

        def finished(outcome: PutMessageResult | Exception) -> None:
            if isinstance(outcome, Exception):
                stats.put_failures += 1
            else:
                stats.put_count += outcome[6]  # msg_num
                stats.put_bytes += outcome[2]  # size
                if began:
                    timed(began)
            done(outcome)

        inner = self._inner
        try:
            self.commitlog.put_messages_then(
                [inner(msgs[0], None)] if len(msgs) == 1 else [inner(m, None) for m in msgs],
                finished,
                caller,
            )
        except Exception:
            stats.put_failures += 1
            raise

    def fail_waiting_puts(self, reason: str) -> int:
        """Fail every put still awaiting its quorum now, as if its time were up (SYSTEM_ERROR,
        outcome unknown: the entry may still commit, a retry may store it twice); on the loop
        the puts were made from (a broker's). Returns how many were failed."""
        expiry = self.commitlog._expiry
        return 0 if expiry is None else expiry.expire_all(reason)

    def _collect_queue_units(self, keys: Collection[Key], end: int) -> dict[Key, list[Unit]]:
        """A rebuild's units (``rebuild_queues``): those of the old CommitLog's segments below
        ``divided_offset``, then those of the committed entries from there up to ``end`` (walked
        as dispatch walks them). The plain walk reads segments only, and a store that was always
        in DLedger mode has none: a queue rebuilt from it came out empty, and a master answered
        its next pulls with PULL_OFFSET_MOVED to offset 0 (issue 17)."""
        cl = self.commitlog
        divided = cl.divided_offset
        found = super()._collect_queue_units(keys, min(end, divided))
        ledger = self.ledger
        if ledger is None or end <= divided:
            return found
        take, more = unit_collector(keys)
        walker = DLedgerReputService(cl, ledger, [take], delay_levels=self.delay_levels)
        walker._limit = lambda: end  # where dispatch stands: it goes on from there afterwards
        walker.reput_from_offset = divided
        walker.do_reput()
        for key, units in more.items():
            found.setdefault(key, []).extend(units)
        return found

    def _consistent_units(self, units: list[Unit]) -> tuple[list[Unit], int]:
        """A rebuild keeps the units of the entries whose queue offsets increase (a repeated or
        smaller one is dropped), each at its own queue offset; the old segments' units go through
        :func:`~rocketq.store.cq_repair.dedupe`. Entries are checked whole (CRC) when written and
        recovered, so their QUEUEOFFSET is not suspect; a queue offset no entry holds (given out
        by a leader and never appended) is a hole, which ``dedupe`` would take for a lost record
        that needs room between its neighbours and drop an intact unit for."""
        divided = self.commitlog.divided_offset
        cut = next((i for i, u in enumerate(units) if u[0] >= divided), len(units))
        kept, dropped = dedupe(units[:cut])
        last = kept[-1][3] if kept else -1
        for unit in units[cut:]:
            if unit[3] > last:
                kept.append(unit)
                last = unit[3]
            else:
                dropped += 1
        return kept, dropped

    def recover_topic_queue_table(self) -> None:
        """Each queue's next offset from its ConsumeQueue (RocketMQ's ``recoverTopicQueueTable``;
        :func:`~rocketq.store.dledger_lead.queue_table_nexts`: past its last unit and past the
        queue offset its last message carries), as at open. A member that becomes leader has
        its table rebuilt by the store itself once caught up, and refuses puts until then
        (:mod:`rocketq.store.dledger_lead`): nobody needs to call this for that."""
        nexts = queue_table_nexts(self)
        cl = self.commitlog
        with cl._put_lock:
            cl.topic_queue_table.replace(nexts)

    def leads_caught_up(self) -> bool:
        """Whether this member leads its log's term with the queue-offset table rebuilt for that
        term: its puts are numbered after every committed message. A leader refuses puts
        (ServiceNotAvailable, "catching up") until then; a follower's log refuses them anyway."""
        cl = self.commitlog
        return cl.lead_term >= 0 and cl.lead_term == cl.table_term

    @property
    def queue_table_term(self) -> int:
        """The leader term the queue-offset table was rebuilt for (-1: none yet)."""
        return self.commitlog.table_term

    def next_queue_offset(self, topic: str, queue_id: int) -> int:
        """The queue offset the next message of the queue gets here (0 for a queue with none):
        on a leader past every message appended, committed or not, and every one its queues
        held when the table was rebuilt for its term (:mod:`rocketq.store.dledger_lead`)."""
        return self.commitlog.topic_queue_table.get((topic, queue_id), 0)

    def _pad_old_commitlog(self) -> int:
        """Fill the rest of the last old segment with a BLANK; its end is ``divided_offset``
        (0 without old segments)."""
        q = self.commitlog.queue
        last = q.last()
        if last is None:
            return 0
        if not last.is_full():
            left = last.file_size - last.wrote_position
            if left >= _BLANK.size:
                _BLANK.pack_into(last.write_target, last.wrote_position, left, rec.BLANK_MAGIC_CODE)
            last.wrote_position = last.file_size
            if last.write_buffer is None:
                last.committed_position = last.file_size
            while not q.flush(0):
                pass
            log.info("old CommitLog segment %d padded; DLedger entries follow it", last.file_from_offset)
        return last.file_from_offset + last.file_size

    def _abandon(self) -> None:
        super()._abandon()
        ledger, loop = self.ledger, self.ledger_loop
        if ledger is not None and loop is not None:
            try:
                loop.run(ledger.stop(), 10)
            except Exception:
                log.exception("stopping the replicated log failed")
        if loop is not None:
            loop.stop()

    def runtime_info(self) -> dict[str, str]:
        info = super().runtime_info()
        ledger = self.ledger
        if ledger is not None:
            st = ledger.state
            info["dledgerRole"] = st.role.value
            info["dledgerTerm"] = str(st.term)
            info["dledgerSelfId"] = st.self_id
            info["dledgerLeaderId"] = st.leader_id or ""
            info["dledgerCommittedPos"] = str(ledger.committed_pos)
            info["dividedCommitlogOffset"] = str(self.commitlog.divided_offset)
            entries = self._entry_store()
            if entries is not None:
                info["dledgerBeginIndex"] = str(entries.ledger_begin_index)
        if isinstance(self.retention, EntryRetentionService):
            info["dledgerDeletedDataFiles"] = str(self.retention.deleted_data_files)
        return info

    # -- retention of the entry store's data files (rocketq.store.dledger_retention) -------------
    def retention_service(
        self,
        *,
        usage: Callable[[], float] | None = None,
        now: Callable[[], _dt.datetime] | None = None,
        config: StoreConfig | None = None,
    ) -> RetentionService:
        """The plain retention service, which also deletes the entry store's data files
        (:class:`EntryRetentionService`)."""
        return EntryRetentionService(
            config or self.config,
            data_files=self._entry_data_files,
            holds=self._entry_holds,
            delete_entries=self._delete_entries_before,
            old_segments_left=lambda: self.commitlog.queue.first() is not None,
            segments=self._segments,
            min_needed=self.min_needed_phy_offset,
            delete_segments=self._delete_segments,
            delete_logics=self._delete_expired_logics,
            set_disk_full=self._set_disk_full,
            unconsumed_below=self.unconsumed_below,
            usage=usage,
            now=now or _dt.datetime.now,
        )

    def _entry_store(self) -> EntryStore | None:
        ledger = self.ledger
        try:
            store = getattr(ledger, "store", None)
        except RuntimeError:  # a Raft member not started (or stopped before it started)
            return None
        return store if isinstance(store, EntryStore) else None

    def _segments(self) -> list[Segment]:
        """The old CommitLog segments; the entry store's data follow them, so the last old one
        may go as well (a stand-in for the entries ends the list)."""
        segs = super()._segments()
        entries = self._entry_store()
        if segs and entries is not None and entries.ledger_end_index >= 0:
            start = self.commitlog.divided_offset
            segs.append(Segment(start, start + 1, int(_dt.datetime.now().timestamp() * 1000)))
        return segs

    def _delete_segments(self, count: int) -> int:
        return self.commitlog.queue.delete_leading(count, keep_last=False)

    def _entry_data_files(self) -> list[DataFile]:
        entries = self._entry_store()
        if entries is None:
            return []
        return [
            DataFile(start, index, data_file_mtime_ms(path))
            for start, index, path in entries.first_entry_indexes()
        ]

    def _entry_holds(self) -> Holds:
        entries = self._entry_store()
        reput = self.reput
        if entries is None or reput is None:
            return Holds(-1, -1)
        matches = getattr(self.ledger, "follower_match_indexes", None)
        members = matches() if matches is not None else None
        return Holds(entries.committed_index, reput.reput_from_offset, members or {})

    def _delete_entries_before(self, limit: int) -> int:
        """Delete the data files wholly below entry ``limit`` (the dispatch lock held: dispatch
        never reads a file that goes), then move the CommitLog's minimum offset to the first
        data file left."""
        entries = self._entry_store()
        reput = self.reput
        if entries is None or reput is None:
            return 0
        with reput._dispatch_lock:  # one dispatcher or deleter at a time
            n = entries.delete_before(limit)
            first = entries.data.first()
            if first is not None:
                self.commitlog.retained_from = first.file_from_offset
        return n


def _first_data_file(directory: str) -> int:
    """The start offset of the first data file of an entry store (0 when there is none)."""
    try:
        names = [n for n in os.listdir(directory) if n.isdigit()]
    except FileNotFoundError:
        return 0
    return min((int(n) for n in names), default=0)
