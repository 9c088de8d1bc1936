"""The DLedger entry store's bytes: entries, index records, blanks, ``checkpoint`` and ``currterm``.

Pure codec (no I/O), byte-compatible with ``io.openmessaging.storage.dledger``
(``DLedgerEntryCoder``, ``DLedgerMmapFileStore``, ``MmapFileList``, ``MemberState`` and
``IOUtils``, versions 0.3.1.2 and master). All integers are big-endian two's complement.

Entry (``DLedgerEntry.BODY_OFFSET`` = 48 bytes of header, then the body)::

    offset  field      type  meaning
    0       magic      i32   entry type: 1 NORMAL (0.3.1.2's only value), 2 NOOP, 3 CONFIG_CHANGE
    4       size       i32   48 + len(body)
    8       index      i64   Raft log index, from 0, contiguous
    16      term       i64   Raft term of the entry
    24      pos        i64   absolute position of the entry in the data files (``POS_OFFSET``)
    32      channel    i32   reserved, 0
    36      chainCrc   i32   see below (DLedger leaves it 0)
    40      bodyCrc    i32   CRC32 of the body (DLedger leaves it 0)
    44      bodySize   i32   len(body)
    48      body       bytes

A message's CommitLog offset is ``pos + 48`` (:func:`body_offset`), the same on every replica.

Blank (``MmapFileList.preAppend``): when an entry plus ``MIN_BLANK_LEN`` (8) bytes does not fit
in the rest of a data file, the rest is filled with ``magic = -1 | size = remaining | zeros`` and
the entry goes to the next file. So an entry never ends closer than 8 bytes to a file end, and
positions are a pure function of the entry sizes and the file size: equal on every replica.

Index record (32 bytes at offset ``index * 32`` of the index files)::

    0 magic i32 | 4 pos i64 | 12 size i32 | 16 index i64 | 24 term i64

Checksums (rocketq fills the two fields DLedger reserves but never computes):

* ``bodyCrc = CRC32(body)`` (zlib's CRC-32, the one of ``java.util.zip.CRC32``), stored as i32;
* ``chainCrc = CRC32(be32(prevChainCrc) ‖ header[0:36] ‖ be32(bodyCrc))`` where ``header[0:36]``
  is magic, size, index, term, pos and channel of this entry and ``prevChainCrc`` is the
  *stored* ``chainCrc`` of the entry at ``index - 1`` (0 for index 0). DLedger's comment on the
  field ("like the block chain, this crc indicates any modification before this entry") is its
  only definition; this one chains every header field and, through ``bodyCrc``, every body. Two
  replicas hold equal chain values at an index exactly when their logs agree up to it.

``checkpoint`` and ``currterm`` are Java properties (``key=value\\n``, no escapes) as
``IOUtils.properties2String`` writes them: ``endIndex``, ``committedIndex`` (rocketq adds
``flushedIndex``, which DLedger ignores), and ``currTerm``, ``voteLeader`` (empty: no vote).
"""

from __future__ import annotations

import mmap
import re
import struct
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, TypeAlias

from rocketq import speedups as _speedups
from rocketq.errors import CorruptFileError, StoreError
from rocketq.properties import parse_properties

MAGIC_NORMAL: Final = 1
MAGIC_NOOP: Final = 2
MAGIC_CONFIG_CHANGE: Final = 3
ENTRY_MAGICS: Final = frozenset({MAGIC_NORMAL, MAGIC_NOOP, MAGIC_CONFIG_CHANGE})
BLANK_MAGIC: Final = -1
MIN_BLANK_LEN: Final = 8
POS_OFFSET: Final = 24
HEADER_SIZE: Final = 44  # DLedgerEntry.HEADER_SIZE: the header without bodySize
BODY_OFFSET: Final = 48
INDEX_UNIT_SIZE: Final = 32
#: DLedgerConfig defaults.
DEFAULT_DATA_FILE_SIZE: Final = 1 << 30
DEFAULT_INDEX_FILE_SIZE: Final = INDEX_UNIT_SIZE * 5 * 1024 * 1024

#: Anything the decoders read from: bytes, a view, a mapping.
Buf: TypeAlias = bytes | bytearray | memoryview | mmap.mmap

ENTRY_HEADER: Final = struct.Struct(">iiqqqiiii")
INDEX_RECORD: Final = struct.Struct(">iqiqq")
_BLANK_HEAD: Final = struct.Struct(">ii")
_BE32: Final = struct.Struct(">I")

CHECKPOINT_FILE: Final = "checkpoint"
CURRTERM_FILE: Final = "currterm"
END_INDEX_KEY: Final = "endIndex"
COMMITTED_INDEX_KEY: Final = "committedIndex"
FLUSHED_INDEX_KEY: Final = "flushedIndex"
TERM_KEY: Final = "currTerm"
VOTE_KEY: Final = "voteLeader"


