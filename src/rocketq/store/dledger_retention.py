"""Retention in DLedger mode: which data files of the entry store may go.

In DLedger mode the CommitLog's records are the bodies of the replicated log's entries, kept in
the entry store's data files (``dledger-<selfId>/data``). The plain store's rule
(:func:`rocketq.store.retention.plan_deletion`: file reserved time, delete hour, disk ratios,
consumed or forced deletion under pressure) decides which files *would* go; this module adds what
a replicated log needs on top, so that deleting loses nothing a member or a consumer queue still
needs to build. A leading data file (never the last) may go only when every entry in it is:

* **committed** (at or below the committed index);
* **dispatched on this member** (the ConsumeQueues and the index were built from it: the
  dispatch position is at or past the next file's start);
* **held by every follower** (leader only: below the lowest match index the leader knows;
  a follower that is down keeps its last known position, so it holds files back too).

The first two never yield. A follower that holds files back is named in a WARNING with how far
behind it is; above the forcibly ratio its files go only with
``d_leger_retention_ignore_lagging_member`` (``dLegerRetentionIgnoreLaggingMember``), and that
member must then be rebuilt from a copy of another member's data directory (docs/replication.md).
Without the switch the broker refuses writes once the disk passes the warning ratio, as the
plain store does (``DiskFull``).

A follower knows no other member's position: it deletes by its own committed and dispatched
positions and the time/pressure rule alone.

:func:`plan_entry_deletion` is the pure rule; :class:`EntryRetentionService` runs it with the
plain store's service (old CommitLog segments of an adopted store go first, as before).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rocketq.config import StoreConfig
from rocketq.store.retention import (
    NOTHING_NEEDED,
    CleanDecision,
    DeleteReason,
    RetentionService,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DataFile:
    """One data file of the entry store as retention sees it: where it starts, the index of its
    first entry and its last write time."""

    start: int
    first_index: int
    mtime_ms: int


@dataclass(frozen=True, slots=True)
class Holds:
    """What keeps entries on this member.

    ``committed``: the committed index; ``dispatched_pos``: the dispatch position (every entry
    before it is in the ConsumeQueues and the index); ``members``: on the leader, each
    follower's match index (the entries up to it are on that follower), empty elsewhere."""

    committed: int
    dispatched_pos: int
    members: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class HeldBack:
    """A follower whose position kept data files that would otherwise go (or that went anyway
    with the switch): its match index, how many data files it keeps and how many committed
    entries it lacks."""

    member: str
    match_index: int
    files: int
    entries_behind: int


@dataclass(frozen=True, slots=True)
class EntryPlan:
    """What a run deletes: the leading data files with their reasons, ``limit``, the index
    :meth:`~rocketq.ha.entry_store.EntryStore.delete_before` is called with (the first entry
    kept; -1 when nothing goes), the followers holding files back (``held_back``) or whose
    entries go although they lack them (``ignored``), and why files stayed (``blocked``)."""

    delete: tuple[tuple[DataFile, DeleteReason], ...]
    limit: int
    held_back: tuple[HeldBack, ...] = ()
    ignored: tuple[HeldBack, ...] = ()
    blocked: str = ""


def plan_entry_deletion(
    files: Sequence[DataFile],
    decision: CleanDecision,
    holds: Holds,
    *,
    now_ms: int,
    reserved_ms: int,
    min_needed: int = NOTHING_NEEDED,
    force_unconsumed: bool = False,
    ignore_lagging_member: bool = False,
    max_batch: int = 10,
) -> EntryPlan:
    """Pure rule: the leading data files (oldest first, never the last) a run deletes.

    A file's reason is the plain rule's (``EXPIRED`` past the reserved time when ``decision``
    allows deleting; above the forcibly ratio ``CONSUMED`` when its records are all below
    ``min_needed``, ``FORCED`` with ``force_unconsumed``); it then goes only when all its entries
    are committed, dispatched and on every follower in ``holds.members`` (a follower's lack is
    overlooked only above the forcibly ratio with ``ignore_lagging_member``). Stops at the
    first file that stays, so the log stays contiguous."""
    out: list[tuple[DataFile, DeleteReason]] = []
    blocked = ""
    held: list[str] = []
    ignored: list[str] = []
    for i, f in enumerate(files[:-1]):
        if len(out) >= max_batch:
            break
        nxt = files[i + 1]
        if decision.delete and now_ms >= f.mtime_ms + reserved_ms:
            reason = DeleteReason.EXPIRED
        elif decision.force and nxt.start <= min_needed:
            reason = DeleteReason.CONSUMED
        elif decision.force and force_unconsumed:
            reason = DeleteReason.FORCED
        else:
            break
        # every entry of f is below nxt.first_index, every record below nxt.start
        if nxt.first_index > holds.committed + 1:
            blocked = (
                f"data file {f.start} holds entries not committed yet (committed index {holds.committed})"
            )
            break
        if nxt.start > holds.dispatched_pos:
            blocked = (
                f"data file {f.start} holds entries not dispatched yet on this member "
                f"(dispatched up to {holds.dispatched_pos})"
            )
            break
        lacking = sorted(m for m, match in holds.members.items() if nxt.first_index > match)
        if lacking:
            if not (decision.force and ignore_lagging_member):
                held = lacking
                blocked = (
                    f"data file {f.start} holds entries follower(s) {', '.join(lacking)} have not got; "
                    "kept until they have (dLegerRetentionIgnoreLaggingMember overrides above the "
                    "forcibly ratio)"
                )
                break
            ignored.extend(m for m in lacking if m not in ignored)
        out.append((f, reason))
    limit = files[len(out)].first_index if out else -1
    return EntryPlan(
        tuple(out),
        limit,
        tuple(_held_back(files, holds, m, len(out)) for m in held),
        tuple(_held_back(files, holds, m, 0) for m in ignored),
        blocked,
    )


