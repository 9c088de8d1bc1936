"""Retention and disk watermarks (RocketMQ CleanCommitLogService / CleanConsumeQueueService).

Every ``clean_resource_interval_ms`` the service measures how full the CommitLog's disk is and
deletes what it may::

    usage > disk_space_warning_level_ratio_percent (90)   refuse writes: "disk full" (DiskFull),
                                                          and delete as below, forcibly
    usage > disk_space_clean_forcibly_ratio_percent (85)  delete segments even if not expired
    usage > disk_max_used_space_ratio_percent (75)        delete expired segments now, not only
                                                          at the configured hour
    otherwise                                             delete segments older than
                                                          file_reserved_time_hours at the hours
                                                          listed in delete_when ("04;05")

The last segment is never deleted. At most 10 segments go per run. Writes are accepted again as
soon as usage drops below the warning level (no restart needed, unlike RocketMQ #2398).
After CommitLog segments go, ConsumeQueue and index files wholly below the new CommitLog minimum
offset are deleted and every queue's minimum offset is corrected.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

from rocketq.config import StoreConfig
from rocketq.store.service import ServiceThread

log = logging.getLogger(__name__)


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


class RetentionService(ServiceThread):
    """Every ``interval_ms`` (first after one interval): the disk-full flag and expired files."""

    name = "RetentionService"
    wait_first = True
    error_backoff_s = 0.0  # the next run is an interval away anyway

    def __init__(
        self,
        config: StoreConfig,
        *,
        delete_commitlog: Callable[[int, bool], int],
        delete_logics: Callable[[], int],
        set_disk_full: Callable[[bool, str], None],
        usage: Callable[[], float] | None = None,
        interval_ms: int = 10_000,
        now: Callable[[], _dt.datetime] = _dt.datetime.now,
    ) -> None:
        super().__init__(interval_ms / 1000)
        self.config = config
        self._delete_commitlog = delete_commitlog
        self._delete_logics = delete_logics
        self._set_disk_full = set_disk_full
        self._usage = usage or (lambda: disk_usage_ratio(config.commit_log_dir))
        self._now = now
        self.disk_full = False
        self.last_decision: CleanDecision | None = None
        self.deleted_segments = 0

    def on_error(self, exc: Exception) -> None:
        self.error = exc
        log.exception("retention run failed")

    def step(self) -> None:
        self.run_once()

    def run_once(self) -> CleanDecision:
        usage = self._usage()
        d = decide(self.config, usage, is_delete_hour(self.config.delete_when, self._now()))
        self.last_decision = d
        if d.disk_full != self.disk_full:
            self.disk_full = d.disk_full
            limit = self.config.disk_space_warning_level_ratio_percent
            reason = f"disk full: {usage:.0%} used, limit {limit}%" if d.disk_full else ""
            if d.disk_full:
                log.error("refusing writes: %s", reason)
            else:
                log.info("disk usage %.0f%% is below %d%% again; accepting writes", usage * 100, limit)
            self._set_disk_full(d.disk_full, reason)
        if d.delete:
            n = self._delete_commitlog(self.config.file_reserved_time_hours * 3_600_000, d.force)
            self.deleted_segments += n
            if n:
                log.info("deleted %d CommitLog segments (disk %.0f%% used)", n, usage * 100)
                self._delete_logics()
        return d