class EntryStoreError(StoreError):
    """A request the entry store cannot carry out."""


class CorruptLogError(CorruptFileError):
    """Entries on disk fail their checks where a torn tail cannot explain it."""


class InconsistentAppend(EntryStoreError, ValueError):
    """An append whose index, position or chain does not continue the local log."""


class TruncateBelowFloor(EntryStoreError, ValueError):
    """A truncation that would remove entries at or below the given floor (committed)."""


class EntryNotFound(EntryStoreError, IndexError):
    """An index outside ``[ledger_begin_index, ledger_end_index]``."""


def to_i32(value: int) -> int:
    """An unsigned 32-bit value as Java's ``int``."""
    return value - (1 << 32) if value >= 1 << 31 else value


def body_crc(body: bytes | bytearray | memoryview) -> int:
    return to_i32(zlib.crc32(body))


def chain_crc(prev_chain: int, head36: Buf, body_crc_value: int) -> int:
    """The chain value of an entry whose first 36 header bytes are ``head36``."""
    crc = zlib.crc32(_BE32.pack(prev_chain & 0xFFFFFFFF))
    crc = zlib.crc32(head36, crc)
    return to_i32(zlib.crc32(_BE32.pack(body_crc_value & 0xFFFFFFFF), crc))


@dataclass(frozen=True, slots=True)
class Header:
    """The 48-byte header of an entry."""

    magic: int
    size: int
    index: int
    term: int
    pos: int
    channel: int
    chain_crc: int
    body_crc: int
    body_size: int


@dataclass(frozen=True, slots=True)
class Entry:
    """One decoded entry."""

    magic: int
    index: int
    term: int
    pos: int
    body: bytes
    channel: int = 0
    chain_crc: int = 0
    body_crc: int = 0

    @property
    def size(self) -> int:
        return BODY_OFFSET + len(self.body)

    @property
    def body_offset(self) -> int:
        """The CommitLog offset of the message in the body (``pos + 48``)."""
        return self.pos + BODY_OFFSET


def body_offset(pos: int) -> int:
    """``DLedgerCommitLog``: a message's physical offset is its entry's position plus 48."""
    return pos + BODY_OFFSET


def encode_entry(
    magic: int, index: int, term: int, pos: int, body: bytes, prev_chain: int, channel: int = 0
) -> bytes:
    """The bytes of one entry with both checksums filled in."""
    size = BODY_OFFSET + len(body)
    bcrc = body_crc(body)
    head = struct.pack(">iiqqqi", magic, size, index, term, pos, channel)
    chain = chain_crc(prev_chain, head, bcrc)
    return b"".join((head, struct.pack(">iii", chain, bcrc, len(body)), body))


_HEAD36: Final = struct.Struct(">iiqqqi")
_TAIL12: Final = struct.Struct(">iii")


#: ``(entries, their index records, the last chain value)``, or None
EncodedRun: TypeAlias = "tuple[bytes, bytes, int] | None"


def encode_entries_pure(
    magic: int,
    first_index: int,
    term: int,
    positions: Sequence[int],
    bodies: Sequence[bytes],
    prev_chain: int,
) -> EncodedRun:
    """The bytes of the entries ``first_index, first_index + 1, ...`` of ``term`` with ``bodies``
    at ``positions``, each entry right after the one before it, chained from ``prev_chain``:
    ``(entries, their index records, the last entry's chain value)``, byte for byte what
    :func:`encode_entry` and :func:`encode_index` give one by one; None when a position does
    not follow the entry before it. The reference of the compiled ``encode_entries``."""
    if len(positions) != len(bodies):
        raise ValueError("encode_entries: as many positions as bodies are needed")
    parts: list[bytes] = []
    records: list[bytes] = []
    chain = prev_chain
    pos = positions[0] if positions else 0
    for i, body in enumerate(bodies):
        if positions[i] != pos:
            return None
        size = BODY_OFFSET + len(body)
        bcrc = body_crc(body)
        head = _HEAD36.pack(magic, size, first_index + i, term, pos, 0)
        chain = chain_crc(chain, head, bcrc)
        parts += (head, _TAIL12.pack(chain, bcrc, len(body)), body)
        records.append(INDEX_RECORD.pack(magic, pos, size, first_index + i, term))
        pos += size
    return b"".join(parts), b"".join(records), chain


#: :func:`encode_entries_pure`, compiled when the C accelerator is built (rocketq.speedups)
encode_entries: Callable[[int, int, int, Sequence[int], Sequence[bytes], int], EncodedRun] = (
    getattr(_speedups.COMPILED, "encode_entries", None) or encode_entries_pure
)


