"""``rocketq.ha.driver.open_group_log``: the Raft member a broker's ``LedgerSpec`` gives."""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib

import pytest

from rocketq.config import StoreConfig, from_rocketmq_properties
from rocketq.errors import ConfigError
from rocketq.ha.driver import RaftGroupLog, config_of
from rocketq.ha.group_config import LedgerSpec, open_ledger, parse_broker_addresses
from rocketq.ha.raft_types import AckPolicy
from rocketq.store.dledger_store import DLedgerMessageStore

PEERS = {"n0": "127.0.0.1:40911", "n1": "127.0.0.1:40912", "n2": "127.0.0.1:40913"}


def spec(tmp_path: pathlib.Path, **fields: object) -> LedgerSpec:
    base = LedgerSpec(
        base_dir=str(tmp_path),
        group="broker-a",
        self_id="n1",
        peers=PEERS,
        data_file_size=1 << 20,
        data_start_offset=4 << 20,
        fsync=False,
        broker_address="127.0.0.1:10921",
    )
    return dataclasses.replace(base, **fields)  # type: ignore[arg-type]


def test_the_spec_maps_to_the_member_settings(tmp_path: pathlib.Path) -> None:
    cfg = config_of(spec(tmp_path, preferred_leader_id="n0", enable_batch_push=True))
    assert (cfg.self_id, cfg.group, cfg.data_dir) == ("n1", "broker-a", str(tmp_path))
    assert cfg.peers == tuple(PEERS.items())
    assert (cfg.data_file_size, cfg.data_start_offset) == (1 << 20, 4 << 20)
    assert cfg.ack_policy is AckPolicy.APPENDED
    assert (cfg.preferred_leader_id, cfg.enable_batch_push) == ("n0", True)
    assert (cfg.election_timeout_ms, cfg.heartbeat_interval_ms) == (6000, 2000)  # DLedger's
    # only this broker's address is known: another leader has none (not its peer address)
    assert cfg.client_address("n1") == "127.0.0.1:10921"
    assert cfg.client_address("n0") is None

    synced = config_of(spec(tmp_path, fsync=True, election_timeout_ms=1000, heartbeat_interval_ms=200))
    assert synced.ack_policy is AckPolicy.FSYNCED
    assert (synced.election_timeout_ms, synced.heartbeat_interval_ms) == (1000, 200)


def test_broker_addresses_name_every_leader(tmp_path: pathlib.Path) -> None:
    addrs = parse_broker_addresses("n0-127.0.0.1:10911; n1-127.0.0.1:10921;n2-127.0.0.1:10931")
    cfg = config_of(spec(tmp_path, broker_addresses=addrs))
    assert [cfg.client_address(i) for i in PEERS] == ["127.0.0.1:10911", "127.0.0.1:10921", "127.0.0.1:10931"]
    assert parse_broker_addresses("  ") == {}


def test_bad_settings_are_refused_naming_the_key(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ConfigError, match="dLegerBrokerAddresses item 'n0:10911'"):
        parse_broker_addresses("n0:10911")
    with pytest.raises(ConfigError, match="dLegerBrokerAddresses names n7, not among dLegerPeers"):
        config_of(spec(tmp_path, broker_addresses={"n7": "127.0.0.1:1"}))
    with pytest.raises(ConfigError, match="heartbeat"):
        config_of(spec(tmp_path, election_timeout_ms=200, heartbeat_interval_ms=200))


def test_open_ledger_opens_the_raft_member_for_a_group(tmp_path: pathlib.Path) -> None:
    log = open_ledger(spec(tmp_path))
    assert isinstance(log, RaftGroupLog)
    assert log.config.data_start_offset == 4 << 20


def test_an_adopted_store_s_entries_start_at_the_divided_offset(tmp_path: pathlib.Path) -> None:
    """The member's empty store places its first data file at ``data_start_offset``."""

    async def main() -> int:
        log = open_ledger(spec(tmp_path, peers={"n1": "127.0.0.1:0", **{k: PEERS[k] for k in ("n0", "n2")}}))
        assert isinstance(log, RaftGroupLog)
        await log.start()
        try:
            return log.ledger_end_pos
        finally:
            await log.stop()

    assert asyncio.run(main()) == 4 << 20


def test_max_batch_push_size_goes_from_broker_conf_to_the_member(tmp_path: pathlib.Path) -> None:
    """``maxBatchPushSize`` (DLedger's name) in broker.conf bounds a push's entries with batch
    push on; off, a push carries one entry whatever the setting."""
    store_cfg = from_rocketmq_properties(
        StoreConfig,
        {
            "storePathRootDir": str(tmp_path),
            "enableDLegerCommitLog": "true",
            "dLegerPeers": ";".join(f"{k}-{v}" for k, v in PEERS.items()),
            "dLegerSelfId": "n1",
            "enableBatchPush": "true",
            "maxBatchPushSize": "8192",
        },
    )
    assert store_cfg.max_batch_push_size == 8192
    ledger_spec = DLedgerMessageStore(store_cfg).ledger_spec(0)  # not started: nothing opened
    assert ledger_spec.max_batch_bytes == 8192
    assert config_of(ledger_spec).raft_config().max_batch_bytes == 8192
    off = dataclasses.replace(ledger_spec, enable_batch_push=False)
    assert config_of(off).raft_config().max_batch_bytes == 1
    assert StoreConfig().max_batch_push_size == 64 * 1024  # rocketq's default; DLedger's is 4 KiB
    with pytest.raises(ConfigError, match="max_batch_push_size=0 must be positive"):
        from_rocketmq_properties(StoreConfig, {"maxBatchPushSize": "0"})


def test_flush_file_interval_goes_from_broker_conf_to_the_member(tmp_path: pathlib.Path) -> None:
    """``flushFileInterval`` (DLedger's name, ms) in broker.conf is the members' fsync cadence
    under page-cache acks; DLedger's 10 ms when absent; zero is refused."""
    base = {
        "storePathRootDir": str(tmp_path),
        "enableDLegerCommitLog": "true",
        "dLegerPeers": ";".join(f"{k}-{v}" for k, v in PEERS.items()),
        "dLegerSelfId": "n1",
    }
    store_cfg = from_rocketmq_properties(StoreConfig, {**base, "flushFileInterval": "500"})
    assert store_cfg.flush_file_interval_ms == 500
    ledger_spec = DLedgerMessageStore(store_cfg).ledger_spec(0)  # not started: nothing opened
    assert ledger_spec.flush_file_interval_ms == 500
    assert config_of(ledger_spec).flush_file_interval_ms == 500
    default = DLedgerMessageStore(from_rocketmq_properties(StoreConfig, base)).ledger_spec(0)
    assert config_of(default).flush_file_interval_ms == 10  # DLedger's flushFileInterval
    with pytest.raises(ConfigError, match="flush_file_interval_ms=0 must be positive"):
        from_rocketmq_properties(StoreConfig, {"flushFileInterval": "0"})
