"""What a chaos campaign reports: unavailability per fault, percentiles, tables and charts.

Theory of operation::

    faults (start, end, nemesis) ─┐
    acknowledged sends            ├─► unavailability(...) ─► [Outage] ─► percentiles per nemesis
      (invoke_s, ok_s), run time ─┘                                    ─► markdown table
    sends over time ──────────────────► chart(...) ─► PNG: throughput and p99 latency per
                                                          second, fault windows shaded

*Unavailability* of a fault is the time from its start to the first acknowledgement of a send
that was invoked at or after that start (a send already in flight when the fault struck proves
nothing about the group after it). A fault after which no send is acknowledged before the run
ends is reported with ``None`` (never available again within the run): the run's checker
decides whether that is a failure. Times are seconds on the run's monotonic clock.

Charts need matplotlib (the ``chaos`` extra); without it :func:`chart` raises ImportError with
the install hint, and everything else works.
"""

from __future__ import annotations

import bisect
import math
import pathlib
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Window:
    """A fault as it happened: run-relative start and end (heal) in seconds."""

    nemesis: str
    start_s: float
    end_s: float
    target: str = ""


@dataclass(frozen=True)
class Outage:
    window: Window
    #: seconds from the fault's start to the next acknowledged send, None if none came
    unavailable_s: float | None


def unavailability(windows: Iterable[Window], acks: Sequence[tuple[float, float]]) -> list[Outage]:
    """``acks``: (invoke_s, ok_s) of every acknowledged send, any order."""
    by_invoke = sorted(acks)
    invokes = [a[0] for a in by_invoke]
    # the earliest ok time among sends invoked at or after index i: a suffix minimum
    suffix_min = [math.inf] * (len(by_invoke) + 1)
    for i in range(len(by_invoke) - 1, -1, -1):
        suffix_min[i] = min(by_invoke[i][1], suffix_min[i + 1])
    out = []
    for w in windows:
        first = suffix_min[bisect.bisect_left(invokes, w.start_s)]
        out.append(Outage(w, None if first == math.inf else first - w.start_s))
    return out


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]) of a non-empty sequence."""
    if not values:
        raise ValueError("percentile of nothing")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class NemesisSummary:
    nemesis: str
    faults: int
    never_recovered: int
    p50_s: float | None
    p90_s: float | None
    max_s: float | None


def summarize(outages: Iterable[Outage]) -> list[NemesisSummary]:
    groups: dict[str, list[Outage]] = defaultdict(list)
    for o in outages:
        groups[o.window.nemesis].append(o)
    rows = []
    for nemesis in sorted(groups):
        times = [o.unavailable_s for o in groups[nemesis] if o.unavailable_s is not None]
        rows.append(
            NemesisSummary(
                nemesis,
                len(groups[nemesis]),
                len(groups[nemesis]) - len(times),
                percentile(times, 50) if times else None,
                percentile(times, 90) if times else None,
                max(times) if times else None,
            )
        )
    return rows


def _s(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def markdown_table(rows: Iterable[NemesisSummary]) -> str:
    lines = [
        "| nemesis | faults | not available again | unavailable p50 s | p90 s | max s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        times = [_s(r.p50_s), _s(r.p90_s), _s(r.max_s)]
        cells = [f"`{r.nemesis}`", str(r.faults), str(r.never_recovered), *times]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def per_second(
    acks: Sequence[tuple[float, float]], duration_s: float
) -> tuple[list[int], list[float | None]]:
    """Acknowledged sends per second and the p99 latency (ms) of those acknowledged in it."""
    seconds = max(1, math.ceil(duration_s))
    counts = [0] * seconds
    latencies: list[list[float]] = [[] for _ in range(seconds)]
    for invoke_s, ok_s in acks:
        i = int(ok_s)
        if 0 <= i < seconds:
            counts[i] += 1
            latencies[i].append((ok_s - invoke_s) * 1000.0)
    return counts, [percentile(v, 99) if v else None for v in latencies]


def chart(
    path: pathlib.Path,
    title: str,
    acks: Sequence[tuple[float, float]],
    windows: Iterable[Window],
    duration_s: float,
) -> pathlib.Path:
    """Throughput and p99 latency per second with the fault windows shaded, as a PNG."""
    try:
        import matplotlib  # noqa: PLC0415 - optional, only for the campaign's charts

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("charts need matplotlib: pip install 'rocketq[chaos]'") from exc
    counts, p99 = per_second(acks, duration_s)
    xs = list(range(len(counts)))
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(10, 5), layout="constrained")
    top.plot(xs, counts, drawstyle="steps-post", color="tab:blue")
    top.set_ylabel("acked sends/s")
    bottom.plot(xs, [math.nan if v is None else v for v in p99], ".", markersize=3, color="tab:red")
    bottom.set_ylabel("p99 latency ms")
    bottom.set_yscale("log")
    bottom.set_xlabel("seconds")
    for w in windows:
        for ax in (top, bottom):
            ax.axvspan(w.start_s, w.end_s, color="0.85", zorder=0)
        top.text(
            w.start_s,
            0.02,
            w.nemesis,
            rotation=90,
            fontsize=7,
            va="bottom",
            transform=top.get_xaxis_transform(),
        )
    top.set_title(title)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
