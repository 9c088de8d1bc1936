"""The record walk: where CommitLog records are, what ends them, and their fields in bulk.

Every reader of CommitLog windows goes through this module, so they agree on where valid data
ends: dispatch (:func:`parse_window`: requests for the ConsumeQueues and the index), recovery
(:func:`valid_prefix`, :func:`iter_records`, used by :mod:`rocketq.store.recovery`) and the
Spark scans (:mod:`rocketq.spark.jobs.scan`: :func:`walk` and :func:`check_v1`). A walk ends in
one of the states of :class:`~rocketq.protocol.record.RecordKind`: a run of MESSAGE records,
then BLANK (go on in the next segment), END (never-written space) or CORRUPT (damage), or the
window runs out (read on).

One idea: the walk over a window of CommitLog records, record by record and in columns, kept in
one module so that no two readers can disagree on where valid data ends.

Decoding every record into Python objects costs several microseconds per record, more than
writing it did; the columnar path does the per-record work in bulk instead:

1. **walk** the TOTALSIZE chain in Python (one cached ``unpack_from`` per record, the only
   per-record Python step) and collect the record starts;
2. **gather** the fixed-position header fields of every record at once, then the variable
   positions (topic length at ``88 + bodyLen``, properties length after the topic). Gathers are
   *row* gathers: the window, padded with :data:`PAD_BYTES` zeros, is viewed (``as_strided``)
   as one overlapping row of ``w`` bytes per byte offset, and ``rows[starts]`` copies whole rows,
   about ten times faster than indexing every byte; the 88-byte header rows are then read
   through a big-endian structured dtype;
3. **classify** (:func:`check_v1`): a record is *good* when it is V1 with IPv4 hosts (sysflag
   bits 0x30 clear), ``91 <= size``, and its body, topic and properties exactly fill its
   TOTALSIZE; the first record that is not good ends the columnar prefix (the rest is parsed
   record by record, the same way :func:`rocketq.protocol.record.decode_record` does);
4. **locate properties**: every ``\\x02`` separator inside the properties (found in the matrix
   of properties rows, or in the whole window when a record's properties are longer than
   :data:`PAD_BYTES`) and every properties start is a candidate
   property-name start; candidates inside a record's properties whose bytes equal ``TAGS\\x01``,
   ``KEYS\\x01`` or ``UNIQ_KEY\\x01`` give, per record, the first such pair and its value range
   (up to the next separator or the end of the properties), exactly as a ``find`` on the
   properties string would;
5. **hash** ASCII values of up to :data:`MAX_VECTOR_KEY_BYTES` bytes with Java's
   ``String.hashCode``: a value's row of ``w`` bytes, zeroed past its length ``l``, times the
   weights ``31**(w-1-j)`` is ``31**(w-l) * hash`` (mod 2**32); 31 is odd, hence invertible
   mod 2**32, so one multiplication by ``31**-(w-l)`` gives the hash. Longer or non-ASCII values
   are flagged for the scalar path.

Record layout used here (V1, IPv4 hosts; spec/store-format.md §1)::

    off  field            off  field              off  field
    0    TOTALSIZE  i32   28   PHYSICALOFFSET i64  76   PREPARED TX OFF i64
    4    MAGICCODE  i32   36   SYSFLAG        i32  84   BODY LENGTH     i32
    12   QUEUEID    i32   56   STORETIMESTAMP i64  88   BODY, then TL i8, TOPIC, PL i16, PROPS
    20   QUEUEOFFSET i64

**Compiled scan.** When the C accelerator is built (:mod:`rocketq.speedups`),
:func:`parse_window` first hands the window to ``rocketq._speedups.scan_window``, which does steps
1-5 in one pass over the bytes: the walk, the good V1/IPv4 prefix (the checks of
:func:`check_v1`), the columns, the first TAGS/KEYS/UNIQ_KEY pair of each record, the tags codes
and the index key hashes (``topic#UNIQ_KEY`` and ``topic#key``, in the order the index writes
them). A window of fewer than :data:`MIN_COMPILED_COLUMNAR_RECORDS` good records comes back as
:class:`DispatchRequest` objects made in C (a :class:`RequestList` carrying the index hashes),
a larger one as a :class:`DispatchBatch` on the C columns. Records with non-ASCII tags or keys,
SCHEDULE_TOPIC_XXXX delivery times, and every window it does not take whole (another layout or
damage before :data:`MIN_COLUMNAR_RECORDS` records, more topics than it keeps apart) are left to
this module's pure code, so the answer is the pure one for every window
(``tests/property/test_scan_window_equivalence.py``). Dispatch cost per record, parse,
ConsumeQueue units and index entries together (``python bench/dispatch_windows.py``, the
ConsumeQueue's and the index's write loops compiled as well): 1.5-1.7 µs at 32-record windows
against 5.6-5.9 µs pure, 0.4-0.5 µs at 1024-record windows against 1.6.

Invariants: nothing here reads outside the padded window (row starts are clipped into the
window, and a clipped value can only belong to a record that is not fast); bytes past a record's
end are never taken as its data (masks by length); the arrays describe records in CommitLog order.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import as_strided

from rocketq import speedups as _speedups
from rocketq.message import (
    KEY_SEPARATOR,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    decode_properties,
    java_string_hash,
    java_string_hash_once,
    number_property,
)
from rocketq.protocol import record as rec
from rocketq.store.lazy_list import LazyList

I64s = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]

#: Longest property value hashed in the vectorised path; longer ones go the scalar way.
MAX_VECTOR_KEY_BYTES: Final = 64
#: Bytes of the V1/IPv4 header up to the body.
V1_HEAD_BYTES: Final = 88
#: The smallest V1/IPv4 record: the 88-byte header, the topic length byte and the properties
#: length (the scalar parser takes nothing smaller on its fast path).
V1_MIN_SIZE: Final = 91

_HEAD_DTYPE: Final = np.dtype(
    {
        "names": [
            "size",
            "magic",
            "queue_id",
            "queue_offset",
            "sys_flag",
            "store_ts",
            "prepared",
            "body_len",
        ],
        "formats": [">i4", ">i4", ">i4", ">i8", ">i4", ">i8", ">i8", ">i4"],
        "offsets": [0, 4, 12, 20, 36, 56, 76, 84],
        "itemsize": V1_HEAD_BYTES,
    }
)
_HEAD8 = struct.Struct(">ii")  # TOTALSIZE, MAGICCODE
_MESSAGE_MAGICS: Final = frozenset((rec.MESSAGE_MAGIC_CODE, rec.MESSAGE_MAGIC_CODE_V2))
_MASK32: Final = np.uint64(0xFFFFFFFF)
#: Zero bytes after the window, so that a row of up to this many bytes starting anywhere in the
#: window stays inside the buffer; properties longer than this are searched the slow way.
PAD_BYTES: Final = 1024
_PAD: Final = bytes(PAD_BYTES)


def _powers(base: int, n: int) -> npt.NDArray[np.uint64]:
    out = np.empty(n, dtype=np.uint64)
    p = 1
    for i in range(n):
        out[i] = p
        p = (p * base) & 0xFFFFFFFF
    return out


#: ``31**k mod 2**32`` and ``31**-k mod 2**32`` for k in 0..MAX_VECTOR_KEY_BYTES.
POW31: Final = _powers(31, MAX_VECTOR_KEY_BYTES + 1)
INV_POW31: Final = _powers(pow(31, -1, 1 << 32), MAX_VECTOR_KEY_BYTES + 1)


def pad(data: bytes) -> npt.NDArray[np.uint8]:
    """The window as uint8 followed by :data:`PAD_BYTES` zeros (one copy of the window)."""
    return np.frombuffer(data + _PAD, dtype=np.uint8)


def rows(buf: npt.NDArray[np.uint8], width: int) -> npt.NDArray[np.uint8]:
    """A read-only view of ``buf`` as one row of ``width`` bytes per byte offset."""
    return as_strided(buf, shape=(len(buf) - width + 1, width), strides=(1, 1), writeable=False)


def walk(data: bytes | memoryview, start: int = 0) -> tuple[list[int], int, rec.RecordKind | None]:
    """The walk: message record starts from ``start`` along the TOTALSIZE chain, where it stopped
    and what is there.

    A start has a V1 or V2 magic and a size of at least :data:`V1_MIN_SIZE` that fits the
    window (its fields are checked by :func:`check_v1` or :func:`rec.decode_record` after).
    The walk stops at a BLANK marker (``BLANK``), never-written space (``END``: size and magic
    zero), an illegal magic or a message size below the minimum (``CORRUPT``), or with None
    where the window ends: fewer than 8 bytes left, or a record that runs past it (the caller
    reads on from there, or, at the end of the data, decides what that is).
    """
    starts: list[int] = []
    append = starts.append
    head_at = _HEAD8.unpack_from
    magics = _MESSAGE_MAGICS
    min_size = V1_MIN_SIZE
    n = len(data)
    p = start
    while p + 8 <= n:
        size, magic = head_at(data, p)
        if min_size <= size <= n - p and magic in magics:
            append(p)
            p += size
            continue
        if magic in magics:
            return starts, p, rec.RecordKind.CORRUPT if size < min_size else None
        if magic == rec.BLANK_MAGIC_CODE:
            return starts, p, rec.RecordKind.BLANK
        if size == 0 and magic == 0:
            return starts, p, rec.RecordKind.END
        return starts, p, rec.RecordKind.CORRUPT
    return starts, p, None


@dataclass(frozen=True, slots=True, eq=False)
class PropertyColumn:
    """One property of every record: present?, value start and length (window positions)."""

    present: Bools
    start: I64s
    length: I64s


@dataclass(frozen=True, slots=True, eq=False)
class WindowColumns:
    """The fast prefix of a window: one entry per record, in CommitLog order."""

    starts: I64s
    size: I64s
    queue_id: I64s
    queue_offset: I64s
    sys_flag: I64s
    store_ts: I64s
    prepared: I64s
    topic_start: I64s
    topic_len: I64s
    props_start: I64s
    props_end: I64s

    def __len__(self) -> int:
        return len(self.starts)


#: The largest PROPERTIES LENGTH (a signed 16-bit field): more is damage, not a length.
MAX_PROPS_BYTES: Final = 32767


@dataclass(frozen=True, slots=True, eq=False)
class V1Shape:
    """The structure check of V1/IPv4 records at some starts of a padded window, in bulk.

    ``fast``: V1 magic, IPv4 hosts, at least :data:`V1_MIN_SIZE` bytes (the layout read here);
    ``good``: fast, and body, topic and properties exactly fill TOTALSIZE, the topic length in
    1..127 and the properties length in 0..32767: what :func:`rec.decode_record` accepts of such
    a record. Field positions of records that are not good mean nothing.
    """

    head: npt.NDArray[np.void]
    size: I64s
    body_len: I64s
    topic_start: I64s
    topic_len: I64s
    props_start: I64s
    props_len: I64s
    end: I64s
    fast: Bools
    good: Bools


def check_v1(buf: npt.NDArray[np.uint8], n: int, s: I64s) -> V1Shape:
    """:class:`V1Shape` of the records at ``s`` of the padded window ``buf`` of ``n`` bytes."""
    head = rows(buf, V1_HEAD_BYTES)[s].view(_HEAD_DTYPE).reshape(-1)
    size = head["size"].astype(np.int64)
    sys_flag = head["sys_flag"].astype(np.int64)
    body_len = head["body_len"].astype(np.int64)
    fast = (head["magic"] == rec.MESSAGE_MAGIC_CODE) & ((sys_flag & 0x30) == 0) & (size >= V1_MIN_SIZE)
    end = s + size
    tpos = s + V1_HEAD_BYTES + body_len
    shape_ok = (body_len >= 0) & (tpos + 3 <= end)
    tl = buf[np.clip(tpos, 0, n - 1)].astype(np.int64)
    topic_start = tpos + 1
    plpos = np.clip(topic_start + tl, 0, n - 1)
    pl = (buf[plpos].astype(np.int64) << 8) | buf[plpos + 1]
    props_start = topic_start + tl + 2
    # a length field cut by the record end reads as -1
    pl = np.where(props_start <= end, pl, -1)
    shape_ok &= (tl > 0) & (tl <= 127) & (pl <= MAX_PROPS_BYTES) & (props_start + pl == end)
    return V1Shape(head, size, body_len, topic_start, tl, props_start, pl, end, fast, fast & shape_ok)


def scan(buf: npt.NDArray[np.uint8], n: int, starts: list[int]) -> tuple[WindowColumns, int, bool]:
    """Columns of the leading fast records among ``starts`` (:func:`walk`).

    ``buf`` is the padded window (:func:`pad`) of ``n`` bytes. Returns (columns, number of good
    records, whether the record after them is a V1/IPv4 record whose layout does not add up,
    i.e. CORRUPT).
    """
    s = np.asarray(starts, dtype=np.int64)
    shape = check_v1(buf, n, s)
    head = shape.head
    bad = np.flatnonzero(~shape.good)
    k = int(bad[0]) if bad.size else len(s)
    corrupt = bool(bad.size) and bool(shape.fast[k])
    cols = WindowColumns(
        starts=s[:k],
        size=shape.size[:k],
        queue_id=head["queue_id"][:k].astype(np.int64),
        queue_offset=head["queue_offset"][:k].astype(np.int64),
        sys_flag=head["sys_flag"][:k].astype(np.int64),
        store_ts=head["store_ts"][:k].astype(np.int64),
        prepared=head["prepared"][:k].astype(np.int64),
        topic_start=shape.topic_start[:k],
        topic_len=shape.topic_len[:k],
        props_start=shape.props_start[:k],
        props_end=shape.end[:k],
    )
    return cols, k, corrupt


#: Offset of BODYCRC in a record.
_BODY_CRC_POS: Final = 8


#: What a bulk walk can be asked to report: (topic, queue id) → the next queue offset its records
#: name (one more than the largest QUEUEOFFSET of a record a ConsumeQueue holds).
QueueNext = dict[tuple[str, int], int]


def note_queue_offsets(buf: npt.NDArray[np.uint8], cols: WindowColumns, k: int, out: QueueNext) -> None:
    """Raise ``out`` by the first ``k`` records of ``cols`` (of the padded window ``buf``) that a
    ConsumeQueue holds (NOT_TYPE and COMMIT: SYSFLAG bit 0x4 clear). In bulk: the topics are
    told apart by their bytes (one ``np.unique`` over them), so the cost per record is a few
    NumPy element operations."""
    rows_ = np.flatnonzero((cols.sys_flag[:k] & 0x4) == 0)
    if not rows_.size:
        return
    t0 = cols.topic_start[rows_]
    tl = cols.topic_len[rows_]
    width = int(tl.max())
    vals = rows(buf, width)[t0]
    vals = np.where(np.arange(width, dtype=np.int64) < tl[:, None], vals, 0)
    keyed = np.ascontiguousarray(np.concatenate([vals, tl[:, None].astype(np.uint8)], axis=1))
    names, inverse = np.unique(keyed.view(np.dtype((np.void, width + 1))).reshape(-1), return_inverse=True)
    qid = cols.queue_id[rows_]
    qoff = cols.queue_offset[rows_]
    order = np.lexsort((qoff, qid, inverse))
    g = inverse[order]
    q = qid[order]
    last = np.flatnonzero(np.append((g[1:] != g[:-1]) | (q[1:] != q[:-1]), True))
    topics = [bytes(v)[: bytes(v)[-1]].decode("utf-8", "replace") for v in names.tolist()]
    for i in last.tolist():
        key = (topics[int(g[i])], int(q[i]))
        nxt = int(qoff[order[i]]) + 1
        if nxt > out.get(key, 0):
            out[key] = nxt


def valid_prefix(
    buf: npt.NDArray[np.uint8], n: int, *, check_crc: bool, queue_next: QueueNext | None = None
) -> tuple[int, int]:
    """(end, count) of the leading records of the padded window that are good
    (:func:`check_v1`) and, when ``check_crc``, whose body CRC matches; (0, 0) when the first
    one is not. What follows is
    for :func:`rec.decode_record` to judge (a BLANK, another layout, the end or damage).
    ``queue_next`` is raised by the accepted records (:func:`note_queue_offsets`)."""
    data = buf.data[:n]
    starts, _, _ = walk(data)
    if not starts:
        return 0, 0
    cols, k, _ = scan(buf, n, starts)
    if k and check_crc:
        first = cols.starts
        stored = rows(buf, 4)[first + _BODY_CRC_POS].view(">i4").reshape(-1).tolist()
        body_from = (first + V1_HEAD_BYTES).tolist()
        body_to = (cols.topic_start - 1).tolist()
        crc32 = zlib.crc32
        for i in range(k):
            if crc32(data[body_from[i] : body_to[i]]) & 0x7FFFFFFF != stored[i]:
                k = i
                break
    if k == 0:
        return 0, 0
    if queue_next is not None:
        note_queue_offsets(buf, cols, k, queue_next)
    return int(cols.starts[k - 1]) + int(cols.size[k - 1]), k


def _candidates(buf: npt.NDArray[np.uint8], n: int, cols: WindowColumns) -> tuple[I64s, I64s]:
    """(candidates, owners): every properties start and every position just after a ``\\x02``
    inside the properties (up to and including the properties end), in position order, and the
    record of each. A pair can only start at a candidate, and a value that starts after
    candidate ``j`` ends just before candidate ``j + 1`` when that has the same owner (the
    separator in between), else at the properties end.

    The properties are read as a matrix with one row per record that starts one byte early; that
    first column counts as a separator, so one ``flatnonzero`` yields every candidate in position
    order. When some record's properties are longer than the padding, the separators are taken
    from the whole window instead.
    """
    ps = cols.props_start
    pe = cols.props_end
    length = np.maximum(pe - ps, 0)
    width = int(length.max()) if len(length) else 0
    if width == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    if width >= PAD_BYTES:
        cand = np.unique(np.concatenate((np.flatnonzero(buf[:n] == 2) + 1, ps)))
        owner = np.searchsorted(ps, cand, side="right") - 1
        inside = owner >= 0
        owner = np.where(inside, owner, 0)
        inside &= cand <= pe[owner]
        return cand[inside], owner[inside]
    hits = rows(buf, width + 1)[ps - 1] == 2  # ps >= 1: a record has a header before its properties
    hits[:, 0] = True
    row, col = np.divmod(np.flatnonzero(hits), width + 1)
    # column c is window position ps - 1 + c, and its candidate is the position after it
    inside = col <= length[row]
    row = row[inside]
    return ps[row] + col[inside], row


def find_properties(
    buf: npt.NDArray[np.uint8], n: int, cols: WindowColumns, names: tuple[bytes, ...]
) -> list[PropertyColumn]:
    """For each ``name`` (``b"KEY\\x01"``, at least 4 bytes, no ``\\x02``): per record, the
    first pair of that name in the properties and its value range. A pair starts at the
    properties start or after ``\\x02``; its value runs to the next ``\\x02`` or the end of
    the properties."""
    count = len(cols)
    pe = cols.props_end
    cand, owner = _candidates(buf, n, cols)
    total = len(cand)
    # the first four bytes of every candidate as one big-endian number: one comparison per name
    # finds its candidates, and only those are checked further
    head = rows(buf, 4)[cand].view(">u4").reshape(-1)
    out: list[PropertyColumn] = []
    for name in names:
        width = len(name)
        j = np.flatnonzero(head == int.from_bytes(name[:4], "big"))
        j = j[cand[j] + width <= pe[owner[j]]]
        if len(j) and width > 4:
            tail = np.frombuffer(name[4:], dtype=np.uint8)
            j = j[(rows(buf, width - 4)[cand[j] + 4] == tail).all(axis=1)]
        present = np.zeros(count, dtype=np.bool_)
        start = np.zeros(count, dtype=np.int64)
        length = np.zeros(count, dtype=np.int64)
        if len(j):
            o = owner[j]
            # candidates are in position order, so a record's first match is its first pair
            first = np.ones(len(j), dtype=np.bool_)
            first[1:] = o[1:] != o[:-1]
            j = j[first]
            o = o[first]
            nxt = np.minimum(j + 1, total - 1)
            same = (j + 1 < total) & (owner[nxt] == o)
            vstart = cand[j] + width
            present[o] = True
            start[o] = vstart
            length[o] = np.where(same, cand[nxt] - 1, pe[o]) - vstart
        out.append(PropertyColumn(present, start, length))
    return out


def hash_ranges(
    buf: npt.NDArray[np.uint8], start: I64s, length: I64s, forbid: int | None = None
) -> tuple[I64s, Bools]:
    """Java ``String.hashCode`` (as uint32 values in int64) of the byte ranges of the padded
    window, and which ranges were hashed: ASCII, at most :data:`MAX_VECTOR_KEY_BYTES` long and
    without the byte ``forbid``. Others get False (and a meaningless hash)."""
    ok = length <= MAX_VECTOR_KEY_BYTES
    if not len(start):
        return np.zeros(0, dtype=np.int64), ok
    lengths = np.where(ok, length, 0)
    width = int(lengths.max())
    if width == 0:
        return np.zeros(len(start), dtype=np.int64), ok
    vals = rows(buf, width)[start]
    if int(lengths.min()) != width:  # (all of one length, as unique keys are: nothing to mask)
        vals = np.where(np.arange(width, dtype=np.int64) < lengths[:, None], vals, 0)
    ok &= vals.max(axis=1) < 128
    if forbid is not None:
        ok &= ~(vals == forbid).any(axis=1)
    scaled = (vals.astype(np.uint64) @ POW31[width - 1 :: -1]) & _MASK32  # 31**(w-l) * hash
    hashes = (scaled * INV_POW31[width - lengths]) & _MASK32
    return hashes.astype(np.int64), ok


def to_int32(values: I64s) -> I64s:
    """uint32 values (in int64) → the signed 32-bit value, as Java's int."""
    return np.where(values >= 1 << 31, values - (1 << 32), values)


