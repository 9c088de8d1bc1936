"""RocketMQ's JSON metadata files (``config/*.json``), as fastjson 1.x writes them.

fastjson differs from JSON in one way that matters: map keys that are not strings are written
without quotes (``{0:5280,1:5312}``). :func:`loads` accepts that (it quotes bare integer keys
outside strings before parsing), :func:`dumps` writes it (int keys unquoted, tab indentation, no
space after the colon), so a RocketMQ broker can read what rocketq writes and vice versa.

:func:`persist` replaces a file atomically (tmp → fsync → keep the old one as ``.bak`` → rename →
fsync the directory); :func:`load_file` falls back to ``.bak`` when the main file is missing,
empty or does not parse, as RocketMQ's ``ConfigManager`` does.
"""

from __future__ import annotations

import json
import logging
from typing import Any

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
    """Parse fastjson output (bare integer keys allowed). Keys come back as strings."""
    return json.loads(_quote_bare_keys(text))


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
