"""decode_pull_header (the per-pull fast path) agrees with the field-by-field rules."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from hypothesis import given, settings
from hypothesis import strategies as st
from test_send_header_decoding import numbers, texts

from _support.examples import examples
from rocketq.errors import InvalidParameter
from rocketq.protocol.headers import (
    PullMessageRequestHeader,
    decode_pull_header,
    get_int,
    get_long,
    get_str,
    opt_int,
    opt_str,
)


def reference(ext: Mapping[str, str]) -> PullMessageRequestHeader:
    """The header as the generic helpers decode it (a regex and range check per number)."""
    return PullMessageRequestHeader(
        consumer_group=get_str(ext, "consumerGroup"),
        topic=get_str(ext, "topic"),
        queue_id=get_int(ext, "queueId"),
        queue_offset=get_long(ext, "queueOffset"),
        max_msg_nums=get_int(ext, "maxMsgNums", 32),
        sys_flag=get_int(ext, "sysFlag", 0),
        commit_offset=get_long(ext, "commitOffset", 0),
        suspend_timeout_millis=get_long(ext, "suspendTimeoutMillis", 15_000),
        sub_version=get_long(ext, "subVersion", 0),
        subscription=opt_str(ext, "subscription"),
        expression_type=opt_str(ext, "expressionType"),
        max_msg_bytes=opt_int(ext, "maxMsgBytes"),
    )


FIELDS: dict[str, st.SearchStrategy[str]] = {
    "consumerGroup": texts,
    "topic": texts,
    "queueId": numbers,
    "queueOffset": numbers,
    "maxMsgNums": numbers,
    "sysFlag": numbers,
    "commitOffset": numbers,
    "suspendTimeoutMillis": numbers,
    "subVersion": numbers,
    "subscription": texts,
    "expressionType": texts,
    "maxMsgBytes": numbers,
}


@st.composite
def pull_fields(draw: st.DrawFn) -> dict[str, str]:
    ext: dict[str, str] = {}
    for name, values in FIELDS.items():
        if draw(st.integers(0, 4)) > 0:  # each field present 4 times in 5
            ext[name] = draw(values)
    return ext


def outcome(decode: Callable[[Mapping[str, str]], PullMessageRequestHeader], ext: dict[str, str]) -> object:
    try:
        return decode(ext)
    except InvalidParameter as exc:
        return ("error", str(exc))


@settings(max_examples=examples(400), deadline=None)
@given(pull_fields())
def test_fast_pull_decoder_matches_the_reference(ext: dict[str, str]) -> None:
    assert outcome(decode_pull_header, ext) == outcome(reference, ext)


def test_common_pull_header_decodes() -> None:
    ext = {
        "consumerGroup": "CG",
        "topic": "T",
        "queueId": "3",
        "queueOffset": "9223372036854775807",
        "sysFlag": "6",
        "subscription": "*",
    }
    header = decode_pull_header(ext)
    assert (header.queue_id, header.queue_offset, header.max_msg_nums, header.sys_flag) == (
        3,
        2**63 - 1,
        32,
        6,
    )
    assert header.suspend_timeout_millis == 15_000 and header.max_msg_bytes is None
