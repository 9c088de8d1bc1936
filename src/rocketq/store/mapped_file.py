"""Memory-mapped segments and the queue of segments that forms one log.

One idea: a log kept in memory-mapped segments (one segment, and the queue of them).

A :class:`MappedFile` is one fixed-size file named by the 20-digit decimal offset of its first
byte in the log (``00000000001073741824``). It is created at full size with its blocks reserved
(``posix_fallocate``: no bytes written, so no write amplification on flush) and mapped shared.
Three positions move forward through it::

    0 ........ flushed ........ committed ........ wrote ........ file_size
               (durable)        (in the file)      (appended)

* ``wrote``: bytes appended (into the mmap, or into a write buffer from the TransientStorePool);
* ``committed``: bytes that are in the file's page cache (== wrote without a write buffer);
* ``flushed``: bytes made durable by ``fdatasync``.

Invariant: ``flushed <= committed <= wrote <= file_size``. Readers see ``read_position``, which
is ``committed`` with a write buffer and ``wrote`` without.

Reference counting: :meth:`MappedFile.hold` / :meth:`MappedFile.release` bracket every read;
:meth:`MappedFile.destroy` marks the file unavailable, and the mapping is closed and the file
deleted only when no reader holds it (or after a forced interval, as RocketMQ does).

A :class:`MappedFileQueue` is the ordered list of segments of one log (the CommitLog or one
ConsumeQueue). Segment *i* starts at ``first.file_from_offset + i * file_size``, so the segment of
an offset is found by arithmetic, not search. The list is replaced, never mutated in place
(copy on write), so readers take a snapshot without locking.

A MappedFile also serves files that are no log segment: the index files and the checkpoint
map themselves through it (``file_from_offset`` given instead of read from the name, and, for
the sparse index files, ``preallocate=False``) and make themselves durable with
:meth:`MappedFile.sync`.

This module and ``allocate.py``/``transient_pool.py`` are the only code in ``store/`` that
touches mappings; whole small files are replaced through :func:`rocketq.fileio.durable_replace`.
"""

from __future__ import annotations

import errno
import itertools
import logging
import mmap
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from rocketq.errors import CorruptFileError, DiskFull, SegmentAllocationError

if TYPE_CHECKING:
    from rocketq.store.transient_pool import TransientStorePool

log = logging.getLogger(__name__)

OS_PAGE_SIZE = 4096

#: ``fsync`` of a file's descriptor also writes the pages dirtied through a shared mapping of it
#: (Linux: one page cache), so no ``msync`` is needed (see :meth:`MappedFile.sync`)
_FSYNC_COVERS_MAPPING = sys.platform.startswith("linux")


def offset_to_file_name(offset: int) -> str:
    """``UtilAll.offset2FileName``: 20-digit zero-padded decimal."""
    return f"{offset:020d}"


def _preallocate(fd: int, path: str, file_size: int) -> None:
    """Reserve the segment's blocks up front (``posix_fallocate``, no zero writes).

    Reserved blocks make a full disk fail here, with a clear error, instead of as SIGBUS on a
    later write through the mapping; they also make first writes to each page much cheaper than
    on a sparse file. Filesystems without fallocate get a sparse file.
    """
    try:
        os.posix_fallocate(fd, 0, file_size)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            try:
                os.ftruncate(fd, 0)
                os.unlink(path)
            except OSError:
                pass
            raise DiskFull(f"disk full: cannot reserve {file_size} B for segment {path}") from exc
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise
        os.ftruncate(fd, file_size)


def reserve_file(path: str, file_size: int) -> None:
    """Create ``path`` at ``file_size`` bytes with its blocks reserved (a file another writer
    created first is left alone); :class:`~rocketq.errors.DiskFull` on a full disk, with nothing
    left behind."""
    directory = os.path.dirname(path)
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFull(f"disk full: cannot create directory {directory}") from exc
        raise
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFull(f"disk full: cannot create {path}") from exc
        raise
    try:
        _preallocate(fd, path, file_size)
    finally:
        os.close(fd)


