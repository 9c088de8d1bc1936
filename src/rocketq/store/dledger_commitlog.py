"""The CommitLog of DLedger mode: records are the bodies of a replicated log's entries.

One idea: a CommitLog whose records are a replicated log's entries: the put that encodes them
with their queue offsets and maps the append's outcome to a put's, and reads of what committed.

RocketMQ's ``DLedgerCommitLog`` on :class:`~rocketq.ha.replicated_log.ReplicatedLog`
(docs/replication.md §4). This class is a :class:`~rocketq.store.commitlog.CommitLog` whose own
segments are the *old* CommitLog of an adopted store (below ``divided_offset``; read only), and
whose new records go to the log:

* put: the record is encoded for its physical offset (``entry pos + 48``) with the queue's
  next offset inside the log's append, one critical section, and the offset is taken once
  the record is packed (:class:`_OneAppend`; the usual shape, V1 with an IPv4 born host, in
  one compiled call, ``dledger_record``, whose reference is :func:`pure_dledger_record`); the
  append's outcome maps to RocketMQ's statuses (:func:`raise_for`);
* queue offsets, the plain CommitLog's rule: only an entry placed in the log keeps one, in
  the log's order, so a queue's entries carry consecutive offsets with no hole or repeat. A
  record that cannot be packed takes none; an entry encoded and then not placed (a failed
  write, a refusal: BUSY, NOT_LEADER) gives its offset back before any later entry is encoded
  (:meth:`_OneAppend.give_back`: a group of one in the writer's thread, a Raft group while the
  proposal is made, :class:`~rocketq.store.dledger_appends.AppendQueue`). A placed entry keeps
  its offset whatever comes of it; one truncated by a new leader is gone with the old leader's
  table, as each new leader rebuilds its own (:mod:`rocketq.store.dledger_lead`);
* a leader takes puts only with a queue-offset table rebuilt for the term it leads:
  ``lead_term`` (the term the log says this member leads, -1: none; set on the log's loop at
  each role change, :class:`~rocketq.store.dledger_lead.LeaderTable`) and ``table_term`` (the
  term the table was rebuilt for) are folded into ``_accepting``, the one flag the put path
  reads, so the check costs a put nothing; while they differ a put is refused before anything
  is encoded (ServiceNotAvailable, :func:`~rocketq.store.dledger_lead.catching_up`);
* reads at or above ``divided_offset`` come from the entry store's data files, and only below
  the committed position (RocketMQ's ``getData`` returns nothing at or after ``committedPos``);
* ``max_offset`` and ``flushed_where`` are the committed position: what dispatch may expose.

The log runs on an event loop (:class:`~rocketq.store.dledger_appends.LedgerLoop`; how appends
reach it and their outcomes come back: :mod:`rocketq.store.dledger_appends`): in a broker the
broker's own loop (:meth:`LedgerLoop.adopt`), whose sends put with
:meth:`DLedgerCommitLog.put_messages_then` and :meth:`DLedgerCommitLog.put_messages_async` and
reach the log with no thread hand-off; elsewhere (an embedded store, tests, tools) a loop thread
of its own. Synchronous puts
(:meth:`DLedgerCommitLog.put_messages`) come from other threads (the broker's worker threads,
the delay services) and wait for the append's outcome there; made on the log's loop itself
they raise ``RuntimeError`` (they would wait for the loop they block). A group of one, whose
append never waits, appends in the writer's thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from rocketq import speedups as _speedups
from rocketq.config import StoreConfig
from rocketq.errors import MessageIllegal, ServiceNotAvailable, SystemBusy
from rocketq.ha.entry_format import BODY_OFFSET, MIN_BLANK_LEN, EntryNotFound
from rocketq.ha.replicated_log import AppendResult, AppendStatus, ReplicatedLog
from rocketq.message import BrokerMessage
from rocketq.protocol import record as rec
from rocketq.store.commitlog import CommitLog, PutMessageResult, PutMessageStatus
from rocketq.store.dledger_appends import (
    AnswerAll,
    AppendQueue,
    Expiry,
    LedgerLoop,
    PutCallback,
    ReplicationError,
    finish_put,
    put_error,
    tell_each,
)
from rocketq.store.dledger_lead import catching_up
from rocketq.store.flush import FlushListener
from rocketq.store.store_queries import StoreStats
from rocketq.tasks import settle

log = logging.getLogger(__name__)
T = TypeVar("T")


def pure_dledger_record(
    length: int,
    m: BrokerMessage,
    crc: int,
    sys_flag: int,
    queue_offset: int,
    physical_offset: int,
    now: int,
    store_host: bytes,
    topic: bytes,
    magic: int,
) -> bytes:
    """The record of ``m`` for an entry: its fields, the put's values (``sys_flag`` with the
    store's flags in it), packed with the layout of its field widths (what
    :meth:`_OneAppend._pack` packs when the store writes no properties CRC). The reference of
    the compiled ``dledger_record``, which takes the usual shape (V1, IPv4 born host) and
    answers None for any other."""
    fmt = rec.record_layout(
        len(m.born_host),
        len(store_host),
        magic != rec.MESSAGE_MAGIC_CODE,
        len(m.body),
        len(topic),
        len(m.properties),
    )
    return fmt.pack(
        length, magic, crc, m.queue_id, m.flag, queue_offset, physical_offset, sys_flag, m.born_timestamp,
        m.born_host, now, store_host, m.reconsume_times, m.prepared_transaction_offset, len(m.body), m.body,
        len(topic), topic, len(m.properties), m.properties,
    )  # fmt: skip


#: What an entry needs besides its record: its header, and the blank that may end a data file.
_ENTRY_ROOM = BODY_OFFSET + MIN_BLANK_LEN

#: The record of the usual shape compiled (``rocketq._speedups.dledger_record``: the bytes
#: :func:`pure_dledger_record` gives, or None for a shape it leaves to the layout), or None
#: where the C accelerator is not in use.
_dledger_record: Callable[..., bytes | None] | None = getattr(_speedups.COMPILED, "dledger_record", None)


def raise_for(result: AppendResult, leader_address: str | None) -> None:
    """Raise what the broker answers for an append that did not commit (the mapping of
    ``AppendStatus``, rocketq.ha.replicated_log)."""
    status = result.status
    if status is AppendStatus.NOT_LEADER:
        where = f"; the leader is {result.leader_id} at {leader_address}" if result.leader_id else ""
        raise ServiceNotAvailable(f"this broker is not the leader of its DLedger group{where}")
    if status is AppendStatus.BUSY:
        raise SystemBusy("[PC_SYNCHRONIZED]too many appends wait for the DLedger quorum; try again later")
    raise ReplicationError(
        f"DLedger append {status.value}: the message may or may not be stored (entry pos {result.pos})"
    )


class DLedgerCommitLog(CommitLog):
    """See the module docstring. :meth:`attach` hands it the log after the old CommitLog's
    recovery; until then it is the plain CommitLog of the old segments."""

    def __init__(self, config: StoreConfig, *, on_flushed: FlushListener | None = None) -> None:
        #: the term the log says this member leads (-1: it leads none), and the leader term the
        #: queue-offset table was rebuilt for (-1: none); puts wait for the two to agree
        self.lead_term = -1
        self.table_term = -1
        super().__init__(config, on_flushed=on_flushed)
        self.ledger: ReplicatedLog | None = None
        self.loop: LedgerLoop | None = None
        self.divided_offset = 0
        #: where the first data file retention left starts (0: none deleted since the start);
        #: the CommitLog's minimum offset when no old segments are left
        self.retained_from = 0
        #: the committed position when the log was stopped (read after it is closed)
        self._closed_at: int | None = None
        self._append_timeout_s = max(1.0, config.put_message_timeout_ms / 1000 + 1)
        self._appends: AppendQueue | None = None
        self._expiry: Expiry | None = None
        #: a group of one appends in the writer's thread: one put at a time
        self._inline_lock = threading.Lock()

    # -- life cycle -------------------------------------------------------------------------
    def attach(self, ledger: ReplicatedLog, loop: LedgerLoop, divided_offset: int) -> None:
        self.ledger = ledger
        self.loop = loop
        self.divided_offset = divided_offset

    def shutdown(self) -> None:
        super().shutdown()
        ledger, loop = self.ledger, self.loop
        if ledger is not None and loop is not None:
            self._closed_at = self.max_offset
            try:
                loop.run(ledger.stop(), 10)
            except Exception:
                log.exception("stopping the replicated log failed")
            loop.stop()

    # -- the leader's term ------------------------------------------------------------------
    def _table_behind(self) -> bool:
        """A leader whose queue-offset table was not rebuilt for the term it leads."""
        return self.lead_term >= 0 and self.lead_term != self.table_term

    def _update_accepting(self) -> None:
        super()._update_accepting()  # (a DLedger CommitLog has no compiled put lane to update)
        if self._accepting and self._table_behind():
            self._accepting = False

    def _check_writable(self) -> None:
        if self._running and self._table_behind():
            raise ServiceNotAvailable(f"message store is not writable: {catching_up(self.lead_term)}")
        super()._check_writable()

    # -- positions --------------------------------------------------------------------------
    @property
    def max_offset(self) -> int:
        ledger = self.ledger
        if ledger is None:
            return super().max_offset
        if self._closed_at is not None:
            return self._closed_at
        return max(self.divided_offset, ledger.committed_pos)

    @property
    def flushed_where(self) -> int:
        if self.ledger is None:
            return super().flushed_where
        return self.max_offset

    @property
    def min_offset(self) -> int:
        if self.queue.first() is not None or self.ledger is None:
            return super().min_offset
        return max(self.divided_offset, self.retained_from)

    def roll_next_file(self, offset: int) -> int:
        return offset + self.file_size - offset % self.file_size

    # -- reads ------------------------------------------------------------------------------
    def read(self, offset: int, size: int) -> bytes | None:
        ledger = self.ledger
        if ledger is None or offset < self.divided_offset:
            return super().read(offset, size)
        if size <= 0 or self._closed_at is not None or offset + size > ledger.committed_pos:
            return None
        if offset < self.retained_from:  # deleted by retention
            return None
        try:
            data = ledger.read(offset, size)
        except EntryNotFound:  # a data file retention deleted meanwhile
            return None
        return data if len(data) == size else None

    # -- writes -----------------------------------------------------------------------------
    def put_message(self, m: BrokerMessage) -> PutMessageResult:
        return self.put_messages((m,))

    def put_messages(self, msgs: Sequence[BrokerMessage]) -> PutMessageResult:
        """One entry per message (as RocketMQ's DLedger batch put), for a writer thread: the
        batch is handed to the log's loop as one put (:meth:`put_messages_then`) and waited for
        here; a group of one, whose append never waits, appends in this thread, one batch at a
        time. Raises what the put fails with."""
        ledger, loop, encoded = self._checked(msgs)
        if getattr(ledger, "append_completes_at_once", False):
            with self._inline_lock:  # a batch's entries and queue offsets stay consecutive
                return self._put_inline(ledger, encoded)
        if loop.on_loop():  # it would wait for itself
            raise RuntimeError(
                "synchronous DLedger put called on the replicated log's event loop; "
                "use put_messages_async / put_messages_then there, or a worker thread"
            )
        outcome: concurrent.futures.Future[PutMessageResult] = concurrent.futures.Future()

        def start() -> None:  # on the log's loop
            try:
                put = _BatchPut(self, ledger, encoded, lambda r: settle(outcome, r))
                put.submit(self._append_queue(ledger, loop), self._expiry_of(loop.loop))
            except Exception as exc:
                settle(outcome, exc)

        loop.loop.call_soon_threadsafe(start)
        try:
            return outcome.result(self._append_timeout_s + 1)
        except concurrent.futures.TimeoutError:
            raise ReplicationError("DLedger append did not finish in time; outcome unknown") from None

    async def put_messages_async(self, msgs: Sequence[BrokerMessage]) -> PutMessageResult:
        """:meth:`put_messages` for a caller on an event loop (the broker's sends): the put is
        handed to the log's loop and its outcome comes back to the caller's loop, many per
        wake-up of each, with no worker thread in between (:meth:`put_messages_then`)."""
        fut: asyncio.Future[PutMessageResult] = asyncio.get_running_loop().create_future()
        self.put_messages_then(msgs, lambda outcome: settle(fut, outcome))
        return await fut

    def put_messages_then(
        self,
        msgs: Sequence[BrokerMessage],
        done: PutCallback,
        caller: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        """The put of ``msgs`` without a coroutine: ``done(result or exception)`` is called on
        the caller's loop once every message's append committed, or as soon as one of them
        failed; the put fails with ReplicationError (outcome unknown) after the put timeout.
        Errors found before anything is appended (log not open, writes off, a record too large)
        raise here instead. The messages of a batch are appended together, as one run of
        consecutive entries of one proposal, with consecutive queue offsets
        (:class:`_BatchPut`). ``caller``: the running loop, when the caller has it at hand (a
        connection's); None looks it up (``asyncio.get_running_loop()``, which makes a
        ``getpid`` system call on each call: one per send on a leader under load)."""
        if len(msgs) == 1:  # the usual send: the append's outcome is the put's
            self.put_one_then(msgs[0], done, None, caller)
            return
        ledger, loop, encoded = self._checked(msgs)
        appends = self._append_queue(ledger, loop)
        expiry = self._expiry_of(caller if caller is not None else asyncio.get_running_loop())
        _BatchPut(self, ledger, encoded, done).submit(appends, expiry)

    def put_one_then(
        self,
        m: BrokerMessage,
        done: PutCallback,
        stats: StoreStats | None,
        caller: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        """:meth:`put_messages_then` of the one message ``m``, whose append's outcome is the
        put's (no generator): ``stats`` (a store's counters, or None) is counted by the put
        itself before ``done`` is called (``put_count``/``put_bytes``, or ``put_failures``),
        so a caller needs no completion of its own around ``done``; ``caller`` as there."""
        ledger, loop = self.ledger, self.loop  # _open and _check_fits, without their calls
        if ledger is None or loop is None or not self._accepting:
            ledger, loop = self._open()
        e = self._encode(m)
        if e[2] > self.file_size - _ENTRY_ROOM:
            self._check_fits(e)
        if caller is None:
            caller = asyncio.get_running_loop()
        expiry, appends = self._expiry, self._appends  # the usual ones, without a call each
        if expiry is None or expiry.loop is not caller:
            expiry = self._expiry_of(caller)
        if appends is None or appends.ledger is not ledger:
            appends = self._append_queue(ledger, loop)
        put = _OnePut(self, ledger, e, done, stats)
        appends.submit_to(put.encode, caller, put)
        expiry.add(put)

    def _checked(self, msgs: Sequence[BrokerMessage]) -> tuple[ReplicatedLog, LedgerLoop, list[Any]]:
        """The log, its loop and the messages encoded, after every check made before a put."""
        if not msgs:
            raise MessageIllegal("batch is empty")
        ledger, loop = self._open()
        encoded = [self._encode(m) for m in msgs]
        for e in encoded:
            self._check_fits(e)
        return ledger, loop, encoded

    def _open(self) -> tuple[ReplicatedLog, LedgerLoop]:
        """The log and its loop, once the log is open and writes are on."""
        ledger, loop = self.ledger, self.loop
        if ledger is None or loop is None:
            raise ServiceNotAvailable("the DLedger CommitLog is not open yet")
        if not self._accepting:
            self._check_writable()
        return ledger, loop

    def _check_fits(self, e: Any) -> None:
        """An encoded record fits one entry (an entry never spans data files)."""
        room = self.file_size - BODY_OFFSET - MIN_BLANK_LEN
        if e[2] > room:
            raise MessageIllegal(f"record of {e[2]} B does not fit a DLedger entry of at most {room} B")

    def _put_inline(self, ledger: ReplicatedLog, encoded: list[Any]) -> PutMessageResult:
        """The appends of a put in this thread, one after the other (a group of one)."""
        offsets: list[int] = []
        first_qoff = -1
        now = 0
        for e in encoded:
            put = _OneAppend(self, e)
            try:
                result = self._append_now(ledger, put)
            except BaseException:  # nothing appended (the entry store could not write it)
                put.give_back()
                raise
            if result.status is not AppendStatus.OK and result.pos < 0:
                put.give_back()
            put.check(result, ledger)
            offsets.append(result.physical_offset)
            now = put.store_timestamp
            if first_qoff < 0:
                first_qoff = put.queue_offset
        return self._put_ok(offsets, sum(e[2] for e in encoded), first_qoff, now, len(encoded))

    def _put_ok(
        self, offsets: list[int], total: int, first_qoff: int, now: int, count: int
    ) -> PutMessageResult:
        """The result of a put whose appends all committed (the append listener told first)."""
        if self._append_listener is not None:
            self._append_listener()
        return PutMessageResult(
            (
                PutMessageStatus.PUT_OK,
                offsets[0],
                total,
                first_qoff,
                now,
                self._store_host,
                count,
                offsets if count > 1 else None,
            )
        )

    def _expiry_of(self, caller: asyncio.AbstractEventLoop) -> Expiry:
        expiry = self._expiry
        if expiry is None or expiry.loop is not caller:
            expiry = self._expiry = Expiry(caller, self._append_timeout_s)
        return expiry

    def _append_queue(self, ledger: ReplicatedLog, loop: LedgerLoop) -> AppendQueue:
        appends = self._appends
        if appends is None or appends.ledger is not ledger:
            appends = self._appends = AppendQueue(ledger, loop)
        return appends

    @staticmethod
    def _append_now(ledger: ReplicatedLog, put: _OneAppend) -> AppendResult:
        """The append's outcome, right here: the log's append never waits
        (``append_completes_at_once``: a group of one), which saves the thread hand-off."""
        coro = ledger.append(put.encode)
        try:
            coro.send(None)
        except StopIteration as done:
            result: AppendResult = done.value
            return result
        coro.close()
        raise ReplicationError("the log's append waited although it said it would not")


class _OneAppend:
    """The encoder of one message's entry: on the first call (inside the log's append critical
    section) packs the record with the queue's next offset and only then takes that offset, so
    a record that cannot be packed takes none; a second call (the next data file) packs it
    again with the same offset for the offset it is given."""

    __slots__ = ("calls", "cl", "e", "queue_offset", "store_timestamp")

    def __init__(self, cl: DLedgerCommitLog, e: Any) -> None:
        self.cl = cl
        self.e = e
        self.queue_offset = -1
        self.store_timestamp = 0
        self.calls = 0

    def encode(self, physical_offset: int) -> bytes:
        if self.calls:
            self.calls += 1
            return self._pack(physical_offset)
        cl = self.cl
        e = self.e
        m, in_queue = e[0], e[5]
        with cl._put_lock:
            if not cl._accepting:
                cl._check_writable()
            qoffs = cl.topic_queue_table.of_topic(m.topic)
            qoff = qoffs.get(m.queue_id, 0) if in_queue else 0
            self.queue_offset = qoff
            now = self.store_timestamp = time.time_ns() // 1_000_000
            # what packing raises leaves the table as it was; the usual shape is packed here by
            # the compiled call (:meth:`_pack`'s first branch, without its call), any other (or
            # a None from it) by :meth:`_pack`
            record = None
            if _dledger_record is not None and not cl._prop_crc:
                record = _dledger_record(
                    e[2], m, e[3], e[4], qoff, physical_offset, now, cl._store_host, e[6], e[8]
                )  # fmt: skip
            if record is None:
                record = self._pack(physical_offset)
            if in_queue:
                if not qoff % cl._units_per_cq_file and cl.reserve_queue_file is not None:
                    cl.reserve_queue_file(m.topic, m.queue_id, qoff)
                qoffs[m.queue_id] = qoff + 1
            self.calls = 1
        return record

    def _pack(self, physical_offset: int) -> bytes:
        """The record for ``physical_offset``, with this message's queue offset and timestamp."""
        cl = self.cl
        m, fmt, length, crc, sys_flag, _, topic_b, props, magic = self.e
        if not cl._prop_crc:  # the layout is the whole record: packed straight into its bytes
            if _dledger_record is not None:  # the usual shape in one compiled call
                record = _dledger_record(
                    length, m, crc, sys_flag, self.queue_offset, physical_offset, self.store_timestamp,
                    cl._store_host, topic_b, magic,
                )  # fmt: skip
                if record is not None:
                    return record
            return fmt.pack(  # type: ignore[no-any-return]
                length, magic, crc, m.queue_id, m.flag, self.queue_offset, physical_offset, sys_flag,
                m.born_timestamp, m.born_host, self.store_timestamp, cl._store_host, m.reconsume_times,
                m.prepared_transaction_offset, len(m.body), m.body, len(topic_b), topic_b, len(props), props,
            )  # fmt: skip
        buf = bytearray(length)
        fmt.pack_into(
            buf, 0, length, magic, crc, m.queue_id, m.flag, self.queue_offset, physical_offset, sys_flag,
            m.born_timestamp, m.born_host, self.store_timestamp, cl._store_host, m.reconsume_times,
            m.prepared_transaction_offset, len(m.body), m.body, len(topic_b), topic_b, len(props), props,
        )  # fmt: skip
        rec.stamp_prop_crc(buf, 0, length)
        return bytes(buf)

    def check(self, result: AppendResult, ledger: ReplicatedLog) -> None:
        """Raise what the broker answers when the append did not commit."""
        if result.status is not AppendStatus.OK:
            raise_for(result, ledger.state.leader_address)

    def give_back(self) -> bool:
        """The entry was not placed in the log: its queue offset goes back to the table, when
        it is the last one the queue gave out (True; also when it holds none). Called where
        the entry turned out not to be placed, before any later entry is encoded (the append
        queue gives a proposal's back last taken first, :class:`AppendQueue`), so that the
        queue's next entry takes it; never for an entry that was placed (its offset stays
        taken even when the entry is truncated later: a new leader rebuilds the table)."""
        if not self.calls:
            return True
        m, in_queue = self.e[0], self.e[5]
        if not in_queue:
            self.calls = 0
            return True
        with self.cl._put_lock:
            qoffs = self.cl.topic_queue_table.of_topic(m.topic)
            if qoffs.get(m.queue_id) != self.queue_offset + 1:
                return False
            qoffs[m.queue_id] = self.queue_offset
            self.calls = 0
        return True


