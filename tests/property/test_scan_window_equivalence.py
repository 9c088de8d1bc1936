"""The compiled window scan of dispatch (``rocketq._speedups.scan_window`` behind
``record_scan.parse_window``) against the pure-Python parser: the same requests (every field),
the same index entries, the same bytes consumed and the same stop, for any window: valid
V1/IPv4 records, V2 and IPv6 records, BLANK padding, zeros, truncated and damaged records, and
random bytes (skipped, saying why, when the compiled module is not in use)."""

from __future__ import annotations

import random
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _support.examples import examples
from _support.index_entries import index_entries_of
from rocketq import speedups
from rocketq.protocol import record as rec
from rocketq.store import record_scan as rs
from rocketq.store.record_scan import DispatchBatch

pytestmark = pytest.mark.skipif(
    speedups.COMPILED is None, reason=f"compiled codecs not in use: {speedups.REASON}"
)

FIELDS = (
    "topic",
    "queue_id",
    "commit_log_offset",
    "msg_size",
    "tags_code",
    "store_timestamp",
    "consume_queue_offset",
    "keys",
    "uniq_key",
    "sys_flag",
    "prepared_transaction_offset",
    "properties_raw",
)
I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
IPV6 = bytes(15) + b"\x01" + struct.pack(">i", 1234)
LEVELS = {1: 1000, 2: 5000, 3: 10000}
names = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "WAIT", "X", "TAGSX", "KEY", ""])
values = st.one_of(
    st.sampled_from(["", "a", "TagA", "k1 k2", " k3 ", "x" * 70, "ü-key", "\x01", "2", "0", "中 b"]),
    st.text(st.sampled_from(["a", " ", "\x01", "é", "\U0001f600", "Z"]), max_size=12),
)
properties = st.lists(st.tuples(names, values), max_size=6).map(
    lambda items: "\x02".join(f"{k}\x01{v}" for k, v in items).encode("utf-8", "surrogatepass")
)
topics = st.one_of(
    st.sampled_from(["T", "Other", rs.SCHEDULE_TOPIC, "tö", "T"]),
    st.text("abcXYZ019_-%|\x02", min_size=1, max_size=20),
    st.just("L" * 130),  # a V2 record
)


@st.composite
def record(draw: st.DrawFn) -> bytes:
    topic = draw(topics)
    return rec.encode_record(
        topic=topic,
        body=draw(st.one_of(st.binary(max_size=40), st.just(b"\x02TAGS\x01zz\x02KEYS\x01q"))),
        properties=draw(properties) + draw(st.sampled_from([b"", b"\x02", b"\xff", b"\xc3"])),
        queue_id=draw(I32),
        queue_offset=draw(I64),
        physical_offset=draw(I64),
        sys_flag=draw(st.sampled_from([0, 0, 0x4, 0x8, 0xC, 0x101])),
        store_timestamp=draw(I64),
        prepared_transaction_offset=draw(I64),
        born_host=IPV6 if draw(st.integers(0, 15)) == 0 else b"\x7f\x00\x00\x01\x00\x00\x00\x00",
        v2=True if draw(st.integers(0, 30)) == 0 else None,
    )


@st.composite
def window(draw: st.DrawFn) -> bytes:
    parts = draw(st.lists(record(), max_size=12))
    tail = draw(
        st.sampled_from(["none", "blank", "zeros", "few zeros", "cut", "junk", "small size", "big size"])
    )
    data = b"".join(parts)
    if tail == "blank":
        data += struct.pack(">ii", 64, rec.BLANK_MAGIC_CODE) + bytes(56)
    elif tail == "zeros":
        data += bytes(draw(st.integers(8, 200)))
    elif tail == "few zeros":
        data += bytes(draw(st.integers(1, 7)))
    elif tail == "cut" and parts:
        data += parts[0][: draw(st.integers(1, len(parts[0]) - 1))]
    elif tail == "junk":
        data += draw(st.binary(min_size=1, max_size=30))
    elif tail in ("small size", "big size"):
        size = draw(st.integers(0, 90)) if tail == "small size" else draw(st.integers(91, 1 << 20))
        data += struct.pack(">ii", size, rec.MESSAGE_MAGIC_CODE) + bytes(100)
    for _ in range(draw(st.integers(0, 3))):  # damage anywhere
        if data:
            at = draw(st.integers(0, len(data) - 1))
            data = data[:at] + bytes([draw(st.integers(0, 255))]) + data[at + 1 :]
    return data


