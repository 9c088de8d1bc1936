"""A follower's check of the leader's entry bytes: the compiled ``check_entries`` against its
pure twin (``entry_format.check_entries_pure``, itself :func:`entry_problem` entry by entry) on
runs of entries as a leader writes them, with fields and bytes corrupted, cut short or with
junk after them, and with DLedger's unchecked entries (both CRC fields 0) among them."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketq import speedups
from rocketq.ha import entry_format as fmt

pytestmark = pytest.mark.skipif(
    speedups.COMPILED is None, reason=f"compiled codecs not in use: {speedups.REASON}"
)

POS = st.integers(0, 2**40)
INDEX = st.integers(0, 2**40)
TERM = st.integers(0, 2**20)
CHAIN = st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1))
# (offset within the header, struct format) of each field a corruption may rewrite
FIELDS = [(off, ">q" if off in (8, 16, 24) else ">i") for off in (0, 4, 8, 16, 24, 32, 36, 40, 44)]
FIELD_VALUES = st.sampled_from([0, 1, 2, 3, 4, -1, 47, 48, 49, 2**31 - 1, -(2**31)])


@st.composite
def runs(draw: st.DrawFn) -> tuple[bytes, int, int, int | None, int]:
    """``(bytes, pos, index, prev_chain, min_term)``: a run that passes, then maybe damaged."""
    pos, index, prev, min_term = draw(POS), draw(INDEX), draw(CHAIN), draw(TERM)
    if draw(st.booleans()):
        index = 0  # the first entry of a log: chained from 0 even with prev_chain None
    chain = prev or 0
    term = min_term
    parts: list[bytes] = []
    heads: list[int] = []
    at = 0
    for i in range(draw(st.integers(0, 6))):
        body = draw(st.binary(max_size=80))
        term += draw(st.sampled_from([0, 0, 1]))
        magic = draw(st.sampled_from([fmt.MAGIC_NORMAL, fmt.MAGIC_NOOP, fmt.MAGIC_CONFIG_CHANGE]))
        raw = fmt.encode_entry(magic, index + i, term, pos + at, body, chain)
        if draw(st.integers(0, 9)) == 0:  # as DLedger writes it: no checksums
            raw = raw[:36] + bytes(8) + raw[44:]
        chain = fmt.decode_header(raw).chain_crc
        heads.append(at)
        parts.append(raw)
        at += len(raw)
    data = bytearray(b"".join(parts))
    for _ in range(draw(st.integers(0, 2))):
        how = draw(st.sampled_from(["field", "byte", "cut", "junk"]))
        if how == "field" and heads:
            off, form = draw(st.sampled_from(FIELDS))
            at = draw(st.sampled_from(heads)) + off
            if at + struct.calcsize(form) <= len(data):  # not cut off by an earlier damage
                struct.pack_into(form, data, at, draw(FIELD_VALUES))
        elif how == "byte" and data:
            k = draw(st.integers(0, len(data) - 1))
            data[k] ^= 1 << draw(st.integers(0, 7))
        elif how == "cut" and data:
            del data[draw(st.integers(0, len(data) - 1)) :]
        elif how == "junk":
            data += draw(st.binary(max_size=60))
    return bytes(data), pos, index, prev, min_term


def outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "value", fn(*args)
    except Exception as exc:
        return type(exc).__name__, str(exc)


@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow])
@given(runs())
def test_check_entries_agrees_with_the_pure_check(run: tuple[bytes, int, int, int | None, int]) -> None:
    data, pos, index, prev, min_term = run
    compiled = speedups.COMPILED
    assert compiled is not None
    want = fmt.check_entries_pure(data, pos, index, prev, min_term)
    assert compiled.check_entries(data, pos, index, prev, min_term) == want
    assert compiled.check_entries(memoryview(data), pos, index, prev, min_term) == want
    count, size, problem, records, _, _ = want
    assert len(records) == 32 * count and (problem is None) == (size == len(data))


def test_check_entries_on_a_clean_run_gives_the_records_and_chain_of_the_encoder() -> None:
    bodies = [b"a" * n for n in (0, 5, 100)]
    positions = [1000, 1048, 1101]
    data, records, chain = fmt.encode_entries_pure(fmt.MAGIC_NORMAL, 7, 3, positions, bodies, -5)
    for check in (fmt.check_entries_pure, fmt.check_entries):
        assert check(data, 1000, 7, -5, 2) == (3, len(data), None, records, chain, 3)
        count, size, problem, got, _, _ = check(data, 1000, 7, -4, 2)
        assert (count, size, got) == (0, 0, b"") and problem is not None and problem.startswith("chainCrc")
        assert check(data[:60], 1000, 7, -5, 2)[:3] == (1, 48, "12 B left, less than a 48 B header")


def test_compiled_check_entries_checks_its_arguments() -> None:
    compiled = speedups.COMPILED
    assert compiled is not None
    with pytest.raises(TypeError, match="takes 5 arguments"):
        compiled.check_entries(b"", 0, 0, None)
    with pytest.raises(ValueError, match="2\\*\\*62"):
        compiled.check_entries(b"", 2**63 - 1, 0, None, 0)
    with pytest.raises(ValueError, match="32 bits"):
        compiled.check_entries(b"", 0, 0, 2**40, 0)
    with pytest.raises(TypeError):
        compiled.check_entries("text", 0, 0, None, 0)
    assert outcome(compiled.check_entries, b"", 0, 0, 9, 4) == ("value", (0, 0, None, b"", 9, 4))
