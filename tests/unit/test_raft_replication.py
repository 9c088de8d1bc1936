"""Unit tests of the Raft core's replication rules: log repair, flow control, leadership transfer,
and the regressions the simulation found."""

from __future__ import annotations

import random

import pytest
from tests._support.raft_cluster import Cluster, sends

from rocketq.ha.raft import RaftNode
from rocketq.ha.raft_types import (
    Append,
    AppendReply,
    Entry,
    HardState,
    Heartbeat,
    HeartbeatReply,
    Outcome,
    Persisted,
    PreVote,
    Propose,
    RaftConfig,
    Receive,
    Role,
    TimeoutNow,
    TransferLeadership,
    TruncateLog,
    Vote,
    is_control,
)

# ------------------------------------------------------------------------------------- log repair


def test_follower_commit_is_bounded_by_the_prefix_verified_against_the_leader() -> None:
    """DLedger #316: a follower must not take the leader's commit index for entries it never checked."""
    ids = ("n0", "n1", "n2")
    stale = tuple(Entry(i, 1, b"old") for i in range(5))
    node = RaftNode(RaftConfig("n1", ids), random.Random(1), HardState(1, None), stale)
    node.step(Receive(Heartbeat("n0", "n1", 2, commit=4)))
    assert node.commit_index == -1  # nothing checked yet
    node.step(Receive(Append("n0", "n1", 2, prev_index=1, prev_term=1, entries=(), commit=4)))
    assert node.commit_index == 1  # only the verified prefix 0..1


def test_fast_backup_skips_a_whole_conflicting_term() -> None:
    c = Cluster(3)
    # n1 holds 40 entries of term 2 nobody else has; n0 and n2 hold 50 of term 3 after a common prefix
    common = [Entry(i, 1, b"a") for i in range(3)]
    c.disks["n1"].log = common + [Entry(i, 2, b"z") for i in range(3, 43)]
    c.disks["n0"].log = common + [Entry(i, 3, b"b") for i in range(3, 53)]
    c.disks["n2"].log = list(c.disks["n0"].log)
    for nid in c.ids:
        c.disks[nid].hard_state = HardState(3, None)
        c.start(nid)
    c.isolate("n1")
    leader = c.elect("n0")
    assert leader.term == 4
    c.heal()
    c.tick("n0", 100)
    c.deliver()
    rejections = [m for m in sends(c.actions["n1"], AppendReply) if not m.success]
    # two round trips for a 40-entry conflict: "my log ends at 42", then "term 2 starts at 3"
    assert [(m.conflict_term, m.conflict_index) for m in rejections] == [(0, 43), (2, 3)]
    assert TruncateLog(3) in c.actions["n1"]
    assert [e.term for e in c.disks["n1"].log] == [1] * 3 + [3] * 50 + [4]


def test_leader_backs_up_to_a_short_follower_end_in_one_step() -> None:
    c = Cluster(3)
    c.elect("n0")
    c.crash("n2")
    for pid in range(30):
        c.step("n0", Propose(pid, b"x"))
    c.deliver()
    c.start("n2")
    c.tick("n0", 100)
    c.deliver()
    rejections = [m for m in sends(c.actions["n2"], AppendReply) if not m.success]
    assert len(rejections) == 1 and rejections[0].conflict_term == 0 and rejections[0].conflict_index == 1
    assert c.node("n2").log.last_index == 30


def test_truncation_at_or_below_the_commit_index_is_refused() -> None:
    ids = ("n0", "n1", "n2")
    entries = tuple(Entry(i, 1, b"x") for i in range(3))
    node = RaftNode(RaftConfig("n1", ids), random.Random(1), HardState(1, None), entries, commit_index=1)
    with pytest.raises(AssertionError, match="at or below its commit index 1"):
        node.step(Receive(Append("n0", "n1", 2, -1, 0, (Entry(0, 1, b"x"), Entry(1, 2, b"y")), commit=1)))
    node = RaftNode(RaftConfig("n1", ids), random.Random(1), HardState(1, None), entries, commit_index=1)
    actions = node.step(Receive(Append("n0", "n1", 2, 1, 1, (Entry(2, 2, b"new"),), commit=1)))
    assert TruncateLog(2) in actions  # above the commit index is fine


