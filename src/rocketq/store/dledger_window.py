"""The dispatch requests of committed DLedger entries, parsed a window at a time.

Each entry of a DLedger CommitLog holds one CommitLog record behind its 48-byte header, so the
records of consecutive entries are not contiguous in the data files. :func:`parse_entries`
joins the bodies of a window of entries and parses them in one :func:`parse_window` (one
compiled scan, the columnar batch for many records), then gives each request the CommitLog
offset of its own entry (``pos + 48``). When the bodies are not one whole record each, it
says so and the caller parses them one by one (:class:`PendingRequests` keeps the key hashes
the compiled scan made for each, so the index does not hash them again).

:func:`parse_entry_run` takes the usual case without a step per entry in Python: the bytes of a
run of committed entries as they lie in a data file (headers and all), walked by the compiled
scan (``scan_window`` with an entry index), which steps over each 48-byte header and NOOP and
gives each record the CommitLog offset of its place in the file (``pos + 48``), so the
requests are the ones the entries' bodies give one by one. It checks each body against its CRC
as a read does, except for the entries this process wrote itself (at or past the entry store's
``written_from``), whose CRCs were computed (a leader) or checked (a follower) as they were
written: a third of the scan's CPU for 128-byte messages. Any entry it does not take whole
makes it answer None, and the caller goes the general way above.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np

from rocketq.ha import entry_format as fmt
from rocketq.protocol import record as rec
from rocketq.store import record_scan
from rocketq.store.record_scan import (
    V1_MIN_SIZE,
    DispatchBatch,
    DispatchRequest,
    RequestList,
    compiled_requests,
    parse_window,
    requests_at_starts,
)

_RECORD_HEAD = struct.Struct(">ii")  # a record's TOTALSIZE and MAGICCODE
_MESSAGE_MAGICS = frozenset((rec.MESSAGE_MAGIC_CODE, rec.MESSAGE_MAGIC_CODE_V2))


def parse_entries(
    bodies: Sequence[bytes], offsets: Sequence[int], delay_levels: dict[int, int] | None
) -> list[DispatchRequest] | None:
    """The requests of the records in ``bodies`` (one record each, at CommitLog offsets
    ``offsets``) from one parse of them joined, in order; None when they are not one whole
    record each (nothing is dispatched: the caller parses them one by one)."""
    data = b"".join(bodies)
    reqs, used, stop = parse_window(data, 0, delay_levels)
    if used != len(data) or stop is rec.RecordKind.CORRUPT:
        return None
    sizes = reqs.columns.size.tolist() if isinstance(reqs, DispatchBatch) else [r.msg_size for r in reqs]
    if sizes != [len(b) for b in bodies]:
        return None
    if isinstance(reqs, DispatchBatch):  # no request object is built yet: they take these
        reqs.commit_log_offset = np.asarray(offsets, dtype=np.int64)
    else:
        for req, offset in zip(reqs, offsets, strict=True):
            req.commit_log_offset = offset
    return reqs


def parse_entry_run(
    data: bytes,
    pos: int,
    index: int,
    delay_levels: dict[int, int] | None,
    checked_from: int | None = None,
) -> list[DispatchRequest] | None:
    """The requests of the records in ``data``: whole entries as a data file holds them, the
    first one entry ``index`` at position ``pos``, each NORMAL entry's body one CommitLog record
    (at CommitLog offset entry pos + 48), NOOPs stepped over; the same requests as
    :func:`parse_window` of each body at its offset. None when an entry is not of that kind
    (another entry type, header fields that do not follow on, a body that is not exactly one
    record of a good layout or does not match its CRC, a cut entry): nothing is dispatched,
    the caller parses the entries one by one. With ``checked_from`` (the entry store's
    ``written_from``) the bodies of entries at or past that position are not checked against
    their CRC again: this process wrote them, and computed or checked their CRCs as it did. The
    compiled scan when built, else :func:`parse_entry_run_pure`."""
    scan_c = record_scan._scan_window  # read per call: tests run the pure path beside it
    if scan_c is None:
        return parse_entry_run_pure(data, pos, index, delay_levels, checked_from)
    scanned = scan_c(data, pos, record_scan.MIN_COMPILED_COLUMNAR_RECORDS, index, checked_from)
    if scanned is None or scanned[3] != len(data) or scanned[1] != scanned[2]:
        return None  # an entry or a record it does not take, or too many topics
    if not scanned[2]:
        return []  # NOOPs only
    parsed = compiled_requests(data, pos, delay_levels, scanned)
    return parsed[0] if parsed is not None and parsed[1] == len(data) else None


def parse_entry_run_pure(
    data: bytes,
    pos: int,
    index: int,
    delay_levels: dict[int, int] | None,
    checked_from: int | None = None,
) -> list[DispatchRequest] | None:
    """:func:`parse_entry_run` in pure Python (the reference of its compiled walk)."""
    crc_below = (1 << 63) - 1 if checked_from is None else checked_from
    starts: list[int] = []
    header = fmt.ENTRY_HEADER.unpack_from
    n = len(data)
    p = 0
    while p < n:
        if n - p < fmt.BODY_OFFSET:
            return None
        magic, size, e_index, _term, e_pos, _channel, chain, crc, body_size = header(data, p)
        if (
            magic not in (fmt.MAGIC_NORMAL, fmt.MAGIC_NOOP)
            or body_size < 0
            or size != fmt.BODY_OFFSET + body_size
            or size > n - p
            or e_index != index
            or e_pos != pos + p
            or (magic == fmt.MAGIC_NOOP) != (body_size == 0)
        ):
            return None
        if magic == fmt.MAGIC_NORMAL:
            at = p + fmt.BODY_OFFSET
            r_size, r_magic = _RECORD_HEAD.unpack_from(data, at) if body_size >= 8 else (0, 0)
            if body_size < V1_MIN_SIZE or r_size != body_size or r_magic not in _MESSAGE_MAGICS:
                return None
            if (
                e_pos < crc_below
                and not (chain == 0 and crc == 0)
                and fmt.body_crc(memoryview(data)[at : at + body_size]) != crc
            ):
                return None
            starts.append(at)
        p += size
        index += 1
    if not starts:
        return []
    reqs, used, _ = requests_at_starts(data, pos, delay_levels, starts, n, None)
    return reqs if used == n else None


class PendingRequests:
    """The requests of entries parsed one by one since the last dispatch, with the index key
    hashes the compiled scan made for each entry's record (:class:`RequestList`) merged, so the
    index does not hash the window's keys again; None once an entry came without them."""

    __slots__ = ("hashes", "requests", "rows")

    def __init__(self) -> None:
        self.requests: list[DispatchRequest] = []
        self.rows: list[int] | None = []
        self.hashes: list[int] = []

    def add(self, reqs: list[DispatchRequest]) -> None:
        made = reqs.index_entries if isinstance(reqs, RequestList) else None
        if made is None:
            self.rows = None
        elif self.rows is not None:
            first = len(self.requests)
            self.rows.extend([row + first for row in made[0]])
            self.hashes.extend(made[1])
        self.requests.extend(reqs)

    def take(self) -> list[DispatchRequest]:
        """The requests so far (a :class:`RequestList` with their hashes when all had them)."""
        reqs, rows = self.requests, self.rows
        out = RequestList(reqs, (rows, self.hashes)) if rows is not None and reqs else reqs
        self.requests, self.rows, self.hashes = [], [], []
        return out
