"""Columnar scan of a window of CommitLog records: what dispatch needs, as NumPy arrays.

The dispatcher reads the CommitLog a window (about 1 MiB) at a time. Decoding every record into
Python objects costs several microseconds per record, more than writing it did; this module does
the per-record work in bulk instead:

1. **walk** the TOTALSIZE chain in Python (one cached ``unpack_from`` per record, the only
   per-record Python step) and collect the record starts;
2. **gather** the fixed-position header fields of every record at once, then the variable
   positions (topic length at ``88 + bodyLen``, properties length after the topic). Gathers are
   *row* gathers: the window, padded with :data:`PAD_BYTES` zeros, is viewed (``as_strided``)
   as one overlapping row of ``w`` bytes per byte offset, and ``rows[starts]`` copies whole rows,
   about ten times faster than indexing every byte; the 88-byte header rows are then read
   through a big-endian structured dtype;
3. **classify**: a record is *fast* when it is V1 with IPv4 hosts (sysflag bits 0x30 clear),
   ``91 <= size``, and its body, topic and properties exactly fill its TOTALSIZE; the first record
   that is not fast ends the columnar prefix (the caller parses the rest record by record);
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

Invariants: nothing here reads outside the padded window (row starts are clipped into the
window, and a clipped value can only belong to a record that is not fast); bytes past a record's
end are never taken as its data (masks by length); the arrays describe records in CommitLog order.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import as_strided

from rocketq.protocol import record as rec

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
_SIZE = struct.Struct(">i")
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


def walk(data: bytes | memoryview, start: int = 0) -> tuple[list[int], int]:
    """Record starts from ``start`` along the TOTALSIZE chain, and where the walk stopped.

    The walk stops at a size below 8 (END or damage) or a record that runs past the window;
    what is at the stop position is for the caller to classify. Blanks are walked over like
    records (they are not fast, so they end the columnar prefix).
    """
    starts: list[int] = []
    append = starts.append
    size_at = _SIZE.unpack_from
    n = len(data)
    p = start
    while p + 8 <= n:
        size = size_at(data, p)[0]
        if size < 8 or p + size > n:
            break
        append(p)
        p += size
    return starts, p


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


def scan(buf: npt.NDArray[np.uint8], n: int, starts: list[int]) -> tuple[WindowColumns, int, bool]:
    """Columns of the leading fast records among ``starts``.

    ``buf`` is the padded window (:func:`pad`) of ``n`` bytes. Returns (columns, number of fast
    records, whether the record after them is a V1/IPv4 record whose layout does not add up,
    i.e. CORRUPT).
    """
    s = np.asarray(starts, dtype=np.int64)
    head = rows(buf, V1_HEAD_BYTES)[s].view(_HEAD_DTYPE).reshape(-1)
    size = head["size"].astype(np.int64)
    sys_flag = head["sys_flag"].astype(np.int64)
    body_len = head["body_len"].astype(np.int64)
    # the scalar parser's test: V1 magic, IPv4 hosts, 91 <= size (the walk kept size in the window)
    fast = (head["magic"] == rec.MESSAGE_MAGIC_CODE) & ((sys_flag & 0x30) == 0) & (size >= V1_MIN_SIZE)
    end = s + size
    tpos = s + V1_HEAD_BYTES + body_len
    shape_ok = (body_len >= 0) & (tpos + 3 <= end)
    tl = buf[np.clip(tpos, 0, n - 1)].astype(np.int64)
    topic_start = tpos + 1
    plpos = np.clip(topic_start + tl, 0, n - 1)
    pl = (buf[plpos].astype(np.int64) << 8) | buf[plpos + 1]
    props_start = topic_start + tl + 2
    # a length field cut by the record end reads as -1 (the scalar parser's rule, kept as it is)
    pl = np.where(props_start <= end, pl, -1)
    shape_ok &= (tl > 0) & (tl <= 127) & (props_start + pl == end)
    good = fast & shape_ok
    bad = np.flatnonzero(~good)
    k = int(bad[0]) if bad.size else len(s)
    corrupt = bool(bad.size) and bool(fast[k])
    cols = WindowColumns(
        starts=s[:k],
        size=size[:k],
        queue_id=head["queue_id"][:k].astype(np.int64),
        queue_offset=head["queue_offset"][:k].astype(np.int64),
        sys_flag=sys_flag[:k],
        store_ts=head["store_ts"][:k].astype(np.int64),
        prepared=head["prepared"][:k].astype(np.int64),
        topic_start=topic_start[:k],
        topic_len=tl[:k],
        props_start=props_start[:k],
        props_end=end[:k],
    )
    return cols, k, corrupt


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


__all__ = [
    "INV_POW31",
    "MAX_VECTOR_KEY_BYTES",
    "PAD_BYTES",
    "POW31",
    "PropertyColumn",
    "WindowColumns",
    "find_properties",
    "hash_ranges",
    "pad",
    "rows",
    "scan",
    "to_int32",
    "walk",
]
