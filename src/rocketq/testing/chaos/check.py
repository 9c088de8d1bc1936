"""The checker of a chaos run: pure functions over a history, the members' Raft event logs and
dumps of the replicas, each returning a :class:`CheckResult` (counts per anomaly class, a few
examples each, and statistics), printable.

Queue anomalies (spec/replication.md §3.3; Jepsen's total-queue and its queue taxonomy), from
the history (:mod:`rocketq.testing.chaos.history`). A *read* is a message a ``poll`` or a
``drain`` returned; a payload is *acked* when one of its sends is ``ok``, *indeterminate* when
one is ``info``, has no completion, or ran with SDK retries (``client_retries > 0``), and
*definitely failed* when every attempt ended in a definite ``fail``.

=====================  ===========================================================================
class                  anomaly
=====================  ===========================================================================
lost                   acked, never read by anyone (total-queue ``lost``)
unexpected             read, never sent (total-queue ``unexpected``)
g1a                    definitely failed, yet read
duplicate              one payload at two positions of the log, with no indeterminate attempt
                       (those are counted apart, ``duplicates_after_indeterminate``, and allowed)
inconsistent_offset    one (topic, queue, offset) with two payloads across send acks, polls and
                       drains (every replica's drain included); or an acked payload read only
                       at positions other than the acked one
nonmonotonic_send      one producer's acked offsets in one queue not increasing in send order
poll_skip              a consumer's next read of a queue jumps past an offset (no assignment
                       change between); drains are checked the same way (a hole in the log)
nonmonotonic_poll      a consumer's next read of a queue at or below its previous one
order                  per sharding key, the acked sequence is not a subsequence of the
                       sequence read (each drained node's log, in offset order)
=====================  ===========================================================================

Raft safety, from the event logs (:mod:`rocketq.ha.event_log`) and the replica dumps
(:mod:`rocketq.testing.chaos.replicas`):

=======================  =========================================================================
election_safety          two members became leader in one term
commit_regression        a member's committed index went down within one process lifetime, or
                         a member started with its committed index past its last entry
truncation_below_commit  a truncation removed an entry at or below the committed index
leader_truncation        a member truncated its log while leader
replica_divergence       two replicas differ at an index both have committed (index, term,
                         position, checksum), an index with one term on both differs (log
                         matching), their data bytes differ before the shortest committed end,
                         or a replica lacks entries it had committed
cq_divergence            two replicas' ConsumeQueues point one (topic, queue, offset) at two
                         CommitLog offsets
committed_overwritten    a member reported index i of term t committed (``commit`` line), and a
                         replica holds index i with another term at the end although its log
                         reaches term t or later (leader completeness: the committed prefix never
                         changes; Raft's Figure 8). A replica whose log ends in an older term
                         (a leader killed and not restarted) may still hold its unsent tail there
=======================  =========================================================================
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rocketq.testing.chaos.history import Op

QUEUE_CLASSES: tuple[str, ...] = (
    "lost",
    "unexpected",
    "g1a",
    "duplicate",
    "inconsistent_offset",
    "nonmonotonic_send",
    "poll_skip",
    "nonmonotonic_poll",
    "order",
)
RAFT_CLASSES: tuple[str, ...] = (
    "election_safety",
    "commit_regression",
    "truncation_below_commit",
    "leader_truncation",
    "replica_divergence",
    "cq_divergence",
    "committed_overwritten",
)
ANOMALY_CLASSES: tuple[str, ...] = QUEUE_CLASSES + RAFT_CLASSES
#: Examples kept per class.
MAX_EXAMPLES = 5

Position = tuple[str, int, int]  # topic, queue, offset


@dataclass
class CheckResult:
    """Counts per anomaly class (every class present, zero when clean), up to
    :data:`MAX_EXAMPLES` examples each, and statistics that are not anomalies."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ANOMALY_CLASSES, 0))
    examples: dict[str, list[str]] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)

    def add(self, cls: str, example: str) -> None:
        if cls not in self.counts:
            raise ValueError(f"unknown anomaly class {cls!r}")
        self.counts[cls] += 1
        shown = self.examples.setdefault(cls, [])
        if len(shown) < MAX_EXAMPLES:
            shown.append(example)

    @property
    def valid(self) -> bool:
        return not any(self.counts.values())

    @property
    def anomalies(self) -> dict[str, int]:
        return {k: v for k, v in self.counts.items() if v}

    def merge(self, other: CheckResult) -> CheckResult:
        out = CheckResult()
        for part in (self, other):
            for cls, n in part.counts.items():
                out.counts[cls] += n
            for cls, shown in part.examples.items():
                out.examples.setdefault(cls, []).extend(
                    shown[: MAX_EXAMPLES - len(out.examples.get(cls, []))]
                )
            for k, v in part.stats.items():
                out.stats[k] = out.stats.get(k, 0) + v
        return out

    def __str__(self) -> str:
        lines = ["valid" if self.valid else f"INVALID: {self.anomalies}"]
        for cls in ANOMALY_CLASSES:
            if self.counts[cls]:
                lines.append(f"  {cls}: {self.counts[cls]}")
                lines.extend(f"    {e}" for e in self.examples.get(cls, []))
        if self.stats:
            lines.append("  stats: " + ", ".join(f"{k}={v}" for k, v in sorted(self.stats.items())))
        return "\n".join(lines)


