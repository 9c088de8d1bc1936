"""How a DLedger CommitLog's appends reach the replicated log and their outcomes come back.

::

    caller (broker loop / worker thread)              log's loop (LedgerLoop)
    submit_to / submit ──► AppendQueue ──(one hand-over per caller-loop iteration)──► append_batch
    put / Future       ◄── resolve_outcomes ◄──(one call_soon_threadsafe per log iteration)── done

* :class:`LedgerLoop` is the event loop the log lives on: the broker's own loop (adopted: sends
  reach the log with no thread hand-off, outcomes are set on the same loop) or a loop thread of
  its own (embedded stores, tests, tools).
* :class:`AppendQueue` batches the appends of one caller-loop iteration into one proposal (one
  message to each follower with batch push) and sends the outcomes back the same way.
* a put's waiters (the one-message put, a batch's messages: ``dledger_commitlog``) take their
  outcomes with no task; :class:`Expiry` fails every put still waiting after the put timeout
  with one timer. The appends of a proposal that committed together reach a caller's loop as
  one :class:`CommittedRun`: when its first waiter is a one-message put, one call tells them
  all, and hands the results of consecutive puts whose callbacks can take several at once
  (:class:`AnswerAll`: the broker's sends) to one call, which makes and writes their answers.

Invariants: every waiter gets exactly one outcome (a result, a ``ReplicationError`` when it is
unknown, or the exception that stopped the log); nobody waits forever. An entry that was not
placed in the log gives its queue offset back (its waiter's ``give_back``) while its proposal
is made, before any later entry is encoded, last taken first (:class:`_Proposal`): every
outcome of such an entry comes then (an exception, or a refusal with no position), and one
that comes later is of a placed entry, which keeps its offset.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import logging
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol, TypeVar

from rocketq.errors import RocketqError
from rocketq.ha.replicated_log import AppendResult, AppendStatus, RecordEncoder, ReplicatedLog
from rocketq.message import BrokerMessage
from rocketq.store.commitlog import PutMessageResult
from rocketq.tasks import settle

log = logging.getLogger(__name__)
T = TypeVar("T")


class OneAppend(Protocol):
    """One entry of a put: encodes its record for the physical offset it is given."""

    def encode(self, physical_offset: int) -> bytes: ...


class ReplicationError(RocketqError):
    """SYSTEM_ERROR (1): the append's outcome is unknown (quorum timeout, term change); the
    producer retries, so the message may be stored twice, never lost silently."""


class LedgerLoop:
    """The event loop the replicated log lives on: a loop of its own in a daemon thread (an
    embedded store, tests, tools), or, with :meth:`adopt`, the running loop of the process that
    opens the store (a broker: the log then shares the broker's loop, and sends reach it with
    no thread hand-off)."""

    def __init__(self, name: str = "DLedgerLoop", *, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._thread: threading.Thread | None = None
        if loop is not None:
            self.loop = loop
            return
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @classmethod
    def adopt(cls, loop: asyncio.AbstractEventLoop) -> LedgerLoop:
        """The log on ``loop``, run by its owner (who keeps it running until the store is shut
        down); :meth:`stop` leaves it running."""
        return cls(loop=loop)

    @property
    def owns_thread(self) -> bool:
        return self._thread is not None

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def on_loop(self) -> bool:
        """True in the thread that runs the loop (where waiting for the log would deadlock)."""
        if self._thread is not None:
            return threading.current_thread() is self._thread
        try:
            return asyncio.get_running_loop() is self.loop
        except RuntimeError:
            return False

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result from another thread."""
        if self.on_loop():
            coro.close()
            raise RuntimeError("LedgerLoop.run called on the ledger loop itself")
        if self.loop.is_closed() or (self._thread is None and not self.loop.is_running()):
            coro.close()
            raise RuntimeError("the event loop of the replicated log is not running")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def stop(self) -> None:
        thread = self._thread
        if thread is None or self.loop.is_closed():
            return  # an adopted loop belongs to its owner
        self.loop.call_soon_threadsafe(self.loop.stop)
        thread.join(5)
        if not thread.is_alive():
            self.loop.close()


