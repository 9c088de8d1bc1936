"""CommitLog record codec: spec check vectors, hand-built golden records and decoder edge cases."""

from __future__ import annotations

import struct
import subprocess
import sys
import zlib
from dataclasses import asdict, dataclass
from typing import Any

import pytest

from _support.rocketmq_fixture import assemble_record
from rocketq.message import decode_properties
from rocketq.protocol import record as rec
from rocketq.protocol.record import (
    BLANK_MAGIC_CODE,
    BORNHOST_V6_FLAG,
    COMPRESSED_FLAG,
    CRC32_RESERVED_LEN,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    MULTI_TAGS_FLAG,
    STOREHOSTADDRESS_V6_FLAG,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    RecordKind,
    RecordView,
    body_crc,
    calc_msg_length,
    decode_record,
    encode_blank,
    encode_record,
    host_width,
    properties_with_crc_slot,
    stamp_prop_crc,
    transaction_type,
    write_record,
)

# every test here runs with the compiled codecs and with the pure-Python ones
pytestmark = pytest.mark.usefixtures("codec_impl")

# Magic codes exactly as they appear on disk (spec §1.1), spelled out independently of the codec.
DISK_MAGIC_V1 = bytes([0xDA, 0xA3, 0x20, 0xA7])
DISK_MAGIC_V2 = bytes([0xDA, 0xA3, 0x20, 0xAB])
DISK_MAGIC_BLANK = bytes([0xCB, 0xD4, 0x31, 0x94])

IPV4_BORN = bytes([10, 0, 0, 7]) + struct.pack(">i", 53211)
IPV4_STORE = bytes([192, 168, 1, 20]) + struct.pack(">i", 10911)
IPV6_BORN = bytes.fromhex("20010db8000000000000000000000001") + struct.pack(">i", 40000)
IPV6_STORE = bytes.fromhex("fe800000000000000211223344556677") + struct.pack(">i", 10912)


def masked_crc(data: bytes) -> int:
    return zlib.crc32(data) & 0x7FFFFFFF


@dataclass(frozen=True)
class Fields:
    """The caller-supplied fields of one record."""

    topic: str = "TopicTest"
    body: bytes = b"Hello RocketMQ"
    properties: bytes = b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02"
    queue_id: int = 3
    flag: int = -17
    queue_offset: int = 123_456_789_012
    physical_offset: int = 1_073_741_824 + 4096
    sys_flag: int = TRANSACTION_COMMIT_TYPE | COMPRESSED_FLAG
    born_timestamp: int = 1_700_000_000_123
    born_host: bytes = IPV4_BORN
    store_timestamp: int = 1_700_000_000_456
    store_host: bytes = IPV4_STORE
    reconsume_times: int = 2
    prepared_transaction_offset: int = 987_654_321

    def kwargs(self) -> dict[str, Any]:
        return asdict(self)

    def encode(self, **extra: Any) -> bytes:
        return encode_record(**self.kwargs(), **extra)

    def hand_built(self, *, v2: bool) -> bytes:
        sys_flag = self.sys_flag
        if len(self.born_host) == 20:
            sys_flag |= 0x10
        if len(self.store_host) == 20:
            sys_flag |= 0x20
        return assemble_record(
            magic=DISK_MAGIC_V2 if v2 else DISK_MAGIC_V1,
            body_crc_value=masked_crc(self.body),
            queue_id=self.queue_id,
            flag=self.flag,
            queue_offset=self.queue_offset,
            physical_offset=self.physical_offset,
            sys_flag=sys_flag,
            born_timestamp=self.born_timestamp,
            born_host=self.born_host,
            store_timestamp=self.store_timestamp,
            store_host=self.store_host,
            reconsume_times=self.reconsume_times,
            prepared_transaction_offset=self.prepared_transaction_offset,
            body=self.body,
            topic=self.topic.encode("utf-8"),
            properties=self.properties,
            topic_len_width=2 if v2 else 1,
        )


def assert_fields(view: RecordView, fields: Fields, raw: bytes, *, v2: bool) -> None:
    assert view.kind is RecordKind.MESSAGE, view.reason
    assert view.reason == ""
    assert view.size == len(raw)
    assert view.body_crc == masked_crc(fields.body)
    assert view.queue_id == fields.queue_id
    assert view.flag == fields.flag
    assert view.queue_offset == fields.queue_offset
    assert view.physical_offset == fields.physical_offset
    assert view.sys_flag == struct.unpack_from(">i", raw, 36)[0]
    assert view.born_timestamp == fields.born_timestamp
    assert view.born_host == fields.born_host
    assert view.store_timestamp == fields.store_timestamp
    assert view.store_host == fields.store_host
    assert view.reconsume_times == fields.reconsume_times
    assert view.prepared_transaction_offset == fields.prepared_transaction_offset
    assert view.body == fields.body
    assert view.body_length == len(fields.body)
    assert raw[view.body_offset : view.body_offset + view.body_length] == fields.body
    assert view.topic == fields.topic
    assert view.properties == fields.properties.decode("utf-8")
    assert view.v2 is v2