# -- the queue ----------------------------------------------------------------------------------
@dataclass
class _Sends:
    invokes: int = 0
    ok: list[Op] = field(default_factory=list)
    fail: int = 0
    info: int = 0
    sdk_retries: bool = False
    key: str | None = None

    @property
    def indeterminate(self) -> bool:
        return self.info > 0 or self.sdk_retries or self.invokes > len(self.ok) + self.fail + self.info

    @property
    def definitely_failed(self) -> bool:
        return not self.ok and not self.indeterminate and self.fail > 0


def _sends_by_payload(ops: Sequence[Op]) -> dict[str, _Sends]:
    out: dict[str, _Sends] = {}
    for op in ops:
        if op.type != "send" or not op.payload:
            continue
        s = out.setdefault(op.payload, _Sends())
        s.key = s.key if op.key is None else op.key
        s.sdk_retries = s.sdk_retries or op.client_retries > 0
        if op.phase == "invoke":
            s.invokes += 1
        elif op.phase == "ok":
            s.ok.append(op)
        elif op.phase == "fail":
            s.fail += 1
        else:
            s.info += 1
    return out


def _reads(ops: Sequence[Op]) -> list[tuple[Op, Position, str]]:
    return [
        (op, (op.topic, op.queue, r.offset), r.payload)
        for op in ops
        if op.type in ("poll", "drain") and op.phase == "ok"
        for r in op.reads
    ]


