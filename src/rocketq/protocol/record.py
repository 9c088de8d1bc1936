"""CommitLog record codec (pure: bytes in, values out). Byte-compatible with Apache RocketMQ.

Record layout (big-endian; BH/SH = 8 for IPv4, 20 for IPv6; TL = 1 for V1, 2 for V2)::

    off        field                      type
    0          TOTALSIZE                  i32   whole record, this field included
    4          MAGICCODE                  i32   V1 0xDAA320A7, V2 0xDAA320AB, BLANK 0xCBD43194
    8          BODYCRC                    i32   zlib.crc32(body) & 0x7FFFFFFF
    12         QUEUEID                    i32
    16         FLAG                       i32
    20         QUEUEOFFSET                i64   0 for PREPARED/ROLLBACK transaction records
    28         PHYSICALOFFSET             i64   absolute CommitLog offset of this record
    36         SYSFLAG                    i32   bits below
    40         BORNTIMESTAMP              i64   ms
    48         BORNHOST                   BH    address ‖ i32 port
    48+BH      STORETIMESTAMP             i64   ms
    56+BH      STOREHOST                  SH
    56+BH+SH   RECONSUMETIMES             i32
    60+BH+SH   PREPARED TRANSACTION OFF   i64
    68+BH+SH   BODY LENGTH                i32
    72+BH+SH   BODY                       bytes (still compressed when COMPRESSED_FLAG)
               TOPIC LENGTH               i8 (V1) / i16 (V2)
               TOPIC                      UTF-8
               PROPERTIES LENGTH          i16
               PROPERTIES                 UTF-8 ``k\\x01v\\x02`` pairs

    length = 72 + BH + SH + bodyLen + TL + topicLen + 2 + propLen   (V1/IPv4: 91 + b + t + p)

End of a segment: when ``length + 8 > bytes left``, the writer puts an 8-byte blank
``i32 bytesLeft ‖ i32 BLANK_MAGIC`` and the record goes to the next segment.

Invariants the decoder keeps: it never reads outside the buffer, never raises on arbitrary
input, and reports a record as a MESSAGE only when magic, TOTALSIZE == calMsgLength and (when
asked) the body CRC and the optional ``__CRC32#`` whole-record CRC all agree.

:func:`decode_record` and :func:`view_to_message` are bound to their compiled versions when the C
accelerator is in use (:mod:`rocketq.speedups`); those decode clean MESSAGE records themselves and
hand every other case to the pure functions here, which stay available as
``pure_decode_record`` and ``pure_view_to_message``.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Final

from rocketq import speedups as _speedups
from rocketq.message import MessageExt, create_offset_msg_id, decode_properties, unpack_socket_addr

MESSAGE_MAGIC_CODE: Final = -626843481  # DA A3 20 A7
MESSAGE_MAGIC_CODE_V2: Final = -626843477  # DA A3 20 AB
BLANK_MAGIC_CODE: Final = -875286124  # CB D4 31 94
END_FILE_MIN_BLANK_LENGTH: Final = 8

# SYSFLAG bits (MessageSysFlag).
COMPRESSED_FLAG: Final = 0x1
MULTI_TAGS_FLAG: Final = 0x2
TRANSACTION_NOT_TYPE: Final = 0x0
TRANSACTION_PREPARED_TYPE: Final = 0x4
TRANSACTION_COMMIT_TYPE: Final = 0x8
TRANSACTION_ROLLBACK_TYPE: Final = 0xC
TRANSACTION_MASK: Final = 0xC
BORNHOST_V6_FLAG: Final = 0x10
STOREHOSTADDRESS_V6_FLAG: Final = 0x20
NEED_UNWRAP_FLAG: Final = 0x40
INNER_BATCH_FLAG: Final = 0x80
COMPRESSION_TYPE_MASK: Final = 0x700

MAX_TOPIC_LENGTH_V1: Final = 127
CRC32_PROPERTY_NAME: Final = "__CRC32#"
CRC32_RESERVED_LEN: Final = len(CRC32_PROPERTY_NAME) + 1 + 10 + 1  # 20

_I32 = struct.Struct(">i")
_BLANK = struct.Struct(">ii")


def transaction_type(sys_flag: int) -> int:
    return sys_flag & TRANSACTION_MASK


def host_width(sys_flag: int, store: bool) -> int:
    flag = STOREHOSTADDRESS_V6_FLAG if store else BORNHOST_V6_FLAG
    return 20 if sys_flag & flag else 8


def calc_msg_length(
    sys_flag: int, body_len: int, topic_len: int, properties_len: int, *, v2: bool = False
) -> int:
    """RocketMQ's ``calMsgLength``."""
    bh = host_width(sys_flag, store=False)
    sh = host_width(sys_flag, store=True)
    return 72 + bh + sh + max(body_len, 0) + (2 if v2 else 1) + topic_len + 2 + max(properties_len, 0)


