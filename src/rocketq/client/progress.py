"""A one-line progress display on stderr for long command-line operations.

``Progress(total, label)`` redraws ``label: done/total (pct%) rate/s`` in place (carriage return,
no newline) at most every ``min_interval_s`` and ends the line at :meth:`Progress.close`. It draws
only when its stream is a terminal and ``enabled`` is true (the CLI passes ``not --json``), so
piped or machine-read output never contains it. ``total`` may be None (unknown): then only the
count and rate are shown.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(
        self,
        total: int | None,
        label: str,
        *,
        enabled: bool = True,
        stream: TextIO | None = None,
        min_interval_s: float = 0.2,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.total = total
        self.label = label
        self.min_interval_s = min_interval_s
        self.active = enabled and self.stream.isatty()
        self.done = 0
        self._start = time.monotonic()
        self._last_draw = 0.0
        self._drawn = False

    def update(self, done: int, total: int | None = None) -> None:
        """Record that ``done`` units are finished (of ``total``, if it became known)."""
        self.done = done
        if total is not None:
            self.total = total
        now = time.monotonic()
        if self.active and (now - self._last_draw >= self.min_interval_s or done == self.total):
            self._last_draw = now
            self._draw(now)

    def advance(self, n: int = 1) -> None:
        self.update(self.done + n)

    def line(self, now: float | None = None) -> str:
        elapsed = max((now if now is not None else time.monotonic()) - self._start, 1e-9)
        rate = self.done / elapsed
        if self.total:
            pct = 100.0 * self.done / self.total
            return f"{self.label}: {self.done}/{self.total} ({pct:.0f}%) {rate:,.0f}/s"
        return f"{self.label}: {self.done} {rate:,.0f}/s"

    def _draw(self, now: float) -> None:
        self.stream.write("\r" + self.line(now) + "\x1b[K")
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self.active and self._drawn:
            self._draw(time.monotonic())
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


__all__ = ["Progress"]
