"""The compiled codec functions (``rocketq._speedups``) against their pure-Python originals: the
same value, or the same exception, for any input, well-formed or not (skipped, saying why, when
the compiled module is not in use)."""

from __future__ import annotations

import array
import struct
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _support.codecs import functions
from rocketq import speedups
from rocketq.protocol.record import RecordKind, RecordView, encode_record

pytestmark = pytest.mark.skipif(
    speedups.COMPILED is None, reason=f"compiled codecs not in use: {speedups.REASON}"
)

I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
hosts = st.one_of(
    st.builds(lambda ip, port: ip + struct.pack(">i", port), st.binary(min_size=4, max_size=4), I32),
    st.builds(lambda ip, port: ip + struct.pack(">i", port), st.binary(min_size=16, max_size=16), I32),
)
# property strings with separators in odd places, empty keys and values, non-ASCII text
prop_chars = st.sampled_from(["\x01", "\x02", "a", "K", "é", "中", "\U0001f600", " ", "="])
prop_texts = st.lists(prop_chars, max_size=40).map("".join)


def outcome(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[str, Any]:
    try:
        return "value", fn(*args, **kwargs)
    except Exception as exc:  # the same exception type and message both ways
        return type(exc).__name__, str(exc)


def both(name: str, *args: Any, **kwargs: Any) -> tuple[str, Any]:
    compiled = outcome(functions("compiled")[name], *args, **kwargs)
    pure = outcome(functions("pure")[name], *args, **kwargs)
    assert compiled == pure
    return compiled


@st.composite
def records(draw: st.DrawFn) -> bytes:
    raw = encode_record(
        topic=draw(st.text("abcXYZ019_-%|", min_size=1, max_size=140)),
        body=draw(st.binary(max_size=80)),
        properties=draw(prop_texts).encode("utf-8") + draw(st.binary(max_size=6)),
        queue_id=draw(I32),
        flag=draw(I32),
        queue_offset=draw(I64),
        physical_offset=draw(I64),
        sys_flag=draw(st.sampled_from([0, 1, 0x4, 0x8, 0xC, 0x101, 0x300])),
        born_timestamp=draw(I64),
        born_host=draw(hosts),
        store_timestamp=draw(I64),
        store_host=draw(hosts),
        reconsume_times=draw(I32),
        prepared_transaction_offset=draw(I64),
        append_prop_crc=draw(st.booleans()),
    )
    buf = bytearray(raw * draw(st.integers(1, 2)))
    for _ in range(draw(st.integers(0, 3))):
        if buf:
            at = draw(st.integers(0, len(buf) - 1))
            buf[at] = draw(st.integers(0, 255))
    if draw(st.booleans()):
        del buf[draw(st.integers(0, len(buf))) :]
    return bytes(buf)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records() | st.binary(max_size=200),
    st.integers(-4, 400),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.sampled_from([bytes, bytearray, memoryview]),
)
def test_decode_record_and_view_to_message_agree(
    data: bytes, pos: int, check_crc: bool, read_body: bool, verify: bool, kind: type
) -> None:
    buf = kind(data)
    got, view = both(
        "decode_record", buf, pos, check_crc=check_crc, read_body=read_body, verify_prop_crc=verify
    )
    if got == "value" and view.kind is RecordKind.MESSAGE:
        both("view_to_message", view)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([b"", b"\x7f\x00\x00\x01\x00\x00\x2a\x9f", b"\x01\x02\x03", bytes(20), bytes(9)]),
    st.sampled_from([b"", b"\x0a\x00\x00\x05\xff\xff\xff\xff", bytes(range(20)), b"\x00" * 5]),
    st.one_of(st.none(), st.binary(max_size=8), st.just(bytearray(b"ab"))),
    st.one_of(prop_texts, st.just(b"k\x01v")),
    st.one_of(I64, st.just(2**64), st.just(-(2**63) - 1)),
    st.one_of(st.just(RecordKind.MESSAGE), st.just(RecordKind.CORRUPT)),
)
def test_view_to_message_agrees_on_any_view(
    born: bytes, store: bytes, body: Any, props: Any, physical: int, kind: RecordKind
) -> None:
    view = RecordView(
        kind, 100, "", 5, 1, 2, 3, physical, 0, 4, born, 6, store, 7, 8, 9, 10, body, "T", props
    )
    both("view_to_message", view)


def test_unusual_arguments_take_the_pure_path_and_its_errors() -> None:
    raw = encode_record(topic="T", body=b"hello!!!", properties=b"a\x01b\x02")
    assert len(raw) % 4 == 0
    for args, kwargs in [
        ((raw,), {}),
        ((raw, True), {}),  # a bool is an int: position 1
        ((raw, 0), {"check_crc": 0, "read_body": []}),
        ((), {"buf": raw}),
        ((raw,), {"pos": 0}),
        ((raw, 0, 1), {}),
        ((raw,), {"bogus": 1}),
        ((raw, "0"), {}),
        ((raw, 2**70), {}),
        ((raw, -(2**70)), {}),
        ((array.array("B", raw),), {}),
        ((array.array("i", raw),), {}),  # len() counts items, not bytes
        ((memoryview(raw).cast("I"),), {}),
        ((memoryview(raw * 2)[::2],), {}),  # not contiguous
        ((memoryview(raw).cast("B", (1, len(raw))),), {}),  # two dimensions
        (("text",), {}),
        ((None,), {}),
        ((), {}),
    ]:
        both("decode_record", *args, **kwargs)
    both("view_to_message", "not a view")