def check_history(ops: Sequence[Op]) -> CheckResult:
    """The queue anomalies of a history (see the module docstring)."""
    res = CheckResult()
    sends = _sends_by_payload(ops)
    reads = _reads(ops)
    read_at: dict[str, set[Position]] = collections.defaultdict(set)
    values: dict[Position, dict[str, list[str]]] = collections.defaultdict(
        lambda: collections.defaultdict(list)
    )
    for op, pos, payload in reads:
        read_at[payload].add(pos)
        src = f"drain@{op.node}" if op.type == "drain" else f"poll@{op.process}"
        values[pos][payload].append(src)
    for op in ops:
        if op.type == "send" and op.phase in ("ok", "info") and op.offset >= 0 and op.queue >= 0:
            values[(op.topic, op.queue, op.offset)][op.payload].append(f"ack@{op.process}")
    res.stats.update(
        sends=sum(s.invokes for s in sends.values()),
        acked=sum(1 for s in sends.values() if s.ok),
        indeterminate=sum(1 for s in sends.values() if s.indeterminate and not s.ok),
        definitely_failed=sum(1 for s in sends.values() if s.definitely_failed),
        reads=len(reads),
        recovered=sum(1 for p, s in sends.items() if not s.ok and s.indeterminate and p in read_at),
        duplicates_after_indeterminate=0,
    )
    for payload, s in sends.items():
        if s.ok and payload not in read_at:
            op = s.ok[0]
            res.add(
                "lost", f"{payload} acked at {op.topic}/{op.queue}/{op.offset} by {op.process}, never read"
            )
        elif s.ok:
            acked = {(o.topic, o.queue, o.offset) for o in s.ok if o.offset >= 0}
            if acked and not acked & read_at[payload]:
                res.add(
                    "inconsistent_offset",
                    f"{payload} acked at {sorted(acked)}, read only at {sorted(read_at[payload])}",
                )
        if s.definitely_failed and payload in read_at:
            res.add(
                "g1a",
                f"{payload} failed definitely ({s.fail} attempt(s)), read at {sorted(read_at[payload])}",
            )
    for payload, positions in read_at.items():
        s2 = sends.get(payload)
        if s2 is None:
            res.add("unexpected", f"{payload} read at {sorted(positions)}, never sent")
        elif len(positions) > 1:
            if s2.indeterminate:
                res.stats["duplicates_after_indeterminate"] += 1
            else:
                res.add("duplicate", f"{payload} at {sorted(positions)} (no indeterminate attempt)")
    for pos, by_payload in sorted(values.items()):
        if len(by_payload) > 1:
            seen = "; ".join(f"{p} from {sorted(set(src))}" for p, src in sorted(by_payload.items()))
            res.add("inconsistent_offset", f"{pos[0]}/{pos[1]}/{pos[2]} holds {seen}")
    _check_sends_monotonic(ops, res)
    _check_polls(ops, res)
    _check_order(ops, sends, res)
    return res


def _check_sends_monotonic(ops: Sequence[Op], res: CheckResult) -> None:
    last: dict[tuple[str, str, int], Op] = {}
    for op in ops:
        if op.type != "send" or op.phase != "ok" or op.offset < 0:
            continue
        k = (op.process, op.topic, op.queue)
        prev = last.get(k)
        if prev is not None and op.offset <= prev.offset:
            res.add(
                "nonmonotonic_send",
                f"{op.process} {op.topic}/{op.queue}: {prev.payload} at {prev.offset}, "
                f"then {op.payload} at {op.offset}",
            )
        last[k] = op


def _check_polls(ops: Sequence[Op], res: CheckResult) -> None:
    last: dict[tuple[str, str, str, int], int] = {}
    for op in ops:
        if op.type == "assign":
            for k in [k for k in last if k[0] == op.process]:
                del last[k]
            continue
        if op.type not in ("poll", "drain") or op.phase != "ok":
            continue
        k = (op.process, op.node, op.topic, op.queue)
        what = "drain" if op.type == "drain" else "poll"
        for r in op.reads:
            prev = last.get(k)
            if prev is not None and r.offset <= prev:
                res.add(
                    "nonmonotonic_poll", f"{what} by {op.process}{_at(op)}: offset {prev}, then {r.offset}"
                )
            elif prev is not None and r.offset > prev + 1:
                res.add("poll_skip", f"{what} by {op.process}{_at(op)}: offset {prev}, then {r.offset}")
            last[k] = r.offset


def _at(op: Op) -> str:
    return f" of {op.topic}/{op.queue}" + (f" on {op.node}" if op.node else "")


def _check_order(ops: Sequence[Op], sends: Mapping[str, _Sends], res: CheckResult) -> None:
    acked_by_key: dict[str, list[str]] = collections.defaultdict(list)
    for op in ops:
        if (
            op.type == "send"
            and op.phase == "ok"
            and op.key is not None
            and op.payload not in acked_by_key[op.key]
        ):
            acked_by_key[op.key].append(op.payload)
    if not acked_by_key:
        return
    logs: dict[str, dict[Position, str]] = collections.defaultdict(dict)
    for op in ops:
        if op.type == "drain" and op.phase == "ok":
            for r in op.reads:
                logs[op.node or op.process][(op.topic, op.queue, r.offset)] = r.payload
    if not logs:  # no drain: what the consumers read
        for _op, pos, payload in _reads(ops):
            logs["polls"][pos] = payload
    for node, log in sorted(logs.items()):
        by_key: dict[str, list[str]] = collections.defaultdict(list)
        for _pos, payload in sorted(log.items()):
            s = sends.get(payload)
            if s is not None and s.key is not None:
                by_key[s.key].append(payload)
        for key, acked in sorted(acked_by_key.items()):
            present = set(by_key[key])
            want = [p for p in acked if p in present]  # the lost ones are reported as lost
            bad = _not_subsequence(want, by_key[key])
            if bad is not None:
                res.add("order", f"key {key} on {node}: acked {bad[0]} before {bad[1]}, read the other way")