# ------------------------------------------------------------------------------------- flow control


def test_inflight_window_bounds_the_appends_to_a_silent_follower() -> None:
    c = Cluster(3, max_inflight_msgs=3, max_batch_bytes=1)
    leader = c.elect("n0")
    c.tick("n0", 100)
    c.deliver()
    assert not leader.progress["n1"].probing
    c.isolate("n1")
    before = len(sends(c.actions["n0"], Append))
    for pid in range(10):
        c.step("n0", Propose(pid, b"x"))
    to_n1 = [m for m in sends(c.actions["n0"], Append)[before:] if m.dst == "n1"]
    assert len(to_n1) == 3  # the window, not 10
    assert len(leader.progress["n1"].inflight) == 3
    c.deliver()  # n2 acks everything: the group commits without n1
    assert leader.commit_index == 10


def test_inflight_byte_window() -> None:
    c = Cluster(3, max_inflight_bytes=300, max_batch_bytes=1)
    leader = c.elect("n0")
    c.tick("n0", 100)
    c.deliver()
    c.isolate("n1")
    before = len(sends(c.actions["n0"], Append))
    for pid in range(10):
        c.step("n0", Propose(pid, b"y" * 100))  # 148 B each with the header
    to_n1 = [m for m in sends(c.actions["n0"], Append)[before:] if m.dst == "n1"]
    assert len(to_n1) == 3  # 148, 296, then 444 ≥ 300 stops
    assert leader.progress["n1"].inflight_bytes == 444


def test_probe_mode_sends_one_append_until_the_follower_answers() -> None:
    c = Cluster(3, max_batch_bytes=1)
    c.tick("n0", 2000)
    c.deliver(lambda m: not isinstance(m, Append | AppendReply))
    leader = c.node("n0")
    assert leader.role is Role.LEADER and leader.progress["n1"].probing
    before = len(sends(c.actions["n0"], Append))
    for pid in range(5):
        c.step("n0", Propose(pid, b"x"))
    assert [m for m in sends(c.actions["n0"], Append)[before:] if m.dst == "n1"] == []
    c.deliver()
    assert not leader.progress["n1"].probing and leader.commit_index == 5


def test_unacknowledged_appends_are_resent_after_the_resend_timeout() -> None:
    c = Cluster(3, resend_timeout_ms=300)
    leader = c.elect("n0")
    c.tick("n0", 100)
    c.deliver()
    c.step("n0", Propose(1, b"lost"))
    c.drop()  # every copy is lost
    c.tick("n0", 300)
    c.deliver(lambda m: isinstance(m, Append | AppendReply))
    assert leader.commit_index == 1 and c.results[1].outcome is Outcome.SUCCESS


# ------------------------------------------------------------------------------------- transfer


def test_leadership_transfer_with_timeout_now() -> None:
    c = Cluster(3)
    c.elect("n0")
    c.tick("n0", 100)
    c.deliver()
    c.step("n0", TransferLeadership("n2"))
    assert sends(c.actions["n0"], TimeoutNow)[-1].dst == "n2"
    c.step("n0", Propose(1, b"x"))
    assert c.results[1].outcome is Outcome.LEADER_TRANSFERRING and c.results[1].outcome.definite
    c.deliver()
    assert c.leaders() == ["n2"] and c.node("n2").term == 2
    votes = sends(c.actions["n2"], Vote)
    assert votes and all(v.transfer for v in votes)  # voters skip the lease for it
    assert not sends(c.actions["n2"], PreVote)


