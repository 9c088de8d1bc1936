"""Progress of a store job: tasks done out of planned, bytes scanned, elapsed time.

Every task adds ``(1, its bytes)`` to a Spark accumulator when it finishes; Spark merges the
updates into the driver as tasks complete. A daemon thread in the driver reads the accumulator
every ``interval_s`` and hands a :class:`Progress` to a callback (the command line prints one
line to stderr, rewritten in place). The accumulator counts finished tasks only, so a retried
task is counted once it succeeds; the line can never run past the plan.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from pyspark.accumulators import AccumulatorParam


class PairParam(AccumulatorParam[tuple[int, int]]):
    """Accumulates ``(tasks, bytes)`` pairs."""

    def zero(self, value: tuple[int, int]) -> tuple[int, int]:
        return (0, 0)

    def addInPlace(self, a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
        return (a[0] + b[0], a[1] + b[1])


@dataclass(frozen=True, slots=True)
class Progress:
    job: str
    tasks_done: int
    tasks_total: int
    bytes_done: int
    bytes_total: int
    elapsed_s: float
    #: The job has ended: this is the last report.
    final: bool = False

    def line(self) -> str:
        mib = 1 << 20
        rate = self.bytes_done / mib / self.elapsed_s if self.elapsed_s > 0 else 0.0
        return (
            f"[{self.job}] tasks {self.tasks_done}/{self.tasks_total}, "
            f"{self.bytes_done / mib:.1f}/{self.bytes_total / mib:.1f} MiB, "
            f"{self.elapsed_s:.1f} s, {rate:.1f} MiB/s"
        )


ProgressCallback = Callable[[Progress], None]


def stderr_printer(stream: IO[str] | None = None) -> ProgressCallback:
    """A callback that rewrites one progress line on ``stream`` (stderr by default)."""
    out = stream if stream is not None else sys.stderr

    def show(p: Progress) -> None:
        out.write("\r" + p.line())
        if p.final:
            out.write("\n")
        out.flush()

    return show


class JobProgress:
    """Context manager around one job: creates the accumulator and runs the polling thread."""

    def __init__(
        self,
        spark_context: Any,
        job: str,
        tasks_total: int,
        bytes_total: int,
        callback: ProgressCallback | None,
        *,
        interval_s: float = 0.5,
    ) -> None:
        self.accumulator = spark_context.accumulator((0, 0), PairParam())
        self.job = job
        self.tasks_total = tasks_total
        self.bytes_total = bytes_total
        self.callback = callback
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._began = time.monotonic()
        self.elapsed_s = 0.0

    def snapshot(self, *, final: bool = False) -> Progress:
        tasks, nbytes = self.accumulator.value
        return Progress(
            self.job, tasks, self.tasks_total, nbytes, self.bytes_total, time.monotonic() - self._began, final
        )

    def _run(self) -> None:
        last: tuple[int, int] | None = None
        while not self._stop.wait(self.interval_s):
            p = self.snapshot()
            if self.callback is not None and (p.tasks_done, p.bytes_done) != last:
                last = (p.tasks_done, p.bytes_done)
                self.callback(p)

    def __enter__(self) -> JobProgress:
        self._began = time.monotonic()
        if self.callback is not None:
            self._thread = threading.Thread(target=self._run, name=f"progress-{self.job}", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self.elapsed_s = time.monotonic() - self._began
        if self.callback is not None and exc[0] is None:
            self.callback(self.snapshot(final=True))


__all__ = ["JobProgress", "PairParam", "Progress", "ProgressCallback", "stderr_printer"]