def decode_header(buf: Buf, off: int = 0) -> Header:
    return Header(*ENTRY_HEADER.unpack_from(buf, off))


def decode_entry(buf: Buf, off: int = 0) -> Entry:
    h = decode_header(buf, off)
    body = bytes(buf[off + BODY_OFFSET : off + BODY_OFFSET + h.body_size])
    return Entry(h.magic, h.index, h.term, h.pos, body, h.channel, h.chain_crc, h.body_crc)


def entry_problem(
    buf: Buf,
    off: int,
    avail: int,
    *,
    expected_pos: int,
    expected_index: int | None,
    prev_chain: int | None,
    min_term: int,
) -> tuple[Header | None, str | None]:
    """Check the entry at ``buf[off:]`` (``avail`` readable bytes). Returns its header and None,
    or the header (if readable) and what is wrong. ``prev_chain`` None skips the chain check
    (the first entry a scan reads after deleted or unread entries); an :func:`unchecked` entry
    (written by DLedger) skips both checksum checks."""
    if avail < BODY_OFFSET:
        return None, f"{avail} B left, less than a 48 B header"
    h = decode_header(buf, off)
    if h.magic not in ENTRY_MAGICS:
        return h, f"magic {h.magic} is no entry type"
    if h.size != BODY_OFFSET + h.body_size or h.body_size < 0:
        return h, f"size {h.size} != 48 + bodySize {h.body_size}"
    if h.size > avail:
        return h, f"size {h.size} runs past the {avail} B left in the file"
    if h.pos != expected_pos:
        return h, f"pos field {h.pos} != position {expected_pos}"
    if expected_index is not None and h.index != expected_index:
        return h, f"index {h.index} != expected {expected_index}"
    if h.term < min_term:
        return h, f"term {h.term} < previous entry's term {min_term}"
    if unchecked(h):
        return h, None
    body = buf[off + BODY_OFFSET : off + h.size]
    if body_crc(body) != h.body_crc:
        return h, f"bodyCrc {h.body_crc} != CRC32 of the body {body_crc(body)}"
    if prev_chain is None and h.index == 0:
        prev_chain = 0
    if prev_chain is not None:
        want = chain_crc(prev_chain, buf[off : off + 36], h.body_crc)
        if want != h.chain_crc:
            return h, f"chainCrc {h.chain_crc} != {want} computed from the previous entry"
    return h, None


#: ``(entries that passed, their bytes, the first problem or None, their index records, the last
#: passed entry's chain value and term)``
CheckedRun: TypeAlias = "tuple[int, int, str | None, bytes, int, int]"


def check_entries_pure(buf: Buf, pos: int, index: int, prev_chain: int | None, min_term: int) -> CheckedRun:
    """:func:`entry_problem` of the entries in ``buf`` one after the other, as a follower's
    store checks the leader's bytes: the first at position ``pos`` with index ``index``, chained
    from ``prev_chain`` (None: the first entry's chain is not checked unless its index is 0), no
    term below ``min_term``; each next entry right after the one before it, with the next index,
    chained from the one before it, no term below its term. Stops at the first entry with a
    problem (or the end of ``buf``): ``(count, bytes, problem, records, chain, term)``, the
    entries that passed, the bytes they take, the problem of the one after them (None when all
    of ``buf`` passed), their :func:`encode_index` records, and the chain value and term of the
    last that passed (``prev_chain`` (0 for None) and ``min_term`` when none did). The
    reference of the compiled ``check_entries``."""
    count = off = 0
    chain: int | None = prev_chain
    term = min_term
    records: list[bytes] = []
    end = len(buf)
    while off < end:
        h, problem = entry_problem(
            buf, off, end - off, expected_pos=pos, expected_index=index, prev_chain=chain, min_term=term
        )
        if problem is not None or h is None:
            return count, off, problem, b"".join(records), chain or 0, term
        records.append(INDEX_RECORD.pack(h.magic, h.pos, h.size, h.index, h.term))
        chain, term = h.chain_crc, h.term
        count += 1
        off += h.size
        pos += h.size
        index += 1
    return count, off, None, b"".join(records), chain or 0, term


#: :func:`check_entries_pure`, compiled when the C accelerator is built (rocketq.speedups)
check_entries: Callable[[Buf, int, int, int | None, int], CheckedRun] = (
    getattr(_speedups.COMPILED, "check_entries", None) or check_entries_pure
)


def unchecked(h: Header) -> bool:
    """An entry as DLedger writes it: both checksum fields 0 (only an empty body has CRC 0, and
    then its chain value is 0 only by a 2**-32 chance). Such entries pass :func:`entry_problem`
    on their header alone; recovery asks more of them (see ``entry_recovery``)."""
    return h.chain_crc == 0 and h.body_crc == 0


