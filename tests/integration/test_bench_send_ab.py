"""bench/blocking_send_ab.py with ``--async``, as it is run: one ``rocketq serve`` child and a
client process per tree, an AsyncProducer's sends answered, and with ``--canned`` the stand-in
transport answering them. Functional checks only; the figures are in docs/benchmarks.md."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "blocking_send_ab.py"
SRC = str(ROOT / "src")


@pytest.mark.slow  # a benchmark run against a rocketq serve process
@pytest.mark.parametrize("canned", [False, True], ids=["server", "canned"])
def test_async_sends_from_two_trees(canned: bool) -> None:
    args = ["--tree", f"a={SRC}", "--tree", f"b={SRC}", "--async", "--runs", "2", "--rounds", "1"]
    args += ["--count", "300"] + (["--canned"] if canned else [])
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    for name in ("a", "b"):
        if canned:
            line = re.search(
                rf"^{name}: 2 rounds, the client's Python per send ([0-9.]+) µs", done.stdout, re.M
            )
        else:
            line = re.search(
                rf"^{name}: 2 rounds, ([0-9,]+) round trips/s .* client CPU ([0-9.]+)", done.stdout, re.M
            )
        assert line is not None, done.stdout
