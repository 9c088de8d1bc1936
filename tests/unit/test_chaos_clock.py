"""The clock-jump shim moves a real process's wall clock, and only its wall clock."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from rocketq.testing.chaos.clock import ShimUnavailable, build_shim, env_for, set_offset

PROBE = r"""
import sys, time, pathlib
go = pathlib.Path(sys.argv[1])
wall, mono = time.time(), time.monotonic()
print(f"{wall} {mono}", flush=True)
sys.stdin.readline()          # the test jumps the clock, then says go
time.sleep(0.05)              # sleeps still work (libfaketime's do not, with monotonic untouched)
print(f"{time.time() - wall} {time.monotonic() - mono}", flush=True)
"""


def test_a_jump_moves_wall_time_not_monotonic_time(tmp_path: pathlib.Path) -> None:
    try:
        shim = build_shim(tmp_path / "cache")
    except ShimUnavailable as exc:
        pytest.skip(str(exc))
    offset = tmp_path / "offset"
    set_offset(offset, 0.0)
    env = {**os.environ, **env_for(shim, offset)}
    with subprocess.Popen(
        [sys.executable, "-c", PROBE, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdout.readline()
        set_offset(offset, -3600.0)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        wall_moved, mono_moved = (float(x) for x in proc.stdout.readline().split())
        assert proc.wait(timeout=30) == 0
    assert -3601.0 < wall_moved < -3599.0
    assert 0.04 < mono_moved < 30.0


def test_the_shim_is_built_once_per_source(tmp_path: pathlib.Path) -> None:
    try:
        first = build_shim(tmp_path)
    except ShimUnavailable as exc:
        pytest.skip(str(exc))
    mtime = first.stat().st_mtime_ns
    assert build_shim(tmp_path) == first
    assert first.stat().st_mtime_ns == mtime
