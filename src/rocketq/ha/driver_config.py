"""Settings of one member of a DLedger group, and their reading from RocketMQ's broker.conf keys.

``DLedgerConfig.from_broker_conf(props)`` maps:

=============================  ==============================================================
broker.conf key                field
=============================  ==============================================================
``dLegerGroup``                ``group`` (RocketMQ sets it to the broker name)
``dLegerPeers``                ``peers``: ``n0-127.0.0.1:40911;n1-127.0.0.1:40912;...``
``dLegerSelfId``               ``self_id`` (must be one of the peers)
``preferredLeaderId``          ``preferred_leader_id`` (empty: none)
``enableBatchPush``            ``enable_batch_push`` (false: one entry per append message)
``maxBatchPushSize``           ``max_batch_bytes`` with batch push (default 64 KiB; DLedger's 4 KiB)
``flushFileInterval``          ``flush_file_interval_ms``: under page-cache acks, the entry files'
                               fsync cadence (default DLedger's 10 ms)
``storePathDLedgerCommitLog``  ``data_dir`` (the entry store lives in ``<data_dir>/dledger-<self>``;
                               default ``storePathRootDir``, as RocketMQ)
``mappedFileSizeCommitLog``    ``data_file_size``
``dLegerEventLogPath``         ``event_log_path`` (rocketq; empty: none, the default)
=============================  ==============================================================

Everything else keeps its default (DLedger's where DLedger has one) and is set in code.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from rocketq.errors import ConfigError
from rocketq.ha.raft_types import AckPolicy, RaftConfig

#: ``maxBatchPushSize``'s default with batch push: the bytes of entries one append message
#: carries (at least one entry). DLedger's is 4 KiB; fewer, larger pushes cost the group less CPU
#: per message (docs/benchmarks.md).
MAX_BATCH_PUSH_BYTES = 64 * 1024
#: ``flushFileInterval``'s default, DLedger's: under page-cache acks (``AckPolicy.APPENDED``) a
#: member fsyncs what it wrote at most once per this many milliseconds.
FLUSH_FILE_INTERVAL_MS = 10


def parse_peers(text: str) -> tuple[tuple[str, str], ...]:
    """``n0-host:port;n1-host:port`` -> ``(("n0", "host:port"), ...)`` in the given order."""
    out: list[tuple[str, str]] = []
    for raw in text.split(";"):
        part = raw.strip()
        if not part:
            continue
        node_id, sep, addr = part.partition("-")
        host, colon, port = addr.rpartition(":")
        if not sep or not node_id or not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"dLegerPeers entry {part!r} is not <id>-<host>:<port>")
        out.append((node_id, addr))
    if not out:
        raise ConfigError(f"dLegerPeers {text!r} names no peer")
    ids = [i for i, _ in out]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"dLegerPeers {text!r} repeats a peer id")
    return tuple(out)


def _bool(value: str, key: str) -> bool:
    low = value.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    raise ConfigError(f"{key}={value!r} is not true or false")


@dataclass(frozen=True, slots=True)
class DLedgerConfig:
    """One member's settings; times in milliseconds."""

    self_id: str
    peers: tuple[tuple[str, str], ...]
    data_dir: str
    group: str = "default"
    election_timeout_ms: int = 6000  # randomized to [timeout, 2 * timeout) per round
    heartbeat_interval_ms: int = 2000
    ack_policy: AckPolicy = AckPolicy.APPENDED
    ack_timeout_ms: int = 2500
    preferred_leader_id: str | None = None
    max_pending_appends: int = 10000
    enable_batch_push: bool = False
    max_batch_bytes: int = MAX_BATCH_PUSH_BYTES  # with batch push
    max_inflight_appends: int = 1000  # append messages in flight per follower (DLedger: 1000)
    #: under APPENDED acks, the fsync cadence of what was written (DLedger's
    #: ``flushFileInterval``); under FSYNCED acks an fsync follows every write (group commit)
    flush_file_interval_ms: int = FLUSH_FILE_INTERVAL_MS
    tick_ms: int = 10
    checkpoint_interval_ms: int = 3000
    seed: int | None = None
    data_file_size: int = 1 << 30
    #: where the first data file of an empty store starts (an adopted store's
    #: ``dividedCommitlogOffset``; a multiple of ``data_file_size``)
    data_start_offset: int = 0
    index_file_size: int = 32 * 5 * 1024 * 1024
    #: the address clients reach each member's broker on, by self id (``LogState.leader_address``);
    #: when empty every member is named by its ``dLegerPeers`` address, otherwise a member not
    #: listed has no known address (None)
    client_addresses: tuple[tuple[str, str], ...] = ()
    #: a JSONL file of this member's Raft events (:mod:`rocketq.ha.event_log`; ``{selfId}`` is
    #: replaced by the self id); None: no event log
    event_log_path: str | None = None

    def __post_init__(self) -> None:
        ids = [i for i, _ in self.peers]
        if self.self_id not in ids:
            raise ConfigError(f"dLegerSelfId {self.self_id!r} is not among dLegerPeers {ids}")
        if self.preferred_leader_id is not None and self.preferred_leader_id not in ids:
            raise ConfigError(f"preferredLeaderId {self.preferred_leader_id!r} is not among {ids}")
        if self.tick_ms <= 0 or self.checkpoint_interval_ms <= 0:
            raise ConfigError("tick_ms and checkpoint_interval_ms must be positive")
        if self.flush_file_interval_ms <= 0:
            raise ConfigError(f"flushFileInterval={self.flush_file_interval_ms} ms must be positive")
        self.raft_config()  # the core's own checks (timeouts, limits) fail here, not at start

    @property
    def peer_addresses(self) -> dict[str, str]:
        return dict(self.peers)

    def client_address(self, member: str) -> str | None:
        if not self.client_addresses:
            return self.peer_addresses.get(member)
        return dict(self.client_addresses).get(member) or None

    @property
    def self_address(self) -> str:
        return self.peer_addresses[self.self_id]

    def raft_config(self) -> RaftConfig:
        try:
            return RaftConfig(
                node_id=self.self_id,
                members=tuple(i for i, _ in self.peers),
                heartbeat_interval_ms=self.heartbeat_interval_ms,
                election_timeout_ms=self.election_timeout_ms,
                ack_policy=self.ack_policy,
                ack_timeout_ms=self.ack_timeout_ms,
                max_pending_proposals=self.max_pending_appends,
                max_inflight_msgs=self.max_inflight_appends,
                # without batch push DLedger sends one entry per push: a batch limit of one byte
                # still carries one entry (the core always sends at least one)
                max_batch_bytes=self.max_batch_bytes if self.enable_batch_push else 1,
                resend_timeout_ms=max(1000, 2 * self.heartbeat_interval_ms),
                preferred_leader_id=self.preferred_leader_id,
            )
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc

    @classmethod
    def from_broker_conf(cls, props: Mapping[str, str], **overrides: object) -> DLedgerConfig:
        """The settings RocketMQ's broker.conf keys give (see the module comment)."""
        for key in ("dLegerPeers", "dLegerSelfId"):
            if not props.get(key, "").strip():
                raise ConfigError(f"broker.conf needs {key} in DLedger mode")
        data_dir = props.get("storePathDLedgerCommitLog", "").strip()
        if not data_dir:
            # RocketMQ's DLedger store base dir is then the store root: <root>/dledger-<self>/...
            data_dir = props.get("storePathRootDir", "").strip() or os.path.join(
                os.path.expanduser("~"), "store"
            )
        preferred = props.get("preferredLeaderId", "").strip() or None
        kwargs: dict[str, object] = {
            "self_id": props["dLegerSelfId"].strip(),
            "peers": parse_peers(props["dLegerPeers"]),
            "data_dir": data_dir,
            "group": props.get("dLegerGroup", "").strip() or props.get("brokerName", "default"),
            "preferred_leader_id": preferred,
            "enable_batch_push": _bool(props.get("enableBatchPush", "false"), "enableBatchPush"),
        }
        batch = props.get("maxBatchPushSize", "").strip()
        if batch:
            if not batch.isdigit() or not int(batch):
                raise ConfigError(f"maxBatchPushSize={batch!r} is not a positive number of bytes")
            kwargs["max_batch_bytes"] = int(batch)
        interval = props.get("flushFileInterval", "").strip()
        if interval:
            if not interval.isdigit() or not int(interval):
                raise ConfigError(f"flushFileInterval={interval!r} is not a positive number of milliseconds")
            kwargs["flush_file_interval_ms"] = int(interval)
        events = props.get("dLegerEventLogPath", "").strip()
        if events:
            kwargs["event_log_path"] = events
        size = props.get("mappedFileSizeCommitLog", "").strip()
        if size:
            if not size.isdigit():
                raise ConfigError(f"mappedFileSizeCommitLog={size!r} is not a number of bytes")
            kwargs["data_file_size"] = int(size)
        kwargs.update(overrides)
        return cls(**kwargs)  # type: ignore[arg-type]
