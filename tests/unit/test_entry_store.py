"""rocketq.ha.entry_store on real files: rolling, recovery, damage, truncation, the index."""

from __future__ import annotations

import os
import pathlib
import struct
import threading

import pytest

from _support.tmpfs import fill as fill_disk
from _support.tmpfs import small_tmpfs
from rocketq.errors import DiskFull
from rocketq.ha import entry_format as fmt
from rocketq.ha.driver import _StoreReader
from rocketq.ha.entry_format import CorruptLogError, EntryNotFound, InconsistentAppend, TruncateBelowFloor
from rocketq.ha.entry_store import EntryStore

DATA = 4096
INDEX = 32 * 16


def open_store(root: pathlib.Path, node: str = "n0", **kw: object) -> EntryStore:
    return EntryStore.open(str(root), node, data_file_size=DATA, index_file_size=INDEX, **kw)  # type: ignore[arg-type]


def body_of(i: int) -> bytes:
    return bytes([i % 251]) * (i * 37 % 500)


def fill(s: EntryStore, n: int) -> list[tuple[int, int]]:
    """Append ``n`` entries; entry ``i`` has term ``1 + i // 10`` and body :func:`body_of`."""
    return [s.append(1 + (s.ledger_end_index + 1) // 10, body_of(s.ledger_end_index + 1)) for _ in range(n)]


def data_files(s: EntryStore) -> list[str]:
    return sorted(os.listdir(s.data_dir))


def test_round_trip_rolls_files_with_blank_padding(tmp_path: pathlib.Path) -> None:
    with open_store(tmp_path) as s:
        placed = fill(s, 60)
        assert len(data_files(s)) >= 4
        for i, pos in placed:
            e = s.get(i)
            assert (e.index, e.pos, e.body) == (i, pos, body_of(i))
            assert pos // DATA == (pos + e.size + 8 - 1) // DATA  # never spans, 8 B kept free
        # every full file ends with a blank that fills it exactly
        for mf in s.data.files[:-1]:
            rel = 0
            while True:
                magic, size = struct.unpack_from(">ii", mf.mm, rel)
                if magic == -1:
                    assert rel + size == DATA
                    break
                rel += size
        assert s.ledger_begin_index == 0 and s.ledger_end_index == 59


def test_pos_at_reads_the_position_from_the_index_record(tmp_path: pathlib.Path) -> None:
    with open_store(tmp_path) as s:
        placed = fill(s, 40)
        assert [s.pos_at(i) for i, _ in placed] == [pos for _, pos in placed]
        with pytest.raises(EntryNotFound):
            s.pos_at(40)
        with pytest.raises(EntryNotFound):
            s.pos_at(-1)


def test_placer_predicts_positions_and_append_raw_at_returns_the_stored_bytes(tmp_path: pathlib.Path) -> None:
    with open_store(tmp_path) as s:
        placer = s.placer()  # an empty store, then across several file ends (a full one too)
        predicted = []
        for i in range(60):
            size = fmt.BODY_OFFSET + len(body_of(i))
            pos = placer.place(size)
            placer.take(pos, size)
            predicted.append(pos)
        written = []
        for i in range(60):
            raw = s.append_raw_at(i, 1, body_of(i), pos=predicted[i])
            written.append(raw)
            assert raw == s.read_bytes(i, 1)  # what a re-read would have given
        assert [s.get(i).pos for i in range(60)] == predicted
        with pytest.raises(InconsistentAppend):
            s.append_raw_at(60, 1, b"x", pos=predicted[-1])  # not where the store puts it
        with pytest.raises(fmt.EntryStoreError):
            s.placer().place(DATA)


def test_encode_at_places_and_takes_as_place_encode_place_take(tmp_path: pathlib.Path) -> None:
    """A body is encoded for its position, again for the next data file when it does not fit
    the current one; the same positions as :meth:`EntryPlacer.place` and ``take`` give."""
    with open_store(tmp_path) as s:
        by_hand, at_once = s.placer(), s.placer()
        for i in range(200):  # across many file ends, and bodies that only just fit or not
            body = body_of(i * 7)
            size = fmt.BODY_OFFSET + len(body)
            pos = by_hand.place(size)
            by_hand.take(pos, size)
            asked: list[int] = []

            def encode(at: int, body: bytes = body, asked: list[int] = asked) -> bytes:
                asked.append(at)
                return body

            assert at_once.encode_at(encode) == (pos, body)
            assert asked[-1] == pos + fmt.BODY_OFFSET and len(asked) in (1, 2)
            if len(asked) == 2:  # first encoded for the end of the current file
                assert asked[0] < pos + fmt.BODY_OFFSET and pos % DATA == 0
        assert at_once.place(fmt.BODY_OFFSET) == by_hand.place(fmt.BODY_OFFSET)


def test_encode_at_leaves_the_placer_as_it_was_when_the_body_cannot_go(tmp_path: pathlib.Path) -> None:
    with open_store(tmp_path) as s:
        placer = s.placer()
        placer.take(0, DATA - 100)  # the next body of 100 B goes to the next data file
        grows = iter((b"x" * 100, b"x" * 200))  # a length that depends on the position

        def failing(at: int) -> bytes:
            raise ValueError("no record for you")

        with pytest.raises(ValueError, match="depend on its physical offset"):
            placer.encode_at(lambda at: next(grows))
        with pytest.raises(fmt.EntryStoreError, match="does not fit"):
            placer.encode_at(lambda at: b"x" * DATA)
        with pytest.raises(ValueError, match="no record"):
            placer.encode_at(failing)
        assert placer.encode_at(lambda at: b"y" * 10) == (DATA - 100, b"y" * 10)
        assert placer.encode_at(lambda at: b"z" * 100) == (DATA, b"z" * 100)


def test_index_files_match_the_data(tmp_path: pathlib.Path) -> None:
    with open_store(tmp_path) as s:
        placed = fill(s, 70)
        s.flush()
        index_bytes = b"".join(
            (pathlib.Path(s.index_dir) / n).read_bytes() for n in sorted(os.listdir(s.index_dir))
        )
        for i, pos in placed:
            magic, ipos, size, index, term = struct.unpack_from(">iqiqq", index_bytes, i * 32)
            e = s.get(i)
            assert (magic, ipos, size, index, term) == (1, pos, e.size, i, e.term)
        assert index_bytes[70 * 32 :] == bytes(len(index_bytes) - 70 * 32)


def test_recovery_after_clean_close(tmp_path: pathlib.Path) -> None:
    with open_store(tmp_path) as s:
        placed = fill(s, 45)
        s.set_committed_index(40)
        s.set_term(6, "n2")
        end_pos = s.write_pos
    with open_store(tmp_path) as s:
        assert (s.ledger_begin_index, s.ledger_end_index, s.committed_index) == (0, 44, 40)
        assert (s.term, s.voted_for) == (6, "n2")
        assert s.write_pos == end_pos
        assert [(e.index, e.pos) for e in s.read_range(0, 100)] == placed
        assert s.committed_pos == placed[40][1] + 48 + len(body_of(40))
        idx, _ = s.append(6, b"after")
        assert idx == 45


def test_recovery_without_checkpoint_and_with_lost_index(tmp_path: pathlib.Path) -> None:
    with open_store(tmp_path) as s:
        placed = fill(s, 50)
    os.unlink(tmp_path / "dledger-n0" / "checkpoint")
    for name in os.listdir(tmp_path / "dledger-n0" / "index"):
        os.unlink(tmp_path / "dledger-n0" / "index" / name)
    with open_store(tmp_path, verify_all=True) as s:
        assert s.ledger_end_index == 49 and s.committed_index == -1
        assert [(e.index, e.pos) for e in s.read_range(0, 100)] == placed


def abandon(s: EntryStore) -> None:
    """Drop the store like a killed process: unmapped, no flush, no checkpoint."""
    s.data.shutdown()
    s.index.shutdown()


def _flip(s_home: pathlib.Path, pos: int, delta: int = 0x10) -> None:
    name = f"{pos - pos % DATA:020d}"
    path = s_home / "data" / name
    raw = bytearray(path.read_bytes())
    raw[pos % DATA] ^= delta
    path.write_bytes(bytes(raw))


def test_torn_tail_is_cut(tmp_path: pathlib.Path) -> None:
    s = open_store(tmp_path)
    placed = fill(s, 30)
    s.flush()
    s.persist_checkpoint()
    # entries written after the checkpoint, the last one torn (half its body zero)
    more = fill(s, 3)
    last_idx, last_pos = more[-1]
    size = s.get(last_idx).size
    mf = s.data.find_by_offset(last_pos)
    assert mf is not None
    rel = last_pos - mf.file_from_offset
    mf.mm[rel + size // 2 : rel + size] = bytes(size - size // 2)
    abandon(s)
    with open_store(tmp_path) as s:
        assert s.ledger_end_index == last_idx - 1 == 31
        assert s.write_pos == last_pos
        assert s.get(31).body == body_of(31)
        assert [e.pos for e in s.read_range(0, 30)] == [p for _, p in placed]
        assert s.append(9, b"again") == (32, last_pos)


def test_bit_flip_in_the_tail_cuts_it_and_everything_after(tmp_path: pathlib.Path) -> None:
    s = open_store(tmp_path)
    fill(s, 20)
    s.flush()
    s.persist_checkpoint()  # flushedIndex 19
    tail = fill(s, 5)  # 20..24, not in the checkpoint
    abandon(s)
    # damage entry 24's term field: its chainCrc no longer matches; nothing valid follows
    _flip(tmp_path / "dledger-n0", tail[-1][1] + 16 + 7)
    with open_store(tmp_path) as s:
        assert s.ledger_end_index == 23


def test_bit_flip_mid_log_is_reported(tmp_path: pathlib.Path) -> None:
    with open_store(tmp_path) as s:
        placed = fill(s, 40)
    home = tmp_path / "dledger-n0"
    _flip(home, placed[10][1] + 48 + 1 if len(body_of(10)) > 1 else placed[10][1] + 20)  # body byte
    with pytest.raises(CorruptLogError, match="entry 10 at pos"):
        open_store(tmp_path, verify_all=True)
    # the default scan starts at the checkpoint's flushedIndex (39) and does not read entry 10,
    # but reading it checks its body CRC
    with open_store(tmp_path) as s:
        with pytest.raises(CorruptLogError, match="bodyCrc"):
            s.get(10)
        assert s.get(11).body == body_of(11)


def test_damage_below_the_flushed_index_is_an_error(tmp_path: pathlib.Path) -> None:
    s = open_store(tmp_path)
    placed = fill(s, 12)
    s.flush()
    s.persist_checkpoint()
    abandon(s)
    # the last entry is flushed (checkpoint says so): damage there is not a torn tail
    _flip(tmp_path / "dledger-n0", placed[-1][1] + 8)  # index field
    with pytest.raises(CorruptLogError, match="flushed index 11"):
        open_store(tmp_path)


def test_header_flip_mid_log_with_intact_successor_is_reported(tmp_path: pathlib.Path) -> None:
    s = open_store(tmp_path)
    placed = fill(s, 12)
    abandon(s)
    _flip(tmp_path / "dledger-n0", placed[5][1] + 33)  # channel field of entry 5
    with pytest.raises(CorruptLogError, match="the entry after it is intact"):
        open_store(tmp_path, verify_all=True)


def test_truncate_and_reappend_like_a_diverged_follower(tmp_path: pathlib.Path) -> None:
    with open_store(tmp_path, "leader") as lead, open_store(tmp_path, "follower") as fol:
        for i in range(25):
            idx, pos = lead.append(1, body_of(i))
            assert fol.append_at(idx, 1, body_of(i), pos=pos) == pos
        # the follower got an uncommitted tail from an old leader (term 2), the leader moved on
        for i in range(25, 32):
            fol.append_at(i, 2, b"stale" * (i + 50))
        for i in range(25, 40):
            lead.append(3, body_of(i))
        fol.set_committed_index(24)
        with pytest.raises(TruncateBelowFloor):
            fol.truncate(24)
        fol.truncate(25)
        assert fol.ledger_end_index == 24 and fol.ledger_end_term == 1
        n = fol.append_entry_bytes(lead.read_bytes(25, 1 << 20))
        assert n == 15 and fol.ledger_end_index == 39
        fol.flush()
        lead.flush()
        for a, b in zip(data_files(lead), data_files(fol), strict=True):
            assert (pathlib.Path(lead.data_dir) / a).read_bytes() == (
                pathlib.Path(fol.data_dir) / b
            ).read_bytes()
        with pytest.raises(InconsistentAppend, match="ledger ends at 39"):
            fol.append_at(41, 3, b"gap")
        with pytest.raises(InconsistentAppend, match="leader has it at"):
            fol.append_at(40, 3, b"x", pos=1)
    with open_store(tmp_path, "follower", verify_all=True) as fol:
        assert fol.ledger_end_index == 39 and fol.get(30).body == body_of(30)


def test_append_entry_bytes_refuses_a_diverged_chain(tmp_path: pathlib.Path) -> None:
    with open_store(tmp_path, "a") as a, open_store(tmp_path, "b") as b:
        a.append(1, b"one")
        b.append(1, b"uno")  # same size, different body: the chains differ
        a.append(1, b"two")
        with pytest.raises(InconsistentAppend, match="chainCrc"):
            b.append_entry_bytes(a.read_bytes(1, 1 << 20))
        assert b.ledger_end_index == 0


def test_append_hook_patches_the_body_before_the_checksums(tmp_path: pathlib.Path) -> None:
    def hook(pos: int, body: bytearray) -> None:
        body[0:8] = struct.pack(">q", pos + 48)  # RocketMQ: PHYSICALOFFSET = pos + BODY_OFFSET

    with open_store(tmp_path) as s:
        fill(s, 3)
        _, pos = s.append(1, bytes(20), hook=hook)
        assert struct.unpack_from(">q", s.get(3).body)[0] == s.body_offset(pos) == pos + 48
    with open_store(tmp_path, verify_all=True) as s:
        assert s.ledger_end_index == 3


def test_data_start_offset_and_errors(tmp_path: pathlib.Path) -> None:
    with open_store(tmp_path, data_start_offset=DATA * 5) as s:
        assert s.append(1, b"first") == (0, DATA * 5)
        with pytest.raises(EntryNotFound):
            s.get(1)
        with pytest.raises(fmt.EntryStoreError, match="does not fit"):
            s.append(1, bytes(DATA))
        with pytest.raises(fmt.EntryStoreError, match="below the current term"):
            s.set_term(2, None)
            s.set_term(1, None)
    with open_store(tmp_path) as s:  # the start offset comes from the files now
        assert s.get(0).pos == DATA * 5
    with pytest.raises(fmt.EntryStoreError, match="no multiple"):
        open_store(tmp_path / "x", data_start_offset=100)


def test_currterm_is_durable_and_recovered_from_dledger_tmp(tmp_path: pathlib.Path) -> None:
    with open_store(tmp_path) as s:
        s.set_term(4, "n1")
    home = tmp_path / "dledger-n0"
    assert (home / "currterm").read_text() == "voteLeader=n1\ncurrTerm=4\n"
    # DLedger's string2File crashed after deleting currterm and before renaming currterm.tmp
    os.rename(home / "currterm", home / "currterm.tmp")
    with open_store(tmp_path) as s:
        assert (s.term, s.voted_for) == (4, "n1")
    assert (home / "currterm").exists()


def test_delete_before_keeps_committed_tail_and_begin(tmp_path: pathlib.Path) -> None:
    with open_store(tmp_path) as s:
        fill(s, 80)
        s.set_committed_index(50)
        first_of_file = {}
        for e in s.read_range(0, 100):
            first_of_file.setdefault(e.pos // DATA, e.index)
        deleted = s.delete_before(60)
        assert deleted > 0
        begin = s.ledger_begin_index
        assert begin <= 51 and begin in first_of_file.values()
        with pytest.raises(EntryNotFound):
            s.get(begin - 1)
        assert s.get(begin).index == begin and s.get(79).body == body_of(79)
    with open_store(tmp_path, verify_all=True) as s:
        assert s.ledger_begin_index == begin and s.ledger_end_index == 79


def test_delete_before_keeps_the_term_of_the_last_deleted_entry_and_the_files_listing(
    tmp_path: pathlib.Path,
) -> None:
    with open_store(tmp_path) as s:
        fill(s, 80)
        s.set_committed_index(79)
        assert s.term_before_begin() == 0
        s.delete_before(70)
        begin = s.ledger_begin_index
        assert begin > 16  # past the first index file (16 records each)
        assert s.term_before_begin() == 1 + (begin - 1) // 10
        listing = s.first_entry_indexes()
        assert listing[0][:2] == (s.data.files[0].file_from_offset, begin)
        assert [i for _, i, _ in listing] == sorted(i for _, i, _ in listing)
    with open_store(tmp_path) as s:
        # reopened: the begin from the first data file, the term before it from its index record,
        # everything before the begin committed
        assert s.ledger_begin_index == begin and s.term_before_begin() == 1 + (begin - 1) // 10
        assert s.committed_index >= begin - 1


def test_concurrent_readers_and_one_writer(tmp_path: pathlib.Path) -> None:
    errors: list[BaseException] = []
    with open_store(tmp_path) as s:
        fill(s, 5)
        stop = threading.Event()

        def reader() -> None:
            try:
                while not stop.is_set():
                    end = s.ledger_end_index
                    assert s.get(end).index == end
            except BaseException as exc:
                errors.append(exc)

        t = threading.Thread(target=reader)
        t.start()
        fill(s, 200)
        stop.set()
        t.join(10)
    assert not errors


def test_truncate_cuts_after_the_previous_entry_so_padding_follows_the_leader(tmp_path: pathlib.Path) -> None:
    """The follower's entry 3 was pushed to the next file by padding; the leader's entry 3 is small
    and fits before it. After truncate(3) the follower places it where the leader did."""
    with open_store(tmp_path, "leader") as lead, open_store(tmp_path, "follower") as fol:
        for i in range(3):
            _, pos = lead.append(1, b"a" * 1200)
            fol.append_at(i, 1, b"a" * 1200, pos=pos)
        big_pos = fol.append_at(3, 1, b"b" * 1500)
        assert big_pos == DATA  # did not fit after 3 * 1248 B: next file
        _, small_pos = lead.append(2, b"c" * 100)
        assert small_pos == 3 * 1248  # fits in the first file
        fol.truncate(3)
        assert fol.write_pos == 3 * 1248 and data_files(fol) == [f"{0:020d}"]
        assert fol.append_entry_bytes(lead.read_bytes(3, 1 << 20)) == 1
        assert fol.get(3).pos == small_pos
        lead.append(2, b"d" * 1000)
        fol.append_entry_bytes(lead.read_bytes(4, 1 << 20))
        lead.flush()
        fol.flush()
        assert [(pathlib.Path(lead.data_dir) / n).read_bytes() for n in data_files(lead)] == [
            (pathlib.Path(fol.data_dir) / n).read_bytes() for n in data_files(fol)
        ]


def test_truncate_lowers_the_checkpoint_flushed_index_first(tmp_path: pathlib.Path) -> None:
    with open_store(tmp_path) as s:
        fill(s, 20)
        s.flush()
        s.persist_checkpoint()
        assert s.load_checkpoint() == (19, -1, 19)
        s.truncate(12)
        assert s.load_checkpoint()[2] == 11
        assert s.flushed_index == 11 and s.ledger_end_index == 11


def test_recovery_by_file_when_the_checkpoint_is_missing(tmp_path: pathlib.Path) -> None:
    s = open_store(tmp_path)
    placed = fill(s, 90)  # several files; the scan starts at the third-last one
    abandon(s)
    assert not (tmp_path / "dledger-n0" / "checkpoint").exists()
    assert len(os.listdir(tmp_path / "dledger-n0" / "data")) > 4
    with open_store(tmp_path) as s:
        assert s.ledger_begin_index == 0 and s.ledger_end_index == 89
        assert [(e.index, e.pos) for e in s.read_range(0, 100)] == placed


def test_zeros_in_the_middle_of_the_log_are_reported(tmp_path: pathlib.Path) -> None:
    s = open_store(tmp_path)
    placed = fill(s, 60)
    abandon(s)
    assert not (tmp_path / "dledger-n0" / "checkpoint").exists()
    # a lost page reads as zeros: the rest of file 1 from entry k on, while file 2 holds entries
    k_index, k_pos = next((i, p) for i, p in placed if p // DATA == 1)
    k_index, k_pos = next((i, p) for i, p in placed if p // DATA == 1 and i > k_index)
    path = tmp_path / "dledger-n0" / "data" / f"{DATA:020d}"
    raw = bytearray(path.read_bytes())
    raw[k_pos % DATA :] = bytes(DATA - k_pos % DATA)
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptLogError, match="next data file holds entries"):
        open_store(tmp_path, verify_all=True)


def test_zeros_where_the_checkpoint_says_flushed_are_reported(tmp_path: pathlib.Path) -> None:
    s = open_store(tmp_path)
    placed = fill(s, 10)
    s.flush()
    s.persist_checkpoint()
    abandon(s)
    path = tmp_path / "dledger-n0" / "data" / f"{0:020d}"
    raw = bytearray(path.read_bytes())
    raw[placed[7][1] :] = bytes(DATA - placed[7][1])  # entries 7.. lost although fsync'd
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptLogError, match="checkpoint says 9 was flushed"):
        open_store(tmp_path)


def test_regression_padding_is_taken_back_when_the_next_data_file_cannot_be_created(
    tmp_path: pathlib.Path,
) -> None:
    """An entry that does not fit the rest of a data file pads it with a blank, then creates the
    next file. On a full disk the padding used to stay: the file counted as full, and the next
    entry from a leader, placed where the padding was, no longer fitted this log
    (InconsistentAppend, the Raft member stopped). Now the padding is taken back."""
    with small_tmpfs(tmp_path / "disk", "1m") as disk:
        with open_store(disk) as s:
            s.append(1, b"a" * 3000)  # 3048 of 4096 B used
            end = s.write_pos
            filler = fill_disk(disk)
            with pytest.raises(DiskFull):
                s.append(1, b"b" * 2000)  # needs the next file
            assert s.write_pos == end and s.ledger_end_index == 0
            assert s.next_entry_pos(48 + 500) == end  # a smaller entry still fits here
            assert s.append_at(1, 1, b"c" * 500, pos=end) == end
            filler.unlink()
            assert s.append(1, b"b" * 2000)[1] == DATA  # the padding goes in now, then the next file
        with open_store(disk) as s:
            assert [s.get(i).body for i in range(3)] == [b"a" * 3000, b"c" * 500, b"b" * 2000]


def test_regression_an_index_file_the_disk_cannot_hold_fails_the_append_before_any_data(
    tmp_path: pathlib.Path,
) -> None:
    """The index record of an entry is written after its data; when that needed a new index file
    on a full disk, the data stayed written without its record, and the next entry was placed
    after it (a position no other member had). The index file is now made ready first."""
    with small_tmpfs(tmp_path / "disk", "1m") as disk:
        with open_store(disk) as s:
            for i in range(INDEX // fmt.INDEX_UNIT_SIZE):  # the first index file is full
                s.append(1, bytes([i]) * 100)
            end = s.write_pos
            filler = fill_disk(disk)
            with pytest.raises(DiskFull):
                s.append(1, b"x" * 100)  # fits the data file, but needs a new index file
            assert s.write_pos == end and s.ledger_end_index == 15
            filler.unlink()
            assert s.append_at(16, 1, b"y" * 100, pos=end) == end
        with open_store(disk) as s:
            assert s.ledger_end_index == 16 and s.get(16).body == b"y" * 100


def entry_end(s: EntryStore, i: int) -> int:
    """Where entry ``i`` ends, from its header in the data files."""
    e = s.get(i)
    return e.pos + fmt.BODY_OFFSET + len(e.body)


def commit_each(s: EntryStore, lo: int, hi: int) -> list[tuple[int, int]]:
    """``(committed_pos, the end read back)`` after committing ``lo``, ``lo + 1``, ... ``hi``."""
    out = []
    for i in range(lo, hi + 1):
        s.set_committed_index(i)
        out.append((s.committed_pos, entry_end(s, i)))
    return out


def test_committed_pos_is_the_committed_entry_end_after_runs_truncations_and_reopening(
    tmp_path: pathlib.Path,
) -> None:
    with open_store(tmp_path, "leader") as lead, open_store(tmp_path, "follower") as fol:
        assert lead.committed_pos == -1
        for k in range(30):  # runs of 1..5 entries: some written together, some across a file end
            placer = lead.placer()
            first = lead.ledger_end_index + 1
            bodies = [body_of(first + j) for j in range(1 + k % 5)]
            positions = []
            for body in bodies:
                pos = placer.place(fmt.BODY_OFFSET + len(body))
                placer.take(pos, fmt.BODY_OFFSET + len(body))
                positions.append(pos)
            lead.append_run(first, 1, bodies, positions)
        end = lead.ledger_end_index
        assert len(lead.data.files) > 3
        got = commit_each(lead, 0, end - 2)
        assert [a for a, _ in got] == [b for _, b in got]
        assert lead.commit_to(end + 5) == entry_end(lead, end) and lead.committed_index == end  # clamped
        assert lead.commit_to(3) == entry_end(lead, end) and lead.committed_index == end  # never lowered
        # a follower holding a stale tail of other sizes, cut and rewritten from the leader's bytes
        fol.append_entry_bytes(lead.read_bytes(0, 1 << 20))
        fol.truncate(10, floor=-1)
        fol.set_committed_index(9)
        assert fol.ledger_end_index == 9
        for i in range(10, 20):
            fol.append_at(i, 1, b"stale" * (i % 7 + 1))
        assert fol.committed_pos == entry_end(fol, 9)
        fol.truncate(10)
        fol.append_entry_bytes(lead.read_bytes(10, 700))  # a few entries at a time
        fol.append_entry_bytes(lead.read_bytes(fol.ledger_end_index + 1, 1 << 20))
        got = commit_each(fol, 10, end)
        assert [a for a, _ in got] == [b for _, b in got] == [entry_end(lead, i) for i in range(10, end + 1)]
    with open_store(tmp_path, "follower") as fol:
        assert fol.committed_pos == entry_end(fol, fol.committed_index)


def test_written_from_is_where_the_data_ended_at_the_open(tmp_path: pathlib.Path) -> None:
    """Entries at or past ``written_from`` are the ones this process wrote (dispatch does not
    check their CRCs again); those of an earlier open lie before it."""
    with open_store(tmp_path) as s:
        assert s.written_from == s.write_pos == 0
        placed = fill(s, 30)
        assert s.written_from == 0 and s.write_pos > placed[-1][1]
    with open_store(tmp_path) as s:
        end = s.write_pos
        assert s.written_from == end and end > placed[-1][1]
        new = fill(s, 5)
        assert s.written_from == end and all(pos >= end for _, pos in new)


def test_the_cores_reader_stops_at_the_index_asked_for(tmp_path: pathlib.Path) -> None:
    # the Raft core reads back released entries through the driver's reader: bounded by ``hi``
    # it returns those entries only, whatever room ``max_bytes`` leaves (one apply step of a
    # few entries decodes those entries, not the rest of the store)
    with open_store(tmp_path) as s:
        fill(s, 40)
        reader = _StoreReader(s)
        assert [e.index for e in reader.read(5, 1 << 20, 5)] == [5]
        assert [e.index for e in reader.read(5, 1 << 20, 9)] == [5, 6, 7, 8, 9]
        assert [e.index for e in reader.read(30, 1 << 20, 99)] == list(range(30, 40))  # the store ends first
        assert [e.index for e in reader.read(30, 1 << 20)] == list(range(30, 40))
        assert [e.data for e in reader.read(12, 1 << 20, 12)] == [body_of(12)]
