"""Entries written together: ``entry_format.encode_entries`` (compiled and pure) and
``EntryStore.append_run`` give the bytes and files that the entries one by one give."""

from __future__ import annotations

import os
import pathlib
import random
from collections.abc import Callable, Sequence

import pytest

from rocketq import speedups
from rocketq.ha import entry_format as fmt
from rocketq.ha.entry_format import InconsistentAppend
from rocketq.ha.entry_store import EntryStore

DATA = 4096
INDEX = 32 * 16

Encode = Callable[[int, int, int, Sequence[int], Sequence[bytes], int], "tuple[bytes, bytes, int] | None"]


def encoders() -> list[Encode]:
    out: list[Encode] = [fmt.encode_entries_pure]
    compiled = speedups.COMPILED
    if compiled is not None:
        out.append(compiled.encode_entries)
    return out


def name_of(encode: Encode) -> str:
    return "pure" if encode is fmt.encode_entries_pure else "compiled"


def one_by_one(
    magic: int, first: int, term: int, positions: Sequence[int], bodies: Sequence[bytes], chain: int
) -> tuple[bytes, bytes, int]:
    data = records = b""
    for i, body in enumerate(bodies):
        raw = fmt.encode_entry(magic, first + i, term, positions[i], body, chain)
        chain = fmt.decode_header(raw).chain_crc
        data += raw
        records += fmt.encode_index(magic, positions[i], len(raw), first + i, term)
    return data, records, chain


def run_of(rnd: random.Random, n: int) -> tuple[list[int], list[bytes]]:
    bodies = [rnd.randbytes(rnd.choice((0, 1, 7, 8, 9, 63, 64, 65, 300, 1500))) for _ in range(n)]
    pos = rnd.randrange(1 << 40)
    positions = []
    for body in bodies:
        positions.append(pos)
        pos += fmt.BODY_OFFSET + len(body)
    return positions, bodies


@pytest.mark.parametrize("encode", encoders(), ids=name_of)
def test_encode_entries_gives_the_entries_one_by_one(encode: Encode) -> None:
    rnd = random.Random(17)
    for _ in range(500):
        positions, bodies = run_of(rnd, rnd.randrange(0, 7))
        magic = rnd.choice((fmt.MAGIC_NORMAL, fmt.MAGIC_NOOP))
        first, term = rnd.randrange(1 << 50), rnd.randrange(1 << 40)
        chain = rnd.choice((0, -1, (1 << 31) - 1, -(1 << 31), rnd.randrange(-(1 << 31), 1 << 31)))
        assert encode(magic, first, term, positions, bodies, chain) == one_by_one(
            magic, first, term, positions, bodies, chain
        )


@pytest.mark.parametrize("encode", encoders(), ids=name_of)
def test_encode_entries_refuses_positions_that_do_not_follow_each_other(encode: Encode) -> None:
    positions, bodies = run_of(random.Random(3), 4)
    gap = [*positions[:2], positions[2] + 1, positions[3] + 1]
    assert encode(fmt.MAGIC_NORMAL, 0, 1, gap, bodies, 0) is None
    with pytest.raises(ValueError, match="as many positions as bodies"):
        encode(fmt.MAGIC_NORMAL, 0, 1, positions[:3], bodies, 0)


def test_compiled_encode_entries_checks_its_arguments() -> None:
    compiled = speedups.COMPILED
    if compiled is None:
        pytest.skip("the compiled module is not built")
    with pytest.raises(TypeError, match="every body must be bytes"):
        compiled.encode_entries(1, 0, 1, [0], [bytearray(b"x")], 0)
    with pytest.raises(TypeError, match="takes 6 arguments"):
        compiled.encode_entries(1, 0, 1, [0], [b"x"])
    with pytest.raises(ValueError, match="32-bit"):
        compiled.encode_entries(1 << 40, 0, 1, [0], [b"x"], 0)
    assert compiled.encode_entries(1, 0, 1, [], [], 5) == (b"", b"", 5)


def files_of(s: EntryStore) -> dict[str, bytes]:
    out = {}
    for kind, q in (("data", s.data), ("index", s.index)):
        for mf in q.files:
            out[f"{kind}/{os.path.basename(mf.file_name)}"] = bytes(mf.mm[: mf.wrote_position])
    return out