# -- the walk over segments ---------------------------------------------------------------------
class SegmentView(Protocol):
    """What the walk reads of a CommitLog segment: a MappedFile, or plain bytes in tests."""

    @property
    def file_from_offset(self) -> int: ...

    @property
    def read_position(self) -> int: ...

    def read(self, pos: int, size: int) -> bytes | None: ...


def segment_finder(segments: Sequence[SegmentView], file_size: int) -> Callable[[int], SegmentView | None]:
    """``find(offset)``: the segment of ``segments`` (in offset order) holding ``offset``."""

    def find(offset: int) -> SegmentView | None:
        if not segments:
            return None
        index = offset // file_size - segments[0].file_from_offset // file_size
        if 0 <= index < len(segments):
            seg = segments[index]
            if seg.file_from_offset <= offset < seg.file_from_offset + file_size:
                return seg
        for seg in segments:
            if seg.file_from_offset <= offset < seg.file_from_offset + file_size:
                return seg
        return None

    return find


def iter_records(
    find: Callable[[int], SegmentView | None],
    file_size: int,
    start: int,
    *,
    end: int | None = None,
    check_crc: bool = False,
    read_body: bool = False,
    window: int = 4 << 20,
    verify_prop_crc: bool = False,
) -> Iterator[tuple[int, rec.RecordView]]:
    """(CommitLog offset, record) from ``start`` to the end of readable data (or ``end``), record
    by record with :func:`rec.decode_record`; a BLANK moves to the next segment, and so does the
    end of a full segment. Stops at the first END or CORRUPT record. ``window`` must hold the
    largest legal record."""
    offset = start
    while True:
        if end is not None and offset >= end:
            return
        seg = find(offset)
        if seg is None:
            return
        base = seg.file_from_offset
        pos = offset - base
        limit = seg.read_position
        if end is not None and end - base < limit:
            limit = max(pos, end - base)
        if pos >= limit:
            if limit >= file_size:
                offset = base + file_size
                continue
            return
        data = seg.read(pos, min(limit - pos, window))
        if data is None:
            return
        p = 0
        n = len(data)
        while p < n:
            view = rec.decode_record(
                data, p, check_crc=check_crc, read_body=read_body, verify_prop_crc=verify_prop_crc
            )
            kind = view.kind
            if kind is rec.RecordKind.MESSAGE:
                yield base + pos + p, view
                p += view.size
            elif kind is rec.RecordKind.BLANK:
                break
            elif p > 0 and pos + n < limit and (n - p < 8 or p + view.size > n):
                # The record straddles the read window: read again from it. At p == 0 the
                # window already starts at the record and holds any legal one, so a size
                # beyond it is corrupt (re-reading would loop forever).
                break
            else:
                return
        else:
            offset = base + pos + p
            continue
        offset = base + file_size if kind is rec.RecordKind.BLANK else base + pos + p


