"""The chaos checker (rocketq.testing.chaos.check): each anomaly class trips on a hand-made
history, event log or replica set that has it, and a clean one trips nothing."""

from __future__ import annotations

from typing import Any

import pytest

from rocketq.testing.chaos.check import (
    ANOMALY_CLASSES,
    CheckResult,
    ReplicaDump,
    check,
    check_committed_prefix,
    check_events,
    check_history,
    check_replicas,
)
from rocketq.testing.chaos.history import Op, Read

T = "T"


def send(process: str, payload: str, phase: str, queue: int = -1, offset: int = -1, **kw: Any) -> list[Op]:
    """An invoke and its completion."""
    inv = Op(process, "send", "invoke", topic=T, payload=payload, **kw)
    done = Op(process, "send", phase, topic=T, payload=payload, queue=queue, offset=offset, **kw)  # type: ignore[arg-type]
    return [inv, done]


def poll(process: str, queue: int, *reads: tuple[int, str]) -> Op:
    return Op(process, "poll", "ok", topic=T, queue=queue, reads=tuple(Read(o, p) for o, p in reads))


def drain(queue: int, *reads: tuple[int, str], node: str = "leader") -> Op:
    return Op(
        "drain", "drain", "ok", topic=T, queue=queue, node=node, reads=tuple(Read(o, p) for o, p in reads)
    )


def clean_history() -> list[Op]:
    ops: list[Op] = []
    ops += send("p0", "p0-0", "ok", 0, 0, key="k0")
    ops += send("p0", "p0-1", "ok", 0, 1, key="k0")
    ops += send("p1", "p1-0", "info", key="k1")  # indeterminate, never read: fine
    ops += send("p1", "p1-1", "fail", key="k1")  # definitely failed, never read: fine
    ops += send("p1", "p1-2", "ok", 1, 0, key="k1")
    ops += send("p2", "p2-0", "info")  # indeterminate and read: recovered
    ops.append(poll("c0", 0, (0, "p0-0"), (1, "p0-1")))
    ops.append(poll("c1", 1, (0, "p1-2")))
    ops.append(poll("c1", 1, (1, "p2-0")))
    ops.append(drain(0, (0, "p0-0"), (1, "p0-1")))
    ops.append(drain(1, (0, "p1-2"), (1, "p2-0")))
    return ops


def only(result: CheckResult) -> dict[str, int]:
    return result.anomalies


def test_a_clean_history_has_no_anomaly() -> None:
    res = check_history(clean_history())
    assert res.valid, str(res)
    assert set(res.counts) == set(ANOMALY_CLASSES)
    assert res.stats["acked"] == 3 and res.stats["recovered"] == 1 and res.stats["definitely_failed"] == 1
    assert str(res).startswith("valid")


def test_lost_an_acked_send_never_read() -> None:
    ops = clean_history() + send("p3", "p3-0", "ok", 2, 0)
    res = check_history(ops)
    assert only(res) == {"lost": 1}
    assert "p3-0" in res.examples["lost"][0]
    assert "lost: 1" in str(res)


def test_unexpected_a_read_never_sent() -> None:
    ops = [*clean_history(), drain(2, (0, "ghost"))]
    assert only(check_history(ops)) == {"unexpected": 1}


def test_g1a_a_definitely_failed_send_that_was_read() -> None:
    ops = clean_history() + send("p4", "p4-0", "fail") + [drain(3, (0, "p4-0"))]
    assert only(check_history(ops)) == {"g1a": 1}


def test_a_failed_then_indeterminate_payload_that_was_read_is_no_g1a() -> None:
    ops = clean_history() + send("p4", "p4-0", "fail") + send("p4", "p4-0", "info", attempt=1)
    ops.append(drain(3, (0, "p4-0")))
    res = check_history(ops)
    assert res.valid, str(res)
    assert res.stats["recovered"] == 2


