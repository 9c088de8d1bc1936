"""SIGKILL of a process appending to the entry store, then recovery: every entry the writer
reported flushed is there, the torn tail (if any) is cut, every CRC checks out."""

from __future__ import annotations

import os
import pathlib
import random
import signal
import subprocess
import sys
import time

from _support.procs import child_env
from rocketq.ha.entry_store import EntryStore

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import sigkill_entry_writer as writer  # noqa: E402

ROUNDS = 3
DEADLINE_S = 60.0


def _run_and_kill(base: pathlib.Path, want: int, rng: random.Random) -> list[int]:
    """Start the writer, read until ``want`` flush reports, kill it at a random moment after;
    returns every index it reported flushed."""
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "sigkill_entry_writer.py"), str(base)],
        stdout=subprocess.PIPE,
        env=child_env(),
        start_new_session=True,
    )
    assert proc.stdout is not None
    flushed: list[int] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(flushed) < want:
            assert time.monotonic() < deadline, "writer reported too few flushes in time"
            line = proc.stdout.readline()
            assert line, f"writer exited early with {proc.poll()}"
            if line.startswith(b"flushed "):
                flushed.append(int(line.split()[1]))
        time.sleep(rng.uniform(0, 0.05))  # the random kill moment, not synchronisation
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        rest = proc.stdout.read()
        proc.stdout.close()
        proc.wait(10)
    assert proc.returncode == -signal.SIGKILL
    flushed += [int(x.split()[1]) for x in rest.splitlines() if x.startswith(b"flushed ")]
    return flushed


def test_sigkill_mid_append_keeps_flushed_entries(tmp_path: pathlib.Path) -> None:
    rng = random.Random(int(os.environ.get("ROCKETQ_SEED", "20261126")))
    top = -1
    for rnd in range(ROUNDS):
        flushed = _run_and_kill(tmp_path, want=40 + 20 * rnd, rng=rng)
        top = max([top, *flushed])
        with EntryStore.open(
            str(tmp_path),
            "n0",
            data_file_size=writer.DATA_FILE_SIZE,
            index_file_size=writer.INDEX_FILE_SIZE,
            verify_all=True,  # every entry's header, bodyCrc and chainCrc checked
        ) as s:
            assert s.ledger_end_index >= top, f"round {rnd}: flushed {top} lost, end {s.ledger_end_index}"
            assert s.ledger_begin_index == 0
            for e in s.read_range(0, s.ledger_end_index + 1):
                assert e.body == writer.body_of(e.index) and e.term == 1 + e.index // 50, e.index
            # the data ends right after the last entry: nothing torn stays behind it
            last = s.get(s.ledger_end_index)
            mf = s.data.last()
            assert mf is not None
            end = last.pos + last.size
            if mf.wrote_position == 0 and end <= mf.file_from_offset:
                # killed after the file of the last entry was padded with a BLANK and the next
                # one created: the data ends where that empty file begins
                assert s.write_pos == mf.file_from_offset > end > mf.file_from_offset - s.data_file_size
            else:
                assert s.write_pos in (end, mf.file_from_offset + s.data_file_size)
            rel = s.write_pos - mf.file_from_offset
            assert bytes(mf.mm[rel : rel + 64]) == bytes(len(mf.mm[rel : rel + 64]))