def encode_blank(remaining: int) -> bytes:
    """The padding that fills the last ``remaining`` bytes of a data file."""
    return _BLANK_HEAD.pack(BLANK_MAGIC, remaining) + bytes(remaining - _BLANK_HEAD.size)


def blank_problem(buf: Buf, off: int, avail: int) -> str | None:
    magic, size = _BLANK_HEAD.unpack_from(buf, off)
    if magic != BLANK_MAGIC or size != avail:
        return f"blank of size {size} != the {avail} B left in the file"
    return None


def needs_blank(entry_size: int, remaining: int) -> bool:
    """``MmapFileList.preAppend``: an entry goes to the next file unless 8 bytes stay after it."""
    return entry_size + MIN_BLANK_LEN > remaining


def encode_index(magic: int, pos: int, size: int, index: int, term: int) -> bytes:
    return INDEX_RECORD.pack(magic, pos, size, index, term)


@dataclass(frozen=True, slots=True)
class IndexRecord:
    """One 32-byte index record."""

    magic: int
    pos: int
    size: int
    index: int
    term: int


def decode_index(buf: Buf, off: int = 0) -> IndexRecord:
    return IndexRecord(*INDEX_RECORD.unpack_from(buf, off))


# -- checkpoint / currterm ------------------------------------------------------------------------
def format_checkpoint(end_index: int, committed_index: int, flushed_index: int) -> bytes:
    """``endIndex`` before ``committedIndex``: the order java.util.Properties (Java 8) writes."""
    return (
        f"{END_INDEX_KEY}={end_index}\n{COMMITTED_INDEX_KEY}={committed_index}\n"
        f"{FLUSHED_INDEX_KEY}={flushed_index}\n"
    ).encode()


def _long(props: dict[str, str], key: str, path: str) -> int | None:
    raw = props.get(key, "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise CorruptFileError(f"{path}: {key}={raw!r} is not a number") from None


def parse_checkpoint(text: str, path: str = CHECKPOINT_FILE) -> tuple[int | None, int | None, int | None]:
    """``(endIndex, committedIndex, flushedIndex)``, None where a key is absent."""
    props = parse_properties(text)
    return (
        _long(props, END_INDEX_KEY, path),
        _long(props, COMMITTED_INDEX_KEY, path),
        _long(props, FLUSHED_INDEX_KEY, path),
    )


_PEER_ID = re.compile(r"[A-Za-z0-9_.\-]*")


def format_currterm(term: int, voted_for: str | None) -> bytes:
    """``voteLeader`` first, then ``currTerm``: the order java.util.Properties writes them."""
    vote = voted_for or ""
    if not _PEER_ID.fullmatch(vote):
        raise EntryStoreError(f"peer id {vote!r} must be letters, digits, '_', '.' or '-'")
    return f"{VOTE_KEY}={vote}\n{TERM_KEY}={term}\n".encode()


def parse_currterm(text: str, path: str = CURRTERM_FILE) -> tuple[int, str | None]:
    """``(currTerm, voteLeader)``; a missing term is 0 and an empty vote None (as MemberState)."""
    props = parse_properties(text)
    term = _long(props, TERM_KEY, path)
    vote = props.get(VOTE_KEY, "")
    return (term if term is not None else 0), (vote or None)


# -- adopting a plain CommitLog (DLedgerCommitLog.setRecoverPosition) ------------------------------
def divided_commitlog_offset(last_file_from_offset: int | None, file_size: int) -> int:
    """RocketMQ's rule: DLedger entries start right after the last old CommitLog file (its start
    plus the file size); with no old file they start at 0."""
    if file_size <= 0:
        raise EntryStoreError(f"file size {file_size} B must be positive")
    if last_file_from_offset is None:
        return 0
    if last_file_from_offset < 0 or last_file_from_offset % file_size:
        raise EntryStoreError(
            f"old CommitLog file offset {last_file_from_offset} is no multiple of the file size {file_size}"
        )
    return last_file_from_offset + file_size


def dledger_start_offset(commitlog_max_offset: int, file_size: int) -> int:
    """Where replicated entries start after a CommitLog whose data ends at ``commitlog_max_offset``:
    the next file boundary at or above it (the end of the file holding its last byte)."""
    if file_size <= 0:
        raise EntryStoreError(f"file size {file_size} B must be positive")
    if commitlog_max_offset < 0:
        raise EntryStoreError(f"CommitLog max offset {commitlog_max_offset} is negative")
    return -(-commitlog_max_offset // file_size) * file_size


def in_old_commitlog(offset: int, divided_offset: int) -> bool:
    """Reads below the divided offset go to the old CommitLog, the rest to the entry store."""
    return offset < divided_offset