class _OnePut(_OneAppend):
    """A put of one message (the usual send): what :class:`PutChain` does with the generator of
    :meth:`DLedgerCommitLog._puts` for one append, without the generator, and its own encoder:
    the append's outcome gives the put's result (or error) directly, on the caller's loop. A
    commit comes as :meth:`committed` (a run of them at a time, :class:`CommittedRun`), which
    builds the result without an ``AppendResult``."""

    __slots__ = ("_done", "_finished", "_ledger", "_stats")

    def __init__(
        self,
        cl: DLedgerCommitLog,
        ledger: ReplicatedLog,
        e: Any,
        done: PutCallback,
        stats: StoreStats | None = None,
    ) -> None:
        # _OneAppend's fields, set here (no second __init__ call per send)
        self.cl = cl
        self.e = e
        self.queue_offset = -1
        self.store_timestamp = 0
        self.calls = 0
        self._ledger = ledger
        self._done = done
        self._finished = False
        #: the store's counters this put counts itself in (None: the caller counts)
        self._stats = stats

    def done(self) -> bool:
        return self._finished

    def _finish(self, outcome: PutMessageResult | Exception) -> None:
        stats = self._stats
        if stats is not None:
            if isinstance(outcome, Exception):
                stats.put_failures += 1
            else:
                stats.put_count += outcome[6]  # msg_num
                stats.put_bytes += outcome[2]  # size
        finish_put(self._done, outcome)

    def _ok_result(self, pos: int) -> PutMessageResult:
        """The PUT_OK result of this one-message put committed at entry ``pos``, counted in the
        store's statistics (what ``_put_ok`` builds and :meth:`_finish` counts for it)."""
        size = self.e[2]
        stats = self._stats
        if stats is not None:
            stats.put_count += 1
            stats.put_bytes += size
        return PutMessageResult(
            (
                PutMessageStatus.PUT_OK,
                pos + BODY_OFFSET,
                size,
                self.queue_offset,
                self.store_timestamp,
                self.cl._store_host,
                1,
                None,
            )
        )

    def committed(self, index: int, pos: int, leader: str | None) -> None:
        """The append committed at entry ``pos``: the put's result, as :meth:`set_result` gives
        it for an OK ``AppendResult`` (the append listener told first, as in ``_put_ok``),
        built and counted here (:meth:`_ok_result`): ``_put_ok`` and :meth:`_finish` for one
        message, without their calls and the list of one offset."""
        if self._finished:  # the expiry failed it meanwhile
            return
        self._finished = True
        cl = self.cl
        if cl._append_listener is not None:
            cl._append_listener()
        finish_put(self._done, self._ok_result(pos))

    @staticmethod
    def committed_run(entries: list[tuple[Any, int, int]], leader: str | None) -> None:
        """:meth:`committed` of each put of a committed run whose first waiter is one of these
        (``CommittedRun.resolve``), in one call: the append listener told once, before any
        put's result; each result built and counted as there; the results of consecutive puts
        whose callbacks have the same ``answer_all`` (:class:`AnswerAll`: the broker's sends)
        handed to it together, the others to their callbacks one by one, in the run's order. A
        waiter of another kind is told as :func:`tell_each` tells it; a put failed meanwhile
        (the expiry) gets nothing more."""
        told: DLedgerCommitLog | None = None
        answer_all: AnswerAll | None = None
        group: list[tuple[PutCallback, PutMessageResult]] = []
        for entry in entries:
            put = entry[0]
            if type(put) is not _OnePut:
                if group:
                    _answer_group(answer_all, group)
                    group = []
                tell_each((entry,), leader)
                continue
            if put._finished:  # the expiry failed it meanwhile
                continue
            put._finished = True
            cl = put.cl
            if cl is not told:
                told = cl
                if cl._append_listener is not None:
                    cl._append_listener()
            result = put._ok_result(entry[2])
            done = put._done
            answer: AnswerAll | None = getattr(done, "answer_all", None)
            if answer is None or answer is not answer_all:
                if group:
                    _answer_group(answer_all, group)
                    group = []
                answer_all = answer
                if answer is None:
                    finish_put(done, result)
                    continue
            group.append((done, result))
        if group:
            _answer_group(answer_all, group)

    def set_result(self, result: AppendResult, /) -> None:
        self._finished = True
        outcome: PutMessageResult | Exception
        try:
            self.check(result, self._ledger)
            outcome = self.cl._put_ok(
                [result.physical_offset], self.e[2], self.queue_offset, self.store_timestamp, 1
            )
        except Exception as exc:  # the append did not commit (raise_for)
            outcome = exc
        self._finish(outcome)

    def set_exception(self, exception: BaseException, /) -> None:
        self._finished = True
        self._finish(put_error(exception))


