"""Fuzzing the gRPC request checks: arbitrary protobuf messages (built from strategies, or parsed
from arbitrary bytes) go through the pure conversion and validation functions the servicers run
before touching the broker. Each raises only InvalidParameter (or its subclasses, answered with
their own status codes), TopicNameInvalid for topics, and inflating a GZIP body never allocates
more than the body limit."""

from __future__ import annotations

import gzip
from typing import Any

from google.protobuf.message import DecodeError
from hypothesis import given
from hypothesis import strategies as st

from _support.fuzz import fuzz, only, peak_allocation
from rocketq.errors import InvalidParameter, TopicNameInvalid
from rocketq.message import validate_topic
from rocketq.protocol.topic import topic_max_length
from rocketq.proxy import convert, route, status
from rocketq.proxy.servicer import consumer_group_name, receive_batch_size, receive_timing_ms
from rocketq.proxy.v2 import definition_pb2 as pb
from rocketq.proxy.v2 import service_pb2 as spb

MAX_BODY = 64 * 1024
text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
names = st.one_of(text, st.text("abcXYZ_-%|09", min_size=120, max_size=300))
I64 = st.integers(-(2**63), 2**63 - 1)
I32 = st.integers(-(2**31), 2**31 - 1)


class Context:
    """The part of a grpc.aio.ServicerContext the checks read."""

    def __init__(self, remaining: float | None) -> None:
        self.remaining = remaining

    def time_remaining(self) -> float | None:
        return self.remaining


@st.composite
def bodies(draw: st.DrawFn) -> tuple[bytes, int]:
    kind = draw(st.sampled_from(["plain", "gzip", "bomb", "garbage", "truncated"]))
    if kind == "plain":
        return draw(st.binary(max_size=200)), pb.IDENTITY
    if kind == "gzip":
        return gzip.compress(draw(st.binary(max_size=200))), pb.GZIP
    if kind == "bomb":  # a few KiB that inflate to many MiB
        return gzip.compress(bytes(draw(st.integers(MAX_BODY, 8 * 1024 * 1024)))), pb.GZIP
    if kind == "truncated":
        data = gzip.compress(draw(st.binary(min_size=1, max_size=200)))
        return data[: draw(st.integers(0, len(data) - 1))], pb.GZIP
    return draw(st.binary(max_size=200)), draw(st.sampled_from([pb.GZIP, pb.ENCODING_UNSPECIFIED, 7]))


@st.composite
def grpc_messages(draw: st.DrawFn) -> pb.Message:
    body, encoding = draw(bodies())
    sp: dict[str, Any] = {
        "message_id": draw(text),
        "body_encoding": encoding,
        "message_type": draw(st.sampled_from([0, pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION, 42])),
        "keys": draw(st.lists(text, max_size=3)),
    }
    if draw(st.booleans()):
        sp["tag"] = draw(text)
    if draw(st.booleans()):
        sp["message_group"] = draw(text)
    if draw(st.booleans()):
        sp["delivery_timestamp"] = {"seconds": draw(I64), "nanos": draw(I32)}
    if draw(st.booleans()):
        sp["born_timestamp"] = {"seconds": draw(I64), "nanos": draw(I32)}
    return pb.Message(
        topic=pb.Resource(name=draw(names)),
        user_properties=draw(st.dictionaries(text, text, max_size=4)),
        system_properties=pb.SystemProperties(**sp),
        body=body,
    )


def check_message(msg: pb.Message) -> None:
    only((TopicNameInvalid,), validate_topic, msg.topic.name, topic_max_length(msg.topic.name))
    kind = convert.declared_type(msg)
    for topic_type in ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED", "?"):
        only((InvalidParameter,), route.check_message_type, "T", topic_type, kind)
    only((InvalidParameter,), convert.store_properties, msg, kind, topic="T")
    body = only((InvalidParameter,), convert.decoded_body, msg, MAX_BODY)
    assert body is None or len(body) <= MAX_BODY + 1
    assert (
        peak_allocation(convert.decoded_body, msg, MAX_BODY) < 4 * MAX_BODY + 8 * len(msg.body) + 256 * 1024
    )
    convert.born_timestamp_ms(msg, 0)


@fuzz(200)
@given(grpc_messages())
def test_send_message_checks(msg: pb.Message) -> None:
    check_message(msg)


@fuzz(200)
@given(st.binary(max_size=300))
def test_messages_parsed_from_arbitrary_bytes(data: bytes) -> None:
    try:
        request = spb.SendMessageRequest.FromString(data)
    except DecodeError:  # grpc answers this itself before a servicer runs
        return
    for msg in request.messages:
        check_message(msg)


@st.composite
def receive_requests(draw: st.DrawFn) -> spb.ReceiveMessageRequest:
    fields: dict[str, Any] = {
        "group": pb.Resource(name=draw(names)),
        "message_queue": pb.MessageQueue(topic=pb.Resource(name=draw(names))),
        "batch_size": draw(I32),
    }
    if draw(st.booleans()):
        fields["invisible_duration"] = {"seconds": draw(I64), "nanos": draw(I32)}
    if draw(st.booleans()):
        fields["long_polling_timeout"] = {"seconds": draw(I64), "nanos": draw(I32)}
    return spb.ReceiveMessageRequest(**fields)


@fuzz(300)
@given(receive_requests(), st.none() | st.floats(-10, 1e6))
def test_receive_message_checks(request: spb.ReceiveMessageRequest, remaining: float | None) -> None:
    batch = only((InvalidParameter,), receive_batch_size, request)
    assert batch is None or 1 <= batch <= 1024
    assert (batch is None) == (request.batch_size <= 0)
    group = only((InvalidParameter,), consumer_group_name, request.group)
    assert group is None or 0 < len(group) <= 255
    timing = only((InvalidParameter,), receive_timing_ms, request, Context(remaining))
    if timing is not None:
        assert timing[0] >= 1000 and timing[1] >= 0
    if request.HasField("invisible_duration"):
        only((InvalidParameter,), convert.invisible_ms, request.invisible_duration)


@fuzz(100)
@given(st.sampled_from([InvalidParameter, TopicNameInvalid, ValueError, RuntimeError, KeyError]), text)
def test_any_error_maps_to_a_status_code(cls: type[Exception], message: str) -> None:
    assert status.code_of(cls(message)) in pb.Code.values()