# -- check vectors and constants -----------------------------------------------------------
def test_body_crc_check_vector() -> None:
    assert body_crc(b"Hello RocketMQ") == 1774740973


def test_body_crc_is_masked_to_31_bits() -> None:
    # Find an input whose raw CRC-32 has the top bit set, so the mask actually matters.
    data = next(bytes([i]) * 3 for i in range(256) if zlib.crc32(bytes([i]) * 3) & 0x80000000)
    assert body_crc(data) == zlib.crc32(data) - 0x80000000
    assert 0 <= body_crc(data) < 2**31
    assert body_crc(b"") == 0


def test_magic_codes_as_signed_ints() -> None:
    assert MESSAGE_MAGIC_CODE == -626843481
    assert MESSAGE_MAGIC_CODE_V2 == -626843477
    assert BLANK_MAGIC_CODE == -875286124


@pytest.mark.parametrize(
    ("value", "disk"),
    [
        (MESSAGE_MAGIC_CODE, DISK_MAGIC_V1),
        (MESSAGE_MAGIC_CODE_V2, DISK_MAGIC_V2),
        (BLANK_MAGIC_CODE, DISK_MAGIC_BLANK),
    ],
)
def test_magic_bytes_on_disk(value: int, disk: bytes) -> None:
    assert struct.pack(">i", value) == disk


def test_encoded_records_carry_the_disk_magic() -> None:
    assert encode_record(topic="T", body=b"x")[4:8] == DISK_MAGIC_V1
    assert encode_record(topic="T" * 128, body=b"x")[4:8] == DISK_MAGIC_V2
    assert encode_blank(64)[4:8] == DISK_MAGIC_BLANK


def test_sysflag_constants_match_spec() -> None:
    assert COMPRESSED_FLAG == 0x1
    assert MULTI_TAGS_FLAG == 0x2
    assert (TRANSACTION_NOT_TYPE, TRANSACTION_PREPARED_TYPE) == (0x0, 0x4)
    assert (TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE) == (0x8, 0xC)
    assert BORNHOST_V6_FLAG == 0x10
    assert STOREHOSTADDRESS_V6_FLAG == 0x20
    assert CRC32_RESERVED_LEN == 20


# -- calMsgLength -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("body_len", "topic_len", "props_len"),
    [(0, 1, 0), (14, 9, 20), (4 * 1024 * 1024, 127, 32767), (1, 255, 3)],
)
def test_calc_msg_length_v1_ipv4(body_len: int, topic_len: int, props_len: int) -> None:
    assert calc_msg_length(0, body_len, topic_len, props_len) == 91 + body_len + topic_len + props_len


@pytest.mark.parametrize(
    ("sys_flag", "extra"),
    [
        (0, 0),
        (BORNHOST_V6_FLAG, 12),
        (STOREHOSTADDRESS_V6_FLAG, 12),
        (BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG, 24),
        # Other bits do not change the width.
        (TRANSACTION_ROLLBACK_TYPE | COMPRESSED_FLAG | 0x740, 0),
        (0x7FF, 24),
    ],
)
@pytest.mark.parametrize("v2", [False, True])
def test_calc_msg_length_host_widths_and_version(sys_flag: int, extra: int, v2: bool) -> None:
    expected = 91 + 10 + 20 + 30 + extra + (1 if v2 else 0)
    assert calc_msg_length(sys_flag, 10, 20, 30, v2=v2) == expected


def test_calc_msg_length_clamps_negative_lengths() -> None:
    assert calc_msg_length(0, -5, 4, -1) == 91 + 4


def test_host_width() -> None:
    assert host_width(0, store=False) == 8
    assert host_width(0, store=True) == 8
    assert host_width(BORNHOST_V6_FLAG, store=False) == 20
    assert host_width(BORNHOST_V6_FLAG, store=True) == 8
    assert host_width(STOREHOSTADDRESS_V6_FLAG, store=False) == 8
    assert host_width(STOREHOSTADDRESS_V6_FLAG, store=True) == 20


# -- transaction type -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("sys_flag", "expected"),
    [
        (0x0, TRANSACTION_NOT_TYPE),
        (0x4, TRANSACTION_PREPARED_TYPE),
        (0x8, TRANSACTION_COMMIT_TYPE),
        (0xC, TRANSACTION_ROLLBACK_TYPE),
        (0x4 | 0x1 | 0x2 | 0x10 | 0x20 | 0x40 | 0x80 | 0x700, TRANSACTION_PREPARED_TYPE),
        (0x8 | 0x33, TRANSACTION_COMMIT_TYPE),
        (0xFFFFFFF3, TRANSACTION_NOT_TYPE),
        (-1, TRANSACTION_ROLLBACK_TYPE),
    ],
)
def test_transaction_type(sys_flag: int, expected: int) -> None:
    assert transaction_type(sys_flag) == expected


