"""Fuzzing the body decoders: CommitLog records (``decode_record`` never raises: a bad record is a
CORRUPT view), pull bodies as the client decodes them (poison records, never an exception),
batch bodies (MessageIllegal only), heartbeat bodies (ValueError only) and fastjson's readers
(ValueError only; BodyFormatError from ``loads_body``), in bounded time and memory."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from _support.fuzz import fuzz, only, peak_allocation
from rocketq.client.consumer_core import decode_pull_body
from rocketq.errors import BodyFormatError, MessageIllegal
from rocketq.protocol import fastjson
from rocketq.protocol.batch import BatchEntry, decode_batch, encode_batch
from rocketq.protocol.heartbeat import parse_heartbeat
from rocketq.protocol.record import RecordKind, RecordView, decode_record, encode_record, view_to_message

# every test here runs with the compiled codecs and with the pure-Python ones
pytestmark = pytest.mark.usefixtures("codec_impl")


def mutate(data: bytes, draw: st.DrawFn) -> bytes:
    buf = bytearray(data)
    for _ in range(draw(st.integers(0, 6))):
        if not buf:
            break
        at = draw(st.integers(0, len(buf) - 1))
        kind = draw(st.sampled_from(["flip", "cut", "int"]))
        if kind == "flip":
            buf[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "cut":
            del buf[at:]
        else:
            buf[at : at + 4] = struct.pack(">i", draw(st.sampled_from([-1, 0, 2**31 - 1, 1 << 24])))
    return bytes(buf)


@st.composite
def mutated_records(draw: st.DrawFn) -> bytes:
    record = encode_record(
        topic=draw(st.text("abcXYZ019_-%|", min_size=1, max_size=140)),
        body=draw(st.binary(max_size=100)),
        properties=draw(st.binary(max_size=60)),
        sys_flag=draw(st.sampled_from([0, 1, 0x10, 0x20, 0x30, 0x101])),
        queue_offset=draw(st.integers(0, 2**40)),
        append_prop_crc=draw(st.booleans()),
    )
    return mutate(record * draw(st.integers(1, 2)), draw)


def check_view(view: RecordView, data: bytes) -> None:
    assert isinstance(view, RecordView)
    if view.kind is RecordKind.MESSAGE:
        assert 0 < view.size <= len(data)
        only((ValueError,), view_to_message, view)  # host bytes and properties as stored


@fuzz(300)
@given(st.one_of(st.binary(max_size=400), mutated_records()), st.integers(0, 64), st.booleans())
def test_decode_record_never_raises(data: bytes, pos: int, check_crc: bool) -> None:
    for at in {0, min(pos, len(data))}:
        check_view(decode_record(data, at, check_crc=check_crc, verify_prop_crc=check_crc), data)


@fuzz(100)
@given(st.integers(-(2**31), 2**31 - 1), st.binary(max_size=200))
def test_a_record_declaring_a_huge_size_allocates_nothing_for_it(size: int, tail: bytes) -> None:
    data = struct.pack(">i", size) + tail
    assert peak_allocation(decode_record, data) < 64 * 1024 + 4 * len(data)


@fuzz(200)
@given(st.one_of(st.binary(max_size=400), mutated_records()))
def test_pull_bodies_decode_into_messages_and_poison_never_an_exception(body: bytes) -> None:
    decoded = decode_pull_body(body)
    assert len(decoded.messages) + len(decoded.poison) <= max(1, len(body))


@st.composite
def mutated_batches(draw: st.DrawFn) -> bytes:
    entries = [
        BatchEntry(draw(st.binary(max_size=40)), draw(st.binary(max_size=30)), draw(st.integers(0, 10)))
        for _ in range(draw(st.integers(1, 3)))
    ]
    return mutate(encode_batch(entries), draw)


@fuzz(300)
@given(st.one_of(st.binary(max_size=300), mutated_batches()))
def test_batch_bodies_decode_or_raise_message_illegal(data: bytes) -> None:
    entries = only((MessageIllegal,), decode_batch, data)
    if entries is not None:
        assert sum(len(e.body) + len(e.properties) for e in entries) <= len(data)
    assert peak_allocation(decode_batch, data) < 64 * 1024 + 4 * len(data)


json_text = st.recursive(
    st.sampled_from(["0", "-1", "1e999", "true", "null", '"x"', '"\\ud800"', "{}", "[]", "1.5"]),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda xs: "[" + ",".join(xs) + "]"),
        st.lists(st.tuples(st.sampled_from(['"a"', "0", "12", '{"b":1}', "x"]), inner), max_size=3).map(
            lambda kvs: "{" + ",".join(f"{k}:{v}" for k, v in kvs) + "}"
        ),
    ),
    max_leaves=12,
)


@fuzz(300)
@given(st.one_of(st.text(max_size=200), json_text, json_text.map(lambda t: t[: len(t) // 2])))
def test_fastjson_readers_raise_only_value_error(text: str) -> None:
    only((ValueError,), fastjson.loads, text)
    only((ValueError,), fastjson.loads_object_keys, text)
    only((ValueError,), fastjson.OBJECT_KEYS.loads, text.encode("utf-8", "surrogatepass"))
    only((BodyFormatError,), fastjson.loads_body, text.encode("utf-8", "surrogatepass"), "fuzzed")


def test_deeply_nested_json_is_a_value_error_not_a_recursion_error() -> None:
    for text in ("[" * 100_000, '{"a":' * 100_000, "{0:" * 100_000):
        assert only((ValueError,), fastjson.loads, text) is None
        assert only((ValueError,), fastjson.loads_object_keys, text) is None
    assert only((ValueError,), parse_heartbeat, b"[" * 100_000) is None


@fuzz(200)
@given(st.one_of(st.binary(max_size=300), json_text.map(str.encode)))
def test_heartbeat_bodies_raise_only_value_error(body: bytes) -> None:
    only((ValueError,), parse_heartbeat, body)
