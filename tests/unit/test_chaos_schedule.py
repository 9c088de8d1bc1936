"""Seeded fault schedules and the unavailability report of a chaos run (pure parts)."""

from __future__ import annotations

import itertools
import pathlib
import random

import pytest

from rocketq.testing.chaos.report import (
    Window,
    chart,
    markdown_table,
    per_second,
    percentile,
    summarize,
    unavailability,
)
from rocketq.testing.chaos.schedule import NEMESES, ScheduleConfig, schedule


def test_the_same_seed_gives_the_same_schedule() -> None:
    a = schedule(random.Random(7), NEMESES, 120.0)
    b = schedule(random.Random(7), NEMESES, 120.0)
    c = schedule(random.Random(8), NEMESES, 120.0)
    assert a == b
    assert a != c


@pytest.mark.parametrize("seed", range(50))
def test_faults_do_not_overlap_and_stay_inside_the_run(seed: int) -> None:
    cfg = ScheduleConfig()
    faults = schedule(random.Random(seed), NEMESES, 120.0, cfg)
    assert faults, "a 120 s run has room for faults"
    assert faults[0].start_s >= cfg.lead_s
    assert faults[-1].end_s <= 120.0 - cfg.tail_s
    for before, after in itertools.pairwise(faults):
        assert after.start_s >= before.end_s + cfg.gap_min_s - 1e-9
    for f in faults:
        assert cfg.fault_min_s <= f.duration_s <= cfg.fault_max_s
        assert f.nemesis in NEMESES


def test_leader_nemeses_target_the_leader_and_params_are_drawn() -> None:
    faults = schedule(random.Random(1), ("kill-leader", "isolate-leader", "asymmetric", "clock-jump"), 600.0)
    for f in faults:
        if f.nemesis in ("kill-leader", "isolate-leader"):
            assert f.target == "leader"
        if f.nemesis == "asymmetric":
            assert f.param("direction") in ("in", "out")
        if f.nemesis == "clock-jump":
            jump = f.param("jump_s")
            assert isinstance(jump, float) and jump != 0
    assert {f.nemesis for f in faults} == {"kill-leader", "isolate-leader", "asymmetric", "clock-jump"}


def test_each_once_strikes_every_nemesis_once_in_a_seeded_order() -> None:
    cfg = ScheduleConfig(fault_min_s=2.0, fault_max_s=3.0, gap_min_s=1.0, gap_max_s=2.0)
    faults = schedule(random.Random(3), NEMESES, 100.0, cfg, each_once=True)
    assert sorted(f.nemesis for f in faults) == sorted(NEMESES)
    other = schedule(random.Random(4), NEMESES, 100.0, cfg, each_once=True)
    assert [f.nemesis for f in faults] != [f.nemesis for f in other]
    with pytest.raises(ValueError, match="do not fit"):
        schedule(random.Random(3), NEMESES, 30.0, cfg, each_once=True)


def test_too_short_a_run_has_no_fault_and_bad_input_is_refused() -> None:
    assert schedule(random.Random(1), ("kill",), 10.0) == []
    with pytest.raises(ValueError, match="unknown"):
        schedule(random.Random(1), ("meteor",), 60.0)
    with pytest.raises(ValueError, match="fault_min_s"):
        ScheduleConfig(fault_min_s=5.0, fault_max_s=1.0)


def test_unavailability_counts_only_sends_invoked_after_the_fault() -> None:
    w = Window("kill-leader", 10.0, 14.0)
    # a send invoked before the fault and acknowledged at 10.5 proves nothing; the first send
    # invoked after it is acknowledged at 12.0, another invoked later at 11.5
    acks = [(9.9, 10.5), (10.2, 12.0), (11.0, 11.5), (20.0, 20.1)]
    [outage] = unavailability([w], acks)
    assert outage.unavailable_s == pytest.approx(1.5)
    [never] = unavailability([Window("pause", 30.0, 35.0)], acks)
    assert never.unavailable_s is None


def test_summary_table_and_percentiles() -> None:
    assert percentile([5.0, 1.0, 3.0, 2.0, 4.0], 50) == 3.0
    assert percentile([1.0, 2.0], 100) == 2.0
    with pytest.raises(ValueError):
        percentile([], 50)
    acks = [(1.0, 1.2), (5.5, 6.0), (11.0, 13.0)]
    windows = [Window("kill", 5.0, 6.0), Window("kill", 10.0, 12.0), Window("slow", 20.0, 25.0)]
    outs = unavailability(windows, acks)
    rows = summarize(outs)
    assert [(r.nemesis, r.faults, r.never_recovered) for r in rows] == [("kill", 2, 0), ("slow", 1, 1)]
    assert rows[0].max_s == pytest.approx(3.0)
    table = markdown_table(rows)
    assert "| `kill` | 2 | 0 |" in table and "| `slow` | 1 | 1 | — |" in table


def test_per_second_buckets_counts_and_p99() -> None:
    counts, p99 = per_second([(0.1, 0.2), (0.3, 0.35), (2.0, 2.5)], 3.0)
    assert counts == [2, 0, 1]
    assert p99[0] == pytest.approx(100.0)
    assert p99[1] is None
    assert p99[2] == pytest.approx(500.0)


def test_chart_draws_a_png_with_the_fault_windows(tmp_path: pathlib.Path) -> None:
    pytest.importorskip("matplotlib", reason="charts need the chaos extra (matplotlib)")
    acks = [(i / 10, i / 10 + 0.002) for i in range(300)]
    out = chart(tmp_path / "run.png", "seed 1", acks, [Window("kill-leader", 10.0, 14.0)], 30.0)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
