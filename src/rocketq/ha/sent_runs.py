"""The leader's cache of the entries it just wrote, kept as the runs it wrote them in.

The transport sends a follower the entries' bytes as the leader's store holds them (no re-read,
no CRC check), and dispatch's entry-by-entry walk reads committed ones; both look here first
(:class:`rocketq.ha.driver.RaftGroupLog`). A *run* is the bytes of consecutive entries written
together (a proposal's, headers and all: ``EntryStore.append_run``), with its first index and its
entry count. It is kept whole, as written: caching a proposal costs one object and two list
appends, where a cache of single entries cost a slice, a dictionary entry and later an eviction
per entry (0.8 µs per entry, 44 entries a run, measured alone). The entries' ends inside a run
are read from their headers' size fields (``entry_format``: i32 at byte 4) when a lookup first
needs them: the transport's usual read is a whole run, the one just written.

Invariants:

* runs are held in increasing index order, without overlap: caching a run at index ``i`` first
  drops what is cached from ``i`` on (a run that starts before ``i`` keeps its entries before
  it), as writing index ``i`` replaces that entry and every later one in the log;
* a run's bytes are exactly those of its entries (a run cut short is cut to them);
* at most ``limit`` bytes are held: the oldest runs leave first, whole (a run larger than the
  limit is not kept);
* a lookup gives the bytes the store wrote for those entries, or None (not cached: the caller
  reads the store).

The leader's loop adds runs and reads them (the transport); dispatch's thread reads entries too
(``RaftGroupLog.entries_from``): one lock around each call, once per proposal on the loop.
"""

from __future__ import annotations

import bisect
import struct
import threading

_SIZE = struct.Struct(">i")  # an entry's size field (header and body), at byte 4 of its header
_SIZE_OFFSET = 4
#: runs dropped from the front before their slots are given back (one list copy per that many)
_COMPACT_EVERY = 256


class _Run:
    __slots__ = ("count", "ends", "first", "raw")

    def __init__(self, first: int, raw: bytes, count: int) -> None:
        self.first = first
        self.raw = raw
        self.count = count
        #: the end of each entry in ``raw`` (None until a lookup needs them)
        self.ends: list[int] | None = None

    def entry_ends(self) -> list[int]:
        ends = self.ends
        if ends is None:
            ends = []
            raw, end = self.raw, 0
            for _ in range(self.count):
                end += _SIZE.unpack_from(raw, end + _SIZE_OFFSET)[0]
                ends.append(end)
            self.ends = ends
        return ends


class SentRuns:
    """See the module docstring. ``limit``: the bytes held at most."""

    __slots__ = ("_firsts", "_head", "_lock", "_runs", "limit", "nbytes")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        #: the bytes of the runs held
        self.nbytes = 0
        self._runs: list[_Run] = []
        #: each run's first index (for bisect), parallel to ``_runs``
        self._firsts: list[int] = []
        #: runs before this slot have left (their slots are given back every _COMPACT_EVERY)
        self._head = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """The runs held."""
        return len(self._runs) - self._head

    def clear(self) -> None:
        with self._lock:
            self._runs = []
            self._firsts = []
            self._head = 0
            self.nbytes = 0

    def add(self, first: int, raw: bytes, count: int) -> None:
        """The ``count`` entries from index ``first`` were written as ``raw``."""
        with self._lock:
            runs = self._runs
            if len(runs) > self._head:
                last = runs[-1]
                if first < last.first + last.count:  # writes over cached entries: they go first
                    self._drop_from(first)
            runs.append(_Run(first, raw, count))
            self._firsts.append(first)
            self.nbytes += len(raw)
            if self.nbytes > self.limit:
                self._trim()

    def _drop_from(self, index: int) -> None:
        runs, firsts = self._runs, self._firsts
        while len(runs) > self._head and runs[-1].first >= index:
            self.nbytes -= len(runs.pop().raw)
            firsts.pop()
        if len(runs) > self._head:
            run = runs[-1]
            keep = index - run.first
            if keep < run.count:  # the run's entries before index stay
                end = run.entry_ends()[keep - 1]
                self.nbytes -= len(run.raw) - end
                run.raw = run.raw[:end]
                run.count = keep
                run.ends = run.ends[:keep] if run.ends is not None else None

    def _trim(self) -> None:
        runs = self._runs
        head = self._head
        while self.nbytes > self.limit and head < len(runs):
            self.nbytes -= len(runs[head].raw)
            runs[head] = _GONE
            head += 1
        if head >= _COMPACT_EVERY or head == len(runs):
            del runs[:head]
            del self._firsts[:head]
            head = 0
        self._head = head

    def _find(self, index: int) -> _Run | None:
        """The run holding entry ``index``, or None."""
        runs = self._runs
        if len(runs) <= self._head:
            return None
        run = runs[-1]  # the usual one: the run just written
        if index < run.first:
            k = bisect.bisect_right(self._firsts, index, self._head) - 1
            if k < self._head:
                return None
            run = runs[k]
        return run if index < run.first + run.count else None

    def entry(self, index: int) -> tuple[bytes, int, int] | None:
        """Entry ``index`` as (its run's bytes, its start, its end in them), or None."""
        with self._lock:
            run = self._find(index)
            if run is None:
                return None
            k = index - run.first
            if run.count == 1:
                return run.raw, 0, len(run.raw)
            ends = run.entry_ends()
            return run.raw, ends[k - 1] if k else 0, ends[k]

    def read(self, index: int, size: int) -> bytes | None:
        """``size`` bytes of the entries from ``index`` on, or None when they are not all held."""
        with self._lock:
            run = self._find(index)
            if run is None:
                return None
            raw = run.raw
            start = run.entry_ends()[index - run.first - 1] if index > run.first else 0
            if start + size <= len(raw):
                return raw if start == 0 and size == len(raw) else raw[start : start + size]
            parts = [raw[start:]]
            total = len(raw) - start
            following = run.first + run.count
            while total < size:
                run = self._find(following)
                if run is None or run.first != following:
                    return None
                parts.append(run.raw)
                total += len(run.raw)
                following += run.count
        data = b"".join(parts)
        return data if total == size else data[:size]


#: the place of a run that left, until the slots are given back
_GONE = _Run(-1, b"", 0)