# -- dispatch: the requests of a window ------------------------------------------------------
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
#: The topic of the filler records recovery writes over a quarantined damaged range
#: (``store/recovery.py``); they are ROLLBACK records, which no queue and no index holds.
QUARANTINE_TOPIC = "%QUARANTINE%"


class DispatchRequest:
    """One CommitLog record as the dispatchers see it (RocketMQ ``DispatchRequest``).

    ``properties`` is decoded from ``properties_raw`` on first access: the dispatchers themselves
    only need the tags code, the keys and the unique key, which the parser extracts directly.
    """

    __slots__ = (
        "_properties",
        "commit_log_offset",
        "consume_queue_offset",
        "keys",
        "msg_size",
        "prepared_transaction_offset",
        "properties_raw",
        "queue_id",
        "store_timestamp",
        "sys_flag",
        "tags_code",
        "topic",
        "uniq_key",
    )

    def __init__(
        self,
        topic: str,
        queue_id: int,
        commit_log_offset: int,
        msg_size: int,
        tags_code: int,
        store_timestamp: int,
        consume_queue_offset: int,
        keys: str = "",
        uniq_key: str | None = None,
        sys_flag: int = 0,
        prepared_transaction_offset: int = 0,
        properties: dict[str, str] | None = None,
        properties_raw: bytes = b"",
    ) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.commit_log_offset = commit_log_offset
        self.msg_size = msg_size
        self.tags_code = tags_code
        self.store_timestamp = store_timestamp
        self.consume_queue_offset = consume_queue_offset
        self.keys = keys
        self.uniq_key = uniq_key
        self.sys_flag = sys_flag
        self.prepared_transaction_offset = prepared_transaction_offset
        self._properties = properties
        self.properties_raw = properties_raw

    @property
    def properties(self) -> dict[str, str]:
        if self._properties is None:
            self._properties = decode_properties(self.properties_raw.decode("utf-8", "replace"))
        return self._properties

    def __repr__(self) -> str:
        return (
            f"DispatchRequest({self.topic!r}, queue={self.queue_id}, offset={self.commit_log_offset}, "
            f"size={self.msg_size}, cq_offset={self.consume_queue_offset})"
        )