class AppendQueue:
    """Appends handed to the log's loop from other threads, as many per wake-up of the loop as
    are waiting: they are proposed in one loop iteration, so the leader sends them to each
    follower as one message (batch push) and gets one acknowledgement for them. A caller on an
    event loop (:meth:`submit_async`, :meth:`submit_to`) hands over the appends of one of its
    loop iterations together, at the iteration's end: one lock and one wake-up of the log's loop
    for them all instead of one per append. Their outcomes go back the same way, one wake-up of
    the caller's loop for all that completed together; a writer thread (:meth:`submit`) waits
    on a ``concurrent.futures.Future``.

    A caller on the log's own loop (a broker whose log shares its loop, :meth:`LedgerLoop.adopt`)
    takes the same steps without a thread in between: its appends are proposed at the end of
    its loop iteration (``append_batch`` called from that callback, no lock, no wake-up), and
    their outcomes are set right after the driver's step that produced them (one ``call_soon``
    per step, as for other loops, then the waiters directly; those committed by a peer message
    as soon as its delivery is done, within the same read, when the log offers
    ``after_delivery``)."""

    def __init__(self, ledger: ReplicatedLog, loop: LedgerLoop) -> None:
        self.ledger = ledger
        self._loop = loop.loop
        self._lock = threading.Lock()
        self._waiting: list[tuple[RecordEncoder, Waiter]] = []
        #: outcomes for callers' loops, sent at the end of the log loop's iteration
        self._replies: dict[asyncio.AbstractEventLoop, list[Reply]] = {}
        #: appends of each caller loop's current iteration, handed over at its end (each list
        #: is only touched on its own loop's thread)
        self._outboxes: dict[asyncio.AbstractEventLoop, list[tuple[RecordEncoder, Waiter]]] = {}
        #: the log's ``after_delivery(callback)`` (commits that come with a peer message are
        #: answered at its end, in the same read, with no loop callback), or one that declines
        self._after_delivery: Callable[[Callable[[], None]], bool] = getattr(
            ledger, "after_delivery", _no_delivery
        )

    def submit(self, encode: RecordEncoder) -> concurrent.futures.Future[AppendResult]:
        done: concurrent.futures.Future[AppendResult] = concurrent.futures.Future()
        self._submit(encode, done)
        return done

    def submit_async(self, encode: RecordEncoder) -> asyncio.Future[AppendResult]:
        caller = asyncio.get_running_loop()
        done: asyncio.Future[AppendResult] = caller.create_future()
        self.submit_to(encode, caller, done)
        return done

    def submit_to(self, encode: RecordEncoder, caller: asyncio.AbstractEventLoop, waiter: Settable) -> None:
        """:meth:`submit_async` with the caller's own ``waiter`` (settable like a future) instead
        of a new future: its outcome is set on ``caller``'s loop. Called on ``caller``'s thread."""
        outbox = self._outboxes.get(caller)  # :meth:`_outbox`, without its call per append
        if not outbox:
            outbox = self._outbox(caller)
        outbox.append((encode, (caller, waiter)))

    def submit_all(
        self, appends: list[tuple[RecordEncoder, Settable]], caller: asyncio.AbstractEventLoop
    ) -> None:
        """:meth:`submit_to` of several appends that stay together: consecutive in the same
        proposal, nothing of another put between them."""
        self._outbox(caller).extend([(encode, (caller, waiter)) for encode, waiter in appends])

    def _outbox(self, caller: asyncio.AbstractEventLoop) -> list[tuple[RecordEncoder, Waiter]]:
        """The appends of ``caller``'s current loop iteration, its hand-over scheduled at the
        iteration's end when this is the first."""
        outbox = self._outboxes.get(caller)
        if outbox is None:
            outbox = self._outboxes[caller] = []
        if not outbox:
            caller.call_soon(self._hand_over, caller)
        return outbox

    def _hand_over(self, caller: asyncio.AbstractEventLoop) -> None:
        outbox = self._outboxes.get(caller)
        if not outbox:
            return
        self._outboxes[caller] = []
        if caller is self._loop:  # the log lives on the caller's loop: propose them right here
            self._start(outbox)
            return
        with self._lock:
            self._waiting += outbox
            first = len(self._waiting) == len(outbox)
        if first:  # later ones join the batch the loop has not taken yet
            self._loop.call_soon_threadsafe(self._start_all)

    def _submit(self, encode: RecordEncoder, waiter: Waiter) -> None:
        with self._lock:
            self._waiting.append((encode, waiter))
            first = len(self._waiting) == 1
        if first:  # later ones join the batch the loop has not taken yet
            self._loop.call_soon_threadsafe(self._start_all)

    def _start_all(self) -> None:
        with self._lock:
            batch, self._waiting = self._waiting, []
        if batch:
            self._start(batch)

    def _start(self, batch: list[tuple[RecordEncoder, Waiter]]) -> None:
        """Propose ``batch`` (on the log's loop, outside the driver's step)."""
        append_batch = getattr(self.ledger, "append_batch", None)
        if append_batch is not None:  # all of them as one proposal, outcomes to the waiters directly
            done = _Proposal(self, [waiter for _, waiter in batch])
            try:
                append_batch([encode for encode, _ in batch], done)
            except Exception as exc:  # the log stopped on it: nobody may wait forever
                for i in range(len(done.waiters)):
                    done(i, exc)
            finally:
                done.proposed()
            return
        for encode, waiter in batch:
            # the tasks' first steps (each append's proposal) all run in the next loop iteration
            task = self._loop.create_task(self._append_one(encode, waiter))
            task.add_done_callback(functools.partial(self._task_done, waiter=waiter))

    async def _append_one(self, encode: RecordEncoder, waiter: Waiter) -> AppendResult:
        """One append of a log without ``append_batch`` (a group of one, whose append finishes
        in its first step): a queue offset taken for an entry that was not placed is given back
        within that step, before the next append encodes."""
        try:
            result = await self.ledger.append(encode)
        except BaseException:
            _give_back(waiter)
            raise
        if not placed(result):
            _give_back(waiter)
        return result

    def _task_done(self, task: asyncio.Task[AppendResult], waiter: Waiter) -> None:
        outcome: Outcome
        if task.cancelled():
            outcome = ReplicationError("DLedger append cancelled; outcome unknown")
        else:
            exc = task.exception()
            outcome = exc if exc is not None else task.result()
        self._done(outcome, waiter)

    def _done(self, outcome: Outcome, waiter: Waiter) -> None:
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

    def _committed(
        self, waiters: list[Waiter | None], run: list[tuple[int, int, int]], leader: str | None
    ) -> None:
        """The appends of ``run`` (slot in ``waiters``, entry index, entry pos) committed: their
        waiters on each caller's loop get them as one :class:`CommittedRun`, no
        ``AppendResult`` per append (a thread's future gets its own at once)."""
        replies = self._replies
        entries: list[tuple[Settable, int, int]] = []
        last: asyncio.AbstractEventLoop | None = None
        for slot, index, pos in run:
            waiter = waiters[slot]
            if waiter is None:
                continue
            waiters[slot] = None
            if isinstance(waiter, concurrent.futures.Future):
                waiter.set_result(AppendResult.ok(index, pos, leader))
                continue
            caller, fut = waiter
            if caller is not last:
                if not replies and not self._after_delivery(self._send_replies):
                    self._loop.call_soon(self._send_replies)
                entries = []
                replies.setdefault(caller, []).append(CommittedRun(entries, leader))
                last = caller
            entries.append((fut, index, pos))

    def _send_replies(self) -> None:
        replies, self._replies = self._replies, {}
        for caller, outcomes in replies.items():
            if caller is self._loop:  # the caller shares the log's loop: no hand-off back
                resolve_outcomes(outcomes)
                continue
            try:
                caller.call_soon_threadsafe(resolve_outcomes, outcomes)
            except RuntimeError:  # that loop is closed: nobody waits any more
                pass


