"""Java ``String.hashCode`` spelled out for tests to check the library's forms against."""

from __future__ import annotations


def reference_java_hash(text: str) -> int:
    """String.hashCode over UTF-16 code units (spec §4), as a signed 32-bit int."""
    units = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i : i + 2], "big")) % 2**32
    return h - 2**32 if h >= 2**31 else h