def compute_deliver_timestamp(levels: dict[int, int], level: int, store_timestamp: int) -> int:
    """Tags code of a SCHEDULE_TOPIC_XXXX unit: when the message is due."""
    max_level = max(levels) if levels else 0
    level = min(level, max_level)
    delay = levels.get(level)
    if delay is None:
        return store_timestamp + 1000
    return store_timestamp + delay


def build_dispatch_request(
    offset: int, view: rec.RecordView, delay_levels: dict[int, int] | None = None
) -> DispatchRequest:
    """RocketMQ ``checkMessageAndReturnSize`` → ``DispatchRequest`` for a decoded MESSAGE record."""
    props = decode_properties(view.properties)
    topic = view.topic
    tags_code = 0
    if delay_levels is not None and topic == SCHEDULE_TOPIC:
        level = number_property(props.get(PROPERTY_DELAY_TIME_LEVEL, ""), 0)
        if level > 0:
            tags_code = compute_deliver_timestamp(delay_levels, level, view.store_timestamp)
    else:
        tags = props.get(PROPERTY_TAGS)
        if tags:
            tags_code = java_string_hash(tags)
    return DispatchRequest(
        topic,
        view.queue_id,
        offset,
        view.size,
        tags_code,
        view.store_timestamp,
        view.queue_offset,
        props.get(PROPERTY_KEYS, ""),
        props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
        view.sys_flag,
        view.prepared_transaction_offset,
        props,
        view.properties.encode("utf-8"),
    )


_TAGS = b"TAGS\x01"
_KEYS = b"KEYS\x01"
_UNIQ = b"UNIQ_KEY\x01"


