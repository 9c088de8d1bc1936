"""Dispatch of a DLedger CommitLog: ReputMessageService over committed entries only.

Every node (leader and followers) builds its ConsumeQueues and index from the entries its log
has committed: one CommitLog record per NORMAL entry's body, at CommitLog offset entry pos + 48;
NOOP entries carry no record but are walked past, so dispatch reaches the committed end (a new
leader waits for exactly that). ``reput_from_offset`` is an entry position: every entry before
it is dispatched.

With the Raft driver a window is one run of the data file's bytes (``committed_run``: at most
_ENTRIES_PER_WINDOW entries and about _WINDOW_BYTES, within one data file, up to the limit),
scanned in one compiled pass over entry headers and records (``parse_entry_run``; the bodies
of entries this process wrote are not checked against their CRCs again). A run the
scan does not take whole, and a group of one, go entry by entry (``entries_from``), the bodies
of a window parsed together (``parse_entries``), else one by one. Dispatch is woken by local puts
and by every advance of the commit (the log's ``on_commit``, a follower's too); a log that
cannot say when its commit advances is looked at every FOLLOWER_POLL_S. After each step of its
thread, ``after_step`` (the store's new-leader check, :mod:`rocketq.store.dledger_lead`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from rocketq.ha.entry_format import BODY_OFFSET
from rocketq.ha.replicated_log import ReplicatedLog
from rocketq.protocol import record as rec
from rocketq.store.dispatch import Dispatcher, ReputMessageService
from rocketq.store.dledger_commitlog import DLedgerCommitLog
from rocketq.store.dledger_window import PendingRequests, parse_entries, parse_entry_run
from rocketq.store.record_scan import DispatchBatch, parse_window

log = logging.getLogger(__name__)
#: entries whose requests are dispatched together (one parse of their records, one dispatcher call)
_ENTRIES_PER_WINDOW = 1024
#: and at most about this many bytes of records
_WINDOW_BYTES = 4 << 20
#: how often dispatch looks for newly committed entries when no local append woke it, for a log
#: that cannot say when its commit advances; a log that can (``on_commit``: the Raft driver)
#: wakes dispatch itself, and the look is then a fallback only (COMMIT_WAKE_FALLBACK_S)
FOLLOWER_POLL_S = 0.1
COMMIT_WAKE_FALLBACK_S = 1.0
#: ``(pos, limit, max_entries, max_bytes) -> (first index, its pos, entry bytes) | None``:
#: :meth:`rocketq.ha.driver.RaftGroupLog.committed_run`
CommittedRuns = Callable[[int, int, int, int], "tuple[int, int, bytes] | None"]


class DLedgerReputService(ReputMessageService):
    """ReputMessageService over committed entries (``reput_from_offset`` is an entry position:
    every entry before it is dispatched)."""

    def __init__(
        self,
        commitlog: DLedgerCommitLog,
        ledger: ReplicatedLog,
        dispatchers: list[Dispatcher],
        *,
        delay_levels: dict[int, int] | None,
    ) -> None:
        super().__init__(
            commitlog,
            dispatchers,
            limit=lambda: commitlog.max_offset,
            roll_next_file=commitlog.roll_next_file,
            min_offset=lambda: commitlog.divided_offset,
            delay_levels=delay_levels,
            # entries a leader commits on a follower arrive without a local put to wake it: the
            # log's commit callback wakes it where there is one, else it looks now and then
            idle_wait_s=COMMIT_WAKE_FALLBACK_S if hasattr(ledger, "on_commit") else FOLLOWER_POLL_S,
        )
        self._ledger = ledger
        #: the log's runs of committed entries in a data file's bytes (the Raft driver has them),
        #: for :meth:`_dispatch_run`; None (a group of one): every window goes entry by entry
        self._runs: CommittedRuns | None = getattr(ledger, "committed_run", None)
        #: called in the dispatch thread after each of its steps, whatever it dispatched: a new
        #: leader's table is rebuilt there once dispatch reached the committed end
        #: (:meth:`rocketq.store.dledger_lead.LeaderTable.check`)
        self.after_step: Callable[[], object] | None = None

    def step(self) -> None:
        super().step()
        after = self.after_step
        if after is not None:
            after()

    def do_reput(self) -> int:
        count = 0
        limit = self._limit()
        self.reput_from_offset = max(self.reput_from_offset, self._min_offset())
        if self._runs is not None:
            while self.reput_from_offset < limit and not self._stopped_hard:
                done = self._dispatch_run(self._runs, limit)
                if done is None:
                    break  # not a usual run: the entries one by one from here
                count += done
        if self.reput_from_offset < limit:
            bodies: list[bytes] = []
            offsets: list[int] = []
            entries = size = 0
            end = self.reput_from_offset
            for pos, body in self._ledger.entries_from(self.reput_from_offset):
                nxt = pos + BODY_OFFSET + len(body)
                if self._stopped_hard or nxt > limit:
                    break
                if body:
                    bodies.append(body)
                    offsets.append(pos + BODY_OFFSET)
                    size += len(body)
                end = nxt
                entries += 1
                if entries >= _ENTRIES_PER_WINDOW or size >= _WINDOW_BYTES:
                    count += self._dispatch_entries(bodies, offsets)
                    bodies, offsets, entries, size = [], [], 0, 0
                    self.reput_from_offset = end
                    self._notify_progress()
            count += self._dispatch_entries(bodies, offsets)
            self.reput_from_offset = end
        self.dispatched_records += count
        self._notify_progress()
        return count

    def _dispatch_run(self, runs: CommittedRuns, limit: int) -> int | None:
        """Dispatch the next window of committed entries from one run of their bytes, in one
        scan (``parse_entry_run``); None, with nothing dispatched, when there is no such run or
        it holds entries the scan does not take."""
        run = runs(self.reput_from_offset, limit, _ENTRIES_PER_WINDOW, _WINDOW_BYTES)
        if run is None:
            return None
        index, pos, data = run
        reqs = parse_entry_run(data, pos, index, self._delay_levels, self._written_from())
        if reqs is None:
            return None
        count = self._dispatch(reqs)
        self.reput_from_offset = pos + len(data)
        self._notify_progress()
        return count

    def _written_from(self) -> int | None:
        """The entry store's ``written_from`` (entries this process wrote, their CRCs checked as
        they were written), or None: the scan checks every entry's CRC."""
        try:
            entries = getattr(self._ledger, "store", None)  # the Raft driver's EntryStore
        except RuntimeError:  # a log not started (or stopped): check them all
            return None
        written_from = getattr(entries, "written_from", None)
        return written_from if isinstance(written_from, int) else None

    def _dispatch_entries(self, bodies: list[bytes], offsets: list[int]) -> int:
        """Dispatch the records of a window of entries: parsed together, else one by one."""
        if len(bodies) > 1:
            reqs = parse_entries(bodies, offsets, self._delay_levels)
            if reqs is not None:
                return self._dispatch(reqs)
        count = 0
        pending = PendingRequests()
        for body, offset in zip(bodies, offsets, strict=True):
            reqs, used, stop = parse_window(body, offset, self._delay_levels)
            if stop is rec.RecordKind.CORRUPT or used != len(body):
                log.error("[BUG] entry at %d holds no whole CommitLog record; skipped", offset - BODY_OFFSET)
            if isinstance(reqs, DispatchBatch):
                count += self._dispatch(pending.take()) + self._dispatch(reqs)
            else:
                pending.add(reqs)
        return count + self._dispatch(pending.take())


__all__ = ["COMMIT_WAKE_FALLBACK_S", "FOLLOWER_POLL_S", "DLedgerReputService"]
