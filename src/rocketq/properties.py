"""Java ``.properties`` text: RocketMQ's ``broker.conf`` and ``namesrv.conf``, and the bodies of
config-update requests.

Rules of ``java.util.Properties.load``: ``#``/``!`` comment lines, key and value separated by
``=``, ``:`` or blanks, a trailing backslash continues the line, ``\\t \\n \\r \\f \\uXXXX`` escapes.
"""

from __future__ import annotations

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 == len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u" and i + 6 <= len(text):
            try:
                out.append(chr(int(text[i + 2 : i + 6], 16)))
                i += 6
                continue
            except ValueError:
                pass
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def _logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    pending: str | None = None
    for raw in text.splitlines():
        line = raw.lstrip(" \t\f")
        if pending is None and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        continued = trailing % 2 == 1
        if continued:
            line = line[:-1]
        pending = line if pending is None else pending + line
        if not continued:
            lines.append(pending)
            pending = None
    if pending is not None:
        lines.append(pending)
    return lines


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java ``.properties`` text (what RocketMQ's ``broker.conf`` is)."""
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        i = 0
        n = len(line)
        while i < n:
            ch = line[i]
            if ch == "\\":
                i += 2
                continue
            if ch in "=: \t\f":
                break
            i += 1
        key = line[:i]
        if i < n and line[i] in "=:":
            rest = line[i + 1 :].lstrip(" \t\f")
        else:
            rest = line[i:].lstrip(" \t\f")
            if rest[:1] in ("=", ":"):
                rest = rest[1:].lstrip(" \t\f")
        props[_unescape(key)] = _unescape(rest)
    return props