@pytest.mark.parametrize(
    "tran",
    [TRANSACTION_NOT_TYPE, TRANSACTION_PREPARED_TYPE, TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE],
)
def test_transaction_type_survives_round_trip(tran: int) -> None:
    raw = encode_record(topic="T", body=b"b", sys_flag=tran | MULTI_TAGS_FLAG)
    view = decode_record(raw)
    assert view.kind is RecordKind.MESSAGE
    assert transaction_type(view.sys_flag) == tran
    assert view.sys_flag & MULTI_TAGS_FLAG


# -- blank marker -------------------------------------------------------------------------
def test_blank_marker_layout() -> None:
    raw = encode_blank(1234)
    assert len(raw) == 8
    assert raw == struct.pack(">i", 1234) + DISK_MAGIC_BLANK
    assert raw == bytes([0, 0, 0x04, 0xD2, 0xCB, 0xD4, 0x31, 0x94])


def test_blank_marker_decodes_as_blank() -> None:
    view = decode_record(encode_blank(4096) + bytes(4088))
    assert view.kind is RecordKind.BLANK
    assert view.size == 0


def test_blank_marker_at_offset_inside_segment() -> None:
    first = encode_record(topic="T", body=b"abc")
    segment = first + encode_blank(200 - len(first)) + bytes(200 - len(first) - 8)
    assert decode_record(segment).kind is RecordKind.MESSAGE
    assert decode_record(segment, len(first)).kind is RecordKind.BLANK


# -- golden records built by hand ---------------------------------------------------------
def test_golden_v1_ipv4() -> None:
    fields = Fields()
    expected = fields.hand_built(v2=False)
    assert len(expected) == 91 + 14 + 9 + len(fields.properties)
    # Spot-check the absolute offsets of the IPv4/IPv4 column of the spec table.
    assert struct.unpack_from(">i", expected, 0)[0] == len(expected)
    assert expected[4:8] == DISK_MAGIC_V1
    assert struct.unpack_from(">i", expected, 8)[0] == 1774740973
    assert struct.unpack_from(">i", expected, 12)[0] == 3
    assert struct.unpack_from(">i", expected, 16)[0] == -17
    assert struct.unpack_from(">q", expected, 20)[0] == 123_456_789_012
    assert struct.unpack_from(">q", expected, 28)[0] == 1_073_741_824 + 4096
    assert struct.unpack_from(">i", expected, 36)[0] == 0x9
    assert struct.unpack_from(">q", expected, 40)[0] == 1_700_000_000_123
    assert expected[48:56] == IPV4_BORN
    assert struct.unpack_from(">q", expected, 56)[0] == 1_700_000_000_456
    assert expected[64:72] == IPV4_STORE
    assert struct.unpack_from(">i", expected, 72)[0] == 2
    assert struct.unpack_from(">q", expected, 76)[0] == 987_654_321
    assert struct.unpack_from(">i", expected, 84)[0] == 14
    assert expected[88:102] == b"Hello RocketMQ"
    assert expected[102] == 9
    assert expected[103:112] == b"TopicTest"

    raw = fields.encode()
    assert raw == expected
    view = decode_record(raw)
    assert_fields(view, fields, raw, v2=False)
    assert view.body_offset == 88
    assert view.sys_flag == 0x9


@pytest.mark.parametrize(
    ("born", "store", "bits"),
    [
        (IPV6_BORN, IPV6_STORE, 0x30),
        (IPV6_BORN, IPV4_STORE, 0x10),
        (IPV4_BORN, IPV6_STORE, 0x20),
    ],
)
def test_golden_v1_ipv6_hosts(born: bytes, store: bytes, bits: int) -> None:
    fields = Fields(born_host=born, store_host=store)
    expected = fields.hand_built(v2=False)
    bh = len(born)
    sh = len(store)
    assert len(expected) == 72 + bh + sh + 14 + 1 + 9 + 2 + len(fields.properties)
    assert struct.unpack_from(">i", expected, 36)[0] & 0x30 == bits
    assert expected[48 : 48 + bh] == born
    assert struct.unpack_from(">q", expected, 48 + bh)[0] == 1_700_000_000_456
    assert expected[56 + bh : 56 + bh + sh] == store
    assert struct.unpack_from(">i", expected, 68 + bh + sh)[0] == 14

    raw = fields.encode()
    assert raw == expected
    view = decode_record(raw)
    assert_fields(view, fields, raw, v2=False)
    assert view.sys_flag & 0x30 == bits
    assert view.sys_flag & 0xF == 0x9
    assert view.body_offset == 72 + bh + sh


