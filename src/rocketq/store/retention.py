"""Retention and disk watermarks (RocketMQ CleanCommitLogService / CleanConsumeQueueService).

Every ``clean_resource_interval_ms`` the service measures how full the CommitLog's disk is and
deletes what it may. Unlike RocketMQ, disk pressure never deletes messages a consumer still
needs unless the operator asked for it (``force_clean_unconsumed``): the broker refuses writes
instead, and accepts them again by itself once space is back::

    usage > disk_space_warning_level_ratio_percent (90)   refuse writes: "disk full" (DiskFull,
                                                          SERVICE_NOT_AVAILABLE), after deleting
                                                          what may be deleted as below
    usage > disk_space_clean_forcibly_ratio_percent (85)  also delete consumed segments that are
                                                          not expired; with force_clean_unconsumed
                                                          any segment (WARNING with counts)
    usage > disk_max_used_space_ratio_percent (75)        delete expired segments now, not only
                                                          at the configured hour
    otherwise                                             delete segments older than
                                                          file_reserved_time_hours at the hours
                                                          listed in delete_when ("04;05")

A segment is *expired* when it was last written more than ``file_reserved_time_hours`` ago, and
*consumed* when it ends at or below the store's "minimum needed offset": the smallest CommitLog
offset of a message some queue still needs. For a queue with committed consumer offsets (the
broker reports them; the store adds its own delay-level and timer progress) that is the message
at the smallest committed offset; a queue no group consumes needs all it holds (it goes only by
retention time). :func:`plan_deletion` is the pure rule; the service measures, plans, deletes,
logs and flips the disk-full flag.

The last segment is never deleted. At most 10 segments go per run; the disk is measured again
after deleting. After CommitLog segments go, ConsumeQueue and index files wholly below the new
CommitLog minimum offset are deleted and every queue's minimum offset is corrected.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from rocketq.config import StoreConfig
from rocketq.store.service import ServiceThread

log = logging.getLogger(__name__)

#: "Nothing needed": no queue holds a message a consumer has not consumed.
NOTHING_NEEDED = 1 << 63


def disk_usage_ratio(path: str) -> float:
    """Used fraction of the filesystem holding ``path`` (``(total - free) / total``)."""
    st = os.statvfs(path)
    total = st.f_blocks * st.f_frsize
    if total <= 0:
        return -1.0
    return (total - st.f_bfree * st.f_frsize) / total


def is_delete_hour(delete_when: str, now: _dt.datetime | None = None) -> bool:
    hour = (now or _dt.datetime.now()).hour
    for raw in delete_when.split(";"):
        item = raw.strip()
        if item.isdigit() and int(item) == hour:
            return True
    return False


@dataclass(frozen=True, slots=True)
class CleanDecision:
    """What a clean run may do at this disk usage and hour.

    ``delete``: expired segments may go; ``force``: above the forcibly ratio, consumed segments
    may go too (and unconsumed ones with ``force_clean_unconsumed``); ``disk_full``: writes
    are refused."""

    delete: bool
    force: bool
    disk_full: bool
    usage: float


def decide(config: StoreConfig, usage: float, delete_hour: bool) -> CleanDecision:
    """Pure rule: what a clean run does at this disk usage and hour."""
    warn = config.disk_space_warning_level_ratio_percent / 100
    force = config.disk_space_clean_forcibly_ratio_percent / 100
    early = config.disk_max_used_space_ratio_percent / 100
    disk_full = usage > warn
    forcibly = usage > force
    space_to_delete = usage < 0 or usage > early
    return CleanDecision(delete_hour or space_to_delete or forcibly, forcibly, disk_full, usage)


@dataclass(frozen=True, slots=True)
class Segment:
    """One CommitLog segment as retention sees it: ``[start, end)`` and its last write time."""

    start: int
    end: int
    mtime_ms: int


class DeleteReason(StrEnum):
    EXPIRED = "expired"  # older than file_reserved_time_hours
    CONSUMED = "consumed"  # every queue's consumers are past it (disk pressure)
    FORCED = "forced"  # holds messages not yet consumed (force_clean_unconsumed)


def plan_deletion(
    segments: Sequence[Segment],
    decision: CleanDecision,
    *,
    now_ms: int,
    reserved_ms: int,
    min_needed: int,
    force_unconsumed: bool,
    max_batch: int = 10,
) -> list[tuple[Segment, DeleteReason]]:
    """Pure rule: the leading segments (oldest first, never the last one) a run deletes, each
    with its reason. Stops at the first segment that may not go, so the CommitLog stays a
    contiguous range."""
    out: list[tuple[Segment, DeleteReason]] = []
    for seg in segments[:-1]:
        if len(out) >= max_batch:
            break
        if decision.delete and now_ms >= seg.mtime_ms + reserved_ms:
            out.append((seg, DeleteReason.EXPIRED))
        elif decision.force and seg.end <= min_needed:
            out.append((seg, DeleteReason.CONSUMED))
        elif decision.force and force_unconsumed:
            out.append((seg, DeleteReason.FORCED))
        else:
            break
    return out


@dataclass(frozen=True, slots=True)
class Unconsumed:
    """Messages below a CommitLog offset that some queue had not consumed (what forced cleaning
    loses)."""

    messages: int
    queues: int


class RetentionService(ServiceThread):
    """Every ``interval_ms`` (first after one interval): delete what may go, set the disk-full flag."""

    name = "RetentionService"
    wait_first = True
    error_backoff_s = 0.0  # the next run is an interval away anyway

    def __init__(
        self,
        config: StoreConfig,
        *,
        segments: Callable[[], list[Segment]],
        min_needed: Callable[[], int],
        delete_segments: Callable[[int], int],
        delete_logics: Callable[[], int],
        set_disk_full: Callable[[bool, str], None],
        unconsumed_below: Callable[[int], Unconsumed] | None = None,
        usage: Callable[[], float] | None = None,
        interval_ms: int | None = None,
        now: Callable[[], _dt.datetime] = _dt.datetime.now,
    ) -> None:
        interval = interval_ms if interval_ms is not None else config.clean_resource_interval_ms
        super().__init__(interval / 1000)
        self.config = config
        self._segments = segments
        self._min_needed = min_needed
        self._delete_segments = delete_segments
        self._delete_logics = delete_logics
        self._set_disk_full = set_disk_full
        self._unconsumed_below = unconsumed_below
        self._usage = usage or (lambda: disk_usage_ratio(config.commit_log_dir))
        self._now = now
        self.disk_full = False
        self._run_lock = threading.Lock()
        self._manual = False
        self.last_decision: CleanDecision | None = None
        self.deleted_segments = 0
        self.forced_segments = 0
        self.forced_messages = 0

    def on_error(self, exc: Exception) -> None:
        self.error = exc
        log.exception("retention run failed")

    def step(self) -> None:
        self.run_once()

    def _decide(self) -> CleanDecision:
        hour = self._manual or is_delete_hour(self.config.delete_when, self._now())
        return decide(self.config, self._usage(), hour)

    def run_now(self) -> CleanDecision:
        """One run at once, as if at a ``delete_when`` hour (RocketMQ's
        ``executeDeleteFilesManually``, the DELETE_EXPIRED_COMMITLOG request): expired files go
        now; the disk ratios and what keeps files apply as in a periodic run."""
        with self._run_lock:
            self._manual = True
            try:
                return self._clean_run()
            finally:
                self._manual = False

    def run_once(self) -> CleanDecision:
        with self._run_lock:  # the periodic runs and run_now take turns
            return self._clean_run()

    def _clean_run(self) -> CleanDecision:
        d = self._decide()
        blocked = ""
        if d.delete or d.force:
            deleted, blocked = self._clean(d)
            if deleted:
                d = self._decide()  # measure again after deleting
        self.last_decision = d
        if d.disk_full != self.disk_full:
            self.disk_full = d.disk_full
            limit = self.config.disk_space_warning_level_ratio_percent
            if d.disk_full:
                reason = f"disk full: {d.usage:.0%} used, limit {limit}%"
                if blocked:
                    reason += f"; {blocked}"
                log.error("refusing writes: %s", reason)
            else:
                reason = ""
                log.warning("disk usage %.0f%% is below %d%% again; accepting writes", d.usage * 100, limit)
            self._set_disk_full(d.disk_full, reason)
        return d

    def _clean(self, d: CleanDecision) -> tuple[int, str]:
        """Delete what ``d`` allows: (segments deleted, why older segments had to stay or "")."""
        segs = self._segments()
        if len(segs) < 2:
            return 0, ""
        min_needed = self._min_needed() if d.force else NOTHING_NEEDED
        plan = plan_deletion(
            segs,
            d,
            now_ms=int(self._now().timestamp() * 1000),
            reserved_ms=self.config.file_reserved_time_hours * 3_600_000,
            min_needed=min_needed,
            force_unconsumed=self.config.force_clean_unconsumed,
        )
        kept = segs[len(plan) : -1]
        blocked = ""
        if d.force and kept:
            blocked = (
                f"{len(kept)} older segments hold messages not yet consumed "
                "(deleted only past file_reserved_time_hours, or with force_clean_unconsumed)"
            )
        if not plan:
            return 0, blocked
        end = plan[-1][0].end
        forced = [s for s, r in plan if r is DeleteReason.FORCED]
        lost = Unconsumed(0, 0)
        if forced and self._unconsumed_below is not None:
            lost = self._unconsumed_below(end)
        n = self._delete_segments(len(plan))
        self.deleted_segments += n
        if not n:
            return 0, blocked
        deleted_bytes = sum(s.end - s.start for s, _ in plan[:n])
        counts = {r: sum(1 for _, rr in plan[:n] if rr is r) for r in DeleteReason}
        if forced:
            self.forced_segments += len(forced)
            self.forced_messages += lost.messages
            log.warning(
                "forced cleaning (force_clean_unconsumed) at %.0f%% disk use: deleted %d CommitLog "
                "segments (%d B, up to offset %d; %d forced) holding %d messages not yet consumed "
                "in %d queues",
                d.usage * 100,
                n,
                deleted_bytes,
                end,
                counts[DeleteReason.FORCED],
                lost.messages,
                lost.queues,
            )
        else:
            log.info(
                "deleted %d CommitLog segments (%d B, up to offset %d; %d expired, %d consumed) "
                "at %.0f%% disk use",
                n,
                deleted_bytes,
                end,
                counts[DeleteReason.EXPIRED],
                counts[DeleteReason.CONSUMED],
                d.usage * 100,
            )
        self._delete_logics()
        return n, blocked
