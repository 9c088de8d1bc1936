"""The Raft core's view of its log: entries by index, terms, and the slices it sends.

The view is what the core has decided the log is; the driver's entry store catches up with it
by carrying out the core's AppendEntries/TruncateLog actions in order. Invariants: indexes are
contiguous from 0; terms never decrease along the log (so a term's entries are one run, found by
bisection).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from rocketq.ha.raft_types import Entry


class RaftLog:
    __slots__ = ("_entries",)

    def __init__(self, entries: Iterable[Entry] = ()) -> None:
        self._entries: list[Entry] = []
        self.append(tuple(entries))

    @property
    def last_index(self) -> int:
        return len(self._entries) - 1

    @property
    def last_term(self) -> int:
        return self._entries[-1].term if self._entries else 0

    def term_at(self, index: int) -> int:
        """Term of the entry at ``index``; 0 for the empty prefix (index -1)."""
        if index == -1:
            return 0
        if not 0 <= index < len(self._entries):
            raise IndexError(f"raft log has no entry {index} (last index {self.last_index})")
        return self._entries[index].term

    def has(self, index: int, term: int) -> bool:
        return -1 <= index < len(self._entries) and self.term_at(index) == term

    def entry(self, index: int) -> Entry:
        return self._entries[index]

    def entries(self, lo: int, hi: int) -> tuple[Entry, ...]:
        """Entries ``lo..hi`` inclusive."""
        return tuple(self._entries[lo : hi + 1])

    def batch(self, lo: int, max_bytes: int) -> tuple[Entry, ...]:
        """Entries from ``lo`` up to ``max_bytes`` in total, at least one if there is one."""
        out: list[Entry] = []
        total = 0
        for e in self._entries[lo:]:
            if out and total + e.size > max_bytes:
                break
            out.append(e)
            total += e.size
        return tuple(out)

    def append(self, entries: tuple[Entry, ...]) -> None:
        for e in entries:
            if e.index != len(self._entries):
                raise ValueError(f"raft log append at index {e.index}, expected {len(self._entries)}")
            if e.term < self.last_term:
                raise ValueError(
                    f"raft log entry {e.index} has term {e.term} below the last term {self.last_term}"
                )
            self._entries.append(e)

    def truncate(self, from_index: int) -> None:
        del self._entries[from_index:]

    def first_index_of_term(self, term: int, not_below: int) -> int:
        """First index ≥ ``not_below`` whose entry has ``term`` (the log must hold that term there)."""
        i = bisect.bisect_left(self._entries, term, key=lambda e: e.term)
        return max(i, not_below)

    def last_index_of_term(self, term: int) -> int | None:
        """Last index whose entry has ``term``, or None when the log has no entry of that term."""
        i = bisect.bisect_right(self._entries, term, key=lambda e: e.term) - 1
        if i >= 0 and self._entries[i].term == term:
            return i
        return None
