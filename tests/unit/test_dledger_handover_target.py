"""Whom a stopping DLedger leader hands its leadership to (rocketq.ha.handover), and its keys."""

from __future__ import annotations

import pytest
from tests._support.raft_cluster import Cluster

from rocketq.config import MAX_HANDOVER_TIMEOUT_MS, StoreConfig, from_rocketmq_properties
from rocketq.errors import ConfigError
from rocketq.ha.handover import FollowerView, choose_target, views_of
from rocketq.ha.raft_types import (
    Append,
    AppendReply,
    Heartbeat,
    HeartbeatReply,
    Outcome,
    Propose,
    Role,
    TransferLeadership,
)

LAST = 100


def choose(followers: dict[str, FollowerView], preferred: str | None = None) -> str | None:
    return choose_target(followers, last_index=LAST, preferred=preferred, live_within_ms=400, max_lag=10)


def test_the_preferred_leader_when_it_is_live_and_caught_up_even_behind_another() -> None:
    followers = {"n1": FollowerView(LAST, 10), "n2": FollowerView(LAST - 5, 10)}
    assert choose(followers, preferred="n2") == "n2"
    assert choose(followers) == "n1"


def test_the_highest_match_when_the_preferred_leader_lags_or_is_silent() -> None:
    lagging = {
        "n1": FollowerView(LAST - 3, 10),
        "n2": FollowerView(LAST - 50, 10),
        "n3": FollowerView(LAST - 1, 10),
    }
    assert choose(lagging, preferred="n2") == "n3"
    silent = {"n1": FollowerView(LAST - 3, 10), "n2": FollowerView(LAST, 401)}
    assert choose(silent, preferred="n2") == "n1"


def test_a_silent_follower_is_passed_over_whatever_its_match() -> None:
    followers = {"n1": FollowerView(LAST, 5000), "n2": FollowerView(LAST - 2, 0)}
    assert choose(followers) == "n2"


def test_ties_go_to_the_first_in_member_order() -> None:
    assert choose({"n2": FollowerView(LAST, 1), "n1": FollowerView(LAST, 1)}) == "n2"


def test_the_preferred_leader_being_the_leader_itself_is_no_candidate() -> None:
    assert choose({"n1": FollowerView(LAST, 1)}, preferred="n0") == "n1"


@pytest.mark.parametrize(
    "followers",
    [
        {},
        {"n1": FollowerView(LAST, None), "n2": FollowerView(LAST, None)},  # not heard since election
        {"n1": FollowerView(LAST, 401), "n2": FollowerView(LAST, 9000)},  # silent
        {"n1": FollowerView(LAST - 11, 1), "n2": FollowerView(-1, 1)},  # too far behind
    ],
)
def test_none_when_no_follower_is_live_and_caught_up(followers: dict[str, FollowerView]) -> None:
    assert choose(followers, preferred="n1") is None


def test_the_core_records_when_each_follower_answered_last() -> None:
    c = Cluster(3)  # heartbeats every 100 ms
    leader = c.elect("n0")
    for pid in range(5):
        c.step("n0", Propose(pid, b"m%d" % pid))
    c.deliver()
    views = views_of(leader.progress, leader.now_ms)
    assert list(views) == ["n1", "n2"]
    assert all(v.match == leader.log.last_index and v.heard_ago_ms == 0 for v in views.values())
    c.crash("n1")  # n1 answers nothing from now on
    for _ in range(5):
        c.tick("n0", 100)
        c.deliver()
    views = views_of(leader.progress, leader.now_ms)
    assert views["n1"].heard_ago_ms == 500 and views["n2"].heard_ago_ms == 0
    cfg = leader.config
    assert (
        choose_target(
            views,
            last_index=leader.log.last_index,
            preferred="n1",
            live_within_ms=2 * cfg.heartbeat_interval_ms,
            max_lag=cfg.max_transfer_lag,
        )
        == "n2"
    )


def test_a_new_leader_has_heard_from_nobody_yet() -> None:
    c = Cluster(3)
    n0 = c.node("n0")
    c.tick("n0", 2 * n0.config.election_timeout_ms)
    replication = (Append, AppendReply, Heartbeat, HeartbeatReply)
    c.deliver(lambda m: not isinstance(m, replication))  # the votes only: nobody answered an append
    assert n0.role is Role.LEADER
    views = views_of(n0.progress, n0.now_ms)
    assert all(v.heard_ago_ms is None for v in views.values())
    assert (
        choose_target(views, last_index=n0.log.last_index, preferred=None, live_within_ms=400, max_lag=10)
        is None
    )


def test_the_broker_conf_keys_and_their_bound() -> None:
    cfg = from_rocketmq_properties(
        StoreConfig, {"dLegerHandoverOnShutdown": "false", "dLegerHandoverTimeoutMs": "2500"}
    )
    assert cfg.d_leger_handover_on_shutdown is False and cfg.d_leger_handover_timeout_ms == 2500
    defaults = StoreConfig()
    assert defaults.d_leger_handover_on_shutdown is True and defaults.d_leger_handover_timeout_ms == 1000
    for bad in (0, -1, MAX_HANDOVER_TIMEOUT_MS + 1):
        with pytest.raises(ConfigError, match="d_leger_handover_timeout_ms"):
            StoreConfig(d_leger_handover_timeout_ms=bad)


def test_proposals_waiting_when_the_transfer_starts_are_committed_before_leadership_moves() -> None:
    """What the hand-over relies on (docs/replication.md): under the APPENDED ack policy the
    target's acknowledgement that lets the leader send TimeoutNow also completes the quorum of
    every proposal appended before, so they end SUCCESS (SEND_OK), none TERM_CHANGED."""
    c = Cluster(3)
    c.elect("n0")
    c.deliver()
    for pid in range(10):
        c.step("n0", Propose(pid, b"w%d" % pid))  # appended on n0, not yet sent on
    c.step("n0", TransferLeadership("n1"))
    c.step("n0", Propose(99, b"late"))
    c.deliver()
    assert c.leaders() == ["n1"]
    assert {pid: c.results[pid].outcome for pid in range(10)} == dict.fromkeys(range(10), Outcome.SUCCESS)
    assert c.results[99].outcome is Outcome.LEADER_TRANSFERRING  # refused: definite, not stored
