"""The dispatch requests of committed DLedger entries, parsed a window at a time.

Each entry of a DLedger CommitLog holds one CommitLog record behind its 48-byte header, so the
records of consecutive entries are not contiguous in the data files. :func:`parse_entries`
joins the bodies of a window of entries and parses them in one :func:`parse_window` (one
compiled scan, the columnar batch for many records), then gives each request the CommitLog
offset of its own entry (``pos + 48``). When the bodies are not one whole record each, it
says so and the caller parses them one by one (:class:`PendingRequests` keeps the key hashes
the compiled scan made for each, so the index does not hash them again).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rocketq.protocol import record as rec
from rocketq.store.record_scan import DispatchBatch, DispatchRequest, RequestList, parse_window


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