def _not_subsequence(want: Sequence[str], seq: Sequence[str]) -> tuple[str, str] | None:
    """None when ``want`` is a subsequence of ``seq``; else a pair of ``want`` read out of order."""
    it = iter(seq)
    prev = None
    for w in want:
        if not any(x == w for x in it):
            return (prev or "(start)", w)
        prev = w
    return None


# -- Raft events --------------------------------------------------------------------------------
def check_events(events: Iterable[Mapping[str, Any]]) -> CheckResult:
    """The Raft safety anomalies of the members' event logs (lines of
    :mod:`rocketq.ha.event_log`, each file's lines in order; several files concatenated)."""
    res = CheckResult()
    leaders: dict[int, set[str]] = collections.defaultdict(set)
    commit: dict[tuple[str, int], int] = {}  # (node, pid) -> highest commit seen
    terms: set[int] = set()
    n = 0
    for ev in events:
        n += 1
        kind, node = ev["ev"], str(ev["node"])
        life = (node, int(ev.get("pid", 0)))
        if kind == "start":
            commit.pop(life, None)
            if int(ev.get("commit", -1)) > int(ev.get("ledgerEnd", -1)):
                res.add(
                    "commit_regression",
                    f"{node} started with commit {ev['commit']} past its last index {ev['ledgerEnd']}",
                )
        if kind == "role" and ev.get("role") == "LEADER":
            leaders[int(ev["term"])].add(node)
            terms.add(int(ev["term"]))
        if kind == "truncate":
            frm, at = int(ev["from"]), int(ev.get("commit", -1))
            if frm <= at:
                res.add(
                    "truncation_below_commit",
                    f"{node} truncated from {frm} with commit {at} (term {ev.get('term')})",
                )
            if ev.get("role") == "LEADER":
                res.add(
                    "leader_truncation", f"{node} truncated from {frm} as leader of term {ev.get('term')}"
                )
        if "commit" in ev and kind in ("commit", "role", "truncate", "stop"):
            value = int(ev["commit"])
            prev = commit.get(life)
            if prev is not None and value < prev and not (kind == "stop" and value < 0):
                res.add("commit_regression", f"{node} (pid {life[1]}) commit {prev}, then {value} ({kind})")
            commit[life] = max(value, prev if prev is not None else value)
    for term, who in sorted(leaders.items()):
        if len(who) > 1:
            res.add("election_safety", f"term {term}: leaders {sorted(who)}")
    res.stats.update(events=n, leader_terms=len(terms))
    return res


# -- replicas -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReplicaDump:
    """One replica's log: ``entries`` as (index, term, pos, crc) in index order (crc: the
    entry's chain checksum), its committed index, and optionally its data bytes from
    ``start_offset`` on and its ConsumeQueues ({(topic, queue, offset): CommitLog offset})."""

    node: str
    entries: Sequence[tuple[int, int, int, int]]
    committed_index: int
    data: bytes | None = None
    start_offset: int = 0
    consume_queues: Mapping[tuple[str, int, int], int] | None = None


