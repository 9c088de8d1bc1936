"""Decoding a pull body into messages, record by record, and naming the records that cannot be.

A pull (or pop) answer's body is concatenated stored records (spec §3.7). :func:`decode_pull_body`
reads them in order: a good record becomes a :class:`~rocketq.message.MessageExt` (a zlib body
inflated); a record that cannot be delivered — body CRC mismatch, a body marked compressed that
does not inflate or uses a compression this client lacks, a record that does not parse — becomes
a :class:`PoisonRecord` instead of failing the others. A record that does not parse ends the
body: nothing after it can be read. :func:`log_poison` writes the one ERROR line per poison
record that docs/operations.md describes, on the logger ``rocketq.client.consumer_core`` (the
name operators configure, kept from before the decoder had a module of its own).
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

from rocketq.client.aio import SYS_FLAG_COMPRESSED
from rocketq.message import MessageExt
from rocketq.protocol import record as rec
from rocketq.protocol.record import view_to_message

log = logging.getLogger("rocketq.client.consumer_core")  # the documented logger of poison records

#: Compression types (sysFlag bits 8-10) this client inflates: 0 (old producers) and 3 are zlib.
_ZLIB_TYPES = (0, 3)
_COMPRESSION_TYPE_MASK = 0x700
_COMPRESSION_NAMES = {1: "LZ4", 2: "ZSTD"}


@dataclass(slots=True)
class PoisonRecord:
    """A record of a pull body that cannot be delivered as a message (a *poison message*).

    ``message`` is the record as stored (body not inflated) when its structure is intact — a
    body marked compressed that does not inflate, a body CRC mismatch — and None when the record
    itself does not parse: then nothing after it in the body could be read either, and
    ``queue_offset`` is where it was expected (the offset after the last record read, or the
    pull's offset; -1 when unknown)."""

    reason: str
    position: int
    queue_offset: int
    message: MessageExt | None = None


@dataclass(slots=True)
class DecodedBody:
    """A pull body decoded record by record: the deliverable ``messages`` (bodies inflated) and
    the ``poison`` records, each list in body order."""

    messages: list[MessageExt]
    poison: list[PoisonRecord]

    @property
    def truncated(self) -> bool:
        """A record did not parse, so the body's remaining records were not read."""
        return any(p.message is None for p in self.poison)


def decode_pull_body(body: bytes, *, first_offset: int = -1) -> DecodedBody:
    """Decode a pull/pop body (concatenated records) one record at a time: a record that fails
    (CRC, a compressed body that does not inflate, a record that does not parse) becomes a
    :class:`PoisonRecord` instead of failing the others. ``first_offset`` (the pull's offset)
    places a first record that does not parse. Never raises."""
    out = DecodedBody([], [])
    expected = first_offset
    pos = 0
    while pos < len(body):
        view = rec.decode_record(body, pos, check_crc=True)
        if view.kind is rec.RecordKind.CORRUPT and view.size > 0:
            # CRC mismatch (or a later field): read it again without the CRC check to name it
            raw = rec.decode_record(body, pos, check_crc=False)
            if raw.kind is rec.RecordKind.MESSAGE:
                msg = view_to_message(raw)
                out.poison.append(PoisonRecord(view.reason, pos, msg.queue_offset, msg))
                expected = msg.queue_offset + 1
                pos += raw.size
                continue
        if view.kind is not rec.RecordKind.MESSAGE:
            if view.kind is rec.RecordKind.CORRUPT:
                out.poison.append(PoisonRecord(f"record does not parse: {view.reason}", pos, expected))
            break
        msg = view_to_message(view)
        pos += view.size
        expected = msg.queue_offset + 1
        if msg.sys_flag & SYS_FLAG_COMPRESSED:
            problem = _inflate(msg)
            if problem:
                out.poison.append(PoisonRecord(problem, pos - view.size, msg.queue_offset, msg))
                continue
        out.messages.append(msg)
    return out


def _inflate(msg: MessageExt) -> str:
    """Inflate ``msg.body`` in place; why it cannot be, or "" when done."""
    ctype = (msg.sys_flag & _COMPRESSION_TYPE_MASK) >> 8
    if ctype not in _ZLIB_TYPES:
        name = _COMPRESSION_NAMES.get(ctype)
        how = f"{name}-compressed" if name else f"compressed with unknown compression type {ctype}"
        return f"body is {how} (sysFlag 0x{msg.sys_flag:X}); only zlib is supported"
    try:
        msg.body = zlib.decompress(msg.body)
    except zlib.error as exc:
        return f"body marked compressed (sysFlag 0x{msg.sys_flag:X}) does not inflate: {exc}"
    return ""


def log_poison(what: str, poison: Iterable[PoisonRecord], action: str) -> None:
    """One ERROR line per poison record: where it is (topic, queue, queue and commit-log
    offsets), why, and what the consumer does with it."""
    for p in poison:
        m = p.message
        if m is not None:
            log.error(
                "poison message in %s: topic %s queue %d offset %d (commit-log offset %d, msgId %s): %s; %s",
                what, m.topic, m.queue_id, m.queue_offset, m.commit_log_offset, m.client_msg_id,
                p.reason, action,
            )  # fmt: skip
        else:
            log.error(
                "poison record in %s near offset %d (byte %d of the pull body): %s; %s",
                what, p.queue_offset, p.position, p.reason, action,
            )  # fmt: skip


def decode_messages(body: bytes) -> list[MessageExt]:
    """The deliverable messages of a pull body (concatenated records), zlib bodies inflated;
    poison records (:func:`decode_pull_body`) are logged at ERROR and left out."""
    decoded = decode_pull_body(body)
    log_poison("a pulled body", decoded.poison, "left out")
    return decoded.messages
