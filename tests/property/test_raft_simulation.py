"""Thousands of seeded runs of a simulated Raft group (tests/_support/raft_sim.py).

Each seed picks 3 or 5 members, an ack policy, network delays, loss, duplication, partitions,
crashes and restarts, client proposals and transfers; the checker asserts Raft's safety properties
after every step and liveness after the faults heal. ``ROCKETQ_RAFT_SEEDS`` sets how many seeds
run (default 2000, about 20 s here; 500 under ``make fast``, tests/_support/examples.py);
``ROCKETQ_RAFT_SEED`` replays one seed.
"""

from __future__ import annotations

import itertools
import os

import pytest
from tests._support.raft_sim import Simulation, Violation

from _support.examples import examples
from rocketq.ha.raft import RaftNode
from rocketq.ha.raft_types import AckPolicy

SEEDS = int(os.environ.get("ROCKETQ_RAFT_SEEDS", str(examples(2000))))
CHUNKS = 8
REPLAY = os.environ.get("ROCKETQ_RAFT_SEED")


def run_seed(seed: int) -> None:
    try:
        Simulation(seed).run()
    except Violation as exc:
        pytest.fail(
            f"raft simulation seed {seed} failed: {exc}\n"
            f"replay: ROCKETQ_RAFT_SEED={seed} pytest tests/property/test_raft_simulation.py -k replay",
            pytrace=False,
        )


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_raft_simulation_seeds(chunk: int) -> None:
    for seed in range(chunk, SEEDS, CHUNKS):
        run_seed(seed)


@pytest.mark.skipif(REPLAY is None, reason="set ROCKETQ_RAFT_SEED to replay one seed")
def test_raft_simulation_replay() -> None:
    assert REPLAY is not None
    run_seed(int(REPLAY))


def test_simulation_exercises_the_faults() -> None:
    """The seeds really reach elections, commits and the liveness phase (a guard against a
    simulator that silently does nothing)."""
    results = [Simulation(seed).run() for seed in range(40)]
    assert {r.members for r in results} == {3, 5}
    assert sum(r.elections for r in results) > 60
    assert all(r.committed > 0 for r in results)
    assert sum(r.acked for r in results) > 100
    assert sum(r.store_reads for r in results) > 50  # released payloads are read back from the store


def test_a_broken_commit_rule_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checker is not vacuous: a core whose followers commit past their verified prefix
    (DLedger #316) fails some seed quickly."""

    def unbounded(self: RaftNode, leader_commit: int) -> None:
        self.commit_index = max(self.commit_index, min(leader_commit, self.log.last_index))

    monkeypatch.setattr(RaftNode, "_advance_follower_commit", unbounded)
    caught = next((seed for seed in range(200) if _fails(Simulation(seed))), None)
    assert caught is not None


def test_page_cache_acks_do_not_survive_power_loss() -> None:
    """Under AckPolicy.APPENDED a machine that loses power forgets entries it acknowledged, so a
    committed entry can vanish: the checker finds it (what docs/replication.md says of the policy),
    and the same seeds pass when the acks wait for fsync."""
    # the first 20 seeds (of 300) that lose an acknowledged entry
    lost = list(
        itertools.islice(
            (s for s in range(300) if _fails(Simulation(s, policy=AckPolicy.APPENDED, power_loss=True))), 20
        )
    )
    assert lost
    for seed in lost:
        Simulation(seed, policy=AckPolicy.FSYNCED, power_loss=True).run()


def _fails(sim: Simulation) -> bool:
    try:
        sim.run()
    except Violation:
        return True
    return False
