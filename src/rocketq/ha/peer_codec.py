"""Raft peer messages on the remoting protocol: one request code per message type, compact bodies.

Every Raft message travels as a **oneway** remoting request (no response frame; the reply is a
message of its own). The remoting header carries only the code and an opaque; the body is binary,
big-endian::

    common  src_len:u8 | src | dst_len:u8 | dst | term:i64
    then, by code:
    PRE_VOTE / VOTE        last_index:i64 | last_term:i64 | transfer:u8 (VOTE only)
    PRE_VOTE_REPLY / VOTE_REPLY   granted:u8
    APPEND                 prev_index:i64 | prev_term:i64 | commit:i64 | count:u32 | form:u8 |
                           form 0: count x (index:i64 | term:i64 | kind:u8 | size:u32 | data)
                           form 1: the count entries as the leader's entry store holds them
                                   (DLedger's 48-byte header + body each, ``EntryStore.read_bytes``)
    APPEND_REPLY           success:u8 | match:i64 | appended:i64 | synced:i64 | reject:i64 |
                           conflict_term:i64 | conflict_index:i64
    HEARTBEAT              commit:i64
    HEARTBEAT_REPLY        last:i64 | verified:i64 | appended:i64 | synced:i64
    TIMEOUT_NOW            (nothing)

Form 1 is what members send: a follower appends those bytes verbatim
(``EntryStore.append_entry_bytes``), which checks index, position, term order and both checksums,
the chain checksum included, against its own log. Form 0 (the entries alone) is the fallback when
no store is at hand (tests) or the leader's store no longer holds those entries.

The codes are in a private range (``RAFT_CODE_BASE`` = 6100 and up) that neither RocketMQ nor
DLedger uses on a broker port. This is not DLedger's peer protocol (DLedger speaks its own
JSON-over-remoting RPC, spec/replication.md §1.5): a rocketq node and a DLedger node cannot form
a group; only the entry store's files are byte-compatible.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Final, TypeAlias

from rocketq import speedups as _speedups
from rocketq.errors import RemoteProtocolError, RocketqError
from rocketq.ha.entry_format import BODY_OFFSET, ENTRY_HEADER, MAGIC_NOOP
from rocketq.ha.raft_types import (
    Append,
    AppendReply,
    Entry,
    EntryKind,
    Heartbeat,
    HeartbeatReply,
    Message,
    PreVote,
    PreVoteReply,
    TimeoutNow,
    Vote,
    VoteReply,
    append_reply_of,
)

RAFT_CODE_BASE: Final = 6100
CODE_PRE_VOTE: Final = 6100
CODE_PRE_VOTE_REPLY: Final = 6101
CODE_VOTE: Final = 6102
CODE_VOTE_REPLY: Final = 6103
CODE_APPEND: Final = 6104
CODE_APPEND_REPLY: Final = 6105
CODE_HEARTBEAT: Final = 6106
CODE_HEARTBEAT_REPLY: Final = 6107
CODE_TIMEOUT_NOW: Final = 6108
RAFT_CODES: Final = frozenset(range(CODE_PRE_VOTE, CODE_TIMEOUT_NOW + 1))

_TERM = struct.Struct(">q")
_VOTE = struct.Struct(">qqB")
_LAST = struct.Struct(">qq")
_FLAG = struct.Struct(">B")
_APPEND = struct.Struct(">qqqIB")
FORM_ENTRIES: Final = 0
FORM_RAW: Final = 1
#: ``raw_reader(first index, total bytes)``: the store's bytes of those entries
RawReader = Callable[[int, int], bytes]
_ENTRY = struct.Struct(">qqBI")
#: an entry header's size, index and term (at its byte 4)
_SIZE_INDEX_TERM = struct.Struct(">iqq")
_APPEND_REPLY = struct.Struct(">Bqqqqqq")
_HB = struct.Struct(">q")
_HB_REPLY = struct.Struct(">qqqq")

_CODES: Final[dict[type[Message], int]] = {
    PreVote: CODE_PRE_VOTE,
    PreVoteReply: CODE_PRE_VOTE_REPLY,
    Vote: CODE_VOTE,
    VoteReply: CODE_VOTE_REPLY,
    Append: CODE_APPEND,
    AppendReply: CODE_APPEND_REPLY,
    Heartbeat: CODE_HEARTBEAT,
    HeartbeatReply: CODE_HEARTBEAT_REPLY,
    TimeoutNow: CODE_TIMEOUT_NOW,
}


def code_of(message: Message) -> int:
    return _CODES[type(message)]


#: member ids as encoded (a group has a few members; every message names two of them)
_IDENTS: dict[str, bytes] = {}


def _ident(value: str) -> bytes:
    got = _IDENTS.get(value)
    if got is not None:
        return got
    raw = value.encode("utf-8")
    if len(raw) > 255:
        raise ValueError(f"raft member id {value!r} is longer than 255 bytes")
    got = bytes((len(raw),)) + raw
    if len(_IDENTS) < 64:
        _IDENTS[value] = got
    return got


def _raw_entries(m: Append, raw_reader: RawReader) -> bytes | None:
    """The store's bytes of ``m``'s entries, or None when the store no longer holds exactly them
    (a leader that stepped down and truncated before the message left)."""
    entries = m.entries
    sizes = [len(e.data) + BODY_OFFSET for e in entries]  # Entry.size of each
    total = sum(sizes)
    try:
        raw = raw_reader(entries[0].index, total)
    except RocketqError:
        return None
    if len(raw) != total:
        return None
    off = 0
    head = _SIZE_INDEX_TERM.unpack_from  # no Header object per entry
    for e, size in zip(entries, sizes, strict=True):
        if head(raw, off + 4) != (size, e.index, e.term):
            return None
        off += size
    return raw


def _append_tail(m: Append, raw_reader: RawReader | None) -> bytes:
    raw = _raw_entries(m, raw_reader) if raw_reader is not None and m.entries else None
    form = FORM_ENTRIES if raw is None else FORM_RAW
    parts = [_APPEND.pack(m.prev_index, m.prev_term, m.commit, len(m.entries), form)]
    if raw is not None:
        parts.append(raw)
    for e in m.entries if raw is None else ():
        parts.append(_ENTRY.pack(e.index, e.term, int(e.kind), len(e.data)))
        parts.append(e.data)
    return b"".join(parts)


#: what :func:`encode` keeps of the appends it encoded for :func:`encode`'s next calls
AppendTails = dict[tuple[int, int, int, int, int, int], bytes]


def encode(
    message: Message, raw_reader: RawReader | None = None, tails: AppendTails | None = None
) -> tuple[int, bytes]:
    """``(request code, body)`` of ``message``; appends carry the store's bytes when
    ``raw_reader`` is given (form 1). ``tails`` (optional, empty at first): a place where the
    encoding of an append is kept for the next appends of the same entries (the same objects,
    to other followers) while they all are alive; they then take it without encoding again."""
    head = _ident(message.src) + _ident(message.dst) + _TERM.pack(message.term)
    m = message
    if isinstance(m, Append):
        entries = m.entries
        if tails is None or not entries:
            tail = _append_tail(m, raw_reader)
        else:  # the entries by identity: the same objects are the same entries
            key = (m.prev_index, m.prev_term, m.commit, len(entries), id(entries[0]), id(entries[-1]))
            got = tails.get(key)
            tail = tails[key] = _append_tail(m, raw_reader) if got is None else got
    elif isinstance(m, Vote):
        tail = _VOTE.pack(m.last_index, m.last_term, m.transfer)
    elif isinstance(m, PreVote):
        tail = _LAST.pack(m.last_index, m.last_term)
    elif isinstance(m, PreVoteReply | VoteReply):
        tail = _FLAG.pack(m.granted)
    elif isinstance(m, AppendReply):
        tail = _APPEND_REPLY.pack(
            m.success,
            m.match_index,
            m.appended_index,
            m.synced_index,
            m.reject_index,
            m.conflict_term,
            m.conflict_index,
        )
    elif isinstance(m, Heartbeat):
        tail = _HB.pack(m.commit)
    elif isinstance(m, HeartbeatReply):
        tail = _HB_REPLY.pack(m.last_index, m.verified_index, m.appended_index, m.synced_index)
    elif isinstance(m, TimeoutNow):
        tail = b""
    else:
        raise TypeError(f"no wire form for raft message {m!r}")
    return code_of(m), head + tail


def _read_ident(body: memoryview, off: int) -> tuple[str, int]:
    n = body[off]
    end = off + 1 + n
    if end > len(body):
        raise RemoteProtocolError("raft message: member id runs past the body")
    return str(body[off + 1 : end], "utf-8"), end


def decode(code: int, data: bytes) -> Message:
    """The message of a request with ``code`` and body ``data``; RemoteProtocolError if malformed."""
    return decode_raw(code, data)[0]


def decode_raw(code: int, data: bytes) -> tuple[Message, list[bytes] | None]:
    """The message and, for a form-1 append, each entry's store bytes (else None)."""
    try:
        return _decode(code, memoryview(data))
    except (struct.error, IndexError, UnicodeDecodeError, ValueError) as exc:
        raise RemoteProtocolError(f"malformed raft message (code {code}): {exc}") from exc


