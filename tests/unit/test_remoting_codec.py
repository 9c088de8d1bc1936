"""Remoting frame and header codec: byte-exact encoding, tolerant decoding, framing errors."""

from __future__ import annotations

import json
import struct
import threading

import pytest

from rocketq.errors import LocalProtocolError, RemoteProtocolError
from rocketq.remoting import (
    CURRENT_VERSION,
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    FrameDecoder,
    LanguageCode,
    RemotingCommand,
    RequestCode,
    SerializeType,
    create_request,
    create_response,
    encode,
)
from rocketq.remoting.codes import DEFAULT_MAX_FRAME_SIZE, Version
from rocketq.remoting.command import (
    coerce_ext_fields,
    decode_json_header,
    decode_rocketmq_header,
    encode_json_header,
    encode_rocketmq_header,
)

WORKED_HEADER = (
    b'{"code":0,"flag":1,"language":"JAVA","opaque":5,"serializeTypeCurrentRPC":"JSON","version":475}'
)


def frame(header: bytes, body: bytes = b"", serialize_type: int = 0) -> bytes:
    return (
        struct.pack(">iI", 4 + len(header) + len(body), (serialize_type << 24) | len(header)) + header + body
    )


def decode_one(data: bytes) -> RemotingCommand:
    (cmd,) = FrameDecoder().feed(data)
    return cmd


# -- the spec's worked example ----------------------------------------------------------------


def test_worked_example_95_byte_header_byte_for_byte() -> None:
    cmd = RemotingCommand(0, LanguageCode.JAVA, 475, opaque=5, flag=1)
    data = encode(cmd)
    assert len(WORKED_HEADER) == 95
    assert data[:8] == bytes.fromhex("00000063 0000005F")
    assert data[8:] == WORKED_HEADER
    assert data == bytes.fromhex("00000063 0000005F") + WORKED_HEADER
    assert len(data) == 4 + 99


def test_worked_example_decodes() -> None:
    cmd = decode_one(bytes.fromhex("00000063 0000005F") + WORKED_HEADER)
    assert cmd == RemotingCommand(0, LanguageCode.JAVA, 475, opaque=5, flag=1)
    assert cmd.is_response
    assert not cmd.is_oneway
    assert cmd.ext_fields == {}
    assert cmd.remark is None
    assert cmd.body == b""
    assert cmd.serialize_type is SerializeType.JSON


def test_java_request_example_from_spec() -> None:
    cmd = RemotingCommand(105, opaque=12, ext_fields={"topic": "TopicTest"})
    assert encode_json_header(cmd) == (
        b'{"code":105,"extFields":{"topic":"TopicTest"},"flag":0,"language":"JAVA","opaque":12,'
        b'"serializeTypeCurrentRPC":"JSON","version":475}'
    )


# -- JSON header encoding ---------------------------------------------------------------------


def test_json_keys_alphabetical_with_remark_and_body() -> None:
    cmd = RemotingCommand(
        17, LanguageCode.PYTHON, 397, opaque=7, flag=1, remark="no topic", ext_fields={"b": "2", "a": "1"}
    )
    cmd.body = b"\x00\x01body"
    data = encode(cmd)
    (hlen_word,) = struct.unpack_from(">I", data, 4)
    header = data[8 : 8 + (hlen_word & 0xFFFFFF)]
    assert header == (
        b'{"code":17,"extFields":{"b":"2","a":"1"},"flag":1,"language":"PYTHON","opaque":7,'
        b'"remark":"no topic","serializeTypeCurrentRPC":"JSON","version":397}'
    )
    assert list(json.loads(header)) == sorted(json.loads(header))
    assert data.endswith(b"\x00\x01body")
    assert struct.unpack_from(">i", data)[0] == len(data) - 4


def test_json_nulls_and_empty_ext_fields_omitted() -> None:
    header = json.loads(encode_json_header(RemotingCommand(34, opaque=1)))
    assert "remark" not in header
    assert "extFields" not in header
    assert header["language"] == "JAVA"
    assert header["version"] == CURRENT_VERSION == Version.V5_3_3 == 475


def test_json_header_escapes_and_utf8() -> None:
    cmd = RemotingCommand(
        1, opaque=2, flag=1, remark='quote " back \\ nl \n é 漢', ext_fields={"k\u0001": "v"}
    )
    header = encode_json_header(cmd)
    assert "漢".encode() in header  # UTF-8, not \\u escapes, as fastjson writes
    assert json.loads(header)["remark"] == cmd.remark
    assert decode_one(encode(cmd)) == cmd


