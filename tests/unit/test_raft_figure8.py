"""Raft paper Figure 8, as spec/replication.md §1.3 tells it for DLedger 0.3.1.2.

A leader must not commit an entry of an earlier term by counting the replicas that hold it
(Raft §5.4.2): that entry can still be overwritten by a candidate whose last term is higher.
DLedger 0.3.1.2 takes the median match index whatever the entry's term, so it commits such an
entry; consumers then read a message that vanishes. The schedule below drives three cores step
by step into that situation; with our rule nothing is committed, with DLedger's the entry is
committed and then truncated (our truncation guard fires).
"""

from __future__ import annotations

import pytest
from tests._support.raft_cluster import Cluster

from rocketq.ha.raft import RaftNode
from rocketq.ha.raft_types import (
    Append,
    Message,
    PreVote,
    PreVoteReply,
    Propose,
    Role,
    TruncateLog,
    Vote,
    VoteReply,
)

VOTES = (PreVote, PreVoteReply, Vote, VoteReply)


class MedianCommitNode(RaftNode):
    """DLedger 0.3.1.2's QuorumAckChecker: commit the median match index, whatever its term."""

    def _maybe_commit(self) -> None:
        matches = sorted([self._own_match(), *(pr.match for pr in self.progress.values())], reverse=True)
        self.commit_index = max(self.commit_index, matches[self.config.quorum - 1])


def between(a: str, b: str) -> object:
    return lambda m: isinstance(m, VOTES) and {m.src, m.dst} == {a, b}


def campaign(c: Cluster, nid: str, voter: str) -> None:
    """``nid`` campaigns until it wins with ``voter``'s vote; other traffic is dropped."""
    for _ in range(3):
        c.tick(nid, 2 * c.node(nid).config.election_timeout_ms)
        c.deliver(between(nid, voter))
        c.drop()
        if c.node(nid).role is Role.LEADER:
            return
    raise AssertionError(f"{nid} did not win with {voter}'s vote")


def lead_to_figure8(c: Cluster) -> None:
    s1, s2, s3 = c.ids
    # 1. s1 leads term 1 with s2's vote; its no-op and the entry e1 stay on s1 only; s1 crashes
    campaign(c, s1, s2)
    c.step(s1, Propose(1, b"e1"))
    c.drop()
    c.crash(s1)
    # 2. s3 leads term 2 with s2's vote; its no-op and e2' stay on s3 only; s3 crashes
    campaign(c, s3, s2)
    c.step(s3, Propose(2, b"e2'"))
    c.drop()
    c.crash(s3)
    # 3. s1 restarts and leads term 3 with s2's vote, then copies its term-1 entries to s2, one per
    #    message, but its term-3 no-op (index 2) never reaches s2
    c.start(s1)
    campaign(c, s1, s2)
    assert c.node(s1).term == 3 and c.node(s1).log.last_index == 2

    def not_index2(m: Message) -> bool:  # (s2 rejects the first probe, which carries index 2)
        has2 = isinstance(m, Append) and any(e.index == 2 for e in m.entries)
        return not (has2 and len(c.disks[s2].log) == 2)

    c.tick(s1, 100)  # a heartbeat round; the reply restarts replication to s2
    c.deliver(lambda m: not_index2(m) and {m.src, m.dst} == {s1, s2})
    assert [e.term for e in c.disks[s2].log] == [1, 1]  # e1 is on a majority: s1 and s2


def test_figure8_old_term_entry_not_committed_by_counting_replicas() -> None:
    c = Cluster(3, max_batch_bytes=1)
    s1, s2, s3 = c.ids
    lead_to_figure8(c)
    leader = c.node(s1)
    assert leader.progress[s2].match == 1  # counting replicas alone: index 1 is on 2 of 3
    assert leader.commit_index == -1  # …but its term is 1, not 3: not committed
    # one heartbeat round: s2 must not learn a commit index either
    c.tick(s1, 100)
    c.deliver(lambda m: not isinstance(m, Append))
    assert c.node(s2).commit_index == -1
    # 4. s1 crashes; s3 restarts, its last term 2 beats s2's 1, it wins term 4 and overwrites e1
    c.drop()
    c.crash(s1)
    c.start(s3)
    c.tick(s2, 1000)  # s2's lease from s1 runs out (its own timeout is later)
    assert c.node(s2).role is Role.FOLLOWER
    campaign(c, s3, s2)
    c.tick(s3, 100)
    c.deliver(lambda m: {m.src, m.dst} == {s3, s2})
    assert TruncateLog(0) in c.actions[s2]
    assert [(e.term, e.data) for e in c.disks[s2].log] == [(2, b""), (2, b"e2'"), (4, b"")]
    assert c.node(s3).commit_index == 2  # the term-4 no-op commits e2' with it
    # neither proposal was answered (their leaders crashed): e1 was indeterminate, so losing it is
    # allowed; had it been committed (and read by a consumer), losing it would not be
    assert not c.results


def test_figure8_with_dledger_0312_commit_rule_loses_a_committed_entry() -> None:
    c = Cluster(3, max_batch_bytes=1, node_class=MedianCommitNode)
    s1, s2, s3 = c.ids
    lead_to_figure8(c)
    assert c.node(s1).commit_index == 1  # committed by counting replicas
    c.tick(s1, 100)
    c.deliver(lambda m: not isinstance(m, Append))
    assert c.node(s2).commit_index == 1  # and s2 applies it: a consumer could read e1
    c.drop()
    c.crash(s1)
    c.start(s3)
    c.tick(s2, 1000)
    campaign(c, s3, s2)
    c.tick(s3, 100)
    with pytest.raises(AssertionError, match="at or below its commit index"):
        c.deliver(lambda m: {m.src, m.dst} == {s3, s2})