def _no_delivery(callback: Callable[[], None]) -> bool:
    """The ``after_delivery`` of a log that has none: never under way."""
    return False


class _Proposal:
    """``done(i, outcome)`` of one :meth:`AppendQueue._start`'s ``append_batch``: append ``i``'s
    outcome to its waiter (once); ``committed(run, leader)`` takes a run of them that committed
    at once (:meth:`AppendQueue._committed`).

    While the proposal is made (until :meth:`proposed`), an outcome that says the entry was not
    placed (an exception: its encoder, the placement or the write failed; a refusal with no
    position: BUSY, NOT_LEADER) gives the waiter's queue offset back at once
    (``give_back()``, a put's waiter has one): an encoder or placement failure is the last
    offset taken then. The core refuses the tail of a proposal entry by entry in order, so
    those that could not give theirs back yet (a later one holds the next) give it back at
    :meth:`proposed`, last taken first. Every outcome of an entry that was not placed comes
    while the proposal is made; later ones (a commit, TIMEOUT, TERM_CHANGED) are of placed
    entries, whose offsets stay taken."""

    __slots__ = ("queue", "unplaced", "waiters")

    def __init__(self, queue: AppendQueue, waiters: list[Waiter | None]) -> None:
        self.queue = queue
        self.waiters = waiters
        #: give-backs that waited for a later entry's (None once the proposal was made)
        self.unplaced: list[Callable[[], bool]] | None = []

    def __call__(self, i: int, outcome: Outcome) -> None:
        waiters = self.waiters
        waiter = waiters[i]
        if waiter is not None:
            waiters[i] = None
            unplaced = self.unplaced
            if unplaced is not None and not placed(outcome):
                give_back = _give_back_of(waiter)
                if give_back is not None and not give_back():
                    unplaced.append(give_back)
            self.queue._done(outcome, waiter)

    def proposed(self) -> None:
        """The proposal was made: the offsets of its entries not placed that are still out go
        back, last taken first."""
        unplaced, self.unplaced = self.unplaced, None
        for give_back in reversed(unplaced or ()):
            if not give_back():  # pragma: no cover - a later entry of the queue was placed
                log.error("a queue offset given out for an entry that was not placed stays a hole")

    def committed(self, run: list[tuple[int, int, int]], leader: str | None) -> None:
        self.queue._committed(self.waiters, run, leader)


