"""Receipt handles: round trip, binding to group/topic, rejection of damaged input."""

from __future__ import annotations

import pytest

from rocketq.broker.pop.receipt import MAX_HANDLE_LENGTH, Receipt, decode_receipt, encode_receipt
from rocketq.errors import InvalidParameter, InvalidReceiptHandle, ResponseCode

R = Receipt(queue_id=3, queue_offset=12345, attempt=2, invisible_until_ms=1_795_000_000_000, nonce=2**64 - 1)


def test_round_trip_and_printable() -> None:
    handle = encode_receipt("G", "T", R)
    assert handle.isascii() and handle.isprintable() and " " not in handle
    assert len(handle) <= MAX_HANDLE_LENGTH
    assert decode_receipt("G", "T", handle) == R


def test_zero_fields_round_trip() -> None:
    r = Receipt(0, 0, 1, 0, 0)
    assert decode_receipt("g", "%RETRY%g", encode_receipt("g", "%RETRY%g", r)) == r


@pytest.mark.parametrize(("group", "topic"), [("G2", "T"), ("G", "T2"), ("", "T")])
def test_bound_to_group_and_topic(group: str, topic: str) -> None:
    handle = encode_receipt("G", "T", R)
    with pytest.raises(InvalidReceiptHandle, match="does not belong"):
        decode_receipt(group, topic, handle)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "garbage",
        "2.3.3039.2.1a1f.ffffffffffffffff.00000000",
        "1.3.3039.2.1a1f.ff",
        "1.-3.3039.2.1a1f.ff.00000000",
        "1.3.30_39.2.1a1f.ff.00000000",
        "1.3.3039.2.1A1F.ff.00000000",
        "1..3039.2.1a1f.ff.00000000",
        "1.3.3039.2.1a1f.ff.00000000.7",
        "1.3.3039.2.1a1f.11111111111111111.00000000",
        "x" * (MAX_HANDLE_LENGTH + 1),
        "1.3.3039.2.1a1f.ff.0000000é",
    ],
)
def test_malformed_rejected(bad: str) -> None:
    with pytest.raises(InvalidReceiptHandle):
        decode_receipt("G", "T", bad)


def test_any_flipped_character_is_rejected() -> None:
    handle = encode_receipt("G", "T", R)
    for i, ch in enumerate(handle):
        if ch == ".":
            continue
        flipped = "0" if ch != "0" else "1"
        with pytest.raises(InvalidReceiptHandle):
            decode_receipt("G", "T", handle[:i] + flipped + handle[i + 1 :])


def test_error_is_an_invalid_parameter_on_the_wire() -> None:
    with pytest.raises(InvalidParameter) as info:
        decode_receipt("G", "T", "nope")
    assert info.value.code == ResponseCode.INVALID_PARAMETER
