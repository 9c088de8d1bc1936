"""The Raft core's view of its log: the term of every index, and the payloads it still holds.

The view is what the core has decided the log is; the driver's entry store catches up with it
by carrying out the core's AppendEntries/TruncateLog actions in order.

Memory: the terms are kept as runs ``(first index, term)`` (a term changes only on elections),
so the view of a log of any length is a few integers per term. Payloads are kept from
``released + 1`` to the end; with an :class:`EntryReader` (the entry store) the core releases the
payloads of entries it has applied and wrote, and reads them back when a lagging follower needs
them. Without a reader every payload stays in memory (tests, small logs).

Invariants: indexes are contiguous from ``first_index`` (0 unless retention deleted the entry
store's leading data files: the entries before it are committed and gone, their terms unknown
except the last one's, ``term_at(first_index - 1)``, when the store still has it); terms never
decrease along the log; runs have strictly increasing start indexes and terms; released entries
are written (the reader can serve them).
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Iterable, Sequence
from typing import Protocol

from rocketq.ha.raft_types import ENTRY_OVERHEAD, Entry, entries_size

_INDEX = operator.attrgetter("index")
_TERM = operator.attrgetter("term")


class EntryReader(Protocol):
    """Reads written entries back from the entry store."""

    def read(self, lo: int, max_bytes: int, hi: int | None = None) -> Sequence[Entry]:
        """Entries from ``lo`` on, contiguous, at most ``max_bytes`` in total (``Entry.size``) but
        at least one, and none after index ``hi`` when it is given; ``lo`` is always an index the
        store has written."""
        ...


class Compacted(IndexError):
    """The entry was deleted by retention (below the log's ``first_index``). An
    :class:`EntryReader` raises it with the store's first entry (``first``) and the term before it
    (``base_term``, None when unknown); the log then begins there."""

    def __init__(self, message: str, first: int = -1, base_term: int | None = None) -> None:
        super().__init__(message)
        self.first = first
        self.base_term = base_term


class RaftLog:
    __slots__ = (
        "_base_term",
        "_cache",
        "_cache_start",
        "_first",
        "_last",
        "_reader",
        "_run_starts",
        "_run_terms",
    )

    def __init__(self, entries: Iterable[Entry] = (), reader: EntryReader | None = None) -> None:
        self._run_starts: list[int] = []
        self._run_terms: list[int] = []
        self._last = -1
        self._cache: list[Entry] = []
        self._cache_start = 0
        self._reader = reader
        self._first = 0
        #: the term of entry ``_first - 1`` (0 for the empty prefix; None: unknown)
        self._base_term: int | None = 0
        self.append(tuple(entries))

    @classmethod
    def from_store(
        cls,
        term_runs: Sequence[tuple[int, int]],
        last_index: int,
        reader: EntryReader,
        *,
        first_index: int = 0,
        base_term: int | None = None,
    ) -> RaftLog:
        """The view of a recovered store: ``term_runs`` are ``(first index, term)`` in log order,
        ``last_index`` its end; every payload is read back through ``reader`` when needed. A
        store whose leading entries retention deleted begins at ``first_index``; ``base_term`` is
        the term of the entry before it when known."""
        log = cls(reader=reader)
        prev_start, prev_term = first_index - 1, 0
        for start, term in term_runs:
            if not prev_start < start <= last_index or term <= prev_term:
                raise ValueError(
                    f"raft log term runs {list(term_runs)!r} do not fit a log ending at {last_index}"
                )
            prev_start, prev_term = start, term
        if last_index >= 0 and (not term_runs or term_runs[0][0] != first_index):
            raise ValueError(f"raft log term runs {list(term_runs)!r} must start at index {first_index}")
        if first_index > 0:
            log._first, log._base_term = first_index, base_term
        log._run_starts = [s for s, _ in term_runs]
        log._run_terms = [t for _, t in term_runs]
        log._last = last_index
        log._cache_start = last_index + 1
        return log

    @property
    def last_index(self) -> int:
        return self._last

    @property
    def last_term(self) -> int:
        return self._run_terms[-1] if self._run_terms else 0

    @property
    def first_index(self) -> int:
        """The first entry the log holds (0 unless retention deleted a prefix)."""
        return self._first

    def can_send_from(self, lo: int) -> bool:
        """Whether an append from ``lo`` can be built: its entries are held and the term of the
        entry before them is known."""
        return lo > self._first or (lo == self._first and self._base_term is not None)

    @property
    def released(self) -> int:
        """Entries up to this index are held by the store only."""
        return self._cache_start - 1

    def term_at(self, index: int) -> int:
        """Term of the entry at ``index``; 0 for the empty prefix (index -1)."""
        if index < self._first:
            if index == self._first - 1 and self._base_term is not None:
                return self._base_term
            raise Compacted(f"raft log entry {index} was deleted (the log begins at {self._first})")
        if not 0 <= index <= self._last:
            raise IndexError(f"raft log has no entry {index} (last index {self._last})")
        return self._run_terms[bisect.bisect_right(self._run_starts, index) - 1]

    def has(self, index: int, term: int) -> bool:
        if index < self._first - 1 or (index == self._first - 1 and self._base_term is None):
            return False
        return -1 <= index <= self._last and self.term_at(index) == term

    def entry(self, index: int) -> Entry:
        return self.entries(index, index)[0]

    def entries(self, lo: int, hi: int) -> tuple[Entry, ...]:
        """Entries ``lo..hi`` inclusive."""
        if lo < self._first:
            raise Compacted(f"raft log entry {lo} was deleted (the log begins at {self._first})")
        if not 0 <= lo <= hi + 1 <= self._last + 1:
            raise IndexError(f"raft log has no entries {lo}..{hi} (last index {self._last})")
        out: list[Entry] = []
        i = lo
        while i <= hi and i < self._cache_start:
            # bounded by ``hi``: a member applying a few entries at a time (a follower catching
            # up on one-entry appends) must not decode a megabyte of entries for each of them
            got = self._read(i, 1 << 20, min(hi, self._cache_start - 1))
            out.extend(got[: hi - i + 1])
            i = out[-1].index + 1
        if i <= hi:
            out.extend(self._cache[i - self._cache_start : hi - self._cache_start + 1])
        return tuple(out)

    def batch(self, lo: int, max_bytes: int) -> tuple[Entry, ...]:
        """Entries from ``lo`` up to ``max_bytes`` in total, at least one if there is one."""
        return self.sized_batch(lo, max_bytes)[0]

    def sized_batch(self, lo: int, max_bytes: int) -> tuple[tuple[Entry, ...], int]:
        """:meth:`batch` and the entries' total size (``entries_size`` of them), summed while
        they are chosen: the leader counts every batch it sends against its in-flight window."""
        if lo > self._last:
            return (), 0
        if lo < self._first:
            raise Compacted(f"raft log entry {lo} was deleted (the log begins at {self._first})")
        if lo < self._cache_start:
            got = self._read(lo, max_bytes)
            read = tuple(e for e in got if e.index <= self._last)
            return read, entries_size(read)
        cache = self._cache
        i = lo - self._cache_start
        end = len(cache)
        total = len(cache[i].data) + ENTRY_OVERHEAD  # at least one
        j = i + 1
        while j < end:
            size = len(cache[j].data) + ENTRY_OVERHEAD  # Entry.size, without the property call
            if total + size > max_bytes:
                break
            total += size
            j += 1
        return tuple(cache[i:j]), total

    def compact(self, first: int, base_term: int | None) -> None:
        """Retention deleted the entries before ``first`` (all applied and written); the term of
        the one before it is ``base_term`` (None: unknown). Runs are kept: they cost nothing."""
        if first <= self._first:
            return
        self._first, self._base_term = first, base_term
        if self._cache_start < first:
            del self._cache[: first - self._cache_start]
            self._cache_start = first

    def _read(self, lo: int, max_bytes: int, hi: int | None = None) -> Sequence[Entry]:
        if self._reader is None:  # pragma: no cover - released entries exist only with a reader
            raise AssertionError("raft log released payloads without an entry reader")
        try:
            got = self._reader.read(lo, max_bytes, hi)
        except Compacted as gone:  # deleted while this member runs: the log begins later now
            if gone.first > 0:
                self.compact(gone.first, gone.base_term)
            raise
        if not got or got[0].index != lo:
            raise AssertionError(f"raft entry store returned {len(got)} entries for index {lo}")
        return got

    def append(self, entries: tuple[Entry, ...]) -> None:
        n = len(entries)
        if n > 1:
            first, last = entries[0], entries[-1]
            start, term = first.index, first.term
            # the usual append, a follower's: a run of one term at consecutive indexes, found
            # so in two passes over the indexes and the terms (no step per entry)
            if (
                last.index == start + n - 1
                and last.term == term
                and list(map(_INDEX, entries)) == list(range(start, start + n))
                and list(map(_TERM, entries)).count(term) == n
            ):
                self.append_run(entries)  # which checks the first entry against the log
                return
        for e in entries:
            if e.index != self._last + 1:
                raise ValueError(f"raft log append at index {e.index}, expected {self._last + 1}")
            if e.term < self.last_term:
                raise ValueError(
                    f"raft log entry {e.index} has term {e.term} below the last term {self.last_term}"
                )
            if e.term != self.last_term or not self._run_terms:
                self._run_starts.append(e.index)
                self._run_terms.append(e.term)
            self._cache.append(e)
            self._last = e.index

    def append_run(self, entries: tuple[Entry, ...]) -> None:
        """:meth:`append` of entries that all have the first one's term at consecutive indexes
        (a batch proposed together; not checked here): the checks and the bookkeeping once for
        the run instead of once per entry."""
        if not entries:
            return
        self.append(entries[:1])  # its checks and its term's run
        self._cache += entries[1:]
        self._last = entries[0].index + len(entries) - 1

    def truncate(self, from_index: int) -> None:
        """Drop the entries at and after ``from_index``."""
        if from_index > self._last:
            return
        cut = bisect.bisect_left(self._run_starts, from_index)
        del self._run_starts[cut:]
        del self._run_terms[cut:]
        self._last = from_index - 1
        if from_index >= self._cache_start:
            del self._cache[from_index - self._cache_start :]
        else:
            self._cache.clear()
            self._cache_start = from_index

    def release(self, upto: int) -> None:
        """Forget the payloads of entries up to ``upto`` (written ones); no-op without a reader."""
        if self._reader is None or upto < self._cache_start:
            return
        upto = min(upto, self._last)
        del self._cache[: upto - self._cache_start + 1]
        self._cache_start = upto + 1

    def first_index_of_term(self, term: int, not_below: int) -> int:
        """First index ≥ ``not_below`` whose entry has ``term`` (the log must hold that term there)."""
        i = bisect.bisect_left(self._run_terms, term)
        return max(self._run_starts[i], not_below)

    def last_index_of_term(self, term: int) -> int | None:
        """Last index whose entry has ``term``, or None when the log has no entry of that term."""
        i = bisect.bisect_left(self._run_terms, term)
        if i == len(self._run_terms) or self._run_terms[i] != term:
            return None
        return self._run_starts[i + 1] - 1 if i + 1 < len(self._run_starts) else self._last
