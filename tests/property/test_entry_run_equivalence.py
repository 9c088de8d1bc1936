"""DLedger dispatch's one-pass scan of a run of entries (``dledger_window.parse_entry_run``: the
data file's bytes, 48-byte headers and all, with the compiled ``scan_window`` or its pure twin)
against the general path, each NORMAL entry's body parsed alone at its entry's position + 48
(``parse_window``): the same requests, field for field, and the same index entries, for random
runs of entries with NOOPs, checked or unchecked (DLedger's zero) CRCs, any record layout; and
None, nothing dispatched, for every run the scan is not to take (another entry type, a header
field that does not follow on, a body that is not exactly one whole record, a damaged record, a
body that does not match its CRC, a cut run)."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _support.examples import examples
from _support.index_entries import index_entries_of
from rocketq import speedups
from rocketq.ha import entry_format as fmt
from rocketq.protocol import record as rec
from rocketq.store import record_scan as rs
from rocketq.store.dledger_window import parse_entry_run, parse_entry_run_pure
from rocketq.store.record_scan import DispatchBatch, DispatchRequest

FIELDS = [f for f in DispatchRequest.__slots__ if f != "_properties"]
LEVELS = {1: 1000, 2: 5000, 3: 10000}
IPV4 = b"\x7f\x00\x00\x01\x00\x00\x00\x00"
IPV6 = bytes(15) + b"\x01" + struct.pack(">i", 1234)
#: what is done to one entry of a run; the first two leave it a run the scan takes
USUAL = ("none", "unchecked")
ODD = (
    "magic",
    "config change",
    "size",
    "index",
    "pos",
    "two records",
    "cut record",
    "record layout",
    "crc",
    "noop body",
    "empty normal",
    "cut run",
)

values = st.sampled_from(["", "a", "TagA", "k1 k2", " k3 ", "x" * 70, "ü-key", "2", "中 b"])
props = st.lists(
    st.tuples(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "X"]), values), max_size=5
).map(lambda items: "\x02".join(f"{k}\x01{v}" for k, v in items).encode())


@st.composite
def record(draw: st.DrawFn) -> bytes:
    layout = draw(st.sampled_from(["v1", "v1", "v1", "v1", "ipv6", "v2"]))
    return rec.encode_record(
        topic=draw(st.sampled_from(["T", "Other", rs.SCHEDULE_TOPIC, "tö"])),
        body=draw(st.binary(max_size=60)),
        properties=draw(props),
        queue_id=draw(st.integers(0, 15)),
        queue_offset=draw(st.integers(0, 1 << 40)),
        physical_offset=draw(st.integers(0, 1 << 40)),
        sys_flag=draw(st.sampled_from([0, 0, 0x4, 0x8, 0xC])),
        store_timestamp=draw(st.integers(0, 1 << 42)),
        prepared_transaction_offset=draw(st.integers(0, 1 << 40)),
        born_host=IPV6 if layout == "ipv6" else IPV4,
        v2=True if layout == "v2" else None,
    )


V1_RECORD = rec.encode_record(topic="T", body=b"b", properties=b"TAGS\x01a")


def is_v1_ipv4(record_bytes: bytes) -> bool:
    magic, sys_flag = (
        struct.unpack_from(">i", record_bytes, 4)[0],
        struct.unpack_from(">i", record_bytes, 36)[0],
    )
    return magic == rec.MESSAGE_MAGIC_CODE and sys_flag & 0x30 == 0


def encode_run(
    items: list[bytes | None], index: int, pos: int, unchecked: set[int]
) -> tuple[bytes, list[tuple[int, bytes]]]:
    """The entries of ``items`` (a record, or None for a NOOP) from ``index`` at ``pos``, and
    each NORMAL entry's (position, body); the entries at ``unchecked`` with zero checksums."""
    parts: list[bytes] = []
    normal: list[tuple[int, bytes]] = []
    chain = 0
    for k, body in enumerate(items):
        magic = fmt.MAGIC_NOOP if body is None else fmt.MAGIC_NORMAL
        raw = fmt.encode_entry(magic, index + k, 3, pos, body or b"", chain)
        chain = struct.unpack_from(">i", raw, 36)[0]
        if k in unchecked:
            raw = raw[:36] + bytes(8) + raw[44:]
        if body is not None:
            normal.append((pos, body))
        parts.append(raw)
        pos += len(raw)
    return b"".join(parts), normal


