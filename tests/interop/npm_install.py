"""``npm install`` of one package version into a directory of its own, once per machine.

The directory holds a ``package.json`` of its own (so npm never installs into some parent
folder's project), ``node_modules/<package>`` and an ``.install-complete`` marker written last.
An install is reused when the marker is there and the installed ``package.json`` has the wanted
version; anything else is wiped and installed again. A lock file next to the directory
serialises concurrent test runs. A failed or overlong install fails the test with npm's output.
"""

from __future__ import annotations

import fcntl
import json
import pathlib
import shutil
import subprocess

import pytest

from _support.procs import run_captured


def installed_version(module_dir: pathlib.Path) -> str | None:
    try:
        return str(json.loads((module_dir / "package.json").read_text(encoding="utf-8"))["version"])
    except (OSError, ValueError, KeyError):
        return None


def npm_install(npm: str, package: str, version: str, target: pathlib.Path, timeout_s: float) -> str:
    """``npm install package@version`` into ``target`` unless a complete install is there; the
    directory of the installed package (what a Node script ``require``s)."""
    module_dir = target / "node_modules" / package
    marker = target / ".install-complete"
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists() and installed_version(module_dir) == version:
            return str(module_dir)
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        project = {"name": f"rocketq-interop-{target.name}", "version": "0.0.0", "private": True}
        (target / "package.json").write_text(json.dumps(project) + "\n", encoding="utf-8")
        cmd = [npm, "install", "--no-audit", "--no-fund", f"{package}@{version}"]
        try:
            done = run_captured(cmd, timeout_s, cwd=target)
        except subprocess.TimeoutExpired:
            pytest.fail(f"`{' '.join(cmd)}` in {target} took longer than {timeout_s:g} s")
        if done.returncode != 0 or installed_version(module_dir) != version:
            pytest.fail(
                f"`{' '.join(cmd)}` in {target} failed (exit {done.returncode}):\n"
                f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            )
        marker.write_text(f"{package}@{version}\n", encoding="utf-8")
        return str(module_dir)
