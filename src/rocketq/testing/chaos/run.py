"""One chaos run, and a campaign of them: a group, a workload, faults on a seeded schedule, a check.

Theory of operation::

    seed ─► schedule(...) ─► [Fault]                                   (schedule.py, pure)
    ChaosGroup(root/group, event logs on) ─ start ─► name server + 3 brokers, proxied peer links
    Workload A (per-queue lanes, workload resends) ┐
    Workload B (sharding keys, SDK retries)        ├─ Recorder ─► root/history.jsonl
      ... run clock t=0 ... strike(fault) at start_s, heal at end_s, each as scheduled ...
    heal everything ─► wait for a master ─► the tail: sends must be acknowledged again
    stop the workloads ─► drain every queue from the master ─► SIGTERM the brokers
    replica drains + replica dumps (files) + Raft event logs ─► check(...) ─► RunResult
    acknowledged sends + fault windows ─► unavailability(...) (report.py) ─► table, chart

A fault's *target role* (``leader``, ``follower``, ``any``) is resolved when it strikes, from
the brokers' own view (:meth:`ChaosGroup.leader`); with no leader at that moment a leader fault
strikes a random member. A nemesis this machine cannot inject (``disk-full`` without root,
``clock-jump`` without a C compiler) is left out of the run's schedule before it is drawn, and
the run says so in ``skipped``. The run clock is the monotonic clock of this process, the one the
history's ``mono_ns`` uses, so fault windows and acknowledgements line up.

``python -m rocketq.testing.chaos.run --seed 7 --seconds 120`` runs one; ``--runs 30`` a
campaign (seeds ``seed, seed+1, ...``, nemeses drawn from all of them), printing each run's line
and the table of unavailability; ``--markdown FILE`` writes the campaign's results (tables and
chart links) for docs/chaos.md, ``--charts DIR`` one PNG per run. Any run replays from its seed
(with the same ``--seconds`` and ``--nemesis``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import pathlib
import random
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence

from rocketq.ha.event_log import read_events
from rocketq.testing.chaos import clock
from rocketq.testing.chaos.check import ANOMALY_CLASSES, CheckResult, check
from rocketq.testing.chaos.cluster import ChaosError, ChaosGroup
from rocketq.testing.chaos.history import Op, Recorder
from rocketq.testing.chaos.replicas import read_replica, replica_drain
from rocketq.testing.chaos.report import Outage, Window, chart, markdown_table, summarize, unavailability
from rocketq.testing.chaos.schedule import NEMESES, Fault, ScheduleConfig, schedule
from rocketq.testing.chaos.workload import Workload, WorkloadConfig

log = logging.getLogger(__name__)

TOPICS = ("ChaosA", "ChaosB")
QUEUES = 4
#: Bound on a master being there again after the last heal, and on the first acks after it.
RECOVER_TIMEOUT_S = 60.0
#: The schedule of short runs (CI): faults of 2-4 s, 2-3 s apart, 10 s to recover at the end.
SHORT_SCHEDULE = ScheduleConfig(
    lead_s=3.0, tail_s=10.0, fault_min_s=2.0, fault_max_s=4.0, gap_min_s=2.0, gap_max_s=3.0
)


@dataclasses.dataclass(frozen=True)
class RunConfig:
    seed: int
    duration_s: float = 120.0
    nemeses: tuple[str, ...] = NEMESES
    #: every nemesis exactly once (a short run that covers them all) instead of random draws
    each_once: bool = False
    schedule: ScheduleConfig = dataclasses.field(default_factory=ScheduleConfig)
    election_timeout_ms: int = 1000
    heartbeat_interval_ms: int = 200
    flush: str = "ASYNC_FLUSH"
    #: ``enableBatchPush`` on every member (several entries per append message; DLedger's
    #: default, and the group's, is one entry per message)
    batch_push: bool = False
    #: where the run's group, history and logs go (a temporary directory when None)
    root: pathlib.Path | None = None
    keep: bool = False


@dataclasses.dataclass
class RunResult:
    seed: int
    duration_s: float
    nemeses: tuple[str, ...]
    windows: list[Window]
    outages: list[Outage]
    acks: list[tuple[float, float]]
    result: CheckResult
    skipped: dict[str, str]
    root: pathlib.Path
    #: the run's own troubles: a fault that could not be injected or undone (the run goes on)
    notes: list[str] = dataclasses.field(default_factory=list)
    batch_push: bool = False

    @property
    def valid(self) -> bool:
        return self.result.valid

    def line(self) -> str:
        counts = self.result.counts
        un = [o.unavailable_s for o in self.outages if o.unavailable_s is not None]
        worst = f"{max(un):.2f}" if un else "—"
        return (
            f"seed {self.seed}{' (batch push)' if self.batch_push else ''}: "
            f"{'valid' if self.valid else 'INVALID ' + str(self.result.anomalies)}; "
            f"{len(self.acks)} acked, {len(self.windows)} faults, worst unavailability {worst} s, "
            f"lost {counts['lost']}, duplicates {counts['duplicate']} "
            f"(+{self.result.stats.get('duplicates_after_indeterminate', 0)} after indeterminate), "
            f"g1a {counts['g1a']}, order {counts['order']}"
        )


def available_nemeses(nemeses: Sequence[str], work_dir: pathlib.Path) -> tuple[list[str], dict[str, str]]:
    """The nemeses this machine can inject, and why the others cannot be."""
    skipped: dict[str, str] = {}
    if "disk-full" in nemeses and os.geteuid() != 0:
        skipped["disk-full"] = "a full disk is a small tmpfs, and mounting one needs root"
    if "clock-jump" in nemeses:
        try:
            clock.build_shim(work_dir)
        except clock.ShimUnavailable as exc:
            skipped["clock-jump"] = str(exc)
    return [n for n in nemeses if n not in skipped], skipped


class _Striker:
    """Carries out faults on a group and undoes them."""

    def __init__(self, group: ChaosGroup, rng: random.Random, offset_files: dict[int, pathlib.Path]) -> None:
        self.group = group
        self.rng = rng
        self.offset_files = offset_files

    def resolve(self, role: str) -> int:
        """The node a fault for ``role`` strikes now."""
        nodes = [n for n in self.group.node_ids if self.group.alive(n)] or self.group.node_ids
        leader = self.group.leader()
        if role == "leader" and leader is not None:
            return leader
        if role == "follower" and leader is not None:
            others = [n for n in nodes if n != leader]
            if others:
                return self.rng.choice(others)
        return self.rng.choice(nodes)

    def strike(self, fault: Fault, n: int) -> Callable[[], None]:
        """Inject ``fault`` on node ``n``; returns what undoes it."""
        g = self.group
        others = [o for o in g.node_ids if o != n]
        kind = fault.nemesis
        if kind in ("kill", "kill-leader"):
            g.kill(n)
            return lambda: g.restart(n)
        if kind == "pause":
            g.pause(n)
            return lambda: g.resume(n)
        if kind in ("partition", "isolate-leader"):
            g.isolate(n)
            return g.heal
        if kind == "bridge":
            a, c = others
            g.block(a, c)
            g.block(c, a)
            return g.heal
        if kind == "asymmetric":
            for o in others:
                if fault.param("direction") == "out":
                    g.block(n, o)
                else:
                    g.block(o, n)
            return g.heal
        if kind in ("slow", "lossy"):
            for o in others:
                if kind == "slow":
                    delay = float(fault.param("delay_ms", 200.0) or 0.0)
                    g.slow(n, o, delay)
                    g.slow(o, n, delay)
                else:
                    p = float(fault.param("reset_probability", 0.05) or 0.0)
                    g.lossy(n, o, p)
                    g.lossy(o, n, p)
            return g.heal
        if kind == "power-loss":
            g.lose_unsynced(n, seed=self.rng.randrange(1 << 32))
            return lambda: g.restart(n)
        if kind == "clock-jump":
            clock.set_offset(self.offset_files[n], float(fault.param("jump_s", 60.0) or 0.0))
            return lambda: clock.set_offset(self.offset_files[n], 0.0)
        if kind == "disk-full":
            g.disk_full(n)
            return lambda: g.disk_full(n, False)
        raise ValueError(f"unknown nemesis {kind!r}")

    def heal_all(self) -> int:
        """Undo every fault (clocks too); return the leader once all follow it."""
        for offset_file in self.offset_files.values():
            clock.set_offset(offset_file, 0.0)
        return self.group.recover(RECOVER_TIMEOUT_S)


def _acks(ops: Sequence[Op], t0_ns: int) -> list[tuple[float, float]]:
    """(invoke_s, ok_s) of every acknowledged send, on the run clock."""
    invoked: dict[tuple[str, str, int], int] = {}
    out = []
    for op in ops:
        if op.type != "send":
            continue
        key = (op.process, op.payload, op.attempt)
        if op.phase == "invoke":
            invoked[key] = op.mono_ns
        elif op.phase == "ok" and key in invoked:
            out.append(((invoked[key] - t0_ns) / 1e9, (op.mono_ns - t0_ns) / 1e9))
    return out


def _stop_all(workloads: Sequence[Workload]) -> None:
    """Stop every workload, then raise the first failure: one that does not stop must not leave
    the next one sending while the brokers are stopped."""
    failures: list[Exception] = []
    for w in workloads:
        try:
            w.stop()
        except Exception as exc:
            failures.append(exc)
    if failures:
        raise failures[0]


def _wait_until(deadline: float) -> None:
    """Pace the schedule: return at ``deadline`` (run clock, monotonic)."""
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(left, 0.2))


def _workloads(namesrv: str, recorder: Recorder) -> list[Workload]:
    return [
        Workload(
            WorkloadConfig(
                namesrv, TOPICS[0], producers=2, sync_producers=1, queues=QUEUES, resends=3,
                group_prefix=TOPICS[0], prefix="a",
            ),
            recorder,
        ),
        Workload(
            WorkloadConfig(
                namesrv, TOPICS[1], producers=2, sharding_keys=True, client_retries=2,
                lite_pull_consumers=2, push_consumers=0, group_prefix=TOPICS[1], prefix="b",
            ),
            recorder,
        ),
    ]  # fmt: skip


def _create_topics(group: ChaosGroup) -> None:
    from rocketq.client import Admin  # noqa: PLC0415 - the client loads only when a run starts

    with Admin(group.namesrv_addr) as admin:
        for topic in TOPICS:
            admin.create_topic(topic, QUEUES, QUEUES, cluster="DefaultCluster")
        deadline = time.monotonic() + RECOVER_TIMEOUT_S
        for topic in TOPICS:
            while True:
                try:
                    if admin.topic_route(topic).queue_datas:
                        break
                except Exception as exc:
                    if time.monotonic() > deadline:
                        raise ChaosError(f"no route of {topic} after {RECOVER_TIMEOUT_S:g} s") from exc
                time.sleep(0.1)


def events_tail(path: pathlib.Path, count: int = 12) -> str:
    """The last ``count`` events of a member's Raft event log other than commit advances, and its
    last event, one JSON object a line: what a failure note quotes, since the run's directory may
    be gone by the time someone reads it."""
    try:
        events = list(read_events(str(path)))
    except (OSError, ValueError) as exc:
        return f"(unreadable: {exc})"
    if not events:
        return "(no events)"
    chosen = [e for e in events if e.get("ev") != "commit"][-count:]
    if events[-1] not in chosen:
        chosen.append(events[-1])
    keep = ("ev", "pid", "wall_ms", "role", "term", "leader", "ledgerEnd", "commit", "from", "to")
    return "\n".join(json.dumps({k: e[k] for k in keep if k in e}) for e in chosen)


def run_once(cfg: RunConfig) -> RunResult:
    """One run (module docstring). Raises only when the group cannot be started at all."""
    made_root = cfg.root is None
    root = cfg.root or pathlib.Path(tempfile.mkdtemp(prefix=f"rocketq-chaos-{cfg.seed}-"))
    root.mkdir(parents=True, exist_ok=True)
    rng = random.Random(cfg.seed)
    nemeses, skipped = available_nemeses(cfg.nemeses, root / "shim")
    faults = schedule(rng, nemeses, cfg.duration_s, cfg.schedule, each_once=cfg.each_once) if nemeses else []
    kinds = {f.nemesis for f in faults}
    events_dir = root / "events"
    offset_files: dict[int, pathlib.Path] = {}
    node_env: dict[int, dict[str, str]] = {}
    if "clock-jump" in kinds:
        shim = clock.build_shim(root / "shim")
        for n in range(3):
            offset_files[n] = root / f"clock-n{n}"
            clock.set_offset(offset_files[n], 0.0)
            node_env[n] = clock.env_for(shim, offset_files[n])
    group = ChaosGroup(
        root / "group",
        election_timeout_ms=cfg.election_timeout_ms,
        heartbeat_interval_ms=cfg.heartbeat_interval_ms,
        flush=cfg.flush,
        tmpfs_nodes=range(3) if "disk-full" in kinds else (),
        conf={
            "dLegerEventLogPath": f"{events_dir}/raft-{{selfId}}.jsonl",
            "enableBatchPush": "true" if cfg.batch_push else "false",
        },
        seed=cfg.seed,
        node_env=node_env,
        verbose=False,
    )
    recorder = Recorder(str(root / "history.jsonl"))
    windows: list[Window] = []
    notes: list[str] = []

    def events_end(node: int) -> str:  # the end of the member's Raft event log, as notes quote it
        return events_tail(events_dir / f"raft-{group.self_id(node)}.jsonl")

    group.start()
    try:
        _create_topics(group)
        striker = _Striker(group, rng, offset_files)
        workloads = _workloads(group.namesrv_addr, recorder)
        for w in workloads:
            w.start()
        t0 = time.monotonic()
        try:
            for fault in faults:
                _wait_until(t0 + fault.start_s)
                node = striker.resolve(fault.target)
                began = time.monotonic() - t0  # after resolving the target: the fault starts now
                try:
                    undo = striker.strike(fault, node)
                except (ChaosError, OSError) as exc:
                    notes.append(f"{fault.nemesis} at {began:.1f} s not injected: {exc}")
                    continue
                _wait_until(t0 + fault.end_s)
                try:
                    undo()
                except (ChaosError, OSError) as exc:
                    story = events_end(node)
                    notes.append(
                        f"{fault.nemesis} on n{node}: undo failed: {exc}; its Raft events end:\n{story}"
                    )
                windows.append(Window(fault.nemesis, began, time.monotonic() - t0, f"n{node}"))
            try:
                striker.heal_all()
            except ChaosError as exc:
                tails = "\n".join(f"n{n}'s Raft events end:\n{events_end(n)}" for n in group.node_ids)
                raise ChaosError(f"{exc}\n{tails}") from None
            _wait_until(t0 + cfg.duration_s)
        finally:
            _stop_all(workloads)
        ops = [op for w in workloads for op in w.drain()]
        del ops  # recorded; read back from the recorder with everything else
    finally:
        try:
            for n in group.node_ids:
                if group.alive(n):
                    group.kill(n, signal.SIGTERM)  # a clean stop: checkpoints hold the commit index
            stores = {group.self_id(n): group.data_dir(n) for n in group.node_ids}
            replica_ops = [op for sid, r in stores.items() for t in TOPICS for op in replica_drain(r, sid, t)]
            dumps = [read_replica(r, sid, topics=TOPICS) for sid, r in stores.items()]
        finally:
            recorder.close()
            group.stop()
    history = recorder.ops() + replica_ops
    events = [e for path in sorted(events_dir.glob("raft-*.jsonl")) for e in read_events(str(path))]
    result = check(history, events, dumps)
    acks = _acks(recorder.ops(), int(t0 * 1e9))
    out = RunResult(
        cfg.seed,
        cfg.duration_s,
        tuple(nemeses),
        windows,
        unavailability(windows, acks),
        acks,
        result,
        skipped,
        root,
        notes,
        cfg.batch_push,
    )
    (root / "run.json").write_text(json.dumps(_json(out), indent=1) + "\n", encoding="utf-8")
    if made_root and not cfg.keep and result.valid:
        shutil.rmtree(root, ignore_errors=True)
    return out


# -- the campaign ---------------------------------------------------------------------------------
def campaign_markdown(runs: Sequence[RunResult], charts: dict[int, str]) -> str:
    acked = sum(len(r.acks) for r in runs)
    totals = {cls: sum(r.result.counts[cls] for r in runs) for cls in ANOMALY_CLASSES}
    after = sum(r.result.stats.get("duplicates_after_indeterminate", 0) for r in runs)
    lines = [
        "| seed | s | faults | acked | lost | dup | dup after indeterminate | g1a | order | other | chart |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in runs:
        c = r.result.counts
        other = sum(v for k, v in c.items() if k not in ("lost", "duplicate", "g1a", "order"))
        link = f"[png]({charts[r.seed]})" if r.seed in charts else ""
        after_indeterminate = r.result.stats.get("duplicates_after_indeterminate", 0)
        cells = [r.seed, f"{r.duration_s:g}", len(r.windows), len(r.acks), c["lost"], c["duplicate"]]
        cells += [after_indeterminate, c["g1a"], c["order"], other, link]
        lines.append("| " + " | ".join(str(x) for x in cells) + " |")
    outages = [o for r in runs for o in r.outages]
    summary = [
        f"{len(runs)} runs, {acked} acknowledged sends, {sum(len(r.windows) for r in runs)} faults.",
        "Anomalies: "
        + ", ".join(f"{k} {v}" for k, v in totals.items())
        + f"; duplicates after indeterminate attempts (allowed) {after}.",
    ]
    return "\n\n".join(["\n".join(summary), "\n".join(lines), markdown_table(summarize(outages))]) + "\n"


BEGIN = "<!-- campaign -->"
END = "<!-- /campaign -->"


def write_results(path: pathlib.Path, results: str, command: str) -> None:
    """Put ``results`` between the campaign markers of ``path`` (the rest of the document stays),
    or write a file of its own when ``path`` has no markers or does not exist."""
    block = f"{BEGIN}\n`python -m rocketq.testing.chaos.run {command}`\n\n{results}{END}"
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = block + "\n"
    path.write_text(text, encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    about = (__doc__ or "").split("\n")[0]
    p = argparse.ArgumentParser(prog="python -m rocketq.testing.chaos.run", description=about)
    p.add_argument("--seed", type=int, default=None, help="first seed (default: random, printed)")
    p.add_argument("--runs", type=int, default=1, help="runs, seeds seed .. seed+runs-1 (default 1)")
    p.add_argument("--seconds", type=float, default=120.0, help="length of each run (default 120)")
    p.add_argument("--nemesis", action="append", choices=NEMESES, help="only these (repeat; default all)")
    p.add_argument("--each-once", action="store_true", help="every nemesis once per run, in a seeded order")
    p.add_argument("--short", action="store_true", help="faults of 2-4 s, 2-3 s apart (the CI schedule)")
    p.add_argument("--flush", choices=("ASYNC_FLUSH", "SYNC_FLUSH"), default="ASYNC_FLUSH")
    p.add_argument("--batch-push", action="store_true", help="enableBatchPush=true on every member")
    p.add_argument("--dir", type=pathlib.Path, default=None, help="keep each run's files under DIR/seed-N")
    p.add_argument("--charts", type=pathlib.Path, default=None, help="write one PNG per run into DIR")
    p.add_argument("--markdown", type=pathlib.Path, default=None, help="write the campaign's tables here")
    p.add_argument("--json", type=pathlib.Path, default=None, help="append one JSON line per run here")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    # the clients log every pull and send that a fault breaks; the history has them all
    logging.getLogger("rocketq.client").setLevel(logging.ERROR)
    first = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    runs: list[RunResult] = []
    charts: dict[int, str] = {}
    for seed in range(first, first + args.runs):
        cfg = RunConfig(
            seed,
            args.seconds,
            tuple(args.nemesis or NEMESES),
            args.each_once,
            SHORT_SCHEDULE if args.short else ScheduleConfig(),
            flush=args.flush,
            batch_push=args.batch_push,
            root=None if args.dir is None else args.dir / f"seed-{seed}",
            keep=args.dir is not None,
        )
        print(f"seed {seed}: running {args.seconds:g} s", flush=True)
        r = run_once(cfg)
        runs.append(r)
        print(r.line(), flush=True)
        for note in r.notes:
            print(f"  note: {note}", flush=True)
        if not r.valid:
            print(str(r.result), flush=True)
            print(f"  files kept in {r.root}", flush=True)
        if args.charts is not None:
            path = chart(args.charts / f"seed-{seed}.png", f"seed {seed}", r.acks, r.windows, r.duration_s)
            base = args.markdown.parent if args.markdown else pathlib.Path.cwd()
            charts[seed] = os.path.relpath(path, base)
        if args.json is not None:
            with args.json.open("a", encoding="utf-8") as f:
                f.write(json.dumps(_json(r)) + "\n")
    skipped = {k: v for r in runs for k, v in r.skipped.items()}
    for k, v in skipped.items():
        print(f"skipped {k}: {v}")
    print(markdown_table(summarize([o for r in runs for o in r.outages])))
    if args.markdown is not None:
        write_results(
            args.markdown, campaign_markdown(runs, charts), " ".join(sys.argv[1:] if argv is None else argv)
        )
    return 0 if all(r.valid for r in runs) else 1


def _json(r: RunResult) -> dict[str, object]:
    return {
        "seed": r.seed,
        "seconds": r.duration_s,
        "batch_push": r.batch_push,
        "valid": r.valid,
        "acked": len(r.acks),
        "counts": r.result.counts,
        "stats": r.result.stats,
        "faults": [[w.nemesis, round(w.start_s, 3), round(w.end_s, 3), w.target] for w in r.windows],
        "unavailable_s": [None if o.unavailable_s is None else round(o.unavailable_s, 3) for o in r.outages],
        "skipped": r.skipped,
        "notes": r.notes,
    }


if __name__ == "__main__":
    sys.exit(main())