def entries_of(reqs: list[DispatchRequest]) -> list[tuple[int, int]]:
    """The index entries a request list carries, checked against the keys it names."""
    want = index_entries_of(reqs)
    if isinstance(reqs, rs.RequestList) and reqs.index_entries is not None:
        assert list(zip(*reqs.index_entries, strict=True)) == want
    elif isinstance(reqs, DispatchBatch):
        rows, hashes = reqs.index_entries()
        assert list(zip(rows.tolist(), hashes.tolist(), strict=True)) == want
    return want


def answer(reqs: list[DispatchRequest] | None) -> Any:
    if reqs is None:
        return None
    return [tuple(getattr(r, f) for f in FIELDS) for r in reqs], entries_of(reqs)


def one_by_one(normal: list[tuple[int, bytes]], levels: dict[int, int] | None) -> Any:
    """The general path: each body parsed alone at its entry's position + 48."""
    out: list[DispatchRequest] = []
    for pos, body in normal:
        reqs, used, stop = rs.parse_window(body, pos + fmt.BODY_OFFSET, levels)
        assert used == len(body) and stop is not rec.RecordKind.CORRUPT
        out.extend(reqs)
    return answer(out)


def mutate(data: bytes, at: int, size: int, how: str, other: bytes) -> bytes:
    """``how`` done to the NORMAL entry of ``size`` bytes at ``at`` of ``data``; ``other``: a
    record for "two records"."""
    head = bytearray(data[at : at + fmt.BODY_OFFSET])
    body = data[at + fmt.BODY_OFFSET : at + size]
    rest = data[at + size :]

    def with_body(new: bytes) -> bytes:
        struct.pack_into(">i", head, 4, fmt.BODY_OFFSET + len(new))
        struct.pack_into(">i", head, 44, len(new))
        return data[:at] + bytes(head) + new + rest

    if how == "magic":
        struct.pack_into(">i", head, 0, 7)
    elif how == "config change":
        struct.pack_into(">i", head, 0, fmt.MAGIC_CONFIG_CHANGE)
    elif how == "size":
        struct.pack_into(">i", head, 4, size + 1)
    elif how == "index":
        struct.pack_into(">q", head, 8, struct.unpack_from(">q", head, 8)[0] + 1)
    elif how == "pos":
        struct.pack_into(">q", head, 24, struct.unpack_from(">q", head, 24)[0] - 8)
    elif how == "two records":
        return with_body(body + other)
    elif how == "cut record":
        return with_body(body[:-1])
    elif how == "record layout":  # the body length no longer adds up to TOTALSIZE
        b = bytearray(body)
        struct.pack_into(">i", b, 84, struct.unpack_from(">i", b, 84)[0] + 1)
        struct.pack_into(">i", head, 40, fmt.body_crc(b))
        return data[:at] + bytes(head) + bytes(b) + rest
    elif how == "crc":
        struct.pack_into(">i", head, 40, fmt.body_crc(body) ^ 1)
    elif how == "noop body":
        struct.pack_into(">i", head, 0, fmt.MAGIC_NOOP)
        return data[:at] + bytes(head) + body + rest
    elif how == "empty normal":
        return with_body(b"")
    elif how == "cut run":
        return data[: at + size - 1]
    return data[:at] + bytes(head) + body + rest


@pytest.fixture
def scan_saved() -> Iterator[None]:
    saved = rs._scan_window
    yield
    rs._scan_window = saved


def both(
    data: bytes, pos: int, index: int, levels: dict[int, int] | None, checked_from: int | None = None
) -> tuple[Any, Any]:
    """parse_entry_run with the compiled scan (when built) and with the pure one."""
    compiled = speedups.COMPILED
    rs._scan_window = None
    pure = answer(parse_entry_run(data, pos, index, levels, checked_from))
    assert answer(parse_entry_run_pure(data, pos, index, levels, checked_from)) == pure
    if compiled is None:
        return pure, pure
    rs._scan_window = compiled.scan_window
    return answer(parse_entry_run(data, pos, index, levels, checked_from)), pure


