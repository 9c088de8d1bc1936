"""Poison records, decoded one at a time: the client's pull-body decoder, the broker's sysFlag
check, the gRPC delivered body and the Spark reader's pull decoding."""

from __future__ import annotations

import gzip
import logging
import zlib

import pytest

from rocketq.broker.sys_flag import MAX_INFLATED_BODY_BYTES, check_sys_flag, zlib_problem
from rocketq.client.admin import decode_messages as admin_decode
from rocketq.client.consumer_core import decode_messages, decode_pull_body
from rocketq.errors import InvalidParameter, MessageIllegal
from rocketq.message import MessageExt, encode_properties
from rocketq.protocol.record import encode_record
from rocketq.proxy import convert
from rocketq.proxy.v2 import definition_pb2 as pb
from rocketq.spark.pull import decoded_pull

# every test here runs with the compiled codecs and with the pure-Python ones
pytestmark = pytest.mark.usefixtures("codec_impl")


def record(offset: int, body: bytes, sys_flag: int = 0) -> bytes:
    props = encode_properties({"TAGS": "A", "UNIQ_KEY": f"U{offset}"}).encode()
    return encode_record(
        topic="T",
        body=body,
        properties=props,
        queue_offset=offset,
        physical_offset=1000 + offset,
        sys_flag=sys_flag,
    )


def crc_broken(offset: int, body: bytes) -> bytes:
    """A record whose body no longer matches its BODYCRC (last body byte flipped)."""
    data = bytearray(record(offset, body))
    at = data.index(body) + len(body) - 1
    data[at] ^= 0xFF
    return bytes(data)


BODY = b"".join(
    [
        record(0, b"plain"),
        record(1, zlib.compress(b"inflated"), 0x1),
        record(2, b"not zlib", 0x1),
        crc_broken(3, b"crc"),
        record(4, zlib.compress(b"lz4?"), 0x101),
        record(5, zlib.compress(b"zlib type 3"), 0x301),
    ]
)


def test_each_record_decodes_on_its_own() -> None:
    decoded = decode_pull_body(BODY)
    assert [(m.queue_offset, m.body) for m in decoded.messages] == [
        (0, b"plain"),
        (1, b"inflated"),
        (5, b"zlib type 3"),
    ]
    assert [p.queue_offset for p in decoded.poison] == [2, 3, 4]
    reasons = [p.reason for p in decoded.poison]
    assert "does not inflate" in reasons[0]
    assert "CRC" in reasons[1]
    assert "LZ4" in reasons[2]
    # poison records keep the record as stored
    first = decoded.poison[0].message
    assert first is not None and first.body == b"not zlib" and first.sys_flag == 0x1
    assert all(
        p.message is not None and p.message.commit_log_offset == 1000 + p.queue_offset for p in decoded.poison
    )
    assert not decoded.truncated


def test_a_record_that_does_not_parse_ends_the_body_and_is_placed_after_the_last_one_read() -> None:
    broken = bytearray(record(7, b"x"))
    broken[4:8] = b"\x00\x00\x00\x01"  # no magic code
    decoded = decode_pull_body(record(6, b"six") + bytes(broken) + record(8, b"eight"), first_offset=6)
    assert [m.body for m in decoded.messages] == [b"six"]
    assert decoded.truncated
    [poison] = decoded.poison
    assert poison.message is None and poison.queue_offset == 7 and "magic" in poison.reason
    # the first record: placed at the pull's offset
    assert decode_pull_body(bytes(broken), first_offset=40).poison[0].queue_offset == 40


def test_decode_messages_leaves_poison_out_and_logs_it(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)
    assert [m.queue_offset for m in decode_messages(BODY)] == [0, 1, 5]
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 3
    assert "topic T queue 0 offset 2 (commit-log offset 1002" in errors[0]