def test_golden_v2_long_topic() -> None:
    topic = "%RETRY%" + "g" * 200  # 207 chars: longer than 127, so V2
    fields = Fields(topic=topic)
    expected = fields.hand_built(v2=True)
    assert len(expected) == 92 + 14 + len(topic) + len(fields.properties)
    assert expected[4:8] == DISK_MAGIC_V2
    assert expected[102:104] == struct.pack(">h", 207) == b"\x00\xcf"
    assert expected[104 : 104 + 207] == topic.encode()

    raw = fields.encode()
    assert raw == expected
    view = decode_record(raw)
    assert_fields(view, fields, raw, v2=True)


def test_golden_v2_with_ipv6_hosts() -> None:
    fields = Fields(topic="t" * 300, born_host=IPV6_BORN, store_host=IPV6_STORE)
    expected = fields.hand_built(v2=True)
    raw = fields.encode()
    assert raw == expected
    assert_fields(decode_record(raw), fields, raw, v2=True)


def test_golden_empty_body_and_properties() -> None:
    fields = Fields(body=b"", properties=b"", sys_flag=0)
    expected = fields.hand_built(v2=False)
    assert len(expected) == 91 + 9
    raw = fields.encode()
    assert raw == expected
    view = decode_record(raw)
    assert_fields(view, fields, raw, v2=False)
    assert view.body_crc == 0


def test_golden_extreme_field_values() -> None:
    fields = Fields(
        sys_flag=TRANSACTION_ROLLBACK_TYPE,
        queue_id=2**31 - 1,
        flag=-(2**31),
        queue_offset=-(2**63),
        physical_offset=2**63 - 1,
        born_timestamp=-1,
        store_timestamp=2**63 - 1,
        reconsume_times=-(2**31),
        prepared_transaction_offset=-1,
    )
    raw = fields.encode()
    assert raw == fields.hand_built(v2=False)
    assert_fields(decode_record(raw), fields, raw, v2=False)


def test_golden_non_ascii_topic_and_properties() -> None:
    props = "TAGS\x01标签\x02KEYS\x01ключ\x02".encode()
    fields = Fields(topic="主题", properties=props)
    raw = fields.encode()
    assert raw == fields.hand_built(v2=False)
    assert raw[102] == len("主题".encode())
    view = decode_record(raw)
    assert_fields(view, fields, raw, v2=False)
    assert decode_properties(view.properties) == {"TAGS": "标签", "KEYS": "ключ"}


@pytest.mark.parametrize(("length", "v2"), [(1, False), (126, False), (127, False), (128, True), (500, True)])
def test_encode_chooses_v2_only_for_topics_over_127_chars(length: int, v2: bool) -> None:
    raw = encode_record(topic="a" * length, body=b"x")
    assert raw[4:8] == (DISK_MAGIC_V2 if v2 else DISK_MAGIC_V1)
    assert len(raw) == 91 + 1 + length + (1 if v2 else 0)
    view = decode_record(raw)
    assert view.kind is RecordKind.MESSAGE
    assert view.v2 is v2
    assert view.topic == "a" * length


def test_encode_v2_can_be_forced_for_a_short_topic() -> None:
    fields = Fields(topic="short")
    raw = fields.encode(v2=True)
    assert raw == fields.hand_built(v2=True)
    view = decode_record(raw)
    assert view.v2 is True
    assert view.topic == "short"


def test_encode_v1_can_be_forced_and_v1_topic_length_is_one_byte() -> None:
    raw = encode_record(topic="b" * 127, body=b"", v2=False)
    assert raw[4:8] == DISK_MAGIC_V1
    assert raw[88] == 127


def test_encode_sets_and_clears_v6_bits_from_host_widths() -> None:
    # IPv4 hosts: stale v6 bits are cleared.
    raw = encode_record(topic="T", body=b"", sys_flag=0x30 | 0x8, born_host=IPV4_BORN, store_host=IPV4_STORE)
    assert struct.unpack_from(">i", raw, 36)[0] == 0x8
    # IPv6 hosts: bits are set even when the caller forgot them.
    raw = encode_record(topic="T", body=b"", sys_flag=0x8, born_host=IPV6_BORN, store_host=IPV6_STORE)
    assert struct.unpack_from(">i", raw, 36)[0] == 0x38
    assert decode_record(raw).kind is RecordKind.MESSAGE


