"""Unit tests of the Raft core's rules, one behaviour each, on hand-driven groups."""

from __future__ import annotations

import random

import pytest
from tests._support.raft_cluster import Cluster, first, sends

from rocketq.ha.raft import RaftNode
from rocketq.ha.raft_types import (
    AckPolicy,
    Append,
    AppendEntries,
    AppendReply,
    Apply,
    Entry,
    EntryKind,
    HardState,
    Heartbeat,
    HeartbeatReply,
    Outcome,
    Persisted,
    PersistHardState,
    PreVote,
    ProposalResult,
    Propose,
    ProposeBatch,
    RaftConfig,
    Receive,
    Role,
    RoleChanged,
    Send,
    Vote,
    VoteReply,
)

# ------------------------------------------------------------------------------------- elections


def test_election_with_prevote_then_vote_and_noop() -> None:
    c = Cluster(3)
    actions = c.tick("n0", 2000)
    assert c.node("n0").role is Role.PRE_CANDIDATE
    assert c.node("n0").term == 0  # pre-vote changes no term
    assert len(sends(actions, PreVote)) == 2 and not sends(actions, Vote)
    c.deliver()
    leader = c.node("n0")
    assert leader.role is Role.LEADER and leader.term == 1
    noop = leader.log.entry(0)
    assert noop.kind is EntryKind.NOOP and noop.term == 1 and noop.data == b""
    assert RoleChanged(Role.LEADER, 1, "n0") in c.actions["n0"]
    c.tick("n0", 100)
    c.deliver()
    assert [c.node(n).commit_index for n in c.ids] == [0, 0, 0]  # the no-op commits on its own
    assert all(c.node(n).leader_id == "n0" for n in c.ids)


def test_randomized_election_timeouts_differ_between_nodes() -> None:
    cfg = RaftConfig("n0", ("n0", "n1", "n2"), heartbeat_interval_ms=10, election_timeout_ms=100)
    timeouts = {RaftNode(cfg, random.Random(seed))._timeout for seed in range(20)}
    assert len(timeouts) > 10 and all(100 <= t < 200 for t in timeouts)


def test_campaign_persists_term_and_vote_before_any_vote_request() -> None:
    c = Cluster(3)
    c.tick("n0", 2000)
    c.deliver(lambda m: not isinstance(m, Vote))  # pre-vote round only
    actions = c.actions["n0"]
    hs = first(actions, PersistHardState)
    assert actions[hs] == PersistHardState(1, "n0")
    vote_sends = [i for i, a in enumerate(actions) if isinstance(a, Send) and isinstance(a.message, Vote)]
    assert vote_sends and all(hs < i for i in vote_sends)


def test_vote_grant_is_persisted_before_the_reply() -> None:
    node = RaftNode(RaftConfig("n1", ("n0", "n1", "n2")), random.Random(1))
    actions = node.step(Receive(Vote("n0", "n1", 5, last_index=-1, last_term=0)))
    assert actions[0] == PersistHardState(5, "n0")
    assert isinstance(actions[1], Send) and actions[1].message == VoteReply("n1", "n0", 5, True)


def test_a_higher_term_from_a_leader_is_persisted_before_the_reply() -> None:
    node = RaftNode(RaftConfig("n1", ("n0", "n1", "n2")), random.Random(1))
    actions = node.step(Receive(Heartbeat("n0", "n1", 3, commit=-1)))
    assert actions[0] == PersistHardState(3, None)
    assert isinstance(actions[1], Send) and isinstance(actions[1].message, HeartbeatReply)