class Expirable(Protocol):
    """What :class:`Expiry` fails when its time is up: an append's waiter, or a whole put."""

    def done(self) -> bool: ...

    def set_exception(self, exception: BaseException, /) -> None: ...


class Settable(Expirable, Protocol):
    """What an append's outcome is handed to on the caller's loop: an ``asyncio.Future``, or a
    put's own waiter (:meth:`DLedgerCommitLog.put_messages_then`: one message, or each message
    of a batch). One that also has ``committed(index, pos, leader)`` is told a commit that way
    (nothing when it is done already) instead of by an OK ``AppendResult``
    (:meth:`CommittedRun.resolve`)."""

    def set_result(self, result: AppendResult, /) -> None: ...


class CommittedRun:
    """Appends of one proposal that committed, for one caller's loop: (waiter, entry index, entry
    pos) of each, and the leader's id. When the first waiter has ``committed_run(entries,
    leader)`` (a one-message put's, :class:`RunCommitted`), that one call takes the whole run,
    whatever its waiters; else each is told on its own."""

    __slots__ = ("entries", "leader")

    def __init__(self, entries: list[tuple[Settable, int, int]], leader: str | None) -> None:
        self.entries = entries
        self.leader = leader

    def resolve(self) -> None:
        leader = self.leader
        entries = self.entries
        run: RunCommitted | None = getattr(entries[0][0], "committed_run", None) if entries else None
        if run is not None:
            run(entries, leader)
            return
        tell_each(entries, leader)


def tell_each(entries: Sequence[tuple[Settable, int, int]], leader: str | None) -> None:
    """Tell each waiter of a committed run its commit: ``committed(index, pos, leader)`` where it
    has one, else an OK ``AppendResult`` (nothing for a future that is done already)."""
    for fut, index, pos in entries:
        committed = getattr(fut, "committed", None)
        if committed is not None:
            committed(index, pos, leader)
        elif not fut.done():  # else the caller gave up (timeout, cancelled request)
            fut.set_result(AppendResult.ok(index, pos, leader))


class RunCommitted(Protocol):
    """``committed_run(entries, leader)``: tell every waiter of a committed run (each exactly
    once, in order; what it does not take itself it tells as :func:`tell_each` does)."""

    def __call__(self, entries: list[tuple[Settable, int, int]], leader: str | None, /) -> None: ...


class AnswerAll(Protocol):
    """``answer_all(results)`` of a put's callback (``done`` of
    :meth:`DLedgerCommitLog.put_messages_then`) that can take several at once: the PUT_OK
    results of consecutive one-message puts of a committed run whose callbacks share it, as
    (callback, result) in order, handed over in one call instead of one call per callback (the
    broker's sends: their answer frames made and written together). It answers each of them,
    exactly once, as the callback would, and raises nothing."""

    def __call__(self, results: list[tuple[Any, PutMessageResult]], /) -> None: ...


Waiter = concurrent.futures.Future[AppendResult] | tuple[asyncio.AbstractEventLoop, Settable]
Outcome = AppendResult | BaseException
#: what :func:`resolve_outcomes` hands out on a caller's loop
Reply = tuple[Settable, Outcome] | CommittedRun
#: ``done(result or exception)`` of :meth:`DLedgerCommitLog.put_messages_then`
PutCallback = Callable[[PutMessageResult | Exception], None]


class PutThen(Protocol):
    """:meth:`DLedgerMessageStore.put_messages_then`: ``put(msgs, done, caller)``, ``caller``
    the running loop when the caller has it at hand (else None: looked up)."""

    def __call__(
        self,
        msgs: Sequence[BrokerMessage],
        done: PutCallback,
        caller: asyncio.AbstractEventLoop | None = None,
        /,
    ) -> None: ...


def placed(outcome: Outcome) -> bool:
    """The entry of an append with this outcome is in the log (committed, or appended here and
    waiting for its quorum or its fate under a new leader)."""
    return isinstance(outcome, AppendResult) and (outcome.status is AppendStatus.OK or outcome.pos >= 0)


