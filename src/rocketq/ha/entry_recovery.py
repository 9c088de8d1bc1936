"""Recovery of the DLedger entry store: find the last good entry, cut what follows, fix the index.

Where the scan starts:

1. ``verify_all``: the first data file;
2. else the checkpoint's ``flushedIndex`` (rocketq's key), when its index record names an entry
   that checks out at that position;
3. else DLedger's rule: the first entry of the third-last data file, walking back a file at a
   time until a file's first entry checks out and matches its index record.

The first entry scanned is the anchor: its header and body CRC are checked, its ``chainCrc`` is
taken as is (the entry before it is not read), except for index 0 whose predecessor chain is 0.
Every following entry must have the next index, its own position in ``pos``, a term no lower than
the previous one, ``size == 48 + bodySize``, a matching ``bodyCrc`` and ``chainCrc``. A blank
must fill its file exactly and moves the scan to the next file; 8 zero bytes end the data.

When an entry fails, the scan decides between a torn tail and damage:

* the entry's index is at or below the checkpoint's ``flushedIndex``: those bytes were fsync'd,
  so this is damage -> :class:`~rocketq.ha.entry_format.CorruptLogError`;
* the entry after it (at ``pos + size``, by the failed entry's own header) or the first entry of
  the next data file checks out: the log goes on past the failure, so this is damage -> error;
* otherwise it is a torn tail: data from the failed entry on is cut (and zeroed) and logged.

Zeros where an entry should start end the data, except where the checkpoint's ``flushedIndex``
or a good first entry of the next data file shows that entries lie beyond (a lost page): damage.

Index records are compared with the entries scanned; from the first record that is missing or
disagrees, the index is cut and rebuilt from the data (as DLedger does). The files scanned are
fsync'd at the end, so the flushed index starts at the recovered end.
"""

from __future__ import annotations

import itertools
import logging
from typing import TYPE_CHECKING

from rocketq.ha import entry_format as fmt
from rocketq.ha.entry_format import BLANK_MAGIC, INDEX_UNIT_SIZE, CorruptLogError
from rocketq.store.mapped_file import MappedFile

if TYPE_CHECKING:
    from rocketq.ha.entry_store import EntryStore

log = logging.getLogger(__name__)


def _check_at(
    mf: MappedFile, rel: int, size: int, *, index: int | None, prev_chain: int | None, min_term: int
) -> tuple[fmt.Header | None, str | None]:
    return fmt.entry_problem(
        mf.mm,
        rel,
        size - rel,
        expected_pos=mf.file_from_offset + rel,
        expected_index=index,
        prev_chain=prev_chain,
        min_term=min_term,
    )


def _index_matches(store: EntryStore, h: fmt.Header) -> bool:
    off = h.index * INDEX_UNIT_SIZE
    mf = store.index.find_by_offset(off)
    if mf is None:
        return False
    raw = mf.mm[off - mf.file_from_offset : off - mf.file_from_offset + INDEX_UNIT_SIZE]
    return fmt.decode_index(raw) == fmt.IndexRecord(h.magic, h.pos, h.size, h.index, h.term)


def _start(
    store: EntryStore, files: list[MappedFile], flushed: int | None, verify_all: bool
) -> tuple[int, int]:
    """(file number, position in it) of the anchor entry."""
    size = store.data_file_size
    if verify_all:
        return 0, 0
    if flushed is not None and flushed >= 0:
        off = flushed * INDEX_UNIT_SIZE
        imf = store.index.find_by_offset(off)
        if imf is not None:
            rec = fmt.decode_index(imf.mm, off - imf.file_from_offset)
            dmf = store.data.find_by_offset(rec.pos)
            if dmf is not None and rec.index == flushed:
                h, problem = _check_at(
                    dmf, rec.pos - dmf.file_from_offset, size, index=flushed, prev_chain=None, min_term=0
                )
                if problem is None and h is not None and _index_matches(store, h):
                    return files.index(dmf), rec.pos - dmf.file_from_offset
        log.warning("checkpoint's flushedIndex %d does not name a good entry; scanning by file", flushed)
    for i in range(max(len(files) - 3, 0), -1, -1):
        h, problem = _check_at(files[i], 0, size, index=None, prev_chain=None, min_term=0)
        if problem is None and h is not None and _index_matches(store, h):
            return i, 0
    return 0, 0


