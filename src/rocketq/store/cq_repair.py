"""ConsumeQueue repair: units checked against the CommitLog, damaged queues rebuilt from it.

The CommitLog is the source of truth; a ConsumeQueue is an index over it that can be rebuilt. A
unit *agrees* with the CommitLog when the record at its physical offset is a valid message of
the queue's topic and queue id, with the unit's queue offset in its QUEUEOFFSET field, its
offset in its PHYSICALOFFSET field and the unit's size as its TOTALSIZE (:func:`unit_mismatch`).

What is checked when (the full check of every unit is O(all messages), so it is not done on
every start; ``docs/operations.md`` has the operator's view):

* at every start: the structure of the last three files of each queue (an invalid unit with
  units after it is damage, not a torn end: :attr:`ConsumeQueue.damaged`), and the first and the
  last unit of every queue against their records;
* at every start: the next queue offset of every queue as the records recovery re-verified say
  (:attr:`RecoveryPlan.queue_next`, noted by the bulk scan itself): a queue that ends before it
  was cut short;
* after an abnormal stop, additionally: the last 1,024 units of each queue that point into the
  CommitLog range recovery re-verified (the un-checkpointed tail: what a crash can have torn);
* on every read (:meth:`MessageStore.get_message`): each unit read against the record it names.

A queue that fails any check is rebuilt from the CommitLog (:func:`collect_units` walks the
CommitLog once for all queues being rebuilt, with the dispatch parser), and the rebuild is logged
at ERROR. The CommitLog's queue-offset table for new sends then comes from the rebuilt queues,
so a queue offset is never given out twice.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import struct
from collections.abc import Callable, Collection

from rocketq.protocol import record as rec
from rocketq.store.commitlog import CommitLog
from rocketq.store.dispatch import ReputMessageService
from rocketq.store.record_scan import DispatchBatch, DispatchRequest

log = logging.getLogger(__name__)

#: TOTALSIZE, MAGICCODE, BODYCRC, QUEUEID, FLAG, QUEUEOFFSET, PHYSICALOFFSET, SYSFLAG
_HEAD = struct.Struct(">iiiiiqqi")
_QUEUED_TRANSACTION_TYPES = frozenset((0x0, 0x8))
_QQ = struct.Struct(">qq")

Key = tuple[str, int]
Unit = tuple[int, int, int, int]  # physical offset, size, tags code, queue offset


def unit_mismatch(
    data: bytes | None, phy: int, size: int, topic: bytes, queue_id: int, queue_offset: int
) -> str | None:
    """Why the unit ``(phy, size)`` at ``queue_offset`` of ``topic``/``queue_id`` disagrees with
    ``data`` (the ``size`` bytes read at ``phy``), or None when it agrees. A fixed-offset check
    for V1 records with IPv4 hosts (a few µs), ``decode_record`` for other layouts."""
    if data is None or len(data) != size or size < 91:
        return f"no record of {size} bytes at offset {phy}"
    # the common case (V1 magic, IPv4 hosts, everything matching) by slices: a read checks every
    # unit, so this runs once per message read
    # (a record of another layout, V2 or IPv6 hosts, fails the topic test here and is judged
    # below; a PHYSICALOFFSET equal to ``phy`` means a record really starts there)
    if (
        data[20:36] == _QQ.pack(queue_offset, phy)
        and data[12:16] == queue_id.to_bytes(4, "big", signed=True)
        and data[0:4] == size.to_bytes(4, "big")
        and data[(t := 88 + int.from_bytes(data[84:88], "big")) : t + 1 + len(topic)]
        == len(topic).to_bytes(1, "big") + topic
    ):
        return None
    total, magic, _crc, qid, _flag, qoff, pos, sys_flag = _HEAD.unpack_from(data)
    if total != size:
        return f"the record at offset {phy} has TOTALSIZE {total}, the unit says {size}"
    if magic == rec.MESSAGE_MAGIC_CODE and not sys_flag & 0x30:
        body_len = int.from_bytes(data[84:88], "big", signed=True)
        t = 88 + body_len
        if body_len < 0 or t + 1 > size:
            return f"the record at offset {phy} does not decode"
        tl = data[t]
        got = data[t + 1 : t + 1 + tl]
    elif magic in (rec.MESSAGE_MAGIC_CODE, rec.MESSAGE_MAGIC_CODE_V2):
        view = rec.decode_record(data, 0, check_crc=False, read_body=False)
        if view.kind is not rec.RecordKind.MESSAGE:
            return f"the record at offset {phy} does not decode ({view.reason})"
        got = view.topic.encode("utf-8")
    else:
        return f"no message record at offset {phy} (magic 0x{magic & 0xFFFFFFFF:08X})"
    if pos != phy:
        return f"the record at offset {phy} says it is at offset {pos}"
    if got != topic or qid != queue_id:
        return f"the record at offset {phy} belongs to {got.decode('utf-8', 'replace')}-{qid}"
    if qoff != queue_offset:
        return f"the record at offset {phy} has queue offset {qoff}, the unit is at {queue_offset}"
    if rec.transaction_type(sys_flag) not in _QUEUED_TRANSACTION_TYPES:
        return f"the record at offset {phy} is a transaction record no queue holds"
    return None


def collect_units(
    commitlog: CommitLog,
    keys: Collection[Key],
    end: int,
    *,
    delay_levels: dict[int, int] | None,
    damaged: dict[int, int] | None = None,
) -> dict[Key, list[Unit]]:
    """The units of the queues ``keys`` as the CommitLog says, from its minimum offset to ``end``
    (a record boundary: where dispatch stands), in CommitLog order. Walks the CommitLog's
    segments with the dispatch parser (BLANKs, quarantined ranges and damage handled as dispatch
    does); a DLedger store adds the records of its entries (``DLedgerMessageStore``)."""
    take, out = unit_collector(keys)
    _walk(commitlog, take, 0, end, delay_levels=delay_levels, damaged=damaged)
    return out


def unit_collector(
    keys: Collection[Key],
) -> tuple[Callable[[list[DispatchRequest]], None], dict[Key, list[Unit]]]:
    """A dispatcher that keeps the units of the queues ``keys`` from the requests it is given,
    and the lists it appends them to (key → units, in the order given)."""
    wanted = set(keys)
    topics = {topic for topic, _ in wanted}
    out: dict[Key, list[Unit]] = {key: [] for key in wanted}

    def take(requests: list[DispatchRequest]) -> None:
        for topic in topics:
            if isinstance(requests, DispatchBatch):
                mine = requests.of_topic(topic)
            else:
                mine = [r for r in requests if r.topic == topic]
            for r in mine:
                units = out.get((r.topic, r.queue_id))
                if units is not None and rec.transaction_type(r.sys_flag) in _QUEUED_TRANSACTION_TYPES:
                    units.append((r.commit_log_offset, r.msg_size, r.tags_code, r.consume_queue_offset))

    return take, out


def _walk(
    commitlog: CommitLog,
    dispatcher: Callable[[list[DispatchRequest]], None],
    start: int,
    end: int,
    *,
    delay_levels: dict[int, int] | None,
    damaged: dict[int, int] | None,
) -> None:
    """Feed the dispatch requests of ``[start, end)`` to ``dispatcher`` with dispatch's own walk."""
    walker = ReputMessageService(
        commitlog,
        [dispatcher],
        limit=lambda: end,
        roll_next_file=commitlog.roll_next_file,
        min_offset=lambda: max(0, commitlog.min_offset),
        delay_levels=delay_levels,
    )
    walker.damaged = dict(damaged or {})
    walker.at_rest = True
    walker.reput_from_offset = max(start, 0, commitlog.min_offset)
    walker.do_reput()