def _give_back_of(waiter: Waiter) -> Callable[[], bool] | None:
    """The waiter's ``give_back`` (a put's waiter: its queue offset to the table), if it has one."""
    if isinstance(waiter, concurrent.futures.Future):
        return None
    give_back: Callable[[], bool] | None = getattr(waiter[1], "give_back", None)
    return give_back


def _give_back(waiter: Waiter) -> None:
    give_back = _give_back_of(waiter)
    if give_back is not None and not give_back():  # pragma: no cover - a later entry was placed
        log.error("a queue offset given out for an entry that was not placed stays a hole")


def put_error(exception: BaseException) -> Exception:
    """What a put's callback gets for an append that failed with ``exception``."""
    return exception if isinstance(exception, Exception) else ReplicationError(str(exception))


def finish_put(done: PutCallback, outcome: PutMessageResult | Exception) -> None:
    """Hand a put its outcome; a callback that raises is logged (the loop goes on)."""
    try:
        done(outcome)
    except Exception:
        log.exception("the completion of a DLedger put failed")


class Expiry:
    """The appends awaited on one loop fail with ReplicationError once ``timeout_s`` passed
    without an outcome: one timer for them all (a timer, or a ``wait_for``, per append cost the
    leader's broker loop a heap push and a cancellation per message). A waiter is a future or a
    put (a batch's put is one waiter for all its messages). The waiters added in one loop
    iteration get their deadline together at its end and are kept as one group (one clock read,
    one entry and one look at the oldest for them all, not one per send)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout_s: float) -> None:
        self.loop = loop
        self.timeout_s = timeout_s
        #: the waiters of each loop iteration, with their deadline, oldest first; the answered
        #: ones at the front of the first group are let go (replaced by None; ``_head`` of them)
        self._waiting: collections.deque[tuple[float, list[Expirable | None]]] = collections.deque()
        self._head = 0
        #: waiters added in this loop iteration (:meth:`_added` at its end)
        self._adding: list[Expirable | None] = []
        self._armed = False

    def add(self, fut: Expirable) -> None:
        adding = self._adding
        if not adding:
            self.loop.call_soon(self._added)
        adding.append(fut)

    def _added(self) -> None:
        adding, self._adding = self._adding, []
        waiting = self._waiting
        waiting.append((self.loop.time() + self.timeout_s, adding))  # one entry per iteration
        self._drop_answered()
        if waiting and not self._armed:
            self._armed = True
            self.loop.call_later(self.timeout_s, self._check)

    def _drop_answered(self) -> None:
        """Let go of the answered waiters at the front (appends are answered in order, mostly):
        now, not at the next check a timeout later, which kept every put of that timeout alive
        (with its request, message and answer) and made each full garbage collection of a
        leader under load walk them all."""
        waiting = self._waiting
        while waiting:
            group = waiting[0][1]
            i, n = self._head, len(group)
            while i < n:
                fut = group[i]
                if fut is not None and not fut.done():
                    break
                group[i] = None
                i += 1
            if i < n:
                self._head = i
                return
            waiting.popleft()
            self._head = 0

    def _check(self) -> None:
        now = self.loop.time()
        waiting = self._waiting
        while waiting and waiting[0][0] <= now:
            _, group = waiting.popleft()
            head, self._head = self._head, 0
            for fut in group[head:]:
                if fut is not None and not fut.done():
                    fut.set_exception(
                        ReplicationError("DLedger append did not finish in time; outcome unknown")
                    )
        self._drop_answered()
        if waiting:  # the oldest still waiting decides when to look again
            self.loop.call_later(waiting[0][0] - now, self._check)
        else:
            self._armed = False

    def expire_all(self, reason: str) -> int:
        """Fail every waiter now, whatever its deadline, with ReplicationError (outcome
        unknown: the entry may still commit) naming ``reason``; on :attr:`loop`. Returns how many
        were still waiting. A broker's shutdown uses it for the sends still awaiting their
        quorum when it stops waiting for them."""
        adding, self._adding = self._adding, []
        waiting = [fut for _, group in self._waiting for fut in group] + adding
        self._waiting.clear()
        self._head = 0
        failed = 0
        for fut in waiting:
            if fut is not None and not fut.done():
                fut.set_exception(ReplicationError(f"DLedger append not finished: {reason}; outcome unknown"))
                failed += 1
        return failed


def resolve_outcomes(outcomes: list[Reply]) -> None:
    for item in outcomes:
        if isinstance(item, CommittedRun):
            item.resolve()
            continue
        fut, outcome = item
        settle(fut, outcome)  # nothing for a caller that gave up (timeout, cancelled request)
