"""Planning the segment scans of a stopped store: the CommitLog segments and the byte-range tasks.

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

DLedger stores (:func:`dledger_data_dir`). In DLedger mode the CommitLog lives inside the entry
store: data files ``dledger-<selfId>/data/<20-digit start position>``, each entry a 48-byte header
and one CommitLog record at ``pos + 48`` (``rocketq.ha.entry_format``). Their segments have the
layout :data:`DLEDGER` and are walked entry by entry (:mod:`.scan_entries`); a store adopted from a
plain one keeps its old segments (``commitlog/``, layout :data:`COMMITLOG`) below the first data
file, so :func:`list_segments` gives both, in offset order. Entry data files are not split (an
entry cannot be found again in the middle of a file either, and no hop pass is done for them).
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from rocketq.errors import StoreError
from rocketq.protocol import record as rec

_SEGMENT_NAME_DIGITS: Final = 20
_HEAD = struct.Struct(">ii")
_V1 = rec.MESSAGE_MAGIC_CODE
_V2 = rec.MESSAGE_MAGIC_CODE_V2
_MIN_RECORD = 91  # V1, IPv4 hosts, empty body, properties and a 0-byte topic
#: Segment layouts: plain CommitLog files, or DLedger entry data files.
COMMITLOG: Final = "commitlog"
DLEDGER: Final = "dledger"
_DLEDGER_PREFIX: Final = "dledger-"


@dataclass(frozen=True, slots=True)
class Segment:
    """One CommitLog file: its path, the CommitLog offset it starts at and its length; ``layout``
    :data:`DLEDGER` for an entry data file of a DLedger store."""

    path: str
    start_offset: int
    size_bytes: int
    layout: str = COMMITLOG


@dataclass(frozen=True, slots=True)
class ScanTask:
    """Bytes ``[begin, end)`` of one segment (positions within the file); ``begin`` is a record
    start. ``to_segment_end`` tells whether the range reaches the end of the file, where the
    scan must meet a BLANK marker, zeros or the exact end of the file. ``layout`` is the
    segment's (:data:`DLEDGER`: a whole entry data file, walked entry by entry)."""

    index: int
    path: str
    segment_offset: int
    begin: int
    end: int
    to_segment_end: bool
    layout: str = COMMITLOG

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
            "layout": self.layout,
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
            str(obj.get("layout", COMMITLOG)),
        )


def commitlog_dir(store_dir: str) -> str:
    """The CommitLog directory of a store root, or ``store_dir`` itself when it holds segments."""
    candidate = os.path.join(store_dir, "commitlog")
    return candidate if os.path.isdir(candidate) else store_dir


def dledger_data_dir(store_dir: str) -> str | None:
    """The entry data directory of a DLedger store, or None for a plain store.

    ``store_dir`` may be the broker's store root (or ``storePathDLedgerCommitLog``) holding one
    ``dledger-<selfId>/``, that ``dledger-<selfId>/`` directory, or its ``data/`` directory. A root
    holding the entry stores of several members is refused: name one of them."""
    norm = os.path.normpath(store_dir)
    if os.path.basename(norm) == "data" and os.path.basename(os.path.dirname(norm)).startswith(
        _DLEDGER_PREFIX
    ):
        return norm
    if os.path.basename(norm).startswith(_DLEDGER_PREFIX) and os.path.isdir(os.path.join(norm, "data")):
        return os.path.join(norm, "data")
    if not os.path.isdir(norm):
        return None
    found = sorted(
        name
        for name in os.listdir(norm)
        if name.startswith(_DLEDGER_PREFIX) and os.path.isdir(os.path.join(norm, name, "data"))
    )
    if len(found) > 1:
        raise StoreError(
            f"{store_dir} holds the entry stores of several DLedger members ({', '.join(found)}); "
            f"name one, e.g. {os.path.join(store_dir, found[0])}"
        )
    return os.path.join(norm, found[0], "data") if found else None


def _numbered_files(directory: str, layout: str) -> list[Segment]:
    out = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if len(name) == _SEGMENT_NAME_DIGITS and name.isdigit() and os.path.isfile(path):
            out.append(Segment(path, int(name), os.path.getsize(path), layout))
    return out


def list_segments(store_dir: str) -> list[Segment]:
    """The CommitLog segments of a store (root or ``commitlog/`` directory), oldest first.

    Only files named by 20 decimal digits count (RocketMQ's ``offset2FileName``); raises
    :class:`StoreError` when there are none. For a DLedger store (:func:`dledger_data_dir`) these
    are the entry data files, after the old plain segments below the first of them
    (``dividedCommitlogOffset``) when the store was adopted from a plain one.
    """
    entries_dir = dledger_data_dir(store_dir)
    if entries_dir is not None:
        entries = _numbered_files(entries_dir, DLEDGER)
        # the old CommitLog sits in the store root, next to dledger-<selfId>/
        old_dir = os.path.join(os.path.dirname(os.path.dirname(entries_dir)), "commitlog")
        old = _numbered_files(old_dir, COMMITLOG) if os.path.isdir(old_dir) else []
        if entries:
            old = [s for s in old if s.start_offset < entries[0].start_offset]
        if not old and not entries:
            raise StoreError(f"no entry data files (files named by 20 digits) in {entries_dir}")
        return old + entries
    directory = commitlog_dir(store_dir)
    if not os.path.isdir(directory):
        raise StoreError(f"store directory {store_dir} does not exist")
    segments = _numbered_files(directory, COMMITLOG)
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
        if split_bytes is not None and seg.size_bytes > split_bytes and seg.layout == COMMITLOG:
            targets = list(range(split_bytes, seg.size_bytes, split_bytes))
            cuts = [c for c in hop_boundaries(seg.path, targets, limit=seg.size_bytes) if c > 0]
            cuts = sorted(set(cuts))
        edges = [0, *cuts, seg.size_bytes]
        for i in range(len(edges) - 1):
            tasks.append(
                ScanTask(
                    len(tasks),
                    seg.path,
                    seg.start_offset,
                    edges[i],
                    edges[i + 1],
                    i == len(edges) - 2,
                    seg.layout,
                )
            )
    return tasks
