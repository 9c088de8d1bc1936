"""The producer's send answer: the SendResult of a read that is one whole SUCCESS answer.

One idea: with one send in flight the blocking producer's every round trip ends in a read that
is exactly the broker's answer to it, and all it needs of that answer is a status and four
extFields (``msgId``, ``queueId``, ``queueOffset``, ``transactionId``). :func:`send_result` makes
the :class:`~rocketq.client.send_values.SendResult` straight from the read bytes when they are
that answer; for anything else it returns None and the caller decodes the read as always
(:class:`~rocketq.remoting.codec.FrameDecoder`, the RemotingCommand,
:func:`~rocketq.client.send_values.send_result_of`), which stays the reference:
:func:`pure_send_result` says what the general path makes of the same read.

``send_result`` is compiled (``rocketq._speedups.send_result``) when the C accelerator is in use
and None on the pure path, where the general path is all there is. The compiled function scans
the header as the compiled ``decode_json_header`` does and takes less than it: a queueId or
queueOffset that is not a plain integer string, a queueId other than the queue sent to, a key
written with escapes, an error code or any header that scan does not take give None.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from rocketq import speedups as _speedups
from rocketq.client.send_values import _STATUS_BY_CODE, SendResult, send_result_of
from rocketq.errors import RemoteProtocolError, RocketqError
from rocketq.protocol.queue import MessageQueue
from rocketq.remoting.codec import FrameDecoder
from rocketq.remoting.codes import FLAG_RESPONSE

#: ``send_result(buf, n, opaque, msg_id, mq, max_frame_size)``.
SendResultOf = Callable[[bytearray | bytes, int, int, str, MessageQueue, int], SendResult | None]


def pure_send_result(
    buf: bytearray | bytes, n: int, opaque: int, msg_id: str, mq: MessageQueue, max_frame_size: int
) -> SendResult | None:
    """What the blocking producer's general path makes of the read ``buf[:n]`` on an idle
    connection waiting for the answer to ``opaque`` (a send of ``msg_id`` to ``mq``): its
    SendResult when the read is exactly that answer with a status code, else None (the general
    path then raises, waits for more, or goes on reading)."""
    decoder = FrameDecoder(max_frame_size)
    try:
        read = decoder.feed(bytes(memoryview(buf)[:n]))
    except RemoteProtocolError:
        return None
    if len(read) != 1 or decoder.buffered:
        return None
    answer = read[0]
    if not answer.flag & FLAG_RESPONSE or answer.opaque != opaque or answer.code not in _STATUS_BY_CODE:
        return None
    try:
        return send_result_of(answer, msg_id, mq, "")
    except (RocketqError, ValueError):
        return None


#: The compiled :func:`pure_send_result` for the hot path, or None on the pure path.
send_result: Final[SendResultOf | None] = _speedups.COMPILED.send_result if _speedups.COMPILED else None
if _speedups.COMPILED is not None:
    _speedups.COMPILED.setup_send_result(SendResult, dict(_STATUS_BY_CODE))

__all__ = ["SendResultOf", "pure_send_result", "send_result"]
