"""Reads of the MessageStore: a queue's messages, lookups by offset, id, key and time, and stats.

Theory of operation: every read goes from a ConsumeQueue unit (20 bytes: CommitLog offset,
size, tag hash) or an index entry to the CommitLog record it names; nothing here writes.

* ``get_message`` (a pull): the units from a queue offset, filtered by tag hash, each checked
  against its record's header (TOTALSIZE, queue id, queue offset, physical offset, topic) and
  answered as the raw record bytes. The check runs in place on the mapped segment, held once per
  run of units in it (one ``struct`` unpack and a topic compare per unit); a unit that fails it
  is judged by ``cq_repair.unit_mismatch`` on a copy (other record layouts, or damage). A unit
  that disagrees gets its queue rebuilt from the CommitLog (``StoreRecovery.rebuild_queues``)
  and the read runs once more. The records are joined once into the answer's body from
  ``memoryview`` slices of the segment, all released before the read returns. Statuses and the
  next offset follow RocketMQ's ``getMessage`` for offsets outside ``[min, max)``.
* by physical offset and offset message id: the record at that CommitLog offset;
  by key: the index's candidates, checked against the message's real keys (hash collisions
  are dropped); by time: a binary search of the queue on the records' store timestamps.
* ``runtime_info`` and :class:`StoreStats`: the figures the broker reports.
* Read your writes: where dispatch runs in windows (the broker's ``inline_dispatch_interval_ms``),
  a record can be written and its send answered while its window still waits for its time.
  Every read of a ConsumeQueue or the index here first settles such a pending window
  (:attr:`StoreQueries.dispatch_window`, set by the broker): on the loop that owns it the window
  is dispatched at once; from another thread the read waits, bounded, for the dispatch thread.
  So an offset query, a lag figure or a pull that follows an answered send finds its message,
  as without windows. With no window pending the check is one attribute test.

:class:`StoreQueries` is a base class of :class:`~rocketq.store.message_store.MessageStore`; it
holds no state of its own.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from rocketq.config import StoreConfig
from rocketq.message import MessageExt, decode_offset_msg_id
from rocketq.protocol import record as rec
from rocketq.protocol.record import view_to_message
from rocketq.store.commitlog import CommitLog
from rocketq.store.consume_queue import FILLER_SIZE, ConsumeQueue, ConsumeQueueStore
from rocketq.store.cq_repair import unit_mismatch
from rocketq.store.dispatch import ReputMessageService
from rocketq.store.index_file import IndexService
from rocketq.store.mapped_file import MappedFile
from rocketq.store.record_scan import SCHEDULE_TOPIC

#: TOTALSIZE, QUEUEID, QUEUEOFFSET, PHYSICALOFFSET of a record (what a ConsumeQueue unit names)
_CHECK = struct.Struct(">i8xi4xqq")
#: BODYLEN of a V1 record with IPv4 hosts (at byte 84), read as RocketMQ's unit check reads it
_BODY_LEN = struct.Struct(">I")


#: reads of a queue made again, each after waiting for the rebuild it overlapped, before the
#: last one holds rebuilds off (``StoreQueries.get_message``)
_REREADS = 2


def _no_segment(offset: int) -> MappedFile | None:
    return None


class _Settle(Protocol):
    """A dispatch window that can be run before its time (see the module docstring)."""

    @property
    def pending(self) -> bool: ...

    def settle(self) -> None: ...


#: the façade's logger: read problems read as the store's
log = logging.getLogger("rocketq.store.message_store")


class GetMessageStatus(StrEnum):
    """RocketMQ ``GetMessageStatus``."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


