"""A small tmpfs for disk-full tests: mounted by the test, unmounted (lazily) afterwards.

``small_tmpfs(dir, "8m")`` yields the mount point, or skips the test with the reason when
mounting is not permitted (not root, no CAP_SYS_ADMIN in a container). ``fill(dir)`` writes a
filler file until the filesystem is full (ENOSPC) and returns its path; deleting it gives the
space back.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pathlib
import subprocess
from collections.abc import Iterator

import pytest

CHUNK = 64 * 1024


@contextlib.contextmanager
def small_tmpfs(path: pathlib.Path, size: str) -> Iterator[pathlib.Path]:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (disk-full tests)")
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        check=False,
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip() or r.returncode}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def fill(directory: pathlib.Path, name: str = "filler", leave: int = 0) -> pathlib.Path:
    """Write ``directory/name`` until the filesystem has at most ``leave`` bytes free."""
    path = directory / name
    with open(path, "ab", buffering=0) as f:
        while True:
            st = os.statvfs(directory)
            free = st.f_bavail * st.f_frsize
            if free <= leave:
                break
            n = min(CHUNK, free - leave)
            try:
                f.write(b"\0" * n)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
    return path


def free_bytes(directory: pathlib.Path) -> int:
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


def total_bytes(directory: pathlib.Path) -> int:
    st = os.statvfs(directory)
    return st.f_blocks * st.f_frsize