def _is_good_entry(mf: MappedFile, rel: int, size: int, index: int | None, prev_chain: int | None) -> bool:
    if rel < 0 or rel + fmt.BODY_OFFSET > size:
        return False
    return _check_at(mf, rel, size, index=index, prev_chain=prev_chain, min_term=0)[1] is None


def recover(store: EntryStore, *, verify_all: bool = False) -> None:
    """Bring ``store`` (just constructed, nothing loaded) to its recovered state."""
    _, cp_committed, cp_flushed = store.load_checkpoint()
    durable = cp_flushed if cp_flushed is not None else -1
    store.data.load()
    store.index.load()
    files = store.data.files
    size = store.data_file_size
    for a, b in itertools.pairwise(files):
        if b.file_from_offset - a.file_from_offset != size:
            raise CorruptLogError(f"data files {a.file_name} and {b.file_name} are not adjacent")
    if not files:
        store.index.destroy()
        log.info("entry store %s is empty; data starts at %d", store.home, store.start_offset)
        return
    store.start_offset = files[0].file_from_offset
    fi, rel = _start(store, files, cp_flushed, verify_all)
    scan_from = fi
    index: int | None = None
    prev_chain: int | None = None
    term = 0
    rebuilding = False
    count = 0
    scan_first = -1
    while True:
        mf = files[fi]
        avail = size - rel
        h: fmt.Header | None = None
        problem: str | None
        if avail < fmt.MIN_BLANK_LEN:
            problem = f"{avail} B left at the end of the file"
        else:
            magic, length = _pair(mf, rel)
            if magic == 0 and length == 0:
                _check_end(files, fi, rel, index, durable, size)
                break
            if magic == BLANK_MAGIC:
                problem = fmt.blank_problem(mf.mm, rel, avail)
                if problem is None:
                    if fi + 1 < len(files):
                        fi, rel = fi + 1, 0
                        continue
                    rel = size
                    break
            else:
                h, problem = _check_at(mf, rel, size, index=index, prev_chain=prev_chain, min_term=term)
                if problem is None and h is not None and fmt.unchecked(h):
                    problem = _unchecked_problem(store, mf, rel, h, rebuilding)
        if problem is not None:
            _judge(store, files, fi, rel, h, index, problem, durable)
            break
        assert h is not None
        if scan_first < 0:
            scan_first = h.index
        if not rebuilding and not _index_matches(store, h):
            log.warning("index record %d disagrees with the data; rebuilding the index from it", h.index)
            rebuilding = True
            store.index_reset_to(h.index * INDEX_UNIT_SIZE)
        if rebuilding:
            store.index_append(h.index, fmt.encode_index(h.magic, h.pos, h.size, h.index, h.term))
        store.end_index, store.end_term, store.end_chain = h.index, h.term, h.chain_crc
        index, prev_chain, term = h.index + 1, h.chain_crc, h.term
        rel += h.size
        count += 1
    cut = files[fi].file_from_offset + rel
    store.data.truncate_dirty_files(cut)
    store.index.truncate_dirty_files((store.end_index + 1) * INDEX_UNIT_SIZE if store.end_index >= 0 else 0)
    for mf in store.data.files[scan_from:]:
        mf.sync()
    synced_from = scan_first * INDEX_UNIT_SIZE
    for mf in store.index.files:
        if mf.file_from_offset + store.index_file_size > synced_from:
            mf.sync()
    store.data.flushed_where = store.data.committed_where = store.data.max_wrote_position
    store.index.flushed_where = store.index.committed_where = store.index.max_wrote_position
    if store.end_index >= 0:
        first = store.data.files[0]
        h0 = fmt.decode_header(first.mm, 0)
        if h0.magic not in fmt.ENTRY_MAGICS or h0.index > store.end_index:
            raise CorruptLogError(f"data file {first.file_name} does not start with an entry")
        store.begin_index = h0.index
        # the record before the first entry stays (the term of the last entry retention deleted)
        keep_off = (store.begin_index - 1) * INDEX_UNIT_SIZE
        store.index.delete_expired_by_predicate(
            lambda m: m.file_from_offset + store.index_file_size <= keep_off
        )
    store.flushed = store.end_index
    store.checkpoint_flushed = min(durable, store.end_index)
    if cp_committed is not None:
        store.committed = max(min(cp_committed, store.end_index), -1)
    if store.begin_index > 0:  # retention deletes committed entries only
        store.committed = max(store.committed, store.begin_index - 1)
    log.info(
        "recovered entry store %s: entries %d..%d (term %d), %d scanned, data ends at %d, committed %d",
        store.home,
        store.begin_index,
        store.end_index,
        store.end_term,
        count,
        cut,
        store.committed,
    )