class GetMessageResult:
    """Result of :meth:`MessageStore.get_message`. ``body`` is what a pull response carries: the
    raw CommitLog records one after another, joined once from slices of the mapped segments;
    ``buffers`` are the same records one by one (cut from ``body`` the first time they are asked
    for, or given, as a filter that drops records does); ``messages`` decodes them."""

    __slots__ = (
        "_body",
        "_buffers",
        "_ends",
        "buffer_total_size",
        "max_offset",
        "min_offset",
        "next_begin_offset",
        "queue_offsets",
        "status",
    )

    def __init__(
        self,
        status: GetMessageStatus,
        next_begin_offset: int,
        min_offset: int,
        max_offset: int,
        buffers: list[bytes] | None = None,
        queue_offsets: list[int] | None = None,
        buffer_total_size: int = 0,
    ) -> None:
        self.status = status
        self.next_begin_offset = next_begin_offset
        self.min_offset = min_offset
        self.max_offset = max_offset
        self.queue_offsets: list[int] = queue_offsets if queue_offsets is not None else []
        self.buffer_total_size = buffer_total_size
        self._buffers: list[bytes] | None = buffers if buffers is not None else []
        self._body: bytes | None = None
        self._ends: list[int] = []

    def _set_body(self, body: bytes, ends: list[int]) -> None:
        """The records as one bytes object, record ``i`` ending at ``ends[i]``."""
        self._body = body
        self._ends = ends
        self._buffers = None
        self.buffer_total_size = len(body)

    @property
    def buffers(self) -> list[bytes]:
        if self._buffers is None:
            body = self._body or b""
            starts = [0, *self._ends[:-1]]
            self._buffers = [body[a:b] for a, b in zip(starts, self._ends, strict=True)]
        return self._buffers

    @buffers.setter
    def buffers(self, value: list[bytes]) -> None:
        self._buffers = value
        self._body = None
        self._ends = []

    @property
    def body(self) -> bytes:
        """The records joined: the body of a pull response."""
        if self._body is None:
            self._body = b"".join(self._buffers or ())
        return self._body

    @property
    def messages(self) -> list[MessageExt]:
        out = []
        for buf in self.buffers:
            view = rec.decode_record(buf, 0, check_crc=False)
            if view.kind is rec.RecordKind.MESSAGE:
                out.append(view_to_message(view))
        return out

    @property
    def message_count(self) -> int:
        return len(self._buffers) if self._buffers is not None else len(self._ends)

    def __repr__(self) -> str:
        return (
            f"GetMessageResult({self.status.value}, next_begin_offset={self.next_begin_offset}, "
            f"min_offset={self.min_offset}, max_offset={self.max_offset}, messages={self.message_count})"
        )


@dataclass(frozen=True, slots=True)
class QueryMessageResult:
    messages: list[MessageExt]
    index_last_update_timestamp: int
    index_last_update_phy_offset: int


@dataclass(slots=True)
class StoreStats:
    put_count: int = 0
    put_bytes: int = 0
    put_failures: int = 0
    get_count: int = 0
    get_found: int = 0
    queues_rebuilt: int = 0