def test_admin_returns_poison_as_stored_with_the_reason() -> None:
    views = admin_decode(BODY, "test")
    assert [v.body for v in views] == [
        b"plain",
        b"inflated",
        b"not zlib",
        b"crc"[:-1] + bytes([ord("c") ^ 0xFF]),
        zlib.compress(b"lz4?"),
        b"zlib type 3",
    ]
    assert [bool(v.undecodable) for v in views] == [False, False, True, True, True, False]


# -- the broker's check -----------------------------------------------------------------------------
def test_zlib_problem_names_what_is_wrong() -> None:
    good = zlib.compress(b"x" * 10_000)
    assert zlib_problem(good) == ""
    assert zlib_problem(good + b"trailing") == ""
    assert "truncated" in zlib_problem(good[:-4])
    assert "does not inflate" in zlib_problem(b"plain text")
    assert "truncated" in zlib_problem(b"")


def test_an_inflate_bomb_is_stopped_at_the_limit() -> None:
    bomb = zlib.compress(b"\0" * (MAX_INFLATED_BODY_BYTES + (1 << 20)), 9)
    assert len(bomb) < 100_000
    assert f"more than {MAX_INFLATED_BODY_BYTES}" in zlib_problem(bomb)


def test_check_sys_flag_passes_plain_and_zlib_bodies() -> None:
    check_sys_flag(0x0, b"anything", "m")
    check_sys_flag(0x2 | 0x4, b"anything", "m")  # multi tags, prepared: not the check's concern
    check_sys_flag(0x1, zlib.compress(b"x"), "m")
    check_sys_flag(0x301, zlib.compress(b"x"), "m")
    with pytest.raises(
        MessageIllegal, match=r"m: sysFlag 0x1 marks the body zlib-compressed but it does not"
    ):
        check_sys_flag(0x1, b"plain text", "m")
    with pytest.raises(MessageIllegal, match="ZSTD"):
        check_sys_flag(0x201, zlib.compress(b"x"), "m")


# -- gRPC ------------------------------------------------------------------------------------------
def ext(body: bytes, sys_flag: int) -> MessageExt:
    return MessageExt(topic="T", body=body, properties={"UNIQ_KEY": "U1"}, sys_flag=sys_flag, queue_offset=9)


def test_grpc_delivery_inflates_zlib_bodies_and_passes_poison_as_stored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR)
    out = convert.to_grpc_message(ext(zlib.compress(b"hello"), 0x1))
    assert out.body == b"hello"
    assert out.system_properties.body_digest.checksum == convert.body_digest_md5(b"hello")
    assert not caplog.records
    out = convert.to_grpc_message(ext(b"not zlib", 0x1))
    assert out.body == b"not zlib"
    assert out.system_properties.body_digest.checksum == convert.body_digest_md5(b"not zlib")
    assert "offset 9" in caplog.records[0].getMessage()
    assert convert.to_grpc_message(ext(b"plain", 0)).body == b"plain"


def test_grpc_send_refuses_a_truncated_gzip_body() -> None:
    msg = pb.Message(body=gzip.compress(b"x" * 1000)[:-6])
    msg.system_properties.body_encoding = pb.GZIP
    with pytest.raises(InvalidParameter, match="truncated"):
        convert.decoded_body(msg, 1 << 20)
    msg.body = gzip.compress(b"x" * 1000)
    assert convert.decoded_body(msg, 1 << 20) == b"x" * 1000


# -- Spark ------------------------------------------------------------------------------------------
def test_spark_pull_reads_poison_with_the_body_as_stored() -> None:
    pulled = decoded_pull(0, 6, BODY, "T/0", 0)
    assert [m.queue_offset for m in pulled.messages] == [0, 1, 2, 3, 4, 5]
    assert pulled.messages[2].body == b"not zlib"
    assert pulled.broken is None
    broken = bytearray(record(7, b"x"))
    broken[4:8] = b"\x00\x00\x00\x01"
    pulled = decoded_pull(0, 9, record(6, b"six") + bytes(broken), "T/0", 6)
    assert [m.body for m in pulled.messages] == [b"six"] and pulled.broken == 7