# -- JSON header decoding (tolerant) ----------------------------------------------------------


def test_ali_ons_ext_fields_raw_numbers_and_booleans_are_coerced() -> None:
    header = (
        b'{"code":11,"language":"JAVA","opaque":3,"flag":0,"version":121,"extFields":'
        b'{"consumerGroup":"CG","queueId":0,"sysFlag":6,"subVersion":1700000000000,'
        b'"commitOffset":-1,"postSub":true,"unitMode":false,"maybe":null,"ratio":1.5,"whole":2.0}}'
    )
    cmd = decode_one(frame(header))
    assert cmd.ext_fields == {
        "consumerGroup": "CG",
        "queueId": "0",
        "sysFlag": "6",
        "subVersion": "1700000000000",
        "commitOffset": "-1",
        "postSub": "true",
        "unitMode": "false",
        "ratio": "1.5",
        "whole": "2",
    }
    assert all(type(v) is str for v in cmd.ext_fields.values())
    assert cmd.version == Version.V3_5_2
    assert cmd.code == RequestCode.PULL_MESSAGE


def test_missing_fields_default_and_unknown_keys_ignored() -> None:
    cmd = decode_one(
        frame(b'{"code":34,"opaque":9,"futureField":{"x":[1,2]},"serializeTypeCurrentRPC":"ROCKETMQ"}')
    )
    assert cmd.code == 34
    assert cmd.opaque == 9
    assert cmd.flag == 0
    assert cmd.remark is None
    assert cmd.ext_fields == {}
    assert cmd.language is LanguageCode.JAVA
    assert cmd.version == 0
    assert cmd.serialize_type is SerializeType.JSON  # the frame's type byte decides


@pytest.mark.parametrize(
    ("language", "expected"),
    [
        ('"NODE_JS"', LanguageCode.NODE_JS),
        ("3", LanguageCode.PYTHON),
        ('"COBOL"', LanguageCode.OTHER),
        ("99", LanguageCode.OTHER),
        ("null", LanguageCode.JAVA),
    ],
)
def test_language_by_name_or_number(language: str, expected: LanguageCode) -> None:
    cmd = decode_json_header(b'{"code":0,"language":%s}' % language.encode())
    assert cmd.language is expected


def test_null_extfields_and_null_remark() -> None:
    cmd = decode_json_header(b'{"code":0,"extFields":null,"remark":null,"flag":null}')
    assert cmd.ext_fields == {}
    assert cmd.remark is None
    assert cmd.flag == 0


def test_numeric_strings_accepted_for_int_fields() -> None:
    cmd = decode_json_header(b'{"code":"105","opaque":"7","flag":1}')
    assert (cmd.code, cmd.opaque, cmd.flag) == (105, 7, 1)


def test_bare_int_keys_tolerated() -> None:
    cmd = decode_json_header(b'{"code":0,"extFields":{0:"10.0.0.1:10911"}}')
    assert cmd.ext_fields == {"0": "10.0.0.1:10911"}


def test_coerce_ext_fields() -> None:
    assert coerce_ext_fields({"a": 1, "b": True, "c": False, "d": None, "e": "x", "f": -5}) == {
        "a": "1",
        "b": "true",
        "c": "false",
        "e": "x",
        "f": "-5",
    }
    assert coerce_ext_fields(None) == {}


# -- ROCKETMQ binary header -------------------------------------------------------------------


def test_rocketmq_header_layout() -> None:
    cmd = RemotingCommand(
        310,
        LanguageCode.JAVA,
        475,
        opaque=42,
        flag=0,
        remark="hi",
        ext_fields={"a": "PG", "b": "T"},
        serialize_type=SerializeType.ROCKETMQ,
    )
    expected_map = b"\x00\x01a\x00\x00\x00\x02PG" + b"\x00\x01b\x00\x00\x00\x01T"
    expected = (
        struct.pack(">hbhiii", 310, 0, 475, 42, 0, 2)
        + b"hi"
        + struct.pack(">i", len(expected_map))
        + expected_map
    )
    assert encode_rocketmq_header(cmd) == expected
    data = encode(cmd)
    assert data[4] == 1  # type byte ROCKETMQ
    assert decode_one(data) == cmd


