"""Durable pop state: an append-only journal of binary records plus a compacted snapshot.

Directory ``<storePathRootDir>/pop/``::

    snapshot       the whole state at some point, as records (written to snapshot.tmp, fsync'd,
                   renamed over snapshot, directory fsync'd)
    journal        every change since that snapshot, appended; fsync'd in groups (group commit)

Both files are sequences of records; integers are big-endian::

    offset  size  field
    0       4     length     bytes of type + payload
    4       4     crc        CRC32 of type + payload
    8       1     type
    9       ..    payload:
       1 HEADER   magic "RQPJ", version u8 (1), generation u64      first record of every file
       2 KEY      key_id u32, queue_id i32, group_len u16, group UTF-8, topic_len u16, topic UTF-8
       3 ADVANCE  key_id u32, offset i64                              (41 B records below)
       4 DELIVER  key_id u32, offset i64, attempt u32, invisible_until_ms i64, nonce u64
       5 ACK      key_id u32, offset i64
       6 END      records u64                                         last record of a snapshot

The record types are :class:`~rocketq.broker.pop.state.QueueState`'s mutations, so recovery is
a replay: snapshot (only if it ends with END), then the journal *if its generation equals the
snapshot's* (a journal of an older generation is already folded into the snapshot: compaction
crashed between the rename of the snapshot and the creation of the new journal). Replay stops at
the first record whose length or CRC does not check out (a torn tail of a write that was never
reported durable) and the journal is truncated there, so later appends follow valid data.

Compaction (when the journal passes its size threshold): snapshot of generation g+1 ← the
in-memory state; rename; new journal of generation g+1 written as journal.tmp and renamed over
journal. At every instant the pair on disk decodes to a state at least as new as the last fsync.

Within one pop, DELIVER records are written in offset order and the ADVANCE of the read range
comes last: a torn batch leaves a prefix, in which offsets skipped between two DELIVERs were
filtered out (done) and every handed-out message is in flight — nothing handed out is lost.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import struct
import zlib
from dataclasses import dataclass

from rocketq.broker.pop.state import PopTable
from rocketq.errors import CorruptFileError, DiskFull
from rocketq.fileio import durable_replace, write_all

log = logging.getLogger(__name__)

MAGIC = b"RQPJ"
FORMAT_VERSION = 1

T_HEADER = 1
T_KEY = 2
T_ADVANCE = 3
T_DELIVER = 4
T_ACK = 5
T_END = 6

_FRAME = struct.Struct(">II")
_HEADER = struct.Struct(">4sBQ")
_KEY_HEAD = struct.Struct(">Ii")
_OFFSET = struct.Struct(">Iq")
_DELIVER = struct.Struct(">IqIqQ")
_END = struct.Struct(">Q")
#: Largest record we accept when reading (a KEY with two 64 KiB names, with room to spare).
MAX_RECORD_BYTES = 1 << 18

SNAPSHOT_NAME = "snapshot"
JOURNAL_NAME = "journal"


# -- codec (pure) ---------------------------------------------------------------------------
def frame(rtype: int, payload: bytes) -> bytes:
    body = bytes([rtype]) + payload
    return _FRAME.pack(len(body), zlib.crc32(body)) + body


def header_record(generation: int) -> bytes:
    return frame(T_HEADER, _HEADER.pack(MAGIC, FORMAT_VERSION, generation))


def key_record(key_id: int, group: str, topic: str, queue_id: int) -> bytes:
    g = group.encode()
    t = topic.encode()
    payload = _KEY_HEAD.pack(key_id, queue_id) + struct.pack(">H", len(g)) + g + struct.pack(">H", len(t)) + t
    return frame(T_KEY, payload)


def advance_record(key_id: int, offset: int) -> bytes:
    return frame(T_ADVANCE, _OFFSET.pack(key_id, offset))


def deliver_record(key_id: int, offset: int, attempt: int, invisible_until_ms: int, nonce: int) -> bytes:
    return frame(T_DELIVER, _DELIVER.pack(key_id, offset, attempt, invisible_until_ms, nonce))


def ack_record(key_id: int, offset: int) -> bytes:
    return frame(T_ACK, _OFFSET.pack(key_id, offset))


def end_record(count: int) -> bytes:
    return frame(T_END, _END.pack(count))


@dataclass(frozen=True, slots=True)
class Decoded:
    """What :func:`decode_file` found in one file."""

    generation: int | None
    records: list[tuple[int, bytes]]
    #: Bytes of valid records from the start of the file.
    valid_bytes: int
    ended: bool


def decode_file(data: bytes) -> Decoded:
    """Split a journal or snapshot into ``(type, payload)`` records, stopping at a torn or
    corrupt tail. A file whose first record is not a valid HEADER has no generation."""
    records: list[tuple[int, bytes]] = []
    pos = 0
    generation: int | None = None
    ended = False
    n = len(data)
    while pos + _FRAME.size <= n:
        length, crc = _FRAME.unpack_from(data, pos)
        end = pos + _FRAME.size + length
        if length < 1 or length > MAX_RECORD_BYTES or end > n:
            break
        body = data[pos + _FRAME.size : end]
        if zlib.crc32(body) != crc:
            break
        rtype, payload = body[0], body[1:]
        if generation is None:
            if rtype != T_HEADER or len(payload) != _HEADER.size:
                break
            magic, version, gen = _HEADER.unpack(payload)
            if magic != MAGIC or version != FORMAT_VERSION:
                break
            generation = gen
        elif rtype == T_END:
            ended = True
            pos = end
            break
        else:
            records.append((rtype, payload))
        pos = end
    return Decoded(generation, records, pos, ended)


def apply_records(table: PopTable, records: list[tuple[int, bytes]]) -> None:
    """Replay records into ``table`` (key ids refer to KEY records seen before)."""
    try:
        _apply(table, records)
    except (KeyError, struct.error, UnicodeDecodeError) as exc:
        raise CorruptFileError(f"pop journal record does not decode: {exc}") from exc


def _apply(table: PopTable, records: list[tuple[int, bytes]]) -> None:
    for rtype, payload in records:
        if rtype == T_KEY:
            key_id, queue_id = _KEY_HEAD.unpack_from(payload, 0)
            p = _KEY_HEAD.size
            (glen,) = struct.unpack_from(">H", payload, p)
            group = payload[p + 2 : p + 2 + glen].decode()
            p += 2 + glen
            (tlen,) = struct.unpack_from(">H", payload, p)
            topic = payload[p + 2 : p + 2 + tlen].decode()
            table.define(key_id, (group, topic, queue_id))
        elif rtype == T_ADVANCE:
            key_id, offset = _OFFSET.unpack(payload)
            table.by_id(key_id).advance(offset)
        elif rtype == T_DELIVER:
            key_id, offset, attempt, until, nonce = _DELIVER.unpack(payload)
            table.by_id(key_id).deliver(offset, attempt, until, nonce)
        elif rtype == T_ACK:
            key_id, offset = _OFFSET.unpack(payload)
            table.by_id(key_id).ack(offset)
        else:
            raise CorruptFileError(f"pop journal record type {rtype} is unknown")


def encode_snapshot(table: PopTable, generation: int) -> bytes:
    """The whole table as a snapshot file of ``generation``."""
    out = [header_record(generation)]
    count = 0
    for key, key_id in table.key_ids.items():
        state = table.states[key]
        group, topic, queue_id = key
        out.append(key_record(key_id, group, topic, queue_id))
        out.append(advance_record(key_id, state.next_offset))
        count += 2
        for offset, entry in state:
            out.append(deliver_record(key_id, offset, entry.attempt, entry.invisible_until_ms, entry.nonce))
            count += 1
    out.append(end_record(count))
    return b"".join(out)


# -- files ----------------------------------------------------------------------------------
class PopJournal:
    """The two files of the pop state. Not thread-safe: one caller at a time (the service runs
    every write, fsync and compaction from a single task)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.snapshot_path = os.path.join(directory, SNAPSHOT_NAME)
        self.journal_path = os.path.join(directory, JOURNAL_NAME)
        self.generation = 0
        self._fd: int | None = None
        self._closed = False
        #: Bytes in the journal file (valid records only).
        self.size_bytes = 0

    def load(self) -> PopTable:
        """Recover the table from disk and open the journal for appending."""
        self._closed = False
        os.makedirs(self.directory, exist_ok=True)
        table = PopTable()
        generation = 0
        snapshot = _read(self.snapshot_path)
        if snapshot is not None:
            decoded = decode_file(snapshot)
            if decoded.generation is None or not decoded.ended:
                raise CorruptFileError(f"pop snapshot {self.snapshot_path} is damaged")
            apply_records(table, decoded.records)
            generation = decoded.generation
        journal = _read(self.journal_path)
        replayed = 0
        if journal is not None:
            decoded = decode_file(journal)
            if decoded.generation == generation:
                apply_records(table, decoded.records)
                replayed = len(decoded.records)
                if decoded.valid_bytes < len(journal):
                    log.warning(
                        "pop journal %s: ignoring %d bytes of torn tail after %d valid bytes",
                        self.journal_path,
                        len(journal) - decoded.valid_bytes,
                        decoded.valid_bytes,
                    )
                self._open(decoded.valid_bytes)
            else:
                log.info(
                    "pop journal %s is of generation %s, snapshot of %d: folded in already",
                    self.journal_path,
                    decoded.generation,
                    generation,
                )
        self.generation = generation
        if self._fd is None:
            durable_replace(self.journal_path, header_record(generation), mode=0o644)
            self._open(None)
        log.info(
            "pop state loaded: %d queues, %d in flight, %d journal records replayed (generation %d)",
            len(table.states),
            sum(len(s.in_flight) for s in table.states.values()),
            replayed,
            generation,
        )
        return table

    def _open(self, truncate_at: int | None) -> None:
        fd = os.open(self.journal_path, os.O_WRONLY)
        if truncate_at is not None:
            os.ftruncate(fd, truncate_at)
            os.fsync(fd)
        self.size_bytes = os.lseek(fd, 0, os.SEEK_END)
        self._fd = fd

    def write_and_sync(self, data: bytes) -> None:
        """Append ``data`` (whole records) and fsync."""
        if self._fd is None and not self._closed:
            self._new_journal()  # a compaction wrote its snapshot but not the new journal
        fd = self._fd
        if fd is None:
            raise RuntimeError("pop journal is closed")
        try:
            write_all(fd, data)
            os.fsync(fd)
        except OSError as exc:
            # Cut what part of ``data`` got in: records appended later must follow whole ones.
            os.lseek(fd, self.size_bytes, os.SEEK_SET)  # the next append overwrites the part
            with contextlib.suppress(OSError):
                os.ftruncate(fd, self.size_bytes)
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFull(f"disk full: cannot append {len(data)} B to {self.journal_path}") from exc
            raise
        self.size_bytes += len(data)

    def compact(self, snapshot: bytes, generation: int) -> None:
        """Replace snapshot and journal by ``snapshot`` (of ``generation``) and an empty journal.

        A failure writing the snapshot changes nothing. A failure after it (the new journal, on
        a full disk) leaves the old journal, which the snapshot already holds and a restart
        skips as an older generation; the next append creates the new journal first."""
        durable_replace(self.snapshot_path, snapshot, mode=0o644)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self.generation = generation
        self._new_journal()

    def _new_journal(self) -> None:
        durable_replace(self.journal_path, header_record(self.generation), mode=0o644)
        self._open(None)

    def close(self) -> None:
        self._closed = True
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


__all__ = [
    "Decoded",
    "PopJournal",
    "ack_record",
    "advance_record",
    "apply_records",
    "decode_file",
    "deliver_record",
    "encode_snapshot",
    "header_record",
    "key_record",
]
