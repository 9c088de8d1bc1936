"""Property tests for the remoting codec: round trips in any chunking, and no crash on any bytes."""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _support.examples import examples
from rocketq.errors import FrameError
from rocketq.remoting import FrameDecoder, LanguageCode, RemotingCommand, SerializeType, encode

I16 = st.integers(-(2**15), 2**15 - 1)
I32 = st.integers(-(2**31), 2**31 - 1)
texts = st.text(max_size=20)
nonempty_texts = st.text(min_size=1, max_size=20)


@st.composite
def commands(draw: st.DrawFn) -> RemotingCommand:
    binary = draw(st.booleans())
    if binary:
        # ROCKETMQ header: int16 code/version; empty strings decode as null, so draw non-empty ones.
        return RemotingCommand(
            code=draw(I16),
            language=draw(st.sampled_from(LanguageCode)),
            version=draw(I16),
            opaque=draw(I32),
            flag=draw(I32),
            remark=draw(st.none() | nonempty_texts),
            ext_fields=draw(st.dictionaries(nonempty_texts, nonempty_texts, max_size=5)),
            body=draw(st.binary(max_size=300)),
            serialize_type=SerializeType.ROCKETMQ,
        )
    return RemotingCommand(
        code=draw(I32),
        language=draw(st.sampled_from(LanguageCode)),
        version=draw(I32),
        opaque=draw(I32),
        flag=draw(I32),
        remark=draw(st.none() | texts),
        ext_fields=draw(st.dictionaries(texts, texts, max_size=5)),
        body=draw(st.binary(max_size=300)),
        serialize_type=SerializeType.JSON,
    )


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    chunks = []
    prev = 0
    for p in [*points, len(data)]:
        chunks.append(data[prev:p])
        prev = p
    return chunks


@pytest.mark.slow  # the longest codec properties stay out of make fast
@settings(max_examples=examples(300), suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(commands(), min_size=1, max_size=8), st.lists(st.integers(min_value=0), max_size=12))
def test_round_trip_in_any_chunking(cmds: list[RemotingCommand], cuts: list[int]) -> None:
    data = b"".join(encode(c) for c in cmds)
    decoder = FrameDecoder()
    got: list[RemotingCommand] = []
    for chunk in split(data, cuts):
        got += decoder.feed(chunk)
    assert got == cmds
    assert decoder.buffered == 0


@settings(max_examples=examples(300))
@given(commands())
def test_reencoding_a_decoded_command_is_identical(cmd: RemotingCommand) -> None:
    data = encode(cmd)
    (decoded,) = FrameDecoder().feed(data)
    assert encode(decoded) == data


def feed_all(decoder: FrameDecoder, chunks: list[bytes]) -> None:
    try:
        for chunk in chunks:
            decoder.feed(chunk)
    except FrameError:
        assert decoder.failed


@settings(max_examples=examples(500))
@given(st.binary(max_size=2000), st.lists(st.integers(min_value=0), max_size=8), st.integers(8, 4096))
def test_arbitrary_bytes_raise_only_frame_error(data: bytes, cuts: list[int], max_frame: int) -> None:
    feed_all(FrameDecoder(max_frame_size=max_frame), split(data, cuts))


@settings(max_examples=examples(500))
@given(st.integers(0, 255), st.binary(max_size=400), st.binary(max_size=50), st.integers(-3, 3))
def test_well_framed_garbage_headers_raise_only_frame_error(
    serialize_type: int, header: bytes, body: bytes, skew: int
) -> None:
    # A valid frame prefix around arbitrary header bytes reaches the header decoders.
    hlen = max(0, len(header) + skew)
    data = struct.pack(">iI", 4 + len(header) + len(body), (serialize_type << 24) | hlen) + header + body
    feed_all(FrameDecoder(), [data])


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
header_keys = st.sampled_from(
    [
        "code",
        "language",
        "version",
        "opaque",
        "flag",
        "remark",
        "extFields",
        "serializeTypeCurrentRPC",
        "other",
    ]
)


@pytest.mark.slow
@settings(max_examples=examples(500))
@given(st.dictionaries(header_keys, json_values, max_size=9) | json_values)
def test_any_json_header_decodes_or_raises_frame_error(obj: Any) -> None:
    header = json.dumps(obj).encode()
    data = struct.pack(">iI", 4 + len(header), len(header)) + header
    decoder = FrameDecoder()
    try:
        (cmd,) = decoder.feed(data)
    except FrameError:
        return
    assert all(type(k) is str and type(v) is str for k, v in cmd.ext_fields.items())
    assert cmd.remark is None or type(cmd.remark) is str
    assert isinstance(cmd.language, LanguageCode)
    # Whatever was accepted can be written back (JSON type) and read again unchanged.
    (again,) = FrameDecoder().feed(encode(cmd))
    assert again == cmd


@settings(max_examples=examples(300))
@given(
    st.lists(
        st.tuples(nonempty_texts, nonempty_texts | st.integers() | st.booleans() | st.none()),
        max_size=6,
    )
)
def test_ext_field_values_always_become_strings(pairs: list[tuple[str, Any]]) -> None:
    ext = dict(pairs)
    header = json.dumps({"code": 0, "extFields": ext}).encode()
    (cmd,) = FrameDecoder().feed(struct.pack(">iI", 4 + len(header), len(header)) + header)
    expected = {
        k: ("true" if v is True else "false" if v is False else str(v))
        for k, v in ext.items()
        if v is not None
    }
    assert cmd.ext_fields == expected
