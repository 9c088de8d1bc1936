"""fastjson's dialect of JSON, as RocketMQ's Java side writes and reads it: one module for every
writer and reader of it in rocketq (broker config files, name-server bodies, admin bodies).

fastjson differs from JSON where it matters to us in three ways:

* map keys that are not strings are written without quotes (``{0:5280,1:5312}``);
* map keys that are beans (``Map<MessageQueue, OffsetWrapper>`` in ``ConsumeStats``,
  ``TopicStatsTable``, ``ResetOffsetBody``) are written as JSON objects
  (``{{"brokerName":"b","queueId":0,"topic":"t"}:…}``), which is not JSON at all;
* ints, booleans and enums arrive in several shapes (numbers as strings, enum ordinals).

Writers (bytes are what RocketMQ writes; each call site picks its options):

====================  ===================================================================
:func:`dumps`          pretty: tab indentation, no space after ``:``, int keys bare,
                       insertion order (``config/*.json`` files)
:func:`dumps_compact`  compact; ``sort_keys`` (bean properties, alphabetical),
                       ``quote_int_keys`` (fastjson's "standard" mode), ``browser_compatible``
                       (non-ASCII as ``\\uXXXX``, ints beyond ±(2^53 − 1) as strings); map keys
                       may be objects with ``to_json()`` (written as objects, fields sorted)
:func:`dumps_sorted`   ``dumps_compact`` with ``sort_keys``, int keys quoted unless told
                       (name-server bodies)
:data:`OBJECT_KEYS`    ``dumps_compact`` with defaults plus its reader, for object-keyed bodies
====================  ===================================================================

Readers: :func:`loads` (bare integer keys come back as strings), :func:`loads_body` (the same,
raising :class:`~rocketq.errors.BodyFormatError` naming the body), :func:`loads_object_keys`
(object keys come back as :class:`ObjectKey`, bare integer keys as ints). Values inside a parsed
document are read with the tolerant ``as_*`` helpers (a default instead of an error: config files
and request bodies) or the strict ``field_*`` helpers (BodyFormatError naming the field: name-server
bodies).

:func:`persist` replaces a file atomically (tmp → fsync → keep the old one as ``.bak`` → rename →
fsync the directory); :func:`load_file` falls back to ``.bak`` when the main file is missing,
empty or does not parse, as RocketMQ's ``ConfigManager`` does.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from rocketq.errors import BodyFormatError
from rocketq.fileio import durable_replace

log = logging.getLogger(__name__)


def _quote_bare_keys(text: str) -> str:
    out: list[str] = []
    i = 0
    n = len(text)
    in_string = False
    expect_key = False  # after '{' or ',' inside an object
    stack: list[str] = []
    while i < n:
        ch = text[i]
        if in_string:
            out.append(ch)
            if ch == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if ch == '"':
                in_string = False
            i += 1
            continue
        if ch == '"':
            in_string = True
            expect_key = False
        elif ch in "{[":
            stack.append(ch)
            expect_key = ch == "{"
        elif ch in "}]":
            if stack:
                stack.pop()
            expect_key = False
        elif ch == ",":
            expect_key = bool(stack) and stack[-1] == "{"
        elif expect_key and (ch == "-" or ch.isdigit()):
            j = i + 1
            while j < n and text[j].isdigit():
                j += 1
            k = j
            while k < n and text[k] in " \t\r\n":
                k += 1
            if k < n and text[k] == ":":
                out.append(f'"{text[i:j]}"')
                i = j
                expect_key = False
                continue
            expect_key = False
        elif not ch.isspace():
            expect_key = False
        out.append(ch)
        i += 1
    return "".join(out)


def loads(text: str) -> Any:
    """Parse fastjson output (bare integer keys allowed). Keys come back as strings. Raises
    ValueError (also for nesting deeper than the interpreter's recursion limit)."""
    try:
        return json.loads(_quote_bare_keys(text))
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def _dump(obj: Any, indent: int, out: list[str]) -> None:
    pad = "\t" * (indent + 1)
    if isinstance(obj, dict):
        if not obj:
            out.append("{}")
            return
        out.append("{\n")
        items = list(obj.items())
        for n, (key, value) in enumerate(items):
            out.append(pad)
            out.append(
                str(key) if isinstance(key, int) and not isinstance(key, bool) else json.dumps(str(key))
            )
            out.append(":")
            _dump(value, indent + 1, out)
            out.append(",\n" if n < len(items) - 1 else "\n")
        out.append("\t" * indent + "}")
    elif isinstance(obj, (list, tuple)):
        if not obj:
            out.append("[]")
            return
        out.append("[\n")
        for n, value in enumerate(obj):
            out.append(pad)
            _dump(value, indent + 1, out)
            out.append(",\n" if n < len(obj) - 1 else "\n")
        out.append("\t" * indent + "]")
    else:
        out.append(json.dumps(obj, ensure_ascii=False))


def dumps(obj: Any) -> str:
    """fastjson's pretty format: tabs, no space after ':', int map keys unquoted."""
    out: list[str] = []
    _dump(obj, 0, out)
    return "".join(out)


def persist(path: str, text: str) -> None:
    """Replace ``path`` atomically, keeping the previous version as ``path.bak``."""
    durable_replace(path, text.encode("utf-8"), keep_backup=True)


def load_file(path: str) -> Any | None:
    """The parsed content of ``path``, else of ``path.bak``, else None."""
    for candidate in (path, path + ".bak"):
        try:
            with open(candidate, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            continue
        if not text.strip():
            log.warning("%s is empty", candidate)
            continue
        try:
            return loads(text)
        except ValueError as exc:
            log.warning("%s does not parse (%s); trying the backup", candidate, exc)
    return None


# -- the compact form ------------------------------------------------------------------------------
_JS_SAFE_INT: Final = (1 << 53) - 1


class ObjectKey(tuple[tuple[str, Any], ...]):
    """A map key that was a JSON object: its ``(name, value)`` items, sorted by name."""

    __slots__ = ()

    def as_dict(self) -> dict[str, Any]:
        return dict(self)


def dumps_compact(
    value: Any, *, sort_keys: bool = False, quote_int_keys: bool = False, browser_compatible: bool = False
) -> str:
    """Compact text, no spaces. ``sort_keys`` orders map keys (and set items) as fastjson orders
    bean properties; ``quote_int_keys`` quotes int map keys (written bare otherwise);
    ``browser_compatible`` escapes non-ASCII as ``\\uXXXX`` and writes integers beyond
    ±(2^53 − 1) as strings (fastjson's ``BrowserCompatible``). Map keys and values may be objects
    with a ``to_json()`` method (a key is written as an object with its fields sorted, as fastjson
    writes a bean key); any other type raises TypeError."""
    out: list[str] = []
    _write(value, out, sort_keys, quote_int_keys, browser_compatible)
    return "".join(out)


def dumps_sorted(value: Any, *, quote_int_keys: bool = True, browser_compatible: bool = False) -> str:
    """The name server's bodies: :func:`dumps_compact` with keys sorted and int keys quoted unless
    ``quote_int_keys=False`` (fastjson's default for non-string map keys)."""
    return dumps_compact(
        value, sort_keys=True, quote_int_keys=quote_int_keys, browser_compatible=browser_compatible
    )


def _write_key(key: object, out: list[str], sort_keys: bool, quote_int_keys: bool, browser: bool) -> None:
    if isinstance(key, str):
        out.append(json.dumps(key, ensure_ascii=browser))
    elif isinstance(key, bool):
        out.append(json.dumps(str(key).lower()))
    elif isinstance(key, int):
        out.append(json.dumps(str(key)) if quote_int_keys else str(key))
    elif isinstance(key, ObjectKey):
        _write(dict(key), out, sort_keys, quote_int_keys, browser)
    elif callable(to_json := getattr(key, "to_json", None)):
        _write(dict(sorted(to_json().items())), out, sort_keys, quote_int_keys, browser)
    else:
        raise TypeError(f"cannot write a map key of type {type(key).__name__}")


def _write(value: Any, out: list[str], sort_keys: bool, quote_int_keys: bool, browser: bool) -> None:
    if isinstance(value, ObjectKey):
        value = value.as_dict()
    if isinstance(value, Mapping):
        if not value:
            out.append("{}")
            return
        out.append("{")
        first = True
        for key in sorted(value) if sort_keys else value:
            if not first:
                out.append(",")
            first = False
            _write_key(key, out, sort_keys, quote_int_keys, browser)
            out.append(":")
            _write(value[key], out, sort_keys, quote_int_keys, browser)
        out.append("}")
    elif isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value) if sort_keys and isinstance(value, (set, frozenset)) else value
        out.append("[")
        for n, item in enumerate(items):
            if n:
                out.append(",")
            _write(item, out, sort_keys, quote_int_keys, browser)
        out.append("]")
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        out.append(f'"{value}"' if browser and abs(value) > _JS_SAFE_INT else str(int(value)))
    elif isinstance(value, float):
        out.append(repr(value) if math.isfinite(value) else "null")
    elif isinstance(value, str):
        out.append(json.dumps(value, ensure_ascii=browser))
    elif callable(getattr(value, "to_json", None)):
        _write(value.to_json(), out, sort_keys, quote_int_keys, browser)
    else:
        raise TypeError(f"cannot write a value of type {type(value).__name__}")


_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?")
_WS = " \t\r\n"
_LITERALS = {"true": True, "false": False, "null": None}
_DECODER = json.JSONDecoder()


def _hashable(value: Any) -> Any:
    if isinstance(value, dict):
        return ObjectKey(sorted((str(k), _hashable(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    return value


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def error(self, what: str) -> ValueError:
        return ValueError(f"{what} at char {self.pos}")

    def skip(self) -> None:
        text = self.text
        while self.pos < len(text) and text[self.pos] in _WS:
            self.pos += 1

    def peek(self) -> str:
        self.skip()
        if self.pos >= len(self.text):
            raise self.error("unexpected end of text")
        return self.text[self.pos]

    def expect(self, ch: str) -> None:
        if self.peek() != ch:
            raise self.error(f"expected {ch!r}")
        self.pos += 1

    def value(self) -> Any:
        ch = self.peek()
        if ch == "{":
            return self.obj()
        if ch == "[":
            return self.array()
        if ch == '"':
            text, self.pos = _DECODER.raw_decode(self.text, self.pos)
            return text
        for word, literal in _LITERALS.items():
            if self.text.startswith(word, self.pos):
                self.pos += len(word)
                return literal
        match = _NUMBER.match(self.text, self.pos)
        if match is None:
            raise self.error("unexpected character")
        self.pos = match.end()
        return float(match.group()) if match.group(1) or match.group(2) else int(match.group())

    def obj(self) -> dict[Any, Any]:
        self.expect("{")
        out: dict[Any, Any] = {}
        if self.peek() == "}":
            self.pos += 1
            return out
        while True:
            key = self.value()
            if isinstance(key, (dict, list)):
                key = _hashable(key)
            self.expect(":")
            out[key] = self.value()
            if self.peek() == ",":
                self.pos += 1
                continue
            self.expect("}")
            return out

    def array(self) -> list[Any]:
        self.expect("[")
        out: list[Any] = []
        if self.peek() == "]":
            self.pos += 1
            return out
        while True:
            out.append(self.value())
            if self.peek() == ",":
                self.pos += 1
                continue
            self.expect("]")
            return out


def loads_object_keys(text: str | bytes) -> Any:
    """Parse JSON that may use object or bare-number map keys: an object key comes back as an
    :class:`ObjectKey` (hashable, items sorted), a bare number key as an int."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    parser = _Parser(text)
    try:
        result = parser.value()
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    parser.skip()
    if parser.pos != len(text):
        raise parser.error("trailing characters")
    return result


@dataclass(frozen=True, slots=True)
class Dialect:
    """A set of :func:`dumps_compact` options, with the reader that accepts what they write."""

    sort_keys: bool = False
    quote_int_keys: bool = False
    browser_compatible: bool = False

    def dumps(self, value: Any) -> str:
        return dumps_compact(
            value,
            sort_keys=self.sort_keys,
            quote_int_keys=self.quote_int_keys,
            browser_compatible=self.browser_compatible,
        )

    def loads(self, text: str | bytes) -> Any:
        return loads_object_keys(text)


#: Object-keyed bodies (``ConsumeStats``, ``TopicStatsTable``, ``ResetOffsetBody``, offset tables):
#: insertion order, bean keys as objects, int keys bare.
OBJECT_KEYS: Final = Dialect()


# -- reading values: tolerant ----------------------------------------------------------------------
def int_value(value: object) -> int | None:
    """An int from a JSON number (integral) or numeric string (spaces around it allowed); None
    for anything else, booleans included."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def as_int(value: object, default: int) -> int:
    """An int from a JSON number or numeric string; ``default`` otherwise (booleans too)."""
    number = int_value(value)
    return default if number is None else number


def as_bool(value: object, default: bool) -> bool:
    """A bool from a JSON boolean or ``"true"``/``"false"``; ``default`` otherwise."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("true", "false"):
            return lowered == "true"
    return default


def as_str(value: object, default: str) -> str:
    """A str from a JSON string (numbers are stringified); ``default`` for null and others."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return default


def as_enum_name(value: object, names: tuple[str, ...], default: str) -> str:
    """An enum name from a JSON name or an ordinal (fastjson accepts both)."""
    if isinstance(value, str) and value in names:
        return value
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(names):
        return names[value]
    return default


# -- reading values: strict (bodies) ---------------------------------------------------------------
def loads_body(data: bytes | str, what: str) -> Any:
    """Parse a body (standard JSON or fastjson with bare int keys); BodyFormatError if it is not."""
    try:
        text = data.decode("utf-8") if isinstance(data, (bytes, bytearray, memoryview)) else data
        return loads(text)
    except (ValueError, RecursionError) as exc:
        raise BodyFormatError(f"{what} body ({len(data)} B) is not JSON: {exc}") from None


def require_object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BodyFormatError(f"{what} is a {type(value).__name__}, not a JSON object")
    return value


def field_int(obj: Mapping[str, Any], key: str, default: int, what: str) -> int:
    value = obj.get(key)
    if value is None:
        return default
    if isinstance(value, int):  # a bool too: true → 1
        return int(value) if isinstance(value, bool) else value
    number = int_value(value)
    if number is None:
        raise BodyFormatError(f"{what}: {key!r} is not an integer: {value!r:.80}")
    return number


def field_bool(obj: Mapping[str, Any], key: str, default: bool) -> bool:
    value = obj.get(key)
    if value is None:
        return default
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return bool(value)


def field_str(obj: Mapping[str, Any], key: str, default: str | None = None) -> str | None:
    value = obj.get(key)
    if value is None:
        return default
    return value if isinstance(value, str) else str(value)


def field_str_list(obj: Mapping[str, Any], key: str, what: str) -> tuple[str, ...]:
    value = obj.get(key)
    if value is None:
        return ()
    if not isinstance(value, list):
        raise BodyFormatError(f"{what}: {key!r} is a {type(value).__name__}, not a list")
    return tuple(str(item) for item in value if item is not None)


def field_object(obj: Mapping[str, Any], key: str, what: str) -> dict[str, Any]:
    value = obj.get(key)
    if value is None:
        return {}
    return require_object(value, f"{what}.{key}")


__all__ = [
    "OBJECT_KEYS",
    "Dialect",
    "ObjectKey",
    "as_bool",
    "as_enum_name",
    "as_int",
    "as_str",
    "dumps",
    "dumps_compact",
    "dumps_sorted",
    "field_bool",
    "field_int",
    "field_object",
    "field_str",
    "field_str_list",
    "int_value",
    "load_file",
    "loads",
    "loads_body",
    "loads_object_keys",
    "persist",
    "require_object",
]