def test_transfer_waits_until_the_target_caught_up() -> None:
    c = Cluster(3)
    c.elect("n0")
    c.tick("n0", 100)
    c.deliver()
    c.isolate("n2")
    for pid in range(5):
        c.step("n0", Propose(pid, b"x"))
    c.deliver()
    c.heal()
    c.step("n0", TransferLeadership("n2"))
    assert not sends(c.actions["n0"], TimeoutNow)  # n2 lacks 5 entries
    c.deliver()
    assert sends(c.actions["n0"], TimeoutNow)[-1].dst == "n2"
    assert c.leaders() == ["n2"] and c.node("n2").log.last_index >= 5


def test_transfer_is_abandoned_after_an_election_timeout() -> None:
    c = Cluster(3)
    leader = c.elect("n0")
    c.tick("n0", 100)
    c.deliver()
    c.isolate("n2")
    c.step("n0", TransferLeadership("n2"))
    c.deliver()
    assert leader.transferee == "n2"
    for _ in range(10):
        c.tick("n0", 100)
        c.tick("n1", 100)
        c.deliver()
    assert leader.role is Role.LEADER and leader.transferee is None
    c.step("n0", Propose(1, b"x"))
    c.deliver()
    assert c.results[1].outcome is Outcome.SUCCESS


def test_preferred_leader_gets_leadership_once_caught_up() -> None:
    c = Cluster(3, preferred_leader_id="n2")
    c.elect("n0")
    for _ in range(3):
        c.tick("n0", 100)
        c.deliver()
    assert c.leaders() == ["n2"]
    for _ in range(30):  # and it keeps it
        for nid in c.ids:
            c.tick(nid, 100)
        c.deliver()
    assert c.leaders() == ["n2"]


def test_preferred_leader_that_lags_too_far_does_not_get_a_transfer() -> None:
    c = Cluster(3, preferred_leader_id="n2", max_transfer_lag=3)
    leader = c.elect("n0")
    c.crash("n2")
    for pid in range(10):
        c.step("n0", Propose(pid, b"x"))
    c.deliver()
    c.start("n2")
    c.step("n2", Receive(Heartbeat("n0", "n2", 1, commit=0)))
    c.deliver(lambda m: isinstance(m, HeartbeatReply))
    assert leader.progress["n2"].recent_active
    assert leader.progress["n2"].accepted == 0  # it has the no-op only
    c.outbox.clear()
    c.tick("n0", 100)
    assert leader.transferee is None  # 10 entries behind > 3


# ------------------------------------------------------------------------------------- plumbing


def test_votes_and_heartbeats_are_control_messages_appends_are_not() -> None:
    assert is_control(Vote("a", "b", 1, -1, 0)) and is_control(Heartbeat("a", "b", 1, -1))
    assert is_control(TimeoutNow("a", "b", 1))
    assert not is_control(Append("a", "b", 1, -1, 0, (), -1))
    assert not is_control(AppendReply("a", "b", 1, True, 0))


def test_config_errors_name_the_problem() -> None:
    with pytest.raises(ValueError, match="not among the members"):
        RaftConfig("n9", ("n0", "n1"))
    with pytest.raises(ValueError, match="below the election timeout"):
        RaftConfig("n0", ("n0",), heartbeat_interval_ms=500, election_timeout_ms=500)
    with pytest.raises(ValueError, match="preferred leader"):
        RaftConfig("n0", ("n0",), preferred_leader_id="n1")
    with pytest.raises(ValueError, match="applied <= commit <= last"):
        RaftNode(RaftConfig("n0", ("n0",)), random.Random(0), commit_index=3)


def test_restart_keeps_term_vote_and_log() -> None:
    c = Cluster(3)
    c.elect("n0")
    c.step("n0", Propose(1, b"x"))
    c.deliver()
    c.crash("n1")
    n1 = c.start("n1")
    assert n1.term == 1 and n1.vote == "n0" and n1.log.last_index == 1
    assert n1.role is Role.FOLLOWER and n1.commit_index == -1


# ----------------------------------------------------------------------------- found by the simulation