def _unchecked_problem(
    store: EntryStore, mf: MappedFile, rel: int, h: fmt.Header, rebuilding: bool
) -> str | None:
    """An entry without checksums (DLedger's) is taken when its index record, written after it,
    matches, or when another record follows it. Else it may be torn: a kill between the bytes of
    its header and its body leaves both CRC fields 0."""
    if not rebuilding and _index_matches(store, h):
        return None
    nxt = rel + h.size
    if nxt + fmt.MIN_BLANK_LEN <= store.data_file_size and _pair(mf, nxt) != (0, 0):
        return None
    return "an entry without checksums (as DLedger writes it) and no index record or entry after it"


def _pair(mf: MappedFile, rel: int) -> tuple[int, int]:
    magic = int.from_bytes(mf.mm[rel : rel + 4], "big", signed=True)
    length = int.from_bytes(mf.mm[rel + 4 : rel + 8], "big", signed=True)
    return magic, length


def _check_end(
    files: list[MappedFile], fi: int, rel: int, index: int | None, durable: int, size: int
) -> None:
    """The data ends (zeros) at ``files[fi]`` + ``rel``: fine unless fsync'd entries or a later
    file's entries lie beyond (a lost page reads as zeros too)."""
    mf = files[fi]
    where = f"the data ends at pos {mf.file_from_offset + rel} ({mf.file_name})"
    if durable >= 0 and (index is None or index <= durable):
        raise CorruptLogError(f"{where} before entry {index}, but the checkpoint says {durable} was flushed")
    if fi + 1 < len(files) and _is_good_entry(files[fi + 1], 0, size, None, None):
        raise CorruptLogError(
            f"{where}, but the next data file holds entries: zeros in the middle of the log"
        )


def _judge(
    store: EntryStore,
    files: list[MappedFile],
    fi: int,
    rel: int,
    h: fmt.Header | None,
    index: int | None,
    problem: str,
    durable: int,
) -> None:
    """Raise when the failure at ``files[fi]`` + ``rel`` is damage; return when it is a torn tail."""
    size = store.data_file_size
    mf = files[fi]
    idx = index if index is not None else (h.index if h is not None else None)
    where = f"entry {idx if idx is not None else '?'} at pos {mf.file_from_offset + rel} ({mf.file_name})"
    if idx is not None and idx <= durable:
        raise CorruptLogError(
            f"{where}: {problem}; it is at or below the flushed index {durable} of the checkpoint, "
            "so it is damage, not a torn tail"
        )
    if (
        h is not None
        and fmt.BODY_OFFSET <= h.size <= size - rel
        and _is_good_entry(mf, rel + h.size, size, h.index + 1, h.chain_crc)
    ):
        raise CorruptLogError(
            f"{where}: {problem}; the entry after it is intact, so the log is damaged mid-way"
        )
    if fi + 1 < len(files) and _is_good_entry(files[fi + 1], 0, size, None, None):
        raise CorruptLogError(
            f"{where}: {problem}; the next data file holds entries, so the log is damaged mid-way"
        )
    log.warning("%s: %s; cutting the torn tail from here", where, problem)