def parsed(data: bytes, base: int, levels: dict[int, int] | None) -> tuple[Any, ...]:
    reqs, used, stop = rs.parse_window(data, base, levels)
    fields = [tuple(getattr(r, f) for f in FIELDS) for r in reqs]
    if isinstance(reqs, rs.RequestList) and reqs.index_entries is not None:
        entries = list(zip(*reqs.index_entries, strict=True))
        assert entries == index_entries_of(reqs)
    elif isinstance(reqs, DispatchBatch):
        rows, hashes = reqs.index_entries()
        entries = list(zip(rows.tolist(), hashes.tolist(), strict=True))
        assert entries == index_entries_of(list(reqs))
    else:
        entries = index_entries_of(reqs)
    return fields, entries, used, stop


@pytest.fixture
def thresholds() -> Iterator[None]:
    saved = rs.MIN_COLUMNAR_RECORDS, rs.MIN_COMPILED_COLUMNAR_RECORDS, rs._scan_window
    yield
    rs.MIN_COLUMNAR_RECORDS, rs.MIN_COMPILED_COLUMNAR_RECORDS, rs._scan_window = saved


def both(data: bytes, base: int, levels: dict[int, int] | None, columnar: int, compiled_from: int) -> Any:
    rs.MIN_COLUMNAR_RECORDS = columnar
    rs.MIN_COMPILED_COLUMNAR_RECORDS = compiled_from
    assert speedups.COMPILED is not None
    rs._scan_window = speedups.COMPILED.scan_window
    got = parsed(data, base, levels)
    rs._scan_window = None
    want = parsed(data, base, levels)
    rs._scan_window = speedups.COMPILED.scan_window
    assert got == want
    return got


@settings(
    max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    data=window(),
    base=st.integers(0, 1 << 40),
    levels=st.sampled_from([None, LEVELS]),
    columnar=st.sampled_from([1, 2, 4, 1 << 30]),
    compiled_from=st.sampled_from([1, 3, 1 << 30]),
)
def test_parse_window_is_the_pure_one(
    thresholds: None, data: bytes, base: int, levels: dict[int, int] | None, columnar: int, compiled_from: int
) -> None:
    both(data, base, levels, columnar, compiled_from)


def test_random_windows_never_break_the_scan(thresholds: None) -> None:
    """A few thousand random and mutated windows: no crash, and the pure answer."""
    rnd = random.Random(11)
    good = b"".join(
        rec.encode_record(
            topic=rnd.choice(["T", "Other"]),
            body=bytes(rnd.randrange(40)),
            properties=b"TAGS\x01A\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01u" + bytes([i % 256]),
            queue_offset=i,
        )
        for i in range(40)
    )
    scan = speedups.COMPILED.scan_window  # type: ignore[union-attr]
    for i in range(3000):
        if i % 3 == 0:
            data = rnd.randbytes(rnd.randrange(0, 400))
        else:
            buf = bytearray(good[: rnd.randrange(len(good) + 1)])
            for _ in range(rnd.randrange(1, 6)):
                if buf:
                    buf[rnd.randrange(len(buf))] = rnd.randrange(256)
            data = bytes(buf)
        scan(data)
        scan(memoryview(data)[1:])
        both(data, i, None, rnd.choice([1, 8, 1 << 30]), 1)