def test_write_record_into_buffer_at_offset() -> None:
    fields = Fields()
    expected = fields.hand_built(v2=False)
    buf = bytearray(b"\xee" * (len(expected) + 50))
    length = write_record(
        buf,
        17,
        topic=b"TopicTest",
        body=b"Hello RocketMQ",
        properties=fields.properties,
        queue_id=3,
        flag=-17,
        queue_offset=123_456_789_012,
        physical_offset=1_073_741_824 + 4096,
        sys_flag=0x9,
        born_timestamp=1_700_000_000_123,
        born_host=IPV4_BORN,
        store_timestamp=1_700_000_000_456,
        store_host=IPV4_STORE,
        reconsume_times=2,
        prepared_transaction_offset=987_654_321,
        crc=masked_crc(b"Hello RocketMQ"),
        v2=False,
    )
    assert length == len(expected)
    assert bytes(buf[17 : 17 + length]) == expected
    assert buf[:17] == b"\xee" * 17
    assert buf[17 + length :] == b"\xee" * 33
    view = decode_record(buf, 17)
    assert_fields(view, fields, expected, v2=False)


def test_decode_consecutive_records_in_one_buffer() -> None:
    a = encode_record(topic="A", body=b"first", queue_offset=0)
    b = encode_record(topic="B" * 200, body=b"second", queue_offset=1)
    c = encode_record(topic="C", body=b"", queue_offset=2, born_host=IPV6_BORN)
    buf = a + b + c + bytes(64)
    pos = 0
    seen = []
    while True:
        view = decode_record(buf, pos)
        if view.kind is not RecordKind.MESSAGE:
            break
        seen.append((view.topic[:1], view.body, view.queue_offset))
        pos += view.size
    assert seen == [("A", b"first", 0), ("B", b"second", 1), ("C", b"", 2)]
    assert pos == len(a) + len(b) + len(c)
    assert decode_record(buf, pos).kind is RecordKind.END


def test_decode_read_body_false() -> None:
    raw = encode_record(topic="T", body=b"payload")
    view = decode_record(raw, read_body=False, check_crc=False)
    assert view.kind is RecordKind.MESSAGE
    assert view.body is None
    assert view.body_length == 7
    assert raw[view.body_offset : view.body_offset + 7] == b"payload"
    view = decode_record(raw, read_body=False, check_crc=True)
    assert view.kind is RecordKind.MESSAGE
    assert view.body is None


# -- whole-record CRC property (__CRC32#) -------------------------------------------------
def crc_slot_digits(raw: bytes) -> bytes:
    tail = raw[-CRC32_RESERVED_LEN:]
    assert tail[:9] == b"__CRC32#\x01"
    assert tail[-1:] == b"\x02"
    return tail[9:19]


def expected_digits(raw: bytes) -> bytes:
    value = zlib.crc32(raw[: len(raw) - 20]) & 0x7FFFFFFF
    return str(value).zfill(10)[::-1].encode("ascii")


def test_prop_crc_layout_and_digit_order() -> None:
    raw = encode_record(
        topic="TopicTest",
        body=b"Hello RocketMQ",
        properties=b"TAGS\x01TagA\x02",
        queue_offset=5,
        physical_offset=777,
        store_timestamp=1_700_000_000_000,
        append_prop_crc=True,
    )
    digits = crc_slot_digits(raw)
    assert digits == expected_digits(raw)
    # Least significant digit first: reading the string backwards gives the value.
    assert int(digits[::-1]) == zlib.crc32(raw[:-20]) & 0x7FFFFFFF
    props_len = struct.unpack_from(">h", raw, 88 + 14 + 1 + 9)[0]
    assert props_len == len(b"TAGS\x01TagA\x02") + 20
    view = decode_record(raw, verify_prop_crc=True)
    assert view.kind is RecordKind.MESSAGE, view.reason
    assert view.properties.endswith("__CRC32#\x01" + digits.decode() + "\x02")
    assert decode_properties(view.properties) == {"TAGS": "TagA", "__CRC32#": digits.decode()}


def test_prop_crc_digits_in_most_significant_first_order_are_rejected() -> None:
    raw = encode_record(topic="T", body=b"abc", properties=b"A\x01B\x02", append_prop_crc=True)
    digits = crc_slot_digits(raw)
    assert digits != digits[::-1]
    bad = raw[:-11] + digits[::-1] + b"\x02"
    view = decode_record(bad, verify_prop_crc=True)
    assert view.kind is RecordKind.CORRUPT
    assert "CRC" in view.reason


def test_prop_crc_adds_separator_when_missing() -> None:
    raw = encode_record(topic="T", body=b"x", properties=b"A\x01B", append_prop_crc=True)
    view = decode_record(raw, verify_prop_crc=True)
    assert view.kind is RecordKind.MESSAGE, view.reason
    assert view.properties.startswith("A\x01B\x02__CRC32#\x01")
    assert len(view.properties.encode()) == 3 + 1 + 20
    assert decode_properties(view.properties)["A"] == "B"