def _answer_group(answer_all: AnswerAll | None, group: list[tuple[PutCallback, PutMessageResult]]) -> None:
    """Hand ``group`` to ``answer_all`` (which answers each; an error of it is logged)."""
    assert answer_all is not None
    try:
        answer_all(group)
    except Exception:
        log.exception("the completion of a run of DLedger puts failed")


class _BatchAppend(_OneAppend):
    """One message of a :class:`_BatchPut`: its outcome goes to the batch, and its encoder
    refuses once an earlier message of the batch failed to encode, so that what is appended of
    a batch is always a prefix of it."""

    __slots__ = ("batch", "slot")

    def __init__(self, batch: _BatchPut, e: Any, slot: int) -> None:
        _OneAppend.__init__(self, batch.cl, e)
        self.batch = batch
        self.slot = slot

    def encode(self, physical_offset: int) -> bytes:
        batch = self.batch
        if batch.broken:
            raise ReplicationError("an earlier message of the batch was not appended")
        try:
            return _OneAppend.encode(self, physical_offset)
        except BaseException:
            batch.broken = True
            raise

    def done(self) -> bool:
        return self.batch.finished

    def committed(self, index: int, pos: int, leader: str | None) -> None:
        self.batch.appended(self.slot, pos + BODY_OFFSET)

    def set_result(self, result: AppendResult, /) -> None:
        if result.status is AppendStatus.OK:
            self.batch.appended(self.slot, result.physical_offset)
        else:
            self.batch.refused(result)

    def set_exception(self, exception: BaseException, /) -> None:
        self.batch.set_exception(exception)


