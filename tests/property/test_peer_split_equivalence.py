"""A follower's decode of a form-1 append (the entries as the leader's store holds them): with
the compiled split (``split_raw_entries``) and with the pure one (``peer_codec.split_raw_pure``)
the same message, the same entry bytes and block, or the same RemoteProtocolError, for bodies
as a leader sends them, damaged, cut short, with junk after them or a wrong count."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketq import speedups
from rocketq.ha import entry_format as fmt
from rocketq.ha import peer_codec
from rocketq.ha.raft_types import Append, Entry, EntryKind

pytestmark = pytest.mark.skipif(
    speedups.COMPILED is None, reason=f"compiled codecs not in use: {speedups.REASON}"
)

FIELD_VALUES = st.sampled_from([0, 1, 2, 3, -1, 47, 48, 49, 200, 2**31 - 1, -(2**31)])


@st.composite
def append_bodies(draw: st.DrawFn) -> bytes:
    """The body of a form-1 APPEND as a leader encodes it, then maybe damaged."""
    entries = []
    index, term, pos, chain = draw(st.integers(0, 2**40)), draw(st.integers(0, 2**20)), 0, 0
    raw_parts = []
    for i in range(draw(st.integers(0, 5))):
        magic = draw(st.sampled_from([fmt.MAGIC_NORMAL, fmt.MAGIC_NOOP]))
        body = b"" if magic == fmt.MAGIC_NOOP else draw(st.binary(max_size=60))
        raw = fmt.encode_entry(magic, index + i, term, pos, body, chain)
        chain = fmt.decode_header(raw).chain_crc
        pos += len(raw)
        raw_parts.append(raw)
        entries.append(
            Entry(index + i, term, body, EntryKind.NOOP if magic == fmt.MAGIC_NOOP else EntryKind.NORMAL)
        )
    raw_all = b"".join(raw_parts)
    message = Append("leader", "me", term, index - 1, term, tuple(entries), index)
    if entries:
        _, data = peer_codec.encode(message, lambda first, size: raw_all)
    else:
        _, data = peer_codec.encode(message)
    body = bytearray(data)
    head = len(body) - len(raw_all)  # where the entries start
    for _ in range(draw(st.integers(0, 2))):
        how = draw(st.sampled_from(["field", "byte", "cut", "junk", "count"]))
        if how == "field" and raw_parts:
            at = (
                head
                + draw(st.sampled_from([0, 4, 44]))
                + sum(map(len, raw_parts[: draw(st.integers(0, len(raw_parts) - 1))]))
            )
            if at + 4 <= len(body):
                struct.pack_into(">i", body, at, draw(FIELD_VALUES))
        elif how == "byte" and len(body) > head:
            k = draw(st.integers(head, len(body) - 1))
            body[k] ^= 1 << draw(st.integers(0, 7))
        elif how == "cut":
            del body[draw(st.integers(0, len(body))) :]
        elif how == "junk":
            body += draw(st.binary(max_size=60))
        elif how == "count" and len(body) >= head >= 5:
            struct.pack_into(">I", body, head - 5, draw(st.sampled_from([0, 1, 2, 6, 2**32 - 1])))
    return bytes(body)


def decoded(data: bytes) -> tuple[str, Any]:
    try:
        message, raws = peer_codec.decode_raw(peer_codec.CODE_APPEND, data)
    except Exception as exc:
        return type(exc).__name__, str(exc)
    block = bytes(raws.block) if isinstance(raws, peer_codec.RawEntries) else None
    return "value", (message, None if raws is None else list(raws), block)


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=append_bodies())
def test_decode_with_the_compiled_split_agrees_with_the_pure_one(
    data: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as m:
        m.setattr(peer_codec, "_split_compiled", None)
        want = decoded(data)
    got = decoded(data)
    assert got == want
    if got[0] == "value" and got[1][1] is not None:
        message, raws, block = got[1]
        assert block == b"".join(raws)
        assert all(type(e) is Entry and isinstance(e.kind, EntryKind) for e in message.entries)
        assert [fmt.decode_entry(r).body for r in raws] == [e.data for e in message.entries]


@settings(max_examples=300)
def entries_at(body: bytes) -> tuple[int, int]:
    """Where the entries of an APPEND body start, and its count field (0, 0 when cut short)."""
    off = 1 + body[0] if body else 0
    off += 1 + body[off] + 8 if len(body) > off else 0
    if off == 0 or len(body) < off + 29:
        return 0, 0
    return off + 29, struct.unpack_from(">I", body, off + 24)[0]


@given(
    st.one_of(st.binary(max_size=300), append_bodies()),
    st.integers(0, 320),
    st.integers(-1, 8),
    st.booleans(),
)
def test_the_compiled_split_is_the_pure_one_or_leaves_the_error_to_it(
    body: bytes, off: int, count: int, at_entries: bool
) -> None:
    if at_entries:
        off, count = entries_at(body)
    compiled = speedups.COMPILED
    assert compiled is not None
    got = compiled.split_raw_entries(body, off, count)
    if got is None:  # malformed: the pure split raises
        with pytest.raises((peer_codec.RemoteProtocolError, struct.error)):
            peer_codec.split_raw_pure(memoryview(body), off, count)
    else:
        assert got == peer_codec.split_raw_pure(memoryview(body), off, count)


def test_the_compiled_entries_are_entries() -> None:
    raw = fmt.encode_entry(fmt.MAGIC_NOOP, 9, 4, 0, b"", 0) + fmt.encode_entry(
        fmt.MAGIC_NORMAL, 10, 4, 48, b"xy", 1
    )
    entries, raws, end = peer_codec.split_raw(memoryview(b"--" + raw), 2, 2)
    assert entries == (Entry(9, 4, b"", EntryKind.NOOP), Entry(10, 4, b"xy")) and end == 2 + len(raw)
    assert raws == [raw[:48], raw[48:]] and hash(entries[1]) == hash(Entry(10, 4, b"xy"))
    assert repr(entries[0]) == repr(Entry(9, 4, b"", EntryKind.NOOP))
