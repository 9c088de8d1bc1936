"""Configuration: one frozen dataclass per subsystem.

Field names are RocketMQ's ``MessageStoreConfig`` / ``BrokerConfig`` keys in snake_case, with the
unit appended where RocketMQ's name has none (``flushIntervalCommitLog`` → ``flush_interval_commit_log_ms``,
``fileReservedTime`` → ``file_reserved_time_hours``). :func:`field_for_rocketmq_key` applies that rule,
so a RocketMQ ``broker.conf`` maps one to one. Defaults are RocketMQ's.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Any, TypeVar

from rocketq.errors import ConfigError

GiB = 1 << 30
MiB = 1 << 20

_UNIT_SUFFIXES = ("", "_ms", "_hours", "_percent", "_pages", "_bytes", "_count")


class FlushDiskType(StrEnum):
    SYNC_FLUSH = "SYNC_FLUSH"
    ASYNC_FLUSH = "ASYNC_FLUSH"


class BrokerRole(StrEnum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
#: The longest ``d_leger_handover_timeout_ms`` allowed: with the unregister (3 s) and drain
#: (10 s) bounds of the broker's shutdown it stays well inside the shutdown watch's 25 s.
MAX_HANDOVER_TIMEOUT_MS = 5000


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreConfig:
    """Settings of the embedded message store (RocketMQ ``MessageStoreConfig``)."""

    store_path_root_dir: str = "rocketq-data"
    #: CommitLog directory; default ``<root>/commitlog``.
    store_path_commit_log: str | None = None
    mapped_file_size_commit_log: int = GiB
    #: 300 000 units of 20 bytes; rounded up to a multiple of 20.
    mapped_file_size_consume_queue: int = 300_000 * 20

    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    flush_interval_commit_log_ms: int = 500
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval_ms: int = 10_000
    #: Sleep between async flushes instead of a wakeable wait (RocketMQ's default).
    flush_commit_log_timed: bool = True
    commit_interval_commit_log_ms: int = 200
    commit_commit_log_least_pages: int = 4
    commit_commit_log_thorough_interval_ms: int = 200
    flush_interval_consume_queue_ms: int = 1000
    flush_consume_queue_least_pages: int = 2
    flush_consume_queue_thorough_interval_ms: int = 60_000
    sync_flush_timeout_ms: int = 5000
    #: Wake the commit service on every put when the write-buffer pool is on (RocketMQ 5 default).
    wake_commit_when_put_message: bool = True

    transient_store_pool_enable: bool = False
    #: Number of write buffers, each one CommitLog segment in size.
    transient_store_pool_size: int = 5
    fast_fail_if_no_buffer_in_store_pool: bool = False

    warm_mapped_file_enable: bool = False
    #: Under SYNC_FLUSH, flush every N pages while warming a new segment (16 MiB).
    flush_least_pages_when_warm_mapped_file: int = 4096
    #: How long a writer waits for the allocator to hand over a new segment.
    allocate_wait_timeout_ms: int = 5000

    #: Writers wait while dispatch is this far behind (it resumes below half); 0 disables.
    max_dispatch_lag_bytes: int = 64 * MiB
    #: Above this dispatch lag a put first yields the GIL (``time.sleep(0)``) so that the
    #: dispatch thread runs; 0 disables. See ``MessageStore._throttle``.
    dispatch_yield_lag_bytes: int = 4 * MiB
    #: The broker's event loop dispatches the records put during one of its iterations itself
    #: (instead of waking the dispatch thread) when at most this many bytes wait and the thread
    #: is not dispatching; a larger backlog is the thread's. 0: always the thread. 4 KiB (about
    #: a dozen small records) takes the thread's wake-up off a lone send (8 % less CPU per send)
    #: and leaves a batch of 32 to the thread, which dispatches it on the other core while the
    #: loop answers (docs/benchmarks.md, "Dispatch on the loop"). With dispatch windows
    #: (``inline_dispatch_interval_ms``) the bound holds per put the window covers, up to three
    #: times (``rocketq.broker.server.INLINE_WINDOW_PUTS``).
    inline_dispatch_max_bytes: int = 4096
    #: While puts keep coming the loop dispatches at most once per this interval (the first put
    #: after a quiet interval at once, later ones with the next window), so one window takes the
    #: puts of several loop iterations: a window's fixed cost, most of a lone record's dispatch,
    #: is shared (1 ms: a third to a half less broker CPU per send at one send in flight,
    #: docs/benchmarks.md "Dispatch windows of 1 ms"), as RocketMQ's ReputMessageService, which
    #: looks every 1 ms, batches. Readers do not see the delay: a read of the ConsumeQueues or
    #: the index first dispatches a window still waiting (``StoreQueries.dispatch_window``), so
    #: an offset query or pull that follows an answered send finds it; held long-polling pulls
    #: are woken at most this much later. 0: every loop iteration that put records.
    inline_dispatch_interval_ms: int = 1
    #: Longest a put waits for dispatch to catch up before failing with SystemBusy.
    put_message_timeout_ms: int = 8000

    max_message_size: int = 4 * MiB
    max_properties_size: int = 32767
    #: Append RocketMQ 5.2's ``__CRC32#`` whole-record CRC property to every record.
    enabled_append_prop_crc: bool = False
    check_crc_on_recover: bool = True
    #: After a clean shutdown, recovery re-verifies (CRCs included) about this much of the
    #: CommitLog's tail instead of whole segments.
    clean_recover_verify_bytes: int = 64 * MiB

    store_host: str = "127.0.0.1:10911"

    message_index_enable: bool = True
    message_index_safe: bool = False
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000
    max_msgs_num_batch: int = 64
    default_query_max_num: int = 32
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    #: Timed delivery (TIMER_DELIVER_MS & co., store/timer.py); off → such messages are refused.
    timer_wheel_enable: bool = True
    timer_max_delay_sec: int = 3 * 24 * 3600
    #: Delivery granularity: a timer is delivered in the first step at or after its time.
    timer_precision_ms: int = 1000
    #: Timers due further than this many precision steps after their store time are re-written.
    timer_roll_window_slot: int = 2 * 24 * 3600
    #: How often the pending-timer snapshot is rewritten when it changed (beyond RocketMQ).
    timer_snapshot_interval_ms: int = 5000

    file_reserved_time_hours: int = 72
    delete_when: str = "04"
    disk_max_used_space_ratio_percent: int = 75
    disk_space_clean_forcibly_ratio_percent: int = 85
    disk_space_warning_level_ratio_percent: int = 90
    #: Beyond RocketMQ: above the forcibly ratio, also delete segments holding messages no
    #: consumer has consumed yet (RocketMQ always does). Off: writes are refused instead.
    force_clean_unconsumed: bool = False
    #: ``dLegerRetentionIgnoreLaggingMember`` (rocketq): in DLedger mode, above the forcibly
    #: ratio, also delete entry-store data files a follower has not got yet (one that is down
    #: or far behind). That follower can then never catch up from the leader: its data
    #: directory must be rebuilt from a copy of another member's (docs/replication.md). Off:
    #: such files are kept and writes are refused once the disk passes the warning ratio.
    d_leger_retention_ignore_lagging_member: bool = False
    #: How often retention measures the disk and deletes what it may.
    clean_resource_interval_ms: int = 10_000

    #: DLedger mode (RocketMQ ``enableDLegerCommitLog``): the CommitLog is a replicated log
    #: (docs/replication.md §4). The ``d_leger_*`` names are RocketMQ's keys, misspelling included.
    enable_dleger_commit_log: bool = False
    #: ``dLegerGroup`` (RocketMQ sets it to the broker name).
    d_leger_group: str = ""
    #: ``dLegerPeers``: ``n0-127.0.0.1:40911;n1-127.0.0.1:40912;...`` (replication addresses).
    d_leger_peers: str = ""
    #: ``dLegerSelfId``: this broker's id in ``d_leger_peers``.
    d_leger_self_id: str = ""
    #: ``preferredLeaderId``: the peer leadership is handed to when it is up to date.
    preferred_leader_id: str = ""
    #: ``enableBatchPush``: replicate entries in batches.
    enable_batch_push: bool = False
    #: ``maxBatchPushSize`` (DLedger's name; rocketq reads it from broker.conf): with batch push,
    #: the bytes of entries one append message carries (at least one entry). DLedger's default
    #: is 4 KiB; 64 KiB here: fewer, larger pushes cost the group less CPU per message.
    max_batch_push_size: int = 64 * 1024
    #: ``flushFileInterval`` (DLedger's name; rocketq reads it from broker.conf): under
    #: ASYNC_FLUSH (acks after a majority's page cache) each member fsyncs what it wrote at most
    #: once per this many ms. DLedger's 10 ms bounds what a power loss of a majority can take;
    #: ``flush_interval_commit_log_ms`` (500) is what a plain CommitLog allows under ASYNC_FLUSH,
    #: at 5-11 us less CPU per message for a 3-broker group here (docs/replication.md §4).
    #: SYNC_FLUSH fsyncs before every acknowledgement whatever this says.
    flush_file_interval_ms: int = 10
    #: ``storePathDLedgerCommitLog``: base directory of the entry store (``dledger-<selfId>/``
    #: under it); default the store root, as RocketMQ's ``storeBaseDir``.
    store_path_dledger_commit_log: str | None = None
    #: ``dLegerBrokerAddresses`` (rocketq): ``n0-127.0.0.1:10911;n1-...``, each member's broker
    #: remoting address, so a follower names the leader's broker to clients and copies its
    #: metadata from it (``rocketq serve --dledger N`` writes it).
    d_leger_broker_addresses: str = ""
    #: ``dLegerElectionTimeoutMs`` / ``dLegerHeartbeatIntervalMs`` (rocketq): Raft timing; 0 keeps
    #: DLedger's defaults (6000 / 2000 ms). ``serve --dledger N`` uses 1000 / 200.
    d_leger_election_timeout_ms: int = 0
    d_leger_heartbeat_interval_ms: int = 0
    #: ``dLegerEventLogPath`` (rocketq): a JSONL file of the member's Raft events (role changes,
    #: votes, commit advances, truncations; ``rocketq.ha.event_log``), ``{selfId}`` replaced by
    #: the self id; empty (the default): none.
    d_leger_event_log_path: str = ""
    #: ``dLegerHandoverOnShutdown`` (rocketq): a leader being shut down (SIGTERM) first hands its
    #: leadership to a live, caught-up follower (the preferred leader if it is one, else the
    #: follower with the highest match index), so the group has a new leader within a few round
    #: trips rather than after an election timeout (docs/replication.md). Off: it just stops.
    d_leger_handover_on_shutdown: bool = True
    #: ``dLegerHandoverTimeoutMs`` (rocketq): the most the hand-over may add to a shutdown; when
    #: the new leader is not known by then the broker stops as without a hand-over. At most
    #: ``MAX_HANDOVER_TIMEOUT_MS``, so the shutdown's own bounds (broker/shutdown_watch.py) hold.
    d_leger_handover_timeout_ms: int = 1000

    def __post_init__(self) -> None:
        problems: list[str] = []
        for name, enum_type in (("flush_disk_type", FlushDiskType), ("broker_role", BrokerRole)):
            value = getattr(self, name)
            if not isinstance(value, enum_type):
                try:
                    object.__setattr__(self, name, enum_type(str(value).upper()))
                except ValueError:
                    choices = ", ".join(m.value for m in enum_type)
                    problems.append(f"{name}={value!r} is not one of {choices}")
        if self.mapped_file_size_commit_log < 4096:
            problems.append(
                f"mapped_file_size_commit_log={self.mapped_file_size_commit_log} B is below 4096 B"
            )
        if self.mapped_file_size_consume_queue < 20:
            problems.append(
                f"mapped_file_size_consume_queue={self.mapped_file_size_consume_queue} B "
                "is below one 20-byte unit"
            )
        if self.max_message_size <= 0:
            problems.append(f"max_message_size={self.max_message_size} B must be positive")
        if not 0 < self.max_properties_size <= 32767:
            problems.append(f"max_properties_size={self.max_properties_size} B must be in 1..32767")
        if self.inline_dispatch_max_bytes < 0:
            problems.append(
                f"inline_dispatch_max_bytes={self.inline_dispatch_max_bytes} B must be 0 (off) or positive"
            )
        if self.inline_dispatch_interval_ms < 0:
            problems.append(
                f"inline_dispatch_interval_ms={self.inline_dispatch_interval_ms} ms must be 0 or positive"
            )
        if not 0 < self.d_leger_handover_timeout_ms <= MAX_HANDOVER_TIMEOUT_MS:
            problems.append(
                f"d_leger_handover_timeout_ms={self.d_leger_handover_timeout_ms} ms must be in "
                f"1..{MAX_HANDOVER_TIMEOUT_MS}"
            )
        if self.transient_store_pool_size < 1:
            problems.append(f"transient_store_pool_size={self.transient_store_pool_size} must be at least 1")
        problems += not_positive(
            self,
            "flush_interval_commit_log_ms",
            "commit_interval_commit_log_ms",
            "sync_flush_timeout_ms",
            "timer_max_delay_sec",
            "timer_precision_ms",
            "timer_roll_window_slot",
            "timer_snapshot_interval_ms",
            "clean_resource_interval_ms",
            "max_batch_push_size",
            "flush_file_interval_ms",
        )
        if problems:
            raise ConfigError("invalid StoreConfig: " + "; ".join(problems))

    # -- derived values -------------------------------------------------------------------
    @property
    def commit_log_dir(self) -> str:
        return self.store_path_commit_log or os.path.join(self.store_path_root_dir, "commitlog")

    @property
    def consume_queue_file_size(self) -> int:
        """``mapped_file_size_consume_queue`` rounded up to a multiple of 20, as RocketMQ's getter does."""
        size = self.mapped_file_size_consume_queue
        return size + (-size) % 20

    @property
    def transient_store_pool_active(self) -> bool:
        """RocketMQ 4.x rule: the pool is used only with ASYNC_FLUSH on a master."""
        return (
            self.transient_store_pool_enable
            and self.flush_disk_type is FlushDiskType.ASYNC_FLUSH
            and self.broker_role is not BrokerRole.SLAVE
        )