def test_prop_crc_does_not_duplicate_separator() -> None:
    raw = encode_record(topic="T", body=b"x", properties=b"A\x01B\x02", append_prop_crc=True)
    view = decode_record(raw, verify_prop_crc=True)
    assert view.kind is RecordKind.MESSAGE
    assert view.properties.startswith("A\x01B\x02__CRC32#\x01")
    assert len(view.properties.encode()) == 4 + 20


def test_prop_crc_with_empty_properties_reserves_exactly_20_bytes() -> None:
    # RocketMQ only appends the separator to a non-empty properties string.
    assert properties_with_crc_slot(b"") == b"__CRC32#\x01" + b"0" * 10 + b"\x02"
    raw = encode_record(topic="T", body=b"x", append_prop_crc=True)
    assert len(raw) == 91 + 1 + 1 + 20
    assert struct.unpack_from(">h", raw, 88 + 1 + 1 + 1)[0] == 20
    assert crc_slot_digits(raw) == expected_digits(raw)
    assert decode_record(raw, verify_prop_crc=True).kind is RecordKind.MESSAGE


def test_properties_with_crc_slot() -> None:
    assert properties_with_crc_slot(b"K\x01V") == b"K\x01V\x02__CRC32#\x010000000000\x02"
    assert properties_with_crc_slot(b"K\x01V\x02") == b"K\x01V\x02__CRC32#\x010000000000\x02"


def test_stamp_prop_crc_ignores_totalsize_placeholder() -> None:
    good = encode_record(topic="T", body=b"abc", properties=b"K\x01V\x02", append_prop_crc=True)
    buf = bytearray(16) + bytearray(good) + bytearray(16)
    buf[16:20] = b"\x00\x00\x00\x00"  # the writer stores TOTALSIZE last
    buf[16 + len(good) - 11 : 16 + len(good) - 1] = b"9999999999"
    stamp_prop_crc(buf, 16, len(good))
    buf[16:20] = struct.pack(">i", len(good))
    assert bytes(buf[16 : 16 + len(good)]) == good
    assert buf[:16] == bytes(16)
    assert buf[16 + len(good) :] == bytes(16)


@pytest.mark.parametrize(
    "fields",
    [
        Fields(),
        Fields(born_host=IPV6_BORN, store_host=IPV6_STORE, topic="x" * 140),
        Fields(body=b"", properties=b""),
    ],
)
def test_prop_crc_round_trip(fields: Fields) -> None:
    raw = fields.encode(append_prop_crc=True)
    assert crc_slot_digits(raw) == expected_digits(raw)
    view = decode_record(raw, verify_prop_crc=True)
    assert view.kind is RecordKind.MESSAGE, view.reason
    assert view.body == fields.body
    assert view.topic == fields.topic
    assert view.queue_offset == fields.queue_offset


@pytest.mark.parametrize("check_crc", [False, True])
def test_prop_crc_detects_every_single_byte_flip(check_crc: bool) -> None:
    raw = encode_record(
        topic="TopicTest",
        body=b"Hello RocketMQ",
        properties=b"TAGS\x01TagA\x02",
        queue_id=1,
        queue_offset=9,
        physical_offset=4096,
        store_timestamp=1_700_000_000_000,
        append_prop_crc=True,
    )
    assert decode_record(raw, verify_prop_crc=True).kind is RecordKind.MESSAGE
    for i in range(len(raw)):
        for mask in (0x01, 0x80, 0xFF):
            bad = bytearray(raw)
            bad[i] ^= mask
            view = decode_record(bytes(bad), check_crc=check_crc, verify_prop_crc=True)
            if i < 8:
                assert view.kind in (RecordKind.END, RecordKind.BLANK, RecordKind.CORRUPT), (i, mask)
            else:
                assert view.kind is RecordKind.CORRUPT, (i, mask)
                assert view.reason


def test_prop_crc_flip_in_header_only_caught_by_prop_crc() -> None:
    raw = encode_record(topic="T", body=b"abc", queue_offset=7, append_prop_crc=True)
    bad = bytearray(raw)
    bad[27] ^= 0x01  # low byte of QUEUEOFFSET
    assert decode_record(bytes(bad)).kind is RecordKind.MESSAGE  # body CRC does not cover it
    view = decode_record(bytes(bad), verify_prop_crc=True)
    assert view.kind is RecordKind.CORRUPT
    assert "CRC" in view.reason


def test_verify_prop_crc_rejects_record_without_crc_property() -> None:
    raw = encode_record(topic="T", body=b"abc", properties=b"K\x01V\x02")
    assert decode_record(raw).kind is RecordKind.MESSAGE
    view = decode_record(raw, verify_prop_crc=True)
    assert view.kind is RecordKind.CORRUPT
    assert "__CRC32#" in view.reason


