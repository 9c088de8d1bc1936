"""RemotingCommand and its two header encodings (pure: values in, bytes out, and back).

A command is one request or response. Its header is either JSON (serialize type 0, what every
client speaks by default and the only thing ali-ons can read) or RocketMQ's binary layout
(serialize type 1, sent by Java clients started with ``-Drocketmq.serialize.type=ROCKETMQ``).

JSON header, as fastjson writes a Java ``RemotingCommand`` (keys in alphabetical order, nulls
omitted, ``language`` by name)::

    {"code":105,"extFields":{"topic":"T"},"flag":0,"language":"JAVA","opaque":12,
     "remark":"…","serializeTypeCurrentRPC":"JSON","version":475}

``extFields`` is left out when empty, ``remark`` when None. On decode unknown keys are ignored,
``language`` may be a name or a number, and missing ``flag``/``remark``/``extFields`` mean
0/None/{}. ali-ons sends extFields values as raw JSON numbers and booleans; every value is
coerced to the string Java would have produced (``15000`` → ``"15000"``, ``false`` →
``"false"``, null → the key is absent), so ``ext_fields`` is always ``dict[str, str]``.

ROCKETMQ header (big-endian)::

    i16 code | i8 language | i16 version | i32 opaque | i32 flag
    i32 remarkLen | remark UTF-8 | i32 extLen | extLen bytes of (i16 keyLen, key, i32 valLen, val)

A zero remark length decodes as None, a zero key or value length drops the entry (Java decodes
both as null). Codes outside int16 cannot be written in this layout.

Invariants: decoding raises only :class:`~rocketq.errors.RemoteProtocolError` (the peer's bytes),
encoding :class:`~rocketq.errors.LocalProtocolError` (a value the layout cannot hold); a decoded command
re-encodes to an equivalent header; responses always use the JSON type (ali-ons requirement).
"""

from __future__ import annotations

import itertools
import json
import math
import struct
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from rocketq import speedups as _speedups
from rocketq.errors import LocalProtocolError, RemoteProtocolError, ResponseCode
from rocketq.protocol import fastjson
from rocketq.remoting.codes import (
    CURRENT_VERSION,
    DEFAULT_LANGUAGE,
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    REQUEST_CODE_NOT_SUPPORTED_REMARK,
    LanguageCode,
    SerializeType,
)

_JSON_OUT: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_dumps: Final = _JSON_OUT.encode
_quote: Final = json.encoder.encode_basestring  # str -> JSON string literal (C), as fastjson writes UTF-8
# (text, index) -> (value, end): the decoder's C scanner, without json.loads' whitespace handling.
_scan_json: Final[Callable[[str, int], tuple[Any, int]]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]

_JSON_TEMPLATE: Final = (
    '{"code":%d%s,"flag":%d,"language":"%s","opaque":%d%s,"serializeTypeCurrentRPC":"JSON","version":%d}'
)
_LANGUAGE_NAME: Final[dict[int, str]] = {int(lang): lang.name for lang in LanguageCode}
_LANGUAGE_BY_NAME: Final[dict[str, LanguageCode]] = {lang.name: lang for lang in LanguageCode}
_LANGUAGE_BY_NUMBER: Final[dict[int, LanguageCode]] = {int(lang): lang for lang in LanguageCode}

# Headers that are not strict JSON are retried with the fastjson-tolerant parser, up to this size.
_TOLERANT_PARSE_MAX_BYTES: Final = 64 * 1024

_BIN_FIXED: Final = struct.Struct(">hbhiii")  # code, language, version, opaque, flag, remarkLen
_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")

_opaque_lock = threading.Lock()
_opaque_counter = itertools.count(1)


def next_opaque() -> int:
    """A fresh request id in 1..2^31-1 (thread-safe; starts at 1 like ali-ons, wraps)."""
    with _opaque_lock:
        n = next(_opaque_counter)
    return (n - 1) % 0x7FFFFFFF + 1


def ext_value_to_str(value: object) -> str | None:
    """The string Java/fastjson would hold for an extFields value; None means "absent"."""
    if type(value) is str:
        return value
    if value is None:
        return None
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        if value.is_integer() and abs(value) < 1e21:
            return str(int(value))
        return repr(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (dict, list)):
        return _dumps(value)
    return str(value)


