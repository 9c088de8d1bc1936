"""Remoting frames: a sans-IO decoder and the encoder (no sockets, no asyncio).

Frame layout (big-endian)::

    off   size      field
    0     4         length        int32 = 4 + headerLen + bodyLen (bytes after this field)
    4     4         type|hlen     high byte serialize type (0 JSON, 1 ROCKETMQ), low 24 bits headerLen
    8     hlen      header        see rocketq.remoting.command
    8+h   rest      body          opaque bytes

:class:`FrameDecoder` takes whatever the socket delivered and returns every complete command in
it, so one ``data_received`` call costs one ``feed`` however many frames it carries. Bytes are
parsed in place from the chunk when nothing is pending; a partial frame is kept in a single
``bytearray`` with a read position, and the decoder does not look at the buffer again until the
bytes the next frame needs (known from its length field) have arrived, so a large frame arriving
in many chunks costs amortised O(size).

A received frame is rejected with :class:`~rocketq.errors.RemoteProtocolError` when its length is
below 4 or its whole size (``length + 4``, as Netty counts it) exceeds ``max_frame_size`` —
checked as soon as the 4 length bytes are in, before the frame is buffered — when the header
length runs past the frame, or when the header does not decode. The stream cannot be
re-synchronised after that, so the decoder stays failed and the connection must be closed.
:func:`encode` raises
:class:`~rocketq.errors.LocalProtocolError` for a command the format cannot carry (nothing sent).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from typing import Final, NoReturn

from rocketq import speedups as _speedups
from rocketq.errors import LocalProtocolError, RemoteProtocolError
from rocketq.remoting.codes import DEFAULT_MAX_FRAME_SIZE, MAX_HEADER_LENGTH
from rocketq.remoting.command import RemotingCommand, decode_header, encode_header, encode_json_success_header

log = logging.getLogger(__name__)

_LENGTH: Final = struct.Struct(">i")
_TYPE_HLEN: Final = struct.Struct(">I")
_PREFIX: Final = struct.Struct(">iI")
_INT32_MAX: Final = 0x7FFFFFFF

#: Once this many consumed bytes sit in front of the read position, the buffer is compacted.
_COMPACT_AT: Final = 256 * 1024
#: The frame loop of :meth:`FrameDecoder._parse` compiled (``rocketq._speedups.parse_frames``): it
#: takes the complete JSON frames and stops at any other for the pure loop; None on the pure path.
_parse_frames: Final[Callable[..., tuple[int, int]] | None] = getattr(
    _speedups.COMPILED, "parse_frames", None
)

#: The smallest frame: the length field plus the type|hlen field, header and body empty.
MIN_FRAME_SIZE: Final = 8


def encode(cmd: RemotingCommand) -> bytes:
    """One whole frame for ``cmd`` (header in ``cmd.serialize_type``)."""
    try:
        header = encode_header(cmd)
    except UnicodeEncodeError as exc:  # a lone surrogate in a field or the remark
        raise LocalProtocolError(
            f"code {cmd.code}: header text {exc.object[max(0, exc.start - 20) : exc.end + 20]!r} has a lone "
            f"surrogate (U+{ord(exc.object[exc.start]):04X}) that UTF-8 cannot encode"
        ) from None
    hlen = len(header)
    if hlen > MAX_HEADER_LENGTH:
        raise LocalProtocolError(f"header of {hlen} B exceeds the 24-bit max {MAX_HEADER_LENGTH} B")
    body = cmd.body
    length = 4 + hlen + len(body)
    if length > _INT32_MAX:
        raise LocalProtocolError(f"frame of {length + 4} B does not fit the int32 length field")
    prefix = _PREFIX.pack(length, (int(cmd.serialize_type) << 24) | hlen)
    if body:
        return b"".join((prefix, header, body))
    return prefix + header


#: The pure-Python encode. When the C accelerator is in use the name is its compiled twin
#: (``rocketq._speedups.encode_frame``), which writes the whole frame of a JSON command with a
#: bytes body whose header the compiled :func:`~rocketq.remoting.command.encode_json_header`
#: takes, and hands any other command to this one: the same bytes and errors.
pure_encode = encode
if _speedups.COMPILED is not None:
    _speedups.COMPILED.setup_encode_frame(pure_encode)
    encode = _speedups.COMPILED.encode_frame


def success_frame(opaque: int, ext_json: str) -> bytes:
    """The whole frame of a SUCCESS response to request ``opaque`` whose extFields are
    ``ext_json``, a JSON object already written: the bytes :func:`encode` makes of the same
    response as a :class:`RemotingCommand`, for the answers a server sends most (a send's),
    without building one."""
    header = encode_json_success_header(opaque, ext_json)
    hlen = len(header)
    return _PREFIX.pack(4 + hlen, hlen) + header


class FrameDecoder:
    """Incremental frame parser: ``feed(chunk) -> [RemotingCommand, ...]``."""

    __slots__ = ("_buf", "_error", "_max_body", "_need", "_pos", "idle", "max_frame_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if max_frame_size < MIN_FRAME_SIZE:
            raise ValueError(
                f"max_frame_size {max_frame_size} B is below the minimum frame {MIN_FRAME_SIZE} B"
            )
        self.max_frame_size = max_frame_size
        self._max_body = max_frame_size - 4  # largest acceptable value of the length field
        self._buf = bytearray()
        self._pos = 0  # read position in _buf
        self._need = 4  # bytes needed after _pos before parsing can make progress
        self._error: str | None = None
        #: True while no byte is buffered and no bad frame was seen: the next chunk starts a frame.
        self.idle = True

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a returned command."""
        return len(self._buf) - self._pos

    @property
    def missing(self) -> int:
        """Bytes still to come before the frame begun in the buffer is complete (0 when idle;
        while its length field is incomplete, what completes that field)."""
        return max(0, self._need - (len(self._buf) - self._pos))

    @property
    def failed(self) -> bool:
        """True once a bad frame was seen; every later feed raises RemoteProtocolError again."""
        return self._error is not None

    def feed(self, data: bytes) -> list[RemotingCommand]:
        """Every command completed by ``data`` (possibly none). Raises RemoteProtocolError on a
        bad frame; commands completed earlier in the same chunk are then discarded with the stream."""
        if self._error is not None:
            raise RemoteProtocolError(self._error)
        buf = self._buf
        pos = self._pos
        if pos == len(buf):
            # Nothing pending: parse straight from the chunk, keep only its incomplete tail.
            out: list[RemotingCommand] = []
            end = len(data)
            done = self._parse(data, 0, end, out)
            if done < end:
                if pos:
                    buf.clear()
                    self._pos = 0
                buf += memoryview(data)[done:]
                self.idle = False
            elif pos:
                buf.clear()
                self._pos = 0
            return out
        buf += data
        end = len(buf)
        if end - pos < self._need:
            return []
        out = []
        with memoryview(buf) as view:
            pos = self._parse(view, pos, end, out)
        if pos == end:
            buf.clear()
            pos = 0
            self.idle = True
        elif pos >= _COMPACT_AT or pos >= end - pos:
            del buf[:pos]
            pos = 0
        self._pos = pos
        return out

    def _parse(self, src: bytes | memoryview, pos: int, end: int, out: list[RemotingCommand]) -> int:
        """Append the complete frames of ``src[pos:end]`` to ``out``; the position after them."""
        if _parse_frames is not None:
            pos, need = _parse_frames(src, pos, end, self._max_body, MAX_HEADER_LENGTH, out)
            if need:  # every complete frame taken
                self._need = need
                return pos
            # stopped at a frame the loop below takes (a bad one fails there, as it always did)
        unpack_length = _LENGTH.unpack_from
        unpack_type = _TYPE_HLEN.unpack_from
        max_body = self._max_body
        append = out.append
        while end - pos >= 4:
            (length,) = unpack_length(src, pos)
            if length < 4 or length > max_body:
                self._fail(self._length_reason(length))
            frame_end = pos + 4 + length
            if frame_end > end:
                self._need = 4 + length
                return pos
            (type_hlen,) = unpack_type(src, pos + 4)
            hlen = type_hlen & MAX_HEADER_LENGTH
            if hlen > length - 4:
                self._fail(
                    f"header length {hlen} B exceeds frame length {length} B (header + body {length - 4} B)"
                )
            header_end = pos + 8 + hlen
            try:
                cmd = decode_header(
                    type_hlen >> 24,
                    bytes(src[pos + 8 : header_end]),
                    bytes(src[header_end:frame_end]) if header_end < frame_end else b"",
                )
            except RemoteProtocolError as exc:
                self._fail(str(exc))
            append(cmd)
            pos = frame_end
        self._need = 4
        return pos

    def _length_reason(self, length: int) -> str:
        if length < 0:
            return f"negative frame length {length}"
        if length < 4:
            return f"frame length {length} B is below the minimum 4 B (the header-length field)"
        return f"frame of {length + 4} B exceeds max {self.max_frame_size} B"

    def _fail(self, reason: str) -> NoReturn:
        self._error = reason
        self._buf = bytearray()
        self._pos = 0
        self.idle = False
        log.debug("bad frame: %s", reason)
        raise RemoteProtocolError(reason)