def _prop(props: bytes, name: bytes) -> bytes | None:
    """The value of one property in an encoded properties string, without decoding the rest."""
    pos = props.find(name)
    while pos > 0 and props[pos - 1] != 2:  # must start a pair
        pos = props.find(name, pos + 1)
    if pos < 0:
        return None
    start = pos + len(name)
    end = props.find(b"\x02", start)
    return props[start : end if end >= 0 else len(props)]


_V1_HEAD = struct.Struct(">iiiiiqqiq8sq8siqi")  # V1 with IPv4 hosts, up to BODY LENGTH (88 bytes)
_tags_codes: dict[bytes, int] = {}
_topics: dict[bytes, str] = {}


def _tags_code_of(raw: bytes) -> int:
    code = _tags_codes.get(raw)
    if code is None:
        code = java_string_hash(raw.decode("utf-8", "replace"))
        if len(_tags_codes) > 65536:
            _tags_codes.clear()
        _tags_codes[raw] = code
    return code


def _topic_of(raw: bytes) -> str:
    topic = _topics.get(raw)
    if topic is None:
        topic = raw.decode("utf-8", "replace")
        if len(_topics) > 65536:
            _topics.clear()
        _topics[raw] = topic
    return topic


def _parse_records(
    data: bytes, base: int, delay_levels: dict[int, int] | None, p: int = 0
) -> tuple[list[DispatchRequest], int, rec.RecordKind | None]:
    """The record-by-record parser (see :func:`parse_window`), from window position ``p``."""
    starts, stop_at, stop = walk(data, p)
    out, bad_at = _requests_at(data, base, delay_levels, starts)
    if bad_at is not None:
        return out, bad_at, rec.RecordKind.CORRUPT
    return out, stop_at, _zero_tail(data, stop_at, stop)


def _zero_tail(data: bytes, p: int, stop: rec.RecordKind | None) -> rec.RecordKind | None:
    """Dispatch takes fewer than 8 zero bytes at the end of a window as the end of data."""
    if stop is None and p < len(data) < p + 8 and not any(data[p:]):
        return rec.RecordKind.END
    return stop


def _requests_at(
    data: bytes, base: int, delay_levels: dict[int, int] | None, starts: list[int]
) -> tuple[list[DispatchRequest], int | None]:
    """Requests of the records at ``starts`` (:func:`walk`), and the start of the first one
    that does not decode (None when all do).

    The common layout (V1, IPv4 hosts) is parsed with one ``unpack_from`` and a few ``find``
    calls on the properties; anything else goes through :func:`rec.decode_record`.
    """
    out: list[DispatchRequest] = []
    append = out.append
    head = _V1_HEAD.unpack_from
    v1 = rec.MESSAGE_MAGIC_CODE
    for p in starts:
        (size, magic, _crc, qid, _flag, qoff, _phys, sys_flag, _born, _bh, store_ts, _sh, _re,
         prepared, body_len) = head(data, p)  # fmt: skip
        if magic != v1 or sys_flag & 0x30:
            view = rec.decode_record(data[p : p + size], 0, check_crc=False, read_body=False)
            if view.kind is not rec.RecordKind.MESSAGE:
                return out, p
            append(build_dispatch_request(base + p, view, delay_levels))
            continue
        end = p + size
        q = p + 88 + body_len
        if body_len < 0 or q + 3 > end:
            return out, p
        tl = data[q]
        topic = _topic_of(data[q + 1 : q + 1 + tl])
        q += 1 + tl
        pl = (data[q] << 8) | data[q + 1] if q + 2 <= end else -1
        if tl == 0 or tl > 127 or pl > MAX_PROPS_BYTES or q + 2 + pl != end:
            return out, p
        props = data[q + 2 : end]
        tags_code = 0
        if delay_levels is not None and topic == SCHEDULE_TOPIC:
            level = _prop(props, b"DELAY\x01")
            if level is not None and level.isdigit() and int(level) > 0:
                tags_code = compute_deliver_timestamp(delay_levels, int(level), store_ts)
        else:
            t = props.find(b"TAGS\x01")
            if t == 0 or (t > 0 and props[t - 1] == 2):
                e = props.find(b"\x02", t)
                raw = props[t + 5 : e] if e >= 0 else props[t + 5 :]
                if raw:
                    tags_code = _tags_code_of(raw)
            elif t > 0:
                raw2 = _prop(props, _TAGS)
                if raw2:
                    tags_code = _tags_code_of(raw2)
        uniq: str | None = None
        if props.find(b"UNIQ_KEY\x01") >= 0:
            raw3 = _prop(props, _UNIQ)
            uniq = raw3.decode("utf-8", "replace") if raw3 else None
        keys = ""
        if props.find(b"KEYS\x01") >= 0:
            raw4 = _prop(props, _KEYS)
            keys = raw4.decode("utf-8", "replace") if raw4 else ""
        req = DispatchRequest(
            topic, qid, base + p, size, tags_code, store_ts, qoff, keys, uniq, sys_flag, prepared
        )
        req.properties_raw = props
        append(req)
    return out, None


#: Windows with fewer records than this are parsed record by record. A columnar pass costs
#: about 1 ms per window (a few hundred NumPy calls of a few µs each) plus 3-6 µs per record; the
#: record-by-record pass 11-12.5 µs per record, ConsumeQueue and index writes included. They break
#: even near 160 records (``python bench/dispatch_windows.py``).
MIN_COLUMNAR_RECORDS = 160

_NAMES = (b"TAGS\x01", b"KEYS\x01", b"UNIQ_KEY\x01")
_KEY_SPACE = ord(KEY_SEPARATOR)


class RequestList(list[DispatchRequest]):
    """The requests of a small window from the compiled scan, with the index key hashes it made:
    :attr:`index_entries` is (record numbers, hashes), one pair per index entry in the order the
    index writes them (as :meth:`DispatchBatch.index_entries`), or None when the index must hash
    the keys itself. :attr:`topics` is every topic of the requests (each once), or None when not
    known: a listener of another topic is then not called without looking at each request."""

    __slots__ = ("index_entries", "topics")

    def __init__(
        self,
        requests: list[DispatchRequest],
        index_entries: tuple[list[int], list[int]] | None,
        topics: list[str] | None = None,
    ) -> None:
        super().__init__(requests)
        self.index_entries = index_entries
        self.topics = topics


