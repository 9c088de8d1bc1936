"""The DLedger entry bytes, checked field by field against the table of spec/replication.md §1.4
with ``struct`` formats written here, independently of rocketq.ha.entry_format."""

from __future__ import annotations

import os
import pathlib
import struct
import zlib

import pytest

from rocketq.errors import CorruptFileError
from rocketq.ha import entry_format as fmt
from rocketq.ha.entry_store import EntryStore

# spec §1.4: magic:i32 | size:i32 | index:i64 | term:i64 | pos:i64 | channel:i32 | chainCrc:i32 |
# bodyCrc:i32 | bodySize:i32 | body, big-endian; BODY_OFFSET 48; index record
# magic:i32 | pos:i64 | size:i32 | index:i64 | term:i64 (32 B); blank magic -1.
SPEC_HEADER = ">iiqqqiiii"
SPEC_INDEX = ">iqiqq"
DATA = 4096
INDEX = 32 * 64


def s32(v: int) -> int:
    return v - (1 << 32) if v >= 1 << 31 else v


def spec_chain(prev: int, head36: bytes, bcrc: int) -> int:
    """docs/replication.md 'Entry store': CRC32(be32(prev) + header[0:36] + be32(bodyCrc))."""
    return s32(
        zlib.crc32(struct.pack(">I", prev & 0xFFFFFFFF) + head36 + struct.pack(">I", bcrc & 0xFFFFFFFF))
    )


def spec_entry(
    index: int, term: int, pos: int, body: bytes, prev_chain: int, magic: int = 1, crcs: bool = True
) -> bytes:
    """One entry; ``crcs=False`` leaves both checksum fields 0, as DLedger writes them."""
    size = 48 + len(body)
    head36 = struct.pack(">iiqqqi", magic, size, index, term, pos, 0)
    bcrc = s32(zlib.crc32(body)) if crcs else 0
    chain = spec_chain(prev_chain, head36, bcrc) if crcs else 0
    return head36 + struct.pack(">iii", chain, bcrc, len(body)) + body


def test_sizes_and_offsets_are_the_spec_s() -> None:
    assert struct.calcsize(SPEC_HEADER) == fmt.BODY_OFFSET == 48
    assert struct.calcsize(SPEC_INDEX) == fmt.INDEX_UNIT_SIZE == 32
    assert fmt.POS_OFFSET == 24 and fmt.HEADER_SIZE == 44
    assert fmt.BLANK_MAGIC == -1 and fmt.MIN_BLANK_LEN == 8 and fmt.MAGIC_NORMAL == 1
    assert fmt.DEFAULT_DATA_FILE_SIZE == 1 << 30 and fmt.DEFAULT_INDEX_FILE_SIZE == 160 << 20


def test_encoded_entry_parses_with_the_spec_layout() -> None:
    body = b"hello dledger"
    raw = fmt.encode_entry(1, 7, 3, 4096 * 5 + 100, body, prev_chain=-12345)
    magic, size, index, term, pos, channel, chain, bcrc, body_size = struct.unpack_from(SPEC_HEADER, raw)
    assert (magic, size, index, term, pos, channel, body_size) == (1, 61, 7, 3, 20580, 0, len(body))
    assert raw[48:] == body
    assert struct.unpack_from(">q", raw, 24)[0] == pos  # POS_OFFSET
    assert bcrc == s32(zlib.crc32(body))
    assert chain == spec_chain(-12345, raw[:36], bcrc)
    assert raw == spec_entry(7, 3, 20580, body, -12345)


def test_index_record_and_blank_layout() -> None:
    rec = fmt.encode_index(1, 1 << 40, 99, 5, 2)
    assert struct.unpack(SPEC_INDEX, rec) == (1, 1 << 40, 99, 5, 2)
    blank = fmt.encode_blank(100)
    assert len(blank) == 100 and struct.unpack_from(">ii", blank) == (-1, 100) and blank[8:] == bytes(92)


