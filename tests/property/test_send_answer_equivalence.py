"""The compiled SendResult of a send's answer (``rocketq._speedups.send_result``) against the
general path it stands in for (:func:`rocketq.client.send_answer.pure_send_result`: the read
decoded by FrameDecoder, the answer's SendResult by ``send_result_of``): whenever the compiled
function makes a SendResult it is the general path's, field for field and type for type; for
anything it leaves (None) the general path decides. The usual broker answer is always taken
(skipped, saying why, when the compiled module is not in use)."""

from __future__ import annotations

import dataclasses
import json
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketq import speedups
from rocketq.client.send_answer import pure_send_result, send_result
from rocketq.protocol.queue import MessageQueue
from rocketq.remoting.codes import DEFAULT_MAX_FRAME_SIZE

pytestmark = pytest.mark.skipif(send_result is None, reason=f"compiled codecs not in use: {speedups.REASON}")

MQ = MessageQueue("T", "broker-a", 3)


def typed(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, [typed(getattr(value, f.name)) for f in dataclasses.fields(value)])
    return (type(value).__name__, value)


def frame(header: bytes, body: bytes = b"", serialize: int = 0) -> bytes:
    return struct.pack(">ii", 4 + len(header) + len(body), (serialize << 24) | len(header)) + header + body


def header(fields: dict[str, Any], *, separators: tuple[str, str] = (",", ":")) -> bytes:
    return json.dumps(fields, separators=separators, ensure_ascii=False).encode("utf-8", "surrogatepass")


def both(buf: bytes | bytearray, n: int, opaque: int, max_frame: int = DEFAULT_MAX_FRAME_SIZE) -> Any:
    assert send_result is not None
    compiled = send_result(buf, n, opaque, "ID", MQ, max_frame)
    reference = pure_send_result(buf, n, opaque, "ID", MQ, max_frame)
    if compiled is not None:
        assert typed(compiled) == typed(reference)
    return compiled, reference


def usual(opaque: int = 7, **ext: str) -> dict[str, Any]:
    fields = {"msgId": "7F00000100009BE70000000000000258", "queueId": "3", "queueOffset": "42"}
    fields.update({"MSG_REGION": "DefaultRegion", "TRACE_ON": "true", "transactionId": "C0A8"}, **ext)
    return {
        "code": 0, "extFields": fields, "flag": 1, "language": "JAVA", "opaque": opaque,
        "serializeTypeCurrentRPC": "JSON", "version": 475,
    }  # fmt: skip


def test_the_usual_answer_is_taken() -> None:
    data = frame(header(usual()))
    buf = bytearray(data) + bytearray(64)  # the connection's buffer holds more than the read
    compiled, _ = both(buf, len(data), 7)
    assert compiled is not None and compiled.queue_offset == 42 and compiled.transaction_id == "C0A8"
    assert compiled.message_queue is MQ and compiled.offset_msg_id == "7F00000100009BE70000000000000258"
    for code in (10, 11, 12):  # the flush and slave timeouts are results too
        data = frame(header(dict(usual(), code=code)))
        assert both(data, len(data), 7)[0] is not None


def test_what_it_leaves_to_the_general_path() -> None:
    cases = [
        frame(header(usual()))[:-1],  # cut short
        frame(header(usual())) + frame(header(usual(opaque=8))),  # followed by another frame
        frame(header(usual(opaque=8))),  # another call's answer
        frame(header(dict(usual(), flag=0))),  # a request
        frame(header(dict(usual(), code=1, remark="boom"))),  # an error
        frame(header(usual(queueId="4"))),  # another queue: a new MessageQueue
        frame(header(usual(queueOffset=" 5"))),  # what int() reads, but not a plain integer
        frame(header(usual())[:-1] + b" }"),  # whitespace
        frame(header(usual()), serialize=1),  # ROCKETMQ serialization
    ]
    for data in cases:
        assert both(data, len(data), 7)[0] is None


field_values = st.one_of(
    st.integers(-(2**63), 2**63).map(str),
    st.sampled_from(["", "0", "007", "-0", "-5", "+1", " 1", "1_0", "1e3", "٣", "3", "9" * 19, "x"]),
    st.text(max_size=8),
)
ext_keys = st.sampled_from(["msgId", "queueId", "queueOffset", "transactionId", "MSG_REGION", "k"])


@settings(max_examples=500, deadline=None)
@given(
    code=st.sampled_from([0, 1, 10, 11, 12, 17, 206, -1, 2**40]),
    flag=st.sampled_from([0, 1, 2, 3, -1]),
    opaque=st.sampled_from([7, 8, -7, 2**40]),
    ext=st.dictionaries(ext_keys, field_values, max_size=6),
    remark=st.one_of(st.none(), st.text(max_size=8)),
    body=st.binary(max_size=8),
    drop=st.sampled_from([None, "language", "version", "serializeTypeCurrentRPC", "extFields"]),
    extra_key=st.booleans(),
    tail=st.binary(max_size=6),
    cut=st.integers(0, 3),
    max_frame=st.sampled_from([DEFAULT_MAX_FRAME_SIZE, 64, 4096]),
)
def test_a_result_made_is_the_general_paths(
    code: int, flag: int, opaque: int, ext: dict[str, str], remark: str | None, body: bytes,
    drop: str | None, extra_key: bool, tail: bytes, cut: int, max_frame: int,
) -> None:  # fmt: skip
    fields = dict(usual(), code=code, flag=flag, opaque=opaque, extFields=ext)
    if remark is not None:
        fields["remark"] = remark
    if drop is not None:
        del fields[drop]
    if extra_key:
        fields["other"] = 1
    data = frame(header(fields), body) + tail
    n = len(data) - cut
    both(data, n, 7, max_frame)


@settings(max_examples=300, deadline=None)
@given(
    data=st.binary(max_size=80),
    prefix=st.sampled_from([b"", frame(header(usual()))[:40]]),
)
def test_any_bytes(data: bytes, prefix: bytes) -> None:
    both(prefix + data, len(prefix + data), 7)
    raw = frame(header(usual()))
    edited = bytearray(raw)
    for i, b in enumerate(data[:16]):  # bytes of the usual answer changed here and there
        edited[(i * 37 + b) % len(edited)] = b
    both(edited, len(edited), 7)


def test_escaped_keys_and_values() -> None:
    text = header(usual()).decode()
    for old, new in [
        ('"queueId"', '"queue\\u0049d"'),  # the key with an escape: the general path reads it
        ('"3"', '"\\u0033"'),  # the queue id with an escape
        ('"msgId":"7F', '"msgId":"\\u00377F'),  # msgId with an escape: taken, decoded
        ('"transactionId":"C0A8"', '"transactionId":"C0A8","transactionId":"X"'),  # twice: the last
    ]:
        data = frame(text.replace(old, new, 1).encode())
        compiled, reference = both(data, len(data), 7)
        assert (compiled is None) == ("queue" in old or '"3"' in old) and reference is not None
