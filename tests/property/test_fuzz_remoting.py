"""Fuzzing the remoting decoders: bytes from a socket become commands or a RemoteProtocolError
(a FrameError), never another exception, in bounded time, without allocating the lengths a
frame or header declares (tests/_support/fuzz.py)."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from _support.fuzz import fuzz, only, peak_allocation
from rocketq.errors import RemoteProtocolError
from rocketq.remoting import FrameDecoder, RemotingCommand, SerializeType, create_request, encode
from rocketq.remoting.command import decode_header, decode_json_header, decode_rocketmq_header

I32 = st.integers(-(2**31), 2**31 - 1)
I16 = st.integers(-(2**15), 2**15 - 1)


def feed(decoder: FrameDecoder, chunks: list[bytes]) -> list[RemotingCommand]:
    out: list[RemotingCommand] = []
    try:
        for chunk in chunks:
            out += decoder.feed(chunk)
    except RemoteProtocolError:
        assert decoder.failed and decoder.buffered == 0
    return out


@st.composite
def mutated_frames(draw: st.DrawFn) -> bytes:
    """Valid frames of both header types with bytes flipped, cut, or inserted."""
    serialize = draw(st.sampled_from([SerializeType.JSON, SerializeType.ROCKETMQ]))
    cmd = create_request(
        draw(I16),
        ext_fields=draw(
            st.dictionaries(st.text(min_size=1, max_size=8), st.text(min_size=1, max_size=8), max_size=4)
        ),
        body=draw(st.binary(max_size=64)),
    )
    cmd.serialize_type = serialize
    cmd.opaque = draw(I32)  # create_request numbers requests from a counter: keep the draw stable
    data = bytearray(encode(cmd) * draw(st.integers(1, 3)))
    for _ in range(draw(st.integers(0, 6))):
        at = draw(st.integers(0, len(data) - 1))
        action = draw(st.sampled_from(["flip", "cut", "insert", "int"]))
        if action == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif action == "cut":
            del data[at:]
            if not data:
                break
        elif action == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        else:  # an extreme int32 where a length may be
            data[at : at + 4] = struct.pack(">i", draw(st.sampled_from([-1, 2**31 - 1, 2**24 - 1, 1 << 30])))
    return bytes(data)


@fuzz(300)
@given(mutated_frames(), st.lists(st.integers(1, 64), max_size=6))
def test_mutated_frames_decode_or_raise_remote_protocol_error(data: bytes, cuts: list[int]) -> None:
    chunks, at = [], 0
    for size in cuts:
        chunks.append(data[at : at + size])
        at += size
    chunks.append(data[at:])
    feed(FrameDecoder(), chunks)


@fuzz(200)
@given(st.binary(max_size=600))
def test_any_header_bytes_of_either_type(header: bytes) -> None:
    for kind in (SerializeType.JSON, SerializeType.ROCKETMQ, 2):
        only((RemoteProtocolError,), decode_header, kind, header, b"")
    only((RemoteProtocolError,), decode_json_header, header)
    only((RemoteProtocolError,), decode_rocketmq_header, header)


@fuzz(100)
@given(I16, I16, I32, I32, I32, I32, st.binary(max_size=64))
def test_rocketmq_headers_declaring_huge_lengths_allocate_nothing_for_them(
    code: int, version: int, opaque: int, flag: int, remark_len: int, ext_len: int, tail: bytes
) -> None:
    header = (
        struct.pack(">hbhiii", code, 0, version, opaque, flag, remark_len) + struct.pack(">i", ext_len) + tail
    )
    only((RemoteProtocolError,), decode_rocketmq_header, header)
    assert peak_allocation(decode_rocketmq_header, header) < 64 * 1024


@fuzz(100)
@given(st.integers(9, 2**31 - 1), st.integers(0, 2**24 - 1), st.binary(max_size=256))
def test_a_frame_declaring_a_huge_length_is_not_allocated(length: int, hlen: int, tail: bytes) -> None:
    data = struct.pack(">iI", length, hlen) + tail
    decoder = FrameDecoder()
    assert peak_allocation(feed, decoder, [data]) < 64 * 1024 + 4 * len(data)
    assert decoder.failed or decoder.buffered <= len(data)


@fuzz(50)
@given(st.integers(1, 64))
def test_many_small_chunks_of_a_large_frame_cost_linear_memory(chunk: int) -> None:
    frame = encode(create_request(10, body=bytes(200_000)))
    decoder = FrameDecoder()
    out: list[RemotingCommand] = []

    def run() -> None:
        for at in range(0, len(frame), chunk * 1024):
            out.extend(decoder.feed(frame[at : at + chunk * 1024]))

    # the bytes themselves plus slack for the buffer's growth, not one copy per chunk
    assert peak_allocation(run) < 3 * len(frame) + 64 * 1024
    assert len(out) == 1 and len(out[0].body) == 200_000