@settings(
    max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    items=st.lists(st.one_of(st.none(), record()), min_size=1, max_size=14),
    index=st.integers(0, 1 << 40),
    pos=st.integers(0, 1 << 40),
    levels=st.sampled_from([None, LEVELS]),
    how=st.sampled_from(USUAL + USUAL + ODD),
    pick=st.integers(0, 1 << 16),
    other=record(),
)
def test_a_run_gives_each_entry_s_requests_or_is_left_to_the_general_path(
    scan_saved: None,
    items: list[bytes | None],
    index: int,
    pos: int,
    levels: dict[int, int] | None,
    how: str,
    pick: int,
    other: bytes,
) -> None:
    k = pick % len(items)
    unchecked = set(range(len(items))) if how == "unchecked" else set()
    if how == "record layout":
        items[k] = V1_RECORD  # the body length's place is a V1/IPv4 record's
    elif how in ODD:
        items[k] = items[k] or other  # a NORMAL entry to change
    data, normal = encode_run(items, index, pos, unchecked)
    want = one_by_one(normal, levels)
    if how in ODD:
        at = pos + sum(fmt.BODY_OFFSET + len(b or b"") for b in items[:k])
        data = mutate(data, at - pos, fmt.BODY_OFFSET + len(items[k] or b""), how, other)
    compiled, pure = both(data, pos, index, levels)
    usual_layout = all(b is None or is_v1_ipv4(b) for b in items)
    if how in ODD:
        assert compiled is None and pure is None
    else:
        # the pure scan takes every layout; the compiled one V1/IPv4 records (else the caller's)
        assert pure == want
        assert compiled == want or (compiled is None and not usual_layout)


@pytest.mark.parametrize("n", [1, 3, 170, 400])  # objects, the pure and compiled columnar batches
def test_long_runs_with_noops_give_the_same_requests(scan_saved: None, n: int) -> None:
    items: list[bytes | None] = []
    for i in range(n):
        if i % 7 == 3:
            items.append(None)
        props = f"TAGS\x01t{i % 5}\x02KEYS\x01k{i} j{i}\x02UNIQ_KEY\x01U{i}".encode()
        items.append(rec.encode_record(topic="T" if i % 4 else "U", body=bytes(i % 50), properties=props))
    data, normal = encode_run(items, 1000, 1 << 30, set())
    want = one_by_one(normal, None)
    compiled, pure = both(data, 1 << 30, 1000, None)
    assert compiled == want and pure == want
    assert [row[FIELDS.index("commit_log_offset")] for row in want[0]] == [p + 48 for p, _ in normal]


def test_noops_alone_give_no_requests_and_an_empty_run_none_either(scan_saved: None) -> None:
    data, _ = encode_run([None, None, None], 5, 4096, set())
    assert both(data, 4096, 5, None) == (([], []), ([], []))
    assert both(b"", 4096, 5, None) == (([], []), ([], []))
    # a run read from the wrong place: the first entry is not the one asked for
    assert both(data, 4096, 6, None) == (None, None)
    assert both(data, 4100, 5, None) == (None, None)


@settings(
    max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    items=st.lists(st.one_of(st.none(), record()), min_size=1, max_size=10),
    index=st.integers(0, 1 << 40),
    pos=st.integers(0, 1 << 40),
    pick=st.integers(0, 1 << 16),
    how=st.sampled_from(("crc", "crc", "pos", "record layout", "cut record")),
    shift=st.integers(-300, 300),
)
def test_entries_written_by_this_process_are_not_checked_against_their_crc_again(
    scan_saved: None, items: list[bytes | None], index: int, pos: int, pick: int, how: str, shift: int
) -> None:
    """With ``checked_from`` (the entry store's ``written_from``) a body that does not match its
    CRC is taken when its entry lies at or past that position, and leaves the run to the
    general path before it; every other check stays whatever ``checked_from`` says."""
    k = pick % len(items)
    items[k] = V1_RECORD if how == "record layout" else items[k] or V1_RECORD  # as above
    data, normal = encode_run(items, index, pos, set())
    at = pos + sum(fmt.BODY_OFFSET + len(b or b"") for b in items[:k])
    bad = mutate(data, at - pos, fmt.BODY_OFFSET + len(items[k] or b""), how, V1_RECORD)
    checked_from = max(at + shift, 0)
    compiled, pure = both(bad, pos, index, None, checked_from)
    if how == "crc" and checked_from <= at:
        want = one_by_one(normal, None)  # the same bodies: only the CRC field is wrong
        usual_layout = all(b is None or is_v1_ipv4(b) for b in items)
        assert pure == want
        assert compiled == want or (compiled is None and not usual_layout)
    else:
        assert compiled is None and pure is None
    # without checked_from every entry is checked, as a read checks it
    assert both(bad, pos, index, None) == (None, None)
