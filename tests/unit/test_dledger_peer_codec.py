"""Raft peer messages on the wire (rocketq.ha.peer_codec), appends as the leader's entry store
bytes, and DLedgerConfig's broker.conf keys."""

from __future__ import annotations

import pathlib

import pytest

from rocketq.errors import ConfigError, RemoteProtocolError
from rocketq.ha import peer_codec
from rocketq.ha.driver_config import DLedgerConfig, parse_peers
from rocketq.ha.entry_format import MAGIC_NOOP, MAGIC_NORMAL
from rocketq.ha.entry_store import EntryStore
from rocketq.ha.raft_types import (
    AckPolicy,
    Append,
    AppendReply,
    Entry,
    EntryKind,
    Heartbeat,
    HeartbeatReply,
    Message,
    PreVote,
    PreVoteReply,
    TimeoutNow,
    Vote,
    VoteReply,
    is_control,
)

MESSAGES: list[Message] = [
    PreVote("n0", "n1", 5, 10, 4),
    PreVoteReply("n1", "n0", 5, True),
    Vote("n0", "n2", 6, -1, 0, True),
    VoteReply("n2", "n0", 6, False),
    Append("n0", "n1", 7, 3, 6, (Entry(4, 7, b"", EntryKind.NOOP), Entry(5, 7, b"\x00body" * 100)), 3),
    Append("n0", "n1", 7, -1, 0, (), -1),
    AppendReply("n1", "n0", 7, False, 2, 2, 1, 3, 6, 2),
    Heartbeat("n0", "n2", 7, 12),
    HeartbeatReply("n2", "n0", 7, 20, 12, 20, 19),
    TimeoutNow("n0", "n1", 7),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_every_message_round_trips(message: Message) -> None:
    code, body = peer_codec.encode(message)
    assert code in peer_codec.RAFT_CODES
    assert peer_codec.decode(code, body) == message


def test_codes_split_control_from_bulk() -> None:
    bulk = {peer_codec.code_of(m) for m in MESSAGES if not is_control(m)}
    assert bulk == {peer_codec.CODE_APPEND, peer_codec.CODE_APPEND_REPLY}


def test_a_truncated_body_is_a_protocol_error() -> None:
    code, body = peer_codec.encode(MESSAGES[4])
    with pytest.raises(RemoteProtocolError, match="raft"):
        peer_codec.decode(code, body[:-3])
    with pytest.raises(RemoteProtocolError, match="no raft message"):
        peer_codec.decode(17, peer_codec.encode(MESSAGES[0])[1])


def test_dleger_peers_parse_in_order() -> None:
    assert parse_peers("n0-127.0.0.1:40911; n1-host.example:40912;") == (
        ("n0", "127.0.0.1:40911"),
        ("n1", "host.example:40912"),
    )
    for bad in ("", "n0127.0.0.1:1", "n0-127.0.0.1", "n0-h:0", "n0-h:1;n0-h:2"):
        with pytest.raises(ConfigError):
            parse_peers(bad)


def test_broker_conf_keys() -> None:
    props = {
        "brokerName": "broker-a",
        "dLegerGroup": "RaftNode00",
        "dLegerPeers": "n0-127.0.0.1:40911;n1-127.0.0.1:40912;n2-127.0.0.1:40913",
        "dLegerSelfId": "n1",
        "preferredLeaderId": "n2",
        "enableBatchPush": "true",
        "storePathDLedgerCommitLog": "/data/dledger",
        "mappedFileSizeCommitLog": "1048576",
    }
    cfg = DLedgerConfig.from_broker_conf(props, ack_policy=AckPolicy.FSYNCED)
    assert (cfg.group, cfg.self_id, cfg.preferred_leader_id) == ("RaftNode00", "n1", "n2")
    assert cfg.self_address == "127.0.0.1:40912" and cfg.data_dir == "/data/dledger"
    assert cfg.enable_batch_push and cfg.data_file_size == 1 << 20
    raft = cfg.raft_config()
    assert raft.members == ("n0", "n1", "n2") and raft.ack_policy is AckPolicy.FSYNCED
    assert raft.max_batch_bytes == 4096 and raft.preferred_leader_id == "n2"
    assert (
        DLedgerConfig.from_broker_conf({**props, "enableBatchPush": "false"}).raft_config().max_batch_bytes
        == 1
    )
    defaults = DLedgerConfig.from_broker_conf({k: props[k] for k in ("dLegerPeers", "dLegerSelfId")})
    assert defaults.preferred_leader_id is None and not defaults.enable_batch_push
    with pytest.raises(ConfigError, match="dLegerSelfId"):
        DLedgerConfig.from_broker_conf({**props, "dLegerSelfId": "n9"})
    with pytest.raises(ConfigError, match="needs dLegerPeers"):
        DLedgerConfig.from_broker_conf({"dLegerSelfId": "n0"})
    with pytest.raises(ConfigError, match="enableBatchPush"):
        DLedgerConfig.from_broker_conf({**props, "enableBatchPush": "yes"})
    with pytest.raises(ConfigError, match="heartbeat"):
        DLedgerConfig.from_broker_conf(props, heartbeat_interval_ms=9000)


def test_appends_carry_the_leaders_store_bytes_which_a_follower_takes_verbatim(
    tmp_path: pathlib.Path,
) -> None:
    leader = EntryStore.open(str(tmp_path / "a"), "n0", data_file_size=4096, index_file_size=32 * 64)
    follower = EntryStore.open(str(tmp_path / "b"), "n1", data_file_size=4096, index_file_size=32 * 64)
    try:
        entries = []
        for k in range(60):  # crosses data files (padding)
            body = b"" if k == 0 else b"%02d" % k * 17
            magic = MAGIC_NOOP if k == 0 else MAGIC_NORMAL
            leader.append_at(k, 1, body, magic=magic)
            entries.append(Entry(k, 1, body, EntryKind.NOOP if k == 0 else EntryKind.NORMAL))
        m = Append("n0", "n1", 1, -1, 0, tuple(entries), 59)
        code, body = peer_codec.encode(m, leader.read_bytes)
        got, raw = peer_codec.decode_raw(code, body)
        assert got == m and raw is not None and len(raw) == 60
        assert follower.append_entry_bytes(b"".join(raw)) == 60
        assert follower.read_bytes(0, 1 << 20) == leader.read_bytes(0, 1 << 20)
        # entries the store no longer holds as the message says: the entries alone (form 0)
        stale = Append("n0", "n1", 2, 58, 1, (Entry(59, 2, entries[59].data),), 58)
        code, body = peer_codec.encode(stale, leader.read_bytes)
        assert peer_codec.decode_raw(code, body) == (stale, None)
        beyond = Append("n0", "n1", 1, 59, 1, (Entry(60, 1, b"x"),), 58)
        assert peer_codec.decode_raw(*peer_codec.encode(beyond, leader.read_bytes)) == (beyond, None)
    finally:
        leader.close()
        follower.close()
