"""Deterministic simulation of a Raft group built from :class:`rocketq.ha.raft.RaftNode` cores.

One seed decides everything: the group size, the acknowledgement policy, the network (delay,
loss, duplication, reordering through random delays, partitions of random halves, an isolated
leader, one-way links), crashes and restarts, client proposals and leadership transfers. Time is
virtual (an event heap), so a run is exactly reproducible from its seed.

Disk model per node: the hard state is durable when PersistHardState is carried out (the driver
contract); appended entries are written at once (page cache) and fsynced a few milliseconds later
(group commit). A crash under ``AckPolicy.FSYNCED`` is a power loss: entries not fsynced are lost.
Under ``AckPolicy.APPENDED`` it is a process crash (``kill -9``): the page cache survives. (Power
loss under APPENDED can lose committed entries; a test shows the checker finds it.)

After every step the checker asserts: election safety, log matching (per (index, term) one entry
and one predecessor term), leader completeness (a new leader holds every committed entry),
committed-prefix stability, state-machine safety (one entry applied per index), commit index
monotonic per process lifetime, no truncation of a committed entry, persist-before-send (every
message carries the durable term; votes the durable vote). After the faults heal: a leader is
elected and a proposal commits on every node within a bound.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

from rocketq.ha.raft import RaftNode
from rocketq.ha.raft_log import RaftLog
from rocketq.ha.raft_types import (
    AckPolicy,
    Action,
    AppendEntries,
    Apply,
    Entry,
    Event,
    HardState,
    Message,
    Outcome,
    Persisted,
    PersistHardState,
    PreVote,
    PreVoteReply,
    ProposalResult,
    Propose,
    ProposeBatch,
    RaftConfig,
    Receive,
    Role,
    RoleChanged,
    Send,
    Tick,
    TransferLeadership,
    TruncateLog,
    Vote,
    VoteReply,
)


class Violation(AssertionError):
    """A safety or liveness property failed."""


@dataclass
class SimNode:
    id: str
    config: RaftConfig
    core: RaftNode | None = None
    hard_state: HardState = field(default_factory=HardState)
    disk: list[Entry] = field(default_factory=list)
    synced_len: int = 0
    incarnation: int = 0
    fsync_pending: bool = False
    commit_seen: int = -1
    applied_upto: int = -1


class DiskReader:
    """The entry store's read path: serves written entries from a node's simulated disk."""

    def __init__(self, node: SimNode) -> None:
        self.node = node
        self.reads = 0

    def read(self, lo: int, max_bytes: int, hi: int | None = None) -> list[Entry]:
        self.reads += 1
        out: list[Entry] = []
        total = 0
        for e in self.node.disk[lo : None if hi is None else hi + 1]:
            if out and total + e.size > max_bytes:
                break
            out.append(e)
            total += e.size
        return out


def term_runs(entries: list[Entry]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for e in entries:
        if not runs or runs[-1][1] != e.term:
            runs.append((e.index, e.term))
    return runs


@dataclass
class SimResult:
    seed: int
    members: int
    policy: AckPolicy
    steps: int
    elections: int
    committed: int
    acked: int
    heal_to_commit_ms: int
    store_reads: int


class Simulation:
    TICK_MS = 10

    def __init__(
        self,
        seed: int,
        *,
        chaos_ms: int = 1500,
        liveness_ms: int = 4000,
        policy: AckPolicy | None = None,
        power_loss: bool | None = None,
    ) -> None:
        """``policy`` and ``power_loss`` override the seed's choice; by default a crash is a power
        loss under FSYNCED (what the policy survives) and a process crash under APPENDED."""
        self.seed = seed
        self.rng = random.Random(seed)
        rng = self.rng
        n = rng.choice((3, 3, 5))
        seeded_policy = rng.choice((AckPolicy.APPENDED, AckPolicy.FSYNCED))
        self.policy = policy or seeded_policy
        self.power_loss = self.policy is AckPolicy.FSYNCED if power_loss is None else power_loss
        ids = tuple(f"n{i}" for i in range(n))
        preferred = rng.choice(ids) if rng.random() < 0.2 else None
        self.use_reader = rng.random() < 0.5
        self.readers: list[DiskReader] = []
        self.nodes: dict[str, SimNode] = {}
        for nid in ids:
            cfg = RaftConfig(
                node_id=nid,
                members=ids,
                heartbeat_interval_ms=30,
                election_timeout_ms=150,
                ack_policy=self.policy,
                ack_timeout_ms=400,
                max_inflight_msgs=rng.choice((1, 4, 64)),
                max_batch_bytes=rng.choice((60, 400, 4096)),
                resend_timeout_ms=100,
                preferred_leader_id=preferred,
                max_transfer_lag=20,
            )
            self.nodes[nid] = SimNode(nid, cfg)
        self.ids = ids
        self.now = 0
        self.chaos_ms = chaos_ms
        self.liveness_ms = liveness_ms
        self._heap: list[tuple[int, int, str, str, object, int]] = []
        self._seq = 0
        self.blocked: set[tuple[str, str]] = set()
        self.loss = 0.0
        self.dup = 0.0
        self.max_delay = rng.choice((2, 10, 30))
        self.fsync_ms = rng.choice((3, 30))
        self.kill_new_leaders = rng.choice((0.0, 0.0, 0.5))
        # checker state
        self.leaders: dict[int, str] = {}
        self.entries: dict[
            tuple[int, int], tuple[bytes, int, int]
        ] = {}  # (index, term) -> (data, kind, prev)
        self.committed: dict[int, tuple[int, bytes]] = {}
        self.applied: dict[int, tuple[int, bytes]] = {}
        self.all_data: set[bytes] = set()
        self.outcomes: dict[int, ProposalResult] = {}
        self.proposals: dict[int, bytes] = {}
        self._next_pid = 0
        self.steps = 0
        self.elections = 0
        self.healed_at: int | None = None
        self.probe_pids: set[int] = set()
        self.live_at: int | None = None
        self.ready_at: int | None = None

    # ---------------------------------------------------------------------------------- plumbing

    def fail(self, what: str) -> None:
        raise Violation(f"t={self.now} ms: {what}")

    def _at(self, t: int, kind: str, node: str, payload: object = None, inc: int = -1) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, kind, node, payload, inc))

    def _start(self, node: SimNode) -> None:
        node.incarnation += 1
        log: tuple[Entry, ...] | RaftLog = tuple(node.disk)
        if self.use_reader:  # payloads released once applied, read back from the disk when needed
            reader = DiskReader(node)
            self.readers.append(reader)
            log = RaftLog.from_store(term_runs(node.disk), len(node.disk) - 1, reader)
        node.core = RaftNode(
            node.config,
            random.Random(self.seed * 7919 + self.ids.index(node.id) * 131 + node.incarnation),
            node.hard_state,
            log,
        )
        node.synced_len = len(node.disk)
        node.fsync_pending = False
        node.commit_seen = -1
        node.applied_upto = -1
        self._at(self.now + self.rng.randrange(1, self.TICK_MS + 1), "tick", node.id, inc=node.incarnation)

    def crash(self, nid: str) -> None:
        node = self.nodes[nid]
        if node.core is None:
            return
        node.core = None
        node.incarnation += 1
        if self.power_loss:
            del node.disk[node.synced_len :]  # what was not fsynced is gone
        # the hard state is never lost: PersistHardState is durable before the core goes on

    def step(self, nid: str, event: Event) -> None:
        node = self.nodes[nid]
        core = node.core
        assert core is not None
        actions = core.step(event)
        self.steps += 1
        self._check_commit(node, core)
        for action in actions:
            self._carry_out(node, core, action)

    def _carry_out(self, node: SimNode, core: RaftNode, action: Action) -> None:
        if isinstance(action, PersistHardState):
            old = node.hard_state
            if action.term < old.term or (
                action.term == old.term and old.vote is not None and action.vote != old.vote
            ):
                self.fail(f"{node.id} hard state went from {old} to {action}")
            node.hard_state = HardState(action.term, action.vote)
        elif isinstance(action, Send):
            self._check_persisted_before_send(node, action.message)
            self._send(action.message)
        elif isinstance(action, TruncateLog):
            if core.role is Role.LEADER:
                self.fail(f"leader {node.id} truncated its log at {action.from_index}")
            for e in node.disk[action.from_index :]:
                if self.committed.get(e.index) == (e.term, e.data):
                    self.fail(f"{node.id} truncated committed entry {e.index} (term {e.term})")
            del node.disk[action.from_index :]
            node.synced_len = min(node.synced_len, action.from_index)
        elif isinstance(action, AppendEntries):
            for e in action.entries:
                if e.index != len(node.disk):
                    self.fail(f"{node.id} appends entry {e.index} after a log of {len(node.disk)}")
                prev = node.disk[-1].term if node.disk else 0
                seen = self.entries.setdefault((e.index, e.term), (e.data, int(e.kind), prev))
                if seen != (e.data, int(e.kind), prev):
                    self.fail(f"log matching: two different entries at index {e.index} term {e.term}")
                node.disk.append(e)
                self.all_data.add(e.data)
            last = action.entries[-1]
            self._at(self.now, "written", node.id, (last.index, last.term), node.incarnation)
            if not node.fsync_pending:
                node.fsync_pending = True
                self._at(
                    self.now + self.rng.randrange(1, self.fsync_ms), "fsync", node.id, None, node.incarnation
                )
        elif isinstance(action, Apply):
            for e in action.entries:
                if e.index != node.applied_upto + 1 or e.index > core.commit_index:
                    self.fail(
                        f"{node.id} applies {e.index} after {node.applied_upto}, commit {core.commit_index}"
                    )
                node.applied_upto = e.index
                if self.applied.setdefault(e.index, (e.term, e.data)) != (e.term, e.data):
                    self.fail(f"state-machine safety: two entries applied at index {e.index}")
        elif isinstance(action, ProposalResult):
            for one in action.each():  # a result may answer a run of proposals made together
                self._proposal_result(one)
        elif isinstance(action, RoleChanged) and action.role is Role.LEADER:
            self.elections += 1
            if self.healed_at is None and self.rng.random() < self.kill_new_leaders:
                # a leader that dies right after its election leaves old-term entries on some
                # followers and not on others: the raw material of Raft's Figure 8
                self._at(
                    self.now + self.rng.randrange(1, 4 * self.max_delay + 2),
                    "kill",
                    node.id,
                    None,
                    node.incarnation,
                )
            if self.leaders.setdefault(action.term, node.id) != node.id:
                self.fail(
                    f"election safety: {self.leaders[action.term]} and {node.id} lead term {action.term}"
                )
            for index, (term, data) in self.committed.items():
                if index > core.log.last_index or core.log.entry(index).term != term:
                    self.fail(
                        f"leader completeness: leader {node.id} of term {action.term} lacks entry {index}"
                    )
                if core.log.entry(index).data != data:
                    self.fail(f"leader completeness: leader {node.id} has other data at {index}")

    def _proposal_result(self, action: ProposalResult) -> None:
        if action.proposal_id in self.outcomes:
            self.fail(f"proposal {action.proposal_id} answered twice")
        self.outcomes[action.proposal_id] = action
        if action.outcome is Outcome.SUCCESS:
            data = self.proposals[action.proposal_id]
            if self.committed.get(action.index) != (action.term, data):
                self.fail(f"proposal {action.proposal_id} acked at {action.index} but not committed there")
            if action.proposal_id in self.probe_pids and self.live_at is None:
                self.live_at = action.index

    def _check_commit(self, node: SimNode, core: RaftNode) -> None:
        c = core.commit_index
        if c < node.commit_seen:
            self.fail(f"{node.id} commit index went back from {node.commit_seen} to {c}")
        for i in range(node.commit_seen + 1, c + 1):
            e = core.log.entry(i)
            if self.committed.setdefault(i, (e.term, e.data)) != (e.term, e.data):
                self.fail(f"committed prefix changed at {i}: {self.committed[i][0]} then term {e.term}")
        node.commit_seen = c

    def _check_persisted_before_send(self, node: SimNode, m: Message) -> None:
        hs = node.hard_state
        if isinstance(m, PreVote | PreVoteReply):
            return
        if m.term != hs.term:
            self.fail(f"{node.id} sends {type(m).__name__} in term {m.term}, durable term {hs.term}")
        if isinstance(m, Vote) and hs.vote != node.id:
            self.fail(f"{node.id} asks for votes before its own vote is durable")
        if isinstance(m, VoteReply) and m.granted and hs.vote != m.dst:
            self.fail(f"{node.id} grants a vote to {m.dst} that is not durable")

    def _send(self, m: Message) -> None:
        if (m.src, m.dst) in self.blocked or self.rng.random() < self.loss:
            return
        self._at(self.now + self.rng.randrange(1, self.max_delay + 1), "msg", m.dst, m)
        if self.rng.random() < self.dup:
            self._at(self.now + self.rng.randrange(1, 3 * self.max_delay + 1), "msg", m.dst, m)

    # ---------------------------------------------------------------------------------- driver

    def propose(self, nid: str, probe: bool = False) -> None:
        pid = self._next_pid
        # every fourth plain proposal is a batch of three (ProposeBatch), the RNG left alone
        count = 3 if not probe and pid % 4 == 0 else 1
        self._next_pid += count
        batch = tuple(f"s{self.seed}p{p}".encode() for p in range(pid, pid + count))
        for p, data in enumerate(batch, pid):
            self.proposals[p] = data
        if probe:
            self.probe_pids.add(pid)
        self.step(nid, Propose(pid, batch[0]) if count == 1 else ProposeBatch(pid, batch))

    def leader(self) -> str | None:
        best: tuple[int, str] | None = None
        for node in self.nodes.values():
            core = node.core
            if core is not None and core.role is Role.LEADER and (best is None or core.term > best[0]):
                best = (node.core.term, node.id)
        return best[1] if best else None

    def _fault(self) -> None:
        rng = self.rng
        up = [n for n in self.ids if self.nodes[n].core is not None]
        r = rng.random()
        if r < 0.30 and up:
            lead = self.leader()
            victim = lead if lead is not None and rng.random() < 0.5 else rng.choice(up)
            self.crash(victim)
            self._at(self.now + rng.randrange(20, 400), "restart", victim)
        elif r < 0.40:
            half = set(rng.sample(self.ids, rng.randrange(1, len(self.ids))))
            self.blocked = {(a, b) for a in self.ids for b in self.ids if (a in half) != (b in half)}
        elif r < 0.50:
            lead = self.leader()
            if lead is not None:
                self.blocked = {(a, b) for a in self.ids for b in self.ids if a != b and lead in (a, b)}
        elif r < 0.60:
            x = rng.choice(self.ids)
            outgoing = rng.random() < 0.5
            self.blocked = {(x, b) if outgoing else (b, x) for b in self.ids if b != x}
        elif r < 0.75:
            self.blocked = set()
        elif r < 0.90:
            self.loss = rng.choice((0.0, 0.05, 0.2))
            self.dup = rng.choice((0.0, 0.05, 0.2))
        else:
            lead = self.leader()
            if lead is not None:
                self.step(lead, TransferLeadership(rng.choice(self.ids)))

    def _heal(self) -> None:
        self.healed_at = self.now
        self.blocked = set()
        self.loss = self.dup = 0.0
        for node in self.nodes.values():
            if node.core is None:
                self._start(node)

    def run(self) -> SimResult:
        rng = self.rng
        for node in self.nodes.values():
            self._start(node)
        t = 0
        while t < self.chaos_ms:
            t += rng.randrange(5, 60)
            self._at(t, "client", "")
        gap = rng.choice((40, 150, 300))
        t = rng.randrange(gap)
        while t < self.chaos_ms:
            self._at(t, "fault", "")
            t += rng.randrange(10, gap)
        self._at(self.chaos_ms, "heal", "")
        deadline = self.chaos_ms + self.liveness_ms
        while self._heap:
            t, _, kind, nid, payload, inc = heapq.heappop(self._heap)
            if t > deadline:
                break
            self.now = t
            node = self.nodes.get(nid)
            if kind == "tick":
                assert node is not None
                if node.core is not None and inc == node.incarnation:
                    self.step(nid, Tick(self.TICK_MS))
                    self._at(t + self.TICK_MS, "tick", nid, inc=inc)
            elif kind == "msg":
                assert node is not None and isinstance(payload, Message)
                if node.core is not None and (payload.src, payload.dst) not in self.blocked:
                    self.step(nid, Receive(payload))
            elif kind in ("written", "fsync"):
                assert node is not None
                if node.core is None or inc != node.incarnation:
                    continue
                if kind == "fsync":
                    node.fsync_pending = False
                    node.synced_len = len(node.disk)
                    if node.disk:
                        self.step(nid, Persisted(node.disk[-1].index, node.disk[-1].term, True))
                else:
                    assert isinstance(payload, tuple)
                    self.step(nid, Persisted(payload[0], payload[1], False))
            elif kind == "kill":
                assert node is not None
                if node.core is not None and inc == node.incarnation and self.healed_at is None:
                    self.crash(nid)
                    self._at(t + rng.randrange(20, 300), "restart", nid)
            elif kind == "restart":
                assert node is not None
                if node.core is None and self.healed_at is None:
                    self._start(node)
            elif kind == "client":
                up = [n for n in self.ids if self.nodes[n].core is not None]
                if up:
                    self.propose(rng.choice(up))
            elif kind == "fault":
                self._fault()
            elif kind == "heal":
                self._heal()
                self._at(t + 30, "probe", "")
            elif kind == "probe":
                if self._live():
                    break
                lead = self.leader()
                if self.ready_at is None:
                    # first, without new proposals, a leader commits its whole log (the no-op of its
                    # term carries the older terms' tail): RocketMQ's LEADER hook waits for this
                    core = self.nodes[lead].core if lead is not None else None
                    done = core is not None and core.commit_index == core.log.last_index
                    if done and all(n.applied_upto >= core.commit_index for n in self.nodes.values()):
                        self.ready_at = t
                elif lead is not None:
                    self.propose(lead, probe=True)
                self._at(t + 30, "probe", "")
        if not self._live():
            phase = "a leader's log committed" if self.ready_at is None else "a new proposal committed"
            self.fail(
                f"liveness: {phase} on every node not within {self.liveness_ms} ms after the heal "
                f"(leader {self.leader()}, commits {[n.commit_seen for n in self.nodes.values()]})"
            )
        self._final_checks()
        assert self.healed_at is not None
        return SimResult(
            self.seed, len(self.ids), self.policy, self.steps, self.elections,
            len(self.committed), sum(r.outcome is Outcome.SUCCESS for r in self.outcomes.values()),
            self.now - self.healed_at, sum(r.reads for r in self.readers),
        )  # fmt: skip

    def _live(self) -> bool:
        if self.live_at is None:
            return False
        return all(n.applied_upto >= self.live_at for n in self.nodes.values())

    def _final_checks(self) -> None:
        for pid, result in self.outcomes.items():
            data = self.proposals[pid]
            if result.outcome is Outcome.SUCCESS:
                if self.committed.get(result.index) != (result.term, data):
                    self.fail(f"acked proposal {pid} is not committed at {result.index}")
            elif result.outcome.definite and data in self.all_data:
                self.fail(f"proposal {pid} failed definitely ({result.outcome.name}) but was appended")
        for node in self.nodes.values():
            assert node.core is not None
            for index, (term, data) in self.committed.items():
                if index <= node.core.commit_index:
                    e = node.core.log.entry(index)
                    if (e.term, e.data) != (term, data):
                        self.fail(f"{node.id} holds another entry at committed index {index}")