class DispatchBatch(LazyList[DispatchRequest]):
    """The requests of one window, held as columns (:mod:`rocketq.store.record_scan`).

    The ConsumeQueue and index dispatchers read the columns directly (:attr:`columns` and
    friends); anything that uses the batch as a list (arrival listeners, tools) gets real
    :class:`DispatchRequest` objects, built on first element access and kept. ``len`` does not
    build them.
    """

    def __init__(
        self,
        data: bytes,
        buf: npt.NDArray[np.uint8] | None,
        base: int,
        columns: WindowColumns,
        topics: list[str],
        topic_index: npt.NDArray[np.int64],
        tags_code: npt.NDArray[np.int64],
        keys: PropertyColumn,
        uniq: PropertyColumn,
        entries: tuple[I64s, I64s, list[int]] | None = None,
    ) -> None:
        super().__init__()
        self.data = data
        self._buf = buf
        #: (record, hash) of the index entries the compiled scan made, and the records it left
        #: to the scalar hash (None: the bulk hash of :meth:`index_entries` makes them)
        self._entries = entries
        self.columns = columns
        #: distinct topics of the window; ``topics[topic_index[i]]`` is record i's topic
        self.topics = topics
        self.topic_index = topic_index
        self.commit_log_offset = columns.starts + base
        self.tags_code = tags_code
        self.keys = keys
        self.uniq = uniq
        self._count = len(columns)
        self._built = False

    @property
    def buf(self) -> npt.NDArray[np.uint8]:
        """The padded window (:func:`pad`), made on first use."""
        if self._buf is None:
            self._buf = pad(self.data)
        return self._buf

    # -- columns for the dispatchers --------------------------------------------------------
    def index_entries(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(record number, index key hash) of every index entry, in the order the index writes
        them: per record ``topic#UNIQ_KEY`` first, then ``topic#key`` for each key of KEYS.

        ``hash(topic#value) = hash(topic#) * 31**len(value) + hash(value)`` (mod 2**32), so only
        the value bytes are hashed per record, in bulk; values the bulk hash cannot take
        (non-ASCII, long, or KEYS with several keys) are hashed one by one. A batch of the
        compiled scan has its entries already, but for records with non-ASCII text.
        """
        if self._entries is not None:
            return self._compiled_entries(*self._entries)
        buf = self.buf
        prefix = np.array([java_string_hash(f"{t}#") & 0xFFFFFFFF for t in self.topics], dtype=np.uint64)[
            self.topic_index
        ]
        records: list[npt.NDArray[np.int64]] = []
        orders: list[npt.NDArray[np.int64]] = []
        hashes: list[npt.NDArray[np.int64]] = []
        slow: set[int] = set()
        for order, column in enumerate((self.uniq, self.keys)):
            wanted = column.present & (column.length > 0)
            rows = np.flatnonzero(wanted)
            if not len(rows):
                continue
            start = column.start[rows]
            length = column.length[rows]
            # several keys in one KEYS value (a space) are split the scalar way
            value_hash, ok = hash_ranges(buf, start, length, _KEY_SPACE if order else None)
            both = (prefix[rows] * POW31[np.where(ok, length, 0)]).astype(np.uint64)
            full = (both + value_hash.astype(np.uint64)) & np.uint64(0xFFFFFFFF)
            slow.update(rows[~ok].tolist())
            records.append(rows[ok])
            orders.append(np.full(int(ok.sum()), order, dtype=np.int64))
            hashes.append(to_int32(full[ok].astype(np.int64)))
        if slow:
            # scalar entries replace every bulk entry of those records (their order is per record)
            slow_rows = np.array(sorted(slow), dtype=np.int64)
            for i in range(len(records)):
                keep = ~np.isin(records[i], slow_rows)
                records[i], orders[i], hashes[i] = records[i][keep], orders[i][keep], hashes[i][keep]
            r_list: list[int] = []
            o_list: list[int] = []
            h_list: list[int] = []
            for row in slow_rows.tolist():
                for sub, h in enumerate(self._scalar_entries(row)):
                    r_list.append(row)
                    o_list.append(sub)
                    h_list.append(h)
            records.append(np.array(r_list, dtype=np.int64))
            orders.append(np.array(o_list, dtype=np.int64))
            hashes.append(np.array(h_list, dtype=np.int64))
        if not records:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty
        if not slow:
            # at most one entry per column and record: lay them out as (record, column) cells
            cells = np.zeros((self._count, 2), dtype=np.int64)
            filled = np.zeros((self._count, 2), dtype=np.bool_)
            for cell_rows, cell_orders, cell_hashes in zip(records, orders, hashes, strict=True):
                cell = int(cell_orders[0]) if len(cell_orders) else 0
                cells[cell_rows, cell] = cell_hashes
                filled[cell_rows, cell] = True
            at = np.flatnonzero(filled.reshape(-1))
            hash_all = cells.reshape(-1)[at]
            hash_all = np.where(hash_all == -(1 << 31), 0, np.abs(hash_all))
            return at >> 1, hash_all
        rec_all = np.concatenate(records)
        order_all = np.concatenate(orders)
        hash_all = np.concatenate(hashes)
        sort = np.lexsort((order_all, rec_all))
        hash_all = hash_all[sort]
        # IndexFile.indexKeyHashMethod: abs(hashCode), Integer.MIN_VALUE -> 0
        hash_all = np.where(hash_all == -(1 << 31), 0, np.abs(hash_all))
        return rec_all[sort], hash_all

    def _scalar_entries(self, row: int) -> list[int]:
        """The index key hashes of one record, one by one (its order: UNIQ_KEY, then each key)."""
        topic = self.topics[int(self.topic_index[row])]
        uniq = self._value(self.uniq, row)
        keys = self._value(self.keys, row)
        texts = [] if not uniq else [f"{topic}#{uniq}"]
        texts.extend(f"{topic}#{k}" for k in keys.split(KEY_SEPARATOR) if k)
        return [java_string_hash_once(text) for text in texts]

    def _compiled_entries(self, rows: I64s, hashes: I64s, slow: list[int]) -> tuple[I64s, I64s]:
        if not slow:
            return rows, hashes
        r_list: list[int] = []
        h_list: list[int] = []
        for row in slow:
            for h in self._scalar_entries(row):
                r_list.append(row)
                h_list.append(0 if h == -(1 << 31) else abs(h))
        all_rows = np.concatenate((rows, np.array(r_list, dtype=np.int64)))
        all_hashes = np.concatenate((hashes, np.array(h_list, dtype=np.int64)))
        order = np.argsort(all_rows, kind="stable")  # a slow record has no compiled entries
        return all_rows[order], all_hashes[order]

    def _value(self, column: PropertyColumn, row: int) -> str:
        if not column.present[row]:
            return ""
        start = int(column.start[row])
        return self.data[start : start + int(column.length[row])].decode("utf-8", "replace")

    def _requests(self, rows: npt.NDArray[np.int64] | None = None) -> list[DispatchRequest]:
        """Requests for ``rows`` (all when None); columns go through ``tolist`` once each, as
        indexing NumPy arrays one element at a time costs more than building the request."""

        def pick(column: npt.NDArray[np.int64]) -> list[int]:
            return (column if rows is None else column[rows]).tolist()  # type: ignore[no-any-return]

        cols = self.columns
        data = self.data
        names = self.topics
        out: list[DispatchRequest] = []
        append = out.append
        for topic, qid, phys, size, tags, ts, cq, sys_flag, prepared, ps, pe, kp, ks, kl, up, us, ul in zip(
            pick(self.topic_index),
            pick(cols.queue_id),
            pick(self.commit_log_offset),
            pick(cols.size),
            pick(self.tags_code),
            pick(cols.store_ts),
            pick(cols.queue_offset),
            pick(cols.sys_flag),
            pick(cols.prepared),
            pick(cols.props_start),
            pick(cols.props_end),
            pick(self.keys.present),  # type: ignore[arg-type]
            pick(self.keys.start),
            pick(self.keys.length),
            pick(self.uniq.present),  # type: ignore[arg-type]
            pick(self.uniq.start),
            pick(self.uniq.length),
            strict=True,
        ):
            keys = data[ks : ks + kl].decode("utf-8", "replace") if kp else ""
            uniq = data[us : us + ul].decode("utf-8", "replace") if up and ul else None
            req = DispatchRequest(names[topic], qid, phys, size, tags, ts, cq, keys, uniq, sys_flag, prepared)
            req.properties_raw = data[ps:pe]
            append(req)
        return out

    def of_topic(self, topic: str) -> list[DispatchRequest]:
        """The requests of one topic (built for those records only)."""
        if topic not in self.topics:
            return []
        if self._built:
            return [r for r in self if r.topic == topic]
        return self._requests(np.flatnonzero(self.topic_index == self.topics.index(topic)))

    def _items(self) -> list[DispatchRequest]:
        return self._requests()

    def __repr__(self) -> str:
        return f"DispatchBatch({self._count} records, topics={self.topics!r})"


def _columnar(
    data: bytes, base: int, delay_levels: dict[int, int] | None, starts: list[int]
) -> tuple[DispatchBatch | None, int, bool]:
    """The leading fast records of ``starts`` as a batch (None when the first is not fast),
    how many, and whether the record after them is CORRUPT."""
    buf = pad(data)
    n = len(data)
    cols, k, corrupt = scan(buf, n, starts)
    if k == 0:
        return None, 0, corrupt
    # topics: one name for the whole window is the common case, checked in bulk
    tl = cols.topic_len
    ts0 = int(cols.topic_start[0])
    first = data[ts0 : ts0 + int(tl[0])]
    same = bool((tl == tl[0]).all())
    if same:
        names = rows(buf, len(first))[cols.topic_start]
        same = bool((names == np.frombuffer(first, dtype=np.uint8)).all())
    if same:
        topics = [_topic_of(first)]
        topic_index = np.zeros(k, dtype=np.int64)
    else:
        ids: dict[str, int] = {}
        topic_ids: list[int] = []
        for a, length in zip(cols.topic_start.tolist(), tl.tolist(), strict=True):
            name = _topic_of(data[a : a + length])
            topic_ids.append(ids.setdefault(name, len(ids)))
        topics = list(ids)
        topic_index = np.array(topic_ids, dtype=np.int64)
    tags_col, keys_col, uniq_col = find_properties(buf, n, cols, _NAMES)
    tags_code = np.zeros(k, dtype=np.int64)
    has_tags = tags_col.present & (tags_col.length > 0)
    schedule = -1
    if delay_levels is not None and SCHEDULE_TOPIC in topics:
        schedule = topics.index(SCHEDULE_TOPIC)
        has_tags &= topic_index != schedule
    tagged = np.flatnonzero(has_tags)
    if len(tagged):
        hashes, ok = hash_ranges(buf, tags_col.start[tagged], tags_col.length[tagged])
        tags_code[tagged[ok]] = to_int32(hashes[ok])
        for row in tagged[~ok].tolist():
            a = int(tags_col.start[row])
            tags_code[row] = _tags_code_of(data[a : a + int(tags_col.length[row])])
    if schedule >= 0:
        assert delay_levels is not None
        for row in np.flatnonzero(topic_index == schedule).tolist():
            props = data[int(cols.props_start[row]) : int(cols.props_end[row])]
            level = _prop(props, b"DELAY\x01")
            if level is not None and level.isdigit() and int(level) > 0:
                tags_code[row] = compute_deliver_timestamp(delay_levels, int(level), int(cols.store_ts[row]))
    batch = DispatchBatch(data, buf, base, cols, topics, topic_index, tags_code, keys_col, uniq_col)
    return batch, k, corrupt


#: The compiled scan (``rocketq._speedups.scan_window``: the walk, :func:`check_v1`, the columns,
#: tags codes and index key hashes of a window in one C pass), or None on the pure path. Tests
#: set it to None to run the pure path beside the compiled one.
_scan_window: Callable[..., Any] | None = getattr(_speedups.COMPILED, "scan_window", None)
if _scan_window is not None:
    _speedups.COMPILED.setup_dispatch(DispatchRequest)  # type: ignore[union-attr]

#: With the compiled scan, windows of V1/IPv4 records only are taken in columns from this many
#: records on (the scan itself has no fixed cost to speak of; the ConsumeQueue and index writers'
#: columnar paths do: ``python bench/dispatch_windows.py``); smaller ones come back as request
#: objects made in C. Measured with the ConsumeQueue's and the index's compiled loops (two runs of
#: the median of 3 rounds, µs per record, objects / columns): 128 records 0.89 / 1.69 and
#: 0.90 / 1.79, 256 records 0.82 / 1.14 and 0.74 / 1.00, 512 records 0.95 / 0.75 and 0.85 / 0.78.
#: With the dispatchers' loops over objects compiled too (``cq_group_requests``, ``cq_put_run``,
#: ``index_entries_of``, ``index_put_file``; medians of 7 rounds, two runs): 512 records
#: 0.43 / 0.48 and 0.44 / 0.50, 768 records 0.47 / 0.51 and 0.42 / 0.50, 1024 records 0.45 / 0.41
#: and 0.42 / 0.42; it was 384.
MIN_COMPILED_COLUMNAR_RECORDS = 768

# The rows of scan_window's column block, in its order (SC_ in _speedups.c).
(_C_START, _C_SIZE, _C_QUEUE_ID, _C_QUEUE_OFFSET, _C_SYS_FLAG, _C_STORE_TS, _C_PREPARED, _C_TOPIC_START,
 _C_TOPIC_LEN, _C_PROPS_START, _C_PROPS_END, _C_TOPIC_INDEX, _C_TAGS_CODE, _C_KEYS_PRESENT, _C_KEYS_START,
 _C_KEYS_LEN, _C_UNIQ_PRESENT, _C_UNIQ_START, _C_UNIQ_LEN, _C_COUNT) = range(20)  # fmt: skip
_STOPS: Final = (None, rec.RecordKind.BLANK, rec.RecordKind.END, rec.RecordKind.CORRUPT)


def _compiled_batch(
    data: bytes, base: int, delay_levels: dict[int, int] | None, scanned: tuple[Any, ...]
) -> DispatchBatch:
    """The :class:`DispatchBatch` of the first ``count`` records of a compiled scan: what
    :func:`_columnar` makes of them, field for field."""
    block, k, nstarts, _, _, _, spans, entries, slow, _ = scanned
    c = np.frombuffer(block, dtype=np.int64).reshape(_C_COUNT, nstarts)[:, :k]
    cols = WindowColumns(
        starts=c[_C_START],
        size=c[_C_SIZE],
        queue_id=c[_C_QUEUE_ID],
        queue_offset=c[_C_QUEUE_OFFSET],
        sys_flag=c[_C_SYS_FLAG],
        store_ts=c[_C_STORE_TS],
        prepared=c[_C_PREPARED],
        topic_start=c[_C_TOPIC_START],
        topic_len=c[_C_TOPIC_LEN],
        props_start=c[_C_PROPS_START],
        props_end=c[_C_PROPS_END],
    )
    topics = [_topic_of(data[a : a + length]) for a, length in spans]
    topic_index = c[_C_TOPIC_INDEX]
    if len(set(topics)) < len(topics):  # byte strings that decode alike are one topic
        ids: dict[str, int] = {}
        remap = np.array([ids.setdefault(t, len(ids)) for t in topics], dtype=np.int64)
        topics = list(ids)
        topic_index = remap[topic_index]
    keys = PropertyColumn(c[_C_KEYS_PRESENT] != 0, c[_C_KEYS_START], c[_C_KEYS_LEN])
    uniq = PropertyColumn(c[_C_UNIQ_PRESENT] != 0, c[_C_UNIQ_START], c[_C_UNIQ_LEN])
    tags_code = c[_C_TAGS_CODE]
    for row in slow:  # non-ASCII text somewhere: the tags code the Java way
        raw = _prop(data[int(cols.props_start[row]) : int(cols.props_end[row])], _TAGS)
        tags_code[row] = _tags_code_of(raw) if raw else 0
    if delay_levels is not None and SCHEDULE_TOPIC in topics:
        schedule = topics.index(SCHEDULE_TOPIC)
        for row in np.flatnonzero(topic_index == schedule).tolist():
            tags_code[row] = 0
            props = data[int(cols.props_start[row]) : int(cols.props_end[row])]
            level = _prop(props, b"DELAY\x01")
            if level is not None and level.isdigit() and int(level) > 0:
                tags_code[row] = compute_deliver_timestamp(delay_levels, int(level), int(cols.store_ts[row]))
    pairs = np.frombuffer(entries, dtype=np.int64).reshape(-1, 2)
    return DispatchBatch(
        data, None, base, cols, topics, topic_index, tags_code, keys, uniq, (pairs[:, 0], pairs[:, 1], slow)
    )


def _fix_tags(reqs: list[DispatchRequest], slow: list[int], delay_levels: dict[int, int] | None) -> None:
    """The tags codes the compiled scan leaves to Python: non-ASCII tags (Java's hash of the
    decoded text) and the delivery times of SCHEDULE_TOPIC_XXXX records (``delay_levels``)."""
    for row in slow:
        r = reqs[row]
        raw = _prop(r.properties_raw, _TAGS)
        r.tags_code = _tags_code_of(raw) if raw else 0
    if delay_levels is not None:
        for r in reqs:
            if r.topic == SCHEDULE_TOPIC:
                r.tags_code = 0
                level = _prop(r.properties_raw, b"DELAY\x01")
                if level is not None and level.isdigit() and int(level) > 0:
                    r.tags_code = compute_deliver_timestamp(delay_levels, int(level), r.store_timestamp)


def parse_window(
    data: bytes, base: int, delay_levels: dict[int, int] | None = None
) -> tuple[list[DispatchRequest], int, rec.RecordKind | None]:
    """Parse consecutive MESSAGE records at the start of ``data`` (which begins at CommitLog
    offset ``base``) into dispatch requests.

    Returns (requests, bytes consumed, what stopped the parse: BLANK, END, CORRUPT, or None
    when the window ended, possibly inside a record, or when records of another layout follow:
    call again from there). One :func:`walk` finds the records; a window of V1/IPv4 records
    comes back as a :class:`DispatchBatch` (columns), other layouts and small windows are
    parsed record by record. The compiled scan, when built, gives the same answer in one C pass
    (windows it does not take whole go the pure way).
    """
    scan_c = _scan_window
    if scan_c is not None:
        scanned = scan_c(data, base, MIN_COMPILED_COLUMNAR_RECORDS)
        if scanned is not None:
            parsed = compiled_requests(data, base, delay_levels, scanned)
            if parsed is not None:
                return parsed
    return _parse_window_pure(data, base, delay_levels)


def compiled_requests(
    data: bytes, base: int, delay_levels: dict[int, int] | None, scanned: tuple[Any, ...]
) -> tuple[list[DispatchRequest], int, rec.RecordKind | None] | None:
    """:func:`parse_window`'s answer from a compiled scan of ``data`` (``scan_window``), or None
    when the pure path is to take the window (a few good records before another layout)."""
    objects = scanned[9]
    if objects is not None:  # a small window of good records, as objects
        reqs, names = objects
        slow = scanned[8]
        if slow or (delay_levels is not None and SCHEDULE_TOPIC in names):
            _fix_tags(reqs, slow, delay_levels)
        entries = None
        if not slow:
            flat = memoryview(scanned[7]).cast("q").tolist()
            entries = flat[0::2], flat[1::2]
        stop_at = scanned[3]
        return RequestList(reqs, entries, names), stop_at, _zero_tail(data, stop_at, _STOPS[scanned[4]])
    k = scanned[1]
    nstarts = scanned[2]
    if k and (nstarts >= MIN_COLUMNAR_RECORDS or (k == nstarts and nstarts >= MIN_COMPILED_COLUMNAR_RECORDS)):
        batch = _compiled_batch(data, base, delay_levels, scanned)
        if k < nstarts:
            cols = batch.columns
            at = int(cols.starts[k - 1]) + int(cols.size[k - 1])
            return batch, at, rec.RecordKind.CORRUPT if scanned[5] else None
        stop_at = scanned[3]
        return batch, stop_at, _zero_tail(data, stop_at, _STOPS[scanned[4]])
    return None


def _parse_window_pure(
    data: bytes, base: int, delay_levels: dict[int, int] | None = None
) -> tuple[list[DispatchRequest], int, rec.RecordKind | None]:
    """:func:`parse_window` in pure Python (the reference)."""
    starts, stop_at, stop = walk(data)
    return requests_at_starts(data, base, delay_levels, starts, stop_at, stop)


def requests_at_starts(
    data: bytes,
    base: int,
    delay_levels: dict[int, int] | None,
    starts: list[int],
    stop_at: int,
    stop: rec.RecordKind | None,
) -> tuple[list[DispatchRequest], int, rec.RecordKind | None]:
    """The pure :func:`parse_window` of the records at ``starts`` of ``data``, found by a walk
    that stopped at ``stop_at`` for ``stop``: in columns when there are enough, else one by one."""
    if len(starts) >= MIN_COLUMNAR_RECORDS:
        batch, k, corrupt = _columnar(data, base, delay_levels, starts)
        if batch is not None:
            if k < len(starts):
                # a V1/IPv4 record that does not add up, or another layout: record by record
                return batch, starts[k], rec.RecordKind.CORRUPT if corrupt else None
            return batch, stop_at, _zero_tail(data, stop_at, stop)
    out, bad_at = _requests_at(data, base, delay_levels, starts)
    if bad_at is not None:
        return out, bad_at, rec.RecordKind.CORRUPT
    return out, stop_at, _zero_tail(data, stop_at, stop)


__all__ = [
    "INV_POW31",
    "MAX_PROPS_BYTES",
    "MAX_VECTOR_KEY_BYTES",
    "MIN_COLUMNAR_RECORDS",
    "PAD_BYTES",
    "POW31",
    "QUARANTINE_TOPIC",
    "SCHEDULE_TOPIC",
    "DispatchBatch",
    "DispatchRequest",
    "PropertyColumn",
    "QueueNext",
    "RequestList",
    "SegmentView",
    "V1Shape",
    "WindowColumns",
    "build_dispatch_request",
    "check_v1",
    "compiled_requests",
    "compute_deliver_timestamp",
    "find_properties",
    "hash_ranges",
    "iter_records",
    "note_queue_offsets",
    "pad",
    "parse_window",
    "requests_at_starts",
    "rows",
    "scan",
    "segment_finder",
    "to_int32",
    "valid_prefix",
    "walk",
]
