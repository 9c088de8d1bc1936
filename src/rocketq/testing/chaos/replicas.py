"""Reading a DLedger group's replicas from their files, read-only, for the checker.

A broker in DLedger mode keeps its Raft log in ``<storePathRootDir>/dledger-<selfId>/`` (the
layout and bytes of :mod:`rocketq.ha.entry_format`) and its ConsumeQueues in
``<storePathRootDir>/consumequeue/<topic>/<queueId>/`` (20-byte units: CommitLog offset i64,
size i32, tags hash i64, big-endian). Nothing here opens a store for writing or runs its
recovery: the data files are read as they are, entry after entry from the first file's start
offset, until a zero header (never written), a blank (the rest of the file), or a torn entry
(the checks of :func:`rocketq.ha.entry_format.entry_problem` fail: the end of the log).

* :func:`read_replica` gives a :class:`~rocketq.testing.chaos.check.ReplicaDump`: every entry's
  (index, term, pos, chain crc), the committed index of ``checkpoint`` (written every few
  seconds, so possibly behind the member's real one; past the last entry read only when
  committed entries were lost, which the checker reports), the data bytes up to the end of the
  last entry, and the ConsumeQueues when asked for.
* :func:`replica_drain` turns a replica's committed entries into ``drain`` ops (one per queue,
  ``node`` the self id): the messages each replica would serve, so the checker compares every
  (queue, offset) across replicas, the leader's drain and the clients' reads.

Best run on stopped brokers; on running ones a file may change while it is read (a torn tail
then ends the walk early, which only shortens what is compared).
"""

from __future__ import annotations

import collections
import mmap
import os
import struct
from collections.abc import Iterable

from rocketq.ha import entry_format as fmt
from rocketq.message import PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, decode_properties
from rocketq.protocol.record import RecordKind, decode_record
from rocketq.testing.chaos.check import ReplicaDump
from rocketq.testing.chaos.history import Op, Read, now_fields

_CQ_UNIT = struct.Struct(">qiq")


def ledger_dir(store_root: str, self_id: str) -> str:
    """Where a broker whose ``storePathRootDir`` is ``store_root`` keeps its Raft log."""
    return os.path.join(store_root, f"dledger-{self_id}")


def _files(directory: str) -> list[tuple[int, str]]:
    if not os.path.isdir(directory):
        return []
    out = [(int(name), os.path.join(directory, name)) for name in os.listdir(directory) if name.isdigit()]
    return sorted(out)


def _walk(data_dir: str) -> tuple[list[fmt.Entry], bytes, int]:
    """Entries, the data bytes up to the last entry's end, and the first file's start offset
    (files are mapped, not read whole: a data file is 1 GiB by default, mostly never written)."""
    files = _files(data_dir)
    if not files:
        return [], b"", 0
    start = files[0][0]
    entries: list[fmt.Entry] = []
    data = bytearray()
    prev_chain: int | None = None
    min_term = 0
    for file_start, path in files:
        if file_start != start + len(data):
            break  # a gap between files: the log ends before it
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                break
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                off, full = 0, False
                while off + fmt.MIN_BLANK_LEN <= size:  # a blank header fits in the last 8 bytes
                    magic, length = struct.unpack_from(">ii", buf, off)
                    if magic == fmt.BLANK_MAGIC:
                        full = True  # the rest of the file is padding: go on in the next
                        break
                    h, problem = fmt.entry_problem(
                        buf, off, size - off, expected_pos=file_start + off,
                        expected_index=entries[-1].index + 1 if entries else None,
                        prev_chain=prev_chain, min_term=min_term,
                    )  # fmt: skip
                    if (magic == 0 and length == 0) or problem is not None or h is None:
                        break
                    entries.append(fmt.decode_entry(buf, off))
                    prev_chain, min_term = h.chain_crc, h.term
                    off += h.size
                data += buf[:size] if full else buf[:off]
        if not full:
            break
    end = entries[-1].pos + entries[-1].size - start if entries else 0
    return entries, bytes(data[:end]), start


def _committed_index(ledger: str) -> int:
    path = os.path.join(ledger, fmt.CHECKPOINT_FILE)
    if not os.path.exists(path):
        return -1
    with open(path, encoding="utf-8") as f:
        _end, committed, _flushed = fmt.parse_checkpoint(f.read(), path)
    return -1 if committed is None else committed


def read_consume_queues(store_root: str, topics: Iterable[str]) -> dict[tuple[str, int, int], int]:
    """``{(topic, queue, offset): CommitLog offset}`` of a broker's ConsumeQueues of ``topics``."""
    out: dict[tuple[str, int, int], int] = {}
    for topic in topics:
        tdir = os.path.join(store_root, "consumequeue", topic)
        if not os.path.isdir(tdir):
            continue
        for qname in sorted(os.listdir(tdir)):
            if not qname.isdigit():
                continue
            for file_start, path in _files(os.path.join(tdir, qname)):
                with open(path, "rb") as f:
                    buf = f.read()
                for off in range(0, len(buf) - _CQ_UNIT.size + 1, _CQ_UNIT.size):
                    phys, size, _tags = _CQ_UNIT.unpack_from(buf, off)
                    if phys == 0 and size == 0:
                        break
                    out[(topic, int(qname), (file_start + off) // _CQ_UNIT.size)] = phys
    return out


def read_replica(
    store_root: str, self_id: str, *, topics: Iterable[str] = (), with_data: bool = True
) -> ReplicaDump:
    """One broker's replica (see the module docstring); ``topics``: ConsumeQueues to read too."""
    ledger = ledger_dir(store_root, self_id)
    entries, data, start = _walk(os.path.join(ledger, "data"))
    wanted = list(topics)
    return ReplicaDump(
        node=self_id,
        entries=[(e.index, e.term, e.pos, e.chain_crc) for e in entries],
        committed_index=_committed_index(ledger),
        data=data if with_data else None,
        start_offset=start,
        consume_queues=read_consume_queues(store_root, wanted) if wanted else None,
    )


def replica_drain(store_root: str, self_id: str, topic: str, *, process: str = "") -> list[Op]:
    """The ``drain`` ops of ``topic`` from a replica's committed entries (module docstring)."""
    ledger = ledger_dir(store_root, self_id)
    entries, _data, _start = _walk(os.path.join(ledger, "data"))
    committed = _committed_index(ledger)
    by_queue: dict[int, list[Read]] = collections.defaultdict(list)
    for e in entries:
        if e.index > committed or e.magic != fmt.MAGIC_NORMAL or not e.body:
            continue
        view = decode_record(e.body, 0)
        if view.kind is not RecordKind.MESSAGE or view.topic != topic:
            continue
        props = decode_properties(view.properties)
        payload = (view.body or b"").decode("utf-8", "replace")
        by_queue[view.queue_id].append(
            Read(view.queue_offset, payload, props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, ""))
        )
    stamp = now_fields()
    who = process or f"replica-{self_id}"
    return [
        Op(
            who,
            "drain",
            "ok",
            topic=topic,
            queue=q,
            node=self_id,
            reads=tuple(sorted(reads, key=lambda r: r.offset)),
            wall_ms=stamp["wall_ms"],
            mono_ns=stamp["mono_ns"],
        )
        for q, reads in sorted(by_queue.items())
    ]
