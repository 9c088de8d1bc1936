"""Segment scans of a stopped store: task planning and column-oriented record parsing.

Pure Python, NumPy and PyArrow; nothing here needs Spark, so the same code serves the Spark jobs
(one call per task, in the executors), the single-process baseline of the benchmark and the unit
tests.

Planning. A task is a byte range ``[begin, end)`` of one CommitLog segment (the file
``commitlog/<20-digit start offset>``, spec/store-format.md §0)::

    segment  0 ────────────────────────────────────── file size
    task     [0, b1)        [b1, b2)        [b2, file size)
             b1, b2: record starts proven by a hop pass (TOTALSIZE to TOTALSIZE from 0)

Records cannot be found again in the middle of a segment (a body may contain anything that looks
like a header), so a segment is split only at offsets reached by hopping from its start, reading
the 8 bytes of TOTALSIZE and MAGICCODE of each record. The hop pass runs in the driver and touches
every page of the segment once; it is done only for segments above ``split_bytes``. Where the
hops stop (BLANK, zeros, damage) no boundary can be proven, and the rest of the segment stays in
the last task.

Parsing a task (:func:`iter_chunks`, :func:`decode_chunk`): the task is read in windows of about
``chunk_bytes``. A sequential walk over each window collects the record starts (one
``unpack_from`` per record) and stops at a BLANK marker, at zeros, at an illegal magic, a size
out of range or a record cut short by the range. Everything else is column-wise: the fixed
fields of the common layout (V1 magic, IPv4 hosts) are gathered with NumPy for all records at
once, structure is checked vectorised (``TOTALSIZE == calMsgLength`` and ``PHYSICALOFFSET`` equal
to the record's own offset), and the variable fields (topic, body, properties) become Arrow
binary arrays. Other layouts (V2 topic length, IPv6 hosts) go through the store's
:func:`rocketq.protocol.record.decode_record`, one record at a time, and join the same columns.

Damage (:class:`Damage`): a record whose body CRC or physical offset is wrong still has a
trustworthy size, so the walk goes on after it; a record with a wrong structure, an illegal
magic, a size out of range or cut short ends the walk: nothing after that offset in the segment
can be located reliably (``valid_end``). Zeros are the normal end of data, but non-zero bytes
after them mean records were lost (e.g. a zeroed header), and are reported too.
"""

from __future__ import annotations

import mmap
import os
import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from rocketq.errors import StoreError
from rocketq.message import create_offset_msg_id, unpack_socket_addr
from rocketq.protocol import record as rec
from rocketq.spark.arrow import COLUMNS
from rocketq.store import record_scan
from rocketq.store.record_scan import QUARANTINE_TOPIC

#: Column names of the export (and of every Arrow batch :func:`decode_chunk` returns).
EXPORT_COLUMNS: Final = COLUMNS

_TS = pa.timestamp("us", tz="UTC")
EXPORT_SCHEMA: Final = pa.schema(
    [
        ("topic", pa.string()),
        ("brokerName", pa.string()),
        ("queueId", pa.int32()),
        ("queueOffset", pa.int64()),
        ("msgId", pa.string()),
        ("keys", pa.string()),
        ("tags", pa.string()),
        ("body", pa.binary()),
        ("properties", pa.map_(pa.string(), pa.string())),
        ("bornTimestamp", _TS),
        ("storeTimestamp", _TS),
        ("bornHost", pa.string()),
        ("storeHost", pa.string()),
        ("reconsumeTimes", pa.int32()),
    ]
)

#: :data:`EXPORT_SCHEMA` as a Spark DDL string.
EXPORT_DDL: Final = (
    "topic string, brokerName string, queueId int, queueOffset bigint, msgId string, keys string, "
    "tags string, body binary, properties map<string,string>, bornTimestamp timestamp, "
    "storeTimestamp timestamp, bornHost string, storeHost string, reconsumeTimes int"
)

#: Columns of :class:`RecordColumns` with a fixed width, and their NumPy types.
_FIXED = (
    ("offset", np.int64),
    ("size", np.int32),
    ("body_crc", np.int32),
    ("queue_id", np.int32),
    ("flag", np.int32),
    ("queue_offset", np.int64),
    ("physical_offset", np.int64),
    ("sys_flag", np.int32),
    ("born_timestamp", np.int64),
    ("store_timestamp", np.int64),
    ("reconsume_times", np.int32),
    ("prepared_offset", np.int64),
)

DEFAULT_CHUNK_BYTES: Final = 8 << 20
_SEGMENT_NAME_DIGITS: Final = 20
_HEAD = struct.Struct(">ii")
_V1 = rec.MESSAGE_MAGIC_CODE
_V2 = rec.MESSAGE_MAGIC_CODE_V2
_BLANK = rec.BLANK_MAGIC_CODE
_HOST_V6 = rec.BORNHOST_V6_FLAG | rec.STOREHOSTADDRESS_V6_FLAG
_MIN_RECORD = 91  # V1, IPv4 hosts, empty body, properties and a 0-byte topic
_HEX = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)


