"""The Raft core over a log whose leading entries retention deleted (``RaftLog.first_index``):
a follower takes appends whose previous entry it deleted, a leader never builds an append from
entries it no longer has (the follower is logged once and left behind, with no hot loop), and a
follower that catches up is served again."""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence

import pytest

from rocketq.ha.raft import RaftNode
from rocketq.ha.raft_log import Compacted, RaftLog
from rocketq.ha.raft_types import (
    Append,
    AppendReply,
    Entry,
    HardState,
    HeartbeatReply,
    PreVote,
    PreVoteReply,
    RaftConfig,
    Receive,
    Role,
    Send,
    Tick,
    Vote,
    VoteReply,
)

IDS = ("n0", "n1", "n2")


class Reader:
    def __init__(self, entries: dict[int, Entry]) -> None:
        self.entries = entries

    def read(self, lo: int, max_bytes: int, hi: int | None = None) -> Sequence[Entry]:
        return [self.entries[i] for i in range(lo, (max(self.entries) if hi is None else hi) + 1)]


def compacted_log(first: int, last: int, term: int = 1, base_term: int | None = 1) -> RaftLog:
    entries = {i: Entry(i, term, f"e{i}".encode()) for i in range(first, last + 1)}
    return RaftLog.from_store([(first, term)], last, Reader(entries), first_index=first, base_term=base_term)


def node(nid: str, log: RaftLog, commit: int) -> RaftNode:
    cfg = RaftConfig(nid, IDS, heartbeat_interval_ms=100, election_timeout_ms=1000)
    return RaftNode(cfg, random.Random(1), HardState(1, None), log, commit_index=commit, applied_index=commit)


def sent(actions: list[object], kind: type) -> list[object]:
    return [a.message for a in actions if isinstance(a, Send) and isinstance(a.message, kind)]


def test_the_log_view_of_a_deleted_prefix() -> None:
    log = compacted_log(50, 59, base_term=1)
    assert log.first_index == 50 and log.term_at(49) == 1 and log.term_at(55) == 1
    with pytest.raises(Compacted):
        log.term_at(48)
    with pytest.raises(Compacted):
        log.batch(10, 1 << 20)
    assert log.can_send_from(50) and not log.can_send_from(49)
    unknown = compacted_log(50, 59, base_term=None)
    assert not unknown.can_send_from(50) and unknown.can_send_from(51) and not unknown.has(49, 1)


@pytest.mark.parametrize("base_term", [1, None])
def test_a_follower_takes_appends_whose_previous_entry_it_deleted(base_term: int | None) -> None:
    f = node("n1", compacted_log(50, 59, base_term=base_term), commit=59)
    entries = tuple(Entry(i, 1 if i < 60 else 2, f"e{i}".encode()) for i in range(31, 62))
    out = f.step(Receive(Append("n0", "n1", 2, 30, 1, entries, 61)))
    replies = sent(out, AppendReply)
    assert replies and all(r.success for r in replies)
    assert f.log.last_index == 61 and f.commit_index == 61
    # an append right after its committed end, the entry before which it deleted
    g = node("n2", compacted_log(50, 59, base_term=base_term), commit=49)
    out = g.step(Receive(Append("n0", "n2", 2, 49, 1, entries[19:], 61)))
    assert all(r.success for r in sent(out, AppendReply)) and g.log.last_index == 61


def elect(leader: RaftNode) -> list[object]:
    out: list[object] = list(leader.step(Tick(5000)))
    pv = sent(out, PreVote)[0]
    out = list(leader.step(Receive(PreVoteReply("n1", "n0", pv.term, True))))
    v = sent(out, Vote)[0]
    out = list(leader.step(Receive(VoteReply("n1", "n0", v.term, True))))
    assert leader.role is Role.LEADER
    return out


