"""The send answer written straight to bytes is the generic response encoding, byte for byte."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from rocketq.broker.send import send_ok_ext_json, send_ok_frame, send_response_fields
from rocketq.errors import ResponseCode
from rocketq.remoting.codec import FrameDecoder, encode, success_frame
from rocketq.remoting.codes import FLAG_RESPONSE
from rocketq.remoting.command import RemotingCommand
from rocketq.store.commitlog import PutMessageResult, PutMessageStatus

I32 = st.integers(-(2**31), 2**31 - 1)
texts = st.text(max_size=40)  # quotes, backslashes, control characters, any script


@st.composite
def put_results(draw: st.DrawFn) -> PutMessageResult:
    host = draw(st.binary(min_size=4, max_size=4)) + struct.pack(">i", draw(st.integers(0, 65535)))
    offset = draw(st.integers(0, 2**50))
    batch = draw(st.one_of(st.none(), st.lists(st.integers(0, 2**50), min_size=1, max_size=5)))
    return PutMessageResult.of(
        PutMessageStatus.PUT_OK,
        offset,
        draw(st.integers(1, 4 << 20)),
        draw(st.integers(0, 2**62)),
        draw(st.integers(0, 2**45)),
        host,
        1 if batch is None else len(batch),
        batch,
    )


@given(I32, put_results(), st.integers(0, 1023), st.one_of(st.none(), texts), texts, st.booleans())
def test_send_answer_bytes_match_the_response_command(
    opaque: int,
    result: PutMessageResult,
    queue_id: int,
    transaction_id: str | None,
    region: str,
    trace_on: bool,
) -> None:
    fields = send_response_fields(result, queue_id, transaction_id, region, trace_on)
    generic = encode(
        RemotingCommand(ResponseCode.SUCCESS, opaque=opaque, flag=FLAG_RESPONSE, ext_fields=fields)
    )
    fast = success_frame(opaque, send_ok_ext_json(result, queue_id, transaction_id, region, trace_on))
    assert fast == generic
    assert send_ok_frame(opaque, result, queue_id, transaction_id, region, trace_on) == generic
    (decoded,) = FrameDecoder().feed(fast)
    assert (decoded.code, decoded.opaque, decoded.flag) == (0, opaque, FLAG_RESPONSE)
    assert decoded.ext_fields == fields
