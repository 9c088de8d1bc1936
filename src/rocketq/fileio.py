"""Durable replacement of small files: the one way rocketq persists a whole file.

Config files (``config/*.json``), the timer snapshot, the pop state, the checkpoint when it is
created, the offsets of broadcasting consumers and the Spark sink's batch markers are all
written with :func:`durable_replace`. It imports nothing from rocketq but the error tree, so
the client uses it without loading the store.

Theory of operation. ``durable_replace(path, data)`` runs these steps::

    1. write data to path.tmp (created or truncated), fsync path.tmp
    2. (keep_backup only, when path exists) rename path -> path.bak
    3. rename path.tmp -> path
    4. fsync the directory

A crash (power loss included) at any point leaves, under ``path``, either the complete old
content or the complete new content, never a mix and never a prefix:

* before 3, ``path`` was not touched (step 2 moves it whole to ``path.bak``; readers that keep
  backups fall back to ``path.bak`` when ``path`` is missing, as RocketMQ's ``ConfigManager``
  does). A leftover ``path.tmp`` is garbage: nothing reads it, and the next write truncates it;
* rename is atomic, and since the data was fsync'd before it, the name never points at
  unwritten blocks;
* after 4 the new name is durable; before 4 the rename may be lost, leaving the old content.

When a step raises (disk full, permission, an injected fault) the exception propagates,
``path`` keeps its old content and ``path.tmp`` is removed. A full disk (ENOSPC, or EDQUOT
for a quota) is raised as :class:`rocketq.errors.DiskFull` naming the file and the size; it is
an ``OSError`` too, so handlers of file errors keep working. A failure to move the old file to
``path.bak`` is logged and does not stop the replacement: the backup is a convenience for
readers, the atomic rename is what keeps the file whole.

Writers of one ``path`` must be serialised by the caller: two concurrent calls share
``path.tmp``.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os

from rocketq.errors import DiskFull

log = logging.getLogger(__name__)

TMP_SUFFIX = ".tmp"
BAK_SUFFIX = ".bak"
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def fsync_dir(directory: str) -> None:
    """fsync a directory, making renames and creations of its entries durable."""
    fd = os.open(directory or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """``os.write`` until every byte of ``data`` is written."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def durable_replace(path: str, data: bytes, *, keep_backup: bool = False, mode: int = 0o666) -> None:
    """Replace ``path`` by ``data`` atomically and durably (see the module docstring).

    ``keep_backup`` keeps the previous file as ``path.bak``. ``mode`` is the permission of a
    new file (before the umask). The directory is created when missing."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    tmp = path + TMP_SUFFIX
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        if keep_backup and os.path.exists(path):
            try:
                os.replace(path, path + BAK_SUFFIX)
            except OSError as exc:
                log.warning("cannot keep %s as %s%s: %s", path, path, BAK_SUFFIX, exc)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and not isinstance(exc, DiskFull) and exc.errno in _NO_SPACE:
            raise DiskFull(f"disk full: cannot write {path} ({len(data)} B): {exc.strerror}") from exc
        raise
    fsync_dir(directory)


__all__ = ["BAK_SUFFIX", "TMP_SUFFIX", "durable_replace", "fsync_dir", "write_all"]