def body_crc(body: bytes) -> int:
    """``UtilAll.crc32``: CRC-32 masked to 31 bits."""
    return zlib.crc32(body) & 0x7FFFFFFF


def encode_blank(max_blank: int) -> bytes:
    """The 8-byte end-of-segment marker that declares ``max_blank`` bytes unused."""
    return _BLANK.pack(max_blank, BLANK_MAGIC_CODE)


def _crc_property_value(crc: int) -> bytes:
    digits = bytearray(b"0000000000")
    for i in range(10):
        digits[i] = 0x30 + crc % 10
        crc //= 10
    return b"__CRC32#\x01" + bytes(digits) + b"\x02"


def properties_with_crc_slot(properties: bytes) -> bytes:
    """Properties with the 20-byte ``__CRC32#`` slot reserved at the end (digits zero).

    As in RocketMQ, a ``\\x02`` is added first only to a non-empty string that lacks one.
    """
    if properties and not properties.endswith(b"\x02"):
        properties += b"\x02"
    return properties + b"__CRC32#\x01" + b"0" * 10 + b"\x02"


_struct_cache: dict[tuple[int, int, bool, int, int, int], struct.Struct] = {}
_STRUCT_CACHE_MAX = 512


def record_layout(
    born_host_len: int, store_host_len: int, v2: bool, body_len: int, topic_len: int, props_len: int
) -> struct.Struct:
    """The compiled layout of a whole record of these field widths (the one place it is spelled).

    ``pack_into(buf, pos, TOTALSIZE, MAGICCODE, BODYCRC, QUEUEID, FLAG, QUEUEOFFSET,
    PHYSICALOFFSET, SYSFLAG, BORNTIMESTAMP, BORNHOST, STORETIMESTAMP, STOREHOST, RECONSUMETIMES,
    PREPARED TRANSACTION OFFSET, bodyLen, body, topicLen, topic, propsLen, properties)`` writes
    the record; the writers pack it straight into a segment. The first 512 distinct shapes are
    kept; others are compiled on each call.
    """
    key = (born_host_len, store_host_len, v2, body_len, topic_len, props_len)
    st = _struct_cache.get(key)
    if st is None:
        st = struct.Struct(
            f">iiiiiqqiq{born_host_len}sq{store_host_len}siqi{body_len}s{'h' if v2 else 'b'}"
            f"{topic_len}sh{props_len}s"
        )
        if len(_struct_cache) < _STRUCT_CACHE_MAX:
            _struct_cache[key] = st
    return st


def write_record(
    buf: bytearray | memoryview | object,
    pos: int,
    *,
    topic: bytes,
    body: bytes,
    properties: bytes,
    queue_id: int,
    flag: int,
    queue_offset: int,
    physical_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    store_timestamp: int,
    store_host: bytes,
    reconsume_times: int,
    prepared_transaction_offset: int,
    crc: int,
    v2: bool,
) -> int:
    """Write one record into a writable buffer at ``pos``; returns its length.

    The caller has checked the limits and that the record fits. ``born_host``/``store_host``
    are packed (:func:`rocketq.message.pack_socket_addr`) and must agree with ``sys_flag``.
    """
    bl = len(body)
    tl = len(topic)
    pl = len(properties)
    bh = len(born_host)
    sh = len(store_host)
    length = 72 + bh + sh + bl + (2 if v2 else 1) + tl + 2 + pl
    magic = MESSAGE_MAGIC_CODE_V2 if v2 else MESSAGE_MAGIC_CODE
    record_layout(bh, sh, v2, bl, tl, pl).pack_into(
        buf,  # type: ignore[arg-type]
        pos,
        length, magic, crc, queue_id, flag, queue_offset, physical_offset, sys_flag,
        born_timestamp, born_host, store_timestamp, store_host, reconsume_times,
        prepared_transaction_offset, bl, body, tl, topic, pl, properties,
    )  # fmt: skip
    return length