def test_verify_prop_crc_rejects_non_digit_value() -> None:
    raw = bytearray(encode_record(topic="T", body=b"abc", append_prop_crc=True))
    raw[-5] = ord("x")
    view = decode_record(bytes(raw), verify_prop_crc=True)
    assert view.kind is RecordKind.CORRUPT
    assert "digit" in view.reason


# -- decoder edge cases -------------------------------------------------------------------
@pytest.mark.parametrize("n", [0, 1, 3, 4, 7, 8, 9, 91, 4096])
def test_zeros_decode_as_end(n: int) -> None:
    view = decode_record(bytes(n))
    assert view.kind is RecordKind.END
    assert view.size == 0


def test_position_at_or_past_end_is_end() -> None:
    raw = encode_record(topic="T", body=b"x")
    assert decode_record(raw, len(raw)).kind is RecordKind.END
    assert decode_record(raw, len(raw) + 10).kind is RecordKind.END


def test_zeros_after_a_record_are_end() -> None:
    raw = encode_record(topic="T", body=b"x")
    assert decode_record(raw + bytes(100), len(raw)).kind is RecordKind.END


def test_short_nonzero_tail_is_corrupt() -> None:
    view = decode_record(b"\x00\x00\x01")
    assert view.kind is RecordKind.CORRUPT
    assert view.reason


@pytest.mark.parametrize(
    "magic", [b"\x00\x00\x00\x00", b"\xda\xa3\x20\xa8", b"\xde\xad\xbe\xef", DISK_MAGIC_V1[::-1]]
)
def test_illegal_magic_is_corrupt(magic: bytes) -> None:
    raw = bytearray(encode_record(topic="T", body=b"x"))
    raw[4:8] = magic
    view = decode_record(bytes(raw))
    assert view.kind is RecordKind.CORRUPT
    assert "magic" in view.reason


def test_zero_size_with_nonzero_magic_is_corrupt() -> None:
    view = decode_record(b"\x00\x00\x00\x00\x00\x00\x00\x01" + bytes(100))
    assert view.kind is RecordKind.CORRUPT
    assert view.reason


@pytest.mark.parametrize("delta", [-1, 1, 12, -12])
def test_totalsize_mismatch_is_corrupt(delta: int) -> None:
    raw = bytearray(encode_record(topic="T", body=b"abcdef", properties=b"K\x01V\x02"))
    raw[0:4] = struct.pack(">i", len(raw) + delta)
    view = decode_record(bytes(raw) + bytes(64))
    assert view.kind is RecordKind.CORRUPT
    assert view.reason


def test_totalsize_calculated_mismatch_reason() -> None:
    raw = bytearray(encode_record(topic="T", body=b"abcdef"))
    raw[0:4] = struct.pack(">i", len(raw) + 4)
    view = decode_record(bytes(raw) + b"\x00" * 4)
    assert view.kind is RecordKind.CORRUPT
    assert "TOTALSIZE" in view.reason
    assert view.size == len(raw) + 4


@pytest.mark.parametrize("total", [-1, -(2**31), 0, 1, 90])
def test_negative_or_tiny_totalsize_is_corrupt(total: int) -> None:
    raw = bytearray(encode_record(topic="T", body=b"x"))
    raw[0:4] = struct.pack(">i", total)
    view = decode_record(bytes(raw))
    assert view.kind is RecordKind.CORRUPT
    assert view.reason


def test_truncated_record_is_corrupt() -> None:
    raw = encode_record(topic="T", body=b"abcdef", properties=b"K\x01V\x02")
    for n in range(8, len(raw)):
        view = decode_record(raw[:n])
        assert view.kind is RecordKind.CORRUPT, n
        assert view.reason


def test_truncated_record_below_header_is_never_message() -> None:
    raw = encode_record(topic="T", body=b"abcdef")
    for n in range(8):
        assert decode_record(raw[:n]).kind is not RecordKind.MESSAGE


def test_negative_body_length_is_corrupt() -> None:
    raw = bytearray(encode_record(topic="T", body=b"abcdef"))
    raw[84:88] = struct.pack(">i", -1)
    view = decode_record(bytes(raw), check_crc=False)
    assert view.kind is RecordKind.CORRUPT
    assert "body length" in view.reason


def test_body_length_past_record_is_corrupt() -> None:
    raw = bytearray(encode_record(topic="T", body=b"abcdef"))
    raw[84:88] = struct.pack(">i", 1000)
    view = decode_record(bytes(raw) + bytes(2000), check_crc=False)
    assert view.kind is RecordKind.CORRUPT
    assert view.reason