def coerce_ext_fields(fields: Mapping[str, object] | None) -> dict[str, str]:
    """A ``dict[str, str]`` copy of ``fields`` with values stringified as Java does."""
    out: dict[str, str] = {}
    if fields:
        for key, value in fields.items():
            text = ext_value_to_str(value)
            if text is not None:
                out[str(key)] = text
    return out


@dataclass(slots=True)
class RemotingCommand:
    """One remoting request or response. ``ext_fields`` is the "custom header", all strings."""

    code: int
    language: LanguageCode = DEFAULT_LANGUAGE
    version: int = CURRENT_VERSION
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    serialize_type: SerializeType = SerializeType.JSON

    @property
    def is_response(self) -> bool:
        """Flag bit0 (RPC_TYPE) is set."""
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        """Flag bit1 (RPC_ONEWAY) is set: the sender wants no response."""
        return bool(self.flag & FLAG_ONEWAY)

    def mark_oneway(self) -> None:
        """Set flag bit1, as Java's ``invokeOneway`` does before sending."""
        self.flag |= FLAG_ONEWAY

    @classmethod
    def create_request(
        cls,
        code: int,
        ext_fields: Mapping[str, object] | None = None,
        body: bytes = b"",
        *,
        oneway: bool = False,
    ) -> RemotingCommand:
        """A request with a fresh opaque. ``ext_fields`` values are stringified (ints decimal,
        booleans ``"true"``/``"false"``, None dropped)."""
        return cls(
            code,
            opaque=next_opaque(),
            flag=FLAG_ONEWAY if oneway else 0,
            ext_fields=coerce_ext_fields(ext_fields),
            body=body,
        )

    @classmethod
    def create_response(
        cls,
        request: RemotingCommand,
        code: int,
        remark: str | None = None,
        ext_fields: Mapping[str, object] | None = None,
        body: bytes = b"",
    ) -> RemotingCommand:
        """The response to ``request``: same opaque, flag bit0 set, JSON header."""
        return cls(
            code,
            opaque=request.opaque,
            flag=FLAG_RESPONSE,
            remark=remark,
            ext_fields=coerce_ext_fields(ext_fields),
            body=body,
        )

    def __repr__(self) -> str:
        kind = "response" if self.flag & FLAG_RESPONSE else "request"
        return (
            f"RemotingCommand({kind} code={self.code} opaque={self.opaque} flag={self.flag} "
            f"language={_LANGUAGE_NAME.get(self.language, self.language)} version={self.version} "
            f"remark={self.remark!r} ext_fields={self.ext_fields!r} body={len(self.body)} B "
            f"serialize_type={SerializeType(self.serialize_type).name})"
        )


create_request = RemotingCommand.create_request
create_response = RemotingCommand.create_response


def not_supported_response(request: RemotingCommand, remark: str | None = None) -> RemotingCommand | None:
    """The answer to a request whose code nothing here handles: REQUEST_CODE_NOT_SUPPORTED with
    ``remark`` (RocketMQ's ``" request type <code> not supported"`` when None), or None for a
    oneway request, which gets no answer."""
    if request.is_oneway:
        return None
    if remark is None:
        remark = REQUEST_CODE_NOT_SUPPORTED_REMARK.format(code=request.code)
    return create_response(request, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark)


# ---------------------------------------------------------------------------------------------
# JSON header


def encode_json_header(cmd: RemotingCommand) -> bytes:
    """The header fastjson would write for ``cmd``: alphabetical keys, nulls and empty
    extFields omitted, ``serializeTypeCurrentRPC`` = ``"JSON"``."""
    ext = cmd.ext_fields
    remark = cmd.remark
    text = _JSON_TEMPLATE % (
        cmd.code,
        ',"extFields":' + _encode_ext(ext) if ext else "",
        cmd.flag,
        _LANGUAGE_NAME.get(cmd.language, "OTHER"),
        cmd.opaque,
        ',"remark":' + _quote(remark) if remark is not None else "",
        cmd.version,
    )
    return text.encode()


def encode_json_success_header(opaque: int, ext_json: str) -> bytes:
    """:func:`encode_json_header` of ``RemotingCommand(0, opaque=opaque, flag=FLAG_RESPONSE,
    ext_fields=...)`` whose extFields are already written as ``ext_json`` (a non-empty JSON
    object): the common answer without building the command."""
    return (
        _JSON_TEMPLATE
        % (0, ',"extFields":' + ext_json, FLAG_RESPONSE, DEFAULT_LANGUAGE.name, opaque, "", CURRENT_VERSION)
    ).encode()