def encode_record(
    *,
    topic: str,
    body: bytes,
    properties: bytes = b"",
    queue_id: int = 0,
    flag: int = 0,
    queue_offset: int = 0,
    physical_offset: int = 0,
    sys_flag: int = 0,
    born_timestamp: int = 0,
    born_host: bytes = b"\x7f\x00\x00\x01\x00\x00\x00\x00",
    store_timestamp: int = 0,
    store_host: bytes = b"\x7f\x00\x00\x01\x00\x00*\x9f",
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    v2: bool | None = None,
    append_prop_crc: bool = False,
) -> bytes:
    """Encode a complete record (the general path: any version, host family, optional prop CRC).

    ``v2=None`` chooses as RocketMQ does: V2 only when the topic is longer than 127 chars.
    The host v6 bits of ``sys_flag`` are set from the packed host widths.
    """
    if v2 is None:
        v2 = len(topic) > MAX_TOPIC_LENGTH_V1
    topic_b = topic.encode("utf-8")
    sys_flag &= ~(BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)
    if len(born_host) == 20:
        sys_flag |= BORNHOST_V6_FLAG
    if len(store_host) == 20:
        sys_flag |= STOREHOSTADDRESS_V6_FLAG
    if append_prop_crc:
        properties = properties_with_crc_slot(properties)
    length = calc_msg_length(sys_flag, len(body), len(topic_b), len(properties), v2=v2)
    out = bytearray(length)
    write_record(
        out, 0, topic=topic_b, body=body, properties=properties, queue_id=queue_id, flag=flag,
        queue_offset=queue_offset, physical_offset=physical_offset, sys_flag=sys_flag,
        born_timestamp=born_timestamp, born_host=born_host, store_timestamp=store_timestamp,
        store_host=store_host, reconsume_times=reconsume_times,
        prepared_transaction_offset=prepared_transaction_offset, crc=body_crc(body), v2=v2,
    )  # fmt: skip
    if append_prop_crc:
        stamp_prop_crc(out, 0, length)
    return bytes(out)


def stamp_prop_crc(buf: bytearray | memoryview | object, pos: int, length: int) -> None:
    """Fill the reserved ``__CRC32#`` digits of the record at ``pos`` (RocketMQ 5.2).

    The CRC covers ``[0, length - 20)`` with TOTALSIZE taken as ``length``, whatever the buffer
    holds there yet, so the writer can still store TOTALSIZE last.
    """
    view = memoryview(buf)  # type: ignore[arg-type]
    try:
        crc = zlib.crc32(view[pos + 4 : pos + length - CRC32_RESERVED_LEN], zlib.crc32(_I32.pack(length)))
        view[pos + length - CRC32_RESERVED_LEN : pos + length] = _crc_property_value(crc & 0x7FFFFFFF)
    finally:
        view.release()


class RecordKind(IntEnum):
    MESSAGE = 1
    BLANK = 2  # end-of-segment marker: continue in the next segment
    END = 3  # never-written space (zero size): the end of valid data
    CORRUPT = 4


@dataclass(slots=True)
class RecordView:
    """One decoded record. For BLANK/END/CORRUPT only ``kind``, ``size`` and ``reason`` mean anything."""

    kind: RecordKind
    size: int
    reason: str = ""
    body_crc: int = 0
    queue_id: int = 0
    flag: int = 0
    queue_offset: int = 0
    physical_offset: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: bytes = b""
    store_timestamp: int = 0
    store_host: bytes = b""
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    body_offset: int = 0  # relative to the record start
    body_length: int = 0
    body: bytes | None = None
    topic: str = ""
    properties: str = ""
    v2: bool = False


def _corrupt(reason: str, size: int = -1) -> RecordView:
    return RecordView(RecordKind.CORRUPT, size, reason)


