"""The DLedger entry store: the Raft log that is the CommitLog, on DLedger's file layout.

One idea: the entry log on its files (append, read, truncate, flush, checkpoint); the byte
format is ``entry_format``, recovery ``entry_recovery``.

Directory (``DLedgerConfig.getDefaultPath``)::

    <base_dir>/dledger-<selfId>/
        data/<20-digit start offset>   data files of fixed size (DLedger default 1 GiB)
        index/<20-digit start offset>  32-byte index records at ``index * 32`` (default 160 MiB)
        checkpoint                     endIndex, committedIndex (+ rocketq's flushedIndex)
        currterm                       currTerm, voteLeader

The bytes of every file are in :mod:`rocketq.ha.entry_format`; a store written by Apache
RocketMQ's DLedger reads here and the other way round. Segments are
:class:`~rocketq.store.mapped_file.MappedFile`\\ s in two
:class:`~rocketq.store.mapped_file.MappedFileQueue`\\ s; ``checkpoint`` and ``currterm`` are
replaced with :func:`rocketq.fileio.durable_replace`.

Invariants (kept under one lock; one writer, any number of readers):

* entries ``ledger_begin_index .. ledger_end_index`` are contiguous; entry ``i`` has index record
  ``i``; the data ends right after entry ``ledger_end_index`` (zeros after it);
* an entry's ``pos`` is where it lies; an entry never spans files (blank padding, see the format);
* ``committed_index <= ledger_end_index``; :meth:`EntryStore.truncate` refuses to cut at or below
  a floor (the committed index by default);
* ``flushed_index``: every entry up to it is fsync'd, data then index; the ``checkpoint`` file's
  ``flushedIndex`` never exceeds what was fsync'd (lowered durably before a truncation).
  :meth:`EntryStore.persist_checkpoint` writes and fsyncs the file without the store's lock
  (appends go on meanwhile; an fsync of the directory can take a journal commit's time) but
  under a checkpoint lock, which a truncation takes first: the values it writes are those of the
  log as it is (the log only grew meanwhile). Lock order: the checkpoint lock, then the store's.

Where rocketq is stricter than DLedger: both CRC fields are computed and checked on recovery and
on every read; ``currterm`` is written durably before :meth:`EntryStore.set_term` returns; a
truncation below the committed index raises. Recovery is in :mod:`rocketq.ha.entry_recovery`.
Retention (which data files go, by age and disk usage) is
:mod:`rocketq.store.dledger_retention`; it calls :meth:`EntryStore.delete_before`. Not done:
resetting an empty store to a snapshot position.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
from collections.abc import Callable, Sequence
from types import TracebackType

from rocketq.errors import DiskFull
from rocketq.fileio import durable_replace
from rocketq.ha import entry_format as fmt
from rocketq.ha.entry_format import (
    BODY_OFFSET,
    INDEX_UNIT_SIZE,
    MAGIC_NORMAL,
    CorruptLogError,
    Entry,
    EntryNotFound,
    EntryStoreError,
    InconsistentAppend,
    TruncateBelowFloor,
)
from rocketq.ha.entry_recovery import recover
from rocketq.store.mapped_file import MappedFile, MappedFileQueue

log = logging.getLogger(__name__)

#: runs of index records kept for :attr:`EntryStore.committed_pos` (a leader's proposals, a
#: follower's received appends, single entries): the commit trails the end by a few of them
RECENT_RUNS = 64

#: An append hook: called with the entry's position and a mutable copy of the body, before the
#: checksums are computed (RocketMQ's ``AppendHook`` writes the message's physical offset).
AppendHook = Callable[[int, bytearray], None]


class EntryPlacer:
    """Where entries appended in order after a store's end go (:meth:`EntryStore.placer`): the
    store's own placement (an entry that would end closer than ``MIN_BLANK_LEN`` bytes to its
    data file's end goes to the next file), on a cursor, without writing."""

    __slots__ = ("_cursor", "_file_end", "_file_size")

    def __init__(self, cursor: int, file_end: int, file_size: int) -> None:
        self._cursor = cursor
        self._file_end = file_end
        self._file_size = file_size

    def place(self, size: int) -> int:
        """The position of the next entry if it has ``size`` bytes (header included)."""
        if size + fmt.MIN_BLANK_LEN > self._file_size:
            raise EntryStoreError(
                f"entry of {size} B does not fit a {self._file_size} B data file "
                f"(max body {self._file_size - BODY_OFFSET - fmt.MIN_BLANK_LEN} B)"
            )
        if fmt.needs_blank(size, self._file_end - self._cursor):
            return self._file_end
        return self._cursor

    def take(self, pos: int, size: int) -> None:
        """The next entry has ``size`` bytes at ``pos`` (as :meth:`place` said)."""
        if pos == self._file_end:
            self._file_end += self._file_size
        self._cursor = pos + size

    def encode_at(self, encode: Callable[[int], bytes]) -> tuple[int, bytes]:
        """The position and body of the next entry, whose body ``encode(pos + BODY_OFFSET)``
        gives for the position it is encoded for, and its place taken: :meth:`place` of a bare
        header, the body encoded for it, :meth:`place` of the whole entry, the body encoded a
        second time when that is another position (the next data file), then :meth:`take`, in
        one call. What ``encode`` raises, and a body too large for a data file, leave the
        placer as it was."""
        cursor, end = self._cursor, self._file_end
        # a bare header always fits a data file (the store's minimum size)
        pos = end if end - cursor < BODY_OFFSET + fmt.MIN_BLANK_LEN else cursor
        body = encode(pos + BODY_OFFSET)
        size = BODY_OFFSET + len(body)
        if size + fmt.MIN_BLANK_LEN > end - cursor and pos != end:
            pos = self.place(size)  # the next data file, or an entry too large for any
            body = encode(pos + BODY_OFFSET)
            if BODY_OFFSET + len(body) != size:
                raise ValueError("a record's length must not depend on its physical offset")
        elif size + fmt.MIN_BLANK_LEN > self._file_size:
            self.place(size)  # raises: larger than a data file
        if pos == end:
            self._file_end = end + self._file_size
        self._cursor = pos + size
        return pos, body