# -- segments and tasks ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Segment:
    """One CommitLog file: its path, the CommitLog offset it starts at and its length."""

    path: str
    start_offset: int
    size_bytes: int


@dataclass(frozen=True, slots=True)
class ScanTask:
    """Bytes ``[begin, end)`` of one segment (positions within the file); ``begin`` is a record
    start. ``to_segment_end`` tells whether the range reaches the end of the file, where the
    scan must meet a BLANK marker, zeros or the exact end of the file."""

    index: int
    path: str
    segment_offset: int
    begin: int
    end: int
    to_segment_end: bool

    @property
    def size_bytes(self) -> int:
        return self.end - self.begin

    @property
    def segment_name(self) -> str:
        return os.path.basename(self.path)

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "path": self.path,
            "segment_offset": self.segment_offset,
            "begin": self.begin,
            "end": self.end,
            "to_segment_end": self.to_segment_end,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> ScanTask:
        return cls(
            int(obj["index"]),
            str(obj["path"]),
            int(obj["segment_offset"]),
            int(obj["begin"]),
            int(obj["end"]),
            bool(obj["to_segment_end"]),
        )


def commitlog_dir(store_dir: str) -> str:
    """The CommitLog directory of a store root, or ``store_dir`` itself when it holds segments."""
    candidate = os.path.join(store_dir, "commitlog")
    return candidate if os.path.isdir(candidate) else store_dir


def list_segments(store_dir: str) -> list[Segment]:
    """The CommitLog segments of a store (root or ``commitlog/`` directory), oldest first.

    Only files named by 20 decimal digits count (RocketMQ's ``offset2FileName``); raises
    :class:`StoreError` when there are none.
    """
    directory = commitlog_dir(store_dir)
    if not os.path.isdir(directory):
        raise StoreError(f"store directory {store_dir} does not exist")
    segments = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if len(name) == _SEGMENT_NAME_DIGITS and name.isdigit() and os.path.isfile(path):
            segments.append(Segment(path, int(name), os.path.getsize(path)))
    if not segments:
        raise StoreError(f"no CommitLog segments (files named by 20 digits) in {directory}")
    return segments


def hop_boundaries(path: str, targets: Sequence[int], *, limit: int | None = None) -> list[int]:
    """Record starts in ``path`` reached by hopping TOTALSIZE by TOTALSIZE from position 0: for
    each target (ascending), the first record start at or after it. Targets past the point where
    the hops stop (BLANK, zeros, damage) get no boundary, so the result may be shorter."""
    out: list[int] = []
    if not targets:
        return out
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size if limit is None else limit
        if size < 8:
            return out
        with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as mm:
            unpack = _HEAD.unpack_from
            p = 0
            t = 0
            target = targets[0]
            while p + 8 <= size:
                total, magic = unpack(mm, p)
                if magic not in (_V1, _V2) or total < _MIN_RECORD or p + total > size:
                    break
                if p >= target:
                    out.append(p)
                    t += 1
                    if t == len(targets):
                        break
                    target = targets[t]
                p += total
    return out


def plan_tasks(segments: Sequence[Segment], *, split_bytes: int | None = None) -> list[ScanTask]:
    """One task per segment; a segment larger than ``split_bytes`` is cut at record starts found
    by :func:`hop_boundaries` into ranges of about ``split_bytes``."""
    if split_bytes is not None and split_bytes < 4096:
        raise ValueError(f"split_bytes={split_bytes} B is below 4096 B")
    tasks: list[ScanTask] = []
    for seg in segments:
        cuts: list[int] = []
        if split_bytes is not None and seg.size_bytes > split_bytes:
            targets = list(range(split_bytes, seg.size_bytes, split_bytes))
            cuts = [c for c in hop_boundaries(seg.path, targets, limit=seg.size_bytes) if c > 0]
            cuts = sorted(set(cuts))
        edges = [0, *cuts, seg.size_bytes]
        for i in range(len(edges) - 1):
            tasks.append(
                ScanTask(len(tasks), seg.path, seg.start_offset, edges[i], edges[i + 1], i == len(edges) - 2)
            )
    return tasks


# -- the walk ---------------------------------------------------------------------------------------
class StopKind(StrEnum):
    """Why the walk of a task ended."""

    BLANK = "blank"  # an end-of-segment marker
    END = "end"  # zeros: the end of the data
    FULL = "full"  # records up to the exact end of the file
    RANGE = "range"  # the end of a task that stops before the end of its segment
    DAMAGED = "damaged"  # a record that cannot be located or trusted


@dataclass(frozen=True, slots=True)
class Damage:
    """A damaged place: CommitLog offset, position in its segment file, and why."""

    offset: int
    segment: str
    position: int
    reason: str
    #: Whether the walk could go on after it (the record's size is trustworthy).
    recoverable: bool


