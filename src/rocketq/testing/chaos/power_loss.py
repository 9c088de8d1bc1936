"""A power loss of one DLedger member, on its files: what was not known to be fsynced is lost.

**What ``lose_unsynced`` models, honestly.** A SIGKILL alone loses nothing a broker wrote: the
kernel keeps its page cache. After the kill, the entry store under
``<store root>/dledger-nI/`` is cut back: its ``checkpoint`` names ``flushedIndex``, an index
every entry up to which was fsync'd (data, then index) when the checkpoint was written; the
broker rewrites it every 3 s, and fsyncs happen far more often in between. Everything after that
entry's end may be lost: a point between it and the end of the written data is drawn (uniformly,
from ``seed``), the data from there on is zeroed (the entry the point falls in is torn, and
recovery cuts it) and the index records of the entries it touches are zeroed. ``currterm``
(written durably before every vote) and ``checkpoint`` stay. Since the fsyncs after the last
checkpoint are treated as lost too, this can lose more than a real power cut would. Under
ASYNC_FLUSH (acks after the write, the default) the node may lose entries it acknowledged, which
is within what the group is built for as long as the others hold them; under SYNC_FLUSH it is a
power cut plus a disk that dropped its last seconds of fsync'd writes, a harder fault than Raft
promises to survive together with the loss of a second node. The ConsumeQueues and the index
of the replicated part are rebuilt from the log on every start, so they are left as they are.

Layout read here (:mod:`rocketq.ha.entry_format`): ``<home>/checkpoint`` (``flushedIndex``),
``<home>/data/<start offset>`` entry data files, ``<home>/index/<start offset>`` 32-byte index
records, one per entry index. The cut zeroes data bytes and index records in place; it never
changes a file's size (the files are pre-allocated, and recovery reads zeros as the end).
"""

from __future__ import annotations

import dataclasses
import os
import random
from collections.abc import Mapping

from rocketq.errors import RocketqError
from rocketq.ha import entry_format as fmt


class PowerLossError(RocketqError):
    """The files are not what a member leaves (a checkpoint naming an entry with no index record)."""


@dataclasses.dataclass(frozen=True, slots=True)
class LostTail:
    """What :meth:`ChaosGroup.lose_unsynced` cut."""

    flushed_index: int  # the checkpoint's: entries up to it were kept whole
    durable_end: int  # data position where that entry ends
    cut_at: int  # data position from which the bytes were zeroed
    written_end: int  # where the written data ended before the cut
    kept_index: int  # the last entry left whole (-1: none)


def _index_record(files: list[tuple[int, str]], file_size: int, i: int) -> fmt.IndexRecord | None:
    at = i * fmt.INDEX_UNIT_SIZE
    for start, path in files:
        if start <= at < start + file_size:
            with open(path, "rb") as f:
                f.seek(at - start)
                raw = f.read(fmt.INDEX_UNIT_SIZE)
            if len(raw) < fmt.INDEX_UNIT_SIZE:
                return None
            rec = fmt.decode_index(raw)
            return rec if rec.magic in fmt.ENTRY_MAGICS and rec.index == i and rec.size > 0 else None
    return None


def segments(directory: str) -> list[tuple[int, str]]:
    try:
        names = [n for n in os.listdir(directory) if n.isdigit()]
    except FileNotFoundError:
        return []
    return sorted((int(n), os.path.join(directory, n)) for n in names)


def _zero(files: list[tuple[int, str]], file_size: int, begin: int, end: int) -> None:
    """Zero the bytes at positions ``begin .. end`` (exclusive) of a segmented file queue."""
    for start, path in files:
        lo, hi = max(begin, start), min(end, start + file_size)
        if lo >= hi:
            continue
        fd = os.open(path, os.O_WRONLY)
        try:
            pos = lo
            while pos < hi:
                n = min(hi - pos, 1 << 20)
                os.pwrite(fd, b"\0" * n, pos - start)
                pos += n
        finally:
            os.close(fd)


def cut_unsynced(home: str, props: Mapping[str, str], rng: random.Random) -> LostTail:
    checkpoint = os.path.join(home, fmt.CHECKPOINT_FILE)
    try:
        with open(checkpoint, encoding="utf-8") as f:
            flushed = fmt.parse_checkpoint(f.read(), checkpoint)[2]
    except FileNotFoundError:
        flushed = None
    flushed = -1 if flushed is None else flushed
    data = segments(os.path.join(home, "data"))
    index = segments(os.path.join(home, "index"))
    data_size = int(props.get("mappedFileSizeCommitLog", fmt.DEFAULT_DATA_FILE_SIZE))
    index_size = os.path.getsize(index[0][1]) if index else fmt.DEFAULT_INDEX_FILE_SIZE
    if not data:
        return LostTail(flushed, 0, 0, 0, flushed)
    durable_end = data[0][0]
    if flushed >= 0:
        rec = _index_record(index, index_size, flushed)
        if rec is None:
            raise PowerLossError(f"{home}: the checkpoint's flushedIndex {flushed} has no index record")
        durable_end = rec.pos + rec.size
    ends: list[tuple[int, int, int]] = []  # (index, pos, end) of the entries after the flushed one
    i = flushed + 1
    while (rec := _index_record(index, index_size, i)) is not None:
        ends.append((i, rec.pos, rec.pos + rec.size))
        i += 1
    written_end = ends[-1][2] if ends else durable_end
    cut = rng.randint(durable_end, written_end)
    kept = flushed
    for k, _pos, end in ends:
        if end <= cut:
            kept = k
    _zero(data, data_size, cut, max(written_end, cut))
    if ends:
        _zero(index, index_size, (kept + 1) * fmt.INDEX_UNIT_SIZE, (ends[-1][0] + 1) * fmt.INDEX_UNIT_SIZE)
    return LostTail(flushed, durable_end, cut, written_end, kept)
