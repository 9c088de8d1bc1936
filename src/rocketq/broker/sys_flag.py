"""The sysFlag checks of a send: what a stored record can honour (spec/store-format.md §1.4).

A body marked compressed must be one complete zlib stream (compression types 0 and 3; LZ4, ZSTD
and unknown types are refused, as this broker's consumers could not inflate them); NEED_UNWRAP
and INNER_BATCH are refused. Each refusal is MessageIllegal (13) naming the problem. The inflate
check counts the output and stops past :data:`MAX_INFLATED_BODY_BYTES` (a deflate bomb is not
inflated to its end).
"""

from __future__ import annotations

import zlib

from rocketq.errors import MessageIllegal

# MessageSysFlag bits the send path checks (spec/store-format.md §1.4).
SYS_FLAG_COMPRESSED = 0x1
SYS_FLAG_NEED_UNWRAP = 0x40
SYS_FLAG_INNER_BATCH = 0x80
COMPRESSION_TYPE_MASK = 0x700
#: Bits that make a send go through :func:`check_sys_flag` (one test per send otherwise).
CHECKED_SYS_FLAGS = SYS_FLAG_COMPRESSED | SYS_FLAG_NEED_UNWRAP | SYS_FLAG_INNER_BATCH
#: Compression types (sysFlag bits 8-10) consumers can inflate: 0 (old producers) and 3 are zlib.
_ZLIB_TYPES = (0, 3)
_COMPRESSION_NAMES = {1: "LZ4", 2: "ZSTD"}
#: The inflate check stops past this many inflated bytes (no producer sends a body near it:
#: clients limit the uncompressed body to 4 MiB) rather than inflating a deflate bomb to its end.
MAX_INFLATED_BODY_BYTES = 64 << 20
_INFLATE_CHUNK = 1 << 20


def check_sys_flag(sys_flag: int, body: bytes, what: str) -> None:
    """Raise MessageIllegal (13) when a send's ``sys_flag`` asks for something stored records
    cannot honour: a body marked compressed that is not a complete zlib stream (or uses a
    compression this broker's consumers cannot inflate), or the batch-in-one-record bits."""
    if sys_flag & SYS_FLAG_NEED_UNWRAP:
        raise MessageIllegal(f"{what}: sysFlag 0x{sys_flag:X} has NEED_UNWRAP (0x40), which is not supported")
    if sys_flag & SYS_FLAG_INNER_BATCH:
        raise MessageIllegal(f"{what}: sysFlag 0x{sys_flag:X} has INNER_BATCH (0x80), which is not supported")
    if sys_flag & SYS_FLAG_COMPRESSED:
        ctype = (sys_flag & COMPRESSION_TYPE_MASK) >> 8
        if ctype not in _ZLIB_TYPES:
            name = _COMPRESSION_NAMES.get(ctype)
            how = f"{name}-compressed" if name else f"compressed with unknown compression type {ctype}"
            raise MessageIllegal(
                f"{what}: sysFlag 0x{sys_flag:X} marks the body {how}; only zlib is supported"
            )
        problem = zlib_problem(body)
        if problem:
            raise MessageIllegal(
                f"{what}: sysFlag 0x{sys_flag:X} marks the body zlib-compressed but {problem}"
            )


def zlib_problem(body: bytes) -> str:
    """Why ``body`` is not a complete zlib stream (trailing bytes after it are allowed, as
    inflaters ignore them), or "" when it is one. Inflated output is counted, not kept."""
    inflater = zlib.decompressobj()
    inflated = 0
    data = body
    try:
        while not inflater.eof:
            out = inflater.decompress(data, _INFLATE_CHUNK)
            data = inflater.unconsumed_tail
            if not out and not data:
                return f"the zlib stream of {len(body)} bytes is truncated"
            inflated += len(out)
            if inflated > MAX_INFLATED_BODY_BYTES:
                return f"it inflates to more than {MAX_INFLATED_BODY_BYTES} bytes"
    except zlib.error as exc:
        return f"it does not inflate ({exc})"
    return ""