def test_duplicate_without_an_indeterminate_attempt() -> None:
    ops = clean_history() + send("p5", "p5-0", "ok", 2, 0) + [drain(2, (0, "p5-0"), (1, "p5-0"))]
    assert only(check_history(ops)) == {"duplicate": 1}


def test_duplicate_after_an_indeterminate_attempt_is_counted_apart() -> None:
    ops = clean_history() + send("p5", "p5-0", "info") + send("p5", "p5-0", "ok", 2, 1, attempt=1)
    ops.append(drain(2, (0, "p5-0"), (1, "p5-0")))
    res = check_history(ops)
    assert res.valid, str(res)
    assert res.stats["duplicates_after_indeterminate"] == 1


def test_duplicate_after_sdk_retries_is_allowed() -> None:
    ops = clean_history() + send("p5", "p5-0", "ok", 2, 1, client_retries=2)
    ops.append(drain(2, (0, "p5-0"), (1, "p5-0")))
    res = check_history(ops)
    assert res.valid and res.stats["duplicates_after_indeterminate"] == 1


def test_inconsistent_offset_two_payloads_at_one_offset_across_replicas() -> None:
    ops = [*clean_history(), drain(0, (0, "p0-0"), (1, "p1-0"), node="n2")]
    res = check_history(ops)
    assert only(res) == {"inconsistent_offset": 1}
    assert "T/0/1" in res.examples["inconsistent_offset"][0]


def test_inconsistent_offset_ack_and_read_disagree() -> None:
    ops = clean_history()
    ops[3] = Op("p0", "send", "ok", topic=T, payload="p0-1", queue=0, offset=5, key="k0")
    res = check_history(ops)
    assert res.counts["inconsistent_offset"] >= 1
    assert set(res.anomalies) == {"inconsistent_offset"}


def test_nonmonotonic_send() -> None:
    ops = clean_history() + send("p0", "p0-2", "ok", 0, 1, key="k0")  # offset 1 acked twice
    ops.append(drain(0, (2, "p0-2")))
    res = check_history(ops)
    assert res.counts["nonmonotonic_send"] == 1


def test_poll_skip_and_nonmonotonic_poll() -> None:
    ops = [*clean_history(), poll("c0", 0, (3, "p0-1"))]
    res = check_history(ops)
    assert res.counts["poll_skip"] == 1
    ops = [*clean_history(), poll("c0", 0, (0, "p0-0"))]
    assert only(check_history(ops)) == {"nonmonotonic_poll": 1}


def test_an_assignment_change_resets_the_consumer_s_positions() -> None:
    ops = [*clean_history(), Op("c0", "assign", "ok", queues=(0, 1)), poll("c0", 0, (0, "p0-0"))]
    assert check_history(ops).valid


def test_a_hole_in_a_drain_is_a_poll_skip() -> None:
    ops = [*clean_history(), drain(1, (0, "p1-2"), (2, "p2-0"), node="n1")]
    assert check_history(ops).counts["poll_skip"] == 1


def test_order_per_key() -> None:
    ops: list[Op] = []
    ops += send("p0", "a", "ok", 0, 1, key="k")
    ops += send("p0", "b", "ok", 0, 0, key="k")
    ops.append(drain(0, (0, "b"), (1, "a")))
    res = check_history(ops)
    assert res.counts["order"] == 1
    assert res.counts["nonmonotonic_send"] == 1
    # without a drain the consumers' reads are the log
    ops = [*ops[:-1], poll("c", 0, (0, "b")), poll("c", 0, (1, "a"))]
    assert check_history(ops).counts["order"] == 1


def test_order_accepts_extra_and_repeated_reads() -> None:
    ops: list[Op] = []
    ops += send("p0", "a", "ok", 0, 0, key="k")
    ops += send("p0", "x", "info", key="k")
    ops += send("p0", "b", "ok", 0, 2, key="k")
    ops.append(drain(0, (0, "a"), (1, "x"), (2, "b")))
    assert check_history(ops).valid