class _BatchPut:
    """A put of several messages (SEND_BATCH_MESSAGE, a thread's put): their appends go to the
    append queue together, so that they are one run of consecutive entries of one proposal
    (one write, one append message per follower, one commit) and take consecutive queue
    offsets, as RocketMQ's DLedger batch put appends a batch in one request. ``done`` gets the
    put's result once the last one committed (entries commit in order), or the first failure
    (the messages appended before it are stored, as when a plain CommitLog's batch fails
    part-way; the producer retries the batch). It is the batch's waiter in the put expiry."""

    __slots__ = ("_done", "broken", "cl", "finished", "items", "ledger", "left", "offsets")

    def __init__(
        self, cl: DLedgerCommitLog, ledger: ReplicatedLog, encoded: list[Any], done: PutCallback
    ) -> None:
        self.cl = cl
        self.ledger = ledger
        self._done = done
        self.items = [_BatchAppend(self, e, slot) for slot, e in enumerate(encoded)]
        self.offsets = [0] * len(encoded)
        self.left = len(encoded)
        self.finished = False
        #: a message's encoder raised: the later ones refuse
        self.broken = False

    def submit(self, appends: AppendQueue, expiry: Expiry) -> None:
        appends.submit_all([(item.encode, item) for item in self.items], expiry.loop)
        expiry.add(self)

    def done(self) -> bool:
        return self.finished

    def appended(self, slot: int, physical_offset: int) -> None:
        """Message ``slot`` committed at ``physical_offset``."""
        if self.finished:
            return
        self.offsets[slot] = physical_offset
        self.left -= 1
        if self.left:
            return
        self.finished = True
        items = self.items
        total = sum(item.e[2] for item in items)
        result = self.cl._put_ok(
            self.offsets, total, items[0].queue_offset, items[-1].store_timestamp, len(items)
        )
        finish_put(self._done, result)

    def refused(self, result: AppendResult) -> None:
        """An append did not commit: the put fails with what the broker answers for it (the
        queue offsets of what was not placed were given back when the proposal was made)."""
        if self.finished:
            return
        try:
            raise_for(result, self.ledger.state.leader_address)
        except Exception as exc:
            self._fail(exc)

    def set_exception(self, exception: BaseException, /) -> None:
        self._fail(put_error(exception))

    def _fail(self, exc: Exception) -> None:
        if not self.finished:
            self.finished = True
            finish_put(self._done, exc)
