"""decode_send_header (the per-message fast path) agrees with the field-by-field rules."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Protocol

from hypothesis import given, settings
from hypothesis import strategies as st

from _support.examples import examples
from rocketq.errors import InvalidParameter
from rocketq.protocol.headers import (
    SEND_V2_TO_V1,
    SendMessageRequestHeader,
    decode_send_header,
    get_bool,
    get_int,
    get_long,
    get_str,
    opt_int,
    opt_str,
    v2_to_v1,
)

NOW_MS = 1_800_000_000_000


class Decoder(Protocol):
    def __call__(self, ext: Mapping[str, str], *, v2: bool) -> SendMessageRequestHeader: ...


def reference(ext: Mapping[str, str], *, v2: bool) -> SendMessageRequestHeader:
    """The header as the generic helpers decode it (get_int/get_long/get_bool per field)."""
    fields = v2_to_v1(ext) if v2 else ext
    return SendMessageRequestHeader(
        producer_group=fields.get("producerGroup", ""),
        topic=get_str(fields, "topic"),
        default_topic=fields.get("defaultTopic") or "TBW102",
        default_topic_queue_nums=get_int(fields, "defaultTopicQueueNums", 4),
        queue_id=get_int(fields, "queueId"),
        sys_flag=get_int(fields, "sysFlag", 0),
        born_timestamp=get_long(fields, "bornTimestamp", NOW_MS),
        flag=get_int(fields, "flag", 0),
        properties=opt_str(fields, "properties"),
        reconsume_times=opt_int(fields, "reconsumeTimes"),
        unit_mode=get_bool(fields, "unitMode"),
        max_reconsume_times=opt_int(fields, "maxReconsumeTimes"),
        batch=get_bool(fields, "batch"),
        broker_name=opt_str(fields, "brokerName"),
    )


numbers = st.one_of(
    st.integers(-(1 << 64), 1 << 64).map(str),
    st.integers(0, 10**20).map(lambda n: f"{n:020d}"),  # leading zeros, 20 digits
    st.sampled_from(
        ["", "-", "+1", " 1", "1 ", "1_0", "٣", "0x10", "2147483647", "2147483648", "-2147483648"]
    ),
    st.sampled_from(["9223372036854775807", "9223372036854775808", "999999999", "1000000000"]),
)
booleans = st.sampled_from(["true", "false", "TRUE", " true ", "yes", "", "False"])
texts = st.text(max_size=12)


@st.composite
def send_fields(draw: st.DrawFn) -> tuple[dict[str, str], bool]:
    v2 = draw(st.booleans())
    values: dict[str, st.SearchStrategy[str]] = {
        "producerGroup": texts,
        "topic": texts,
        "defaultTopic": texts,
        "defaultTopicQueueNums": numbers,
        "queueId": numbers,
        "sysFlag": numbers,
        "bornTimestamp": numbers,
        "flag": numbers,
        "properties": texts,
        "reconsumeTimes": numbers,
        "unitMode": booleans,
        "maxReconsumeTimes": numbers,
        "batch": booleans,
        "brokerName": texts,
    }
    ext: dict[str, str] = {}
    for v2_key, name in SEND_V2_TO_V1.items():
        if draw(st.integers(0, 4)) > 0:  # each field present 4 times in 5
            ext[v2_key if v2 else name] = draw(values[name])
    return ext, v2


def outcome(decode: Decoder, ext: dict[str, str], v2: bool) -> object:
    """The header (born timestamp zeroed when absent: both default to "now"), or the error."""
    try:
        header = decode(ext, v2=v2)
    except InvalidParameter as exc:
        return ("error", str(exc))
    if "bornTimestamp" not in ext and "g" not in ext:
        header = dataclasses.replace(header, born_timestamp=0)
    return header


@settings(max_examples=examples(400), deadline=None)
@given(send_fields())
def test_fast_decoder_matches_the_reference(case: tuple[dict[str, str], bool]) -> None:
    ext, v2 = case
    assert outcome(decode_send_header, ext, v2) == outcome(reference, ext, v2)


def test_absent_born_timestamp_is_now() -> None:
    before = time.time_ns() // 1_000_000
    header = decode_send_header({"b": "T", "e": "0"}, v2=True)
    assert before <= header.born_timestamp <= time.time_ns() // 1_000_000