@pytest.mark.parametrize("value", [0x80, 0xFF, 0x00])
def test_invalid_v1_topic_length_is_corrupt(value: int) -> None:
    raw = bytearray(encode_record(topic="T", body=b"abcdef"))
    raw[88 + 6] = value  # a signed byte: 0x80/0xFF read back as negative
    view = decode_record(bytes(raw))
    assert view.kind is RecordKind.CORRUPT
    assert "topic length" in view.reason


def test_negative_v2_topic_length_is_corrupt() -> None:
    raw = bytearray(encode_record(topic="T" * 200, body=b"ab"))
    raw[90:92] = struct.pack(">h", -200)
    view = decode_record(bytes(raw))
    assert view.kind is RecordKind.CORRUPT
    assert "topic length" in view.reason


def test_negative_properties_length_is_corrupt() -> None:
    raw = bytearray(encode_record(topic="T", body=b"ab", properties=b"K\x01V\x02"))
    raw[88 + 2 + 1 + 1 : 88 + 2 + 1 + 1 + 2] = struct.pack(">h", -4)
    view = decode_record(bytes(raw))
    assert view.kind is RecordKind.CORRUPT
    assert "properties length" in view.reason


def test_v6_flag_on_ipv4_record_is_corrupt() -> None:
    raw = bytearray(encode_record(topic="T", body=b"abcdef"))
    raw[36:40] = struct.pack(">i", 0x10)
    view = decode_record(bytes(raw) + bytes(64))
    assert view.kind is RecordKind.CORRUPT
    assert view.reason


def test_v1_magic_on_v2_record_is_corrupt() -> None:
    raw = bytearray(encode_record(topic="T" * 200, body=b"abcdef"))
    raw[4:8] = DISK_MAGIC_V1
    view = decode_record(bytes(raw))
    assert view.kind is RecordKind.CORRUPT


def test_body_crc_mismatch_detected_only_when_checked() -> None:
    raw = bytearray(encode_record(topic="T", body=b"Hello RocketMQ"))
    raw[90] ^= 0x20
    view = decode_record(bytes(raw), check_crc=True)
    assert view.kind is RecordKind.CORRUPT
    assert "CRC" in view.reason
    assert view.size == len(raw)
    unchecked = decode_record(bytes(raw), check_crc=False)
    assert unchecked.kind is RecordKind.MESSAGE
    assert unchecked.body == b"HeLlo RocketMQ"


def test_stored_body_crc_mismatch_detected() -> None:
    raw = bytearray(encode_record(topic="T", body=b"Hello RocketMQ"))
    raw[8:12] = struct.pack(">i", 1774740973 ^ 1)
    assert decode_record(bytes(raw), check_crc=True).kind is RecordKind.CORRUPT
    assert decode_record(bytes(raw), check_crc=False).kind is RecordKind.MESSAGE


def test_every_body_byte_flip_is_caught_by_body_crc() -> None:
    body = bytes(range(64))
    raw = encode_record(topic="T", body=body)
    view = decode_record(raw)
    for i in range(view.body_offset, view.body_offset + len(body)):
        bad = bytearray(raw)
        bad[i] ^= 0x01
        assert decode_record(bytes(bad), check_crc=True).kind is RecordKind.CORRUPT, i


def test_decode_accepts_bytearray_and_memoryview() -> None:
    raw = encode_record(topic="T", body=b"abc", properties=b"K\x01V\x02", append_prop_crc=True)
    for buf in (bytearray(raw), memoryview(raw), memoryview(bytearray(raw))):
        view = decode_record(buf, verify_prop_crc=True)
        assert view.kind is RecordKind.MESSAGE, view.reason
        assert view.body == b"abc"
        assert isinstance(view.body, bytes)
        assert isinstance(view.born_host, bytes)


def test_invalid_utf8_topic_is_replaced_not_raised() -> None:
    raw = bytearray(encode_record(topic="TT", body=b""))
    raw[89:91] = b"\xff\xfe"
    view = decode_record(bytes(raw))
    assert view.kind is RecordKind.MESSAGE
    assert view.topic == "\ufffd\ufffd"


def test_record_module_exports_reserved_len_consistent_with_slot() -> None:
    assert len(properties_with_crc_slot(b"A\x01B\x02")) - len(b"A\x01B\x02") == rec.CRC32_RESERVED_LEN


def test_the_record_codec_does_not_load_the_store() -> None:
    """Pull responses carry CommitLog records: a client decodes them with rocketq.protocol.record
    alone, without the storage engine."""
    code = (
        "import sys\n"
        "from rocketq.protocol.record import decode_record, encode_record, view_to_message\n"
        "view = decode_record(encode_record(topic='T', body=b'x', physical_offset=7))\n"
        "assert view_to_message(view).body == b'x'\n"
        "print(sorted(m for m in sys.modules if m.startswith('rocketq.store')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