def _decode(code: int, body: memoryview) -> tuple[Message, list[bytes] | None]:
    if code == CODE_APPEND:
        return _decode_append(body)
    return _decode_other(code, body), None


def _head(body: memoryview) -> tuple[str, str, int, int]:
    src, off = _read_ident(body, 0)
    dst, off = _read_ident(body, off)
    (term,) = _TERM.unpack_from(body, off)
    return src, dst, term, off + _TERM.size


class RawEntries(list[bytes]):
    """A form-1 append's entries as the leader's store holds them: each entry's bytes, and
    ``block``, all of them as they lie in the message body (what the follower's store appends,
    without joining them again)."""

    __slots__ = ("block",)

    def __init__(self, raws: list[bytes], block: memoryview) -> None:
        super().__init__(raws)
        self.block = block


#: ``(entries, each entry's bytes, the offset after the last)``
SplitRaw: TypeAlias = "tuple[tuple[Entry, ...], list[bytes], int]"


def split_raw_pure(body: memoryview, off: int, count: int) -> SplitRaw:
    """The ``count`` entries of a form-1 append at ``body[off:]``: each as an :class:`Entry`
    (NOOP for DLedger's magic 2, else NORMAL) and as its bytes, and the offset after the last;
    RemoteProtocolError (or struct.error, a header cut short) when one is malformed. The
    reference of the compiled ``split_raw_entries``."""
    entries: list[Entry] = []
    raws: list[bytes] = []
    for _ in range(count):
        magic, size, index, eterm, _pos, _channel, _chain, _crc, body_size = ENTRY_HEADER.unpack_from(
            body, off
        )
        if size < BODY_OFFSET or size != BODY_OFFSET + body_size or off + size > len(body):
            raise RemoteProtocolError(f"raft append: entry {index} has a bad size {size}")
        raw = bytes(body[off : off + size])
        kind = EntryKind.NOOP if magic == MAGIC_NOOP else EntryKind.NORMAL
        entries.append(Entry(index, eterm, raw[BODY_OFFSET:], kind))
        raws.append(raw)
        off += size
    return tuple(entries), raws, off


