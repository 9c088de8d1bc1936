"""The CommitLog of DLedger mode: records are the bodies of a replicated log's entries.

RocketMQ's ``DLedgerCommitLog`` on :class:`~rocketq.ha.replicated_log.ReplicatedLog`
(docs/replication.md §4). This class is a :class:`~rocketq.store.commitlog.CommitLog` whose own
segments are the *old* CommitLog of an adopted store (below ``divided_offset``; read only), and
whose new records go to the log:

* put: the queue offset is assigned and the record encoded for its physical offset
  (``entry pos + 48``) inside the log's append, one critical section
  (:meth:`DLedgerCommitLog.put_message`); the append's outcome maps to RocketMQ's statuses
  (:func:`raise_for`);
* reads at or above ``divided_offset`` come from the entry store's data files, and only below
  the committed position (RocketMQ's ``getData`` returns nothing at or after ``committedPos``);
* ``max_offset`` and ``flushed_where`` are the committed position: what dispatch may expose.

The log runs on its own event loop thread (:class:`LedgerLoop`): the store's writers are worker
threads and the delay services, and wait for an append's outcome there (a group of one, whose
append never waits, appends in the writer's thread).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Generator, Sequence
from typing import Any, Protocol, TypeVar

from rocketq.config import StoreConfig
from rocketq.errors import MessageIllegal, RocketqError, ServiceNotAvailable, SystemBusy
from rocketq.ha.entry_format import BODY_OFFSET, MIN_BLANK_LEN, EntryNotFound
from rocketq.ha.replicated_log import AppendResult, AppendStatus, RecordEncoder, ReplicatedLog
from rocketq.message import BrokerMessage
from rocketq.protocol import record as rec
from rocketq.store.commitlog import CommitLog, PutMessageResult, PutMessageStatus
from rocketq.store.flush import FlushListener

log = logging.getLogger(__name__)
T = TypeVar("T")


class ReplicationError(RocketqError):
    """SYSTEM_ERROR (1): the append's outcome is unknown (quorum timeout, term change); the
    producer retries, so the message may be stored twice, never lost silently."""


class LedgerLoop:
    """An asyncio event loop in a daemon thread, where the replicated log lives."""

    def __init__(self, name: str = "DLedgerLoop") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result from another thread."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("LedgerLoop.run called on the ledger loop itself")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self.loop.close()


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
        self._appends: _AppendQueue | None = None
        self._expiry: _Expiry | None = None

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
        """One entry per message (as RocketMQ's DLedger batch put); a failure stops the batch
        and raises (the messages before it are stored). Waits for each append's outcome (a
        writer thread: the log runs on its own loop)."""
        ledger, loop, steps = self._start_puts(msgs)
        try:
            put = next(steps)
            while True:
                put = steps.send(self._append(ledger, loop, put))
        except StopIteration as done:
            result: PutMessageResult = done.value
            return result

    async def put_messages_async(self, msgs: Sequence[BrokerMessage]) -> PutMessageResult:
        """:meth:`put_messages` for a caller on an event loop (the broker's sends): the appends
        are handed to the log's loop and their outcomes come back to the caller's loop, many
        per wake-up of each, with no worker thread in between."""
        ledger, loop, steps = self._start_puts(msgs)
        appends = self._append_queue(ledger, loop)
        expiry = self._expiry_of(asyncio.get_running_loop())
        try:
            put = next(steps)
            while True:
                fut = appends.submit_async(put.encode)
                expiry.add(fut)
                put = steps.send(await fut)
        except StopIteration as done:
            outcome: PutMessageResult = done.value
            return outcome

    def put_messages_then(self, msgs: Sequence[BrokerMessage], done: PutCallback) -> None:
        """:meth:`put_messages_async` without a coroutine: the appends join the same batches,
        and ``done(result or exception)`` is called on the caller's loop when the last append's
        outcome comes back (the same outcomes and errors, the same expiry), or right away when
        an append fails. Errors found before anything is appended (log not open, writes off, a
        record too large) raise here instead."""
        ledger, loop, steps = self._start_puts(msgs)
        put = next(steps)
        chain = _PutChain(
            steps, self._append_queue(ledger, loop), self._expiry_of(asyncio.get_running_loop()), done
        )
        chain.submit(put)

    def _start_puts(
        self, msgs: Sequence[BrokerMessage]
    ) -> tuple[ReplicatedLog, LedgerLoop, Generator[_OneAppend, AppendResult, PutMessageResult]]:
        if not msgs:
            raise MessageIllegal("batch is empty")
        ledger, loop = self.ledger, self.loop
        if ledger is None or loop is None:
            raise ServiceNotAvailable("the DLedger CommitLog is not open yet")
        if not self._accepting:
            self._check_writable()
        encoded = [self._encode(m) for m in msgs]
        room = self.file_size - BODY_OFFSET - MIN_BLANK_LEN  # an entry never spans data files
        for e in encoded:
            if e[2] > room:
                raise MessageIllegal(f"record of {e[2]} B does not fit a DLedger entry of at most {room} B")
        return ledger, loop, self._puts(ledger, encoded, len(msgs))

    def _puts(
        self, ledger: ReplicatedLog, encoded: list[Any], count: int
    ) -> Generator[_OneAppend, AppendResult, PutMessageResult]:
        """The appends of a batch, one at a time: yields each, is sent its outcome."""
        offsets: list[int] = []
        total = 0
        first_qoff = -1
        now = 0
        for e in encoded:
            put = _OneAppend(self, e)
            result = yield put
            if result.status is not AppendStatus.OK:
                put.undo_if_unwritten(result)
                raise_for(result, ledger.state.leader_address)
            offsets.append(result.physical_offset)
            total += e[2]
            now = put.store_timestamp
            if first_qoff < 0:
                first_qoff = put.queue_offset
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

    def _expiry_of(self, caller: asyncio.AbstractEventLoop) -> _Expiry:
        expiry = self._expiry
        if expiry is None or expiry.loop is not caller:
            expiry = self._expiry = _Expiry(caller, self._append_timeout_s)
        return expiry

    def _append_queue(self, ledger: ReplicatedLog, loop: LedgerLoop) -> _AppendQueue:
        appends = self._appends
        if appends is None or appends.ledger is not ledger:
            appends = self._appends = _AppendQueue(ledger, loop)
        return appends

    def _append(self, ledger: ReplicatedLog, loop: LedgerLoop, put: _OneAppend) -> AppendResult:
        """The append's outcome: on the log's loop, or right here when the log's append never
        waits (``append_completes_at_once``: a group of one), which saves the thread hand-off
        (about 70 µs a put on a loaded machine, most of a put's cost)."""
        if getattr(ledger, "append_completes_at_once", False):
            coro = ledger.append(put.encode)
            try:
                coro.send(None)
            except StopIteration as done:
                result: AppendResult = done.value
                return result
            coro.close()
            raise ReplicationError("the log's append waited although it said it would not")
        if threading.current_thread() is loop._thread:  # it would wait for itself
            raise RuntimeError("DLedger put called on the ledger loop itself")
        try:
            return self._append_queue(ledger, loop).submit(put.encode).result(self._append_timeout_s)
        except concurrent.futures.TimeoutError:
            raise ReplicationError("DLedger append did not finish in time; outcome unknown") from None


class _AppendQueue:
    """Appends handed to the log's loop from other threads, as many per wake-up of the loop as
    are waiting: they are proposed in one loop iteration, so the leader sends them to each
    follower as one message (batch push) and gets one acknowledgement for them. A caller on an
    event loop (:meth:`submit_async`, :meth:`submit_to`) hands over the appends of one of its
    loop iterations together, at the iteration's end: one lock and one wake-up of the log's loop
    for them all instead of one per append. Their outcomes go back the same way, one wake-up of
    the caller's loop for all that completed together; a writer thread (:meth:`submit`) waits
    on a ``concurrent.futures.Future``."""

    def __init__(self, ledger: ReplicatedLog, loop: LedgerLoop) -> None:
        self.ledger = ledger
        self._loop = loop.loop
        self._lock = threading.Lock()
        self._waiting: list[tuple[RecordEncoder, _Waiter]] = []
        #: outcomes for callers' loops, sent at the end of the log loop's iteration
        self._replies: dict[asyncio.AbstractEventLoop, list[tuple[_Settable, _Outcome]]] = {}
        #: appends of each caller loop's current iteration, handed over at its end (each list
        #: is only touched on its own loop's thread)
        self._outboxes: dict[asyncio.AbstractEventLoop, list[tuple[RecordEncoder, _Waiter]]] = {}

    def submit(self, encode: RecordEncoder) -> concurrent.futures.Future[AppendResult]:
        done: concurrent.futures.Future[AppendResult] = concurrent.futures.Future()
        self._submit(encode, done)
        return done

    def submit_async(self, encode: RecordEncoder) -> asyncio.Future[AppendResult]:
        caller = asyncio.get_running_loop()
        done: asyncio.Future[AppendResult] = caller.create_future()
        self.submit_to(encode, caller, done)
        return done

    def submit_to(self, encode: RecordEncoder, caller: asyncio.AbstractEventLoop, waiter: _Settable) -> None:
        """:meth:`submit_async` with the caller's own ``waiter`` (settable like a future) instead
        of a new future: its outcome is set on ``caller``'s loop. Called on ``caller``'s thread."""
        outbox = self._outboxes.get(caller)
        if outbox is None:
            outbox = self._outboxes[caller] = []
        if not outbox:
            caller.call_soon(self._hand_over, caller)
        outbox.append((encode, (caller, waiter)))

    def _hand_over(self, caller: asyncio.AbstractEventLoop) -> None:
        outbox = self._outboxes.get(caller)
        if not outbox:
            return
        self._outboxes[caller] = []
        with self._lock:
            self._waiting += outbox
            first = len(self._waiting) == len(outbox)
        if first:  # later ones join the batch the loop has not taken yet
            self._loop.call_soon_threadsafe(self._start_all)

    def _submit(self, encode: RecordEncoder, waiter: _Waiter) -> None:
        with self._lock:
            self._waiting.append((encode, waiter))
            first = len(self._waiting) == 1
        if first:  # later ones join the batch the loop has not taken yet
            self._loop.call_soon_threadsafe(self._start_all)

    def _start_all(self) -> None:
        with self._lock:
            batch, self._waiting = self._waiting, []
        append_batch = getattr(self.ledger, "append_batch", None)
        if append_batch is not None:  # all of them as one proposal, outcomes to the waiters directly
            waiters: list[_Waiter | None] = [waiter for _, waiter in batch]

            def done(i: int, outcome: _Outcome) -> None:
                waiter = waiters[i]
                if waiter is not None:
                    waiters[i] = None
                    self._done(outcome, waiter)

            try:
                append_batch([encode for encode, _ in batch], done)
            except Exception as exc:  # the log stopped on it: nobody may wait forever
                for i in range(len(waiters)):
                    done(i, exc)
            return
        for encode, waiter in batch:
            # the tasks' first steps (each append's proposal) all run in the next loop iteration
            task = self._loop.create_task(self.ledger.append(encode))
            task.add_done_callback(functools.partial(self._task_done, waiter=waiter))

    def _task_done(self, task: asyncio.Task[AppendResult], waiter: _Waiter) -> None:
        outcome: _Outcome
        if task.cancelled():
            outcome = ReplicationError("DLedger append cancelled; outcome unknown")
        else:
            exc = task.exception()
            outcome = exc if exc is not None else task.result()
        self._done(outcome, waiter)

    def _done(self, outcome: _Outcome, waiter: _Waiter) -> None:
        if isinstance(waiter, concurrent.futures.Future):
            if isinstance(outcome, BaseException):
                waiter.set_exception(outcome)
            else:
                waiter.set_result(outcome)
            return
        caller, fut = waiter
        if not self._replies:
            self._loop.call_soon(self._send_replies)
        self._replies.setdefault(caller, []).append((fut, outcome))

    def _send_replies(self) -> None:
        replies, self._replies = self._replies, {}
        for caller, outcomes in replies.items():
            try:
                caller.call_soon_threadsafe(_resolve, outcomes)
            except RuntimeError:  # that loop is closed: nobody waits any more
                pass


class _Settable(Protocol):
    """What an append's outcome is handed to on the caller's loop: an ``asyncio.Future`` or a
    :class:`_PutChain`."""

    def done(self) -> bool: ...

    def set_result(self, result: AppendResult, /) -> None: ...

    def set_exception(self, exception: BaseException, /) -> None: ...


_Waiter = concurrent.futures.Future[AppendResult] | tuple[asyncio.AbstractEventLoop, _Settable]
_Outcome = AppendResult | BaseException
#: ``done(result or exception)`` of :meth:`DLedgerCommitLog.put_messages_then`
PutCallback = Callable[[PutMessageResult | Exception], None]


class _PutChain:
    """One append of a :meth:`DLedgerCommitLog.put_messages_then` and what follows it: the
    waiter of that append, set on the caller's loop (:func:`_resolve`) or failed by the expiry,
    like a future, but it runs the next step right there instead of waking a task. The appends
    of a batch go one after the other (as :meth:`DLedgerCommitLog.put_messages_async` awaits
    them), each with a chain of its own (its own deadline)."""

    __slots__ = ("_appends", "_done", "_expiry", "_finished", "_loop", "_steps")

    def __init__(
        self,
        steps: Generator[_OneAppend, AppendResult, PutMessageResult],
        appends: _AppendQueue,
        expiry: _Expiry,
        done: PutCallback,
    ) -> None:
        self._steps = steps
        self._appends = appends
        self._expiry = expiry
        self._loop = expiry.loop
        self._done = done
        #: the append has its outcome (a future's done())
        self._finished = False

    def submit(self, put: _OneAppend) -> None:
        self._appends.submit_to(put.encode, self._loop, self)
        self._expiry.add(self)

    def done(self) -> bool:
        return self._finished

    def set_result(self, result: AppendResult, /) -> None:
        self._finished = True
        try:
            put = self._steps.send(result)
        except StopIteration as stop:
            self._finish(stop.value)
            return
        except Exception as exc:  # the append did not commit (raise_for)
            self._finish(exc)
            return
        _PutChain(self._steps, self._appends, self._expiry, self._done).submit(put)

    def set_exception(self, exception: BaseException, /) -> None:
        self._finished = True
        self._steps.close()
        self._finish(exception if isinstance(exception, Exception) else ReplicationError(str(exception)))

    def _finish(self, outcome: PutMessageResult | Exception) -> None:
        try:
            self._done(outcome)
        except Exception:
            log.exception("the completion of a DLedger put failed")


class _Expiry:
    """The appends awaited on one loop fail with ReplicationError once ``timeout_s`` passed
    without an outcome: one timer for them all (a timer, or a ``wait_for``, per append cost the
    leader's broker loop a heap push and a cancellation per message). A waiter is a future or a
    :class:`_PutChain` (done once its current append has its outcome; a chain's next append is
    added again with its own deadline)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout_s: float) -> None:
        self.loop = loop
        self.timeout_s = timeout_s
        self._waiting: collections.deque[tuple[float, _Settable]] = collections.deque()
        self._armed = False

    def add(self, fut: _Settable) -> None:
        self._waiting.append((self.loop.time() + self.timeout_s, fut))
        if not self._armed:
            self._armed = True
            self.loop.call_later(self.timeout_s, self._check)

    def _check(self) -> None:
        now = self.loop.time()
        waiting = self._waiting
        while waiting and (waiting[0][1].done() or waiting[0][0] <= now):
            _, fut = waiting.popleft()
            if not fut.done():
                fut.set_exception(ReplicationError("DLedger append did not finish in time; outcome unknown"))
        if waiting:  # the oldest still waiting decides when to look again
            self.loop.call_later(waiting[0][0] - now, self._check)
        else:
            self._armed = False


def _resolve(outcomes: list[tuple[_Settable, _Outcome]]) -> None:
    for fut, outcome in outcomes:
        if fut.done():  # the caller gave up (timeout, cancelled request)
            continue
        if isinstance(outcome, BaseException):
            fut.set_exception(outcome)
        else:
            fut.set_result(outcome)


class _OneAppend:
    """The encoder of one message's entry: assigns the queue offset on the first call (inside
    the log's append critical section) and packs the record for the offset it is given."""

    __slots__ = ("calls", "cl", "e", "queue_offset", "store_timestamp")

    def __init__(self, cl: DLedgerCommitLog, e: Any) -> None:
        self.cl = cl
        self.e = e
        self.queue_offset = -1
        self.store_timestamp = 0
        self.calls = 0

    def encode(self, physical_offset: int) -> bytes:
        cl = self.cl
        m, fmt, length, crc, sys_flag, in_queue, topic_b, props, magic = self.e
        if self.calls == 0:
            with cl._put_lock:
                if not cl._accepting:
                    cl._check_writable()
                qoffs = cl.topic_queue_table.of_topic(m.topic)
                qoff = qoffs.get(m.queue_id, 0) if in_queue else 0
                if in_queue:
                    if not qoff % cl._units_per_cq_file and cl.reserve_queue_file is not None:
                        cl.reserve_queue_file(m.topic, m.queue_id, qoff)
                    qoffs[m.queue_id] = qoff + 1
            self.queue_offset = qoff
            self.store_timestamp = time.time_ns() // 1_000_000
        self.calls += 1
        buf = bytearray(length)
        fmt.pack_into(
            buf, 0, length, magic, crc, m.queue_id, m.flag, self.queue_offset, physical_offset, sys_flag,
            m.born_timestamp, m.born_host, self.store_timestamp, cl._store_host, m.reconsume_times,
            m.prepared_transaction_offset, len(m.body), m.body, len(topic_b), topic_b, len(props), props,
        )  # fmt: skip
        if cl._prop_crc:
            rec.stamp_prop_crc(buf, 0, length)
        return bytes(buf)

    def undo_if_unwritten(self, result: AppendResult) -> None:
        """Give the queue offset back when nothing was appended and no later message took the
        next one (a leader rebuilds the table from its ConsumeQueues anyway)."""
        if self.calls == 0 or result.pos >= 0:
            return
        m, in_queue = self.e[0], self.e[5]
        if not in_queue:
            return
        with self.cl._put_lock:
            qoffs = self.cl.topic_queue_table.of_topic(m.topic)
            if qoffs.get(m.queue_id) == self.queue_offset + 1:
                qoffs[m.queue_id] = self.queue_offset