def check_replicas(dumps: Sequence[ReplicaDump]) -> CheckResult:
    """Log matching and the committed prefix across replicas (see the module docstring)."""
    res = CheckResult()
    by_index = [{e[0]: e for e in d.entries} for d in dumps]
    shortest = min((d.committed_index for d in dumps), default=-1)
    for d in dumps:
        last = d.entries[-1][0] if d.entries else -1
        if d.committed_index > last:
            res.add(
                "replica_divergence",
                f"{d.node} committed index {d.committed_index} past its last entry {last}",
            )
    for i, a in enumerate(dumps):
        for j in range(i + 1, len(dumps)):
            b = dumps[j]
            ea, eb = by_index[i], by_index[j]
            for index in sorted(set(ea) & set(eb)):
                x, y = ea[index], eb[index]
                committed_both = index <= min(a.committed_index, b.committed_index)
                if x != y and (committed_both or x[1] == y[1]):
                    why = "committed on both" if committed_both else "same term"
                    res.add("replica_divergence", f"{a.node} {x} vs {b.node} {y} at index {index} ({why})")
            for index in range(min(a.committed_index, b.committed_index) + 1):
                if (index in ea) != (index in eb):
                    res.add(
                        "replica_divergence",
                        f"index {index} committed but missing on {b.node if index in ea else a.node}",
                    )
    ends = []
    for d in dumps:
        entry = {e[0]: e for e in d.entries}.get(shortest)
        if d.data is not None and entry is not None:
            ends.append(entry[2] - d.start_offset)
    if ends and len(ends) == len(dumps):
        end = ends[0]
        first = dumps[0]
        assert first.data is not None
        for d in dumps[1:]:
            assert d.data is not None
            if d.start_offset != first.start_offset or d.data[:end] != first.data[:end]:
                res.add(
                    "replica_divergence",
                    f"data bytes of {first.node} and {d.node} differ before committed index {shortest}",
                )
    _check_cqs(dumps, res)
    res.stats.update(replicas=len(dumps), shortest_committed_index=shortest)
    return res


def _check_cqs(dumps: Sequence[ReplicaDump], res: CheckResult) -> None:
    cqs = [(d.node, d.consume_queues) for d in dumps if d.consume_queues is not None]
    for i, (na, a) in enumerate(cqs):
        for nb, b in cqs[i + 1 :]:
            assert a is not None and b is not None
            for pos in sorted(set(a) & set(b)):
                if a[pos] != b[pos]:
                    res.add(
                        "cq_divergence", f"{pos[0]}/{pos[1]}/{pos[2]}: {na} -> {a[pos]}, {nb} -> {b[pos]}"
                    )


def check_committed_prefix(events: Iterable[Mapping[str, Any]], dumps: Sequence[ReplicaDump]) -> CheckResult:
    """Every (index, term) a ``commit`` line reported is what every replica holding that index
    holds at the end (spec §3.3, leader completeness)."""
    res = CheckResult()
    reported: dict[int, dict[int, set[str]]] = collections.defaultdict(lambda: collections.defaultdict(set))
    for ev in events:
        if ev["ev"] == "commit" and "term" in ev:
            reported[int(ev["commit"])][int(ev["term"])].add(str(ev["node"]))
    # A replica whose last entry is of an older term than the commit has not heard from a leader
    # of that term since: the entries it holds there are a stale tail (a leader killed before it
    # sent them), cut when it next hears from one, not an overwrite. Once it holds an entry of
    # the commit's term or later, log matching says it must hold the committed entry too.
    terms = [(d.node, {e[0]: e[1] for e in d.entries}, d.entries[-1][1] if d.entries else -1) for d in dumps]
    for index, by_term in sorted(reported.items()):
        for term, who in sorted(by_term.items()):
            for node, held, last_term in terms:
                if index in held and held[index] != term and last_term >= term:
                    res.add(
                        "committed_overwritten",
                        f"index {index} committed in term {term} (by {sorted(who)}), "
                        f"{node} holds term {held[index]}",
                    )
    res.stats["committed_reports"] = sum(len(t) for t in reported.values())
    return res


def check(
    ops: Sequence[Op],
    events: Iterable[Mapping[str, Any]] = (),
    replicas: Sequence[ReplicaDump] = (),
) -> CheckResult:
    """Everything: :func:`check_history`, :func:`check_events`, :func:`check_replicas` and, with
    both events and replicas, :func:`check_committed_prefix`."""
    events = list(events)
    res = check_history(ops).merge(check_events(events))
    if replicas:
        res = res.merge(check_replicas(replicas)).merge(check_committed_prefix(events, replicas))
    return res