T = TypeVar("T")


def not_positive(config: object, *names: str) -> list[str]:
    """A ``__post_init__`` check: ``name=value must be positive`` for each field of ``names``
    whose value is not above zero."""
    return [
        f"{name}={getattr(config, name)} must be positive" for name in names if getattr(config, name) <= 0
    ]


def _snake(camel: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", camel).lower()


def field_for_rocketmq_key(cls: type[Any], key: str) -> str | None:
    """The dataclass field a RocketMQ config key maps to, or None when there is none."""
    names = {f.name for f in dataclasses.fields(cls)}
    base = _snake(key)
    for suffix in _UNIT_SUFFIXES:
        if base + suffix in names:
            return base + suffix
    return None


def _coerce(value: str, current: Any) -> Any:
    if isinstance(current, bool):
        lowered = value.strip().lower()
        if lowered not in ("true", "false"):
            raise ValueError(f"expected true or false, got {value!r}")
        return lowered == "true"
    if isinstance(current, Enum):
        return type(current)(value.strip().upper())  # RocketMQ accepts SYNC_FLUSH or sync_flush
    if isinstance(current, int):
        return int(value.strip())
    return value.strip()


def from_rocketmq_properties(cls: type[T], props: dict[str, str], **overrides: Any) -> T:
    """Build ``cls`` from RocketMQ-style ``key=value`` properties; unknown keys are ignored."""
    defaults = cls()
    kwargs: dict[str, Any] = {}
    problems: list[str] = []
    for key, raw in props.items():
        name = field_for_rocketmq_key(cls, key)
        if name is None:
            continue
        try:
            kwargs[name] = _coerce(raw, getattr(defaults, name))
        except ValueError as exc:
            problems.append(f"{key}={raw!r}: {exc}")
    if problems:
        raise ConfigError("invalid configuration: " + "; ".join(problems))
    kwargs.update(overrides)
    return cls(**kwargs)


#: RocketMQ 5's ``MetricsExporterType`` names; rocketq serves PROM only.
METRICS_EXPORTER_TYPES = ("DISABLE", "OTLP_GRPC", "PROM", "LOG")


def metrics_config_problems(exporter_type: str, port: int) -> list[str]:
    """What is wrong with ``metricsExporterType`` / ``metricsPromExporterPort`` (broker and name
    server share the keys)."""
    problems = []
    kind = exporter_type.upper()
    if kind not in METRICS_EXPORTER_TYPES:
        problems.append(
            f"metrics_exporter_type={exporter_type!r} is not one of {', '.join(METRICS_EXPORTER_TYPES)}"
        )
    elif kind not in ("DISABLE", "PROM"):
        problems.append(
            f"metrics_exporter_type={exporter_type!r} is not supported: rocketq serves Prometheus "
            "metrics only (PROM) or none (DISABLE)"
        )
    if not 0 <= port <= 65535:
        problems.append(f"metrics_prom_exporter_port={port} is outside 0..65535")
    return problems


__all__ = [
    "DEFAULT_DELAY_LEVELS",
    "METRICS_EXPORTER_TYPES",
    "BrokerRole",
    "FlushDiskType",
    "StoreConfig",
    "field_for_rocketmq_key",
    "from_rocketmq_properties",
    "metrics_config_problems",
    "not_positive",
]
