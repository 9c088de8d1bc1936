"""Raft peer messages on the wire (rocketq.ha.peer_codec), appends as the leader's entry store
bytes, and DLedgerConfig's broker.conf keys."""

from __future__ import annotations

import hashlib
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
    assert raft.max_batch_bytes == 64 * 1024 and raft.preferred_leader_id == "n2"
    pushed = DLedgerConfig.from_broker_conf({**props, "maxBatchPushSize": "4096"})
    assert pushed.raft_config().max_batch_bytes == 4096
    with pytest.raises(ConfigError, match="maxBatchPushSize='0'"):
        DLedgerConfig.from_broker_conf({**props, "maxBatchPushSize": "0"})
    assert cfg.flush_file_interval_ms == 10  # DLedger's flushFileInterval
    assert DLedgerConfig.from_broker_conf({**props, "flushFileInterval": "500"}).flush_file_interval_ms == 500
    for bad in ("0", "-5", "1s"):
        with pytest.raises(ConfigError, match=f"flushFileInterval='{bad}'"):
            DLedgerConfig.from_broker_conf({**props, "flushFileInterval": bad})
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


#: (code, length, first 32 hex digits of the SHA-256) of each of MESSAGES' bodies: the wire
#: form is pinned (a change of it would split a group of mixed versions)
WIRE = [
    (6100, 30, "80a6357c3725ca16ed904254fb06e3e7"),
    (6101, 15, "4fab097fa77ae396e41f4aa7f4ba3b1e"),
    (6102, 31, "53902471b11794eafe3673145a12116e"),
    (6103, 15, "12b3363c268a9dfd9e4da508ae7f6999"),
    (6104, 585, "6a48295e9db7f114ee5018b42bc37ef8"),
    (6104, 43, "39f61cfc20243963802e310926b406e2"),
    (6105, 63, "ffc16139b1cc2495ecfe016bd1b41eb4"),
    (6106, 22, "23d4b995aa76a2ad18757405c138b32d"),
    (6107, 46, "b1d29eb7696d54300c284375d48ec1ff"),
    (6108, 14, "a5267b25e2c0f9065cf8387715f220fc"),
]


def _pin(code: int, body: bytes) -> tuple[int, int, str]:
    return code, len(body), hashlib.sha256(body).hexdigest()[:32]


def test_the_wire_bytes_of_every_message_are_pinned(tmp_path: pathlib.Path) -> None:
    assert [_pin(*peer_codec.encode(m)) for m in MESSAGES] == WIRE
    leader = EntryStore.open(str(tmp_path), "n0", data_file_size=4096, index_file_size=32 * 64)
    try:
        entries = []
        for k in range(20):
            body = b"" if k == 0 else b"%02d" % k * 17
            leader.append_at(k, 1, body, magic=MAGIC_NOOP if k == 0 else MAGIC_NORMAL)
            entries.append(Entry(k, 1, body, EntryKind.NOOP if k == 0 else EntryKind.NORMAL))
        m = Append("n0", "n1", 1, -1, 0, tuple(entries), 19)
        assert _pin(*peer_codec.encode(m, leader.read_bytes)) == (
            6104,
            1649,
            "f1ec3c4f0d3f4bc688d8f5246056ff48",
        )
    finally:
        leader.close()


def test_appends_of_the_same_entries_to_several_followers_are_encoded_once(tmp_path: pathlib.Path) -> None:
    leader = EntryStore.open(str(tmp_path), "n0", data_file_size=4096, index_file_size=32 * 64)
    reads: list[tuple[int, int]] = []

    def reader(index: int, size: int) -> bytes:
        reads.append((index, size))
        return leader.read_bytes(index, size)

    try:
        entries = tuple(Entry(k, 1, b"%02d" % k * 9) for k in range(8))
        for e in entries:
            leader.append_at(e.index, e.term, e.data)
        to = {dst: Append("n0", dst, 1, -1, 0, entries[:6], 2) for dst in ("n1", "n2")}
        other = [
            Append("n0", "n2", 1, -1, 0, entries[:6], 3),  # another commit index
            Append("n0", "n2", 1, -1, 0, entries[:5], 2),  # fewer entries
            Append("n0", "n2", 1, -1, 0, (entries[0], *entries[1:5], Entry(5, 1, entries[5].data)), 2),
            Append("n0", "n2", 1, 5, 1, entries[6:], 2),
            Append("n0", "n2", 1, 7, 1, (), 2),
        ]
        tails: peer_codec.AppendTails = {}
        for m in [*to.values(), *other]:
            assert peer_codec.encode(m, reader, tails) == peer_codec.encode(m, leader.read_bytes)
            assert peer_codec.decode(*peer_codec.encode(m, reader, tails)) == m
        # read for each append but the second follower's, which took the first one's encoding
        # (one whose last entry is another object, equal, is encoded on its own)
        six, five = sum(e.size for e in entries[:6]), sum(e.size for e in entries[:5])
        assert reads == [(0, six), (0, six), (0, five), (0, six), (6, 2 * entries[6].size)]
    finally:
        leader.close()


def test_a_decoded_append_reply_is_the_constructed_one() -> None:
    replies = (AppendReply("n1", "n0", 7, True, 9, 9, 8), MESSAGES[6], AppendReply("é", "n0", 1, False, -1))
    for sent in replies:
        got = peer_codec.decode(*peer_codec.encode(sent))
        assert type(got) is AppendReply and got == sent and hash(got) == hash(sent)
        assert repr(got) == repr(sent) and type(got.success) is bool
        with pytest.raises(AttributeError):
            got.match_index = 0  # type: ignore[misc]  # still frozen
    code, body = peer_codec.encode(AppendReply("n1", "n0", 7, True, 9, 9, 8))
    with pytest.raises(RemoteProtocolError, match="raft"):
        peer_codec.decode(code, body[:1] + b"\xff" + body[2:])  # a member id that is no UTF-8
