"""durable_replace: old or new content under the name after a failure or a crash at each step."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from rocketq import fileio
from rocketq.fileio import durable_replace
from rocketq.protocol import fastjson


def test_writes_new_file_and_creates_directory(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "a" / "b" / "f.json"
    durable_replace(str(path), b"one")
    assert path.read_bytes() == b"one"
    durable_replace(str(path), b"two-longer")
    assert path.read_bytes() == b"two-longer"
    assert sorted(os.listdir(path.parent)) == ["f.json"]


def test_keep_backup_moves_previous_version(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "f"
    durable_replace(str(path), b"v1", keep_backup=True)
    assert not (tmp_path / "f.bak").exists()  # nothing to back up the first time
    durable_replace(str(path), b"v2", keep_backup=True)
    durable_replace(str(path), b"v3", keep_backup=True)
    assert path.read_bytes() == b"v3"
    assert (tmp_path / "f.bak").read_bytes() == b"v2"
    assert not (tmp_path / "f.tmp").exists()


def test_mode_of_new_file(tmp_path: pathlib.Path) -> None:
    old = os.umask(0o022)
    try:
        durable_replace(str(tmp_path / "f"), b"x", mode=0o600)
    finally:
        os.umask(old)
    assert (tmp_path / "f").stat().st_mode & 0o777 == 0o600


def test_failed_rename_keeps_old_content_and_removes_tmp(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"old")
    real_replace = os.replace

    def failing_replace(src: str, dst: str) -> None:
        if src.endswith(".tmp"):
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="No space"):
        durable_replace(str(path), b"new")
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["f"]


def test_failed_fsync_of_data_keeps_old_content(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"old")

    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="Input/output"):
        durable_replace(str(path), b"new", keep_backup=True)
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["f"]  # the backup rename comes after the fsync


def test_failed_backup_still_replaces(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"old")
    real_replace = os.replace

    def failing_backup(src: str, dst: str) -> None:
        if dst.endswith(".bak"):
            raise PermissionError(13, "Permission denied")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_backup)
    durable_replace(str(path), b"new", keep_backup=True)
    assert path.read_bytes() == b"new"
    assert "cannot keep" in caplog.text


def test_directory_fsynced_after_rename(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The last step fsyncs the directory holding the file, after the file has its new name."""
    path = tmp_path / "sub" / "f"
    events: list[tuple[str, str]] = []
    fd_paths: dict[int, str] = {}
    real_open, real_fsync, real_replace = os.open, os.fsync, os.replace

    def rec_open(p: str, flags: int, mode: int = 0o777) -> int:
        fd = real_open(p, flags, mode)
        fd_paths[fd] = os.fspath(p)
        return fd

    def rec_fsync(fd: int) -> None:
        events.append(("fsync", fd_paths[fd]))
        real_fsync(fd)

    def rec_replace(src: str, dst: str) -> None:
        events.append(("replace", os.fspath(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "open", rec_open)
    monkeypatch.setattr(os, "fsync", rec_fsync)
    monkeypatch.setattr(os, "replace", rec_replace)
    durable_replace(str(path), b"data")
    assert events == [
        ("fsync", str(path) + ".tmp"),
        ("replace", str(path)),
        ("fsync", str(path.parent)),
    ]


_CRASH_SCRIPT = textwrap.dedent(
    """
    import os, sys
    from rocketq.fileio import durable_replace
    path, crash_at = sys.argv[1], sys.argv[2]
    real_replace = os.replace
    def crashing_replace(src, dst):
        if (crash_at == "backup" and dst.endswith(".bak")) or (crash_at == "rename" and src.endswith(".tmp")):
            os._exit(9)  # no cleanup, no finally: the process is gone
        real_replace(src, dst)
    os.replace = crashing_replace
    durable_replace(path, b'{"v":2}', keep_backup=True)
    os._exit(0)
    """
)


@pytest.mark.parametrize("crash_at", ["backup", "rename"])
def test_crash_between_steps_leaves_old_content_readable(tmp_path: pathlib.Path, crash_at: str) -> None:
    """A process killed before the backup rename leaves the old file in place; killed between
    the backup rename and the final rename, the old content is in ``.bak``, which readers fall
    back to. The leftover tmp file does not disturb the next write."""
    path = tmp_path / "cfg.json"
    fastjson.persist(str(path), '{"v":1}')
    proc = subprocess.run([sys.executable, "-c", _CRASH_SCRIPT, str(path), crash_at], check=False)
    assert proc.returncode == 9
    assert (tmp_path / "cfg.json.tmp").read_bytes() == b'{"v":2}'
    if crash_at == "backup":
        assert path.read_bytes() == b'{"v":1}'
    else:
        assert not path.exists()
        assert (tmp_path / "cfg.json.bak").read_bytes() == b'{"v":1}'
    assert fastjson.load_file(str(path)) == {"v": 1}
    fastjson.persist(str(path), '{"v":3}')
    assert fastjson.load_file(str(path)) == {"v": 3}
    assert not (tmp_path / "cfg.json.tmp").exists()


def test_importable_without_store() -> None:
    """The client imports the module; it must not pull in the store."""
    code = "import sys, rocketq.fileio; sys.exit(any(m.startswith('rocketq.store') for m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
    assert fileio.__all__