class WriteBuffer(Protocol):
    def __setitem__(self, key: slice, value: bytes) -> None: ...
    def __getitem__(self, key: slice) -> bytes: ...
    def __len__(self) -> int: ...


class MappedFile:
    """One fixed-size, memory-mapped segment of a log."""

    __slots__ = (
        "_fd",
        "_lock",
        "_refs",
        "_transient_pool",
        "available",
        "committed_position",
        "file_from_offset",
        "file_name",
        "file_size",
        "first_create_in_queue",
        "flushed_position",
        "mm",
        "store_timestamp",
        "write_buffer",
        "wrote_position",
    )

    def __init__(
        self,
        path: str,
        file_size: int,
        *,
        transient_pool: TransientStorePool | None = None,
        create: bool = True,
        file_from_offset: int | None = None,
        preallocate: bool = True,
    ) -> None:
        """Map ``path`` (created at ``file_size`` when missing or empty and ``create``).

        ``file_from_offset`` defaults to the file's name read as a decimal offset.
        ``preallocate=False`` creates a sparse file (``ftruncate``) instead of reserving blocks."""
        self.file_name = path
        self.file_size = file_size
        if file_from_offset is None:
            base = os.path.basename(path)
            try:
                file_from_offset = int(base)
            except ValueError:
                raise CorruptFileError(f"segment name {base!r} is not a decimal offset") from None
        self.file_from_offset = file_from_offset
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        self._fd = os.open(path, flags, 0o644)
        try:
            st = os.fstat(self._fd)
            if st.st_size != file_size:
                if st.st_size != 0 or not create:
                    raise CorruptFileError(
                        f"segment {path} is {st.st_size} B, expected {file_size} B (length not matched)"
                    )
                if preallocate:
                    _preallocate(self._fd, path, file_size)
                else:
                    os.ftruncate(self._fd, file_size)
            self.mm = mmap.mmap(self._fd, file_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(self._fd)
            raise
        self._transient_pool = transient_pool
        self.write_buffer: mmap.mmap | None = transient_pool.borrow_buffer() if transient_pool else None
        if transient_pool is not None and self.write_buffer is None:
            self.mm.close()
            os.close(self._fd)
            raise SegmentAllocationError(
                f"write-buffer pool is empty ({transient_pool.size} buffers in use); cannot create {path}"
            )
        self.wrote_position = 0
        self.committed_position = 0
        self.flushed_position = 0
        self.store_timestamp = 0
        self.first_create_in_queue = False
        self.available = True
        self._refs = 1
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return (
            f"MappedFile({offset_to_file_name(self.file_from_offset)}, wrote={self.wrote_position}, "
            f"committed={self.committed_position}, flushed={self.flushed_position})"
        )

    # -- positions --------------------------------------------------------------------------
    @property
    def write_target(self) -> mmap.mmap:
        """Where appends go: the write buffer if one is attached, else the mapping."""
        return self.write_buffer if self.write_buffer is not None else self.mm

    @property
    def read_position(self) -> int:
        return self.committed_position if self.write_buffer is not None else self.wrote_position

    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def mark_full_loaded(self) -> None:
        """Positions of a segment found on disk at load; recovery corrects the tail segments."""
        self.wrote_position = self.committed_position = self.flushed_position = self.file_size

    def set_positions(self, position: int) -> None:
        self.wrote_position = self.committed_position = self.flushed_position = position

    # -- reference counting -----------------------------------------------------------------
    def hold(self) -> bool:
        with self._lock:
            if not self.available:
                return False
            self._refs += 1
            return True

    def release(self) -> None:
        with self._lock:
            self._refs -= 1
            close = self._refs <= 0
        if close:
            self._cleanup()

    @property
    def ref_count(self) -> int:
        return self._refs

    def _cleanup(self) -> None:
        if self.write_buffer is not None and self._transient_pool is not None:
            self._transient_pool.return_buffer(self.write_buffer)
            self.write_buffer = None
        try:
            self.mm.close()
        except BufferError:  # a memoryview is still exported; the GC will unmap it
            log.warning("segment %s still has exported views at close", self.file_name)
        try:
            os.close(self._fd)
        except OSError:
            pass

    def shutdown(self, interval_forcibly_ms: int = 0) -> None:
        """Make the file unavailable and drop the owner's reference."""
        with self._lock:
            if not self.available:
                return
            self.available = False
        self.release()

    def reserve_blocks(self, offset: int, length: int) -> None:
        """Reserve the blocks of ``[offset, offset + length)`` of a sparse file before writing
        there through the mapping: a full disk then fails here with
        :class:`~rocketq.errors.DiskFull` instead of killing the process (SIGBUS) on the write.
        A no-op where the filesystem has no fallocate."""
        if length <= 0:
            return
        try:
            os.posix_fallocate(self._fd, offset, length)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFull(f"disk full: cannot reserve {length} B of {self.file_name}") from exc
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise

    def destroy(self, interval_forcibly_ms: int = 120_000) -> bool:
        """Unmap and delete the file. Waits up to ``interval_forcibly_ms`` for readers to finish."""
        self.shutdown()
        deadline = time.monotonic() + interval_forcibly_ms / 1000
        while self._refs > 0 and time.monotonic() < deadline:
            time.sleep(0.001)
        if self._refs > 0:
            log.warning("destroying %s with %d readers still holding it", self.file_name, self._refs)
            self._refs = 0
            self._cleanup()
        try:
            os.unlink(self.file_name)
        except FileNotFoundError:
            pass
        return True

    # -- I/O --------------------------------------------------------------------------------
    def read(self, pos: int, size: int) -> bytes | None:
        """Bytes ``[pos, pos+size)`` if they are below the read position, else None."""
        if pos < 0 or size < 0 or pos + size > self.read_position:
            return None
        if not self.hold():
            return None
        try:
            return self.mm[pos : pos + size]
        finally:
            self.release()

    def append(self, data: bytes | memoryview) -> bool:
        """Append raw bytes (ConsumeQueue units, blanks). False when they do not fit."""
        pos = self.wrote_position
        if pos + len(data) > self.file_size:
            return False
        self.write_target[pos : pos + len(data)] = data
        self.wrote_position = pos + len(data)
        return True

    def _able(self, position: int, done: int, least_pages: int) -> bool:
        if self.is_full():
            return position > done
        if least_pages > 0:
            return position // OS_PAGE_SIZE - done // OS_PAGE_SIZE >= least_pages
        return position > done

    def commit(self, least_pages: int) -> int:
        """Copy ``write_buffer[committed:wrote]`` into the file; returns the committed position."""
        buf = self.write_buffer
        if buf is None:
            return self.wrote_position
        wrote = self.wrote_position
        if self._able(wrote, self.committed_position, least_pages) and self.hold():
            try:
                start = self.committed_position
                with memoryview(buf) as view:  # no copy under the GIL; pwrite releases it
                    pos = start
                    while pos < wrote:  # a regular file may still take fewer bytes at once
                        pos += os.pwrite(self._fd, view[pos:wrote], pos)
                self.committed_position = wrote
            finally:
                self.release()
        if self.committed_position >= self.file_size and self.write_buffer is not None:
            pool, self._transient_pool = self._transient_pool, None
            if pool is not None:
                pool.return_buffer(self.write_buffer)
            self.write_buffer = None
        return self.committed_position

    def flush(self, least_pages: int) -> int:
        """``fdatasync`` when enough pages are dirty; returns the flushed position."""
        value = self.read_position
        if self._able(value, self.flushed_position, least_pages) and self.hold():
            try:
                os.fdatasync(self._fd)  # releases the GIL; covers pages dirtied through the mapping
                self.flushed_position = value
            finally:
                self.release()
        return self.flushed_position

    def sync(self, *, full: bool = False) -> bool:
        """Make every page of the file durable, whatever the positions say: ``fdatasync``, or
        with ``full`` an ``fsync`` (metadata too). False when the file is no longer available.

        No ``msync``: Python's ``mmap.flush`` keeps the interpreter lock for the whole call (3.11),
        so a write-back that waits for a busy disk would stop every thread of the process, the
        event loop included. On Linux the page cache is one: ``fsync`` of the descriptor writes
        the pages dirtied through the shared mapping too, and releases the lock while it waits.
        Elsewhere the mapping is flushed first, as before."""
        if not self.hold():
            return False
        try:
            if full:
                if not _FSYNC_COVERS_MAPPING:
                    self.mm.flush()
                os.fsync(self._fd)
            else:
                os.fdatasync(self._fd)
        finally:
            self.release()
        return True

    def warm_up(self, sync_flush: bool, flush_least_pages: int) -> None:
        """Touch every page so later appends do not fault; flush every N pages under SYNC_FLUSH."""
        mm = self.write_target
        start = time.monotonic()
        pages = 0
        for pos in range(0, self.file_size, OS_PAGE_SIZE):
            mm[pos] = 0
            pages += 1
            if sync_flush and mm is self.mm and pages % flush_least_pages == 0:
                os.fdatasync(self._fd)
        if sync_flush and mm is self.mm:
            os.fdatasync(self._fd)
        log.info("warmed %s: %d pages in %.1f ms", self.file_name, pages, (time.monotonic() - start) * 1000)


class Allocator(Protocol):
    def allocate(self, next_path: str, next_next_path: str, file_size: int) -> MappedFile: ...


class MappedFileQueue:
    """The ordered segments of one log in one directory."""

    def __init__(
        self,
        directory: str,
        file_size: int,
        *,
        allocator: Allocator | None = None,
        transient_pool: TransientStorePool | None = None,
    ) -> None:
        self.directory = directory
        self.file_size = file_size
        self.allocator = allocator
        self.transient_pool = transient_pool
        self._files: list[MappedFile] = []
        self._lock = threading.Lock()
        self.flushed_where = 0
        self.committed_where = 0
        self.store_timestamp = 0

    # -- loading ----------------------------------------------------------------------------
    def load(self) -> None:
        """Map the segments found in the directory. Every one must have the configured size."""
        os.makedirs(self.directory, exist_ok=True)
        names = sorted(n for n in os.listdir(self.directory) if n.isdigit())
        files: list[MappedFile] = []
        for i, name in enumerate(names):
            path = os.path.join(self.directory, name)
            size = os.path.getsize(path)
            if size == 0 and i == len(names) - 1:
                log.warning("deleting empty last segment %s", path)
                os.unlink(path)
                continue
            if size != self.file_size:
                for f in files:
                    f.shutdown()
                raise CorruptFileError(
                    f"segment {path} is {size} B, expected {self.file_size} B (length not matched)"
                )
            mf = MappedFile(path, self.file_size, create=False)
            mf.mark_full_loaded()
            files.append(mf)
        for prev, cur in itertools.pairwise(files):
            if cur.file_from_offset - prev.file_from_offset != self.file_size:
                log.error("segments %s and %s are not adjacent", prev.file_name, cur.file_name)
        self._files = files

    # -- lookups ----------------------------------------------------------------------------
    @property
    def files(self) -> list[MappedFile]:
        """A snapshot of the segments (never mutated afterwards)."""
        return self._files

    def first(self) -> MappedFile | None:
        files = self._files
        return files[0] if files else None

    def last(self) -> MappedFile | None:
        files = self._files
        return files[-1] if files else None

    def find_by_offset(self, offset: int, return_first_on_not_found: bool = False) -> MappedFile | None:
        """The segment containing ``offset``, by arithmetic (O(1))."""
        files = self._files
        if not files:
            return None
        first = files[0]
        index = (offset // self.file_size) - (first.file_from_offset // self.file_size)
        if 0 <= index < len(files):
            mf = files[index]
            if mf.file_from_offset <= offset < mf.file_from_offset + self.file_size:
                return mf
        for mf in files:  # non-adjacent segments (should not happen): fall back to a scan
            if mf.file_from_offset <= offset < mf.file_from_offset + self.file_size:
                return mf
        return first if return_first_on_not_found else None

    @property
    def min_offset(self) -> int:
        first = self.first()
        return first.file_from_offset if first is not None else -1

    @property
    def max_offset(self) -> int:
        """End of readable data: last segment's start plus its read position."""
        files = self._files
        if not files:
            return 0
        last = files[-1]
        return last.file_from_offset + last.read_position

    @property
    def max_wrote_position(self) -> int:
        last = self.last()
        return last.file_from_offset + last.wrote_position if last is not None else 0

    def remain_to_commit(self) -> int:
        return self.max_wrote_position - self.committed_where

    def remain_to_flush(self) -> int:
        return self.max_offset - self.flushed_where

    # -- growth -----------------------------------------------------------------------------
    def get_last_mapped_file(self, start_offset: int = 0, need_create: bool = True) -> MappedFile | None:
        """The segment to append to; creates the next one when the last is full or none exists."""
        last = self.last()
        if last is not None and not last.is_full():
            return last
        if not need_create:
            return last
        if last is None:
            create_offset = start_offset - start_offset % self.file_size
        else:
            create_offset = last.file_from_offset + self.file_size
        return self._create(create_offset, first=last is None)

    def _create(self, create_offset: int, *, first: bool) -> MappedFile:
        path = os.path.join(self.directory, offset_to_file_name(create_offset))
        if self.allocator is not None:
            next_next = os.path.join(self.directory, offset_to_file_name(create_offset + self.file_size))
            mf = self.allocator.allocate(path, next_next, self.file_size)
        else:
            os.makedirs(self.directory, exist_ok=True)
            mf = MappedFile(path, self.file_size, transient_pool=self.transient_pool)
        mf.first_create_in_queue = first
        with self._lock:
            self._files = [*self._files, mf]
        return mf

    # -- flush / commit ---------------------------------------------------------------------
    def flush(self, least_pages: int) -> bool:
        """Flush the segment holding ``flushed_where``. Returns True when nothing moved."""
        mf = self.find_by_offset(self.flushed_where, self.flushed_where == 0)
        if mf is None:
            return True
        ts = mf.store_timestamp
        offset = mf.flush(least_pages)
        where = mf.file_from_offset + offset
        unchanged = where == self.flushed_where
        self.flushed_where = where
        if least_pages == 0:
            self.store_timestamp = ts
        return unchanged

    def commit(self, least_pages: int) -> bool:
        """Commit the segment holding ``committed_where``. Returns True when nothing moved."""
        mf = self.find_by_offset(self.committed_where, self.committed_where == 0)
        if mf is None:
            return True
        offset = mf.commit(least_pages)
        where = mf.file_from_offset + offset
        unchanged = where == self.committed_where
        self.committed_where = where
        return unchanged

    # -- shrinking --------------------------------------------------------------------------
    def truncate_dirty_files(self, offset: int) -> None:
        """Drop everything at and after ``offset``: later segments are deleted, the one holding it
        gets its positions set to ``offset``. Stale bytes after it are zeroed so that a later scan
        can never mistake them for records."""
        keep: list[MappedFile] = []
        drop: list[MappedFile] = []
        for mf in self._files:
            tail = mf.file_from_offset + self.file_size
            if tail > offset:
                if offset >= mf.file_from_offset:
                    pos = offset % self.file_size
                    old = max(mf.wrote_position, mf.committed_position)
                    mf.set_positions(pos)
                    end = self.file_size if old >= self.file_size else old
                    end = max(end, pos)
                    _zero(mf.mm, pos, end)
                    if mf.write_buffer is not None:
                        mf.write_buffer[0:pos] = mf.mm[0:pos]
                    keep.append(mf)
                else:
                    drop.append(mf)
            else:
                keep.append(mf)
        with self._lock:
            self._files = keep
        for mf in drop:
            mf.destroy(1000)
        self.flushed_where = min(self.flushed_where, offset)
        self.committed_where = min(self.committed_where, offset)

    def delete_last_file(self) -> None:
        last = self.last()
        if last is None:
            return
        with self._lock:
            self._files = self._files[:-1]
        last.destroy(1000)

    def delete_expired_by_time(
        self,
        expired_ms: int,
        delete_interval_ms: int = 0,
        interval_forcibly_ms: int = 120_000,
        clean_immediately: bool = False,
        now_ms: int | None = None,
        max_batch: int = 10,
    ) -> int:
        """Delete non-last segments not modified for ``expired_ms`` (or all if ``clean_immediately``)."""
        now = now_ms if now_ms is not None else int(time.time() * 1000)
        files = self._files[:-1]
        deleted: list[MappedFile] = []
        for mf in files:
            try:
                mtime = int(os.path.getmtime(mf.file_name) * 1000)
            except FileNotFoundError:
                mtime = 0
            if now >= mtime + expired_ms or clean_immediately:
                deleted.append(mf)
                if len(deleted) >= max_batch:
                    break
                if delete_interval_ms > 0:
                    time.sleep(delete_interval_ms / 1000)
            else:
                break
        return self._remove(deleted, interval_forcibly_ms)

    def delete_expired_by_predicate(self, expired: Callable[[MappedFile], bool]) -> int:
        """Delete leading non-last segments for which ``expired`` holds (ConsumeQueue retention)."""
        deleted: list[MappedFile] = []
        for mf in self._files[:-1]:
            if not expired(mf):
                break
            deleted.append(mf)
        return self._remove(deleted, 1000)

    def delete_leading(
        self, count: int, interval_forcibly_ms: int = 120_000, *, keep_last: bool = True
    ) -> int:
        """Delete the first ``count`` segments, never the last one (retention's plan) unless
        ``keep_last`` is False (the old CommitLog of a DLedger store: its entries follow)."""
        files = self._files[:-1] if keep_last else self._files
        return self._remove(files[: max(0, count)], interval_forcibly_ms)

    def _remove(self, deleted: list[MappedFile], interval_forcibly_ms: int) -> int:
        if not deleted:
            return 0
        gone = {id(m) for m in deleted}
        with self._lock:
            self._files = [m for m in self._files if id(m) not in gone]
        for mf in deleted:
            log.info("deleting segment %s", mf.file_name)
            mf.destroy(interval_forcibly_ms)
        return len(deleted)

    def shutdown(self) -> None:
        for mf in self._files:
            mf.shutdown()
        with self._lock:
            self._files = []

    def destroy(self) -> None:
        for mf in self._files:
            mf.destroy(1000)
        with self._lock:
            self._files = []
        self.flushed_where = self.committed_where = 0


_ZERO_CHUNK = bytes(1 << 20)
#: A run of zeros this long ends the stale region (longer than any record: 4 MiB body + 64 KiB).
_QUIET_RUN = 5 << 20


def _zero(mm: mmap.mmap, start: int, end: int) -> None:
    """Zero stale bytes in ``[start, end)``; stops early after a long run of zeros, because
    appends are contiguous and nothing was ever written past such a run."""
    pos = start
    zero_run = 0
    while pos < end and zero_run < _QUIET_RUN:
        n = min(len(_ZERO_CHUNK), end - pos)
        if mm[pos : pos + n] == _ZERO_CHUNK[:n]:
            zero_run += n
        else:
            mm[pos : pos + n] = _ZERO_CHUNK[:n]
            zero_run = 0
        pos += n