def test_scan_refuses_what_is_not_bytes() -> None:
    scan = speedups.COMPILED.scan_window  # type: ignore[union-attr]
    with pytest.raises(TypeError):
        scan("text")
    with pytest.raises(TypeError):
        scan(memoryview(b"abcdefgh").cast("I"))
    assert scan(bytearray(4))[1:5] == (0, 0, 0, 0)
    with pytest.raises(TypeError):
        scan()
    with pytest.raises(TypeError):
        scan(b"", "0")
    with pytest.raises(OverflowError):
        scan(b"", 1 << 70, 1)


def test_the_compiled_scan_takes_a_clean_window_whole(thresholds: None) -> None:
    """The compiled path is the one taken (not a fallback that would make the comparisons above
    pure against pure): its columns are those of the pure scan."""
    data = b"".join(
        rec.encode_record(
            topic="T" if i % 3 else "Other",
            body=bytes(i),
            properties=b"TAGS\x01A\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01u%d" % i,
            queue_id=i % 4,
            queue_offset=i,
            store_timestamp=1000 + i,
        )
        for i in range(40)
    )
    scanned = speedups.COMPILED.scan_window(data)  # type: ignore[union-attr]
    _, k, nstarts, stop_at, stop, corrupt, spans, entries, slow, objects = scanned
    assert (k, nstarts, stop_at, stop, corrupt, slow, objects) == (40, 40, len(data), 0, False, [], None)
    assert [data[a : a + n] for a, n in spans] == [b"Other", b"T"]
    assert len(entries) == 40 * 3 * 16  # UNIQ_KEY, k1, k2 per record: (record, hash) int64 pairs
    starts, _, _ = rs.walk(data)
    cols, count, _ = rs.scan(rs.pad(data), len(data), starts)
    assert count == 40
    rs.MIN_COLUMNAR_RECORDS = rs.MIN_COMPILED_COLUMNAR_RECORDS = 16
    batch, used, why = rs.parse_window(data, 7)
    assert isinstance(batch, DispatchBatch) and batch._entries is not None  # the compiled batch
    assert (len(batch), used, why) == (40, len(data), None)
    for name in ("starts", "size", "queue_id", "queue_offset", "store_ts", "topic_start", "props_end"):
        assert getattr(batch.columns, name).tolist() == getattr(cols, name).tolist()
    both(data, 7, None, 16, 16)
    # below the threshold: the requests as objects made in C
    rs.MIN_COMPILED_COLUMNAR_RECORDS = 41
    reqs, used, why = rs.parse_window(data, 7)
    assert (
        isinstance(reqs, rs.RequestList)
        and reqs.index_entries is not None
        and (len(reqs), used, why) == (40, len(data), None)
    )
    assert speedups.COMPILED.scan_window(data, 7, 41)[9][0][3].commit_log_offset == 7 + starts[3]  # type: ignore[union-attr]
    both(data, 7, None, 1 << 30, 41)


@pytest.mark.parametrize("topics", [3, 1000, 1024, 1025, 1500])
def test_windows_of_many_topics(thresholds: None, topics: int) -> None:
    """Topics told apart in C up to 1,024 per window (a hash table of them); a window of more
    goes the pure way. The answer is the pure one either way."""
    rnd = random.Random(topics)
    names = [f"t{i}" for i in range(topics)]
    data = b"".join(
        rec.encode_record(
            topic=rnd.choice(names) if i >= topics else names[i],
            body=b"x",
            properties=b"TAGS\x01A\x02UNIQ_KEY\x01u%d" % i,
            queue_offset=i,
        )
        for i in range(topics + 200)
    )
    scanned = speedups.COMPILED.scan_window(data)  # type: ignore[union-attr]
    if topics <= 1024:
        assert scanned is not None and len(scanned[6]) == topics and scanned[1] == topics + 200
    else:
        assert scanned is None
    for columnar in (1, 1 << 30):
        for compiled_from in (1, 1 << 30):
            both(data, 0, None, columnar, compiled_from)
