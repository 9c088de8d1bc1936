"""A follower's write of an append it received (``RaftGroupLog._append_received``): the core's new
entries, when they are the tail of the received ones, go to the store as the block of the
leader's bytes they lie in, and none to the sent cache (dispatch and, after an election, the
transport read them from the store); anything else is left to the other paths."""

from __future__ import annotations

import pathlib
import random

import pytest

from rocketq.ha import peer_codec
from rocketq.ha.driver import RaftGroupLog
from rocketq.ha.driver_config import DLedgerConfig
from rocketq.ha.entry_format import InconsistentAppend
from rocketq.ha.entry_store import EntryStore
from rocketq.ha.raft_types import Append, Entry

DATA = 1 << 16


def member(tmp_path: pathlib.Path) -> RaftGroupLog:
    m = RaftGroupLog(DLedgerConfig(self_id="f", peers=(("f", "127.0.0.1:1"),), data_dir=str(tmp_path)))
    m._store = EntryStore.open(str(tmp_path), "f", data_file_size=DATA)
    return m


def received(leader: EntryStore, first: int, last: int) -> tuple[tuple[Entry, ...], list[bytes]]:
    """What the transport delivers for an append of the leader's entries ``first..last``."""
    entries = tuple(Entry(e.index, e.term, e.body) for e in leader.read_range(first, last - first + 1))
    raw = leader.read_bytes(first, 1 << 30)
    m = Append("l", "f", 1, first - 1, 1, entries, first - 1)
    message, raws = peer_codec.decode_raw(*peer_codec.encode(m, lambda i, n: raw))
    assert isinstance(message, Append) and isinstance(raws, peer_codec.RawEntries)
    return message.entries, raws


def test_received_entries_are_written_from_their_block_and_not_cached(tmp_path: pathlib.Path) -> None:
    rnd = random.Random(7)
    leader = EntryStore.open(str(tmp_path / "l"), "l", data_file_size=DATA)
    f = member(tmp_path / "f")
    with leader, f.store:
        first = 0
        for _ in range(60):
            for _ in range(rnd.randrange(1, 12)):
                leader.append(1, rnd.randbytes(rnd.randrange(0, 600)))
            got, raws = received(leader, max(first - rnd.choice((0, 0, 2)), 0), leader.ledger_end_index)
            skip = first - got[0].index  # a resent append: the core's new ones are its tail
            assert f._append_received(got[skip:], got, raws)
            first = leader.ledger_end_index + 1
            assert f.store.ledger_end_index == leader.ledger_end_index
            assert not f._sent_cache and f._sent_cache.nbytes == 0
            whole = leader.read_bytes(0, 1 << 30)
            assert f._raw_entries(0, len(whole)) == whole  # what an elected member would send
        assert len(leader.data.files) > 1  # the runs crossed data file ends
        assert f.store.read_bytes(0, 1 << 30) == leader.read_bytes(0, 1 << 30)


def test_what_is_not_the_tail_of_the_received_entries_is_left_alone(tmp_path: pathlib.Path) -> None:
    leader = EntryStore.open(str(tmp_path / "l"), "l", data_file_size=DATA)
    f = member(tmp_path / "f")
    with leader, f.store:
        for i in range(4):
            leader.append(1, bytes([i]) * 10)
        got, raws = received(leader, 0, 3)
        assert not f._append_received(got[:2], got, raws)  # not a tail
        assert not f._append_received((Entry(2, 1, b"other"), got[3]), got, raws)  # other entries
        assert not f._append_received(got + got[:1], got, raws)  # more than received
        assert f.store.ledger_end_index == -1 and not f._sent_cache
        assert f._append_received(got, got, list(raws))  # a plain list: joined
        assert f.store.read_bytes(0, 1 << 30) == leader.read_bytes(0, 1 << 30)


def test_a_received_entry_that_does_not_follow_raises_and_is_not_cached(tmp_path: pathlib.Path) -> None:
    leader = EntryStore.open(str(tmp_path / "l"), "l", data_file_size=DATA)
    f = member(tmp_path / "f")
    with leader, f.store:
        for i in range(3):
            leader.append(1, bytes([i]) * 10)
        f.store.append(1, b"x" * 10)  # this log's entry 0 differs from the leader's
        got, raws = received(leader, 1, 2)
        with pytest.raises(
            InconsistentAppend, match="entry 0 of the batch does not follow the log: chainCrc"
        ):
            f._append_received(got, got, raws)
        assert f.store.ledger_end_index == 0 and not f._sent_cache