def test_rocketmq_header_round_trip_with_body_and_no_remark() -> None:
    cmd = RemotingCommand(
        11, LanguageCode.GO, 409, opaque=-5, flag=2, ext_fields={"topic": "T", "漢": "字"}, body=b"\xff" * 300
    )
    cmd.serialize_type = SerializeType.ROCKETMQ
    got = decode_one(encode(cmd))
    assert got == cmd
    assert got.remark is None


def test_rocketmq_header_zero_lengths_decode_as_absent() -> None:
    cmd = RemotingCommand(
        1, remark="", ext_fields={"k": "", "": "v", "x": "y"}, serialize_type=SerializeType.ROCKETMQ
    )
    got = decode_rocketmq_header(encode_rocketmq_header(cmd))
    assert got.remark is None
    assert got.ext_fields == {"x": "y"}


def test_rocketmq_header_cannot_hold_large_codes() -> None:
    cmd = RemotingCommand(RequestCode.POP_MESSAGE, serialize_type=SerializeType.ROCKETMQ)
    with pytest.raises(LocalProtocolError, match="does not fit"):
        encode(cmd)


def test_rocketmq_unknown_language_byte_is_other() -> None:
    header = struct.pack(">hbhiii", 0, 77, 0, 1, 0, 0) + struct.pack(">i", 0)
    assert decode_rocketmq_header(header).language is LanguageCode.OTHER


