"""The chaos runner's own logic: which group operations each nemesis is, acks on the run clock,
the campaign table. The group here is a recording stand-in; tests/chaos runs the real one."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import random

import pytest

from rocketq.testing.chaos.check import CheckResult
from rocketq.testing.chaos.history import Op
from rocketq.testing.chaos.report import Outage, Window
from rocketq.testing.chaos.run import (
    RunResult,
    _acks,
    _json,
    _stop_all,
    _Striker,
    campaign_markdown,
    events_tail,
    write_results,
)
from rocketq.testing.chaos.schedule import NEMESES, Fault


class _Group:
    """Records the calls a nemesis makes; node 1 leads."""

    def __init__(self) -> None:
        self.node_ids = [0, 1, 2]
        self.calls: list[tuple[object, ...]] = []

    def alive(self, n: int) -> bool:
        return True

    def leader(self) -> int:
        return 1

    def __getattr__(self, name: str) -> object:
        return lambda *args, **kw: self.calls.append((name, *args))


def _strike(nemesis: str, target: str, **params: float | str) -> tuple[int, list[tuple[object, ...]], _Group]:
    group = _Group()
    striker = _Striker(
        group, random.Random(1), {0: pathlib.Path("c0"), 1: pathlib.Path("c1"), 2: pathlib.Path("c2")}
    )  # type: ignore[arg-type]
    node = striker.resolve(target)
    undo = striker.strike(Fault(nemesis, 0.0, 1.0, target, tuple(params.items())), node)
    done = list(group.calls)
    group.calls.clear()
    if nemesis != "clock-jump":
        undo()
    return node, done, group


def test_leader_faults_hit_the_leader_and_followers_the_others() -> None:
    assert _strike("kill-leader", "leader")[0] == 1
    assert all(_strike("pause", "follower")[0] != 1 for _ in range(20))


@pytest.mark.parametrize(
    ("nemesis", "params", "calls", "undo"),
    [
        ("kill-leader", {}, [("kill", 1)], [("restart", 1)]),
        ("pause", {}, [("pause", 1)], [("resume", 1)]),
        ("isolate-leader", {}, [("isolate", 1)], [("heal",)]),
        ("bridge", {}, [("block", 0, 2), ("block", 2, 0)], [("heal",)]),
        ("asymmetric", {"direction": "out"}, [("block", 1, 0), ("block", 1, 2)], [("heal",)]),
        ("asymmetric", {"direction": "in"}, [("block", 0, 1), ("block", 2, 1)], [("heal",)]),
        (
            "slow",
            {"delay_ms": 50.0},
            [("slow", 1, 0, 50.0), ("slow", 0, 1, 50.0), ("slow", 1, 2, 50.0), ("slow", 2, 1, 50.0)],
            [("heal",)],
        ),
        ("disk-full", {}, [("disk_full", 1)], [("disk_full", 1, False)]),
    ],
)
def test_each_nemesis_is_the_group_operations_it_names(
    nemesis: str,
    params: dict[str, float | str],
    calls: list[tuple[object, ...]],
    undo: list[tuple[object, ...]],
) -> None:
    _node, done, group = _strike(nemesis, "leader", **params)
    assert done == calls
    assert group.calls == undo


def test_every_nemesis_has_a_strike() -> None:
    for nemesis in NEMESES:
        if nemesis != "clock-jump":
            _strike(nemesis, "any")


def test_acks_pair_invokes_with_their_ok_on_the_run_clock() -> None:
    ops = [
        Op("p", "send", "invoke", mono_ns=2_000_000_000, payload="a"),
        Op("p", "send", "ok", mono_ns=2_500_000_000, payload="a"),
        Op("p", "send", "invoke", mono_ns=3_000_000_000, payload="b"),
        Op("p", "send", "fail", mono_ns=3_100_000_000, payload="b"),
        Op("p", "poll", "ok", mono_ns=4_000_000_000),
    ]
    assert _acks(ops, 1_000_000_000) == [(1.0, 1.5)]


def test_campaign_table_counts_runs_and_links_charts() -> None:
    res = CheckResult()
    res.stats["duplicates_after_indeterminate"] = 2
    w = Window("kill", 5.0, 8.0, "n1")
    run = RunResult(7, 120.0, ("kill",), [w], [Outage(w, 1.25)], [(1.0, 1.1)] * 3, res, {}, pathlib.Path("x"))
    text = campaign_markdown([run], {7: "chaos/seed-7.png"})
    assert "1 runs, 3 acknowledged sends, 1 faults." in text
    assert "| 7 | 120 | 1 | 3 | 0 | 0 | 2 | 0 | 0 | 0 | [png](chaos/seed-7.png) |" in text
    assert "| `kill` | 1 | 0 | 1.25 | 1.25 | 1.25 |" in text
    assert run.line().startswith("seed 7: valid; 3 acked")
    pushed = dataclasses.replace(run, batch_push=True)
    assert pushed.line().startswith("seed 7 (batch push): valid; 3 acked") and _json(pushed)["batch_push"]


def test_results_replace_only_the_campaign_block(tmp_path: pathlib.Path) -> None:
    doc = tmp_path / "chaos.md"
    doc.write_text("# Title\n\n<!-- campaign -->\nold\n<!-- /campaign -->\n\n## Bugs\n", encoding="utf-8")
    write_results(doc, "new table\n", "--runs 2")
    text = doc.read_text(encoding="utf-8")
    assert text.startswith("# Title\n\n<!-- campaign -->\n`python -m rocketq.testing.chaos.run --runs 2`")
    assert "new table" in text and "old" not in text and text.endswith("<!-- /campaign -->\n\n## Bugs\n")
    fresh = tmp_path / "new.md"
    write_results(fresh, "t\n", "")
    assert fresh.read_text(encoding="utf-8").endswith("t\n<!-- /campaign -->\n")


def test_an_undo_failure_note_quotes_the_members_last_raft_events(tmp_path: pathlib.Path) -> None:
    """The events a failed undo's note quotes: the last role changes and truncations, not the
    commit advances between them, then the very last event; a torn last line is skipped."""
    lines = [
        {"ev": "start", "node": "n1", "pid": 7, "wall_ms": 1, "term": 4, "ledgerEnd": 40263, "commit": 36795},
        {"ev": "role", "node": "n1", "pid": 7, "wall_ms": 2, "role": "FOLLOWER", "term": 4, "leader": "n2"},
        *({"ev": "commit", "node": "n1", "pid": 7, "wall_ms": 3 + i, "commit": 37000 + i} for i in range(50)),
        {
            "ev": "truncate",
            "node": "n1",
            "pid": 7,
            "wall_ms": 60,
            "from": 40000,
            "to": 40263,
            "commit": 37049,
        },
        {"ev": "commit", "node": "n1", "pid": 7, "wall_ms": 61, "commit": 37050},
    ]
    path = tmp_path / "raft-n1.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in lines) + '{"ev": "comm', encoding="utf-8")
    told = [json.loads(line) for line in events_tail(path).splitlines()]
    assert [e["ev"] for e in told] == ["start", "role", "truncate", "commit"]
    assert told[-1] == {"ev": "commit", "pid": 7, "wall_ms": 61, "commit": 37050}
    assert told[2]["from"] == 40000 and "node" not in told[2]
    assert [e["ev"] for e in (json.loads(x) for x in events_tail(path, count=1).splitlines())] == [
        "truncate",
        "commit",
    ]
    assert events_tail(tmp_path / "missing.jsonl").startswith("(unreadable:")


def test_a_workload_that_does_not_stop_leaves_no_other_one_sending() -> None:
    """The end of a run stops every workload before the brokers get SIGTERM: the first one's
    failure to stop is raised only once the others were stopped too."""
    stopped: list[str] = []

    class Stuck:
        def stop(self) -> None:
            stopped.append("stuck")
            raise TimeoutError("the workload did not stop within 30.0 s")

    class Plain:
        def stop(self) -> None:
            stopped.append("plain")

    with pytest.raises(TimeoutError, match="did not stop"):
        _stop_all([Stuck(), Plain()])  # type: ignore[list-item]
    assert stopped == ["stuck", "plain"]