def test_regression_restarted_follower_with_a_complete_log_learns_the_commit_index() -> None:
    """Simulation seeds 58/155: a follower restarted after acknowledging everything never got
    another append (the leader thought it current), so heartbeats alone could not raise its
    commit index past its unverified prefix; its heartbeat reply now tells the leader."""
    c = Cluster(3)
    c.elect("n0")
    c.step("n0", Propose(1, b"x"))
    c.deliver()
    c.tick("n0", 100)
    c.deliver()
    c.crash("n2")
    n2 = c.start("n2")
    assert n2.log.last_index == 1 and n2.commit_index == -1
    for _ in range(2):
        c.tick("n0", 100)
        c.deliver()
    assert n2.commit_index == 1 and n2.applied_index == 1


def test_regression_append_reaching_below_the_commit_index_is_checked_there() -> None:
    """Simulation seed 1: a probe from index -1 reached a follower whose commit index was 8;
    the skipped committed part was then compared with the probe's prev term (0), so the
    follower rejected every probe and never caught up."""
    ids = ("n0", "n1", "n2")
    entries = tuple(Entry(i, 1, b"x") for i in range(9))
    node = RaftNode(RaftConfig("n1", ids), random.Random(1), HardState(1, None), entries, commit_index=8)
    batch = tuple(Entry(i, 1, b"x") for i in range(4))
    actions = node.step(Receive(Append("n0", "n1", 2, -1, 0, batch, commit=8)))
    replies = sends(actions, AppendReply)
    assert replies and replies[0].success and replies[0].match_index == 8


def test_no_spurious_resend_after_an_idle_period() -> None:
    c = Cluster(3, resend_timeout_ms=300, election_timeout_ms=3000)
    leader = c.elect("n0")
    for _ in range(20):  # 2 s of heartbeats only
        for nid in c.ids:
            c.tick(nid, 100)
        c.deliver()
    before = len(sends(c.actions["n0"], Append))
    c.step("n0", Propose(1, b"x"))
    c.tick("n0", 100)  # the reply is not in yet: the resend timer started at the send, not 2 s ago
    appends = sends(c.actions["n0"], Append)[before:]
    assert sorted(m.dst for m in appends) == ["n1", "n2"]
    assert not leader.progress["n1"].probing


def test_regression_a_lost_write_ack_does_not_stall_the_commit() -> None:
    """Simulation seed 3050: the followers' acks sent when their writes completed were lost; the
    leader had seen the entries accepted, so it sent nothing more and the entry never committed.
    Heartbeat replies now repeat the written and fsynced positions."""
    c = Cluster(3, auto_persist=False)
    c.tick("n0", 2000)
    c.deliver()
    leader = c.node("n0")
    for nid in c.ids:
        c.step(nid, Persisted(0, 1, True))
    c.drop(lambda m: isinstance(m, AppendReply))  # the acks of the writes are lost
    assert leader.progress["n1"].accepted == 0 and leader.commit_index == -1
    c.tick("n0", 100)
    c.deliver()
    assert leader.commit_index == 0


def test_term_changed_answers_carry_the_term_of_the_proposal() -> None:
    c = Cluster(3)
    c.elect("n0")
    c.isolate("n0")
    c.step("n0", Propose(1, b"x"))
    c.step("n0", Receive(HeartbeatReply("n1", "n0", 9)))  # a reply from a later term
    assert c.results[1].outcome is Outcome.TERM_CHANGED and c.results[1].term == 1
    assert c.node("n0").term == 9 and c.node("n0").role is Role.FOLLOWER


def test_a_failed_transfer_to_the_preferred_leader_backs_off() -> None:
    c = Cluster(3, preferred_leader_id="n2")
    leader = c.elect("n0")
    transferring_ms = 0
    for _ in range(40):  # 4 s; n2 never gets its TimeoutNow
        c.tick("n0", 100)
        c.tick("n1", 100)
        c.drop(lambda m: isinstance(m, TimeoutNow))
        c.deliver()
        transferring_ms += 100 if leader.transferee is not None else 0
    assert leader.role is Role.LEADER
    assert (
        1000 <= transferring_ms <= 2500
    )  # one or two attempts, each up to an election timeout, not all the time