def test_append_run_writes_the_files_of_appends_one_by_one(tmp_path: pathlib.Path) -> None:
    """Runs that fit the current file (written together), that cross into the next data or
    index file (one by one), after entries of an earlier term: the same bytes, the same state."""
    rnd = random.Random(5)
    runs: list[tuple[int, list[bytes]]] = []
    term = 1
    for _ in range(40):
        term += rnd.random() < 0.2
        runs.append((term, [rnd.randbytes(rnd.randrange(0, 700)) for _ in range(rnd.randrange(1, 6))]))
    together = EntryStore.open(str(tmp_path / "a"), "n0", data_file_size=DATA, index_file_size=INDEX)
    single = EntryStore.open(str(tmp_path / "b"), "n0", data_file_size=DATA, index_file_size=INDEX)
    with together, single:
        for term, bodies in runs:
            placer = together.placer()
            positions = []
            for body in bodies:
                pos = placer.place(fmt.BODY_OFFSET + len(body))
                placer.take(pos, fmt.BODY_OFFSET + len(body))
                positions.append(pos)
            first = together.ledger_end_index + 1
            raw = together.append_run(first, term, bodies, positions)
            one = b"".join(
                single.append_raw_at(first + i, term, body, pos=positions[i]) for i, body in enumerate(bodies)
            )
            assert raw == one
            assert (together.ledger_end_index, together.ledger_end_term, together.end_chain) == (
                single.ledger_end_index,
                single.ledger_end_term,
                single.end_chain,
            )
        assert len(together.data.files) > 3 and len(together.index.files) > 3
        assert files_of(together) == files_of(single)
        assert together.read_bytes(0, together.write_pos) == single.read_bytes(0, single.write_pos)
    with EntryStore.open(str(tmp_path / "a"), "n0", data_file_size=DATA, index_file_size=INDEX) as again:
        assert again.ledger_end_index == sum(len(b) for _, b in runs) - 1


def test_append_run_refuses_what_does_not_continue_the_log(tmp_path: pathlib.Path) -> None:
    with EntryStore.open(str(tmp_path), "n0", data_file_size=DATA, index_file_size=INDEX) as s:
        s.append_run(0, 2, [b"a", b"b"], [0, 49])
        with pytest.raises(InconsistentAppend, match="ledger ends at 1"):
            s.append_run(3, 2, [b"c"], [98])
        with pytest.raises(InconsistentAppend, match="below the last entry's term"):
            s.append_run(2, 1, [b"c"], [98])
        with pytest.raises(InconsistentAppend, match="the leader has it at 99"):
            s.append_run(2, 2, [b"c"], [99])
        assert s.ledger_end_index == 1
        assert [s.get(i).body for i in range(2)] == [b"a", b"b"]


def outcome_of(store: EntryStore, data: bytes | memoryview) -> tuple[str, object]:
    try:
        return "appended", store.append_entry_bytes(data)
    except Exception as exc:
        return type(exc).__name__, str(exc)


def state_of(s: EntryStore) -> tuple[int, int, int, int, int]:
    return s.ledger_begin_index, s.ledger_end_index, s.ledger_end_term, s.end_chain, s.write_pos


def test_append_entry_bytes_together_and_one_by_one_agree(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The leader's bytes appended by a follower that writes the entries that pass together
    (``_append_checked_run``) and by one that checks and writes them one by one (the path for
    runs that cross a file end or hold a problem): the same count or the same error, the same
    files, the same state; runs clean, damaged, cut short, out of place, crossing data and
    index files."""
    rnd = random.Random(11)
    together = EntryStore.open(str(tmp_path / "a"), "f", data_file_size=DATA, index_file_size=INDEX)
    single = EntryStore.open(str(tmp_path / "b"), "f", data_file_size=DATA, index_file_size=INDEX)
    leader = EntryStore.open(str(tmp_path / "l"), "l", data_file_size=DATA, index_file_size=INDEX)
    fast = {"calls": 0, "entries": 0}
    checked_run = EntryStore._append_checked_run

    def counted(self: EntryStore, view: memoryview) -> tuple[int, int]:
        if self is single:
            return 0, 0  # one by one, as before runs were written together
        got = checked_run(self, view)
        fast["calls"] += 1
        fast["entries"] += got[0]
        return got

    monkeypatch.setattr(EntryStore, "_append_checked_run", counted)
    outcomes: dict[str, int] = {}
    with together, single, leader:
        term = 1
        for _ in range(150):
            term += rnd.random() < 0.1
            first = leader.ledger_end_index + 1
            for _ in range(rnd.randrange(1, 7)):
                leader.append(term, rnd.randbytes(rnd.choice((0, 10, 100, 300, 700))))
            data = bytearray(leader.read_bytes(first, 1 << 20))
            damage = rnd.randrange(8)
            if damage == 0:
                data[rnd.randrange(len(data))] ^= 0x10
            elif damage == 1:
                del data[rnd.randrange(len(data)) :]
            elif damage == 2:
                data += rnd.randbytes(rnd.randrange(1, 60))
            elif damage == 3:
                data = bytearray(leader.read_bytes(max(first - 2, 0), 1 << 20))  # some already held
            got = outcome_of(together, memoryview(bytes(data)))
            assert got == outcome_of(single, bytes(data))
            outcomes[got[0]] = outcomes.get(got[0], 0) + 1
            assert state_of(together) == state_of(single)
            if together.ledger_end_index < leader.ledger_end_index:  # catch up, undamaged
                rest = leader.read_bytes(together.ledger_end_index + 1, 1 << 20)
                assert outcome_of(together, rest) == outcome_of(single, rest)
            assert state_of(together) == state_of(single) == state_of(leader)
        assert files_of(together) == files_of(single) == files_of(leader)
        assert len(together.data.files) > 5 and len(together.index.files) > 5
    assert outcomes["appended"] > 50 and outcomes["InconsistentAppend"] > 20
    assert fast["entries"] > 250 and fast["calls"] >= 150, fast  # most entries went together