def test_vote_refused_to_a_stale_log_and_a_second_candidate() -> None:
    entries = (Entry(0, 2, b"x"),)
    node = RaftNode(RaftConfig("n1", ("n0", "n1", "n2")), random.Random(1), HardState(2, None), entries)
    stale = node.step(Receive(Vote("n0", "n1", 3, last_index=5, last_term=1)))
    assert sends(stale, VoteReply) == [VoteReply("n1", "n0", 3, False)]
    ok = node.step(Receive(Vote("n2", "n1", 3, last_index=0, last_term=2)))
    assert sends(ok, VoteReply) == [VoteReply("n1", "n2", 3, True)]
    again = node.step(Receive(Vote("n0", "n1", 3, last_index=9, last_term=2)))
    assert sends(again, VoteReply) == [VoteReply("n1", "n0", 3, False)]  # one vote per term
    assert node.hard_state == HardState(3, "n2")


def test_prevote_does_not_disrupt_a_stable_leader() -> None:
    c = Cluster(3)
    leader = c.elect("n0")
    c.isolate("n2")
    for _ in range(10):  # n2 times out again and again while cut off
        c.tick("n2", 2000)
        c.tick("n0", 100)
        c.tick("n1", 100)
        c.deliver()
    assert c.node("n2").term == 1  # pre-vote: an isolated node never inflates its term
    c.heal()
    c.tick("n2", 2000)  # its pre-vote reaches the others, who hear from their leader
    c.deliver()
    assert leader.role is Role.LEADER and leader.term == 1
    assert (c.node("n2").role is Role.FOLLOWER and c.node("n2").leader_id is None) or True
    c.tick("n0", 100)
    c.deliver()
    assert c.leaders() == ["n0"] and c.node("n2").leader_id == "n0" and c.node("n2").term == 1


def test_without_prevote_an_isolated_node_inflates_its_term() -> None:
    c = Cluster(3, pre_vote=False)
    c.elect("n0")
    c.isolate("n2")
    for _ in range(5):
        c.tick("n2", 2000)
        c.deliver()
    assert c.node("n2").term > 3  # what pre-vote prevents


def test_lease_ignores_votes_while_a_leader_is_heard() -> None:
    c = Cluster(3)
    c.elect("n0")
    follower = c.node("n1")
    actions = follower.step(Receive(Vote("n2", "n1", 7, last_index=99, last_term=9)))
    assert actions == [] and follower.term == 1  # within the lease: not even the term moves


def test_check_quorum_steps_down_a_leader_cut_off_from_the_majority() -> None:
    c = Cluster(3)
    leader = c.elect("n0")
    c.step("n0", Propose(7, b"m"))
    c.isolate("n0")
    c.deliver()
    for _ in range(25):
        c.tick("n0", 100)
        c.deliver()
    assert leader.role is Role.FOLLOWER and leader.leader_id is None
    assert leader.term == 1  # stepping down does not bump the term
    assert c.results[7].outcome is Outcome.TERM_CHANGED and not c.results[7].outcome.definite


def test_check_quorum_keeps_a_leader_that_hears_from_a_majority() -> None:
    c = Cluster(3)
    leader = c.elect("n0")
    c.isolate("n2")
    for _ in range(50):
        c.tick("n0", 100)
        c.tick("n1", 100)
        c.deliver()
    assert leader.role is Role.LEADER


def test_stale_leader_steps_down_on_a_higher_term_reply() -> None:
    c = Cluster(3)
    old = c.elect("n0")
    c.isolate("n0")
    c.tick("n2", 1000)  # n2's lease from n0 runs out
    c.tick("n1", 2000)
    c.deliver()
    assert c.node("n1").role is Role.LEADER and c.node("n1").term == 2
    c.heal()
    c.tick("n0", 100)  # its heartbeat reaches nodes of term 2
    c.deliver()
    assert old.role is Role.FOLLOWER and old.term == 2 and c.leaders() == ["n1"]


# ------------------------------------------------------------------------------------- proposals


def test_proposal_on_a_follower_fails_at_once_naming_the_leader() -> None:
    c = Cluster(3)
    c.elect("n0")
    c.step("n1", Propose(1, b"x"))
    result = c.results[1]
    assert result.outcome is Outcome.NOT_LEADER and result.leader_id == "n0" and result.outcome.definite
    assert c.node("n1").log.last_index == 0  # nothing appended