def decode_record(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    *,
    check_crc: bool = True,
    read_body: bool = True,
    verify_prop_crc: bool = False,
) -> RecordView:
    """Decode the record at ``pos`` (RocketMQ ``checkMessageAndReturnSize``). Never raises."""
    end = len(buf)
    if pos + 8 > end:
        if pos + 4 <= end and _I32.unpack_from(buf, pos)[0] == 0:
            return RecordView(RecordKind.END, 0)
        if pos >= end or not any(buf[pos:end]):
            return RecordView(RecordKind.END, 0)
        return _corrupt(f"{end - pos} bytes left, too short for a record header")
    total, magic = _BLANK.unpack_from(buf, pos)
    if magic == BLANK_MAGIC_CODE:
        return RecordView(RecordKind.BLANK, 0)
    if total == 0 and magic == 0:
        return RecordView(RecordKind.END, 0)
    if magic == MESSAGE_MAGIC_CODE:
        v2 = False
    elif magic == MESSAGE_MAGIC_CODE_V2:
        v2 = True
    else:
        return _corrupt(f"illegal magic code 0x{magic & 0xFFFFFFFF:08X}")
    if total < 91 or pos + total > end:
        return _corrupt(f"record size {total} does not fit the {end - pos} bytes available", total)
    rec_end = pos + total
    crc, queue_id, flag, queue_offset, physical_offset, sys_flag, born_ts = struct.unpack_from(
        ">iiiqqiq", buf, pos + 8
    )
    bh = host_width(sys_flag, store=False)
    sh = host_width(sys_flag, store=True)
    p = pos + 48
    if p + bh + 8 + sh + 16 > rec_end:
        return _corrupt("record header runs past its TOTALSIZE", total)
    born_host = bytes(buf[p : p + bh])
    p += bh
    (store_ts,) = struct.unpack_from(">q", buf, p)
    p += 8
    store_host = bytes(buf[p : p + sh])
    p += sh
    reconsume, prepared, body_len = struct.unpack_from(">iqi", buf, p)
    p += 16
    if body_len < 0 or p + body_len > rec_end:
        return _corrupt(f"body length {body_len} runs past the record", total)
    body_offset = p - pos
    body: bytes | None = None
    if read_body or check_crc:
        body = bytes(buf[p : p + body_len])
        if check_crc and body_crc(body) != crc:
            return _corrupt(f"body CRC mismatch: stored {crc}, computed {body_crc(body)}", total)
    p += body_len
    tl_width = 2 if v2 else 1
    if p + tl_width > rec_end:
        return _corrupt("topic length runs past the record", total)
    topic_len = struct.unpack_from(">h" if v2 else ">b", buf, p)[0]
    p += tl_width
    if topic_len <= 0 or p + topic_len + 2 > rec_end:
        return _corrupt(f"topic length {topic_len} is invalid", total)
    topic = bytes(buf[p : p + topic_len]).decode("utf-8", "replace")
    p += topic_len
    (props_len,) = struct.unpack_from(">h", buf, p)
    p += 2
    if props_len < 0 or p + props_len > rec_end:
        return _corrupt(f"properties length {props_len} is invalid", total)
    expected = 72 + bh + sh + body_len + tl_width + topic_len + 2 + props_len
    if expected != total:
        return _corrupt(f"TOTALSIZE {total} != calculated length {expected}", total)
    props_raw = bytes(buf[p : p + props_len])
    if verify_prop_crc:
        problem = _check_prop_crc(buf, pos, total, props_raw)
        if problem:
            return _corrupt(problem, total)
    return RecordView(
        RecordKind.MESSAGE, total, "", crc, queue_id, flag, queue_offset, physical_offset, sys_flag,
        born_ts, born_host, store_ts, store_host, reconsume, prepared, body_offset, body_len,
        body if read_body else None, topic, props_raw.decode("utf-8", "replace"), v2,
    )  # fmt: skip


def _check_prop_crc(buf: bytes | bytearray | memoryview, pos: int, total: int, props: bytes) -> str:
    tail = props[-CRC32_RESERVED_LEN:]
    if len(props) < CRC32_RESERVED_LEN or not tail.startswith(b"__CRC32#\x01") or not tail.endswith(b"\x02"):
        return "record has no __CRC32# property"
    digits = tail[9:19]
    if not digits.isdigit():
        return "__CRC32# property is not 10 digits"
    stored = sum((d - 0x30) * 10**i for i, d in enumerate(digits))
    actual = zlib.crc32(buf[pos : pos + total - CRC32_RESERVED_LEN]) & 0x7FFFFFFF
    if stored != actual:
        return f"whole-record CRC mismatch: stored {stored}, computed {actual}"
    return ""


def view_to_message(view: RecordView) -> MessageExt:
    """A decoded MESSAGE record as the message clients see (pull responses, lookups)."""
    store_host = unpack_socket_addr(view.store_host) if view.store_host else ""
    return MessageExt(
        topic=view.topic,
        body=view.body or b"",
        properties=decode_properties(view.properties),
        flag=view.flag,
        queue_id=view.queue_id,
        store_size=view.size,
        queue_offset=view.queue_offset,
        sys_flag=view.sys_flag,
        born_timestamp=view.born_timestamp,
        born_host=unpack_socket_addr(view.born_host) if view.born_host else "",
        store_timestamp=view.store_timestamp,
        store_host=store_host,
        commit_log_offset=view.physical_offset,
        body_crc=view.body_crc,
        reconsume_times=view.reconsume_times,
        prepared_transaction_offset=view.prepared_transaction_offset,
        msg_id=create_offset_msg_id(view.store_host, view.physical_offset) if view.store_host else "",
    )


# -- compiled accelerator ------------------------------------------------------------------------
#: The pure-Python record decoding, whichever implementation the public names are bound to
#: (:mod:`rocketq.speedups`; the tests run both).
pure_decode_record = decode_record
pure_view_to_message = view_to_message
#: name -> pure function, of every function of this module the compiled module replaces
PURE_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "decode_record": pure_decode_record,
    "view_to_message": pure_view_to_message,
}

if _speedups.COMPILED is not None:
    _speedups.COMPILED.setup_record(
        RecordView, RecordKind.MESSAGE, MessageExt, pure_decode_record, pure_view_to_message,
        unpack_socket_addr, zlib.crc32,
    )  # fmt: skip
    decode_record = _speedups.COMPILED.decode_record
    view_to_message = _speedups.COMPILED.view_to_message
