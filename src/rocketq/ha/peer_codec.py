"""Raft peer messages on the remoting protocol: one request code per message type, compact bodies.

Every Raft message travels as a **oneway** remoting request (no response frame; the reply is a
message of its own). The remoting header carries only the code and an opaque; the body is binary,
big-endian::

    common  src_len:u8 | src | dst_len:u8 | dst | term:i64
    then, by code:
    PRE_VOTE / VOTE        last_index:i64 | last_term:i64 | transfer:u8 (VOTE only)
    PRE_VOTE_REPLY / VOTE_REPLY   granted:u8
    APPEND                 prev_index:i64 | prev_term:i64 | commit:i64 | count:u32 |
                           count x (index:i64 | term:i64 | kind:u8 | size:u32 | data)
    APPEND_REPLY           success:u8 | match:i64 | appended:i64 | synced:i64 | reject:i64 |
                           conflict_term:i64 | conflict_index:i64
    HEARTBEAT              commit:i64
    HEARTBEAT_REPLY        last:i64 | verified:i64 | appended:i64 | synced:i64
    TIMEOUT_NOW            (nothing)

The codes are in a private range (``RAFT_CODE_BASE`` = 6100 and up) that neither RocketMQ nor
DLedger uses on a broker port. This is not DLedger's peer protocol (DLedger speaks its own
JSON-over-remoting RPC, spec/replication.md §1.5): a rocketq node and a DLedger node cannot form
a group; only the entry store's files are byte-compatible.
"""

from __future__ import annotations

import struct
from typing import Final

from rocketq.errors import RemoteProtocolError
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
_APPEND = struct.Struct(">qqqI")
_ENTRY = struct.Struct(">qqBI")
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


def _ident(value: str) -> bytes:
    raw = value.encode("utf-8")
    if len(raw) > 255:
        raise ValueError(f"raft member id {value!r} is longer than 255 bytes")
    return bytes((len(raw),)) + raw


def encode(message: Message) -> tuple[int, bytes]:
    """``(request code, body)`` of ``message``."""
    head = _ident(message.src) + _ident(message.dst) + _TERM.pack(message.term)
    m = message
    if isinstance(m, Vote):
        tail = _VOTE.pack(m.last_index, m.last_term, m.transfer)
    elif isinstance(m, PreVote):
        tail = _LAST.pack(m.last_index, m.last_term)
    elif isinstance(m, PreVoteReply | VoteReply):
        tail = _FLAG.pack(m.granted)
    elif isinstance(m, Append):
        parts = [_APPEND.pack(m.prev_index, m.prev_term, m.commit, len(m.entries))]
        for e in m.entries:
            parts.append(_ENTRY.pack(e.index, e.term, int(e.kind), len(e.data)))
            parts.append(e.data)
        tail = b"".join(parts)
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
    return bytes(body[off + 1 : end]).decode("utf-8"), end


def decode(code: int, data: bytes) -> Message:
    """The message of a request with ``code`` and body ``data``; RemoteProtocolError if malformed."""
    try:
        return _decode(code, memoryview(data))
    except (struct.error, IndexError, UnicodeDecodeError, ValueError) as exc:
        raise RemoteProtocolError(f"malformed raft message (code {code}): {exc}") from exc


def _decode(code: int, body: memoryview) -> Message:
    src, off = _read_ident(body, 0)
    dst, off = _read_ident(body, off)
    (term,) = _TERM.unpack_from(body, off)
    off += _TERM.size
    if code == CODE_PRE_VOTE:
        return PreVote(src, dst, term, *_LAST.unpack_from(body, off))
    if code == CODE_VOTE:
        li, lt, transfer = _VOTE.unpack_from(body, off)
        return Vote(src, dst, term, li, lt, bool(transfer))
    if code == CODE_PRE_VOTE_REPLY:
        return PreVoteReply(src, dst, term, bool(_FLAG.unpack_from(body, off)[0]))
    if code == CODE_VOTE_REPLY:
        return VoteReply(src, dst, term, bool(_FLAG.unpack_from(body, off)[0]))
    if code == CODE_APPEND:
        prev_index, prev_term, commit, count = _APPEND.unpack_from(body, off)
        off += _APPEND.size
        entries: list[Entry] = []
        for _ in range(count):
            index, eterm, kind, size = _ENTRY.unpack_from(body, off)
            off += _ENTRY.size
            if off + size > len(body):
                raise RemoteProtocolError("raft append: an entry runs past the body")
            entries.append(Entry(index, eterm, bytes(body[off : off + size]), EntryKind(kind)))
            off += size
        return Append(src, dst, term, prev_index, prev_term, tuple(entries), commit)
    if code == CODE_APPEND_REPLY:
        ok, match, appended, synced, reject, cterm, cindex = _APPEND_REPLY.unpack_from(body, off)
        return AppendReply(src, dst, term, bool(ok), match, appended, synced, reject, cterm, cindex)
    if code == CODE_HEARTBEAT:
        return Heartbeat(src, dst, term, _HB.unpack_from(body, off)[0])
    if code == CODE_HEARTBEAT_REPLY:
        return HeartbeatReply(src, dst, term, *_HB_REPLY.unpack_from(body, off))
    if code == CODE_TIMEOUT_NOW:
        return TimeoutNow(src, dst, term)
    raise RemoteProtocolError(f"request code {code} is no raft message")
