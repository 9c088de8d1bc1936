"""The part of YAML that ``plain_acl.yml`` files use, parsed without a YAML library.

Supported: block mappings (``key: value``), block sequences (``- item``, also ``- key: value``
starting a mapping inside the sequence), plain, single- and double-quoted scalars, flow
sequences of scalars (``[a, b]``), ``#`` comments, blank lines, a leading ``---``. Not
supported (a clear :class:`~rocketq.errors.ConfigError` names the line): anchors, aliases, tags,
multi-line scalars, flow mappings, tabs for indentation.

Every scalar is returned as the text it holds (``12345678`` stays ``"12345678"``, as the Java
loader stores it into a String field); an empty value is None. Callers convert booleans.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from rocketq.errors import ConfigError

YamlValue = Any  # str | None | list[YamlValue] | dict[str, YamlValue]


class _Line:
    __slots__ = ("indent", "number", "text")

    def __init__(self, number: int, indent: int, text: str) -> None:
        self.number = number
        self.indent = indent
        self.text = text


def _strip_comment(line: str) -> str:
    quote: str | None = None
    for i, ch in enumerate(line):
        if quote is not None:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line.rstrip()


def _lines(text: str) -> list[_Line]:
    out: list[_Line] = []
    for number, raw in enumerate(text.splitlines(), 1):
        body = _strip_comment(raw)
        if not body.strip() or body.strip() in ("---", "..."):
            continue
        stripped = body.lstrip(" ")
        if stripped.startswith("\t"):
            raise ConfigError(f"line {number}: tabs cannot indent YAML")
        if stripped[0] in "&*!|>{":
            raise ConfigError(f"line {number}: unsupported YAML construct {stripped[:20]!r}")
        out.append(_Line(number, len(body) - len(stripped), stripped))
    return out


def _scalar(text: str, number: int) -> YamlValue:
    text = text.strip()
    if not text or text in {"~", "null"}:
        return None
    if text[0] in "'\"":
        quote = text[0]
        if len(text) < 2 or text[-1] != quote:
            raise ConfigError(f"line {number}: unterminated quoted string {text!r}")
        inner = text[1:-1]
        if quote == "'":
            return inner.replace("''", "'")
        if "\\" not in inner:
            return inner
        try:
            value: str = json.loads('"' + inner + '"')  # YAML's common escapes are JSON's
        except ValueError:
            raise ConfigError(f"line {number}: unsupported escape in {text!r}") from None
        return value
    if text[0] == "[":
        if text[-1] != "]":
            raise ConfigError(f"line {number}: unterminated flow sequence {text!r}")
        inner = text[1:-1].strip()
        return [_scalar(part, number) for part in inner.split(",")] if inner else []
    return text


def _split_key(text: str, number: int) -> tuple[str, str] | None:
    """``key: rest`` → (key, rest); None when the text is not a mapping entry."""
    if text[0] in "'\"":
        end = text.find(text[0], 1)
        if end < 0:
            raise ConfigError(f"line {number}: unterminated quoted key")
        if text[end + 1 : end + 2] == ":" and (end + 2 == len(text) or text[end + 2] == " "):
            return text[1:end], text[end + 2 :]
        return None
    for i, ch in enumerate(text):
        if ch == ":" and (i + 1 == len(text) or text[i + 1] == " "):
            return text[:i].strip(), text[i + 1 :]
    return None


class _Parser:
    def __init__(self, lines: list[_Line]) -> None:
        self.lines = lines
        self.pos = 0

    def block(self, indent: int) -> YamlValue:
        line = self.lines[self.pos]
        if line.text == "-" or line.text.startswith("- "):
            return self.sequence(line.indent)
        return self.mapping(line.indent)

    def lines_at(self, indent: int) -> Iterator[_Line]:
        """The lines of the block at ``indent``, from the current one (the caller moves ``pos``
        past each line it takes) to the first less indented one; a more indented one is an error."""
        while self.pos < len(self.lines):
            line = self.lines[self.pos]
            if line.indent < indent:
                return
            if line.indent > indent:
                raise ConfigError(f"line {line.number}: unexpected indentation")
            yield line

    def mapping(self, indent: int) -> dict[str, YamlValue]:
        out: dict[str, YamlValue] = {}
        for line in self.lines_at(indent):
            entry = _split_key(line.text, line.number)
            if entry is None:
                raise ConfigError(f"line {line.number}: expected 'key: value', got {line.text!r}")
            key, rest = entry
            if key in out:
                raise ConfigError(f"line {line.number}: duplicate key {key!r}")
            self.pos += 1
            out[key] = self.value_after(rest, indent, line.number)
        return out

    def sequence(self, indent: int) -> list[YamlValue]:
        out: list[YamlValue] = []
        for line in self.lines_at(indent):
            if not (line.text == "-" or line.text.startswith("- ")):
                break  # a mapping key at the sequence's indentation ends it
            rest = line.text[1:].lstrip(" ")
            if not rest:
                self.pos += 1
                out.append(self.nested(indent, line.number))
                continue
            item_indent = indent + (len(line.text) - len(rest))
            if _split_key(rest, line.number) is not None and rest[0] != "[":
                # "- key: value" starts a mapping whose keys line up with "key"
                self.lines[self.pos] = _Line(line.number, item_indent, rest)
                out.append(self.mapping(item_indent))
            else:
                self.pos += 1
                out.append(_scalar(rest, line.number))
        return out

    def nested(self, parent_indent: int, number: int) -> YamlValue:
        if self.pos < len(self.lines):
            nxt = self.lines[self.pos]
            if nxt.indent > parent_indent:
                return self.block(nxt.indent)
        return None

    def value_after(self, rest: str, indent: int, number: int) -> YamlValue:
        if rest.strip():
            return _scalar(rest, number)
        if self.pos < len(self.lines):
            nxt = self.lines[self.pos]
            # A sequence may sit at the same indentation as its key (a common YAML style).
            if nxt.indent > indent or (
                nxt.indent == indent and (nxt.text == "-" or nxt.text.startswith("- "))
            ):
                return self.block(nxt.indent)
        return None


def parse_yaml(text: str) -> YamlValue:
    """The document in ``text`` (see the module doc for the subset); raises ConfigError."""
    lines = _lines(text)
    if not lines:
        return None
    parser = _Parser(lines)
    try:
        value = parser.block(lines[0].indent)
    except RecursionError:
        raise ConfigError("YAML nested too deeply") from None
    if parser.pos < len(lines):
        line = lines[parser.pos]
        raise ConfigError(f"line {line.number}: unexpected {line.text!r}")
    return value


__all__ = ["parse_yaml"]
