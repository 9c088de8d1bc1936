"""Seeded fault schedules for a chaos run: which nemesis strikes when, for how long, and where.

Theory of operation::

    seed ──► random.Random(seed) ──► schedule(rng, nemeses, duration_s) ──► [Fault, ...]
                                      (pure: no clock, no processes)        sorted by start_s

A run lasts ``duration_s``. It opens with a quiet stretch (``lead_s``: the workload settles and
the first acknowledged sends give the baseline) and ends with one (``tail_s``: every fault is
healed and the group must become writable again before the drain). In between, faults follow
each other: each lasts a random time in ``fault_s`` and is followed by a random quiet gap in
``gap_s``, so at most one fault is in effect at a time and each one's unavailability can be
measured on its own (from its start to the next acknowledged send). The nemesis of each fault is
drawn from the run's list; its target is a *role* (``leader``, ``follower``, ``any``) resolved
when it strikes, since which node leads is only known then.

Nemeses (``NEMESES``, each with what it does to a 3-member group; ``heal`` undoes it):

=================  ==========================================================================
``kill``           SIGKILL a random member; heal restarts it
``kill-leader``    SIGKILL the leader; heal restarts it
``pause``          SIGSTOP a member (the leader half of the time) past the election timeout;
                   heal is SIGCONT
``partition``      random halves: one member alone, the other two together
``isolate-leader`` the leader alone, the followers together
``bridge``         two members cannot reach each other, both reach the third (the bridge)
``asymmetric``     one direction of one link is dropped (leader → follower or the reverse)
``slow``           every link of one member delayed by ``slow_ms``
``lossy``          the links of one member reset at random (TCP cannot lose single bytes;
                   losing a connection's in-flight data is what a lossy network does to it)
``power-loss``     SIGKILL a member and cut its files back to what was fsynced; heal restarts
``clock-jump``     the wall clock of one member jumps (forward or back, ``jump_s``); heal
                   puts it back. Raft timing uses the monotonic clock; this hits what reads
                   wall time (store timestamps, the pop and delay services, file names)
``disk-full``      the data directory of one member fills up; heal frees the space
=================  ==========================================================================

With three members a "majorities ring" (each member sees a majority, no two see the same one)
is the full mesh, so it is not listed; ``bridge`` is the 3-member partition that leaves a
member in both majorities.

Invariants: the same seed and arguments give the same schedule; faults do not overlap; every
fault starts at or after ``lead_s`` and ends at or before ``duration_s - tail_s``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

NEMESES: Final = (
    "kill",
    "kill-leader",
    "pause",
    "partition",
    "isolate-leader",
    "bridge",
    "asymmetric",
    "slow",
    "lossy",
    "power-loss",
    "clock-jump",
    "disk-full",
)

#: Who a nemesis strikes: resolved against the group's roles when the fault starts.
TARGET_ROLES: Final = ("leader", "follower", "any")


@dataclass(frozen=True)
class Fault:
    """One fault of a schedule, times in seconds from the start of the run."""

    nemesis: str
    start_s: float
    duration_s: float
    #: ``leader``, ``follower`` or ``any``; for link faults, the member whose links are hit
    target: str
    #: nemesis-specific: ``direction`` (asymmetric: "out" = the target's sends are dropped,
    #: "in" = what it receives), ``delay_ms`` (slow), ``reset_probability`` (lossy),
    #: ``jump_s`` (clock-jump)
    params: tuple[tuple[str, float | str], ...] = field(default=())

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s

    def param(self, name: str, default: float | str | None = None) -> float | str | None:
        for key, value in self.params:
            if key == name:
                return value
        return default


@dataclass(frozen=True)
class ScheduleConfig:
    lead_s: float = 5.0
    tail_s: float = 15.0
    fault_min_s: float = 3.0
    fault_max_s: float = 10.0
    gap_min_s: float = 3.0
    gap_max_s: float = 8.0
    slow_ms: float = 200.0
    lossy_reset_probability: float = 0.05
    jump_max_s: float = 600.0

    def __post_init__(self) -> None:
        if not 0 < self.fault_min_s <= self.fault_max_s:
            raise ValueError(f"fault_min_s/fault_max_s must satisfy 0 < min <= max: {self}")
        if not 0 <= self.gap_min_s <= self.gap_max_s:
            raise ValueError(f"gap_min_s/gap_max_s must satisfy 0 <= min <= max: {self}")
        if self.lead_s < 0 or self.tail_s < 0:
            raise ValueError(f"lead_s and tail_s must not be negative: {self}")


def _target(nemesis: str, rng: random.Random) -> str:
    if nemesis in ("kill-leader", "isolate-leader"):
        return "leader"
    if nemesis in ("pause", "asymmetric"):
        return rng.choice(("leader", "follower"))
    return "any"


def _params(nemesis: str, rng: random.Random, cfg: ScheduleConfig) -> tuple[tuple[str, float | str], ...]:
    if nemesis == "asymmetric":
        return (("direction", rng.choice(("out", "in"))),)
    if nemesis == "slow":
        return (("delay_ms", cfg.slow_ms),)
    if nemesis == "lossy":
        return (("reset_probability", cfg.lossy_reset_probability),)
    if nemesis == "clock-jump":
        jump = round(rng.uniform(1.0, cfg.jump_max_s), 3)
        return (("jump_s", jump if rng.random() < 0.5 else -jump),)
    return ()


def schedule(
    rng: random.Random,
    nemeses: Sequence[str],
    duration_s: float,
    config: ScheduleConfig | None = None,
    *,
    each_once: bool = False,
) -> list[Fault]:
    """The faults of one run, in order; empty when the run is too short for one fault.

    ``each_once``: every nemesis strikes exactly once, in a seeded order, and the schedule ends
    there (a short run that still covers them all); :class:`ValueError` when they do not fit."""
    cfg = config or ScheduleConfig()
    unknown = [n for n in nemeses if n not in NEMESES]
    if unknown or not nemeses:
        named = unknown or list(nemeses)
        raise ValueError(f"unknown or no nemeses {named}; choose from {', '.join(NEMESES)}")
    end = duration_s - cfg.tail_s
    order = list(nemeses)
    rng.shuffle(order)
    faults: list[Fault] = []
    t = cfg.lead_s
    while not each_once or len(faults) < len(order):
        length = round(rng.uniform(cfg.fault_min_s, cfg.fault_max_s), 3)
        if t + length > end:
            if each_once:
                raise ValueError(f"{len(order)} faults do not fit in {duration_s:g} s; make the run longer")
            return faults
        nemesis = order[len(faults)] if each_once else rng.choice(order)
        faults.append(Fault(nemesis, round(t, 3), length, _target(nemesis, rng), _params(nemesis, rng, cfg)))
        t += length + rng.uniform(cfg.gap_min_s, cfg.gap_max_s)
    return faults
