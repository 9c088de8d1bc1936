"""The leader's cache of the runs it wrote (``rocketq.ha.sent_runs``): lookups give the bytes the
entry format gives for each entry, across runs and after the runs a write replaced or the limit
dropped; what is not held is None (the caller reads the store)."""

from __future__ import annotations

import sys
import threading

from rocketq.ha.entry_format import BODY_OFFSET, MAGIC_NORMAL, encode_entries
from rocketq.ha.sent_runs import SentRuns


def _run(first: int, sizes: list[int], term: int = 1) -> tuple[bytes, list[bytes]]:
    """A run's bytes as the entry store writes them, and each entry's bytes."""
    bodies = [bytes([65 + (first + k) % 26]) * n for k, n in enumerate(sizes)]
    positions = []
    pos = 1000 * first
    for body in bodies:
        positions.append(pos)
        pos += BODY_OFFSET + len(body)
    encoded = encode_entries(MAGIC_NORMAL, first, term, positions, bodies, 0)
    assert encoded is not None
    raw = encoded[0]
    entries, off = [], 0
    for body in bodies:
        entries.append(raw[off : off + BODY_OFFSET + len(body)])
        off += BODY_OFFSET + len(body)
    return raw, entries


def _entry(cache: SentRuns, index: int) -> bytes | None:
    got = cache.entry(index)
    return None if got is None else got[0][got[1] : got[2]]


def test_entries_and_reads_across_runs_as_written() -> None:
    cache = SentRuns(1 << 20)
    expected: dict[int, bytes] = {}
    raws: list[bytes] = []
    first = 5
    for sizes in ([10, 20, 30], [7], [1, 2, 3, 4]):
        raw, entries = _run(first, sizes)
        raws.append(raw)
        cache.add(first, raw, len(sizes))
        expected.update(enumerate(entries, first))
        first += len(sizes)
    assert len(cache) == 3 and cache.nbytes == sum(map(len, expected.values()))
    for i, e in expected.items():
        assert _entry(cache, i) == e
    assert _entry(cache, 4) is None and _entry(cache, first) is None
    for i in expected:  # every read of whole entries from each index, within a run or across
        for j in range(i, first):
            want = b"".join(expected[k] for k in range(i, j + 1))
            assert cache.read(i, len(want)) == want, (i, j)
    assert cache.read(5, len(raws[0])) is raws[0]  # a run whole, as written: no copy
    assert cache.read(9, len(raws[2])) is raws[2]
    assert cache.read(4, 10) is None
    assert cache.read(first - 1, len(expected[first - 1]) + 1) is None  # past what is held


def test_writing_over_cached_entries_replaces_them_and_all_after() -> None:
    cache = SentRuns(1 << 20)
    raw, _ = _run(0, [10, 20, 30, 40])
    cache.add(0, raw, 4)
    raw4, _ = _run(4, [5, 5])
    cache.add(4, raw4, 2)
    new, new_entries = _run(2, [99], term=2)  # entry 2 written again (a new term): 2.. go
    cache.add(2, new, 1)
    _, old = _run(0, [10, 20, 30, 40])
    assert [_entry(cache, i) for i in range(4)] == [old[0], old[1], new_entries[0], None]
    assert _entry(cache, 4) is None and _entry(cache, 5) is None
    assert cache.nbytes == len(old[0]) + len(old[1]) + len(new)
    assert cache.read(0, len(old[0]) + len(old[1]) + len(new)) == old[0] + old[1] + new
    cache.clear()
    assert not cache and cache.nbytes == 0 and _entry(cache, 0) is None


def test_the_oldest_runs_leave_first_within_the_limit() -> None:
    one, _ = _run(0, [100])
    limit = 10 * len(one)
    cache = SentRuns(limit)
    for i in range(1000):  # runs of one entry: the front is given back now and then
        raw, _ = _run(i, [100])
        cache.add(i, raw, 1)
        assert cache.nbytes <= limit
    assert len(cache) == 10
    assert all(_entry(cache, i) is None for i in range(990))
    assert all(_entry(cache, i) == _run(i, [100])[0] for i in range(990, 1000))
    big, _ = _run(1000, [limit])  # larger than the limit alone: not kept
    cache.add(1000, big, 1)
    assert cache.nbytes <= limit and _entry(cache, 1000) is None


def test_a_reader_thread_sees_entries_as_written_or_none_while_runs_come_and_go() -> None:
    """Dispatch's thread reads entries while the loop adds runs and the oldest leave (the list
    of runs given back at its front now and then): every answer is the entry's bytes or None."""
    expected: dict[int, bytes] = {}
    runs: list[tuple[int, bytes, int]] = []
    first = 0
    for k in range(8000):
        sizes = [8 + (k * 7 + j) % 40 for j in range(1 + k % 5)]
        raw, entries = _run(first, sizes)
        expected.update(enumerate(entries, first))
        runs.append((first, raw, len(sizes)))
        first += len(sizes)
    cache = SentRuns(40 * 100)  # about a hundred runs: the front leaves all the time
    wrong: list[int] = []
    errors: list[Exception] = []
    done = threading.Event()

    def reader() -> None:
        i = 0
        while not done.is_set():
            i = (i * 7919 + 13) % first
            try:
                got = _entry(cache, i)
                if got is not None and got != expected[i]:
                    wrong.append(i)
                got = cache.read(i, len(expected[i]))
            except Exception as exc:  # a lookup that met the runs half changed
                errors.append(exc)
                return
            if got is not None and got != expected[i]:
                wrong.append(i)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for _ in range(5):  # the same runs again after a clear (a truncation's)
            cache.clear()
            for run in runs:
                cache.add(*run)
    finally:
        done.set()
        thread.join(10)
        sys.setswitchinterval(interval)
    assert not wrong and not errors, (wrong[:5], errors[:1])
    assert cache.nbytes <= 40 * 100 and _entry(cache, first - 1) == expected[first - 1]
