"""A hand-driven Raft group for unit tests: the test decides which message is delivered when.

Each node's disk (hard state and log) is kept as the actions describe it, so a node can crash and
restart from what it had persisted. By default every AppendEntries is reported written and fsynced
right away; with ``auto_persist=False`` the test sends :class:`Persisted` itself.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rocketq.ha.raft import RaftNode
from rocketq.ha.raft_types import (
    Action,
    AppendEntries,
    Entry,
    Event,
    HardState,
    Message,
    Persisted,
    PersistHardState,
    ProposalResult,
    RaftConfig,
    Receive,
    Role,
    Send,
    Tick,
    TruncateLog,
)


def sends(actions: list[object], kind: type[Message]) -> list[Message]:
    """The messages of type ``kind`` the actions send."""
    return [a.message for a in actions if isinstance(a, Send) and isinstance(a.message, kind)]


def first(actions: list[object], kind: type) -> int:
    """The index of the first action of type ``kind``."""
    return next(i for i, a in enumerate(actions) if isinstance(a, kind))


@dataclass
class Disk:
    hard_state: HardState = field(default_factory=HardState)
    log: list[Entry] = field(default_factory=list)


class Cluster:
    def __init__(
        self,
        n: int = 3,
        *,
        auto_persist: bool = True,
        seed: int = 1,
        node_class: type[RaftNode] = RaftNode,
        **config: Any,
    ) -> None:
        self.node_class = node_class
        self.ids = tuple(f"n{i}" for i in range(n))
        self.config = {"heartbeat_interval_ms": 100, "election_timeout_ms": 1000, **config}
        self.auto_persist = auto_persist
        self.seed = seed
        self.nodes: dict[str, RaftNode | None] = {}
        self.disks = {nid: Disk() for nid in self.ids}
        self.outbox: list[Message] = []
        self.actions: dict[str, list[Action]] = {nid: [] for nid in self.ids}
        self.results: dict[int, ProposalResult] = {}
        self.blocked: set[tuple[str, str]] = set()
        for nid in self.ids:
            self.start(nid)

    def cfg(self, nid: str) -> RaftConfig:
        return RaftConfig(node_id=nid, members=self.ids, **self.config)

    def start(self, nid: str, commit_index: int = -1) -> RaftNode:
        disk = self.disks[nid]
        rng = random.Random(self.seed * 100 + self.ids.index(nid))
        node = self.node_class(
            self.cfg(nid), rng, disk.hard_state, tuple(disk.log), commit_index=commit_index
        )
        self.nodes[nid] = node
        return node

    def crash(self, nid: str) -> None:
        self.nodes[nid] = None

    def node(self, nid: str) -> RaftNode:
        node = self.nodes[nid]
        assert node is not None, f"{nid} is down"
        return node

    def step(self, nid: str, event: Event) -> list[Action]:
        actions = self.node(nid).step(event)
        self.actions[nid].extend(actions)
        disk = self.disks[nid]
        persisted: list[Event] = []
        for a in actions:
            if isinstance(a, PersistHardState):
                disk.hard_state = HardState(a.term, a.vote)
            elif isinstance(a, TruncateLog):
                del disk.log[a.from_index :]
            elif isinstance(a, AppendEntries):
                disk.log.extend(a.entries)
                last = a.entries[-1]
                persisted.append(Persisted(last.index, last.term, True))
            elif isinstance(a, Send):
                self.outbox.append(a.message)
            elif isinstance(a, ProposalResult):
                for one in a.each():
                    self.results[one.proposal_id] = one
        if self.auto_persist:
            for ev in persisted:
                actions = actions + self.step(nid, ev)
        return actions

    def tick(self, nid: str, ms: int) -> list[Action]:
        return self.step(nid, Tick(ms))

    def deliver(self, where: Callable[[Message], bool] = lambda m: True, limit: int = 100_000) -> int:
        """Deliver queued messages (FIFO, including those sent meanwhile) that match ``where``;
        the others stay queued. Messages to a down node or over a blocked link are dropped."""
        n = 0
        while n < limit:
            i = next((i for i, m in enumerate(self.outbox) if where(m)), None)
            if i is None:
                break
            m = self.outbox.pop(i)
            n += 1
            if self.nodes[m.dst] is None or (m.src, m.dst) in self.blocked:
                continue
            self.step(m.dst, Receive(m))
        return n

    def drop(self, where: Callable[[Message], bool] = lambda m: True) -> None:
        self.outbox = [m for m in self.outbox if not where(m)]

    def isolate(self, nid: str) -> None:
        self.blocked |= {(a, b) for a in self.ids for b in self.ids if a != b and nid in (a, b)}

    def heal(self) -> None:
        self.blocked = set()

    def elect(self, nid: str) -> RaftNode:
        """Time out ``nid`` and deliver everything until the group settles; returns the node."""
        node = self.node(nid)
        self.tick(nid, 2 * node.config.election_timeout_ms)
        self.deliver()
        assert node.role is Role.LEADER, f"{nid} is {node.role} after its campaign"
        return node

    def leaders(self) -> list[str]:
        return [nid for nid, n in self.nodes.items() if n is not None and n.role is Role.LEADER]
