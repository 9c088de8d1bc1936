"""The compiled encoders of a request (``rocketq._speedups``: encode_json_header, encode_frame)
against their pure-Python references, on the same commands: the same bytes, or the same
exception with the same text, for usual and unusual field values alike (skipped, saying why,
when the compiled module is not in use)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _support.examples import examples
from rocketq import speedups
from rocketq.remoting import codec, command
from rocketq.remoting.codes import MAX_HEADER_LENGTH, LanguageCode, RequestCode, SerializeType
from rocketq.remoting.command import RemotingCommand

pytestmark = pytest.mark.skipif(
    speedups.COMPILED is None, reason=f"compiled codecs not in use: {speedups.REASON}"
)


def outcome(fn: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    try:
        value = fn(*args)
    except Exception as exc:  # the same exception type and message both ways
        return type(exc).__name__, str(exc)
    return type(value).__name__, value


@contextlib.contextmanager
def pure_header() -> Iterator[None]:
    """The pure encode_json_header behind the pure frame encoder while the block runs."""
    saved = command.encode_json_header
    command.encode_json_header = command.pure_encode_json_header
    try:
        yield
    finally:
        command.encode_json_header = saved


def agree(cmd: Any) -> bytes | None:
    """Both encoders of ``cmd`` agree with their pure twins; the frame when there is one."""
    header = outcome(command.encode_json_header, cmd)
    frame = outcome(codec.encode, cmd)
    with pure_header():
        assert header == outcome(command.pure_encode_json_header, cmd)
        assert frame == outcome(codec.pure_encode, cmd)
    return frame[1] if frame[0] == "bytes" else None


class Text(str):
    """A str subclass: the compiled encoders leave it to the pure ones."""


texts = st.one_of(
    st.text(st.characters(max_codepoint=127), max_size=12),  # ASCII, control characters included
    st.text(max_size=12),  # anything, lone surrogates included
    st.sampled_from(["", '"', "\\", "\x01", "\x7f", "\u2028", "é", "\ud800", "TAGS\x01A\x02KEYS\x01k"]),
)
odd = st.sampled_from([None, 1, 1.5, True, b"x", ["x"], Text("t")])
ints = st.one_of(
    st.integers(-(2**31), 2**31 - 1),
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, -1, 2**63 - 1, -(2**63), 2**63, -(2**63) - 1, True, False]),
    st.sampled_from(list(RequestCode)),
)


@st.composite
def commands(draw: st.DrawFn) -> RemotingCommand:
    usual = draw(st.booleans())
    values: st.SearchStrategy[Any] = texts if usual else texts | odd
    fields: list[Any] = [
        draw(ints),
        draw(st.sampled_from(list(LanguageCode) if usual else [0, 9, 99, "JAVA", None, 1.0])),
        draw(ints),
        draw(ints),
        draw(st.integers(0, 3) if usual else ints),
        draw(st.none() | values),
        draw(st.dictionaries(texts, values, max_size=6)),
        draw(st.binary(max_size=8)),
        draw(st.sampled_from([SerializeType.JSON, SerializeType.ROCKETMQ, 0])),
    ]
    cmd = RemotingCommand(*fields)
    if not usual and draw(st.booleans()):
        cmd.body = draw(st.sampled_from([bytearray(b"ab"), memoryview(b"cd"), "text", None]))  # type: ignore[assignment]
    return cmd


@settings(max_examples=examples(3000), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(commands())
def test_encoders_agree(cmd: RemotingCommand) -> None:
    frame = agree(cmd)
    if frame is not None and cmd.serialize_type == SerializeType.JSON:
        header = json.loads(frame[8 : 8 + int.from_bytes(frame[5:8], "big")])
        assert header["opaque"] == cmd.opaque


def test_encoders_are_compiled_and_write_a_send() -> None:
    assert command.encode_json_header is speedups.COMPILED.encode_json_header  # type: ignore[union-attr]
    assert codec.encode is speedups.COMPILED.encode_frame  # type: ignore[union-attr]
    ext = {"a": "PG", "b": "T", "e": "3", "i": "UNIQ_KEY\x01AB\x02WAIT\x01true", "n": "broker-a"}
    cmd = RemotingCommand(RequestCode.SEND_MESSAGE_V2, opaque=9, ext_fields=ext, body=b"body")
    frame = agree(cmd)
    assert frame is not None
    assert frame[8:].startswith(b'{"code":310,"extFields":{"a":"PG","b":"T","e":"3","i":"UNIQ_KEY\\u0001AB')
    assert frame.endswith(b'"opaque":9,"serializeTypeCurrentRPC":"JSON","version":475}body')
    assert command.decode_json_header(frame[8:-4], b"body").ext_fields == ext


def test_unusual_calls_and_commands_take_the_pure_path_and_its_errors() -> None:
    for args in [(), (RemotingCommand(1), RemotingCommand(2)), ("text",), (None,)]:
        assert outcome(command.encode_json_header, *args) == outcome(command.pure_encode_json_header, *args)
        with pure_header():
            assert outcome(codec.encode, *args) == outcome(codec.pure_encode, *args)
    unset = RemotingCommand.__new__(RemotingCommand)  # no slot filled
    agree(unset)
    agree(RemotingCommand(1, remark="\udc80"))  # a lone surrogate: LocalProtocolError
    agree(RemotingCommand(1, ext_fields={"k": [1, "two"]}))  # type: ignore[dict-item]
    agree(RemotingCommand(1, language=[0]))  # type: ignore[arg-type]  # unhashable


def test_a_header_over_24_bits_is_refused_as_before() -> None:
    cmd = RemotingCommand(1, ext_fields={"k": "v" * MAX_HEADER_LENGTH})
    assert outcome(codec.encode, cmd)[0] == "LocalProtocolError"
    agree(cmd)
    agree(RemotingCommand(1, ext_fields={"k": "\x01" * (MAX_HEADER_LENGTH // 6)}))  # escapes: 6 B each