@dataclass(slots=True)
class Chunk:
    """One window of a task: its bytes, where they start, and the record starts in it."""

    data: bytes
    base_offset: int  # CommitLog offset of data[0]
    position: int  # position of data[0] in the segment file
    starts: npt.NDArray[np.int64]  # record starts, relative to data


@dataclass(slots=True)
class WalkResult:
    """How the walk of a task ended; filled in while :func:`iter_chunks` runs."""

    stop: StopKind = StopKind.RANGE
    #: CommitLog offset where valid data ends (after the last record that could be trusted).
    valid_end: int = 0
    #: CommitLog offset of the stop (BLANK marker, first zero byte, damaged record).
    stop_offset: int = 0
    damage: list[Damage] = field(default_factory=list)
    blank_offset: int | None = None


def _first_nonzero(mm: mmap.mmap, start: int, end: int) -> int | None:
    """Position of the first non-zero byte in ``mm[start:end]``, or None."""
    step = 1 << 22
    p = start
    while p < end:
        q = min(end, p + step)
        window = np.frombuffer(mm[p:q], dtype=np.uint8)
        nz = np.flatnonzero(window)
        if nz.size:
            return p + int(nz[0])
        p = q
    return None


def iter_chunks(
    task: ScanTask, result: WalkResult, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> Iterator[Chunk]:
    """Walk the records of ``task`` window by window (see the module docstring).

    Chunks hold only records whose magic and size are plausible; their structure and CRCs are
    checked by :func:`decode_chunk`. How the walk ended goes into ``result``.
    """
    seg_name = task.segment_name
    base = task.segment_offset
    with open(task.path, "rb") as f:
        file_size = os.fstat(f.fileno()).st_size
        end = min(task.end, file_size)
        if end <= task.begin:
            result.valid_end = result.stop_offset = base + task.begin
            result.stop = StopKind.FULL if task.to_segment_end else StopKind.RANGE
            return
        with mmap.mmap(f.fileno(), file_size, access=mmap.ACCESS_READ) as mm:
            unpack = _HEAD.unpack_from
            p = task.begin
            while True:
                w_end = min(end, p + chunk_bytes)
                data = mm[p:w_end]
                n = len(data)
                starts, q, kind = record_scan.walk(data)
                stop: StopKind | None = None
                reason = ""
                if kind is rec.RecordKind.BLANK:
                    stop = StopKind.BLANK
                elif kind is rec.RecordKind.END:
                    stop = StopKind.END
                elif kind is rec.RecordKind.CORRUPT:
                    total, magic = unpack(data, q)
                    stop = StopKind.DAMAGED
                    if magic in (_V1, _V2):
                        reason = f"record size {total} is below the minimum"
                    else:
                        reason = f"illegal magic code 0x{magic & 0xFFFFFFFF:08X} (size field {total})"
                elif q + 8 <= n:
                    # a record that runs past the window: damage if it runs past the range
                    total = unpack(data, q)[0]
                    if p + q + total > end:
                        if end == file_size:
                            reason = f"record size {total} runs past the end of the segment"
                        else:
                            reason = f"record size {total} runs past the end of the task range"
                        stop = StopKind.DAMAGED
                if stop is None and q + 8 > n and w_end == end:
                    # fewer than 8 bytes left in the range
                    if q == n:
                        stop = StopKind.FULL if task.to_segment_end else StopKind.RANGE
                    elif not any(data[q:n]):
                        stop = StopKind.END
                    else:
                        stop = StopKind.DAMAGED
                        reason = f"{n - q} bytes at the end of the segment are too short for a record"
                if starts or q:
                    yield Chunk(data[:q], base + p, p, np.asarray(starts, dtype=np.int64))
                pos = p + q
                if stop is not None:
                    result.stop = stop
                    result.stop_offset = base + pos
                    result.valid_end = base + pos
                    if stop is StopKind.BLANK:
                        result.blank_offset = base + pos
                    elif stop is StopKind.DAMAGED:
                        result.damage.append(Damage(base + pos, seg_name, pos, reason, False))
                    elif stop is StopKind.END:
                        # Records after the zeros are lost: the damage is where valid data ends,
                        # as recovery ends there too.
                        nz = _first_nonzero(mm, pos, end)
                        if nz is not None:
                            result.damage.append(
                                Damage(
                                    base + pos,
                                    seg_name,
                                    pos,
                                    f"non-zero bytes at position {nz} after the end of data at {pos}",
                                    False,
                                )
                            )
                    return
                if q == 0:
                    # one record larger than the window: read it whole
                    (total,) = struct.unpack_from(">i", data, 0)
                    chunk_bytes = max(chunk_bytes, total)
                    continue
                p = pos


# -- column-wise decoding ---------------------------------------------------------------------------
@dataclass(slots=True)
class RecordColumns:
    """The records of one chunk, column by column (NumPy for fixed fields, Arrow for the rest).

    Only records that passed the structure checks are here; their order is CommitLog order.
    """

    offset: npt.NDArray[np.int64]
    size: npt.NDArray[np.int32]
    body_crc: npt.NDArray[np.int32]
    queue_id: npt.NDArray[np.int32]
    flag: npt.NDArray[np.int32]
    queue_offset: npt.NDArray[np.int64]
    physical_offset: npt.NDArray[np.int64]
    sys_flag: npt.NDArray[np.int32]
    born_timestamp: npt.NDArray[np.int64]
    store_timestamp: npt.NDArray[np.int64]
    reconsume_times: npt.NDArray[np.int32]
    prepared_offset: npt.NDArray[np.int64]
    #: IPv4 born/store hosts (address ‖ port) as big-endian 64-bit values; rows whose host is
    #: IPv6 (20 bytes) are in ``born_wide``/``store_wide`` instead, by row index.
    born_host: npt.NDArray[np.uint64]
    store_host: npt.NDArray[np.uint64]
    born_wide: dict[int, bytes]
    store_wide: dict[int, bytes]
    topic_raw: pa.Array  # binary
    body_start: npt.NDArray[np.int64]  # relative to the chunk's data
    body_length: npt.NDArray[np.int64]
    props_raw: pa.Array  # binary
    data: bytes

    def __len__(self) -> int:
        return len(self.offset)

    def take(self, rows: npt.NDArray[np.int64]) -> RecordColumns:
        """The subset of rows ``rows`` (ascending indices)."""
        idx = pa.array(rows, type=pa.int64())
        kwargs: dict[str, Any] = {name: getattr(self, name)[rows] for name, _ in _FIXED}
        return RecordColumns(
            **kwargs,
            born_host=self.born_host[rows],
            store_host=self.store_host[rows],
            born_wide=_remap(self.born_wide, rows),
            store_wide=_remap(self.store_wide, rows),
            topic_raw=self.topic_raw.take(idx),
            body_start=self.body_start[rows],
            body_length=self.body_length[rows],
            props_raw=self.props_raw.take(idx),
            data=self.data,
        )

    # -- derived columns -------------------------------------------------------------------------
    def topics(self) -> pa.Array:
        """Topic names as strings (invalid UTF-8 replaced, as Java's decoder does)."""
        return _to_string(self.topic_raw)

    def bodies(self) -> pa.Array:
        return _binary_slices(self.data, self.body_start, self.body_length)

    def properties(self) -> pa.MapArray:
        return properties_map(_to_string(self.props_raw))

    def crc_mismatches(self) -> npt.NDArray[np.int64]:
        """Row indices whose body CRC does not match the stored BODYCRC."""
        view = memoryview(self.data)
        crc32 = zlib.crc32
        bad = [
            i
            for i, (s, n, c) in enumerate(
                zip(self.body_start.tolist(), self.body_length.tolist(), self.body_crc.tolist(), strict=True)
            )
            if crc32(view[s : s + n]) & 0x7FFFFFFF != c
        ]
        return np.asarray(bad, dtype=np.int64)


def _gather_be(arr: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64], width: int) -> npt.NDArray[Any]:
    """Big-endian signed integers of ``width`` bytes at ``starts`` (vectorised)."""
    idx = starts[:, None] + np.arange(width, dtype=np.int64)
    raw = np.ascontiguousarray(arr[idx])
    return raw.view(f">i{width}").reshape(-1).astype(f"=i{width}")


