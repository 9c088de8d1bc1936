"""fastjson's object-keyed maps: writing and reading ``{{"brokerName":"b","queueId":0,"topic":"t"}:…}``.

fastjson writes a map whose keys are beans (``Map<MessageQueue, OffsetWrapper>`` in
``ConsumeStats``, ``TopicStatsTable``, ``ResetOffsetBody``) with each key as a JSON object, which
is not valid JSON; Java admin tools and clients read exactly that form.

:func:`dumps` writes compact JSON in which a map key may be any object with a ``to_json()``
method (such as :class:`~rocketq.broker.rebalance_lock.MessageQueue`): it is written as an
object with its fields in alphabetical order, as fastjson writes beans. :func:`loads` reads that
form (and standard JSON, and bare integer keys); an object key comes back as an
:class:`ObjectKey`, a hashable, sorted tuple of its items. :func:`message_queue_table` turns a
parsed offset table into ``{MessageQueue: value}``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rocketq.broker.rebalance_lock import MessageQueue

_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?")
_WS = " \t\r\n"
_LITERALS = {"true": True, "false": False, "null": None}
_DECODER = json.JSONDecoder()


class ObjectKey(tuple[tuple[str, Any], ...]):
    """A map key that was a JSON object: its ``(name, value)`` items, sorted by name."""

    __slots__ = ()

    def as_dict(self) -> dict[str, Any]:
        return dict(self)


# -- writing -----------------------------------------------------------------------------------
def _key(key: object) -> str:
    if isinstance(key, str):
        return json.dumps(key, ensure_ascii=False)
    if isinstance(key, bool):
        return json.dumps(str(key).lower())
    if isinstance(key, int):
        return str(key)
    if isinstance(key, ObjectKey):
        return dumps(dict(key))
    to_json = getattr(key, "to_json", None)
    if callable(to_json):
        fields = to_json()
        return dumps(dict(sorted(fields.items())))
    raise TypeError(f"cannot write a map key of type {type(key).__name__}")


def _write(obj: Any, out: list[str]) -> None:
    if isinstance(obj, ObjectKey):
        obj = obj.as_dict()
    if isinstance(obj, dict):
        out.append("{")
        for n, (key, value) in enumerate(obj.items()):
            if n:
                out.append(",")
            out.append(_key(key))
            out.append(":")
            _write(value, out)
        out.append("}")
    elif isinstance(obj, (list, tuple, set, frozenset)):
        out.append("[")
        for n, value in enumerate(obj):
            if n:
                out.append(",")
            _write(value, out)
        out.append("]")
    elif obj is None or isinstance(obj, (str, int, float)):
        out.append(json.dumps(obj, ensure_ascii=False))
    elif callable(getattr(obj, "to_json", None)):
        _write(obj.to_json(), out)
    else:
        raise TypeError(f"cannot write a value of type {type(obj).__name__}")


def dumps(obj: Any) -> str:
    """Compact fastjson-style text; map keys may be objects (written as JSON objects)."""
    out: list[str] = []
    _write(obj, out)
    return "".join(out)


# -- reading -----------------------------------------------------------------------------------
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


def loads(text: str | bytes) -> Any:
    """Parse JSON that may use object or bare-number map keys (see the module docstring)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    parser = _Parser(text)
    result = parser.value()
    parser.skip()
    if parser.pos != len(text):
        raise parser.error("trailing characters")
    return result


def message_queue_table(table: object) -> dict[MessageQueue, Any]:
    """A parsed ``offsetTable`` → ``{MessageQueue: value}`` (non-object keys are skipped)."""
    if not isinstance(table, dict):
        return {}
    return {
        MessageQueue.from_json(key.as_dict()): value
        for key, value in table.items()
        if isinstance(key, ObjectKey)
    }


__all__ = ["ObjectKey", "dumps", "loads", "message_queue_table"]