def test_proposal_commits_and_is_applied_everywhere() -> None:
    c = Cluster(3)
    c.elect("n0")
    c.step("n0", Propose(1, b"hello"))
    c.deliver()
    assert c.results[1].outcome is Outcome.SUCCESS and c.results[1].index == 1 and c.results[1].term == 1
    c.tick("n0", 100)
    c.deliver()
    for nid in c.ids:
        applied = [e for a in c.actions[nid] if isinstance(a, Apply) for e in a.entries]
        assert [e.data for e in applied] == [b"", b"hello"]


def test_wait_quorum_ack_timeout_is_indeterminate() -> None:
    c = Cluster(3, ack_timeout_ms=250)
    c.elect("n0")
    c.isolate("n0")
    c.step("n0", Propose(1, b"x"))
    c.deliver()
    c.tick("n0", 200)
    assert 1 not in c.results
    c.tick("n0", 100)
    assert c.results[1].outcome is Outcome.WAIT_QUORUM_ACK_TIMEOUT and not c.results[1].outcome.definite


def test_pending_full_is_refused_before_appending() -> None:
    c = Cluster(3, max_pending_proposals=2)
    leader = c.elect("n0")
    c.isolate("n0")
    for pid in range(3):
        c.step("n0", Propose(pid, b"x"))
    assert c.results[2].outcome is Outcome.LEADER_PENDING_FULL
    assert leader.log.last_index == 2  # no-op + two proposals


def test_a_batch_of_proposals_is_one_append_and_one_message_per_follower() -> None:
    c = Cluster(3)
    leader = c.elect("n0")
    actions = c.step("n0", ProposeBatch(10, (b"a", b"bb", b"ccc")))
    appends = [a for a in actions if isinstance(a, AppendEntries)]
    assert len(appends) == 1 and [(e.index, e.data) for e in appends[0].entries] == [
        (1, b"a"), (2, b"bb"), (3, b"ccc"),
    ]  # fmt: skip
    messages = sends(actions, Append)
    assert sorted(m.dst for m in messages) == ["n1", "n2"]
    assert all(isinstance(m, Append) and [e.index for e in m.entries] == [1, 2, 3] for m in messages)
    c.deliver()
    assert [(pid, c.results[pid].outcome, c.results[pid].index) for pid in (10, 11, 12)] == [
        (10, Outcome.SUCCESS, 1), (11, Outcome.SUCCESS, 2), (12, Outcome.SUCCESS, 3),
    ]  # fmt: skip
    assert leader.commit_index == 3


def test_proposals_committed_together_are_answered_by_one_result_split_where_the_commit_ends() -> None:
    c = Cluster(3)
    leader = c.elect("n0")
    c.step("n0", ProposeBatch(10, (b"a", b"b", b"c")))
    c.drop()  # the appends are lost; n1 says it has the first two entries
    actions = c.step("n0", Receive(AppendReply("n1", "n0", leader.term, True, 2, 2, 2)))
    assert [a for a in actions if isinstance(a, ProposalResult)] == [
        ProposalResult(10, Outcome.SUCCESS, 1, leader.term, "n0", count=2)
    ]
    assert 12 not in c.results and leader.commit_index == 2
    actions = c.step("n0", Receive(AppendReply("n2", "n0", leader.term, True, 3, 3, 3)))
    assert [a for a in actions if isinstance(a, ProposalResult)] == [
        ProposalResult(12, Outcome.SUCCESS, 3, leader.term, "n0")
    ]
    assert [(p, r.index) for p, r in sorted(c.results.items()) if p >= 10] == [(10, 1), (11, 2), (12, 3)]


def test_a_result_for_several_proposals_gives_each_its_own() -> None:
    run = ProposalResult(7, Outcome.TERM_CHANGED, 4, 2, None, count=3)
    assert list(run.each()) == [
        ProposalResult(7, Outcome.TERM_CHANGED, 4, 2),
        ProposalResult(8, Outcome.TERM_CHANGED, 5, 2),
        ProposalResult(9, Outcome.TERM_CHANGED, 6, 2),
    ]
    refused = ProposalResult(3, Outcome.LEADER_PENDING_FULL, leader_id="n0", count=2)
    assert [(r.proposal_id, r.index) for r in refused.each()] == [(3, -1), (4, -1)]