def _int_field(name: str, value: Any) -> int:
    if type(value) is int:  # the common case, without a call
        return value
    number = fastjson.int_value(value)
    if number is None:
        raise RemoteProtocolError(f"JSON header field {name!r} is not an integer: {value!r:.80}")
    return number


def _encode_ext(ext: dict[str, str]) -> str:
    try:
        return "{" + ",".join([_quote(k) + ":" + _quote(v) for k, v in ext.items()]) + "}"
    except TypeError:  # a caller stored a non-string value; write what Java would have
        return _dumps(coerce_ext_fields(ext))


def _parse_json(header: bytes) -> Any:
    # Fast path: the C scanner straight on the text (what json.loads does, minus encoding
    # detection and the whitespace regexes); anything unusual takes the full path below.
    try:
        text = header.decode()
        value, end = _scan_json(text, 0)
        if end == len(text):
            return value
    except (StopIteration, ValueError, RecursionError):
        pass
    try:
        return json.loads(header.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        first_error = exc
    if len(header) <= _TOLERANT_PARSE_MAX_BYTES:
        try:
            return fastjson.loads(header.decode("utf-8"))
        except (ValueError, RecursionError):
            pass
    raise RemoteProtocolError(f"undecodable JSON header ({len(header)} B): {first_error}") from None


def decode_json_header(header: bytes, body: bytes = b"") -> RemotingCommand:
    """Decode a JSON header (tolerant, see the module docstring); raises RemoteProtocolError."""
    obj = _parse_json(header)
    if type(obj) is not dict:
        raise RemoteProtocolError(f"JSON header is a {type(obj).__name__}, not an object")
    get = obj.get

    code = get("code", 0)
    if type(code) is not int:
        code = _int_field("code", code)
    version = get("version", 0)
    if type(version) is not int:
        version = 0 if version is None else _int_field("version", version)
    opaque = get("opaque", 0)
    if type(opaque) is not int:
        opaque = 0 if opaque is None else _int_field("opaque", opaque)
    flag = get("flag", 0)
    if type(flag) is not int:
        flag = 0 if flag is None else _int_field("flag", flag)

    raw_language = get("language")
    if raw_language is None:
        language = LanguageCode.JAVA
    elif type(raw_language) is str:
        language = _LANGUAGE_BY_NAME.get(raw_language, LanguageCode.OTHER)
    elif type(raw_language) is int:
        language = _LANGUAGE_BY_NUMBER.get(raw_language, LanguageCode.OTHER)
    else:
        language = LanguageCode.OTHER

    remark = get("remark")
    if remark is not None and type(remark) is not str:
        remark = ext_value_to_str(remark)

    ext = get("extFields")
    if ext is None:
        ext = {}
    elif type(ext) is not dict:
        raise RemoteProtocolError(f"JSON header field 'extFields' is a {type(ext).__name__}, not an object")
    else:
        for value in ext.values():
            if type(value) is not str:
                ext = coerce_ext_fields(ext)
                break

    return RemotingCommand(code, language, version, opaque, flag, remark, ext, body, SerializeType.JSON)


#: The pure-Python decode_json_header, whichever implementation the name is bound to. When the C
#: accelerator is in use (:mod:`rocketq.speedups`) the name is its compiled twin, which decodes
#: the header fastjson writes (no whitespace, ASCII, plain integers, strings, extFields of
#: strings) itself and hands any other to this one: the same commands and errors.
pure_decode_json_header = decode_json_header
if _speedups.COMPILED is not None:
    _speedups.COMPILED.setup_json_header(
        RemotingCommand,
        pure_decode_json_header,
        _LANGUAGE_BY_NAME,
        LanguageCode.JAVA,
        LanguageCode.OTHER,
        SerializeType.JSON,
    )
    decode_json_header = _speedups.COMPILED.decode_json_header

#: The pure-Python encode_json_header. When the C accelerator is in use the name is its compiled
#: twin, which writes the header of a command whose fields have their usual types (ints, a remark
#: None or a str, extFields of str to str) itself and hands any other to this one: the same bytes
#: and errors.
pure_encode_json_header = encode_json_header
if _speedups.COMPILED is not None:
    _speedups.COMPILED.setup_json_encode(
        RemotingCommand, pure_encode_json_header, _LANGUAGE_NAME, SerializeType.JSON
    )
    encode_json_header = _speedups.COMPILED.encode_json_header


# ---------------------------------------------------------------------------------------------
# ROCKETMQ binary header


def encode_rocketmq_header(cmd: RemotingCommand) -> bytes:
    """The ROCKETMQ binary header for ``cmd``; raises LocalProtocolError for values it cannot hold."""
    remark = cmd.remark.encode() if cmd.remark else b""
    parts: list[bytes] = []
    for key, value in cmd.ext_fields.items():
        kb = key.encode()
        vb = value.encode()
        if len(kb) > 0x7FFF:
            raise LocalProtocolError(
                f"extFields key of {len(kb)} B exceeds the ROCKETMQ header's max 32767 B"
            )
        parts.append(_I16.pack(len(kb)))
        parts.append(kb)
        parts.append(_I32.pack(len(vb)))
        parts.append(vb)
    ext = b"".join(parts)
    try:
        fixed = _BIN_FIXED.pack(cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag, len(remark))
        ext_len = _I32.pack(len(ext))
    except struct.error as exc:
        raise LocalProtocolError(
            f"command (code {cmd.code}, language {cmd.language}, version {cmd.version}, "
            f"opaque {cmd.opaque}, flag {cmd.flag}) does not fit the ROCKETMQ header: {exc}"
        ) from None
    return b"".join((fixed, remark, ext_len, ext))


def decode_rocketmq_header(header: bytes, body: bytes = b"") -> RemotingCommand:
    """Decode a ROCKETMQ binary header; raises RemoteProtocolError on any inconsistency."""
    size = len(header)
    if size < _BIN_FIXED.size + 4:
        raise RemoteProtocolError(
            f"ROCKETMQ header of {size} B is shorter than the minimum {_BIN_FIXED.size + 4} B"
        )
    code, lang, version, opaque, flag, remark_len = _BIN_FIXED.unpack_from(header, 0)
    pos = _BIN_FIXED.size
    if remark_len < 0 or remark_len > size - pos - 4:
        raise RemoteProtocolError(
            f"ROCKETMQ header: remark length {remark_len} B exceeds header length {size} B"
        )
    remark = header[pos : pos + remark_len].decode("utf-8", "replace") if remark_len else None
    pos += remark_len
    (ext_len,) = _I32.unpack_from(header, pos)
    pos += 4
    if ext_len < 0 or ext_len > size - pos:
        raise RemoteProtocolError(
            f"ROCKETMQ header: extFields length {ext_len} B exceeds header length {size} B"
        )
    ext: dict[str, str] = {}
    end = pos + ext_len
    while pos < end:
        if end - pos < 2:
            raise RemoteProtocolError("ROCKETMQ header: truncated extFields key length")
        (key_len,) = _I16.unpack_from(header, pos)
        pos += 2
        if key_len < 0 or key_len > end - pos - 4:
            raise RemoteProtocolError(
                f"ROCKETMQ header: extFields key length {key_len} B exceeds the map section"
            )
        key = header[pos : pos + key_len]
        pos += key_len
        (val_len,) = _I32.unpack_from(header, pos)
        pos += 4
        if val_len < 0 or val_len > end - pos:
            raise RemoteProtocolError(
                f"ROCKETMQ header: extFields value length {val_len} B exceeds the map section"
            )
        value = header[pos : pos + val_len]
        pos += val_len
        if key_len and val_len:
            ext[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    language = _LANGUAGE_BY_NUMBER.get(lang, LanguageCode.OTHER)
    return RemotingCommand(code, language, version, opaque, flag, remark, ext, body, SerializeType.ROCKETMQ)


def decode_header(serialize_type: int, header: bytes, body: bytes = b"") -> RemotingCommand:
    """Decode a header of either serialize type; raises RemoteProtocolError for unknown types."""
    if serialize_type == SerializeType.JSON:
        return decode_json_header(header, body)
    if serialize_type == SerializeType.ROCKETMQ:
        return decode_rocketmq_header(header, body)
    raise RemoteProtocolError(f"unknown serialize type {serialize_type} (expected 0 JSON or 1 ROCKETMQ)")


def encode_header(cmd: RemotingCommand) -> bytes:
    """The header bytes of ``cmd`` in its ``serialize_type``."""
    if cmd.serialize_type == SerializeType.ROCKETMQ:
        return encode_rocketmq_header(cmd)
    return encode_json_header(cmd)
