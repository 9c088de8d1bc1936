"""Wall-clock jumps in one process: the clock-jump nemesis's shim and its control file.

Theory of operation::

    build_shim(dir) ── gcc -shared clock_shim.c ──► dir/rocketq-clock-shim-<hash>.so (once)
    env_for(shim, offset_file) ──► LD_PRELOAD=<so>  ROCKETQ_CLOCK_OFFSET_FILE=<file>
                                   (added to a broker's environment when it is started)
    set_offset(offset_file, +90.0) ─ durable_replace ─► the process's wall clock reads 90 s
                                                        ahead within 20 ms; 0 puts it back

The shim (``clock_shim.c``, shipped with this package) moves ``clock_gettime`` for the realtime
clocks, ``gettimeofday`` and ``time`` by the offset in the file; monotonic clocks and timed
waits are untouched, as with a real step of the system clock. Debian's libfaketime would do it,
but with its monotonic clock left alone (what a wall-clock jump needs) its ``clock_nanosleep``
fails with EINVAL, which breaks ``time.sleep`` in the process. Building needs a C compiler
(``cc`` or ``$CC``); :func:`build_shim` raises :class:`ShimUnavailable` with the reason when
there is none, and the nemesis is then skipped by the runner, saying why.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import subprocess
from importlib import resources

from rocketq.fileio import durable_replace

ENV_OFFSET_FILE = "ROCKETQ_CLOCK_OFFSET_FILE"


class ShimUnavailable(RuntimeError):
    """The clock shim cannot be built here (no C compiler, or it failed)."""


def _source() -> bytes:
    return resources.files("rocketq.testing.chaos").joinpath("clock_shim.c").read_bytes()


def build_shim(cache_dir: pathlib.Path) -> pathlib.Path:
    """Compile the shim into ``cache_dir`` (once per source version) and return the .so path."""
    source = _source()
    target = cache_dir / f"rocketq-clock-shim-{hashlib.sha256(source).hexdigest()[:12]}.so"
    if target.exists():
        return target
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        raise ShimUnavailable("no C compiler (cc, gcc or $CC) to build the clock shim")
    cache_dir.mkdir(parents=True, exist_ok=True)
    src = cache_dir / f"{target.stem}.c"
    src.write_bytes(source)
    tmp = target.with_suffix(".so.tmp")
    r = subprocess.run(
        [compiler, "-shared", "-fPIC", "-O2", "-o", str(tmp), str(src), "-ldl"],
        capture_output=True,
        text=True,
        check=False,
    )
    if r.returncode != 0:
        raise ShimUnavailable(f"building the clock shim failed: {r.stderr.strip()[:500]}")
    tmp.replace(target)
    return target


def env_for(shim: pathlib.Path, offset_file: pathlib.Path) -> dict[str, str]:
    """Environment entries that put a process started with them under ``offset_file``."""
    preload = os.environ.get("LD_PRELOAD")
    return {
        "LD_PRELOAD": f"{shim}:{preload}" if preload else str(shim),
        ENV_OFFSET_FILE: str(offset_file),
    }


def set_offset(offset_file: pathlib.Path, offset_s: float) -> None:
    """Jump the wall clock of the processes reading ``offset_file`` to real time + offset_s."""
    durable_replace(str(offset_file), f"{round(offset_s * 1e9)}\n".encode())
