"""Bugs the chaos campaign found, each kept as a scenario on a real group with the seed that
found it named. (Bugs found by the process scenarios of tests/integration/test_dledger_faults.py
and by the checker's own first runs are kept there and in their modules' tests.)"""

from __future__ import annotations

import pathlib
import time

import pytest

from _support.wait import wait_until
from rocketq.client import Admin, Message, Producer, SendStatus
from rocketq.errors import RocketqError
from rocketq.testing.chaos.cluster import ChaosGroup

TOPIC = "ChaosReg"
#: bound on each wait; without the fix the paused leader's registration would hold brokerId 0
#: for the name server's 120 s heartbeat timeout, so the test still tells the two apart
WAIT_S = 60.0


def _send_one(producer: Producer, body: bytes) -> bool:
    try:
        return producer.send(Message(TOPIC, body)).status is SendStatus.SEND_OK
    except RocketqError:
        return False


@pytest.mark.slow  # three broker processes, one paused: about 20 s
def test_regression_a_paused_leader_does_not_keep_its_successor_from_registering_as_master(
    tmp_path: pathlib.Path,
) -> None:
    """Campaign seeds 102 and 104 (``python -m rocketq.testing.chaos.run --seed 102``): SIGSTOP of
    the leader left the group without an acknowledged send for 17-35 s. The group elected a new
    leader within two election timeouts, but the name server refused its registration as
    brokerId 0 because the paused broker's registration was still live (its connection open), so
    producers found no master until the old leader came back. Registrations now carry the DLedger
    term, and a master of a higher term takes brokerId 0 over."""
    with ChaosGroup(tmp_path / "group", verbose=False) as group:
        with Admin(group.namesrv_addr) as admin:
            admin.create_topic(TOPIC, 4, 4, cluster="DefaultCluster")
            wait_until(lambda: bool(admin.topic_route(TOPIC).queue_datas), "the topic's route", WAIT_S)
        ns = group.namesrv_addr
        with Producer(
            "RegressionPG", namesrv_addr=ns, route_refresh_interval_ms=500, send_timeout_ms=2000
        ) as producer:
            wait_until(lambda: _send_one(producer, b"before"), "a send before the fault", WAIT_S)
            old = group.wait_leader()
            group.pause(old)
            paused_at = time.monotonic()
            (new,) = wait_until(  # a one-element list: node 0 is a falsy value
                lambda: [m] if (m := group.master()) is not None and m != old else None,
                "the new leader listed as master while the old one is still paused",
                WAIT_S,
            )
            assert group.leader() == new
            wait_until(
                lambda: _send_one(producer, b"during"), "an acknowledged send, the old leader paused", WAIT_S
            )
            took = time.monotonic() - paused_at
            assert group.pid(old) is not None  # still paused, not dead: its registration is live
            print(f"first acknowledged send {took:.2f} s after SIGSTOP of the leader")
            group.resume(old)
            assert group.recover() == new
