"""The ``python`` code blocks of a Markdown document, for tests that run them as written.

A block is skipped only when the line before its opening fence (blank lines aside) is an HTML
comment ``<!-- not-run: reason -->`` (a fragment that cannot run on its own); the reason is
required. The one rewrite the tests apply is :func:`with_endpoint`: the documents address the
name server as ``127.0.0.1:9876`` (what ``rocketq serve`` listens on by default) and the tests'
servers listen on free ports instead.
"""

from __future__ import annotations

import pathlib
import re
from dataclasses import dataclass

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"
#: The name server address the documents use, and the only text the tests rewrite.
DOC_NAMESRV = "127.0.0.1:9876"

_FENCE = re.compile(r"^```(\S*)\s*$")
_NOT_RUN = re.compile(r"^<!--\s*not-run:\s*(\S.*?)\s*-->$")


@dataclass(frozen=True)
class Block:
    doc: str
    line: int  # of the opening fence, 1-based
    code: str
    not_run: str | None  # the reason, when marked

    @property
    def name(self) -> str:
        return f"{self.doc}:{self.line}"


def python_blocks(doc: str) -> list[Block]:
    """Every ```` ```python ```` block of ``docs/<doc>``, in document order."""
    lines = (DOCS / doc).read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        start = i
        i += 1
        body: list[str] = []
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise ValueError(f"{doc}:{start + 1}: code block is not closed")
        i += 1
        if m.group(1) != "python":
            continue
        prev = start - 1
        while prev >= 0 and not lines[prev].strip():
            prev -= 1
        marker = _NOT_RUN.match(lines[prev].strip()) if prev >= 0 else None
        if prev >= 0 and marker is None and "not-run" in lines[prev]:
            raise ValueError(f"{doc}:{prev + 1}: malformed marker, write <!-- not-run: reason -->")
        blocks.append(Block(doc, start + 1, "\n".join(body) + "\n", marker.group(1) if marker else None))
    return blocks


def with_endpoint(code: str, namesrv_addr: str) -> str:
    """``code`` with the documents' name server address replaced by ``namesrv_addr``."""
    return code.replace(DOC_NAMESRV, namesrv_addr)