def dedupe(units: list[Unit]) -> tuple[list[Unit], int]:
    """The units (in CommitLog order) whose queue offsets are consistent, each queue offset once;
    returns them and how many were dropped.

    QUEUEOFFSET is not covered by the body CRC, so a damaged record can claim any queue offset
    (a store written before queue offsets were kept unique can also hold two records with one).
    Two units of a queue, at physical offsets ``p1 < p2`` with queue offsets ``q1`` and ``q2``,
    are consistent when ``q1 < q2`` and the records of the queue offsets from ``q1`` up to ``q2``
    fit between them: each takes at least 91 bytes (the smallest record), so
    ``91 * (q2 - q1) <= p2 - p1``. The largest set of pairwise consistent units is kept. Both
    conditions are transitive, so it is the longest chain strictly increasing in the queue offset
    and non-decreasing in ``p - 91 * q`` (which makes the physical offset increase too): units
    sorted by queue offset, the later record first within one, and the longest non-decreasing
    run of that value among them (patience sorting).

    The whole set is weighed, not the first unit against the rest: a damaged record whose queue
    offset is too small for its place (its queue's earlier records cut or quarantined) is the one
    dropped, not every intact record after it that its claim leaves no room for. Of two records
    claiming one queue offset that end equally long chains, the earlier is kept, as dispatch
    keeps the first unit put at a queue offset."""
    if not units:
        return [], 0
    slacks = [phy - _MIN_RECORD * queue_offset for phy, _size, _tags, queue_offset in units]
    order: range | list[int] = range(len(units))
    if any(a[3] >= b[3] for a, b in itertools.pairwise(units)):  # not in queue-offset order already
        order = sorted(order, key=lambda i: (units[i][3], -units[i][0]))
    tails: list[int] = []  # smallest p - 91 * q ending a chain of each length
    tail_at: list[int] = []  # index of that unit
    back = [-1] * len(units)
    for i in order:
        slack = slacks[i]
        k = bisect.bisect_right(tails, slack)
        if k == len(tails):
            tails.append(slack)
            tail_at.append(i)
        else:
            tails[k] = slack
            tail_at[k] = i
        back[i] = tail_at[k - 1] if k else -1
    chain: list[int] = []
    i = tail_at[-1]
    while i >= 0:
        chain.append(i)
        i = back[i]
    chain.reverse()
    return [units[i] for i in chain], len(units) - len(chain)


_MIN_RECORD = 91


#: A check of one unit against the CommitLog: (queue offset, physical offset, size) → reason.
UnitCheck = Callable[[int, int, int], str | None]