def _spec_store(
    tmp_path: pathlib.Path, bodies: list[bytes], start: int = 0, crcs: bool = True
) -> list[tuple[int, int]]:
    """Build data and index files by hand from the spec (no rocketq code): entries placed with
    DLedger's padding rule. Returns (index, pos) of each entry."""
    home = tmp_path / "dledger-n1"
    (home / "data").mkdir(parents=True)
    (home / "index").mkdir()
    files: dict[int, bytearray] = {}
    index_file = bytearray(INDEX)
    pos, chain, placed = start, 0, []
    for i, body in enumerate(bodies):
        size = 48 + len(body)
        base = pos - pos % DATA
        rel = pos - base
        buf = files.setdefault(base, bytearray(DATA))
        if size + 8 > DATA - rel:  # MmapFileList.preAppend
            buf[rel : rel + 8] = struct.pack(">ii", -1, DATA - rel)
            pos = base + DATA
            base, rel = pos, 0
            buf = files.setdefault(base, bytearray(DATA))
        raw = spec_entry(i, 1 + i // 4, pos, body, chain, crcs=crcs)
        chain = struct.unpack_from(">i", raw, 36)[0]
        buf[rel : rel + size] = raw
        struct.pack_into(SPEC_INDEX, index_file, i * 32, 1, pos, size, i, 1 + i // 4)
        placed.append((i, pos))
        pos += size
    for base, buf in files.items():
        (home / "data" / f"{base:020d}").write_bytes(bytes(buf))
    (home / "index" / f"{0:020d}").write_bytes(bytes(index_file))
    (home / "checkpoint").write_text(f"endIndex={len(bodies) - 1}\ncommittedIndex=2\n")
    (home / "currterm").write_text("voteLeader=n0\ncurrTerm=7\n")
    return placed


def test_hand_built_store_from_the_spec_is_read(tmp_path: pathlib.Path) -> None:
    bodies = [bytes([65 + i]) * (100 + 37 * i) for i in range(20)]
    placed = _spec_store(tmp_path, bodies, start=DATA * 3)
    with EntryStore.open(
        str(tmp_path), "n1", data_file_size=DATA, index_file_size=INDEX, verify_all=True
    ) as s:
        assert (s.ledger_begin_index, s.ledger_end_index, s.ledger_end_term) == (0, 19, 5)
        assert s.committed_index == 2 and s.term == 7 and s.voted_for == "n0"
        for (i, pos), body in zip(placed, bodies, strict=True):
            e = s.get(i)
            assert (e.index, e.pos, e.body, e.term) == (i, pos, body, 1 + i // 4)
            assert s.body_offset(pos) == pos + 48
        # appends continue the chain the hand-built entries started
        idx, pos = s.append(9, b"next")
        assert idx == 20
        assert s.get(20).chain_crc == spec_chain(
            s.get(19).chain_crc, s.read_bytes(20, 1)[:36], s.get(20).body_crc
        )


def test_store_bytes_equal_the_hand_built_bytes(tmp_path: pathlib.Path) -> None:
    bodies = [os.urandom(50 + 91 * i % 700) for i in range(30)]
    _spec_store(tmp_path / "spec", bodies)
    with EntryStore.open(str(tmp_path / "ours"), "n1", data_file_size=DATA, index_file_size=INDEX) as s:
        for i, body in enumerate(bodies):
            s.append(1 + i // 4, body)
    spec_data = sorted((tmp_path / "spec" / "dledger-n1" / "data").iterdir())
    ours = sorted((tmp_path / "ours" / "dledger-n1" / "data").iterdir())
    assert [p.name for p in spec_data] == [p.name for p in ours]
    for a, b in zip(spec_data, ours, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name
    a_idx = (tmp_path / "spec" / "dledger-n1" / "index" / f"{0:020d}").read_bytes()
    b_idx = (tmp_path / "ours" / "dledger-n1" / "index" / f"{0:020d}").read_bytes()
    assert a_idx == b_idx


def test_checkpoint_and_currterm_text() -> None:
    assert fmt.format_checkpoint(9, 7, 8) == b"endIndex=9\ncommittedIndex=7\nflushedIndex=8\n"
    assert fmt.parse_checkpoint("#c\nendIndex=9\ncommittedIndex=7\n") == (9, 7, None)
    assert fmt.format_currterm(3, None) == b"voteLeader=\ncurrTerm=3\n"
    assert fmt.parse_currterm("currTerm=3\nvoteLeader=\n") == (3, None)
    assert fmt.parse_currterm("voteLeader=n2\ncurrTerm=12\n") == (12, "n2")
    with pytest.raises(CorruptFileError, match="currTerm='x'"):
        fmt.parse_currterm("currTerm=x\n")
    with pytest.raises(fmt.EntryStoreError, match="peer id"):
        fmt.format_currterm(1, "a=b")


def test_divided_commitlog_offset_arithmetic() -> None:
    size = 1 << 30
    assert fmt.divided_commitlog_offset(None, size) == 0
    assert fmt.divided_commitlog_offset(0, size) == size
    assert fmt.divided_commitlog_offset(3 * size, size) == 4 * size
    with pytest.raises(fmt.EntryStoreError, match="no multiple"):
        fmt.divided_commitlog_offset(5, size)
    assert fmt.dledger_start_offset(0, size) == 0
    assert fmt.dledger_start_offset(1, size) == size
    assert fmt.dledger_start_offset(size, size) == size  # last file exactly full
    assert fmt.dledger_start_offset(size + 17, size) == 2 * size
    assert fmt.in_old_commitlog(size - 1, size) and not fmt.in_old_commitlog(size, size)
    # a store placed at the divided offset: the first message's offset continues the old log's
    assert fmt.body_offset(fmt.dledger_start_offset(size + 17, size)) == 2 * size + 48


@pytest.mark.parametrize("verify_all", [True, False])
def test_store_written_by_dledger_without_checksums_is_read(tmp_path: pathlib.Path, verify_all: bool) -> None:
    bodies = [bytes([48 + i % 10]) * (200 + 61 * i % 900) for i in range(25)]
    placed = _spec_store(tmp_path, bodies, crcs=False)
    with EntryStore.open(
        str(tmp_path), "n1", data_file_size=DATA, index_file_size=INDEX, verify_all=verify_all
    ) as s:
        assert s.ledger_end_index == 24
        assert [(e.pos, e.body, e.chain_crc, e.body_crc) for e in s.read_range(0, 25)] == [
            (pos, body, 0, 0) for (_, pos), body in zip(placed, bodies, strict=True)
        ]
        s.append(7, b"ours")  # ours carry checksums; the chain starts from the stored 0
        assert s.get(25).chain_crc == spec_chain(0, s.read_bytes(25, 1)[:36], s_crc(b"ours"))
    with EntryStore.open(
        str(tmp_path), "n1", data_file_size=DATA, index_file_size=INDEX, verify_all=True
    ) as s:
        assert s.ledger_end_index == 25


def s_crc(body: bytes) -> int:
    return s32(zlib.crc32(body))


def test_dledger_entry_torn_before_its_index_record_is_cut(tmp_path: pathlib.Path) -> None:
    bodies = [b"z" * 300 for _ in range(6)]
    placed = _spec_store(tmp_path, bodies, crcs=False)
    home = tmp_path / "dledger-n1"
    # the last entry: header written, half the body and the index record not (a kill mid-write)
    last_i, last_pos = placed[-1]
    data = home / "data" / f"{last_pos - last_pos % DATA:020d}"
    raw = bytearray(data.read_bytes())
    rel = last_pos % DATA
    raw[rel + 48 + 150 : rel + 348] = bytes(150)
    data.write_bytes(bytes(raw))
    idx = home / "index" / f"{0:020d}"
    iraw = bytearray(idx.read_bytes())
    iraw[last_i * 32 : last_i * 32 + 32] = bytes(32)
    idx.write_bytes(bytes(iraw))
    with EntryStore.open(str(tmp_path), "n1", data_file_size=DATA, index_file_size=INDEX) as s:
        assert s.ledger_end_index == last_i - 1
        assert s.write_pos == last_pos