def test_a_leader_does_not_send_entries_it_deleted_and_logs_the_follower_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    leader = node("n0", compacted_log(50, 59), commit=59)
    elect(leader)
    term = leader.term
    with caplog.at_level(logging.ERROR, logger="rocketq.ha.raft"):
        # n1's log ends at 4: it needs entries from 5, deleted here
        out = leader.step(
            Receive(AppendReply("n1", "n0", term, False, -1, reject_index=59, conflict_index=5))
        )
        assert not [m for m in sent(out, Append) if m.dst == "n1"]
        assert leader.unservable == {"n1": 5}
        for _ in range(3):  # its heartbeat replies bring no append and no new log line
            out = leader.step(Receive(HeartbeatReply("n1", "n0", term, last_index=4)))
            assert not [m for m in sent(out, Append) if m.dst == "n1"]
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "follower n1 needs entries from index 5" in errors[0]
    assert "begins at 50" in errors[0]
    # rebuilt from a copy of another member's data (its log now ends at 57): probed there
    out = leader.step(Receive(HeartbeatReply("n1", "n0", term, last_index=57)))
    to_n1 = [m for m in sent(out, Append) if m.dst == "n1"]
    assert to_n1 and to_n1[0].prev_index == 57 and to_n1[0].prev_term == 1
    leader.step(Receive(AppendReply("n1", "n0", term, True, 60, 60, 60)))
    assert "n1" not in leader.unservable
    # n2 has what the leader has: it is served as usual
    out = leader.step(Receive(AppendReply("n2", "n0", term, False, -1, reject_index=59, conflict_index=58)))
    to_n2 = [m for m in sent(out, Append) if m.dst == "n2"]
    assert to_n2 and to_n2[0].prev_index == 57 and to_n2[0].prev_term == 1


class DeletingReader(Reader):
    """A store whose entries before ``begin`` retention deleted while the member ran."""

    def __init__(self, entries: dict[int, Entry], begin: int) -> None:
        super().__init__(entries)
        self.begin = begin

    def read(self, lo: int, max_bytes: int, hi: int | None = None) -> Sequence[Entry]:
        if lo < self.begin:
            raise Compacted(f"entry {lo} was deleted", self.begin, 1)
        return super().read(lo, max_bytes, hi)


def test_entries_deleted_while_the_leader_runs_end_in_the_same_refusal() -> None:
    entries = {i: Entry(i, 1, f"e{i}".encode()) for i in range(60)}
    log = RaftLog.from_store([(0, 1)], 59, DeletingReader(entries, 50))
    leader = node("n0", log, commit=59)
    elect(leader)
    out = leader.step(
        Receive(AppendReply("n1", "n0", leader.term, False, -1, reject_index=59, conflict_index=5))
    )
    assert not [m for m in sent(out, Append) if m.dst == "n1"]
    assert leader.unservable == {"n1": 5} and leader.log.first_index == 50
    # a follower that has what is left is served from the first entry kept
    out = leader.step(
        Receive(AppendReply("n2", "n0", leader.term, False, -1, reject_index=59, conflict_index=50))
    )
    to_n2 = [m for m in sent(out, Append) if m.dst == "n2"]
    assert to_n2 and to_n2[0].prev_index == 49 and to_n2[0].entries[0].index == 50


def test_a_follower_silent_since_the_election_is_probed_where_the_leader_guessed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # a follower down when this leader was elected never answered it. After the resend
    # timeout the leader probes it again; what it knows of that follower is nothing, so it
    # probes after its own last entry (a rejection then says where the follower's log ends),
    # never from index 0: there, retention has deleted the entries, and the follower would be
    # logged as needing a rebuild it does not need
    leader = node("n0", compacted_log(50, 59), commit=59)
    elect(leader)
    term = leader.term
    leader.step(Receive(AppendReply("n2", "n0", term, True, 60, 60, 60)))  # n2 is up to date
    probes: list[Append] = []
    with caplog.at_level(logging.ERROR, logger="rocketq.ha.raft"):
        for _ in range(6):
            out = leader.step(Tick(leader.config.resend_timeout_ms // 2))
            probes += [m for m in sent(out, Append) if m.dst == "n1"]
            leader.step(Receive(HeartbeatReply("n2", "n0", term, last_index=60, verified_index=60)))
    assert leader.role is Role.LEADER and leader.term == term
    assert probes and all(m.prev_index >= 59 for m in probes), [m.prev_index for m in probes]
    assert leader.unservable == {}
    assert not [r for r in caplog.records if r.levelno == logging.ERROR]
    # its first answer says where its log ends: the leader goes there (a fast back-up)
    last_probe = probes[-1].prev_index
    out = leader.step(
        Receive(AppendReply("n1", "n0", term, False, -1, reject_index=last_probe, conflict_index=56))
    )
    to_n1 = [m for m in sent(out, Append) if m.dst == "n1"]
    assert to_n1 and to_n1[0].prev_index == 55