@pytest.mark.parametrize(
    "header",
    [
        b"",
        b"\x00" * 16,  # shorter than the fixed part
        struct.pack(">hbhiii", 0, 0, 0, 0, 0, 1000) + struct.pack(">i", 0),  # remark past the end
        struct.pack(">hbhiii", 0, 0, 0, 0, 0, -1) + struct.pack(">i", 0),
        struct.pack(">hbhiii", 0, 0, 0, 0, 0, 0) + struct.pack(">i", 50),  # map past the end
        struct.pack(">hbhiii", 0, 0, 0, 0, 0, 0) + struct.pack(">i", 3) + b"\x00\x05a",  # key past the map
        struct.pack(">hbhiii", 0, 0, 0, 0, 0, 0) + struct.pack(">i", 7) + b"\x00\x01a\x00\x00\x00\x09",
        struct.pack(">hbhiii", 0, 0, 0, 0, 0, 0) + struct.pack(">i", 1) + b"\x00",
    ],
)
def test_rocketmq_header_corruption_is_frame_error(header: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        FrameDecoder().feed(frame(header, serialize_type=1))


# -- commands ---------------------------------------------------------------------------------


def test_create_request_and_response() -> None:
    req = create_request(RequestCode.QUERY_CONSUMER_OFFSET, {"queueId": 3, "setZeroIfNotFound": False}, b"b")
    assert req.ext_fields == {"queueId": "3", "setZeroIfNotFound": "false"}
    assert req.flag == 0
    assert req.opaque > 0
    assert req.version == CURRENT_VERSION
    req.serialize_type = SerializeType.ROCKETMQ
    resp = create_response(req, 22, "Not found", {"offset": -1})
    assert resp.opaque == req.opaque
    assert resp.flag == FLAG_RESPONSE
    assert resp.is_response
    assert resp.ext_fields == {"offset": "-1"}
    assert resp.serialize_type is SerializeType.JSON
    data = encode(resp)
    assert data[4] == 0  # ali-ons reads the whole int as the header length: type byte must be 0
    oneway = create_request(RequestCode.UPDATE_CONSUMER_OFFSET, oneway=True)
    assert oneway.flag == FLAG_ONEWAY
    assert oneway.is_oneway


def test_opaques_unique_across_threads() -> None:
    seen: list[list[int]] = [[] for _ in range(8)]

    def work(out: list[int]) -> None:
        for _ in range(2000):
            out.append(create_request(0).opaque)

    threads = [threading.Thread(target=work, args=(out,)) for out in seen]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    flat = [o for out in seen for o in out]
    assert len(set(flat)) == len(flat)
    assert all(0 < o <= 0x7FFFFFFF for o in flat)


def test_repr_does_not_dump_the_body() -> None:
    text = repr(RemotingCommand(10, body=b"x" * 10_000))
    assert "10000 B" in text
    assert len(text) < 400


# -- framing ----------------------------------------------------------------------------------


def sample_commands() -> list[RemotingCommand]:
    return [
        create_request(RequestCode.SEND_MESSAGE_V2, {"a": "PG", "b": "T", "e": 1}, b"hello"),
        RemotingCommand(0, opaque=5, flag=1),
        RemotingCommand(
            11,
            opaque=77,
            ext_fields={"topic": "T"},
            body=bytes(range(256)),
            serialize_type=SerializeType.ROCKETMQ,
        ),
        RemotingCommand(1, opaque=8, flag=1, remark="boom"),
    ]


def test_many_frames_in_one_feed() -> None:
    cmds = sample_commands() * 50
    data = b"".join(encode(c) for c in cmds)
    decoder = FrameDecoder()
    assert decoder.feed(data) == cmds
    assert decoder.buffered == 0


def test_frames_split_at_every_byte_boundary() -> None:
    cmds = sample_commands()
    data = b"".join(encode(c) for c in cmds)
    for cut in range(len(data) + 1):
        decoder = FrameDecoder()
        got = decoder.feed(data[:cut])
        got += decoder.feed(data[cut:])
        assert got == cmds, cut
        assert decoder.buffered == 0


def test_byte_by_byte() -> None:
    cmds = sample_commands()
    data = b"".join(encode(c) for c in cmds)
    decoder = FrameDecoder()
    got: list[RemotingCommand] = []
    for i in range(len(data)):
        got += decoder.feed(data[i : i + 1])
    assert got == cmds


def test_large_frame_in_small_chunks_then_more_frames() -> None:
    big = RemotingCommand(10, opaque=1, body=b"z" * 1_000_000)
    small = RemotingCommand(0, opaque=2, flag=1)
    data = encode(big) + encode(small) + encode(small)
    decoder = FrameDecoder()
    got: list[RemotingCommand] = []
    for i in range(0, len(data), 4096):
        got += decoder.feed(data[i : i + 4096])
    assert got == [big, small, small]
    assert decoder.buffered == 0


def test_accepts_exactly_max_frame_size() -> None:
    header = encode_json_header(RemotingCommand(0))
    limit = 8 + len(header) + 100
    cmd = RemotingCommand(0, body=b"b" * 100)
    assert len(encode(cmd)) == limit
    assert FrameDecoder(max_frame_size=limit).feed(encode(cmd)) == [cmd]
    with pytest.raises(RemoteProtocolError, match=f"frame of {limit} B exceeds max {limit - 1} B"):
        FrameDecoder(max_frame_size=limit - 1).feed(encode(cmd))


def test_oversize_frame_rejected_from_its_length_field_alone() -> None:
    decoder = FrameDecoder()
    with pytest.raises(RemoteProtocolError, match=f"exceeds max {DEFAULT_MAX_FRAME_SIZE} B"):
        decoder.feed(struct.pack(">i", DEFAULT_MAX_FRAME_SIZE))
    assert decoder.failed
    with pytest.raises(RemoteProtocolError):  # the stream cannot be resynchronised
        decoder.feed(encode(RemotingCommand(0)))


@pytest.mark.parametrize(
    ("length", "reason"), [(-1, "negative"), (-(2**31), "negative"), (0, "below"), (3, "below")]
)
def test_bad_length(length: int, reason: str) -> None:
    with pytest.raises(RemoteProtocolError, match=reason):
        FrameDecoder().feed(struct.pack(">i", length) + b"\x00" * 8)


def test_header_length_beyond_frame() -> None:
    data = struct.pack(">iI", 4 + 10, 50) + b"{" * 10
    with pytest.raises(RemoteProtocolError, match="header length 50 B exceeds frame length 14 B"):
        FrameDecoder().feed(data)


@pytest.mark.parametrize(
    "header",
    [b"garbage!", b"[1,2,3]", b'"text"', b"{", b'{"code":{}}', b'{"code":0,"extFields":[1]}', b"\xff\xfe{}"],
)
def test_undecodable_json_header(header: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        FrameDecoder().feed(frame(header))


def test_unknown_serialize_type() -> None:
    with pytest.raises(RemoteProtocolError, match="unknown serialize type 7"):
        FrameDecoder().feed(frame(b"{}", serialize_type=7))


def test_good_frames_before_a_partial_one_are_returned() -> None:
    cmds = sample_commands()
    data = b"".join(encode(c) for c in cmds)
    decoder = FrameDecoder()
    assert decoder.feed(data + data[:10]) == cmds
    assert decoder.buffered == 10
    assert decoder.feed(data[10:]) == cmds


def test_max_frame_size_must_hold_a_frame() -> None:
    with pytest.raises(ValueError, match="below the minimum"):
        FrameDecoder(max_frame_size=7)
