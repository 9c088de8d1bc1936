"""The Raft core's log view: term runs, released payloads read back from the entry store."""

from __future__ import annotations

import random

import pytest

from rocketq.ha.raft_log import RaftLog
from rocketq.ha.raft_types import (
    ENTRY_OVERHEAD,
    Append,
    Entry,
    EntryKind,
    Outcome,
    ProposalResult,
    Send,
    append_of,
    entries_size,
    entry_run,
    result_of,
    send_of,
)


class ListReader:
    def __init__(self, entries: list[Entry]) -> None:
        self.entries = entries
        self.calls: list[int] = []
        self.returned = 0  # entries read back, in all

    def read(self, lo: int, max_bytes: int, hi: int | None = None) -> list[Entry]:
        self.calls.append(lo)
        out: list[Entry] = []
        for e in self.entries[lo : None if hi is None else hi + 1]:
            if out and sum(x.size for x in out) + e.size > max_bytes:
                break
            out.append(e)
        self.returned += len(out)
        return out


def test_applying_a_few_released_entries_reads_only_those() -> None:
    # A member that restarted with a long written tail past its commit index applies it a
    # few entries at a time (a follower catching up on one-entry appends). Each apply must read
    # back only its entries: reading a megabyte of them every time made each step cost tens of
    # milliseconds, and the member fell further behind the more it was sent.
    disk = make([1] * 2000)
    reader = ListReader(disk)
    log = RaftLog(disk, reader=reader)
    log.release(1999)
    for i in range(100, 110):
        assert log.entries(i, i) == (disk[i],)
    assert log.entries(200, 202) == tuple(disk[200:203])
    assert reader.returned == 13
    assert log.entry(1500) == disk[1500] and reader.returned == 14


def make(terms: list[int]) -> list[Entry]:
    return [Entry(i, t, f"e{i}".encode()) for i, t in enumerate(terms)]


def test_terms_are_kept_as_runs() -> None:
    log = RaftLog(make([1, 1, 2, 2, 2, 5]))
    assert [log.term_at(i) for i in range(-1, 6)] == [0, 1, 1, 2, 2, 2, 5]
    assert (log.first_index_of_term(2, 0), log.first_index_of_term(2, 4)) == (2, 4)
    assert (log.last_index_of_term(1), log.last_index_of_term(2), log.last_index_of_term(5)) == (1, 4, 5)
    assert log.last_index_of_term(3) is None and log.last_index_of_term(9) is None
    log.truncate(3)
    assert log.last_index == 2 and log.last_term == 2 and log.last_index_of_term(5) is None
    log.append((Entry(3, 3, b"x"),))
    assert [log.term_at(i) for i in range(4)] == [1, 1, 2, 3]


def test_append_refuses_gaps_and_falling_terms() -> None:
    log = RaftLog(make([1, 2]))
    with pytest.raises(ValueError, match="expected 2"):
        log.append((Entry(3, 2, b""),))
    with pytest.raises(ValueError, match="below the last term 2"):
        log.append((Entry(2, 1, b""),))
    with pytest.raises(IndexError, match="no entry 2"):
        log.term_at(2)


def test_a_run_appended_at_once_leaves_the_log_as_its_entries_one_by_one() -> None:
    for terms, run_term in (([1, 1, 2], 2), ([1, 1, 2], 4), ([], 1)):
        one_by_one, at_once = RaftLog(make(terms)), RaftLog(make(terms))
        run = tuple(Entry(len(terms) + k, run_term, b"r%d" % k) for k in range(5))
        one_by_one.append(run)
        at_once.append_run(run)
        at_once.append_run(())
        n = len(terms) + 5
        assert at_once.last_index == one_by_one.last_index == n - 1
        assert [at_once.term_at(i) for i in range(n)] == [one_by_one.term_at(i) for i in range(n)]
        assert at_once.entries(0, n - 1) == one_by_one.entries(0, n - 1)
        assert at_once.last_index_of_term(run_term) == n - 1
    log = RaftLog(make([1, 2]))
    with pytest.raises(ValueError, match="expected 2"):
        log.append_run((Entry(3, 2, b""), Entry(4, 2, b"")))
    with pytest.raises(ValueError, match="below the last term 2"):
        log.append_run((Entry(2, 1, b""), Entry(3, 1, b"")))
    assert log.last_index == 1  # nothing of a refused run is kept


def test_released_payloads_are_read_back_through_the_reader() -> None:
    disk = make([1, 1, 1, 2, 2])
    reader = ListReader(disk)
    log = RaftLog(disk, reader=reader)
    log.release(2)
    assert log.released == 2 and reader.calls == []
    assert log.entries(1, 4) == tuple(disk[1:5]) and reader.calls
    assert log.batch(0, 1) == (disk[0],)  # at least one entry
    assert log.batch(3, 10_000) == tuple(disk[3:])  # from memory
    log.truncate(1)  # below the released point: the memory part goes too
    assert log.last_index == 0 and log.released == 0
    log.append((Entry(1, 3, b"n"),))
    assert log.entry(1) == Entry(1, 3, b"n")


