"""A short coverage-guided run of tests/property/atheris_targets.py (skipped when atheris is not
installed): every decoder there raises only its documented errors for the inputs libFuzzer
finds within the time given."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

from _support.procs import child_env

pytest.importorskip("atheris")

TARGETS = pathlib.Path(__file__).with_name("atheris_targets.py")


@pytest.mark.slow  # a 5 s coverage-guided fuzzing process
def test_coverage_guided_run_finds_no_crash(tmp_path: pathlib.Path) -> None:
    args = ["-runs=100000", "-max_total_time=5", "-max_len=2048", f"-artifact_prefix={tmp_path}/", "-seed=1"]
    r = subprocess.run(
        [sys.executable, str(TARGETS), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env(),
        cwd=tmp_path,
        check=False,
    )
    crashes = sorted(p.name for p in tmp_path.glob("crash-*"))
    assert r.returncode == 0 and not crashes, f"{crashes}\n{r.stderr[-4000:]}"
