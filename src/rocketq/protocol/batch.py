"""The SEND_BATCH_MESSAGE body (``MessageDecoder.encodeMessages``), pure codec.

The body is the concatenation of one entry per message, big-endian::

    TOTALSIZE   i32   22 + BODYLEN + PROPERTIESLEN (the whole entry)
    MAGICCODE   i32   0
    BODYCRC     i32   0
    FLAG        i32   user flag
    BODYLEN     i32   then the body bytes
    PROPLEN     i16   then the properties (``name\\x01value\\x02``, UTF-8)

Decoding checks every length against the buffer and against TOTALSIZE and raises
:class:`~rocketq.errors.MessageIllegal` on the first inconsistency, naming the entry.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from rocketq.errors import MessageIllegal

_HEAD = struct.Struct(">iiiii")  # total, magic, crc, flag, body length
_PROP_LEN = struct.Struct(">h")
ENTRY_OVERHEAD = _HEAD.size + _PROP_LEN.size  # 22


@dataclass(frozen=True, slots=True)
class BatchEntry:
    body: bytes
    properties: bytes = b""
    flag: int = 0


def encode_batch(entries: list[BatchEntry]) -> bytes:
    parts: list[bytes] = []
    for e in entries:
        total = ENTRY_OVERHEAD + len(e.body) + len(e.properties)
        parts.append(_HEAD.pack(total, 0, 0, e.flag, len(e.body)))
        parts.append(e.body)
        parts.append(_PROP_LEN.pack(len(e.properties)))
        parts.append(e.properties)
    return b"".join(parts)


def encode_batch_entries(entries: Sequence[tuple[bytes, bytes, int]]) -> bytes:
    """:func:`encode_batch` of ``(body, properties, flag)`` tuples (a client's batch send: no
    entry objects); the same bytes."""
    head = _HEAD.pack
    prop_len = _PROP_LEN.pack
    parts: list[bytes] = []
    append = parts.append
    for body, props, flag in entries:
        append(head(ENTRY_OVERHEAD + len(body) + len(props), 0, 0, flag, len(body)))
        append(body)
        append(prop_len(len(props)))
        append(props)
    return b"".join(parts)


def decode_batch(data: bytes) -> list[BatchEntry]:
    """Split a batch body into its messages; raises MessageIllegal when it is malformed."""
    return [BatchEntry(body, props, flag) for body, props, flag in decode_batch_entries(data)]


def decode_batch_entries(data: bytes) -> list[tuple[bytes, bytes, int]]:
    """:func:`decode_batch` as ``(body, properties, flag)`` tuples (the broker's send path: a
    tuple costs less than a frozen entry object); the same checks and errors."""
    if not isinstance(data, bytes):
        data = bytes(data)  # slices of bytes are bytes
    entries: list[tuple[bytes, bytes, int]] = []
    append = entries.append
    head = _HEAD.unpack_from
    prop_len_at = _PROP_LEN.unpack_from
    head_size = _HEAD.size
    pos = 0
    end = len(data)
    while pos < end:
        if end - pos < ENTRY_OVERHEAD:
            raise MessageIllegal(
                f"batch entry {len(entries)} at byte {pos}: {end - pos} B left, need {ENTRY_OVERHEAD} B"
            )
        total, _magic, _crc, flag, body_len = head(data, pos)
        body_start = pos + head_size
        body_end = body_start + body_len
        if body_len < 0 or body_end + 2 > end:
            raise MessageIllegal(
                f"batch entry {len(entries)} at byte {pos}: body length {body_len} B overruns the body"
            )
        (prop_len,) = prop_len_at(data, body_end)
        prop_start = body_end + 2
        prop_end = prop_start + prop_len
        if prop_len < 0 or prop_end > end:
            raise MessageIllegal(
                f"batch entry {len(entries)} at byte {pos}: properties length {prop_len} B overruns the body"
            )
        if total != ENTRY_OVERHEAD + body_len + prop_len:
            raise MessageIllegal(
                f"batch entry {len(entries)} at byte {pos}: total size {total} B does not match "
                f"{ENTRY_OVERHEAD} + body {body_len} B + properties {prop_len} B"
            )
        append((data[body_start:body_end], data[prop_start:prop_end], flag))
        pos = prop_end
    if not entries:
        raise MessageIllegal("batch body is empty")
    return entries


__all__ = [
    "ENTRY_OVERHEAD",
    "BatchEntry",
    "decode_batch",
    "decode_batch_entries",
    "encode_batch",
    "encode_batch_entries",
]