def test_a_sized_batch_is_the_batch_and_its_size() -> None:
    disk = [Entry(i, 1, b"x" * (i * 7 % 50)) for i in range(40)]
    reader = ListReader(disk)
    log = RaftLog(disk, reader=reader)
    log.release(9)  # 0..9 from the reader, 10.. from memory
    for lo in (0, 5, 9, 10, 25, 39, 40):
        for max_bytes in (1, ENTRY_OVERHEAD + 20, 300, 1000, 100_000):
            entries, size = log.sized_batch(lo, max_bytes)
            assert entries == log.batch(lo, max_bytes)
            assert size == entries_size(entries)
            assert (len(entries) >= 1) == (lo <= 39)
            assert size <= max_bytes or len(entries) == 1


def test_an_entry_run_is_the_entries_built_one_by_one() -> None:
    data = (b"a", b"", b"ccc" * 100)
    run = entry_run(7, 3, data)
    expected = tuple(Entry(7 + i, 3, d) for i, d in enumerate(data))
    assert run == expected and [hash(e) for e in run] == [hash(e) for e in expected]
    assert [repr(e) for e in run] == [repr(e) for e in expected]
    assert all(type(e) is Entry and e.kind is EntryKind.NORMAL for e in run)
    assert all(e.data is d for e, d in zip(run, data, strict=True))
    assert entry_run(0, 1, ()) == ()
    with pytest.raises(AttributeError):
        run[0].index = 1  # type: ignore[misc]  # still frozen


def test_the_fast_constructors_give_what_the_constructors_give() -> None:
    entries = entry_run(3, 2, (b"a", b"bb"))
    built = [
        (append_of("n0", "n1", 2, 2, 1, entries, 1), Append("n0", "n1", 2, 2, 1, entries, 1)),
        (send_of(Append("n0", "n1", 2, 2, 1, (), 1)), Send(Append("n0", "n1", 2, 2, 1, (), 1))),
        (result_of(7, Outcome.SUCCESS, 3, 2, "n0", 2), ProposalResult(7, Outcome.SUCCESS, 3, 2, "n0", 2)),
        (result_of(8, Outcome.SUCCESS, 5, 2, None, 1), ProposalResult(8, Outcome.SUCCESS, 5, 2, None)),
    ]
    for fast, slow in built:
        assert type(fast) is type(slow) and fast == slow and hash(fast) == hash(slow)
        assert repr(fast) == repr(slow)
    with pytest.raises(AttributeError):
        built[0][0].commit = 5  # type: ignore[misc]  # still frozen


def test_release_without_a_reader_keeps_everything() -> None:
    log = RaftLog(make([1, 1]))
    log.release(1)
    assert log.released == -1 and log.entry(0).data == b"e0"


def test_from_store_builds_the_view_of_a_recovered_log() -> None:
    disk = make([1, 1, 3, 3, 3])
    log = RaftLog.from_store([(0, 1), (2, 3)], 4, ListReader(disk))
    assert log.last_index == 4 and log.last_term == 3 and log.term_at(1) == 1
    assert log.entries(0, 4) == tuple(disk)
    empty = RaftLog.from_store([], -1, ListReader([]))
    assert empty.last_index == -1 and empty.last_term == 0
    with pytest.raises(ValueError, match="do not fit"):
        RaftLog.from_store([(0, 3), (2, 1)], 4, ListReader(disk))
    with pytest.raises(ValueError, match="must start at index 0"):
        RaftLog.from_store([(1, 1)], 4, ListReader(disk))


def test_an_append_of_many_entries_leaves_the_log_and_its_errors_as_one_by_one() -> None:
    """Runs of one term at consecutive indexes take the run path; anything else the entries
    one by one: the same log, the same errors, the same entries kept before an error."""
    rnd = random.Random(11)
    for _ in range(300):
        fast, slow = RaftLog(), RaftLog()
        for _ in range(rnd.randrange(1, 8)):
            start = fast.last_index + 1 + rnd.choice((0, 0, 0, 1, -1))
            term = fast.last_term + rnd.choice((0, 0, 1, 2, -1))
            n = rnd.randrange(0, 6)
            batch = [Entry(start + k, term + (rnd.random() < 0.1), b"%d" % k) for k in range(n)]
            if batch and rnd.random() < 0.1:
                k = rnd.randrange(n)
                batch[k] = Entry(batch[k].index + rnd.choice((1, -1)), batch[k].term, b"odd")
            errors = []
            for log in (fast, slow):
                try:
                    if log is fast:
                        log.append(tuple(batch))
                    else:
                        for e in batch:
                            log.append((e,))
                except ValueError as exc:
                    errors.append(str(exc))
            assert len(errors) in (0, 2) and len(set(errors)) <= 1
            assert fast.last_index == slow.last_index and fast.last_term == slow.last_term
            assert fast._run_starts == slow._run_starts and fast._run_terms == slow._run_terms
            assert fast.entries(0, fast.last_index) == slow.entries(0, slow.last_index)