# -- Raft events ------------------------------------------------------------------------------
def ev(kind: str, node: str, pid: int = 1, **fields: Any) -> dict[str, Any]:
    return {"ev": kind, "node": node, "pid": pid, **fields}


def clean_events() -> list[dict[str, Any]]:
    return [
        ev("start", "n0", term=0, ledgerEnd=-1, commit=-1),
        ev("start", "n1", term=0, ledgerEnd=-1, commit=-1),
        ev("vote", "n1", term=1, candidate="n0"),
        ev("role", "n0", role="LEADER", term=1, leader="n0", ledgerEnd=-1, commit=-1),
        ev("role", "n1", role="FOLLOWER", term=1, leader="n0", ledgerEnd=-1, commit=-1),
        ev("commit", "n0", commit=0),
        ev("commit", "n0", commit=5),
        ev("truncate", "n1", role="FOLLOWER", term=1, commit=3, **{"from": 4, "to": 6}),
        ev("commit", "n1", commit=5),
        ev("role", "n1", role="LEADER", term=2, leader="n1", ledgerEnd=5, commit=5),
        ev("stop", "n0", commit=5),
        # a restart: a new process may start below what the old one reached (the checkpoint lags)
        ev("start", "n0", pid=2, term=2, ledgerEnd=5, commit=2),
        ev("commit", "n0", pid=2, commit=3),
    ]


def test_clean_events_have_no_anomaly() -> None:
    res = check_events(clean_events())
    assert res.valid, str(res)
    assert res.stats["leader_terms"] == 2


def test_election_safety_two_leaders_in_one_term() -> None:
    res = check_events(
        [*clean_events(), ev("role", "n2", role="LEADER", term=2, leader="n2", ledgerEnd=5, commit=4)]
    )
    assert only(res) == {"election_safety": 1}


def test_commit_regression_within_a_process() -> None:
    assert only(check_events([*clean_events(), ev("commit", "n0", pid=2, commit=1)])) == {
        "commit_regression": 1
    }


def test_commit_regression_start_past_the_last_index() -> None:
    bad = ev("start", "n2", term=1, ledgerEnd=3, commit=4)
    assert only(check_events([*clean_events(), bad])) == {"commit_regression": 1}


def test_truncation_below_commit_and_by_a_leader() -> None:
    below = ev("truncate", "n1", role="FOLLOWER", term=2, commit=5, **{"from": 5, "to": 7})
    assert only(check_events([*clean_events(), below])) == {"truncation_below_commit": 1}
    leader = ev("truncate", "n1", role="LEADER", term=2, commit=5, **{"from": 7, "to": 8})
    assert only(check_events([*clean_events(), leader])) == {"leader_truncation": 1}


# -- replicas ---------------------------------------------------------------------------------
def dump(
    node: str, entries: list[tuple[int, int, int, int]], committed: int, data: bytes | None = None
) -> ReplicaDump:
    return ReplicaDump(node, entries, committed, data=data)


ENTRIES = [(0, 1, 0, 11), (1, 1, 60, 12), (2, 2, 120, 13)]


def test_identical_replicas_are_clean() -> None:
    data = bytes(range(200))
    res = check_replicas([dump("n0", ENTRIES, 2, data), dump("n1", ENTRIES[:2], 1, data[:120])])
    assert res.valid, str(res)


def test_an_uncommitted_tail_of_another_term_may_differ() -> None:
    other = [*ENTRIES[:2], (2, 3, 120, 99)]
    assert check_replicas([dump("n0", ENTRIES, 1), dump("n1", other, 1)]).valid


