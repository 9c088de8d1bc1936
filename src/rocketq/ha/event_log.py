"""A Raft member's event log: one JSON object per line, for checking a group's history afterwards.

Off by default. When ``DLedgerConfig.event_log_path`` is set (broker.conf ``dLegerEventLogPath``,
``python -m rocketq.ha.node --event-log``), the driver (:mod:`rocketq.ha.driver`) hands this
writer what the Raft core decided, at the point where it carries out the core's actions; the
core itself stays pure. ``{selfId}`` in the path is replaced by the member's self id, so the
members of a group sharing one broker.conf write one file each.

Every line has ``ev`` (the kind), ``node`` (self id), ``pid``, ``wall_ms`` (epoch milliseconds) and
``mono_ns`` (the process's monotonic clock), and, by kind:

============  =========================================================================
``ev``        fields
============  =========================================================================
``start``     ``term``, ``ledgerEnd`` (last index), ``commit`` (committed index reloaded)
``role``      ``role`` (LEADER / FOLLOWER / CANDIDATE / PRE_CANDIDATE), ``term``,
              ``leader`` (null when unknown), ``ledgerEnd``, ``commit``
``vote``      ``term``, ``candidate``: this member granted its vote
``commit``    ``commit``: the committed index advanced to this value; ``term``: its entry's
``truncate``  ``from``, ``to`` (the entries removed, inclusive), ``commit`` (the committed
              index at that moment), ``role``, ``term``
``stop``      ``commit``
============  =========================================================================

Order and cost. Each line is written with one ``write`` system call as it happens, so a ``kill
-9`` loses none of the lines before it (page cache; there is no fsync). Commit advances are
coalesced: one is written at once when the previous ``commit`` line is older than
``commit_interval_ms``, otherwise held; a held value is written before the next line of any
kind and at :meth:`EventLog.close`, so the file's order is the order of events and the commit
values it shows never decrease within one process. A member killed while holding a value loses
only that last, not yet written, commit line.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any, Protocol, TextIO

from rocketq.ha.raft_types import Role, RoleChanged


class _Member(Protocol):
    """What a truncation line reads of the member (a :class:`~rocketq.ha.raft.RaftNode`)."""

    role: Role
    term: int


#: At most one ``commit`` line per this many milliseconds (the latest value is never lost to
#: order: it is written before any later line).
DEFAULT_COMMIT_INTERVAL_MS = 50
#: The placeholder a path may hold for the member's self id.
SELF_ID_PLACEHOLDER = "{selfId}"


def event_log_path(template: str, self_id: str) -> str:
    """The file a member with ``self_id`` writes for the configured ``template``."""
    return template.replace(SELF_ID_PLACEHOLDER, self_id)


class EventLog:
    """Appends a member's Raft events to a JSONL file (see the module docstring)."""

    def __init__(self, path: str, node: str, *, commit_interval_ms: int = DEFAULT_COMMIT_INTERVAL_MS) -> None:
        self.path = event_log_path(path, node)
        self.node = node
        self._pid = os.getpid()
        self._interval_ns = max(0, commit_interval_ms) * 1_000_000
        parent = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(parent, exist_ok=True)
        self._file: TextIO | None = open(self.path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
        self._held_commit: tuple[int, int] | None = None
        self._last_commit_ns = 0
        self._last_commit = -2

    def _write(self, ev: str, fields: dict[str, Any]) -> None:
        f = self._file
        if f is None:
            return
        line = {"ev": ev, "node": self.node, "pid": self._pid}
        line["wall_ms"] = time.time_ns() // 1_000_000
        line["mono_ns"] = time.monotonic_ns()
        line.update(fields)
        f.write(json.dumps(line, separators=(",", ":")) + "\n")

    def _release_commit(self) -> None:
        held = self._held_commit
        if held is not None:
            self._held_commit = None
            self._last_commit_ns = time.monotonic_ns()
            self._write("commit", {"commit": held[0], "term": held[1]})

    def event(self, ev: str, **fields: Any) -> None:
        """Write one line of kind ``ev`` (any held commit value first)."""
        self._release_commit()
        self._write(ev, fields)

    def role(self, change: RoleChanged, ledger_end: int, commit: int) -> None:
        self.event(
            "role", role=change.role.value, term=change.term, leader=change.leader_id, ledgerEnd=ledger_end,
            commit=commit,
        )  # fmt: skip

    def truncated(self, from_index: int, to_index: int, commit: int, member: _Member) -> None:
        """Entries ``from_index..to_index`` are about to be removed; ``commit`` as applied so far."""
        fields = {"from": from_index, "to": to_index, "commit": commit}
        self.event("truncate", **fields, role=member.role.value, term=member.term)

    def commit(self, index: int, term: int) -> None:
        """The committed index advanced to ``index``, an entry of ``term`` (coalesced, see the
        module docstring)."""
        if index == self._last_commit:
            return
        self._last_commit = index
        self._held_commit = (index, term)
        if time.monotonic_ns() - self._last_commit_ns >= self._interval_ns:
            self._release_commit()

    def close(self) -> None:
        self._release_commit()
        if self._file is not None:
            self._file.close()
            self._file = None


def read_events(path: str) -> Iterator[dict[str, Any]]:
    """The events of one file in order; a torn last line (the process killed mid-write) is
    skipped, any other line that is not a JSON object is an error naming the file and line."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError:
            if n == len(lines):  # the last line, with no newline: cut short by a kill
                return
            raise ValueError(f"{path}:{n}: not a JSON event line: {raw[:80]!r}") from None
        if not isinstance(obj, dict) or "ev" not in obj or "node" not in obj:
            raise ValueError(f"{path}:{n}: an event needs 'ev' and 'node': {raw[:80]!r}")
        yield obj
