"""bench/broker.py's host-steal figures: which sends count as made in steal-free time."""

from __future__ import annotations

import importlib.util
import math
import os
import pathlib
import sys
from types import ModuleType

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench" / "broker.py"


@pytest.fixture(scope="module")
def broker_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_broker_under_test", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def make_run(bench: ModuleType, steal: list[tuple[int, int]], acks: list[tuple[float, int]]) -> object:
    run = bench.LatencyRun(server=None, topic="t", rate=1.0, total=len(acks), measure_from=0)
    run.steal[:] = steal
    run.acks[:] = [ms for ms, _ in acks]
    run.acks_sent_ns[:] = [sent for _, sent in acks]
    return run


MS = 1_000_000  # ns


def test_only_sends_in_steal_free_windows_with_steal_free_neighbours_count(
    broker_bench: ModuleType,
) -> None:
    # Samples every 100 ms; the counter moves between 300 and 400 ms only.
    steal = [(i * 100 * MS, 5 if i <= 3 else 9) for i in range(8)]
    acks = [
        (70.0, 50 * MS),  # first window: none before it to show it starts without backlog
        (1.0, 150 * MS),  # 0-100, 100-200 and 200-300 clean: counts
        (2.0, 250 * MS),  # window 200-300, but the next one saw steal: left out
        (90.0, 350 * MS),  # in the stolen window: left out
        (60.0, 450 * MS),  # window 400-500 right after the stolen one (backlog): left out
        (3.0, 550 * MS),  # 400-500, 500-600, 600-700 clean: counts
        (80.0, 650 * MS),  # last window has no following sample: left out
    ]
    pct, p99, share = broker_bench.steal_figures(make_run(broker_bench, steal, acks))
    ticks_per_s = os.sysconf("SC_CLK_TCK")
    assert pct == pytest.approx(100 * 4 / (ticks_per_s * 0.7 * (os.cpu_count() or 1)))
    assert p99 == pytest.approx(3.0)  # the high latencies of stolen time are not in it
    assert share == pytest.approx(2 / 7)


def test_no_steal_free_window_gives_no_figure(broker_bench: ModuleType) -> None:
    steal = [(0, 1), (100 * MS, 2), (200 * MS, 3), (300 * MS, 4)]
    pct, p99, share = broker_bench.steal_figures(make_run(broker_bench, steal, [(1.0, 50 * MS)]))
    assert pct > 0
    assert math.isnan(p99)
    assert share == 0.0


def test_steal_ticks_reads_this_machines_counter(broker_bench: ModuleType) -> None:
    first = broker_bench.steal_ticks()
    assert first >= 0
    assert broker_bench.steal_ticks() >= first