@pytest.mark.parametrize(
    "other",
    [
        [(0, 1, 0, 11), (1, 1, 60, 99), (2, 2, 120, 13)],  # a committed entry differs
        [(0, 1, 0, 11), (1, 1, 60, 12), (2, 2, 120, 77)],  # same index and term, different entry
    ],
)
def test_replica_divergence(other: list[tuple[int, int, int, int]]) -> None:
    res = check_replicas([dump("n0", ENTRIES, 1), dump("n1", other, 1)])
    assert only(res) == {"replica_divergence": 1}


def test_replica_divergence_in_the_data_bytes() -> None:
    data = bytes(range(200))
    bad = data[:30] + b"\xff" + data[31:]
    res = check_replicas([dump("n0", ENTRIES, 2, data), dump("n1", ENTRIES, 2, bad)])
    assert only(res) == {"replica_divergence": 1}
    # a difference after the shortest committed end is not one
    late = data[:150] + b"\xff" + data[151:]
    assert check_replicas([dump("n0", ENTRIES, 2, data), dump("n1", ENTRIES, 2, late)]).valid


def test_cq_divergence() -> None:
    a = ReplicaDump("n0", ENTRIES, 2, consume_queues={(T, 0, 0): 48, (T, 0, 1): 108})
    b = ReplicaDump("n1", ENTRIES, 2, consume_queues={(T, 0, 0): 48, (T, 0, 1): 168})
    assert only(check_replicas([a, b])) == {"cq_divergence": 1}
    assert check_replicas([a, ReplicaDump("n1", ENTRIES, 2, consume_queues={(T, 0, 0): 48})]).valid


def test_check_merges_every_part() -> None:
    res = check(
        clean_history() + send("p3", "p3-0", "ok", 2, 0),
        [*clean_events(), ev("role", "n2", role="LEADER", term=1, leader="n2", ledgerEnd=0, commit=0)],
        [dump("n0", ENTRIES, 1), dump("n1", [(0, 1, 0, 10)], 1)],
    )
    assert res.anomalies == {"lost": 1, "election_safety": 1, "replica_divergence": 3}
    assert not res.valid
    text = str(res)
    assert text.startswith("INVALID") and "election_safety: 1" in text


def test_committed_overwritten() -> None:
    events = [ev("commit", "n0", commit=1, term=1), ev("commit", "n1", commit=2, term=2)]
    assert check_committed_prefix(events, [dump("n0", ENTRIES, 2), dump("n1", ENTRIES[:2], 1)]).valid
    changed = [(0, 1, 0, 11), (1, 3, 60, 40)]  # index 1 reported committed in term 1, now term 3
    res = check_committed_prefix(events, [dump("n0", ENTRIES, 2), dump("n2", changed, 1)])
    assert only(res) == {"committed_overwritten": 1}
    assert "index 1 committed in term 1" in res.examples["committed_overwritten"][0]


def test_a_dead_leaders_unsent_tail_is_not_an_overwrite() -> None:
    """A leader of term 1 killed with entries 1 and 2 written but never sent: the leader of term 2
    commits other entries at those indexes. The killed member's files still hold its term-1 tail
    (it was not restarted, so nothing cut it): not an anomaly. The same tail followed by an entry
    of term 2 is one (such a log would have been cut at index 1 before taking term 2's entries)."""
    events = [ev("commit", "n1", commit=1, term=2), ev("commit", "n1", commit=2, term=2)]
    new = [(0, 1, 0, 11), (1, 2, 60, 41), (2, 2, 120, 42)]
    stale = [(0, 1, 0, 11), (1, 1, 60, 21), (2, 1, 120, 22)]
    assert check_committed_prefix(events, [dump("n0", stale, 0), dump("n1", new, 2)]).valid
    mixed = [(0, 1, 0, 11), (1, 1, 60, 21), (2, 2, 120, 42)]
    res = check_committed_prefix(events, [dump("n0", mixed, 0), dump("n1", new, 2)])
    assert only(res) == {"committed_overwritten": 1}
    assert "n0 holds term 1" in res.examples["committed_overwritten"][0]
