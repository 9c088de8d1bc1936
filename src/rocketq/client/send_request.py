"""The producer's send request: SEND_MESSAGE_V2 (310) or SEND_BATCH_MESSAGE (320).

One idea: the request a producer writes for one message or one batch, as a command
(:func:`send_request`, what the asyncio producer hands its connection) or as the whole frame
(:func:`send_request_frame`, what the blocking producer writes itself).

The header is ``SendMessageRequestHeaderV2``, the short field names in the order Java writes
them, each value as Java formats it::

    a producerGroup   b topic          c defaultTopic (TBW102)   d defaultTopicQueueNums (4)
    e queueId         f sysFlag        g bornTimestamp (ms)      h flag
    i properties      j reconsumeTimes (0)   k unitMode (false)   m batch   n brokerName

then the command's own fields (``flag`` 0, ``language`` JAVA, ``opaque``, JSON, ``version``).
:func:`send_request_frame` is compiled when the C accelerator is in use
(``rocketq._speedups.send_request_frame``): it writes the frame straight from its arguments, with
no command or extFields dict, and hands anything it does not take (a text that is not an exact
``str`` with a UTF-8 form, a number that is not an exact ``int`` of 64 bits, a frame over the
limits) to :func:`pure_send_request_frame`, whose bytes and errors are the reference.
"""

from __future__ import annotations

from typing import Any, cast

from rocketq import speedups as _speedups
from rocketq.client._routes import DEFAULT_TOPIC_QUEUE_NUMS
from rocketq.protocol.topic import AUTO_CREATE_TOPIC_KEY_TOPIC
from rocketq.remoting import CURRENT_VERSION, DEFAULT_LANGUAGE, RemotingCommand, RequestCode, create_request
from rocketq.remoting.codec import encode
from rocketq.remoting.command import next_opaque

_DEFAULT_TOPIC_QUEUE_NUMS_TEXT = str(DEFAULT_TOPIC_QUEUE_NUMS)


def send_request(
    group: str,
    topic: str,
    queue_id: int,
    sys_flag: int,
    born_ms: int,
    flag: int,
    properties: str,
    batch: bool,
    broker_name: str,
    body: bytes,
) -> RemotingCommand:
    """The request (a fresh opaque) sending ``body`` with ``properties`` to queue ``queue_id`` of
    broker ``broker_name``: SEND_BATCH_MESSAGE when ``batch`` (the body a batch body)."""
    # every value but the flag and the queue id is written here as create_request writes it
    fields: dict[str, object] = {
        "a": group,
        "b": topic,
        "c": AUTO_CREATE_TOPIC_KEY_TOPIC,
        "d": _DEFAULT_TOPIC_QUEUE_NUMS_TEXT,
        "e": queue_id,
        "f": str(sys_flag),
        "g": str(born_ms),
        "h": flag,
        "i": properties,
        "j": "0",
        "k": "false",
        "m": "true" if batch else "false",
        "n": broker_name,
    }
    code = RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2
    if type(flag) is int and type(queue_id) is int:  # the usual values: their strings directly
        fields["e"], fields["h"] = str(queue_id), str(flag)
        return RemotingCommand(code, opaque=next_opaque(), ext_fields=cast(dict[str, str], fields), body=body)
    return create_request(code, fields, body)  # anything else stringified as Java would


def pure_send_request_frame(opaque: int, *request: Any) -> bytes:
    """The whole frame of ``send_request(*request)`` (the same arguments, in the same order)
    with opaque ``opaque``."""
    cmd = send_request(*request)
    cmd.opaque = opaque
    return encode(cmd)


#: The frame of a send request; the compiled twin of :func:`pure_send_request_frame` when the C
#: accelerator is in use.
send_request_frame = pure_send_request_frame
if _speedups.COMPILED is not None:
    _speedups.COMPILED.setup_send_request(
        pure_send_request_frame,
        AUTO_CREATE_TOPIC_KEY_TOPIC,
        _DEFAULT_TOPIC_QUEUE_NUMS_TEXT,
        DEFAULT_LANGUAGE.name,
        CURRENT_VERSION,
        int(RequestCode.SEND_MESSAGE_V2),
        int(RequestCode.SEND_BATCH_MESSAGE),
    )
    send_request_frame = _speedups.COMPILED.send_request_frame

__all__ = ["pure_send_request_frame", "send_request", "send_request_frame"]