def _held_back(files: Sequence[DataFile], holds: Holds, member: str, skip: int) -> HeldBack:
    match = holds.members[member]
    kept = sum(1 for i in range(skip, len(files) - 1) if files[i + 1].first_index > match)
    return HeldBack(member, match, kept, max(0, holds.committed - match))


class EntryRetentionService(RetentionService):
    """The plain retention service of a DLedger store: its old CommitLog segments (an adopted
    store's) as before, then the entry store's data files by :func:`plan_entry_deletion`.

    ``data_files`` lists the entry store's data files; ``holds`` what keeps entries;
    ``delete_entries(limit)`` deletes the data files wholly below entry ``limit`` and returns
    how many went; ``old_segments_left`` says whether old segments remain (the entry files go
    only after them, so the CommitLog stays one range)."""

    name = "DLedgerRetentionService"

    def __init__(
        self,
        config: StoreConfig,
        *,
        data_files: Callable[[], list[DataFile]],
        holds: Callable[[], Holds],
        delete_entries: Callable[[int], int],
        old_segments_left: Callable[[], bool],
        **kwargs: Any,
    ) -> None:
        super().__init__(config, **kwargs)
        self._data_files = data_files
        self._holds = holds
        self._delete_entries = delete_entries
        self._old_segments_left = old_segments_left
        self.deleted_data_files = 0
        self.last_plan: EntryPlan | None = None
        #: the followers whose lag was last reported (reported again when it changes)
        self._reported: dict[str, tuple[int, int]] = {}

    def _clean(self, d: CleanDecision) -> tuple[int, str]:
        n, blocked = super()._clean(d)
        if self._old_segments_left():
            return n, blocked
        m, why = self._clean_entries(d)
        return n + m, blocked or why

    def _clean_entries(self, d: CleanDecision) -> tuple[int, str]:
        files = self._data_files()
        if len(files) < 2:
            return 0, ""
        cfg = self.config
        min_needed = self._min_needed() if d.force else NOTHING_NEEDED
        plan = plan_entry_deletion(
            files,
            d,
            self._holds(),
            now_ms=int(self._now().timestamp() * 1000),
            reserved_ms=cfg.file_reserved_time_hours * 3_600_000,
            min_needed=min_needed,
            force_unconsumed=cfg.force_clean_unconsumed,
            ignore_lagging_member=cfg.d_leger_retention_ignore_lagging_member,
        )
        self.last_plan = plan
        self._report(plan)
        if not plan.delete:
            return 0, plan.blocked
        n = self._delete_entries(plan.limit)
        self.deleted_data_files += n
        if n:
            counts = {r: sum(1 for _, rr in plan.delete[:n] if rr is r) for r in DeleteReason}
            log.info(
                "deleted %d DLedger data files (entries below %d; %d expired, %d consumed, %d forced) "
                "at %.0f%% disk use",
                n,
                plan.limit,
                counts[DeleteReason.EXPIRED],
                counts[DeleteReason.CONSUMED],
                counts[DeleteReason.FORCED],
                d.usage * 100,
            )
            self._delete_logics()
        return n, plan.blocked

    def _report(self, plan: EntryPlan) -> None:
        now = {h.member: (h.match_index, h.files) for h in plan.held_back}
        for h in plan.held_back:
            if self._reported.get(h.member) != (h.match_index, h.files):
                log.warning(
                    "DLedger retention: follower %s holds back %d data files: it has entries up to "
                    "index %d, %d committed entries behind (down or lagging; its files are kept)",
                    h.member,
                    h.files,
                    h.match_index,
                    h.entries_behind,
                )
        self._reported = now
        for h in plan.ignored:
            log.warning(
                "DLedger retention (dLegerRetentionIgnoreLaggingMember): deleting entries follower "
                "%s has not got (it has up to index %d, %d entries behind); it must be rebuilt from "
                "a copy of another member's data directory",
                h.member,
                h.match_index,
                h.entries_behind,
            )


def data_file_mtime_ms(path: str) -> int:
    """The last write time of a data file in ms (0 when it is gone)."""
    try:
        return int(os.path.getmtime(path) * 1000)
    except FileNotFoundError:
        return 0
