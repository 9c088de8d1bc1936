"""Every nemesis once, in a short randomized run against a real 3-broker DLedger group.

A run (``rocketq.testing.chaos.run``) starts a name server and three ``rocketq broker``
processes with every peer link through a fault proxy, runs two recorded workloads (per-queue
lanes with workload resends; sharding keys with SDK retries; blocking and asyncio producers;
lite-pull and push consumers), strikes each nemesis once in a seeded order (faults of 2-4 s,
2-3 s apart), heals, drains and checks the history, the Raft event logs and the replicas.

The seed is random per run and printed; ``ROCKETQ_CHAOS_SEED=N`` replays one. An odd seed runs
the group with ``enableBatchPush=true`` (several entries per append message), an even one
without (DLedger's default, one entry per message); ``ROCKETQ_CHAOS_BATCH_PUSH=0|1`` overrides
it. Longer campaigns: ``make chaos`` (docs/chaos.md).
"""

from __future__ import annotations

import os
import pathlib
import random

import pytest

from rocketq.testing.chaos.run import SHORT_SCHEDULE, RunConfig, run_once
from rocketq.testing.chaos.schedule import NEMESES

#: room for 12 faults of at most 4 s with gaps of at most 3 s, the lead and the tail
SECONDS = 100.0


@pytest.mark.slow  # about two minutes: the whole chaos part of make test
def test_every_nemesis_once_leaves_no_anomaly(tmp_path: pathlib.Path) -> None:
    seed = int(os.environ.get("ROCKETQ_CHAOS_SEED") or random.SystemRandom().randrange(1 << 31))
    forced = os.environ.get("ROCKETQ_CHAOS_BATCH_PUSH", "").strip()
    batch_push = forced == "1" if forced in ("0", "1") else seed % 2 == 1
    print(
        f"chaos seed {seed}, batch push {'on' if batch_push else 'off'} "
        f"(replay: ROCKETQ_CHAOS_SEED={seed} ROCKETQ_CHAOS_BATCH_PUSH={int(batch_push)})"
    )
    result = run_once(
        RunConfig(
            seed,
            SECONDS,
            NEMESES,
            each_once=True,
            schedule=SHORT_SCHEDULE,
            batch_push=batch_push,
            root=tmp_path / "run",
        )
    )
    print(result.line())
    for name, why in result.skipped.items():
        print(f"nemesis {name} not run here: {why}")
    assert result.valid, f"seed {seed}: {result.result}"
    assert not result.notes, f"seed {seed}: faults not injected or undone: {result.notes}"
    assert sorted(w.nemesis for w in result.windows) == sorted(set(NEMESES) - set(result.skipped))
    assert result.result.stats.get("acked", 0) >= 1000, result.result.stats
    # after every fault the group took acknowledged sends again within the run
    stuck = [o.window for o in result.outages if o.unavailable_s is None]
    assert not stuck, f"seed {seed}: never available again after {stuck}"
