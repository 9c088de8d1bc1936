"""The compiled frame of a producer's send request (``rocketq._speedups.send_request_frame``)
against its pure-Python reference (:func:`rocketq.client.send_request.pure_send_request_frame`):
the same bytes, or the same exception with the same text, for the usual arguments and odd ones
alike (skipped, saying why, when the compiled module is not in use). The frame decodes back to
the request's fields, whichever implementation made it."""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketq import speedups
from rocketq.client import send_request as module
from rocketq.client.send_request import pure_send_request_frame, send_request_frame
from rocketq.remoting.codec import FrameDecoder
from rocketq.remoting.codes import RequestCode

compiled_only = pytest.mark.skipif(
    speedups.COMPILED is None, reason=f"compiled codecs not in use: {speedups.REASON}"
)


class Flag(enum.IntEnum):
    ONE = 1


def outcome(fn: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    try:
        return "value", fn(*args)
    except Exception as exc:  # the same exception type and message both ways
        return type(exc).__name__, str(exc)


# every character class the JSON escaping treats apart: quotes, backslashes, control characters,
# the separators of the properties text, non-ASCII, and lone surrogates (no UTF-8 form)
texts = st.text(
    alphabet=st.one_of(
        st.sampled_from('"\\\x00\x01\x02\x08\x0c\n\r\t\x1f\x7f/é\u2028\U0001f600\ud800'),
        st.characters(codec="utf-8"),
    ),
    max_size=40,
)
ints = st.one_of(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**70), 2**70), st.sampled_from([0, -1]))
odd = st.one_of(
    st.none(), st.booleans(), st.floats(allow_nan=False), st.just(Flag.ONE), st.binary(max_size=4)
)


@compiled_only
@settings(max_examples=400, deadline=None)
@given(
    args=st.tuples(
        ints,  # opaque
        texts,  # group
        texts,  # topic
        ints,  # queue id
        ints,  # sys flag
        ints,  # born ms
        ints,  # flag
        texts,  # properties
        st.booleans(),  # batch
        texts,  # broker name
        st.binary(max_size=64),  # body
    )
)
def test_the_compiled_frame_is_the_pure_one(args: tuple[Any, ...]) -> None:
    assert outcome(send_request_frame, *args) == outcome(pure_send_request_frame, *args)


@compiled_only
@settings(max_examples=200, deadline=None)
@given(
    position=st.integers(0, 10),
    value=st.one_of(odd, texts, ints),
)
def test_odd_arguments_get_the_pure_frame_or_error(position: int, value: object) -> None:
    args: list[object] = [5, "PG", "T", 1, 0, 1_800_000_000_000, 0, "UNIQ_KEY\x01X", False, "broker-a", b"b"]
    args[position] = value
    assert outcome(send_request_frame, *args) == outcome(pure_send_request_frame, *args)


@compiled_only
def test_the_wrong_number_of_arguments_is_the_pure_error() -> None:
    assert outcome(send_request_frame, 1, "PG") == outcome(pure_send_request_frame, 1, "PG")


@pytest.mark.parametrize("make", [pure_send_request_frame, send_request_frame], ids=["pure", "active"])
@pytest.mark.parametrize("batch", [False, True])
def test_the_frame_decodes_to_the_request(make: Callable[..., bytes], batch: bool) -> None:
    frame = make(77, "PG", "Topic-1", 3, 1, 1_800_000_000_123, 9, "UNIQ_KEY\x01ABC\x02WAIT\x01true", batch,
                 "broker-a", b"hello")  # fmt: skip
    (cmd,) = FrameDecoder().feed(frame)
    assert cmd.code == (RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2)
    assert cmd.opaque == 77 and cmd.flag == 0 and cmd.body == b"hello"
    assert cmd.ext_fields == {
        "a": "PG",
        "b": "Topic-1",
        "c": "TBW102",
        "d": "4",
        "e": "3",
        "f": "1",
        "g": "1800000000123",
        "h": "9",
        "i": "UNIQ_KEY\x01ABC\x02WAIT\x01true",
        "j": "0",
        "k": "false",
        "m": "true" if batch else "false",
        "n": "broker-a",
    }
    assert module.send_request_frame is (
        speedups.COMPILED.send_request_frame if speedups.COMPILED is not None else pure_send_request_frame
    )