class StoreQueries:
    """The read side of the MessageStore (see the module docstring)."""

    config: StoreConfig
    commitlog: CommitLog
    consume_queues: ConsumeQueueStore
    index_service: IndexService | None
    reput: ReputMessageService | None
    stats: StoreStats
    last_exit_ok: bool
    recovery_seconds: float
    quarantined: list[tuple[int, int, str]]
    rebuild_queues: Callable[[dict[tuple[str, int], str]], None]
    #: the pending dispatch window to settle before a queue or index read (a
    #: :class:`~rocketq.broker.loop_coalesce.LoopWakeup`); None: dispatch is not windowed
    dispatch_window: _Settle | None = None

    def _settle_dispatch(self) -> None:
        """Before a read of the queues or the index: take a dispatch window still waiting for its
        time (see the module docstring; one attribute test when there is none)."""
        window = self.dispatch_window
        if window is not None and window.pending:
            window.settle()

    def dispatch_behind_bytes(self) -> int:
        return self.reput.behind() if self.reput is not None else 0

    # -- consume queue reads ----------------------------------------------------------------
    def find_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        self._settle_dispatch()
        return self.consume_queues.find(topic, queue_id)

    def get_max_offset(self, topic: str, queue_id: int) -> int:
        """The next queue offset to be written (0 for an unknown queue)."""
        self._settle_dispatch()
        cq = self.consume_queues.find(topic, queue_id)
        return cq.max_offset_in_queue if cq is not None else 0

    def get_min_offset(self, topic: str, queue_id: int) -> int:
        self._settle_dispatch()
        cq = self.consume_queues.find(topic, queue_id)
        return cq.min_offset_in_queue if cq is not None else -1

    def get_offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset stored at or after ``timestamp_ms`` (RocketMQ semantics)."""
        self._settle_dispatch()
        cq = self.consume_queues.find(topic, queue_id)
        if cq is None:
            return 0
        return cq.get_offset_in_queue_by_time(timestamp_ms, self._store_time_of)

    def _store_time_of(self, physical_offset: int, size: int) -> int | None:
        data = self.commitlog.read(physical_offset, min(size, 64))
        if data is None or len(data) < 56:
            return None
        sys_flag = int.from_bytes(data[36:40], "big", signed=True)
        pos = 48 + rec.host_width(sys_flag, store=False)
        if len(data) < pos + 8:
            return None
        return int.from_bytes(data[pos : pos + 8], "big", signed=True)

    def get_commitlog_offset_in_queue(self, topic: str, queue_id: int, offset: int) -> int:
        self._settle_dispatch()
        cq = self.consume_queues.find(topic, queue_id)
        unit = cq.get_unit(offset) if cq is not None else None
        return unit.offset if unit is not None else 0

    def get_message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        self._settle_dispatch()
        cq = self.consume_queues.find(topic, queue_id)
        unit = cq.get_unit(offset) if cq is not None else None
        if unit is None or unit.size == FILLER_SIZE:
            return -1
        return self._store_time_of(unit.offset, unit.size) or -1

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        self._settle_dispatch()
        cq = self.consume_queues.find(topic, queue_id)
        if cq is None:
            return -1
        return self.get_message_store_timestamp(topic, queue_id, cq.min_offset_in_queue)

    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int = 32,
        tags_codes: Collection[int] | None = None,
        *,
        max_bytes: int = 256 * 1024,
    ) -> GetMessageResult:
        """Read up to ``max_count`` messages of a queue from ``offset`` (RocketMQ ``getMessage``).

        ``tags_codes``: the subscription's tag hash codes; None (or ``"*"``) matches every message.
        Statuses and the next offset follow RocketMQ's rules for offsets outside ``[min, max)``.
        A read that overlapped a rebuild of queues (``rebuild_queues``, in another thread or this
        one) is made again once the rebuild is over: the rebuilt queue is empty, then half
        filled, before it is whole, and its old files are gone, so the first read could find no
        queue, an end before the consumer's offset (which would move the consumer back to 0) or
        no units where there are messages.
        """
        self.stats.get_count += 1
        cqs = self.consume_queues
        generation = cqs.repair_generation
        result = self._get_message(group, topic, queue_id, offset, max_count, tags_codes, max_bytes, False)
        # read again after a rebuild as after one this read asked for: a unit that still
        # disagrees is skipped, not rebuilt once more
        again = (group, topic, queue_id, offset, max_count, tags_codes, max_bytes, True)
        for _ in range(_REREADS):
            if cqs.repair_generation == generation and not generation & 1:
                return result
            with cqs.repair_lock:  # the rebuild is over once this is held
                generation = cqs.repair_generation
            result = self._get_message(*again)
        if cqs.repair_generation == generation and not generation & 1:
            return result
        with cqs.repair_lock:  # rebuild after rebuild: the last read with them held off
            return self._get_message(*again)

    def _get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        tags_codes: Collection[int] | None,
        max_bytes: int,
        repaired: bool,
    ) -> GetMessageResult:
        """:meth:`get_message`, once (``repaired``: after a rebuild this read asked for)."""
        self._settle_dispatch()
        cq = self.consume_queues.find(topic, queue_id)
        if cq is None:
            return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        min_off = cq.min_offset_in_queue
        max_off = cq.max_offset_in_queue
        if max_off == 0:
            return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, min_off, max_off)
        if offset < min_off:
            return GetMessageResult(GetMessageStatus.OFFSET_TOO_SMALL, min_off, min_off, max_off)
        if offset == max_off:
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, min_off, max_off)
        if offset > max_off:
            nxt = min_off if min_off == 0 else max_off
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_BADLY, nxt, min_off, max_off)
        result = GetMessageResult(GetMessageStatus.NO_MATCHED_MESSAGE, offset, min_off, max_off)
        units = cq.get_units(offset, max(max_count, 1) * 4 if tags_codes else max(max_count, 1))
        if len(units) == 0:
            result.status = GetMessageStatus.OFFSET_FOUND_NULL
            result.next_begin_offset = offset + 1 if offset + 1 < max_off else offset
            return result
        commitlog = self.commitlog
        commitlog_min = commitlog.min_offset
        status = GetMessageStatus.NO_MATCHED_MESSAGE
        scanned = 0
        codes = None if tags_codes is None else set(tags_codes)
        topic_b = topic.encode()
        topic_head = len(topic_b).to_bytes(1, "big") + topic_b if len(topic_b) < 256 else b""
        topic_span = 1 + len(topic_b)  # TOPICLEN and the topic
        # records are read in place from the segments only where the CommitLog keeps them there
        # (a DLedger CommitLog reads its entries from the ledger: every read goes through read())
        find = commitlog.queue.find_by_offset if type(commitlog).read is CommitLog.read else _no_segment
        file_size = commitlog.file_size
        views: list[memoryview] = []
        bases: list[memoryview] = []
        ends: list[int] = []
        queue_offsets = result.queue_offsets
        held: list[MappedFile] = []
        mapped: memoryview | None = None
        lo = hi = readable = 0
        total = 0
        problem: tuple[int, str] | None = None
        check = _CHECK.unpack_from
        body_len = _BODY_LEN.unpack_from
        try:
            for phy, size, tags in zip(
                units["offset"].tolist(), units["size"].tolist(), units["tags"].tolist(), strict=True
            ):
                if len(views) >= max_count or (views and total + size > max_bytes):
                    break
                scanned += 1
                if size == FILLER_SIZE or size <= 0:
                    continue
                if phy < commitlog_min:
                    status = GetMessageStatus.MESSAGE_WAS_REMOVING
                    continue
                if codes is not None and tags not in codes:
                    continue
                where = offset + scanned - 1
                if not lo <= phy < hi:
                    mf = find(phy)
                    mapped = None
                    lo = hi = 0
                    if mf is not None and mf.hold():
                        held.append(mf)
                        mapped = memoryview(mf.mm)
                        bases.append(mapped)
                        lo = mf.file_from_offset
                        hi = lo + file_size
                        readable = mf.read_position
                pos = phy - lo
                # The unit agrees with its record when the record's TOTALSIZE, QUEUEID,
                # QUEUEOFFSET, PHYSICALOFFSET and topic are the unit's (V1 layout, IPv4 hosts:
                # read in place, one unpack); anything else is judged by unit_mismatch on a copy.
                if (
                    mapped is not None
                    and size >= 91
                    and pos + size <= readable
                    and check(mapped, pos) == (size, queue_id, where, phy)
                    and (t := pos + 88 + body_len(mapped, pos + 84)[0]) + topic_span <= pos + size
                    and mapped[t : t + topic_span] == topic_head
                ):
                    piece = mapped[pos : pos + size]
                else:
                    data = commitlog.read(phy, size)
                    if data is None and phy + size <= commitlog.min_offset:
                        status = GetMessageStatus.MESSAGE_WAS_REMOVING
                        continue
                    bad = unit_mismatch(data, phy, size, topic_b, queue_id, where)
                    if bad is not None:
                        if not repaired:
                            problem = (where, bad)
                            break
                        log.error(
                            "%s-%d: unit %d still disagrees after a rebuild (%s); skipped",
                            topic,
                            queue_id,
                            where,
                            bad,
                        )
                        continue
                    if data is None:
                        continue
                    piece = memoryview(data)
                total += size
                views.append(piece)
                ends.append(total)
                queue_offsets.append(where)
            if problem is None and ends:
                body = b"".join(views)
        finally:
            for v in views:
                v.release()
            for v in bases:
                v.release()
            for mf in held:
                mf.release()
        if problem is not None:
            # The unit disagrees with the CommitLog: rebuild the queue, then read again.
            self.rebuild_queues({(topic, queue_id): f"unit {problem[0]} read: {problem[1]}"})
            return self._get_message(group, topic, queue_id, offset, max_count, tags_codes, max_bytes, True)
        result.next_begin_offset = offset + scanned
        if ends:
            result._set_body(body, ends)
            status = GetMessageStatus.FOUND
            self.stats.get_found += len(ends)
        result.status = status
        return result

    # -- delayed delivery hooks -------------------------------------------------------------
    def schedule_queue_bounds(self, queue_id: int) -> tuple[int, int]:
        self._settle_dispatch()
        cq = self.consume_queues.find(SCHEDULE_TOPIC, queue_id)
        if cq is None:
            return 0, 0
        return cq.min_offset_in_queue, cq.max_offset_in_queue

    def schedule_queue_units(self, queue_id: int, start: int, max_count: int) -> list[tuple[int, int, int]]:
        self._settle_dispatch()
        cq = self.consume_queues.find(SCHEDULE_TOPIC, queue_id)
        if cq is None:
            return []
        units = cq.get_units(start, max_count)
        return [
            (-1, 0, 0) if size == FILLER_SIZE else (phy, size, tags)
            for phy, size, tags in zip(
                units["offset"].tolist(), units["size"].tolist(), units["tags"].tolist(), strict=True
            )
        ]

    # -- lookups ----------------------------------------------------------------------------
    def look_message_by_offset(self, physical_offset: int, size: int | None = None) -> MessageExt | None:
        """The message whose record starts at ``physical_offset``."""
        return self.commitlog.get_message(physical_offset, size)

    def select_one_message_by_offset(self, physical_offset: int, size: int | None = None) -> bytes | None:
        """The raw record starting at ``physical_offset`` (the bytes VIEW_MESSAGE_BY_ID and
        QUERY_MESSAGE answer with), or None when no message record starts there."""
        if size is None:
            head = self.commitlog.read(physical_offset, 4)
            if head is None or len(head) < 4:
                return None
            size = int.from_bytes(head, "big", signed=True)
        if size <= 0:
            return None
        data = self.commitlog.read(physical_offset, size)
        if data is None:
            return None
        view = rec.decode_record(data, 0, check_crc=False, read_body=False)
        if view.kind is not rec.RecordKind.MESSAGE or view.physical_offset != physical_offset:
            return None
        return data

    def look_message_by_id(self, msg_id: str) -> MessageExt | None:
        """Look up by offset message id (the broker-generated ``msgId``)."""
        try:
            parsed = decode_offset_msg_id(msg_id)
        except ValueError:
            return None
        return self.look_message_by_offset(parsed.offset)

    def query_messages_by_key(
        self,
        topic: str,
        key: str,
        max_count: int = 32,
        begin_ms: int = 0,
        end_ms: int | None = None,
    ) -> QueryMessageResult:
        """Messages of ``topic`` indexed under ``key`` (a KEYS entry or the UNIQ_KEY) in the time
        range, oldest first. Beyond RocketMQ: hash collisions are filtered out here by checking the
        message's real keys."""
        if self.index_service is None:
            return QueryMessageResult([], 0, 0)
        self._settle_dispatch()
        end = end_ms if end_ms is not None else time.time_ns() // 1_000_000 + 1
        max_count = max(1, min(max_count, self.config.max_msgs_num_batch))
        found: dict[int, MessageExt] = {}
        last_ts = last_phy = 0
        for _ in range(3):  # RocketMQ narrows the window up to three times
            q = self.index_service.query_offset(topic, key, max_count, begin_ms, end)
            last_ts, last_phy = q.index_last_update_timestamp, q.index_last_update_phy_offset
            if not q.phy_offsets:
                break
            for phy in sorted(q.phy_offsets):
                if phy in found:
                    continue
                m = self.look_message_by_offset(phy)
                if m is None or m.topic != topic or (key not in m.keys and m.uniq_key != key):
                    continue
                found[phy] = m
                if len(found) >= max_count:
                    break
            if len(found) >= max_count or len(q.phy_offsets) < max_count:
                break
            first_ts = min(m.store_timestamp for m in found.values()) if found else end
            if first_ts >= end:
                break
            end = first_ts
        msgs = sorted(found.values(), key=lambda m: m.commit_log_offset)[:max_count]
        return QueryMessageResult(msgs, last_ts, last_phy)

    # -- stats ------------------------------------------------------------------------------
    def get_max_phy_offset(self) -> int:
        return self.commitlog.max_offset

    def get_min_phy_offset(self) -> int:
        return self.commitlog.min_offset

    def runtime_info(self) -> dict[str, str]:
        """Store figures in the spirit of RocketMQ's broker runtime info."""
        return {
            "commitLogMinOffset": str(self.commitlog.min_offset),
            "commitLogMaxOffset": str(self.commitlog.max_offset),
            "commitLogFlushedOffset": str(self.commitlog.flushed_where),
            "dispatchBehindBytes": str(self.dispatch_behind_bytes()),
            "putMessageTimesTotal": str(self.stats.put_count),
            "putMessageSizeTotal": str(self.stats.put_bytes),
            "putMessageFailedTimes": str(self.stats.put_failures),
            "getMessageTimesTotal": str(self.stats.get_count),
            "getMessageFoundTotal": str(self.stats.get_found),
            "consumeQueueCount": str(len(self.consume_queues)),
            "startupRecoverMillis": str(int(self.recovery_seconds * 1000)),
            "lastExitOk": str(self.last_exit_ok).lower(),
            "commitLogQuarantinedRanges": str(len(self.quarantined)),
            "consumeQueuesRebuilt": str(self.stats.queues_rebuilt),
            # offset:bytes of each damaged range recovery skipped (files in quarantine/)
            "commitLogQuarantine": ",".join(f"{off}:{size}" for off, size, _ in self.quarantined),
        }