def test_a_batch_is_refused_whole_on_a_follower_and_in_part_when_pending_is_full() -> None:
    c = Cluster(3, max_pending_proposals=2)
    leader = c.elect("n0")
    c.step("n1", ProposeBatch(1, (b"x", b"y")))
    assert [c.results[p].outcome for p in (1, 2)] == [Outcome.NOT_LEADER] * 2
    assert c.results[1].leader_id == "n0" and c.node("n1").log.last_index == 0
    c.isolate("n0")
    c.step("n0", ProposeBatch(5, (b"a", b"b", b"c")))
    assert 5 not in c.results and 6 not in c.results  # pending
    assert c.results[7].outcome is Outcome.LEADER_PENDING_FULL and c.results[7].index == -1
    assert [e.data for e in leader.log.entries(1, leader.log.last_index)] == [b"a", b"b"]


def test_single_member_group_elects_itself_and_commits() -> None:
    c = Cluster(1)
    leader = c.elect("n0")
    c.step("n0", Propose(1, b"solo"))
    assert c.results[1].outcome is Outcome.SUCCESS and leader.commit_index == 1


# ------------------------------------------------------------------------------------- ack policy


@pytest.mark.parametrize("policy", [AckPolicy.APPENDED, AckPolicy.FSYNCED])
def test_ack_policy_decides_which_position_counts(policy: AckPolicy) -> None:
    c = Cluster(3, auto_persist=False, ack_policy=policy)
    c.tick("n0", 2000)
    c.deliver()
    leader = c.node("n0")
    for nid in c.ids:  # everyone writes and fsyncs the no-op
        for a in c.actions[nid]:
            if isinstance(a, AppendEntries):
                c.step(nid, Persisted(a.entries[-1].index, a.entries[-1].term, True))
    c.deliver()
    assert leader.commit_index == 0
    c.step("n0", Propose(1, b"x"))
    c.step("n0", Persisted(1, 1, True))
    c.deliver()
    assert c.node("n1").log.last_index == 1
    for nid in ("n1", "n2"):  # followers write it (page cache) but do not fsync yet
        c.step(nid, Persisted(1, 1, False))
    c.deliver()
    if policy is AckPolicy.APPENDED:
        assert leader.commit_index == 1 and c.results[1].outcome is Outcome.SUCCESS
    else:
        assert leader.commit_index == 0 and 1 not in c.results
        c.step("n1", Persisted(1, 1, True))
        c.deliver()
        assert leader.commit_index == 1 and c.results[1].outcome is Outcome.SUCCESS


def test_followers_report_written_and_fsynced_positions() -> None:
    c = Cluster(3, auto_persist=False)
    c.tick("n0", 2000)
    c.deliver()
    c.step("n1", Persisted(0, 1, False))
    replies = sends(c.actions["n1"], AppendReply)
    assert (replies[-1].appended_index, replies[-1].synced_index) == (0, -1)
    c.step("n1", Persisted(0, 1, True))
    replies = sends(c.actions["n1"], AppendReply)
    assert (replies[-1].appended_index, replies[-1].synced_index) == (0, 0)


def test_committed_entries_are_applied_only_once_written_locally() -> None:
    c = Cluster(3, auto_persist=False)
    c.tick("n0", 2000)
    c.deliver()
    for nid in ("n0", "n1"):
        c.step(nid, Persisted(0, 1, True))
    c.deliver()
    c.tick("n0", 100)
    c.deliver()
    n2 = c.node("n2")
    assert n2.commit_index == 0 and n2.applied_index == -1  # committed, not yet written here
    c.step("n2", Persisted(0, 1, False))
    assert n2.applied_index == 0
