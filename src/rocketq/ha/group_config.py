"""The settings of a DLedger group and the choice of its :class:`ReplicatedLog`.

``dLegerPeers`` is RocketMQ's ``n0-127.0.0.1:40911;n1-127.0.0.1:40912;...``: self ids and the
addresses the peers replicate on (not the brokers' remoting ports). A group of one runs on
:class:`~rocketq.ha.local_log.SingleNodeLog`; a larger group needs the Raft driver,
``rocketq.ha.driver``, imported only then: it must provide
``open_group_log(spec: LedgerSpec) -> ReplicatedLog``.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass

from rocketq.errors import ConfigError
from rocketq.ha.driver_config import FLUSH_FILE_INTERVAL_MS, MAX_BATCH_PUSH_BYTES
from rocketq.ha.local_log import SingleNodeLog
from rocketq.ha.replicated_log import ReplicatedLog

_PEER = re.compile(r"([A-Za-z0-9_.]+)-([^;\s]+):(\d{1,5})")


def parse_peers(text: str) -> dict[str, str]:
    """``n0-127.0.0.1:40911;n1-...`` → {self id: "host:port"}, in the order given."""
    peers: dict[str, str] = {}
    for item in (p.strip() for p in text.split(";")):
        if not item:
            continue
        m = _PEER.fullmatch(item)
        if m is None:
            raise ConfigError(
                f"dLegerPeers item {item!r} is not <selfId>-<host>:<port> (e.g. n0-127.0.0.1:40911)"
            )
        if m.group(1) in peers:
            raise ConfigError(f"dLegerPeers names {m.group(1)!r} twice")
        peers[m.group(1)] = f"{m.group(2)}:{m.group(3)}"
    if not peers:
        raise ConfigError("dLegerPeers is empty; give at least this broker, e.g. n0-127.0.0.1:40911")
    return peers


def parse_broker_addresses(text: str) -> dict[str, str]:
    """``dLegerBrokerAddresses``, ``n0-127.0.0.1:10911;n1-...``: each member's broker remoting
    address by self id (same form as ``dLegerPeers``; empty: none)."""
    if not text.strip():
        return {}
    try:
        return parse_peers(text)
    except ConfigError as exc:
        raise ConfigError(str(exc).replace("dLegerPeers", "dLegerBrokerAddresses")) from None


def slave_broker_id(peers: dict[str, str], self_id: str) -> int:
    """RocketMQ's broker id of a follower: its self id's index in ``dLegerPeers`` plus one."""
    return list(peers).index(self_id) + 1


@dataclass(frozen=True, slots=True)
class LedgerSpec:
    base_dir: str
    group: str
    self_id: str
    peers: dict[str, str]
    data_file_size: int
    #: where the first data file of an empty store starts (``dividedCommitlogOffset``)
    data_start_offset: int
    #: acknowledge after fsync (SYNC_FLUSH) rather than after the write
    fsync: bool
    preferred_leader_id: str | None = None
    enable_batch_push: bool = False
    #: ``maxBatchPushSize``: with batch push, the bytes of entries in one append message
    max_batch_bytes: int = MAX_BATCH_PUSH_BYTES
    #: this broker's remoting address (``ip:port`` clients and peers' SlaveSynchronize use); the
    #: log reports the leader's as ``LogState.leader_address``
    broker_address: str | None = None
    #: the other members' broker remoting addresses by self id (``dLegerBrokerAddresses``); a
    #: leader not named here has no known address (``LogState.leader_address`` None)
    broker_addresses: dict[str, str] | None = None
    #: Raft timing (``dLegerElectionTimeoutMs``, ``dLegerHeartbeatIntervalMs``); None: DLedger's
    #: defaults, 6000 and 2000 ms
    election_timeout_ms: int | None = None
    heartbeat_interval_ms: int | None = None
    #: ``dLegerEventLogPath`` (rocketq): the member's Raft event log (:mod:`rocketq.ha.event_log`);
    #: None: none
    event_log_path: str | None = None
    #: ``flushFileInterval`` (DLedger's name): under page-cache acks, the fsync cadence of the
    #: entry files; None: DLedger's 10 ms
    flush_file_interval_ms: int | None = None


LedgerFactory = Callable[[LedgerSpec], ReplicatedLog]


def open_ledger(spec: LedgerSpec) -> ReplicatedLog:
    """The default factory: a group of one on its own, the Raft driver otherwise."""
    if spec.self_id not in spec.peers:
        raise ConfigError(f"dLegerSelfId {spec.self_id!r} is not among dLegerPeers ({', '.join(spec.peers)})")
    if len(spec.peers) == 1:
        return SingleNodeLog.open(
            spec.base_dir,
            spec.self_id,
            data_file_size=spec.data_file_size,
            data_start_offset=spec.data_start_offset,
            address=spec.broker_address,
            fsync=spec.fsync,
            flush_interval_ms=spec.flush_file_interval_ms or FLUSH_FILE_INTERVAL_MS,
        )
    try:
        driver = importlib.import_module("rocketq.ha.driver")
    except ModuleNotFoundError as exc:
        if exc.name != "rocketq.ha.driver":
            raise
        raise ConfigError(
            f"a DLedger group of {len(spec.peers)} peers needs the Raft driver (rocketq.ha.driver), "
            "which is not available yet; run a group of one (dLegerPeers with this broker only)"
        ) from None
    factory: LedgerFactory = driver.open_group_log
    return factory(spec)