class EntryStore:
    """DLedger's ``DLedgerMmapFileStore``, synchronous and thread-safe. Use :meth:`open`."""

    def __init__(
        self,
        base_dir: str,
        self_id: str,
        *,
        data_file_size: int = fmt.DEFAULT_DATA_FILE_SIZE,
        index_file_size: int = fmt.DEFAULT_INDEX_FILE_SIZE,
        data_start_offset: int = 0,
    ) -> None:
        if data_file_size < 2 * BODY_OFFSET + fmt.MIN_BLANK_LEN:
            raise EntryStoreError(f"data file size {data_file_size} B is too small")
        if index_file_size <= 0 or index_file_size % INDEX_UNIT_SIZE:
            raise EntryStoreError(f"index file size {index_file_size} B is no multiple of 32")
        if data_start_offset < 0 or data_start_offset % data_file_size:
            raise EntryStoreError(
                f"data start offset {data_start_offset} is no multiple of the data file size {data_file_size}"
            )
        self.home = os.path.join(base_dir, f"dledger-{self_id}")
        self.data_dir = os.path.join(self.home, "data")
        self.index_dir = os.path.join(self.home, "index")
        self.checkpoint_path = os.path.join(self.home, fmt.CHECKPOINT_FILE)
        self.currterm_path = os.path.join(self.home, fmt.CURRTERM_FILE)
        self.data_file_size = data_file_size
        self.index_file_size = index_file_size
        self.data = MappedFileQueue(self.data_dir, data_file_size)
        self.index = MappedFileQueue(self.index_dir, index_file_size)
        self.lock = threading.RLock()
        #: held while ``checkpoint`` is written; taken before :attr:`lock`, never after it
        self._checkpoint_lock = threading.Lock()
        self.start_offset = data_start_offset
        self.begin_index = -1
        self.end_index = -1
        self.end_term = -1
        self.end_chain = 0
        self.committed = -1
        self.flushed = -1
        self.checkpoint_flushed = -1
        self._term = 0
        self._voted_for: str | None = None
        self._closed = False
        #: where the data ended at the open: every entry at or past it was written by this
        #: process, through a path that computed its CRCs (a leader's encoding) or checked them
        #: (a follower's ``append_entry_bytes``), so dispatch need not check them again
        #: (``dledger_window.parse_entry_run``); no position before the open
        self.written_from = (1 << 63) - 1
        self._truncations = 0
        #: the index records of the last runs written, ``(first index, records)`` in index order
        #: (cleared when the index files are cut): :attr:`committed_pos` finds a just committed
        #: entry's end there instead of reading its record back from the index file
        self._recent_records: collections.deque[tuple[int, bytes]] = collections.deque(maxlen=RECENT_RUNS)

    # -- life cycle -----------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        base_dir: str,
        self_id: str,
        *,
        data_file_size: int = fmt.DEFAULT_DATA_FILE_SIZE,
        index_file_size: int = fmt.DEFAULT_INDEX_FILE_SIZE,
        data_start_offset: int = 0,
        verify_all: bool = False,
    ) -> EntryStore:
        """Open (creating when missing) and recover the store of ``self_id`` under ``base_dir``.

        ``data_start_offset`` places the first data file of an empty store (the
        ``dividedCommitlogOffset`` of an adopted CommitLog). ``verify_all`` checks every entry
        from the first file instead of scanning from the checkpoint."""
        store = cls(
            base_dir,
            self_id,
            data_file_size=data_file_size,
            index_file_size=index_file_size,
            data_start_offset=data_start_offset,
        )
        os.makedirs(store.home, exist_ok=True)
        store._load_currterm()
        try:
            recover(store, verify_all=verify_all)
        except BaseException:
            store.data.shutdown()
            store.index.shutdown()
            raise
        store._recent_records.clear()  # recovery may have cut index files after writing records
        store.written_from = store.write_pos
        return store

    def close(self) -> None:
        """Flush, write the checkpoint, unmap."""
        with self._checkpoint_lock, self.lock:
            if self._closed:
                return
            self.flush()
            self._write_checkpoint_now(self.flushed)
            self.data.shutdown()
            self.index.shutdown()
            self._closed = True

    def __enter__(self) -> EntryStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- state ------------------------------------------------------------------------------------
    @property
    def ledger_begin_index(self) -> int:
        return self.begin_index

    @property
    def ledger_end_index(self) -> int:
        return self.end_index

    @property
    def ledger_end_term(self) -> int:
        return self.end_term

    @property
    def committed_index(self) -> int:
        return self.committed

    @property
    def flushed_index(self) -> int:
        return self.flushed

    @property
    def write_pos(self) -> int:
        """Where the data ends (the next entry goes here or, after padding, to the next file)."""
        last = self.data.last()
        return self.start_offset if last is None else last.file_from_offset + last.wrote_position

    @property
    def committed_pos(self) -> int:
        """End of the committed entries (``DLedgerCommitLog.getMaxOffset``); -1 when none."""
        with self.lock:
            if self.committed < 0:
                return -1
            if self.committed < self.begin_index:  # everything committed was deleted
                return self._index_record(self.begin_index).pos
            return self._entry_end(self.committed)

    def entry_end(self, index: int) -> int:
        """Where entry ``index`` (one this store holds) ends: its position plus its size."""
        with self.lock:
            self._check_range(index)
            return self._entry_end(index)

    def _entry_end(self, index: int) -> int:
        """Where entry ``index`` (one this store holds) ends: from the records of a run written
        lately when it is one of theirs, else from its index record in the index file."""
        recent = self._recent_records
        for first, records in reversed(recent) if recent and recent[0][0] <= index else ():
            k = index - first  # the newest first
            if k >= 0:
                if k * INDEX_UNIT_SIZE < len(records):
                    _, pos, size, _, _ = fmt.INDEX_RECORD.unpack_from(records, k * INDEX_UNIT_SIZE)
                    return int(pos + size)
                break  # after the newest run that begins at or before it: not among them
        rec = self._index_record(index)
        return rec.pos + rec.size

    @staticmethod
    def body_offset(pos: int) -> int:
        """The CommitLog offset of the message stored in the entry at ``pos``."""
        return fmt.body_offset(pos)

    def set_committed_index(self, index: int) -> int:
        """Raise the committed index (clamped to the ledger end; never lowered). Returns it."""
        with self.lock:
            index = min(index, self.end_index)
            self.committed = max(self.committed, index)
            return self.committed

    def commit_to(self, index: int) -> int:
        """:meth:`set_committed_index`, then :attr:`committed_pos` (in one hold of the lock)."""
        with self.lock:
            self.set_committed_index(index)
            return self.committed_pos

    # -- term and vote --------------------------------------------------------------------------
    @property
    def term(self) -> int:
        return self._term

    @property
    def voted_for(self) -> str | None:
        return self._voted_for

    def set_term(self, term: int, voted_for: str | None) -> None:
        """Persist ``currterm`` durably (tmp, fsync, rename, fsync of the directory), then adopt it.
        A term never goes down."""
        with self.lock:
            if term < self._term:
                raise EntryStoreError(f"term {term} is below the current term {self._term}")
            durable_replace(self.currterm_path, fmt.format_currterm(term, voted_for))
            self._term, self._voted_for = term, voted_for

    def _load_currterm(self) -> None:
        path = self.currterm_path
        if not os.path.exists(path):
            # DLedger's IOUtils.string2File deletes the file before renaming the new one over it;
            # after a crash in that window the complete new content is in .tmp, the old in .bak.
            for alt in (path + ".tmp", path + ".bak"):
                if os.path.exists(alt):
                    with open(alt, encoding="utf-8") as f:
                        text = f.read()
                    if fmt.TERM_KEY in text and fmt.VOTE_KEY in text:
                        log.warning("%s is missing; using %s", path, alt)
                        self._term, self._voted_for = fmt.parse_currterm(text, alt)
                        durable_replace(path, fmt.format_currterm(self._term, self._voted_for))
                        return
            return
        with open(path, encoding="utf-8") as f:
            self._term, self._voted_for = fmt.parse_currterm(f.read(), path)

    # -- checkpoint -----------------------------------------------------------------------------
    def persist_checkpoint(self) -> None:
        """Write ``checkpoint`` (DLedger does so every 3 s and at shutdown). The file is written
        and fsynced (file, then directory) without the store's lock, so appends and reads go on
        meanwhile; under the checkpoint lock, so no truncation comes in between (see the module
        docstring). Nothing once the store is closed."""
        with self._checkpoint_lock:
            with self.lock:
                if self._closed:  # close() wrote the last one
                    return
                end, committed, flushed = self.end_index, self.committed, self.flushed
            self._write_checkpoint(end, committed, flushed)
            with self.lock:
                self.checkpoint_flushed = flushed

    def _write_checkpoint_now(self, flushed: int) -> None:
        """:meth:`_write_checkpoint` of the store's positions with ``flushed``, under both locks
        (close, truncate)."""
        self._write_checkpoint(self.end_index, self.committed, flushed)
        self.checkpoint_flushed = flushed

    def _write_checkpoint(self, end: int, committed: int, flushed: int) -> None:
        """Write ``checkpoint`` naming these indexes, fsynced with its directory: the one place
        its content is made. Under the checkpoint lock."""
        durable_replace(self.checkpoint_path, fmt.format_checkpoint(end, committed, flushed))

    def load_checkpoint(self) -> tuple[int | None, int | None, int | None]:
        try:
            with open(self.checkpoint_path, encoding="utf-8") as f:
                return fmt.parse_checkpoint(f.read(), self.checkpoint_path)
        except FileNotFoundError:
            return None, None, None

    # -- appends --------------------------------------------------------------------------------
    def append(
        self, term: int, body: bytes, *, magic: int = MAGIC_NORMAL, hook: AppendHook | None = None
    ) -> tuple[int, int]:
        """Append as leader: the entry gets index ``ledger_end_index + 1``. Returns
        ``(index, pos)``; the message's CommitLog offset is :meth:`body_offset` of ``pos``."""
        with self.lock:
            entry = self._write(self.end_index + 1, term, body, magic, None, hook)
            return entry.index, entry.pos

    def append_at(
        self, index: int, term: int, body: bytes, *, magic: int = MAGIC_NORMAL, pos: int | None = None
    ) -> int:
        """Append as follower: ``index`` must be ``ledger_end_index + 1`` and, when the leader's
        ``pos`` is given, the entry must land there. Returns the position."""
        with self.lock:
            if index != self.end_index + 1:
                raise InconsistentAppend(f"append at index {index}, but the ledger ends at {self.end_index}")
            return self._write(index, term, body, magic, pos, None).pos

    def append_raw_at(
        self, index: int, term: int, body: bytes, *, magic: int = MAGIC_NORMAL, pos: int | None = None
    ) -> bytes:
        """:meth:`append_at`, returning the entry's bytes as written (what :meth:`read_bytes`
        would give for it): the leader keeps them to send instead of reading them back."""
        with self.lock:
            if index != self.end_index + 1:
                raise InconsistentAppend(f"append at index {index}, but the ledger ends at {self.end_index}")
            return self._write_raw(index, term, body, magic, pos, None)[0]

    def append_run(self, index: int, term: int, bodies: Sequence[bytes], positions: Sequence[int]) -> bytes:
        """:meth:`append_raw_at` of NORMAL entries ``index, index + 1, ...`` with ``bodies`` at
        ``positions``, returning the bytes of them all: the same files, written together (one
        encoding call, one data write, one write of their index records) when they follow each
        other in the current data and index files; else one by one (a data file to pad, a
        file to create)."""
        with self.lock:
            if index != self.end_index + 1:
                raise InconsistentAppend(f"append at index {index}, but the ledger ends at {self.end_index}")
            if term < self.end_term:
                raise InconsistentAppend(f"term {term} is below the last entry's term {self.end_term}")
            data = self._write_run(index, term, bodies, positions)
            if data is not None:
                return data
            return b"".join(
                self._write_raw(index + i, term, body, MAGIC_NORMAL, positions[i], None)[0]
                for i, body in enumerate(bodies)
            )

    def _write_run(
        self, index: int, term: int, bodies: Sequence[bytes], positions: Sequence[int]
    ) -> bytes | None:
        """The entries written together, or None (nothing written) when they do not all follow
        the current end of the last data file and of the last index file."""
        if self._closed:
            raise EntryStoreError("entry store is closed")
        if not bodies or len(positions) != len(bodies):
            return None
        last = self.data.last()
        if last is None or last.is_full():
            return None
        start = last.file_from_offset + last.wrote_position
        end = positions[-1] + BODY_OFFSET + len(bodies[-1])
        if positions[0] != start or end + fmt.MIN_BLANK_LEN > last.file_from_offset + self.data_file_size:
            return None
        idx = self._run_index_file(index, len(bodies))
        if idx is None:
            return None
        encoded = fmt.encode_entries(MAGIC_NORMAL, index, term, positions, bodies, self.end_chain)
        if encoded is None or len(encoded[0]) != end - start:
            return None
        data, records, chain = encoded
        self._put_run(last, idx, start, index, data, records, term, chain)
        return data

    def _run_index_file(self, first: int, count: int) -> MappedFile | None:
        """The index file whose end takes the records of entries ``first .. first + count - 1``,
        or None when they do not all fit it. A full disk fails here, before any data is written."""
        idx = self._index_file_for(first)
        at = first * INDEX_UNIT_SIZE
        if idx.file_from_offset + idx.wrote_position != at or at + count * INDEX_UNIT_SIZE > (
            idx.file_from_offset + self.index_file_size
        ):
            return None
        return idx

    def _put_run(
        self,
        last: MappedFile,
        idx: MappedFile,
        start: int,
        first: int,
        data: bytes | memoryview,
        records: bytes,
        term: int,
        chain: int,
    ) -> None:
        """Write a run of entries from ``first`` on (``data`` at ``start``, the end of the data
        file ``last``; their index ``records`` at the end of ``idx``) and move the log's end."""
        if not last.append(data):
            raise CorruptLogError(f"entries {first}.. cannot be written at {start}")
        if not idx.append(records):
            raise CorruptLogError(f"index records {first}.. cannot be written at {first * INDEX_UNIT_SIZE}")
        self._recent_records.append((first, records))
        last_index = first + len(records) // INDEX_UNIT_SIZE - 1
        self.end_index, self.end_term, self.end_chain = last_index, term, chain
        if self.begin_index < 0:
            self.begin_index = first

    def placer(self) -> EntryPlacer:
        """Positions for entries appended after the current end, in order, before any is written
        (the leader encodes a batch of records for their positions first)."""
        with self.lock:
            size = self.data_file_size
            last = self.data.last()
            if last is None:
                return EntryPlacer(self.start_offset, self.start_offset + size, size)
            end = last.file_from_offset + size
            cursor = end if last.is_full() else last.file_from_offset + last.wrote_position
            return EntryPlacer(cursor, end, size)

    def append_entry_bytes(self, data: bytes | memoryview) -> int:
        """Append the entries of :meth:`read_bytes` (from the leader) verbatim, after checking that
        each continues this log: index, position, term order, body CRC and chain CRC. Returns the
        number appended; an entry that does not fit raises and keeps those before it.

        The entries that pass, when they fit the current data and index files, are written
        together (:meth:`_append_checked_run`); the rest (a data file to pad or to create, an
        entry with a problem) one by one, as :func:`~rocketq.ha.entry_format.entry_problem`
        and :meth:`_place` say."""
        view = memoryview(data)
        end = len(view)
        off = count = 0
        with self.lock:
            if not self._closed:
                count, off = self._append_checked_run(view)
            while off < end:
                left = end - off
                size = fmt.decode_header(view, off).size if left >= BODY_OFFSET else 0
                h, problem = fmt.entry_problem(
                    view,
                    off,
                    left,
                    expected_pos=self._place(max(size, BODY_OFFSET)),
                    expected_index=self.end_index + 1,
                    prev_chain=self.end_chain if self.end_index >= 0 else None,
                    min_term=max(self.end_term, 0),
                )
                if problem is not None or h is None:
                    raise InconsistentAppend(f"entry {count} of the batch does not follow the log: {problem}")
                self._put(bytes(view[off : off + h.size]), h)
                off += h.size
                count += 1
        return count

    def _append_checked_run(self, view: memoryview) -> tuple[int, int]:
        """The leading entries of ``view`` that continue this log (one compiled walk,
        :func:`~rocketq.ha.entry_format.check_entries`), written with one data append and one
        index append when they all lie in the current data file (no padding: 8 bytes stay after
        them) and their records in the current index file. Returns ``(entries, bytes)`` written:
        ``(0, 0)`` when nothing was."""
        last = self.data.last()
        if last is None or last.is_full() or not view:
            return 0, 0
        start = last.file_from_offset + last.wrote_position
        first = self.end_index + 1
        count, size, _, records, chain, term = fmt.check_entries(
            view, start, first, self.end_chain if self.end_index >= 0 else None, max(self.end_term, 0)
        )
        if count == 0 or start + size + fmt.MIN_BLANK_LEN > last.file_from_offset + self.data_file_size:
            return 0, 0
        idx = self._run_index_file(first, count)
        if idx is None:
            return 0, 0
        self._put_run(last, idx, start, first, view[:size], records, term, chain)
        return count, size

    def next_entry_pos(self, size: int) -> int:
        """Where the next entry of ``size`` bytes (header included) would be written: the leader
        encodes a record for its position before appending it."""
        with self.lock:
            return self._place(size)

    def _place(self, size: int) -> int:
        """Where an entry of ``size`` bytes would go (after padding the last file if needed)."""
        if size + fmt.MIN_BLANK_LEN > self.data_file_size:
            raise EntryStoreError(
                f"entry of {size} B does not fit a {self.data_file_size} B data file "
                f"(max body {self.data_file_size - BODY_OFFSET - fmt.MIN_BLANK_LEN} B)"
            )
        last = self.data.last()
        if last is None:
            return self.start_offset
        if last.is_full():
            return last.file_from_offset + self.data_file_size
        if fmt.needs_blank(size, self.data_file_size - last.wrote_position):
            return last.file_from_offset + self.data_file_size
        return last.file_from_offset + last.wrote_position

    def _write(
        self, index: int, term: int, body: bytes, magic: int, want_pos: int | None, hook: AppendHook | None
    ) -> Entry:
        _, h, body = self._write_raw(index, term, body, magic, want_pos, hook)
        return Entry(magic, index, term, h.pos, body, 0, h.chain_crc, h.body_crc)

    def _write_raw(
        self, index: int, term: int, body: bytes, magic: int, want_pos: int | None, hook: AppendHook | None
    ) -> tuple[bytes, fmt.Header, bytes]:
        if magic not in fmt.ENTRY_MAGICS:
            raise EntryStoreError(f"magic {magic} is no entry type")
        if term < self.end_term:
            raise InconsistentAppend(f"term {term} is below the last entry's term {self.end_term}")
        pos = self._place(BODY_OFFSET + len(body))
        if want_pos is not None and want_pos != pos:
            raise InconsistentAppend(f"entry {index} would land at {pos}, the leader has it at {want_pos}")
        if hook is not None:
            patched = bytearray(body)
            hook(pos, patched)
            if len(patched) != len(body):
                raise EntryStoreError("an append hook must not change the body's length")
            body = bytes(patched)
        data = fmt.encode_entry(magic, index, term, pos, body, self.end_chain)
        h = fmt.decode_header(data)
        self._put(data, h)
        return data, h, body

    def _put(self, data: bytes, h: fmt.Header) -> None:
        """Write entry bytes at their position (padding first), then the index record."""
        if self._closed:
            raise EntryStoreError("entry store is closed")
        self._index_file_for(h.index)  # first: a full disk fails here, before any data is written
        last = self.data.last()
        if last is None:
            last = self.data.get_last_mapped_file(self.start_offset)
        elif last.is_full():
            last = self.data.get_last_mapped_file()
        assert last is not None
        if fmt.needs_blank(len(data), self.data_file_size - last.wrote_position):
            padded, at = last, last.wrote_position
            padded.append(fmt.encode_blank(self.data_file_size - at))
            try:
                last = self.data.get_last_mapped_file()
            except DiskFull:
                # no next data file: take the padding back, so that the log stays as it was (the
                # next entry, another leader's say, may fit where the padding would have been)
                padded.write_target[at : at + fmt.MIN_BLANK_LEN] = bytes(fmt.MIN_BLANK_LEN)
                padded.wrote_position = at
                raise
            assert last is not None
        if last.file_from_offset + last.wrote_position != h.pos or not last.append(data):
            raise CorruptLogError(f"entry {h.index} cannot be written at {h.pos}")
        self.index_append(h.index, fmt.encode_index(h.magic, h.pos, h.size, h.index, h.term))
        self.end_index, self.end_term, self.end_chain = h.index, h.term, h.chain_crc
        if self.begin_index < 0:
            self.begin_index = h.index

    def _index_file_for(self, index: int) -> MappedFile:
        """The index file record ``index`` goes into, created (and later records cut) if needed."""
        off = index * INDEX_UNIT_SIZE
        if self.index.max_wrote_position != off or self.index.last() is None:
            self.index_reset_to(off)
        last = self.index.get_last_mapped_file(off)
        assert last is not None
        return last

    def index_append(self, index: int, record: bytes) -> None:
        off = index * INDEX_UNIT_SIZE
        last = self._index_file_for(index)
        if last.file_from_offset + last.wrote_position != off or not last.append(record):
            raise CorruptLogError(f"index record {index} cannot be written at {off}")
        self._recent_records.append((index, record))

    def index_reset_to(self, off: int) -> None:
        """Make the index files end at ``off``: later records cut, a missing file created."""
        self._recent_records.clear()
        q = self.index
        q.truncate_dirty_files(off)
        last = q.last()
        if last is not None and last.file_from_offset + last.wrote_position == off:
            return
        if last is not None and last.file_from_offset + self.index_file_size == off and last.is_full():
            return
        q.destroy()
        mf = q.get_last_mapped_file(off)
        assert mf is not None
        mf.set_positions(off - mf.file_from_offset)
        q.flushed_where = q.committed_where = off

    # -- reads ----------------------------------------------------------------------------------
    def _index_record(self, index: int) -> fmt.IndexRecord:
        off = index * INDEX_UNIT_SIZE
        mf = self.index.find_by_offset(off)
        raw = None if mf is None else mf.read(off - mf.file_from_offset, INDEX_UNIT_SIZE)
        if raw is None:
            raise CorruptLogError(f"index record {index} is missing")
        return fmt.decode_index(raw)

    def _check_range(self, index: int) -> None:
        if index < self.begin_index or index > self.end_index or index < 0:
            raise EntryNotFound(f"index {index} is outside [{self.begin_index}, {self.end_index}]")

    def _raw(self, index: int) -> tuple[bytes, fmt.Header]:
        self._check_range(index)
        rec = self._index_record(index)
        mf: MappedFile | None = self.data.find_by_offset(rec.pos)
        raw = None if mf is None else mf.read(rec.pos - mf.file_from_offset, rec.size)
        if raw is None or rec.size < BODY_OFFSET:
            raise CorruptLogError(f"entry {index} at {rec.pos} ({rec.size} B) is not in the data files")
        h = fmt.decode_header(raw)
        if h.index != index or h.pos != rec.pos or h.size != rec.size:
            raise CorruptLogError(f"entry at {rec.pos} is {h.index}@{h.pos}, index record {index} names it")
        if not fmt.unchecked(h) and fmt.body_crc(memoryview(raw)[BODY_OFFSET:]) != h.body_crc:
            raise CorruptLogError(f"entry {index} at {rec.pos}: the body does not match bodyCrc")
        return raw, h

    def get(self, index: int) -> Entry:
        """The entry at ``index`` (its body CRC checked)."""
        with self.lock:
            return fmt.decode_entry(self._raw(index)[0])

    def pos_at(self, index: int) -> int:
        """The position of entry ``index`` (from the index record: the entry is not read)."""
        with self.lock:
            self._check_range(index)
            return self._index_record(index).pos

    def term_at(self, index: int) -> int:
        """The term of entry ``index`` (from the index record)."""
        with self.lock:
            self._check_range(index)
            return self._index_record(index).term

    def read_range(self, from_index: int, max_count: int) -> list[Entry]:
        with self.lock:
            last = min(self.end_index, from_index + max_count - 1)
            return [fmt.decode_entry(self._raw(i)[0]) for i in range(from_index, last + 1)]

    def read_bytes(self, from_index: int, max_bytes: int) -> bytes:
        """Raw entries from ``from_index`` (at least one, then while under ``max_bytes``), for
        replication; :meth:`append_entry_bytes` takes them on the follower."""
        out: list[bytes] = []
        total = 0
        with self.lock:
            i = from_index
            while i <= self.end_index:
                raw, _ = self._raw(i)
                if out and total + len(raw) > max_bytes:
                    break
                out.append(raw)
                total += len(raw)
                i += 1
        return b"".join(out)

    # -- flush / truncate / retention -----------------------------------------------------------
    def flush(self) -> int:
        """fsync data, then index. Returns the flushed index (every entry up to it is durable)."""
        with self.lock:
            end = self.end_index
            while not self.data.flush(0):
                pass
            while not self.index.flush(0):
                pass
            self.flushed = end
            return end

    def flush_unlocked(self) -> int:
        """:meth:`flush` without holding the lock during the fsyncs, so appends go on meanwhile
        (a group-commit flusher thread): the segments written so far are fdatasync'd, data then
        index, and the flushed index rises to the end seen at the start, unless a truncation came
        in between. Returns the flushed index."""
        with self.lock:
            if self._closed:
                raise EntryStoreError("entry store is closed")
            end, generation = self.end_index, self._truncations
            data, index = list(self.data.files), list(self.index.files)
        for queue in (data, index):
            for mf in queue:
                if mf.flushed_position < mf.read_position:
                    mf.flush(0)  # a segment deleted meanwhile is skipped (it cannot be held)
        with self.lock:
            if generation == self._truncations:
                self.flushed = max(self.flushed, end)
            return self.flushed

    def truncate(self, from_index: int, floor: int | None = None) -> None:
        """Remove entries ``from_index`` onwards (a follower whose tail diverged). Raises
        :class:`TruncateBelowFloor` when ``from_index <= floor`` (default: the committed index)."""
        with self._checkpoint_lock, self.lock:  # no checkpoint write in progress (lock order)
            floor = self.committed if floor is None else floor
            if from_index <= floor:
                raise TruncateBelowFloor(f"truncate from {from_index} would remove entries <= floor {floor}")
            if from_index > self.end_index:
                return
            self._truncations += 1
            if from_index <= self.begin_index and self.begin_index > 0:
                raise EntryStoreError(
                    f"truncate from {from_index} would empty a log beginning at {self.begin_index}"
                )
            if self.checkpoint_flushed >= from_index:
                self._write_checkpoint_now(from_index - 1)  # durable before the data changes
            self.flushed = min(self.flushed, from_index - 1)
            if from_index <= self.begin_index:
                cut = self._index_record(from_index).pos
                self.begin_index = self.end_index = self.end_term = -1
                self.end_chain = 0
            else:
                _, prev = self._raw(from_index - 1)
                cut = prev.pos + prev.size
                self.end_index, self.end_term, self.end_chain = prev.index, prev.term, prev.chain_crc
            self.data.truncate_dirty_files(cut)
            if self.data.last() is None:
                self.start_offset = cut - cut % self.data_file_size
            self.index.truncate_dirty_files(from_index * INDEX_UNIT_SIZE)
            self._recent_records.clear()
            self.committed = min(self.committed, self.end_index)

    def delete_before(self, index: int) -> int:
        """Delete whole data files (never the last) whose entries all lie below ``index`` and at
        or below the committed index; index files below the new begin go too. Returns the
        number of data files deleted."""
        with self.lock:
            limit = min(index, self.committed + 1)
            files = self.data.files
            doomed = 0
            for nxt in files[1:]:
                first = fmt.decode_header(nxt.mm, 0)
                if first.magic not in fmt.ENTRY_MAGICS or first.index > limit:
                    break
                doomed += 1
            if doomed == 0:
                return 0
            victims = files[:doomed]
            self.data.delete_expired_by_predicate(lambda mf: any(mf is v for v in victims))
            first_file = self.data.first()
            assert first_file is not None
            self.begin_index = fmt.decode_header(first_file.mm, 0).index
            # the index record before the new begin stays: the term of the last deleted entry
            # (term_before_begin) is what a Raft leader sends with the first entry it still has
            keep_off = (self.begin_index - 1) * INDEX_UNIT_SIZE
            self.index.delete_expired_by_predicate(
                lambda mf: mf.file_from_offset + self.index_file_size <= keep_off
            )
            return doomed

    def term_before_begin(self) -> int | None:
        """The term of the entry just before :attr:`ledger_begin_index` (0 when the log begins at
        index 0), from its index record; None when that record is gone too."""
        with self.lock:
            begin = self.begin_index
            if begin <= 0:
                return 0
            off = (begin - 1) * INDEX_UNIT_SIZE
            mf = self.index.find_by_offset(off)
            raw = None if mf is None else mf.read(off - mf.file_from_offset, INDEX_UNIT_SIZE)
            if raw is None:
                return None
            rec = fmt.decode_index(raw)
            if rec.index != begin - 1 or rec.magic not in fmt.ENTRY_MAGICS:
                return None
            return rec.term

    def first_entry_indexes(self) -> list[tuple[int, int, str]]:
        """``(start, index of the first entry, path)`` of every data file, oldest first (what
        retention looks at); a file that starts with no entry (damage) ends the list."""
        out: list[tuple[int, int, str]] = []
        with self.lock:
            for mf in self.data.files:
                if mf.wrote_position < BODY_OFFSET:
                    break
                h = fmt.decode_header(mf.mm, 0)
                if h.magic not in fmt.ENTRY_MAGICS:
                    break
                out.append((mf.file_from_offset, h.index, mf.file_name))
        return out
