"""Receipt handles: what a popped message carries so that it can be acked later (pure codec).

A handle names one *delivery* of one message: the queue and offset of the message, the delivery
attempt, the invisible deadline it was given and a random nonce drawn for that delivery. It is
printable ASCII, fields in lower-case hex separated by dots::

    field              meaning
    version            "1"
    queue_id           queue the message was popped from
    queue_offset       its offset in that queue
    attempt            delivery attempt (1 = first delivery)
    invisible_until    epoch ms the delivery stays invisible until
    nonce              64-bit value drawn for this delivery (also in the pop journal)
    check              CRC32 of the group, the topic and the fields above

Invariants:

* a handle is *current* only while the broker's pop state holds an in-flight entry at
  (group, topic, queue_id, queue_offset) with the same nonce; every new delivery and every
  change of the invisible time draws a new nonce, so earlier handles of the message go stale;
* the check field binds the handle to its group and topic: a handle presented for another
  group or topic, or altered in transit, is rejected before the state is consulted.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from rocketq.errors import InvalidReceiptHandle

VERSION = "1"
_FIELDS = 7
_HEX = frozenset("0123456789abcdef")
#: Longest handle we accept (the fields above at their widest, with room to spare).
MAX_HANDLE_LENGTH = 160


@dataclass(frozen=True, slots=True)
class Receipt:
    """The decoded content of a receipt handle."""

    queue_id: int
    queue_offset: int
    attempt: int
    invisible_until_ms: int
    nonce: int


def _check(group: str, topic: str, body: str) -> int:
    return zlib.crc32(f"{group}\x00{topic}\x00{body}".encode())


def encode_receipt(group: str, topic: str, receipt: Receipt) -> str:
    """The handle string of ``receipt`` for ``group`` / ``topic``."""
    body = (
        f"{VERSION}.{receipt.queue_id:x}.{receipt.queue_offset:x}.{receipt.attempt:x}."
        f"{receipt.invisible_until_ms:x}.{receipt.nonce:x}"
    )
    return f"{body}.{_check(group, topic, body):08x}"


def decode_receipt(group: str, topic: str, handle: str) -> Receipt:
    """Parse and verify a handle; raises :class:`InvalidReceiptHandle` if it is malformed or was
    issued for another group or topic."""
    if not handle:
        raise InvalidReceiptHandle("receipt handle is empty")
    if len(handle) > MAX_HANDLE_LENGTH or not handle.isascii():
        raise InvalidReceiptHandle(f"receipt handle is malformed: {handle[:40]!r}...")
    parts = handle.split(".")
    if len(parts) != _FIELDS or parts[0] != VERSION:
        raise InvalidReceiptHandle(f"receipt handle is malformed: {handle!r}")
    if any(not p or len(p) > 16 or not set(p) <= _HEX for p in parts[1:]):
        raise InvalidReceiptHandle(f"receipt handle is malformed: {handle!r}")
    values = [int(p, 16) for p in parts[1:]]
    queue_id, queue_offset, attempt, invisible_until_ms, nonce, check = values
    body = handle[: handle.rfind(".")]
    if check != _check(group, topic, body):
        raise InvalidReceiptHandle(
            f"receipt handle {handle!r} does not belong to group {group} topic {topic}"
        )
    return Receipt(queue_id, queue_offset, attempt, invisible_until_ms, nonce)


__all__ = ["MAX_HANDLE_LENGTH", "Receipt", "decode_receipt", "encode_receipt"]
