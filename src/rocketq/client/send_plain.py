"""The blocking producer's plain send: a message's id, opaque and request frame in one call.

One idea: most sends are of a plain message (a :class:`~rocketq.message.Message` with no
properties, tags, keys or delay level, a ``bytes`` body below the compress threshold), and for
those the producer's ``_prepare`` (the UNIQ_KEY, the properties text) and ``_request_frame``
(the opaque, the SEND_MESSAGE_V2 frame) make the same few values every time.
:func:`plain_send_frame` makes them at once and returns ``(frame, opaque, msg_id)``, or None,
before taking an id or an opaque, for any message that is not plain; the caller then takes the
general path, which stays the reference.

* the id is :meth:`UniqueIdGenerator.next_id <rocketq.message.UniqueIdGenerator.next_id>`'s:
  ``prefix``, the time field ``offset_ms`` (:meth:`~rocketq.message.UniqueIdGenerator.offset_ms`)
  and the next number of the generator's sequence ``seq``, taken as
  :func:`~rocketq.message.seq_take` takes it (so ids made either way never repeat, and a batch's
  stay consecutive);
* the opaque is :func:`~rocketq.remoting.command.next_opaque`'s, from the same counter;
* the frame is :func:`~rocketq.client.send_request.send_request_frame`'s with sysFlag 0 and the
  two properties every send has (``UNIQ_KEY``, ``WAIT=true``).

:func:`plain_send_frame` is compiled (``rocketq._speedups.plain_send_frame``) when the C
accelerator is in use and None on the pure path, where the producer takes the general path;
:func:`pure_plain_send_frame` is its reference (``tests/property/test_send_plain_equivalence.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from rocketq import speedups as _speedups
from rocketq.client.send_request import pure_send_request_frame
from rocketq.message import (
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    PROPERTY_WAIT_STORE_MSG_OK,
    Message,
    seq_take,
)
from rocketq.remoting import command as _command
from rocketq.remoting.command import next_opaque

#: The properties text of a plain send is ``_HEAD + msg_id + _TAIL`` (encode_properties' form).
_HEAD: Final = f"{PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX}\x01"
_TAIL: Final = f"\x02{PROPERTY_WAIT_STORE_MSG_OK}\x01true\x02"
_INT64: Final = range(-(2**63), 2**63)

#: ``plain_send_frame(msg, group, queue_id, broker_name, max_body, threshold, prefix, offset_ms,
#: seq, born_ms)``.
PlainSendFrame = Callable[
    [Message, str, int, str, int, int, str, int, list[int], int], tuple[bytes, int, str] | None
]


def plain_properties(msg_id: str) -> str:
    """The properties text of a plain send whose UNIQ_KEY is ``msg_id``."""
    return f"{_HEAD}{msg_id}{_TAIL}"


def pure_plain_send_frame(
    msg: Message,
    group: str,
    queue_id: int,
    broker_name: str,
    max_body: int,
    threshold: int,
    prefix: str,
    offset_ms: int,
    seq: list[int],
    born_ms: int,
) -> tuple[bytes, int, str] | None:
    """``(frame, opaque, msg_id)`` of ``msg`` sent by ``group`` to queue ``queue_id`` of
    ``broker_name`` at ``born_ms``, when ``msg`` is plain (see the module) with a body of at
    most ``max_body`` and ``threshold`` bytes; else None, with nothing taken."""
    if type(msg) is not Message:
        return None
    topic, body, tags, keys, props = msg.topic, msg.body, msg.tags, msg.keys, msg.properties
    delay, flag = msg.delay_level, msg.flag
    if not (
        type(max_body) is int
        and type(threshold) is int
        and type(offset_ms) is int
        and type(delay) is int
        and type(flag) is int
        and max_body in _INT64
        and threshold in _INT64
        and delay in _INT64
        and flag in _INT64
        and type(topic) is str
        and type(body) is bytes
        and 0 < len(body) <= max_body
        and len(body) <= threshold
        and (tags is None or (type(tags) is str and not tags))
        and type(keys) in (tuple, list)
        and not keys
        and type(props) is dict
        and not props
        and delay <= 0
        and type(prefix) is str
        and prefix.isascii()
        and 0 <= offset_ms <= 0xFFFFFFFF
        and type(born_ms) is int
        and type(seq) is list
        and len(seq) == 1
        and type(seq[0]) is int
        and 0 <= seq[0] <= 0xFFFF
    ):
        return None
    msg_id = f"{prefix}{offset_ms:08X}{seq_take(seq, 1):04X}"
    opaque = next_opaque()
    frame = pure_send_request_frame(
        opaque, group, topic, queue_id, 0, born_ms, flag, plain_properties(msg_id), False, broker_name, body
    )
    return frame, opaque, msg_id


#: The compiled :func:`pure_plain_send_frame`, or None on the pure path.
plain_send_frame: Final[PlainSendFrame | None] = (
    _speedups.COMPILED.plain_send_frame if _speedups.COMPILED is not None else None
)
if _speedups.COMPILED is not None:
    _speedups.COMPILED.setup_plain_send(Message, _command._opaque_counter, _HEAD, _TAIL)

__all__ = ["PlainSendFrame", "plain_properties", "plain_send_frame", "pure_plain_send_frame"]
