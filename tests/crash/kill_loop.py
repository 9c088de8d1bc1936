"""The SIGKILL crash loop shared by the crash tests.

A child script (``sigkill_*.py``) works on a store and reports every acknowledged operation as one
line on stdout, each written with a single ``os.write`` (so a line is complete or absent, never
torn). One round::

    start child ── wait for the first line ── the store is locked? ── wait for ``want`` lines
        ── run ``extra_s`` more (a random kill moment) ── SIGKILL ── drain stdout to EOF
        ── the complete lines (exit status -SIGKILL and no torn line, or the test fails)

:func:`crash_rounds` repeats that on one store directory, which therefore accumulates data: after
each kill it opens the store (``start`` runs recovery), lets the test ``settle`` it (e.g. wait
for dispatch), asserts the abort file was found (the child did not shut down cleanly) and hands
the store and the round's lines to the test's ``check``; an optional ``after`` runs once the store
is shut down again. A failed check names the seed and the round.

Every wait is bounded; the only sleep is the random kill moment itself.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import IO, TypeVar

import pytest

from _support.procs import child_env
from rocketq.config import StoreConfig
from rocketq.errors import StoreLocked
from rocketq.store import MessageStore

A = TypeVar("A")

LINE_DEADLINE_S = 30.0
EXIT_DEADLINE_S = 10.0


def load_script(path: pathlib.Path) -> ModuleType:
    """Import a child script as a module, for its message generator and store config."""
    spec = importlib.util.spec_from_file_location(f"rocketq_crash_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class LineReader:
    """Collects complete lines from a child's stdout on a thread, until EOF; a last line without
    its newline is kept apart in :attr:`partial`."""

    def __init__(self, stream: IO[bytes], name: str = "child-lines") -> None:
        self._stream = stream
        self.lines: list[bytes] = []
        self.partial = b""
        self.eof = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for raw in self._stream:
                with self._cond:
                    if raw.endswith(b"\n"):
                        self.lines.append(raw)
                    else:
                        self.partial = raw
                    self._cond.notify_all()
        finally:
            with self._cond:
                self.eof = True
                self._cond.notify_all()

    def count(self, counted: Callable[[bytes], bool] | None = None) -> int:
        return len(self.lines) if counted is None else sum(1 for line in self.lines if counted(line))

    def wait_for(self, count: int, timeout_s: float, counted: Callable[[bytes], bool] | None = None) -> bool:
        """True once ``count`` lines (those ``counted`` accepts) arrived; False at EOF or when
        ``timeout_s`` passed first."""
        with self._cond:
            self._cond.wait_for(lambda: self.count(counted) >= count or self.eof, timeout_s)
            return self.count(counted) >= count

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), "child stdout did not reach EOF after the kill"


def run_and_kill(
    script: pathlib.Path,
    root: pathlib.Path,
    seed: int,
    round_no: int,
    kill_at: tuple[int, float],
    stderr_path: pathlib.Path,
    held: StoreConfig | None = None,
) -> list[bytes]:
    """Run ``script ROOT SEED ROUND_NO`` until it printed ``want`` lines, let it go on for
    ``extra_s`` (``kill_at = (want, extra_s)``), SIGKILL it; its complete lines, each starting
    with its number (0, 1, 2, ...). Once the first line arrived, the store ``held`` (the
    child's) must refuse a second opener."""
    want, extra_s = kill_at
    cmd = [sys.executable, str(script), str(root), str(seed), str(round_no)]
    with (
        open(stderr_path, "wb") as err,
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, env=child_env()) as proc,
    ):
        assert proc.stdout is not None
        reader = LineReader(proc.stdout)
        killed = False
        try:
            if not reader.wait_for(1, LINE_DEADLINE_S):
                pytest.fail(
                    f"round {round_no}: no line from {script.name}; stderr:\n{stderr_path.read_text()}"
                )
            if held is not None:
                assert_locked(held)
            if not reader.wait_for(want, LINE_DEADLINE_S):
                pytest.fail(
                    f"round {round_no}: {len(reader.lines)} of {want} lines before the deadline or exit; "
                    f"stderr:\n{stderr_path.read_text()}"
                )
            time.sleep(extra_s)  # a random kill moment, not a synchronisation
            os.kill(proc.pid, signal.SIGKILL)
            killed = True
            proc.wait(EXIT_DEADLINE_S)
        finally:
            if not killed:
                proc.kill()
                proc.wait(EXIT_DEADLINE_S)
            # Drain the pipe to EOF before the Popen context closes it under the reader.
            reader.join(EXIT_DEADLINE_S)
    assert proc.returncode == -signal.SIGKILL, (
        f"round {round_no}: {script.name} exited with {proc.returncode} before the kill; "
        f"stderr:\n{stderr_path.read_text()}"
    )
    assert reader.partial == b"", f"round {round_no}: torn line {reader.partial!r}"
    seqs = [line.split(b" ", 1)[0] for line in reader.lines]
    assert seqs == [str(n).encode() for n in range(len(seqs))], f"round {round_no}: lines out of order"
    return reader.lines


def random_kill_point(
    rng: random.Random, *, few: int, many: int, most: int, few_share: float
) -> tuple[int, float]:
    """When to kill: how many lines to wait for (1..``few`` with probability ``few_share``,
    ``few``+1..``many`` up to 0.8, ``many``+1..``most`` otherwise), then 0-20 ms more."""
    pick = rng.random()
    if pick < few_share:
        lines = rng.randint(1, few)
    elif pick < 0.8:
        lines = rng.randint(few + 1, many)
    else:
        lines = rng.randint(many + 1, most)
    return lines, rng.uniform(0.0, 0.02)


def assert_locked(config: StoreConfig) -> None:
    """The child holds the store directory: a second opener, even in another process, is refused."""
    with pytest.raises(StoreLocked):
        MessageStore(config).start()


@dataclass
class LoopStats:
    """Where the time of :func:`crash_rounds` went, and how many acknowledgements it saw."""

    acks: int = 0
    writers_s: float = 0.0
    restarts_s: float = 0.0
    checks_s: float = 0.0


def crash_rounds(
    *,
    rounds: int,
    seed: int,
    config: StoreConfig,
    run_round: Callable[[int], list[A]],
    check: Callable[[MessageStore, int, list[A]], None],
    settle: Callable[[MessageStore], None] | None = None,
    after: Callable[[int], None] | None = None,
) -> LoopStats:
    """``rounds`` times: ``run_round(round_no)`` (start a child and kill it; its acknowledgements),
    open the store, ``settle(store)``, assert it saw the abort file, ``check(store, round_no,
    acks)``, shut it down, ``after(round_no)``."""
    stats = LoopStats()
    for round_no in range(rounds):
        t0 = time.monotonic()
        acks = run_round(round_no)
        stats.acks += len(acks)
        t1 = time.monotonic()
        store = MessageStore(config)
        store.start()
        try:
            if settle is not None:
                settle(store)
            t2 = time.monotonic()
            assert not store.last_exit_ok, "the writer was killed, the abort file must be there"
            try:
                check(store, round_no, acks)
            except AssertionError as exc:
                raise AssertionError(f"seed {seed}, round {round_no}: {exc}") from exc
        finally:
            store.shutdown()
        stats.writers_s += t1 - t0
        stats.restarts_s += t2 - t1
        stats.checks_s += time.monotonic() - t2
        if after is not None:
            after(round_no)
    return stats


__all__ = ["LineReader", "LoopStats", "crash_rounds", "load_script", "random_kill_point", "run_and_kill"]
