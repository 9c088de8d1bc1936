"""Producers with the default route refresh interval follow a DLedger leader change at once.

A group of three ``rocketq broker`` processes (:class:`rocketq.testing.chaos.cluster.ChaosGroup`)
with a long election timeout (5000 ms), so the new master comes from the hand-over a stopping
leader makes (about 0.12 s, then it registers within about 0.1 s). Two producers of the real
client, the blocking :class:`Producer` and the :class:`AsyncProducer`, each send SYNC, one
message at a time, with the DEFAULT route refresh interval (30 s): before the route re-check
they kept sending to the old leader's address until that refresh. The leader gets SIGTERM; each
producer's first acknowledgement from the new leader must come within ``FIRST_ACK_WITHIN_S``
of the signal (a tenth of the refresh interval), and nothing acknowledged may be lost.
"""

from __future__ import annotations

import os
import pathlib
import signal
import time
from collections.abc import Iterator
from typing import Literal

import pytest

from _support.dledger_topic import stored_bodies, topic_group
from _support.sync_writer import Writer as SyncWriter
from _support.wait import wait_until
from rocketq.testing.chaos.cluster import ChaosGroup

# a group of broker processes and a restart: not in make fast
pytestmark = pytest.mark.slow

TOPIC = "RerouteT"
QUEUES = 4
BROKER = "broker-a"
ELECTION_TIMEOUT_MS = 5000
HEARTBEAT_MS = 200
#: the first acknowledgement from the new leader comes this soon after the SIGTERM
FIRST_ACK_WITHIN_S = 3.0
WAIT_S = 60.0


class Writer(SyncWriter):
    """SYNC sends from a thread, one at a time, a new body each, by a producer with the default
    route refresh interval (blocking or asyncio): what was acknowledged (body, when, the
    broker that stored it) and what failed."""

    def __init__(self, namesrv: str, prefix: str, kind: Literal["blocking", "async"]) -> None:
        super().__init__(namesrv, prefix, TOPIC, kind=kind)


def _stored(namesrv: str) -> set[bytes]:
    return set(stored_bodies(namesrv, TOPIC, QUEUES, BROKER))


@pytest.fixture
def group(tmp_path: pathlib.Path) -> Iterator[ChaosGroup]:
    with topic_group(
        tmp_path / "group",
        TOPIC,
        QUEUES,
        election_timeout_ms=ELECTION_TIMEOUT_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
    ) as group:
        yield group


def test_producers_with_the_default_refresh_follow_a_hand_over_at_once(group: ChaosGroup) -> None:
    with (
        Writer(group.namesrv_addr, "rb", "blocking") as blocking,
        Writer(group.namesrv_addr, "ra", "async") as aio,
    ):
        old = group.wait_leader(WAIT_S)
        blocking.wait_acked(20, "before the SIGTERM")
        aio.wait_acked(20, "before the SIGTERM")
        pid = group.pid(old)
        assert pid is not None
        sigterm_at = time.monotonic()
        os.kill(pid, signal.SIGTERM)

        def new_master() -> tuple[int] | None:  # a tuple: node 0 is a value too
            master = group.master()
            return (master,) if master is not None and master != old else None

        (master,) = wait_until(new_master, "a new master listed by the name server", WAIT_S, 0.005)
        addr = group.broker_addr(master)
        took = {}
        for writer in (blocking, aio):
            first = wait_until(
                lambda w=writer: w.first_ack_on(addr, sigterm_at),
                f"an ack on the new leader ({writer.kind})",
                WAIT_S,
            )
            took[writer.kind] = first - sigterm_at
        print(
            "SIGTERM to the first ack on the new leader: "
            + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in took.items())
        )
        for kind, seconds in took.items():
            assert seconds < FIRST_ACK_WITHIN_S, (
                f"{kind} producer: first ack on the new leader after {seconds:.2f} s"
            )
        blocking.wait_acked(20, "after the hand-over")
        aio.wait_acked(20, "after the hand-over")
    # nothing acknowledged is lost (read back from the group, the old member started again)
    wait_until(lambda: not group.alive(old), f"node {old} to exit", WAIT_S)
    group.restart(old)
    group.recover(WAIT_S)
    acked = {b for w in (blocking, aio) for b, _, _ in w.acked}
    stored = wait_until(
        lambda: s if acked <= (s := _stored(group.namesrv_addr)) else None,
        "every acknowledged message read back",
        WAIT_S,
    )
    assert {b for b in stored if b[:3] in (b"rb-", b"ra-")} <= acked | blocking.failed | aio.failed