_split_compiled: Callable[[memoryview, int, int], SplitRaw | None] | None = getattr(
    _speedups.COMPILED, "split_raw_entries", None
)
if _speedups.COMPILED is not None and _split_compiled is not None:
    _speedups.COMPILED.setup_raft_entry(Entry, EntryKind.NORMAL, EntryKind.NOOP)


def split_raw(body: memoryview, off: int, count: int) -> SplitRaw:
    """:func:`split_raw_pure`, compiled when the C accelerator is built; anything malformed
    goes to the pure function, which raises."""
    if _split_compiled is not None:
        got = _split_compiled(body, off, count)
        if got is not None:
            return got
    return split_raw_pure(body, off, count)


def _decode_append(body: memoryview) -> tuple[Message, list[bytes] | None]:
    src, dst, term, off = _head(body)
    prev_index, prev_term, commit, count, form = _APPEND.unpack_from(body, off)
    off += _APPEND.size
    if form == FORM_RAW:
        start = off
        raw_entries, raws, off = split_raw(body, off, count)
        message = Append(src, dst, term, prev_index, prev_term, raw_entries, commit)
        return message, RawEntries(raws, body[start:off])
    entries: list[Entry] = []
    for _ in range(count):
        index, eterm, kind_value, size = _ENTRY.unpack_from(body, off)
        off += _ENTRY.size
        if off + size > len(body):
            raise RemoteProtocolError("raft append: an entry runs past the body")
        entries.append(Entry(index, eterm, bytes(body[off : off + size]), EntryKind(kind_value)))
        off += size
    if form != FORM_ENTRIES:
        raise RemoteProtocolError(f"raft append: unknown form {form}")
    return Append(src, dst, term, prev_index, prev_term, tuple(entries), commit), None


def _decode_append_reply(body: memoryview) -> AppendReply:
    """The leader's most frequent message, built without the frozen dataclass constructor."""
    src, dst, term, off = _head(body)
    ok, match, appended, synced, reject, cterm, cindex = _APPEND_REPLY.unpack_from(body, off)
    return append_reply_of(src, dst, term, bool(ok), match, appended, synced, reject, cterm, cindex)


def _decode_other(code: int, body: memoryview) -> Message:
    if code == CODE_APPEND_REPLY:
        return _decode_append_reply(body)
    src, dst, term, off = _head(body)
    if code == CODE_PRE_VOTE:
        return PreVote(src, dst, term, *_LAST.unpack_from(body, off))
    if code == CODE_VOTE:
        li, lt, transfer = _VOTE.unpack_from(body, off)
        return Vote(src, dst, term, li, lt, bool(transfer))
    if code == CODE_PRE_VOTE_REPLY:
        return PreVoteReply(src, dst, term, bool(_FLAG.unpack_from(body, off)[0]))
    if code == CODE_VOTE_REPLY:
        return VoteReply(src, dst, term, bool(_FLAG.unpack_from(body, off)[0]))
    if code == CODE_HEARTBEAT:
        return Heartbeat(src, dst, term, _HB.unpack_from(body, off)[0])
    if code == CODE_HEARTBEAT_REPLY:
        return HeartbeatReply(src, dst, term, *_HB_REPLY.unpack_from(body, off))
    if code == CODE_TIMEOUT_NOW:
        return TimeoutNow(src, dst, term)
    raise RemoteProtocolError(f"request code {code} is no raft message")