def _gather_u64(arr: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64]) -> npt.NDArray[np.uint64]:
    """Big-endian unsigned 64-bit values at ``starts`` (vectorised)."""
    idx = starts[:, None] + np.arange(8, dtype=np.int64)
    return np.ascontiguousarray(arr[idx]).view(">u8").reshape(-1).astype(np.uint64)


#: Fields shorter than this on average are gathered with NumPy, longer ones sliced and joined.
_GATHER_MAX_AVG = 512


def _binary_slices(data: bytes, starts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64]) -> pa.Array:
    """``data[s:s+n]`` for every (s, n) as one Arrow binary array."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    if len(lengths) and total <= _GATHER_MAX_AVG * len(lengths):
        idx = np.repeat(starts - offsets[:-1], lengths) + np.arange(total, dtype=np.int64)
        values = np.frombuffer(data, dtype=np.uint8)[idx].tobytes()
    else:
        view = memoryview(data)
        values = b"".join([view[s : s + n] for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)])
    return pa.Array.from_buffers(
        pa.binary(), len(lengths), [None, pa.py_buffer(offsets), pa.py_buffer(values)]
    )


def _to_string(arr: pa.Array) -> pa.Array:
    """Binary → string; invalid UTF-8 is replaced with U+FFFD (Java ``new String(bytes, UTF_8)``)."""
    try:
        return arr.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array(
            [None if v is None else v.decode("utf-8", "replace") for v in arr.to_pylist()], type=pa.string()
        )


def properties_map(props: pa.Array) -> pa.MapArray:
    """Properties strings → ``map<string, string>``, by RocketMQ's parser rules (split on
    ``\\x02``, then at the first ``\\x01``; pairs with an empty name or value are dropped; a
    missing trailing ``\\x02`` is fine). A name given twice keeps its last value, as RocketMQ's
    ``HashMap`` does."""
    n = len(props)
    pieces = pc.split_pattern(props, "\x02")
    flat = pieces.flatten()
    parent = np.asarray(pc.list_parent_indices(pieces), dtype=np.int64)
    kv = pc.split_pattern(flat, "\x01", max_splits=1)
    has_pair = np.asarray(pc.equal(pc.list_value_length(kv), 2).fill_null(False))
    keys = pc.list_element(kv.filter(pa.array(has_pair)), 0)
    values = pc.list_element(kv.filter(pa.array(has_pair)), 1)
    parent = parent[has_pair]
    ok = np.asarray(pc.and_(pc.greater(pc.utf8_length(keys), 0), pc.greater(pc.utf8_length(values), 0)))
    keys = keys.filter(pa.array(ok))
    values = values.filter(pa.array(ok))
    parent = parent[ok]
    if len(parent) > 1:
        # duplicate names in one record: keep the last occurrence
        combo = pa.table({"p": parent, "k": keys, "i": np.arange(len(parent))})
        last = combo.group_by(["p", "k"], use_threads=False).aggregate([("i", "max")])
        if last.num_rows != len(parent):
            keep = np.sort(np.asarray(last.column("i_max")))
            parent = parent[keep]
            keys = keys.take(pa.array(keep))
            values = values.take(pa.array(keep))
    counts = np.bincount(parent, minlength=n) if n else np.zeros(0, dtype=np.int64)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.MapArray.from_arrays(pa.array(offsets, type=pa.int32()), keys, values)


def _slow_record(
    data: bytes, q: int, base_offset: int
) -> tuple[rec.RecordView, int, int, int, int] | tuple[None, str]:
    """Decode a record of an uncommon layout; returns (view, topic start, topic length, props
    start, props length) or (None, reason)."""
    view = rec.decode_record(data, q, check_crc=False, read_body=False)
    if view.kind is not rec.RecordKind.MESSAGE:
        return None, view.reason or f"record does not decode ({view.kind.name})"
    body_start = q + view.body_offset
    tl_width = 2 if view.v2 else 1
    topic_start = body_start + view.body_length + tl_width
    topic_len = int.from_bytes(data[topic_start - tl_width : topic_start], "big", signed=True)
    props_start = topic_start + topic_len + 2
    props_len = q + view.size - props_start
    return view, topic_start, topic_len, props_start, props_len


def decode_chunk(chunk: Chunk, damage: list[Damage], segment: str) -> tuple[RecordColumns, int | None]:
    """Decode the records of ``chunk`` into columns.

    Records with a wrong structure end the chunk (the walk cannot be trusted after them); their
    damage is appended to ``damage`` and the second result is the chunk-relative position where
    valid data ends (None when every record is sound). Records whose PHYSICALOFFSET disagrees
    with their position are reported and kept. CRCs are not checked here
    (:meth:`RecordColumns.crc_mismatches`).
    """
    data = chunk.data
    starts = chunk.starts
    arr = np.frombuffer(data, dtype=np.uint8)
    count = len(starts)
    # The fast layout (V1, IPv4 hosts) is checked by the store's own rules (record_scan.check_v1):
    # body, topic and properties must fill TOTALSIZE exactly.
    shape = record_scan.check_v1(record_scan.pad(data), len(data), starts)
    fast = shape.fast
    size = shape.size
    sys_flag = shape.head["sys_flag"].astype(np.int64)
    cut: int | None = None
    body_len = np.where(fast, shape.body_len, 0)
    topic_len = np.where(fast, shape.topic_len, 0)
    props_len = np.where(fast, shape.props_len, 0)
    sound = shape.good | ~fast
    reasons: dict[int, str] = {}
    for i in np.flatnonzero(~sound).tolist():
        reasons[i] = (
            f"TOTALSIZE {int(size[i])} does not match the record's fields (body length {int(body_len[i])}, "
            f"topic length {int(topic_len[i])}, properties length {int(props_len[i])})"
        )
    slow_views: dict[int, tuple[rec.RecordView, int, int, int, int]] = {}
    for i in np.flatnonzero(~fast).tolist():
        got = _slow_record(data, int(starts[i]), chunk.base_offset)
        if got[0] is None:
            sound[i] = False
            reasons[i] = str(got[1])
        else:
            slow_views[i] = got
    bad = np.flatnonzero(~sound)
    if bad.size:
        first = int(bad[0])
        pos = int(starts[first])
        damage.append(Damage(chunk.base_offset + pos, segment, chunk.position + pos, reasons[first], False))
        cut = pos
        count = first
        starts = starts[:count]
        fast = fast[:count]
        size = size[:count]
        sys_flag = sys_flag[:count]
        body_len = body_len[:count]
        topic_len = topic_len[:count]
        props_len = props_len[:count]
    # Fixed fields: the same positions for every layout up to BORNHOST; the rest depends on the
    # host widths, which the slow records correct below.
    cols: dict[str, Any] = {
        "offset": chunk.base_offset + starts,
        "size": size.astype(np.int32),
        "body_crc": _gather_be(arr, starts + 8, 4),
        "queue_id": _gather_be(arr, starts + 12, 4),
        "flag": _gather_be(arr, starts + 16, 4),
        "queue_offset": _gather_be(arr, starts + 20, 8),
        "physical_offset": _gather_be(arr, starts + 28, 8),
        "sys_flag": sys_flag.astype(np.int32),
        "born_timestamp": _gather_be(arr, starts + 40, 8),
        "store_timestamp": _gather_be(arr, starts + 56, 8),
        "reconsume_times": _gather_be(arr, starts + 72, 4),
        "prepared_offset": _gather_be(arr, starts + 76, 8),
    }
    body_start = starts + 88
    topic_start = starts + 89 + body_len
    props_start = topic_start + topic_len + 2
    born_u64 = _gather_u64(arr, starts + 48)
    store_u64 = _gather_u64(arr, starts + 64)
    born_wide: dict[int, bytes] = {}
    store_wide: dict[int, bytes] = {}
    for i, (view, t0, tl2, p0, pl2) in slow_views.items():
        if i >= count:
            continue
        s = int(starts[i])
        cols["store_timestamp"][i] = view.store_timestamp
        cols["reconsume_times"][i] = view.reconsume_times
        cols["prepared_offset"][i] = view.prepared_transaction_offset
        if len(view.born_host) == 8:
            born_u64[i] = int.from_bytes(view.born_host, "big")
        else:
            born_wide[i] = view.born_host
        if len(view.store_host) == 8:
            store_u64[i] = int.from_bytes(view.store_host, "big")
        else:
            store_wide[i] = view.store_host
        body_start[i] = s + view.body_offset
        body_len[i] = view.body_length
        topic_start[i] = t0
        topic_len[i] = tl2
        props_start[i] = p0
        props_len[i] = pl2
    misplaced = np.flatnonzero(cols["physical_offset"] != cols["offset"])
    for i in misplaced.tolist():
        s = int(starts[i])
        damage.append(
            Damage(
                chunk.base_offset + s,
                segment,
                chunk.position + s,
                f"PHYSICALOFFSET field {int(cols['physical_offset'][i])} != the record's offset "
                f"{chunk.base_offset + s}",
                True,
            )
        )
    columns = RecordColumns(
        **cols,
        born_host=born_u64,
        store_host=store_u64,
        born_wide=born_wide,
        store_wide=store_wide,
        topic_raw=_binary_slices(data, topic_start, topic_len),
        body_start=body_start,
        body_length=body_len,
        props_raw=_binary_slices(data, props_start, props_len),
        data=data,
    )
    return columns, cut


# -- Arrow output -----------------------------------------------------------------------------------
def _remap(wide: dict[int, bytes], rows: npt.NDArray[np.int64]) -> dict[int, bytes]:
    if not wide:
        return {}
    return {j: wide[i] for j, i in enumerate(rows.tolist()) if i in wide}


def _hosts(packed: npt.NDArray[np.uint64], wide: dict[int, bytes]) -> pa.Array:
    """Hosts → ``ip:port`` strings; each distinct address is formatted once."""
    if not len(packed):
        return pa.array([], type=pa.string())
    uniq, inverse = np.unique(packed, return_inverse=True)
    names = [unpack_socket_addr(int(u).to_bytes(8, "big")) for u in uniq.tolist()]
    out = pa.array(names, type=pa.string()).take(pa.array(inverse.reshape(-1).astype(np.int32)))
    if wide:
        values = out.to_pylist()
        for i, raw in wide.items():
            values[i] = unpack_socket_addr(raw)
        out = pa.array(values, type=pa.string())
    return out


def _msg_ids(
    store_host: npt.NDArray[np.uint64], store_wide: dict[int, bytes], offsets: npt.NDArray[np.int64]
) -> pa.Array:
    """Offset message ids (store host ‖ int64 offset, uppercase hex; spec §3.1), vectorised."""
    n = len(offsets)
    if n == 0:
        return pa.array([], type=pa.string())
    raw = np.empty((n, 16), dtype=np.uint8)
    raw[:, :8] = store_host.astype(">u8").view(np.uint8).reshape(n, 8)
    raw[:, 8:] = offsets.astype(">i8").view(np.uint8).reshape(n, 8)
    out = np.empty((n, 32), dtype=np.uint8)
    out[:, 0::2] = _HEX[raw >> 4]
    out[:, 1::2] = _HEX[raw & 0xF]
    offs = np.arange(0, 32 * (n + 1), 32, dtype=np.int32)
    ids = pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offs), pa.py_buffer(out.tobytes())])
    if store_wide:
        values = ids.to_pylist()
        for i, host in store_wide.items():
            values[i] = create_offset_msg_id(host, int(offsets[i]))
        ids = pa.array(values, type=pa.string())
    return ids


def offset_msg_ids(store_hosts: list[bytes], offsets: npt.NDArray[np.int64]) -> pa.Array:
    """Offset message ids of records with these packed store hosts (8 or 20 bytes each)."""
    packed = np.array([int.from_bytes(h, "big") if len(h) == 8 else 0 for h in store_hosts], dtype=np.uint64)
    wide = {i: h for i, h in enumerate(store_hosts) if len(h) != 8}
    return _msg_ids(packed, wide, offsets)


def _timestamps(ms: npt.NDArray[np.int64]) -> pa.Array:
    return pa.array(ms.astype(np.int64) * 1000, type=pa.int64()).cast(_TS)


def select_rows(
    cols: RecordColumns,
    *,
    topics: frozenset[str] | None = None,
    begin_ms: int | None = None,
    end_ms: int | None = None,
) -> RecordColumns:
    """Rows whose topic is in ``topics`` and whose store time is in ``[begin_ms, end_ms)``."""
    mask = np.ones(len(cols), dtype=bool)
    if topics is not None:
        mask &= np.asarray(pc.is_in(cols.topics(), value_set=pa.array(sorted(topics), type=pa.string())))
    if begin_ms is not None:
        mask &= cols.store_timestamp >= begin_ms
    if end_ms is not None:
        mask &= cols.store_timestamp < end_ms
    if mask.all():
        return cols
    return cols.take(np.flatnonzero(mask))


def to_export_batch(cols: RecordColumns, broker_name: str | None = None) -> pa.RecordBatch:
    """The export columns (:data:`EXPORT_SCHEMA`) of decoded records.

    ``msgId`` is what a client sees as the message id: the ``UNIQ_KEY`` property when present,
    else the offset message id.
    """
    props = cols.properties()
    n = len(cols)
    uniq = pc.map_lookup(props, "UNIQ_KEY", "last")
    msg_id = pc.coalesce(uniq, _msg_ids(cols.store_host, cols.store_wide, cols.offset))
    arrays = [
        cols.topics(),
        pa.array([broker_name] * n, type=pa.string()),
        pa.array(cols.queue_id, type=pa.int32()),
        pa.array(cols.queue_offset, type=pa.int64()),
        msg_id,
        pc.map_lookup(props, "KEYS", "last"),
        pc.map_lookup(props, "TAGS", "last"),
        cols.bodies(),
        props,
        _timestamps(cols.born_timestamp),
        _timestamps(cols.store_timestamp),
        _hosts(cols.born_host, cols.born_wide),
        _hosts(cols.store_host, cols.store_wide),
        pa.array(cols.reconsume_times, type=pa.int32()),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=EXPORT_SCHEMA)


# -- whole-task helpers -----------------------------------------------------------------------------
@dataclass(slots=True)
class TaskReport:
    """What a verify pass over one task found."""

    task: ScanTask
    records: int = 0
    record_bytes: int = 0
    walk: WalkResult = field(default_factory=WalkResult)
    #: (offset, size) of each filler record recovery wrote over a quarantined damaged range
    #: (``store/recovery.py``): not counted as records, not damage.
    quarantined: list[tuple[int, int]] = field(default_factory=list)

    @property
    def damage(self) -> list[Damage]:
        return self.walk.damage


def iter_columns(
    task: ScanTask,
    walk: WalkResult,
    *,
    check_crc: bool = False,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> Iterator[RecordColumns]:
    """Decoded columns of every sound record of ``task``, chunk by chunk. Damage (and, with
    ``check_crc``, body CRC mismatches) goes to ``walk.damage``; records with a wrong CRC are
    still returned."""
    seg = task.segment_name
    for chunk in iter_chunks(task, walk, chunk_bytes=chunk_bytes):
        cols, cut = decode_chunk(chunk, walk.damage, seg)
        if check_crc and len(cols):
            for i in cols.crc_mismatches().tolist():
                off = int(cols.offset[i])
                s = int(cols.body_start[i])
                stored = int(cols.body_crc[i])
                actual = zlib.crc32(memoryview(cols.data)[s : s + int(cols.body_length[i])]) & 0x7FFFFFFF
                walk.damage.append(
                    Damage(
                        off,
                        seg,
                        off - task.segment_offset,
                        f"body CRC mismatch: stored {stored}, computed {actual}",
                        True,
                    )
                )
        if len(cols):
            yield cols
        if cut is not None:
            # the walk went past a record that does not add up: nothing after it is trusted
            walk.stop = StopKind.DAMAGED
            walk.valid_end = walk.stop_offset = chunk.base_offset + cut
            walk.blank_offset = None
            walk.damage[:] = [d for d in walk.damage if d.recoverable or d.offset <= walk.valid_end]
            return


_FILLER_TOPIC = QUARANTINE_TOPIC.encode()


def quarantine_fillers(cols: RecordColumns) -> list[tuple[int, int]]:
    """(offset, size) of the filler records among ``cols``: ROLLBACK records of the quarantine
    topic, which recovery writes over a damaged range it skipped."""
    rollback = np.flatnonzero((cols.sys_flag & rec.TRANSACTION_MASK) == rec.TRANSACTION_ROLLBACK_TYPE)
    return [
        (int(cols.offset[i]), int(cols.size[i]))
        for i in rollback.tolist()
        if cols.topic_raw[i].as_py() == _FILLER_TOPIC
    ]


def verify_task(task: ScanTask, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> TaskReport:
    """Parse every record of ``task`` with structure and body CRC checks."""
    report = TaskReport(task)
    for cols in iter_columns(task, report.walk, check_crc=True, chunk_bytes=chunk_bytes):
        fillers = quarantine_fillers(cols)
        report.quarantined += fillers
        report.records += len(cols) - len(fillers)
        report.record_bytes += int(cols.size.sum(dtype=np.int64)) - sum(size for _, size in fillers)
    report.walk.damage.sort(key=lambda d: d.offset)
    return report


def export_batches(
    task: ScanTask,
    *,
    topics: frozenset[str] | None = None,
    begin_ms: int | None = None,
    end_ms: int | None = None,
    broker_name: str | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> Iterator[pa.RecordBatch]:
    """Export batches of ``task``'s records that pass the filters."""
    walk = WalkResult()
    for cols in iter_columns(task, walk, chunk_bytes=chunk_bytes):
        picked = select_rows(cols, topics=topics, begin_ms=begin_ms, end_ms=end_ms)
        if len(picked):
            yield to_export_batch(picked, broker_name)


