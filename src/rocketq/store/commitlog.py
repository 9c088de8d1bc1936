"""CommitLog: the single append-only log every message of every topic is written to.

Write path (``put_message`` / ``put_messages``)::

    validate limits, encode topic, CRC the body           (outside the lock: nothing written yet)
    ── put lock ──────────────────────────────────────────────────────────────────────────────
    last segment (roll if full) → does length + 8 fit?  no → 8-byte BLANK, roll, write in next
    stamp STORETIMESTAMP and PHYSICALOFFSET, assign QUEUEOFFSET from the topic-queue table
    pack the first record with TOTALSIZE = 0, every further record of a batch whole,
    then write the first record's TOTALSIZE                 (commit point of the put)
    ── unlock ────────────────────────────────────────────────────────────────────────────────
    SYNC_FLUSH: wait for group commit (bounded: FLUSH_DISK_TIMEOUT)   ASYNC_FLUSH: return

Invariants:

* records are contiguous inside a segment; a segment ends with a BLANK marker or never-written
  zeros; a record never ends within the last 8 bytes of a segment;
* the first TOTALSIZE of a put is written last, so a process killed mid-append leaves a zero
  TOTALSIZE where the put starts, where the recovery scan ends (a torn record): a killed put
  (one message or a whole batch) is recovered entirely or not at all, never as a valid message
  with missing bytes;
* queue offsets are consecutive per (topic, queue id), assigned under the put lock, and only to
  normal and COMMIT records (PREPARED/ROLLBACK records carry queue offset 0, as in RocketMQ);
* a rejected message (too large, bad topic) writes nothing and consumes no queue offset.

The compiled lane (where ``rocketq._speedups`` is in use): a plain CommitLog owns a
:class:`~rocketq.store.commitlog_lifecycle.PutLane` (``put_lane``), and ``put_message`` first
offers the message to it. ``lane.put`` is the fast path below in one C call, from the topic-cache
lookup to the result: a topic and (body, properties) shape already in the caches, no transaction
bits, an IPv4 born host, every field an exact int or bytes in range, ASYNC_FLUSH, the CommitLog
taking writes, room in the current segment, a queue offset that opens no ConsumeQueue file. It
writes the record with the same writer as ``put_record`` (TOTALSIZE last), advances the queue
offset, ``wrote_position`` and ``store_timestamp``, calls ``after_put`` and returns the same
``PutMessageResult``; for anything else it returns None having read into and changed nothing,
and the Python path (the reference) runs. MessageStore.put_message calls ``lane.store_put``,
which adds the store's part in the same call (a Message converted as ``message_inner`` does, its
properties text written straight into the record, or a BrokerMessage that nothing parks; the
put counts and the lag count).

The lane's state is the CommitLog's: the topic, shape and queue-offset dicts are shared objects;
the current segment, its write target and first offset are copied into the lane by ``_roll``,
``_accepting`` by ``_update_accepting`` and ``_after_put`` by ``_update_after_put`` (with the
dispatch service's wake-up Event, whose flag the lane reads instead of calling a wake-up that
would do nothing); ``wrote_position`` is read from the segment at every put. The put lock is
never waited for in C: while any thread holds it the lane hands the put back (the Python path
waits for it); when it is free the lane writes holding the GIL from the lock test to the last
update, calling nothing that runs Python code or starts a garbage collection meanwhile, so no
other thread can be inside or see the critical section half done. A subclass (the DLedger
CommitLog) has no lane; ``ROCKETQ_PURE=1`` turns it off with the rest of the compiled module.

One idea: the writes under the put lock (a message, a batch of messages, a batch send packed
from its body by the compiled ``batch_write``, :mod:`rocketq.store.packed_batch`) and the reads
of records. Beside it: ``commitlog_encode.py``
(validation and record layouts for the general path; the fast paths use its cached layouts
directly), ``commitlog_lifecycle.py`` (segments, flush/commit services, start and stop, positions,
the writable flag) and ``queue_offsets.py`` (the topic-queue offset table).
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from enum import StrEnum
from itertools import accumulate
from operator import itemgetter

from rocketq import speedups as _speedups
from rocketq.config import FlushDiskType, StoreConfig
from rocketq.errors import MessageIllegal, ServiceNotAvailable, StoreNotWritable
from rocketq.message import (
    BrokerMessage,
    MessageExt,
    create_offset_msg_id,
    pack_socket_addr,
)
from rocketq.protocol import record as rec
from rocketq.protocol.record import MESSAGE_MAGIC_CODE
from rocketq.store import record_scan
from rocketq.store.allocate import AllocateMappedFileService
from rocketq.store.commitlog_encode import RECORD_SLACK, RecordEncoder, TopicInfo
from rocketq.store.commitlog_lifecycle import CommitLogLifecycle, PutLane
from rocketq.store.flush import (
    CommitRealTimeService,
    FlushListener,
    FlushRealTimeService,
    GroupCommitService,
)
from rocketq.store.mapped_file import MappedFile, MappedFileQueue
from rocketq.store.packed_batch import PackedBatch, batch_write
from rocketq.store.queue_offsets import QueueOffsetTable
from rocketq.store.transient_pool import TransientStorePool

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_size_into = _SIZE.pack_into  # bound once: saves the put an attribute lookup
_crc32 = zlib.crc32
_time_ns = time.time_ns
_BLANK = struct.Struct(">ii")
#: The record write of :meth:`CommitLog.put_message` compiled (``rocketq._speedups.put_record``:
#: the same bytes as the layout's ``pack_into`` and TOTALSIZE last; False, nothing written, for
#: any value it does not take, which the layout then packs), or None on the pure path.
_put_record: Callable[..., bool] | None = getattr(_speedups.COMPILED, "put_record", None)
if _put_record is not None:
    _speedups.COMPILED.setup_put_record(BrokerMessage)  # type: ignore[union-attr]


class PutMessageStatus(StrEnum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"


class PutMessageResult(tuple[PutMessageStatus, int, int, int, int, bytes, int, "list[int] | None"]):
    """Outcome of a put: ``status``, ``physical_offset`` (of the first record), ``size`` (bytes
    written), ``queue_offset`` (of the first message), ``store_timestamp``, ``msg_num`` and, for a
    batch, ``physical_offsets``. ``msg_id``/``msg_ids`` (offset message ids) are computed on access.

    A tuple underneath: a put creates one per call, and tuples are the cheapest objects to make.
    Built from the 8-tuple of those fields, ``PutMessageResult((status, physical_offset, size,
    queue_offset, store_timestamp, store_host, msg_num, physical_offsets))``, or with
    :meth:`of`. The class defines no ``__new__`` of its own on purpose: calling the type then
    goes straight to tuple's constructor, which costs a put about a third less than a Python
    ``__new__`` or ``tuple.__new__(cls, ...)`` (an unbound slot wrapper call).
    """

    __slots__ = ()

    @classmethod
    def of(
        cls,
        status: PutMessageStatus,
        physical_offset: int,
        size: int,
        queue_offset: int,
        store_timestamp: int,
        store_host: bytes,
        msg_num: int = 1,
        physical_offsets: list[int] | None = None,
    ) -> PutMessageResult:
        return cls(
            (
                status,
                physical_offset,
                size,
                queue_offset,
                store_timestamp,
                store_host,
                msg_num,
                physical_offsets,
            )
        )

    status = property(itemgetter(0))
    physical_offset = property(itemgetter(1))
    size = property(itemgetter(2))
    queue_offset = property(itemgetter(3))
    store_timestamp = property(itemgetter(4))
    msg_num = property(itemgetter(6))
    physical_offsets = property(itemgetter(7))

    def with_status(self, status: PutMessageStatus) -> PutMessageResult:
        return PutMessageResult((status, *self[1:]))

    @property
    def ok(self) -> bool:
        return self[0] is PutMessageStatus.PUT_OK

    @property
    def next_offset(self) -> int:
        """Physical offset just past the last record written."""
        return int(self[1] + self[2])

    @property
    def msg_id(self) -> str:
        """Offset message id; for a batch, the ids joined with commas (as RocketMQ does)."""
        return ",".join(self.msg_ids)

    @property
    def msg_ids(self) -> list[str]:
        offsets = self[7] if self[7] is not None else [self[1]]
        if offsets[0] < 0:  # never written so; the signed form of create_offset_msg_id
            return [create_offset_msg_id(self[5], off) for off in offsets]
        # create_offset_msg_id's text for offsets in ascending order from 0 up: the host's hex
        # once, then 16 hex digits per offset (a batch's ids cost a fifth of one call each)
        host = self[5].hex().upper()
        return [f"{host}{off:016X}" for off in offsets]

    def __repr__(self) -> str:
        return (
            f"PutMessageResult({self[0].value}, offset={self[1]}, size={self[2]}, "
            f"queue_offset={self[3]}, msg_num={self[6]})"
        )


_second = itemgetter(1)
_PUT_OK = PutMessageStatus.PUT_OK
#: The compiled single put (``rocketq._speedups.put_lane``: a :class:`PutLane` per plain
#: CommitLog, see the module docstring), or None on the pure path.
_new_lane: Callable[..., PutLane] | None = getattr(_speedups.COMPILED, "put_lane", None)
if _new_lane is not None:
    _speedups.COMPILED.setup_put_lane(MappedFile, PutMessageResult, _PUT_OK)  # type: ignore[union-attr]


class CommitLog(RecordEncoder, CommitLogLifecycle):
    def __init__(self, config: StoreConfig, *, on_flushed: FlushListener | None = None) -> None:
        self.config = config
        self.file_size = config.mapped_file_size_commit_log
        self._store_host = pack_socket_addr(config.store_host)
        self._store_v6 = rec.STOREHOSTADDRESS_V6_FLAG if len(self._store_host) == 20 else 0
        self.transient_pool: TransientStorePool | None = None
        if config.transient_store_pool_active:
            self.transient_pool = TransientStorePool(config.transient_store_pool_size, self.file_size)
        self.allocator = AllocateMappedFileService(
            transient_pool=self.transient_pool,
            fast_fail_if_no_buffer=config.fast_fail_if_no_buffer_in_store_pool,
            warm_mapped_file=config.warm_mapped_file_enable,
            warm_min_size=self.file_size,
            sync_flush=config.flush_disk_type is FlushDiskType.SYNC_FLUSH,
            flush_least_pages_when_warm=config.flush_least_pages_when_warm_mapped_file,
            wait_timeout_ms=config.allocate_wait_timeout_ms,
        )
        self.queue = MappedFileQueue(config.commit_log_dir, self.file_size, allocator=self.allocator)
        self._put_lock = threading.Lock()
        self.topic_queue_table = QueueOffsetTable()
        self._topic_cache: dict[str, TopicInfo] = {}
        self._max_body = config.max_message_size
        self._max_record = config.max_message_size + RECORD_SLACK
        self._max_props = config.max_properties_size
        self._prop_crc = config.enabled_append_prop_crc
        self._sync = config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        self._sync_timeout_s = config.sync_flush_timeout_ms / 1000
        self.writable = True
        self.not_writable_reason = ""
        #: why writes are refused, by cause (set_writable); none: writable
        self._refusals: dict[str, tuple[str, type[ServiceNotAvailable]]] = {}
        self._running = False
        self._started = False
        self._accepting = False  # running and writable: the one flag the put path reads
        self._not_writable_error: type[ServiceNotAvailable] = StoreNotWritable
        self._store_host_len = len(self._store_host)
        self._v1_base_len = 72 + 8 + self._store_host_len + 1 + 2
        self._cur: MappedFile | None = None
        self._cur_target: mmap.mmap = mmap.mmap(-1, 8)  # replaced by _roll before any write
        self._cur_from = 0
        self._append_listener: Callable[[], None] | None = None
        self._after_put: Callable[[], None] | None = None
        #: Called under the put lock, before a record is written, for every message that opens a
        #: ConsumeQueue file (queue offset a multiple of ``_units_per_cq_file``) with (topic,
        #: queue id, queue offset): the store reserves that file's blocks there, so a full disk
        #: refuses the send (DiskFull) instead of acknowledging a message dispatch cannot index.
        self.reserve_queue_file: Callable[[str, int, int], None] | None = None
        self._units_per_cq_file = max(1, config.consume_queue_file_size // 20)
        self.group_commit: GroupCommitService | None = None
        self.flush_service: GroupCommitService | FlushRealTimeService
        if self._sync:
            self.group_commit = GroupCommitService(self.queue, on_flushed)
            self.flush_service = self.group_commit
        else:
            self.flush_service = FlushRealTimeService(
                self.queue,
                interval_ms=config.flush_interval_commit_log_ms,
                least_pages=config.flush_commit_log_least_pages,
                thorough_interval_ms=config.flush_commit_log_thorough_interval_ms,
                timed=config.flush_commit_log_timed,
                on_flushed=on_flushed,
            )
        self.commit_service: CommitRealTimeService | None = None
        if self.transient_pool is not None:
            self.commit_service = CommitRealTimeService(
                self.queue,
                interval_ms=config.commit_interval_commit_log_ms,
                least_pages=config.commit_commit_log_least_pages,
                thorough_interval_ms=config.commit_commit_log_thorough_interval_ms,
                flush_service=self.flush_service,
            )
        self._wake_commit = config.wake_commit_when_put_message and self.commit_service is not None
        #: The compiled single put (a plain CommitLog's only: a subclass has puts of its own).
        self._lane: PutLane | None = None
        if _new_lane is not None and type(self) is CommitLog:
            self._lane = _new_lane(
                self._put_lock, self._topic_cache, self._store_host, self._store_v6, self.file_size,
                self._units_per_cq_file, self._sync,
            )  # fmt: skip
        self._update_after_put()

    # -- write path -------------------------------------------------------------------------
    def put_message(self, m: BrokerMessage) -> PutMessageResult:
        """Append one message. Raises :class:`~rocketq.errors.MessageIllegal` (nothing written) or
        :class:`~rocketq.errors.ServiceNotAvailable`; returns FLUSH_DISK_TIMEOUT when a sync flush
        did not finish in time (the message is stored)."""
        # Fast path: a topic seen before, a (body, properties) length pair whose layout was already
        # compiled (only shapes within every limit are cached), an IPv4 born host, no transaction
        # bits. Everything else, including every error, goes through the batch path.
        #
        # This is the hottest code of the broker; per put it costs little more than the one
        # struct pack a bare writer needs (bench/store_write.py). What it saves, and how:
        # * the queue offset lives in the topic's own small dict (QueueOffsetTable), reached
        #   through the topic cache: no (topic, queue) key tuple to build and hash;
        # * acquire()/release() in try/finally instead of ``with``: the context-manager protocol
        #   costs two special-method lookups and a three-argument __exit__ call per put;
        # * everything read more than once is a local.
        # Before all that, the compiled lane takes the usual put whole (None: it did nothing).
        lane = self._lane
        if lane is not None:
            done = lane.put(m)
            if done is not None:
                return done
        body = m.body
        props = m.properties
        info = self._topic_cache.get(m.topic)
        if info is None:
            return self._put_single(m)
        shape = info[2].get(len(body) << 16 | len(props))
        if shape is None or m.sys_flag & 0x3C or len(m.born_host) != 8:
            return self._put_single(m)
        fmt, length = shape
        crc = _crc32(body) & 0x7FFFFFFF
        qid = m.queue_id
        qoffs = info[3]
        lock = self._put_lock
        lock.acquire()
        try:
            if not self._accepting:
                self._check_writable()
            mf = self._cur
            if mf is None or length + 8 > self.file_size - mf.wrote_position:
                mf = self._roll(length)
            qoff = qoffs.get(qid, 0)
            if not qoff % self._units_per_cq_file and self.reserve_queue_file is not None:
                self.reserve_queue_file(m.topic, qid, qoff)
            pos = mf.wrote_position
            target = self._cur_target
            now = _time_ns() // 1_000_000
            physical = self._cur_from + pos
            topic_b = info[0]
            if _put_record is None or not _put_record(
                target, pos, length, m, crc, qoff, physical, self._store_v6, now, self._store_host, topic_b
            ):
                fmt.pack_into(
                    target, pos, 0, MESSAGE_MAGIC_CODE, crc, qid, m.flag, qoff, physical,
                    m.sys_flag | self._store_v6, m.born_timestamp, m.born_host, now, self._store_host,
                    m.reconsume_times, m.prepared_transaction_offset, len(body), body, len(topic_b), topic_b,
                    len(props), props,
                )  # fmt: skip
                _size_into(target, pos, length)  # commit point: TOTALSIZE last
            mf.wrote_position = pos + length
            mf.store_timestamp = now
            qoffs[qid] = qoff + 1
        finally:
            lock.release()
        if self._after_put is not None:
            self._after_put()
        result = PutMessageResult((_PUT_OK, physical, length, qoff, now, self._store_host, 1, None))
        if self._sync:
            return self._await_flush(result)
        return result

    def _put_single(self, m: BrokerMessage) -> PutMessageResult:
        """One message through the batch path, its result as the fast paths give it (no
        ``physical_offsets``: a single put's result does not depend on which path took it)."""
        result = self.put_messages((m,))
        if result[7] is None:
            return result
        return PutMessageResult((*result[:7], None))

    def _roll(self, length: int) -> MappedFile:
        """Under the put lock: the segment the next record of ``length`` bytes goes to. Writes the
        8-byte BLANK and moves to the next segment when the record does not fit."""
        mf = self._cur
        if mf is None or mf is not self.queue.last():
            mf = self.queue.get_last_mapped_file(0)
            assert mf is not None
        pos = mf.wrote_position
        left = mf.file_size - pos
        if length + rec.END_FILE_MIN_BLANK_LENGTH > left:
            if left > 0:
                _BLANK.pack_into(mf.write_target, pos, left, rec.BLANK_MAGIC_CODE)
                mf.wrote_position = mf.file_size
                self._after_append()
            mf = self.queue.get_last_mapped_file(0)
            assert mf is not None
        self._cur = mf
        self._cur_target = mf.write_target
        self._cur_from = mf.file_from_offset
        lane = self._lane
        if lane is not None:  # the compiled put writes where this one does
            lane.cur = mf
            lane.target = self._cur_target
            lane.cur_from = self._cur_from
        return mf

    def put_messages(self, msgs: Sequence[BrokerMessage]) -> PutMessageResult:
        """Append a batch under one lock acquisition. All messages go to one segment (a batch
        that does not fit the current segment is written whole in the next one)."""
        if not msgs:
            raise MessageIllegal("batch is empty")
        if type(msgs) is PackedBatch:
            packed = self._put_packed(msgs)
            if packed is not None:
                return packed
        fast = self._put_batch_fast(msgs)
        if fast is not None:
            return fast
        encoded = [self._encode(m) for m in msgs]
        total = 0
        for e in encoded:
            total += e[2]
        if total + rec.END_FILE_MIN_BLANK_LENGTH > self.file_size:
            raise MessageIllegal(f"batch of {total} B does not fit a segment of {self.file_size} B")
        table = self.topic_queue_table
        store_host = self._store_host
        prop_crc = self._prop_crc
        offsets: list[int] = []
        first_qoff = -1
        with self._put_lock:
            mf, pos, target, base, now = self._begin_append(total)
            if self.reserve_queue_file is not None:
                self._reserve_queue_files([(e[0], e[5]) for e in encoded])
            start = pos
            for m, fmt, length, crc, sys_flag, in_queue, topic_b, props, magic in encoded:
                qoffs = table.of_topic(m.topic)
                qoff = qoffs.get(m.queue_id, 0) if in_queue else 0
                if first_qoff < 0:
                    first_qoff = qoff
                # Every record whole, but the first one with TOTALSIZE 0 (see _put_batch_fast).
                fmt.pack_into(
                    target, pos, length if pos != start else 0, magic, crc, m.queue_id, m.flag, qoff,
                    base + pos, sys_flag, m.born_timestamp, m.born_host, now, store_host, m.reconsume_times,
                    m.prepared_transaction_offset, len(m.body), m.body, len(topic_b), topic_b,
                    len(props), props,
                )  # fmt: skip
                if prop_crc:
                    rec.stamp_prop_crc(target, pos, length)
                offsets.append(base + pos)
                pos += length
                if in_queue:
                    qoffs[m.queue_id] = qoff + 1
            _SIZE.pack_into(target, start, encoded[0][2])  # commit point of the batch
            mf.wrote_position = pos
            mf.store_timestamp = now
        return self._finish_batch(offsets, total, first_qoff, now, len(msgs))

    def _put_batch_fast(self, msgs: Sequence[BrokerMessage]) -> PutMessageResult | None:
        """The common batch (RocketMQ's MessageBatch): one topic seen before, any queues, V1
        layouts already compiled, IPv4 born hosts, no transaction flags. None when the batch is
        not that; the general path then handles it (and every error).

        Two passes. The first, outside the lock, checks every message against the compiled
        shapes; nothing is written unless all pass. The second, under the lock, packs each
        record whole (TOTALSIZE included) straight into the segment, except that the first
        record is packed with TOTALSIZE 0 and gets its size last. That one 4-byte write is the
        commit point of the whole batch: a process killed before it leaves a zero TOTALSIZE where
        the batch starts, a torn record at which the recovery scan ends, so the records behind
        it are never seen (they are beyond the write position too). Compared with writing every
        TOTALSIZE last this saves a second pack per record; the offsets list of the result is
        built after the lock in C (``accumulate`` over the record lengths).
        """
        topic = msgs[0].topic
        info = self._topic_cache.get(topic)
        if info is None:
            return None
        shapes = info[2]
        plan: list[tuple[struct.Struct, int]] = []
        add = plan.append
        total = 0
        for m in msgs:
            shape = shapes.get(len(m.body) << 16 | len(m.properties))
            if (
                shape is None
                or (m.topic is not topic and m.topic != topic)
                or m.sys_flag & 0x3C
                or len(m.born_host) != 8
            ):
                return None
            total += shape[1]
            add(shape)
        if total + rec.END_FILE_MIN_BLANK_LENGTH > self.file_size:
            return None
        store_host = self._store_host
        sys_v6 = self._store_v6
        topic_b = info[0]
        tl = len(topic_b)
        qoffs = info[3]
        crc32 = _crc32
        lock = self._put_lock
        lock.acquire()
        try:
            mf, pos, target, base, now = self._begin_append(total)
            if self.reserve_queue_file is not None:
                self._reserve_queue_files([(m, True) for m in msgs])
            start = pos
            first_qoff = qoffs.get(msgs[0].queue_id, 0)
            for m, (fmt, length) in zip(msgs, plan, strict=True):
                body = m.body
                props = m.properties
                qid = m.queue_id
                qoff = qoffs.get(qid, 0)
                fmt.pack_into(
                    target, pos, length if pos != start else 0, MESSAGE_MAGIC_CODE, crc32(body) & 0x7FFFFFFF,
                    qid, m.flag, qoff, base + pos, m.sys_flag | sys_v6, m.born_timestamp, m.born_host, now,
                    store_host, m.reconsume_times, m.prepared_transaction_offset, len(body), body, tl,
                    topic_b, len(props), props,
                )  # fmt: skip
                qoffs[qid] = qoff + 1
                pos += length
            _SIZE.pack_into(target, start, plan[0][1])  # commit point of the batch
            mf.wrote_position = pos
            mf.store_timestamp = now
        finally:
            lock.release()
        offsets = list(accumulate(map(_second, plan), initial=base + start))
        offsets.pop()  # the end of the last record
        if self._after_put is not None:
            self._after_put()
        result = PutMessageResult(
            (_PUT_OK, base + start, total, first_qoff, now, store_host, len(msgs), offsets)
        )
        if self._sync:
            return self._await_flush(result)
        return result

    def _put_packed(self, batch: PackedBatch) -> PutMessageResult | None:
        """A batch send held as its body and plan (:mod:`rocketq.store.packed_batch`), packed by
        the compiled ``batch_write`` straight from the body: the records, the commit point and
        the result of :meth:`_put_batch_fast`, without a message object. None when the batch is
        not for that path (the topic not seen yet or in the V2 layout, a limit it would pass,
        the properties CRC on, transaction or IPv6 flags, no compiled module): the general
        path then builds the messages and handles it, errors included."""
        write = batch_write
        info = self._topic_cache.get(batch.topic)
        if write is None or info is None or info[1] or self._prop_crc:
            return None
        topic_b = info[0]
        count = batch.msg_count
        suffix = batch.suffix
        fixed = self._v1_base_len + len(topic_b) + len(suffix)
        total = fixed * count + batch.body_bytes + batch.props_bytes
        if (
            batch.max_body > self._max_body
            or batch.max_props + len(suffix) > self._max_props
            or fixed + batch.max_payload > self._max_record
            or total + rec.END_FILE_MIN_BLANK_LENGTH > self.file_size
            or batch.sys_flag & 0x3C
            or len(batch.born_host) != 8
        ):
            return None
        qid = batch.queue_id
        qoffs = info[3]
        lock = self._put_lock
        lock.acquire()
        try:
            mf, pos, target, base, now = self._begin_append(total)
            qoff = qoffs.get(qid, 0)
            reserve = self.reserve_queue_file
            if reserve is not None:
                per = self._units_per_cq_file
                for opening in range(-(-qoff // per) * per, qoff + count, per):
                    reserve(batch.topic, qid, opening)
            offsets = write(
                target, pos, base, now, self._store_host, batch.sys_flag | self._store_v6,
                batch.born_timestamp, batch.born_host, topic_b, qid, qoff, batch.data, batch.plan, suffix,
            )  # fmt: skip
            qoffs[qid] = qoff + count
            mf.wrote_position = pos + total
            mf.store_timestamp = now
        finally:
            lock.release()
        return self._finish_batch(offsets, total, qoff, now, count)

    def _reserve_queue_files(self, msgs: list[tuple[BrokerMessage, bool]]) -> None:
        """Under the put lock, before anything of a batch is written: reserve every
        ConsumeQueue file the batch's queued messages open (see ``reserve_queue_file``)."""
        reserve = self.reserve_queue_file
        assert reserve is not None
        per_file = self._units_per_cq_file
        table = self.topic_queue_table
        nxt: dict[tuple[str, int], int] = {}
        for m, in_queue in msgs:
            if not in_queue:
                continue
            key = (m.topic, m.queue_id)
            qoff = nxt.get(key)
            if qoff is None:
                qoff = table.of_topic(m.topic).get(m.queue_id, 0)
            if not qoff % per_file:
                reserve(m.topic, m.queue_id, qoff)
            nxt[key] = qoff + 1

    def _begin_append(self, total: int) -> tuple[MappedFile, int, mmap.mmap, int, int]:
        """Under the put lock: the segment, position, write target and segment start where
        ``total`` bytes of records go, and the store time to stamp them with."""
        if not self._accepting:
            self._check_writable()
        mf = self._cur
        if mf is None or total + 8 > self.file_size - mf.wrote_position:
            mf = self._roll(total)
        return mf, mf.wrote_position, self._cur_target, self._cur_from, _time_ns() // 1_000_000

    def _finish_batch(
        self, offsets: list[int], total: int, first_qoff: int, now: int, count: int
    ) -> PutMessageResult:
        if self._after_put is not None:
            self._after_put()
        result = PutMessageResult(
            (_PUT_OK, offsets[0], total, first_qoff, now, self._store_host, count, offsets)
        )
        if self._sync:
            return self._await_flush(result)
        return result

    def _await_flush(self, result: PutMessageResult) -> PutMessageResult:
        assert self.group_commit is not None
        if not self.group_commit.wait(result.next_offset, self._sync_timeout_s):
            log.warning(
                "sync flush of offset %d timed out after %.1f s", result.next_offset, self._sync_timeout_s
            )
            return result.with_status(PutMessageStatus.FLUSH_DISK_TIMEOUT)
        return result

    # -- read path --------------------------------------------------------------------------
    def read(self, offset: int, size: int) -> bytes | None:
        """``size`` bytes at physical ``offset`` (within one segment), or None if not readable."""
        mf = self.queue.find_by_offset(offset)
        if mf is None:
            return None
        return mf.read(offset % self.file_size, size)

    def read_record(self, offset: int, *, check_crc: bool = False) -> rec.RecordView | None:
        head = self.read(offset, 4)
        if head is None:
            return None
        (size,) = _SIZE.unpack(head)
        if size <= 0:
            return None
        data = self.read(offset, size)
        if data is None:
            return None
        view = rec.decode_record(data, 0, check_crc=check_crc)
        return view if view.kind is rec.RecordKind.MESSAGE else None

    def get_message(self, offset: int, size: int | None = None) -> MessageExt | None:
        """The message stored at physical ``offset``."""
        if size is None:
            view = self.read_record(offset)
        else:
            data = self.read(offset, size)
            view = rec.decode_record(data, 0, check_crc=False) if data is not None else None
        if view is None or view.kind is not rec.RecordKind.MESSAGE:
            return None
        return rec.view_to_message(view)

    def iter_records(
        self,
        start: int,
        *,
        end: int | None = None,
        check_crc: bool = False,
        read_body: bool = False,
        window: int = 4 << 20,
        verify_prop_crc: bool = False,
    ) -> Iterator[tuple[int, rec.RecordView]]:
        """(physical offset, record) from ``start`` to the end of readable data (or ``end``); BLANK
        markers are followed into the next segment. Stops at the first END or CORRUPT record."""
        return record_scan.iter_records(
            self.queue.find_by_offset,
            self.file_size,
            start,
            end=end,
            check_crc=check_crc,
            read_body=read_body,
            window=max(window, self._max_record + 8),
            verify_prop_crc=verify_prop_crc,
        )

    def disk_dir(self) -> str:
        return os.path.abspath(self.queue.directory)
