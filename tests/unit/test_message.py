"""Message helpers: properties codec, Java String.hashCode tags code, message ids, message objects."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import threading
import time

import pytest

from _support.java_hash import reference_java_hash
from _support.rocketmq_fixture import java_calendar_local_ms
from rocketq.errors import MessageIllegal, ResponseCode, TopicNameInvalid
from rocketq.message import (
    KEY_SEPARATOR,
    LOOPBACK_HOST,
    NAME_VALUE_SEPARATOR,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    BrokerMessage,
    Message,
    MessageExt,
    OffsetMessageId,
    UniqueIdGenerator,
    create_offset_msg_id,
    decode_offset_msg_id,
    decode_properties,
    encode_properties,
    java_string_hash,
    java_string_hash_once,
    number_property,
    pack_socket_addr,
    split_host_port,
    tags_code,
    unpack_socket_addr,
    validate_topic,
)


# -- Java String.hashCode / tags code -----------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("TagA", 2598919),
        ("", 0),
        ("TopicTest#KEY1", -1656969516),
        ("polygenelubricants", -2147483648),
        ("a😀", 1866116),
    ],
)
def test_java_string_hash_check_vectors(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected
    assert java_string_hash_once(text) == expected


@pytest.mark.parametrize(
    "text",
    ["a", "TagA || TagB", "标签", "😀😀😀", "\ud800", "x" * 1000, "Ω≈ç√", "\x00\x7f\x80\uffff"],
)
def test_java_string_hash_matches_reference(text: str) -> None:
    value = java_string_hash(text)
    assert value == reference_java_hash(text)
    assert -(2**31) <= value < 2**31
    assert java_string_hash_once(text) == value  # the uncached form (index keys)


def test_java_string_hash_counts_surrogate_pairs_as_two_units() -> None:
    # U+1F600 is D83D DE00 in UTF-16.
    assert java_string_hash("😀") == 31 * 0xD83D + 0xDE00
    assert java_string_hash("😀") != ord("😀")


def test_tags_code() -> None:
    assert tags_code(None) == 0
    assert tags_code("") == 0
    assert tags_code("TagA") == 2598919
    assert tags_code("TopicTest#KEY1") == -1656969516
    assert tags_code("polygenelubricants") == -(2**31)


def test_tags_code_is_sign_extended_on_disk() -> None:
    raw = struct.pack(">q", tags_code("TopicTest#KEY1"))
    assert raw[:4] == b"\xff\xff\xff\xff"
    assert struct.unpack(">i", raw[4:])[0] == -1656969516
    assert struct.pack(">q", tags_code("TagA"))[:4] == b"\x00\x00\x00\x00"


# -- properties codec ---------------------------------------------------------------------
def test_separators() -> None:
    assert NAME_VALUE_SEPARATOR == "\x01"
    assert PROPERTY_SEPARATOR == "\x02"
    assert KEY_SEPARATOR == " "


def test_encode_properties_format() -> None:
    assert encode_properties({}) == ""
    assert encode_properties({"TAGS": "TagA"}) == "TAGS\x01TagA\x02"
    assert encode_properties({"TAGS": "TagA", "KEYS": "k1 k2"}) == "TAGS\x01TagA\x02KEYS\x01k1 k2\x02"


def test_encode_properties_skips_none_values() -> None:
    props: dict[str, str | None] = {"A": None, "B": "b"}
    assert encode_properties(props) == "B\x01b\x02"  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("key", "value"),
    [("K\x01", "v"), ("K\x02", "v"), ("K", "v\x01"), ("K", "v\x02"), ("\x01", "v"), ("K", "a\x02b\x01c")],
)
def test_encode_properties_rejects_separators(key: str, value: str) -> None:
    with pytest.raises(MessageIllegal) as info:
        encode_properties({"OK": "fine", key: value})
    assert info.value.code == ResponseCode.MESSAGE_ILLEGAL
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),
        ("A\x01B\x02", {"A": "B"}),
        ("A\x01B", {"A": "B"}),  # missing trailing separator
        ("A\x01B\x02C\x01D", {"A": "B", "C": "D"}),
        ("TAGS\x01TagA\x02KEYS\x01k1 k2\x02", {"TAGS": "TagA", "KEYS": "k1 k2"}),
        ("\x01B\x02", {}),  # empty key dropped
        ("\x01BCD\x02X\x01Y\x02", {"X": "Y"}),
        ("A\x01\x02", {}),  # empty value dropped
        ("ABC\x01\x02", {}),
        ("AB\x02", {}),  # too short
        ("A\x01", {}),  # shorter than 3 chars
        ("\x02\x02\x02", {}),
        ("\x02\x02A\x01B\x02\x02", {"A": "B"}),
        ("ABC\x02", {}),  # no name/value separator
        ("A\x01B\x01C\x02", {"A": "B\x01C"}),  # only the first \x01 splits
        ("A\x01\x01\x02", {"A": "\x01"}),
        ("A\x011\x02A\x012\x02", {"A": "2"}),  # the last duplicate wins
        ("键\x01值\x02", {"键": "值"}),
        ("a\x01😀", {"a": "😀"}),
    ],
)
def test_decode_properties_rules(text: str, expected: dict[str, str]) -> None:
    assert decode_properties(text) == expected


@pytest.mark.parametrize(
    "props",
    [
        {},
        {"A": "B"},
        {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "0A000001" * 4, "WAIT": "true"},
        {"键": "值 with spaces", "x" * 300: "y" * 300},
    ],
)
def test_properties_round_trip(props: dict[str, str]) -> None:
    assert decode_properties(encode_properties(props)) == props


def test_encode_properties_empty_value_is_written_but_not_read_back() -> None:
    text = encode_properties({"A": "", "B": "b"})
    assert text == "A\x01\x02B\x01b\x02"
    assert decode_properties(text) == {"B": "b"}


# -- socket addresses ---------------------------------------------------------------------
def test_split_host_port() -> None:
    assert split_host_port("1.2.3.4:10911") == ("1.2.3.4", 10911)
    assert split_host_port("[::1]:10911") == ("::1", 10911)
    with pytest.raises(ValueError, match="no port"):
        split_host_port("1.2.3.4")


def test_pack_socket_addr() -> None:
    assert pack_socket_addr("192.168.1.20:10911") == bytes([192, 168, 1, 20, 0, 0, 0x2A, 0x9F])
    packed = pack_socket_addr("[2001:db8::1]:40000")
    assert len(packed) == 20
    assert packed[:16] == bytes.fromhex("20010db8000000000000000000000001")
    assert packed[16:] == struct.pack(">i", 40000)


@pytest.mark.parametrize(
    "addr", ["127.0.0.1:0", "10.1.2.3:65535", "[::1]:10911", "[fe80::211:2233:4455:6677]:1"]
)
def test_socket_addr_round_trip(addr: str) -> None:
    assert unpack_socket_addr(pack_socket_addr(addr)) == addr


def test_unpack_socket_addr_rejects_other_widths() -> None:
    with pytest.raises(ValueError):
        unpack_socket_addr(b"\x00" * 12)


def test_loopback_host() -> None:
    assert unpack_socket_addr(LOOPBACK_HOST) == "127.0.0.1:0"


# -- offset message id --------------------------------------------------------------------
def test_offset_msg_id_ipv4_layout() -> None:
    store = bytes([192, 168, 1, 20]) + struct.pack(">i", 10911)
    msg_id = create_offset_msg_id(store, 0x1_2345_6789)
    assert len(msg_id) == 32
    assert msg_id == "C0A8011400002A9F0000000123456789"
    assert msg_id == msg_id.upper()
    assert msg_id == (store + struct.pack(">q", 0x1_2345_6789)).hex().upper()


def test_offset_msg_id_uses_uppercase_hex() -> None:
    store = bytes([0xAB, 0xCD, 0xEF, 0xFE]) + struct.pack(">i", 0xBEEF)
    msg_id = create_offset_msg_id(store, 0xDEADBEEF)
    assert msg_id == "ABCDEFFE0000BEEF00000000DEADBEEF"


def test_offset_msg_id_ipv6_layout() -> None:
    store = pack_socket_addr("[fe80::211:2233:4455:6677]:10912")
    msg_id = create_offset_msg_id(store, 4096)
    assert len(msg_id) == 56
    assert msg_id == "FE800000000000000211223344556677" + "00002AA0" + "0000000000001000"


@pytest.mark.parametrize(
    ("addr", "offset"),
    [
        ("192.168.1.20:10911", 0),
        ("10.0.0.1:1", 2**63 - 1),
        ("1.2.3.4:65535", 1_073_741_824 * 7 + 123),
        ("[::1]:10911", 48),
        ("[2001:db8::ff00:42:8329]:65000", 9_999_999_999),
    ],
)
def test_offset_msg_id_decodes_back(addr: str, offset: int) -> None:
    msg_id = create_offset_msg_id(pack_socket_addr(addr), offset)
    assert len(msg_id) == (32 if "[" not in addr else 56)
    assert decode_offset_msg_id(msg_id) == OffsetMessageId(addr, offset)


def test_offset_msg_id_decode_accepts_lowercase() -> None:
    assert decode_offset_msg_id("c0a8011400002a9f0000000123456789") == OffsetMessageId(
        "192.168.1.20:10911", 0x1_2345_6789
    )


@pytest.mark.parametrize("bad", ["", "00", "A" * 31, "A" * 33, "A" * 55, "A" * 64, "G" * 32, "Z" * 56])
def test_offset_msg_id_decode_rejects_bad_input(bad: str) -> None:
    with pytest.raises(ValueError):
        decode_offset_msg_id(bad)


# -- UNIQ_KEY ids ---------------------------------------------------------------------------
def test_unique_id_ipv4_layout() -> None:
    ip = bytes([10, 1, 2, 3])
    gen = UniqueIdGenerator(ip)
    uid = gen.next_id()
    assert len(uid) == 32
    assert uid == uid.upper()
    raw = bytes.fromhex(uid)
    assert raw[:4] == ip
    pid_field = struct.unpack(">h", raw[4:6])[0]
    assert pid_field & 0x7FFF == os.getpid() & 0x7FFF


def test_unique_id_ipv6_layout() -> None:
    ip = bytes.fromhex("20010db8000000000000000000000001")
    uid = UniqueIdGenerator(ip).next_id()
    assert len(uid) == 56
    assert bytes.fromhex(uid)[:16] == ip


def test_unique_id_default_ip_is_ipv4() -> None:
    uid = UniqueIdGenerator().next_id()
    assert len(uid) == 32
    int(uid, 16)


def test_unique_ids_are_unique_and_share_the_fixed_prefix() -> None:
    gen = UniqueIdGenerator(bytes([10, 0, 0, 1]))
    ids = [gen.next_id() for _ in range(20_000)]
    assert len(set(ids)) == len(ids)
    assert all(len(i) == 32 for i in ids)
    # ip (4) + pid (2) + classloader hash (4) are fixed per generator.
    assert len({i[:20] for i in ids}) == 1


def test_unique_id_counter_increments() -> None:
    gen = UniqueIdGenerator(bytes([10, 0, 0, 1]))
    a = int(gen.next_id()[-4:], 16)
    b = int(gen.next_id()[-4:], 16)
    c = int(gen.next_id()[-4:], 16)
    assert b == (a + 1) % 0x10000
    assert c == (b + 1) % 0x10000


def test_unique_id_time_field_is_ms_since_month_start() -> None:
    """With the default clock, the field is the wall clock's ms since the local month's start (the
    edges of the calendar, with fixed clocks, are in test_unique_id_calendar.py and
    test_calendar_boundaries.py)."""
    gen = UniqueIdGenerator(bytes([10, 0, 0, 1]))
    for _ in range(3):  # read again if a month turned between the readings
        before = time.time_ns() // 1_000_000
        field = int.from_bytes(bytes.fromhex(gen.next_id())[10:14], "big")
        after = time.time_ns() // 1_000_000
        local = time.localtime(before // 1000)
        if time.localtime(after // 1000)[:2] == local[:2]:
            break
    start = java_calendar_local_ms(local.tm_year, local.tm_mon, 1)
    assert before - start <= field <= after - start


def test_unique_ids_are_unique_across_threads() -> None:
    gen = UniqueIdGenerator(bytes([10, 0, 0, 1]))
    results: list[list[str]] = [[] for _ in range(8)]

    def work(slot: list[str]) -> None:
        for _ in range(2_000):
            slot.append(gen.next_id())

    threads = [threading.Thread(target=work, args=(slot,)) for slot in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [i for slot in results for i in slot]
    assert len(ids) == 16_000
    assert len(set(ids)) == 16_000


# -- topic validation ---------------------------------------------------------------------
@pytest.mark.parametrize("topic", ["T", "TopicTest", "%RETRY%group", "%DLQ%g", "a|b", "a-b_c", "x" * 32767])
def test_validate_topic_accepts(topic: str) -> None:
    validate_topic(topic)


@pytest.mark.parametrize(
    "topic", ["", "has space", "dot.topic", "slash/", "中文", "x" * 32768, "a\nb", "a\x01", "abc\n", "\n"]
)
def test_validate_topic_rejects(topic: str) -> None:
    with pytest.raises(TopicNameInvalid) as info:
        validate_topic(topic)
    assert isinstance(info.value, MessageIllegal)


def test_validate_topic_custom_limit() -> None:
    validate_topic("x" * 127, max_length=127)
    with pytest.raises(TopicNameInvalid):
        validate_topic("x" * 128, max_length=127)


# -- message objects ----------------------------------------------------------------------
def test_message_all_properties() -> None:
    msg = Message(
        topic="T",
        body=b"b",
        tags="TagA",
        keys=["k1", "", "k2"],
        properties={"X": "1", PROPERTY_TAGS: "old"},
        delay_level=3,
    )
    props = msg.all_properties()
    assert props == {"X": "1", PROPERTY_TAGS: "TagA", PROPERTY_KEYS: "k1 k2", PROPERTY_DELAY_TIME_LEVEL: "3"}
    assert msg.properties == {"X": "1", PROPERTY_TAGS: "old"}  # not mutated


def test_message_all_properties_minimal() -> None:
    assert Message(topic="T", body=b"").all_properties() == {}
    assert Message(topic="T", body=b"", tags="", keys=[""], delay_level=0).all_properties() == {}


def test_message_ext_accessors() -> None:
    ext = MessageExt(
        topic="T",
        body=b"",
        properties={PROPERTY_TAGS: "TagA", PROPERTY_KEYS: "k1  k2 ", "UNIQ_KEY": "ABC"},
        msg_id="OFFSETID",
    )
    assert ext.tags == "TagA"
    assert ext.keys == ["k1", "k2"]
    assert ext.uniq_key == "ABC"
    assert ext.client_msg_id == "ABC"


def test_message_ext_client_msg_id_falls_back_to_offset_id() -> None:
    ext = MessageExt(topic="T", body=b"", properties={}, msg_id="OFFSETID")
    assert ext.tags is None
    assert ext.keys == []
    assert ext.uniq_key is None
    assert ext.client_msg_id == "OFFSETID"


def test_broker_message_from_message() -> None:
    msg = Message(topic="T", body=b"payload", tags="TagA", keys=["k"], flag=7)
    born = pack_socket_addr("10.0.0.9:5555")
    bm = BrokerMessage.from_message(msg, 2, born_host=born, born_timestamp=123, sys_flag=0x8)
    assert bm.topic == "T"
    assert bm.body == b"payload"
    assert bm.queue_id == 2
    assert bm.flag == 7
    assert bm.sys_flag == 0x8
    assert bm.born_timestamp == 123
    assert bm.born_host == born
    assert isinstance(bm.properties, bytes)
    assert bm.property_map() == {PROPERTY_TAGS: "TagA", PROPERTY_KEYS: "k"}
    assert bm.properties.endswith(b"\x02")


def test_broker_message_from_message_defaults() -> None:
    before = time.time_ns() // 1_000_000
    bm = BrokerMessage.from_message(Message(topic="T", body=b""))
    after = time.time_ns() // 1_000_000
    assert before <= bm.born_timestamp <= after
    assert bm.born_host == LOOPBACK_HOST
    assert bm.properties == b""
    assert bm.property_map() == {}


def test_broker_message_from_message_rejects_separator_in_property() -> None:
    with pytest.raises(MessageIllegal):
        BrokerMessage.from_message(Message(topic="T", body=b"", tags="bad\x02tag"))


def test_broker_message_property_map_tolerates_invalid_utf8() -> None:
    bm = BrokerMessage(topic="T", body=b"", properties=b"A\x01\xff\x02B\x01b\x02")
    assert bm.property_map() == {"A": "\ufffd", "B": "b"}


def test_uniq_key_property_name() -> None:
    assert PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX == "UNIQ_KEY"


def test_a_client_process_does_not_import_numpy() -> None:
    """The client modules leave numpy (and the OpenBLAS thread its import starts) out of a
    producer's or consumer's process; ``java_string_hashes`` imports it when first called."""
    code = (
        "import sys\n"
        "import rocketq.client\n"
        "from rocketq.message import java_string_hash, java_string_hashes\n"
        "assert 'numpy' not in sys.modules, 'numpy imported'\n"
        "texts = [f'tag-{i}' for i in range(20)]\n"
        "assert java_string_hashes(texts) == [java_string_hash(t) for t in texts]\n"
        "assert 'numpy' in sys.modules\n"
    )
    src = os.path.join(os.path.dirname(__file__), "..", "..", "src")
    env = dict(os.environ, PYTHONPATH=os.path.abspath(src))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_number_property_takes_ascii_decimals_only() -> None:
    assert number_property("3", 0) == 3
    assert number_property("0042", -1) == 42
    # Unicode digits pass str.isdigit but int() refuses them: the default, not an error
    assert number_property("\u00b9", 0) == 0
    assert number_property("\u0663", 7) == 7  # ARABIC-INDIC DIGIT THREE
    assert number_property("", 5) == 5
    assert number_property("-1", 9) == 9
    assert number_property("1.5", 0) == 0