STATS_SCHEMA: Final = pa.schema(
    [
        ("topic", pa.string()),
        ("queueId", pa.int32()),
        ("hour", _TS),
        ("messages", pa.int64()),
        ("bytes", pa.int64()),
        ("bodyBytes", pa.int64()),
    ]
)


#: :data:`STATS_SCHEMA` as a Spark DDL string.
STATS_DDL: Final = (
    "topic string, queueId int, hour timestamp, messages bigint, bytes bigint, bodyBytes bigint"
)


def stats_batch(task: ScanTask, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> pa.RecordBatch:
    """Messages, record bytes and body bytes per (topic, queue id, hour of store time) of one task."""
    parts: list[pa.Table] = []
    walk = WalkResult()
    for cols in iter_columns(task, walk, chunk_bytes=chunk_bytes):
        hour = (cols.store_timestamp // 3_600_000) * 3_600_000
        parts.append(
            pa.table(
                {
                    "topic": cols.topics(),
                    "queueId": pa.array(cols.queue_id, type=pa.int32()),
                    "hour": pa.array(hour, type=pa.int64()),
                    "size": pa.array(cols.size.astype(np.int64)),
                    "body": pa.array(cols.body_length.astype(np.int64)),
                }
            )
        )
    if not parts:
        return _empty_stats()
    table = pa.concat_tables(parts)
    agg = table.group_by(["topic", "queueId", "hour"], use_threads=False).aggregate(
        [("size", "count"), ("size", "sum"), ("body", "sum")]
    )
    return pa.RecordBatch.from_arrays(
        [
            agg.column("topic").combine_chunks(),
            agg.column("queueId").combine_chunks(),
            _timestamps(np.asarray(agg.column("hour"))),
            agg.column("size_count").combine_chunks().cast(pa.int64()),
            agg.column("size_sum").combine_chunks().cast(pa.int64()),
            agg.column("body_sum").combine_chunks().cast(pa.int64()),
        ],
        schema=STATS_SCHEMA,
    )


def _empty_stats() -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in STATS_SCHEMA], schema=STATS_SCHEMA)


def count_records(task: ScanTask, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> int:
    """Number of sound records of ``task`` (walk and structure checks only)."""
    walk = WalkResult()
    return sum(len(c) for c in iter_columns(task, walk, chunk_bytes=chunk_bytes))


__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "EXPORT_COLUMNS",
    "EXPORT_DDL",
    "EXPORT_SCHEMA",
    "STATS_DDL",
    "STATS_SCHEMA",
    "Chunk",
    "Damage",
    "RecordColumns",
    "ScanTask",
    "Segment",
    "StopKind",
    "TaskReport",
    "WalkResult",
    "commitlog_dir",
    "count_records",
    "decode_chunk",
    "export_batches",
    "hop_boundaries",
    "iter_chunks",
    "iter_columns",
    "list_segments",
    "offset_msg_ids",
    "plan_tasks",
    "properties_map",
    "select_rows",
    "stats_batch",
    "to_export_batch",
    "verify_task",
]
