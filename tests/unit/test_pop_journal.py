"""Pop journal and snapshot: replay, torn tails, corruption, compaction generations."""

from __future__ import annotations

import os
import pathlib

import pytest

from rocketq.broker.pop import journal as j
from rocketq.broker.pop.state import InFlight, PopTable
from rocketq.errors import CorruptFileError


def _records() -> bytes:
    return b"".join(
        [
            j.key_record(1, "G", "T", 0),
            j.advance_record(1, 10),
            j.deliver_record(1, 10, 1, 500, 77),
            j.deliver_record(1, 12, 1, 500, 77),
            j.advance_record(1, 14),
            j.key_record(2, "Gé", "%RETRY%x", 3),
            j.deliver_record(2, 0, 1, 900, 5),
            j.ack_record(1, 10),
            j.deliver_record(1, 12, 2, 800, 78),
        ]
    )


def _load(tmp_path: pathlib.Path) -> PopTable:
    journal = j.PopJournal(str(tmp_path))
    try:
        return journal.load()
    finally:
        journal.close()


def _write_journal(tmp_path: pathlib.Path, data: bytes, generation: int = 0) -> None:
    (tmp_path / "journal").write_bytes(j.header_record(generation) + data)


def test_replay(tmp_path: pathlib.Path) -> None:
    _write_journal(tmp_path, _records())
    t = _load(tmp_path)
    a = t.states[("G", "T", 0)]
    assert a.next_offset == 14
    assert a.in_flight == {12: InFlight(2, 800, 78)}
    assert a.committed == 12
    b = t.states[("Gé", "%RETRY%x", 3)]
    assert b.in_flight == {0: InFlight(1, 900, 5)}
    assert t.next_key_id() == 3


def test_record_sizes_are_fixed() -> None:
    assert len(j.advance_record(1, 2)) == len(j.ack_record(1, 2)) == 8 + 1 + 12
    assert len(j.deliver_record(1, 2, 3, 4, 5)) == 8 + 1 + 32


def test_every_torn_tail_recovers_a_prefix_and_is_truncated(tmp_path: pathlib.Path) -> None:
    full = j.header_record(0) + _records()
    whole = j.decode_file(full)
    boundaries = set()
    pos = len(j.header_record(0))
    boundaries.add(pos)
    for _rtype, payload in whole.records:
        pos += 9 + len(payload)
        boundaries.add(pos)
    for cut in range(len(j.header_record(0)), len(full) + 1):
        (tmp_path / "journal").write_bytes(full[:cut])
        decoded = j.decode_file(full[:cut])
        assert decoded.valid_bytes == max(b for b in boundaries if b <= cut)
        assert decoded.records == whole.records[: len(decoded.records)]
        _load(tmp_path)
        assert os.path.getsize(tmp_path / "journal") == decoded.valid_bytes


def test_corrupt_crc_stops_replay(tmp_path: pathlib.Path) -> None:
    data = bytearray(j.header_record(0) + _records())
    # flip a byte inside the ACK record (8th record): replay keeps the 7 before it
    decoded = j.decode_file(bytes(data))
    start = len(j.header_record(0)) + sum(9 + len(p) for _t, p in decoded.records[:7])
    data[start + 12] ^= 0xFF
    (tmp_path / "journal").write_bytes(bytes(data))
    t = _load(tmp_path)
    assert 10 in t.states[("G", "T", 0)].in_flight  # the ACK was lost with the damaged tail
    assert os.path.getsize(tmp_path / "journal") == start


def test_appends_after_torn_tail_follow_valid_data(tmp_path: pathlib.Path) -> None:
    _write_journal(tmp_path, j.key_record(1, "G", "T", 0) + j.deliver_record(1, 0, 1, 5, 1)[:-3])
    journal = j.PopJournal(str(tmp_path))
    journal.load()
    journal.write_and_sync(j.deliver_record(1, 4, 1, 5, 2))
    journal.close()
    t = _load(tmp_path)
    assert set(t.states[("G", "T", 0)].in_flight) == {4}


def test_missing_files_start_empty(tmp_path: pathlib.Path) -> None:
    d = tmp_path / "pop"
    t = _load(d)
    assert not t.states
    assert j.decode_file((d / "journal").read_bytes()).generation == 0


def test_compaction_and_stale_journal_generation(tmp_path: pathlib.Path) -> None:
    _write_journal(tmp_path, _records())
    journal = j.PopJournal(str(tmp_path))
    t = journal.load()
    journal.compact(j.encode_snapshot(t, 1), 1)
    journal.write_and_sync(j.ack_record(1, 12))
    journal.close()
    t2 = _load(tmp_path)
    assert t2.states[("G", "T", 0)].in_flight == {}
    assert t2.states[("G", "T", 0)].next_offset == 14
    assert t2.states[("Gé", "%RETRY%x", 3)].in_flight == {0: InFlight(1, 900, 5)}
    # A crash between the snapshot rename and the new journal leaves an old-generation journal,
    # whose records are already in the snapshot: it must not be replayed on top.
    _write_journal(tmp_path, j.deliver_record(1, 10, 1, 500, 77), generation=0)
    t3 = _load(tmp_path)
    assert 10 not in t3.states[("G", "T", 0)].in_flight
    assert j.decode_file((tmp_path / "journal").read_bytes()).generation == 1


def test_damaged_snapshot_is_an_error_not_silent_loss(tmp_path: pathlib.Path) -> None:
    t = PopTable()
    t.define(1, ("G", "T", 0)).deliver(3, 1, 9, 9)
    snap = j.encode_snapshot(t, 1)
    (tmp_path / "snapshot").write_bytes(snap[:-5])
    with pytest.raises(CorruptFileError, match="snapshot"):
        _load(tmp_path)


def test_record_with_unknown_key_is_corrupt(tmp_path: pathlib.Path) -> None:
    _write_journal(tmp_path, j.ack_record(9, 1))
    with pytest.raises(CorruptFileError):
        _load(tmp_path)


def test_full_disk_cuts_a_torn_append_and_keeps_appending_whole_records(tmp_path: pathlib.Path) -> None:
    from _support.tmpfs import fill, small_tmpfs  # noqa: PLC0415 - only this test mounts
    from rocketq.errors import DiskFull  # noqa: PLC0415

    with small_tmpfs(tmp_path / "mnt", "1m") as mnt:
        d = mnt / "pop"
        journal = j.PopJournal(str(d))
        journal.load()
        journal.write_and_sync(j.key_record(1, "G", "T", 0) + j.advance_record(1, 10))
        size = os.path.getsize(d / "journal")
        fill(mnt, leave=10)
        with pytest.raises(DiskFull, match="disk full: cannot append"):
            journal.write_and_sync(b"".join(j.deliver_record(1, i, 1, 5, i) for i in range(200)))
        assert os.path.getsize(d / "journal") == size  # the part that got in is cut again
        with pytest.raises(DiskFull):  # a compaction that cannot write its snapshot changes nothing
            journal.compact(b"s" * 100_000, 1)
        assert journal.generation == 0
        (mnt / "filler").unlink()
        journal.write_and_sync(j.deliver_record(1, 7, 1, 5, 1))
        journal.close()
        assert set(_load(d).states[("G", "T", 0)].in_flight) == {7}
