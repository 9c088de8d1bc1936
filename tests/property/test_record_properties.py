"""Property tests for the CommitLog record codec."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _support.examples import examples
from _support.java_hash import reference_java_hash
from rocketq.message import (
    decode_properties,
    encode_properties,
    java_string_hash,
    java_string_hash_once,
    java_string_hashes,
)
from rocketq.protocol.record import (
    BORNHOST_V6_FLAG,
    STOREHOSTADDRESS_V6_FLAG,
    RecordKind,
    RecordView,
    decode_record,
    encode_blank,
    encode_record,
)

# every test here runs with the compiled codecs and with the pure-Python ones
pytestmark = pytest.mark.usefixtures("codec_impl")

I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)

TOPIC_ALPHABET = "%|abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"
topics = st.text(alphabet=TOPIC_ALPHABET, min_size=1, max_size=300)

# Property names and values: any text without the two separators (surrogates cannot be UTF-8).
prop_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02"),
    min_size=1,
    max_size=16,
)
prop_maps = st.dictionaries(prop_text, prop_text, max_size=6)

ipv4_hosts = st.builds(lambda ip, port: ip + struct.pack(">i", port), st.binary(min_size=4, max_size=4), I32)
ipv6_hosts = st.builds(
    lambda ip, port: ip + struct.pack(">i", port), st.binary(min_size=16, max_size=16), I32
)
hosts = st.one_of(ipv4_hosts, ipv6_hosts)


@dataclass(frozen=True)
class Msg:
    topic: str
    body: bytes
    props: dict[str, str]
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: bytes
    store_timestamp: int
    store_host: bytes
    reconsume_times: int
    prepared_transaction_offset: int

    def kwargs(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "body": self.body,
            "properties": encode_properties(self.props).encode("utf-8"),
            "queue_id": self.queue_id,
            "flag": self.flag,
            "queue_offset": self.queue_offset,
            "physical_offset": self.physical_offset,
            "sys_flag": self.sys_flag,
            "born_timestamp": self.born_timestamp,
            "born_host": self.born_host,
            "store_timestamp": self.store_timestamp,
            "store_host": self.store_host,
            "reconsume_times": self.reconsume_times,
            "prepared_transaction_offset": self.prepared_transaction_offset,
        }

    def encode(self, *, prop_crc: bool = False) -> bytes:
        return encode_record(**self.kwargs(), append_prop_crc=prop_crc)

    def expected_sys_flag(self) -> int:
        flag = self.sys_flag & ~(BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)
        if len(self.born_host) == 20:
            flag |= BORNHOST_V6_FLAG
        if len(self.store_host) == 20:
            flag |= STOREHOSTADDRESS_V6_FLAG
        return flag


messages = st.builds(
    Msg,
    topic=topics,
    body=st.binary(max_size=600),
    props=prop_maps,
    queue_id=I32,
    flag=I32,
    queue_offset=I64,
    physical_offset=I64,
    sys_flag=I32,
    born_timestamp=I64,
    born_host=hosts,
    store_timestamp=I64,
    store_host=hosts,
    reconsume_times=I32,
    prepared_transaction_offset=I64,
)

# Small messages for the per-byte loops, so every example stays cheap.
small_messages = st.builds(
    Msg,
    topic=st.text(alphabet=TOPIC_ALPHABET, min_size=1, max_size=140),
    body=st.binary(max_size=40),
    props=st.dictionaries(prop_text, prop_text, max_size=2),
    queue_id=I32,
    flag=I32,
    queue_offset=I64,
    physical_offset=I64,
    sys_flag=I32,
    born_timestamp=I64,
    born_host=hosts,
    store_timestamp=I64,
    store_host=hosts,
    reconsume_times=I32,
    prepared_transaction_offset=I64,
)


def view_fields(view: RecordView) -> tuple[Any, ...]:
    return (
        view.size, view.body_crc, view.queue_id, view.flag, view.queue_offset, view.physical_offset,
        view.sys_flag, view.born_timestamp, view.born_host, view.store_timestamp, view.store_host,
        view.reconsume_times, view.prepared_transaction_offset, view.body, view.topic, view.properties,
        view.v2,
    )  # fmt: skip


@settings(max_examples=examples(150), deadline=None)
@given(messages, st.booleans())
def test_encode_decode_round_trip(msg: Msg, prop_crc: bool) -> None:
    raw = msg.encode(prop_crc=prop_crc)
    topic_b = msg.topic.encode()
    props_b = encode_properties(msg.props).encode()
    v2 = len(msg.topic) > 127
    expected_props_len = len(props_b)
    if prop_crc:
        expected_props_len += 20 + (1 if props_b and not props_b.endswith(b"\x02") else 0)
    expected_len = (
        72 + len(msg.born_host) + len(msg.store_host) + len(msg.body) + (2 if v2 else 1) + len(topic_b) + 2
    ) + expected_props_len
    assert len(raw) == expected_len
    assert struct.unpack_from(">i", raw, 0)[0] == len(raw)

    view = decode_record(raw, check_crc=True, verify_prop_crc=prop_crc)
    assert view.kind is RecordKind.MESSAGE, view.reason
    assert view.size == len(raw)
    assert view.v2 is v2
    assert view.topic == msg.topic
    assert view.body == msg.body
    assert view.body_length == len(msg.body)
    assert view.body_crc == zlib.crc32(msg.body) & 0x7FFFFFFF
    assert view.queue_id == msg.queue_id
    assert view.flag == msg.flag
    assert view.queue_offset == msg.queue_offset
    assert view.physical_offset == msg.physical_offset
    assert view.sys_flag == msg.expected_sys_flag()
    assert view.born_timestamp == msg.born_timestamp
    assert view.born_host == msg.born_host
    assert view.store_timestamp == msg.store_timestamp
    assert view.store_host == msg.store_host
    assert view.reconsume_times == msg.reconsume_times
    assert view.prepared_transaction_offset == msg.prepared_transaction_offset
    decoded_props = decode_properties(view.properties)
    if prop_crc:
        digits = decoded_props.pop("__CRC32#")
        assert int(digits[::-1]) == zlib.crc32(raw[:-20]) & 0x7FFFFFFF
    else:
        assert view.properties == props_b.decode()
    assert decoded_props == msg.props


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(messages, min_size=1, max_size=4), st.integers(0, 64))
def test_records_back_to_back_then_blank(msgs: list[Msg], tail: int) -> None:
    raws = [m.encode() for m in msgs]
    buf = b"".join(raws) + encode_blank(8 + tail) + bytes(tail)
    pos = 0
    for m, raw in zip(msgs, raws, strict=True):
        view = decode_record(buf, pos)
        assert view.kind is RecordKind.MESSAGE, view.reason
        assert view.size == len(raw)
        assert view.body == m.body
        pos += view.size
    assert decode_record(buf, pos).kind is RecordKind.BLANK


record_kinds = set(RecordKind)


@settings(max_examples=examples(400), deadline=None)
@given(st.binary(max_size=300), st.integers(0, 310), st.booleans(), st.booleans())
def test_decode_arbitrary_bytes_never_raises(data: bytes, pos: int, check_crc: bool, verify: bool) -> None:
    view = decode_record(data, pos, check_crc=check_crc, verify_prop_crc=verify)
    assert view.kind in record_kinds
    if view.kind is RecordKind.CORRUPT:
        assert view.reason
    if view.kind is RecordKind.MESSAGE:
        assert 0 < view.size <= len(data) - pos


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    small_messages,
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
    st.booleans(),
)
def test_decode_mutated_record_never_raises(msg: Msg, edits: list[tuple[int, int]], verify: bool) -> None:
    buf = bytearray(msg.encode(prop_crc=verify))
    for index, value in edits:
        buf[index % len(buf)] = value
    view = decode_record(bytes(buf), verify_prop_crc=verify)
    assert view.kind in record_kinds
    if view.kind is RecordKind.CORRUPT:
        assert view.reason
    if view.kind is RecordKind.MESSAGE:
        assert view.size == len(buf)


@settings(max_examples=examples(40), deadline=None)
@given(small_messages, st.booleans())
def test_truncated_record_is_never_a_message(msg: Msg, prop_crc: bool) -> None:
    raw = msg.encode(prop_crc=prop_crc)
    for n in range(len(raw)):
        view = decode_record(raw[:n], verify_prop_crc=prop_crc)
        assert view.kind is not RecordKind.MESSAGE, n
        if n >= 8:
            assert view.kind is RecordKind.CORRUPT, n


@settings(max_examples=examples(150), deadline=None)
@given(messages.filter(lambda m: len(m.body) > 0), st.data())
def test_body_byte_flip_is_corrupt_with_check_crc(msg: Msg, data: st.DataObject) -> None:
    raw = msg.encode()
    view = decode_record(raw)
    index = data.draw(st.integers(view.body_offset, view.body_offset + len(msg.body) - 1), label="index")
    mask = data.draw(st.integers(1, 255), label="mask")
    bad = bytearray(raw)
    bad[index] ^= mask
    corrupted = decode_record(bytes(bad), check_crc=True)
    assert corrupted.kind is RecordKind.CORRUPT
    assert "CRC" in corrupted.reason
    # Without the check the damaged body is handed out as is.
    unchecked = decode_record(bytes(bad), check_crc=False)
    assert unchecked.kind is RecordKind.MESSAGE
    assert unchecked.body == bytes(bad[view.body_offset : view.body_offset + len(msg.body)])


@settings(max_examples=examples(300), deadline=None)
@given(messages, st.data(), st.booleans())
def test_prop_crc_catches_any_single_byte_change(msg: Msg, data: st.DataObject, check_crc: bool) -> None:
    raw = msg.encode(prop_crc=True)
    original = decode_record(raw, verify_prop_crc=True)
    assert original.kind is RecordKind.MESSAGE
    index = data.draw(st.integers(0, len(raw) - 1), label="index")
    value = data.draw(st.integers(0, 255).filter(lambda v: v != raw[index]), label="value")
    bad = bytearray(raw)
    bad[index] = value
    view = decode_record(bytes(bad), check_crc=check_crc, verify_prop_crc=True)
    assert view.kind is not RecordKind.MESSAGE or view_fields(view) == view_fields(original)
    if index >= 8:
        assert view.kind is RecordKind.CORRUPT
    else:
        assert view.kind in (RecordKind.END, RecordKind.BLANK, RecordKind.CORRUPT)


@settings(max_examples=examples(30), deadline=None)
@given(small_messages)
def test_prop_crc_catches_every_single_byte_flip(msg: Msg) -> None:
    raw = msg.encode(prop_crc=True)
    for index in range(len(raw)):
        bad = bytearray(raw)
        bad[index] ^= 0x5A
        view = decode_record(bytes(bad), check_crc=False, verify_prop_crc=True)
        assert view.kind is not RecordKind.MESSAGE, index


@given(st.text(max_size=300) | st.text(alphabet="0123456789ABCDEF#%_-", max_size=300))
def test_java_string_hash_forms_agree_with_string_hashcode(text: str) -> None:
    """Tags, index keys and sharding keys hash as Java's String.hashCode, cached or not."""
    expected = reference_java_hash(text)
    assert java_string_hash_once(text) == expected
    assert java_string_hash(text) == expected
    assert java_string_hashes([text] * 9) == [expected] * 9  # the vectorised form
