"""A lone SEND_MESSAGE_V2 frame to its command and its checked header, in one call.

With one request in flight a producer's send arrives as one read of exactly one frame. For that
case :func:`lone_send` takes the read's bytes straight to what the send handler needs (the
decoded :class:`~rocketq.remoting.command.RemotingCommand` and its
:class:`~rocketq.protocol.headers.SendMessageRequestHeader`), without the frame decoder's
incremental loop and a list per read (:meth:`rocketq.broker.send.SendMessageProcessor.send_lone`).

It takes the bytes when they are exactly one whole frame (the length field is ``len(data) - 4``,
at most ``max_body``) whose JSON header begins ``{"code":310,`` (how fastjson and rocketq's
clients write a send's header) and decodes to a request (flag 0, not oneway) of code
SEND_MESSAGE_V2 whose extFields are a header that is not a batch. Anything else is None, and
the general path (:class:`~rocketq.remoting.codec.FrameDecoder` and the request tables) takes
the bytes as it always did, errors included: a header that does not decode is None here.

Compiled when the C accelerator is in use (``rocketq._speedups.lone_send``); :func:`pure_lone_send`
is the reference, and the compiled one gives the same answers
(``tests/property/test_send_codecs_equivalence.py``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Final

from rocketq import speedups as _speedups
from rocketq.protocol.headers import SendMessageRequestHeader, pure_decode_send_header
from rocketq.remoting.codes import RequestCode
from rocketq.remoting.command import RemotingCommand, pure_decode_json_header

#: How a lone send's JSON header begins (fastjson writes its keys in alphabetical order).
LONE_PREFIX: Final = b'{"code":310,'
_PREFIX: Final = struct.Struct(">iI")
_SEND_MESSAGE_V2: Final = int(RequestCode.SEND_MESSAGE_V2)

LoneSend = tuple[RemotingCommand, SendMessageRequestHeader]


def pure_lone_send(data: bytes, max_body: int) -> LoneSend | None:
    """(command, header) of ``data`` when it is one whole lone SEND_MESSAGE_V2 request frame
    (see the module docstring), else None."""
    n = len(data)
    if n < 8 + len(LONE_PREFIX):
        return None
    length, type_hlen = _PREFIX.unpack_from(data)
    if length != n - 4 or length > max_body or type_hlen >> 24:
        return None
    hlen = type_hlen
    if hlen > n - 8 or hlen < len(LONE_PREFIX) or bytes(data[8 : 8 + len(LONE_PREFIX)]) != LONE_PREFIX:
        return None
    try:
        cmd = pure_decode_json_header(bytes(data[8 : 8 + hlen]), bytes(data[8 + hlen :]))
        if cmd.code != _SEND_MESSAGE_V2 or cmd.flag != 0:
            return None
        header = pure_decode_send_header(cmd.ext_fields, v2=True)
    except Exception:  # the general path decodes the frame again and meets the error
        return None
    if header.batch is not False:
        return None
    return cmd, header


#: :func:`pure_lone_send`, or its compiled twin when the C accelerator is in use.
lone_send: Callable[[bytes, int], LoneSend | None] = pure_lone_send
if _speedups.COMPILED is not None:
    _speedups.COMPILED.setup_lone_send(pure_lone_send)
    lone_send = _speedups.COMPILED.lone_send
