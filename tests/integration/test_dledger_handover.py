"""A DLedger leader stopped with SIGTERM hands its leadership over first (broker processes).

Groups of three ``rocketq broker`` processes (:class:`rocketq.testing.chaos.cluster.ChaosGroup`)
with a long election timeout, 5000 ms (randomized to [5, 10) s): without a hand-over the group
is without a leader for at least that long after the old leader's last heartbeat, so a new
master listed within a fraction of it can only come from the hand-over. A producer of the real
client sends with SYNC acknowledgement, one message at a time, throughout.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from _support.dledger_topic import stored_bodies, topic_group
from _support.sync_writer import Writer as SyncWriter
from _support.wait import wait_until
from rocketq.broker.server import SHUTDOWN_QUORUM_WAIT_S, SHUTDOWN_UNREGISTER_TIMEOUT_S
from rocketq.testing.chaos.cluster import ChaosGroup

# groups of broker processes, a restart each: not in make fast
pytestmark = pytest.mark.slow

TOPIC = "HandoverT"
QUEUES = 4
BROKER = "broker-a"
ELECTION_TIMEOUT_MS = 5000
HEARTBEAT_MS = 200
#: the hand-over's bound (dLegerHandoverTimeoutMs, the default)
HANDOVER_TIMEOUT_S = 1.0
#: a new master must be listed this soon after the SIGTERM: half the shortest election timeout
NEW_MASTER_WITHIN_S = ELECTION_TIMEOUT_MS / 1000 / 2
WAIT_S = 60.0


class Writer(SyncWriter):
    """SYNC sends from a thread, one at a time, a new body each: what was acknowledged (body,
    when the acknowledgement came, the broker that stored it) and what failed. The route is
    refreshed every 100 ms: a producer learns of the new master that soon."""

    def __init__(self, namesrv: str, prefix: str) -> None:
        super().__init__(namesrv, prefix, TOPIC, send_timeout_ms=3000, route_refresh_interval_ms=100)


@contextlib.contextmanager
def handover_group(tmp_path: pathlib.Path, **conf: str) -> Iterator[ChaosGroup]:
    with topic_group(
        tmp_path / "group", TOPIC, QUEUES, election_timeout_ms=ELECTION_TIMEOUT_MS,
        heartbeat_interval_ms=HEARTBEAT_MS, conf=conf,
    ) as group:  # fmt: skip
        yield group


def _stored(namesrv: str) -> set[bytes]:
    return set(stored_bodies(namesrv, TOPIC, QUEUES, BROKER))


def _sigterm_and_time_new_master(group: ChaosGroup, old: int) -> tuple[int, float]:
    """SIGTERM ``old`` (without waiting for its exit); returns the node the name server lists as
    master next (another node that says it leads) and the seconds since the signal."""
    pid = group.pid(old)
    assert pid is not None
    began = time.monotonic()
    os.kill(pid, signal.SIGTERM)

    def new_master() -> tuple[int] | None:  # a tuple: node 0 is a value too
        master = group.master()
        return (master,) if master is not None and master != old else None

    (master,) = wait_until(new_master, "a new master listed by the name server", WAIT_S, 0.005)
    return master, time.monotonic() - began


def _exited(group: ChaosGroup, node: int) -> Any:
    """The node's exit status, once it exited."""
    wait_until(lambda: not group.alive(node), f"node {node} to exit", WAIT_S)
    proc = group._node(node).proc
    assert proc is not None
    return proc.wait()


def _log_of(group: ChaosGroup, node: int) -> str:
    return pathlib.Path(group.log_path(node)).read_text(encoding="utf-8", errors="replace")


@pytest.fixture(scope="module")
def group_on(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChaosGroup]:
    """A group with the hand-over on (the default), shared by the scenarios that heal it."""
    with handover_group(tmp_path_factory.mktemp("handover")) as group:
        yield group


def test_a_sigterm_leader_hands_over_within_a_fraction_of_an_election_timeout(group_on: ChaosGroup) -> None:
    group = group_on
    group.recover(WAIT_S)
    with Writer(group.namesrv_addr, "ho") as writer:
        old = group.wait_leader(WAIT_S)
        writer.wait_acked(20, "before the SIGTERM")
        master, took_s = _sigterm_and_time_new_master(group, old)
        sigterm_at = time.monotonic() - took_s
        # without the hand-over: at least one election timeout (5 s) after the old leader's last
        # heartbeat, which comes after the signal
        assert took_s < NEW_MASTER_WITHIN_S, f"new master {master} listed {took_s:.2f} s after the SIGTERM"
        assert group.leader() == master
        # writable again: the producer's sends are acknowledged by the new leader
        first = wait_until(
            lambda: writer.first_ack_on(group.broker_addr(master), sigterm_at),
            "an ack from the new leader",
            WAIT_S,
        )
        writer.wait_acked(20, "after the hand-over")
        print(
            f"SIGTERM to new master listed {took_s * 1000:.0f} ms, "
            f"to the first ack on it {(first - sigterm_at) * 1000:.0f} ms"
        )
        assert _exited(group, old) == 0
        assert "leadership handed over to" in _log_of(group, old)
    # nothing acknowledged is lost (read back from the group, the old member started again)
    group.restart(old)
    group.recover(WAIT_S)
    acked = {b for b, _, _ in writer.acked}
    stored = wait_until(
        lambda: s if acked <= (s := _stored(group.namesrv_addr)) else None,
        "every acknowledged message read back",
        WAIT_S,
    )
    assert {b for b in stored if b.startswith(b"ho-")} <= acked | writer.failed


def test_a_leader_whose_followers_are_stopped_still_exits_within_the_bound(group_on: ChaosGroup) -> None:
    group = group_on
    group.recover(WAIT_S)
    old = group.wait_leader(WAIT_S)
    followers = [n for n in group.node_ids if n != old]
    with Writer(group.namesrv_addr, "hp"):
        for node in followers:
            group.pause(node)
        began = time.monotonic()
        code = group.kill(old, signal.SIGTERM)  # returns once it exited
        took_s = time.monotonic() - began
    text = _log_of(group, old)
    assert code == 0, text[-3000:]
    # the hand-over either found no follower heard from lately or gave up at its bound; either
    # way the shutdown keeps its own bounds (a put waiting for the quorum: 3 s)
    said = [
        line for line in text.splitlines() if "did not finish within" in line or "no follower live" in line
    ]
    assert said, text[-3000:]
    print(f"exited {took_s:.2f} s after the SIGTERM; {said[-1]}")
    limit_s = HANDOVER_TIMEOUT_S + SHUTDOWN_QUORUM_WAIT_S + SHUTDOWN_UNREGISTER_TIMEOUT_S + 5
    assert took_s < limit_s, f"the leader took {took_s:.1f} s to exit"
    group.recover(WAIT_S)


def test_with_the_hand_over_off_the_group_waits_for_an_election_timeout(tmp_path: pathlib.Path) -> None:
    with (
        handover_group(tmp_path, dLegerHandoverOnShutdown="false") as group,
        Writer(group.namesrv_addr, "hq") as writer,
    ):
        old = group.wait_leader(WAIT_S)
        writer.wait_acked(20, "before the SIGTERM")
        master, took_s = _sigterm_and_time_new_master(group, old)
        assert took_s >= 0.9 * ELECTION_TIMEOUT_MS / 1000, f"new master {master} after {took_s:.2f} s"
        assert _exited(group, old) == 0
        assert "leadership handed over" not in _log_of(group, old)
        print(f"no hand-over: SIGTERM to new master listed {took_s * 1000:.0f} ms")
