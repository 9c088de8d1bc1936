"""The index entries (row, key hash) a window of dispatch requests should give, spelled out."""

from __future__ import annotations

from rocketq.message import java_string_hash
from rocketq.store.record_scan import DispatchRequest


def index_entries_of(reqs: list[DispatchRequest]) -> list[tuple[int, int]]:
    """(row, hash) for each request's ``topic#UNIQ_KEY`` and ``topic#key``, in order: the
    IndexFile's slot hash (``abs`` of Java's hashCode, 0 for its minimum)."""
    out = []
    for row, r in enumerate(reqs):
        texts = [] if r.uniq_key is None else [f"{r.topic}#{r.uniq_key}"]
        texts += [f"{r.topic}#{k}" for k in r.keys.split(" ") if k]
        for t in texts:
            h = java_string_hash(t)
            out.append((row, 0 if h == -(1 << 31) else abs(h)))
    return out
