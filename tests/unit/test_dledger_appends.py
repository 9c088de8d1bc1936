"""The outcomes of a DLedger leader's appends: a run of appends that committed together is handed
to the append queue at once (``RaftGroupLog._committed`` -> ``AppendQueue._committed`` ->
``CommittedRun``) and reaches each waiter as its own OK outcome would; the one-message put's
result from a commit is the one an OK ``AppendResult`` gives; a waiter the expiry failed
meanwhile is not answered again."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import threading
import types
from collections.abc import Sequence
from typing import Any, ClassVar

import pytest

from rocketq.errors import ServiceNotAvailable, SystemBusy
from rocketq.ha.driver import BatchDone, RaftGroupLog
from rocketq.ha.entry_format import BODY_OFFSET
from rocketq.ha.replicated_log import AppendResult, AppendStatus, RecordEncoder
from rocketq.store.commitlog import PutMessageResult, PutMessageStatus
from rocketq.store.dledger_appends import AppendQueue, CommittedRun, Expiry, LedgerLoop, ReplicationError
from rocketq.store.dledger_commitlog import DLedgerCommitLog, _BatchPut, _OnePut
from rocketq.store.store_queries import StoreStats

STORE_HOST = b"\x7f\x00\x00\x01\x00\x00\x27\x0f"


class BatchLog:
    """A replicated log double that keeps each proposal's ``done`` for the test to answer."""

    def __init__(self) -> None:
        self.proposals: list[tuple[list[RecordEncoder], BatchDone]] = []

    def append_batch(self, encoders: Sequence[RecordEncoder], done: BatchDone) -> None:
        self.proposals.append((list(encoders), done))


class Told:
    """A waiter that takes a commit as ``committed(index, pos, leader)``."""

    def __init__(self) -> None:
        self.commits: list[tuple[int, int, str | None]] = []
        self.results: list[AppendResult] = []

    def done(self) -> bool:
        return bool(self.commits or self.results)

    def set_result(self, result: AppendResult, /) -> None:
        self.results.append(result)

    def set_exception(self, exception: BaseException, /) -> None:
        raise AssertionError(f"no exception expected: {exception!r}")

    def committed(self, index: int, pos: int, leader: str | None) -> None:
        self.commits.append((index, pos, leader))


def _encode(physical_offset: int) -> bytes:
    return b"r"


async def _until(condition: object, what: str) -> None:
    for _ in range(1000):  # bounded: loop iterations, no timed sleeps
        if condition():  # type: ignore[operator]
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never happened: {what}")


def test_a_committed_run_reaches_every_kind_of_waiter_once() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        ledger = BatchLog()
        queue = AppendQueue(ledger, LedgerLoop.adopt(loop))  # type: ignore[arg-type]
        fut = queue.submit_async(_encode)
        told = Told()
        queue.submit_to(_encode, loop, told)
        gave_up: asyncio.Future[AppendResult] = loop.create_future()
        queue.submit_to(_encode, loop, gave_up)
        await _until(lambda: ledger.proposals, "the proposal")
        ((encoders, done),) = ledger.proposals
        assert len(encoders) == 3
        gave_up.set_exception(ReplicationError("did not finish in time"))  # as the expiry does
        RaftGroupLog._committed(done, [(0, 7, 100), (1, 8, 200), (2, 9, 300)], "n0")
        await _until(fut.done, "the future's outcome")
        assert fut.result() == AppendResult(AppendStatus.OK, 7, 100, 100 + BODY_OFFSET, "n0")
        await _until(told.done, "the waiter's commit")
        assert told.commits == [(8, 200, "n0")] and told.results == []
        with pytest.raises(ReplicationError):
            gave_up.result()
        # a slot answered once is not answered again (a late error for the same proposal)
        done(0, ReplicationError("late"))
        done(1, ReplicationError("late"))
        await asyncio.sleep(0)
        assert fut.result().status is AppendStatus.OK and told.commits == [(8, 200, "n0")]

        # a writer thread's append: its future gets its AppendResult on the log's loop
        submitted: concurrent.futures.Future[concurrent.futures.Future[AppendResult]] = (
            concurrent.futures.Future()
        )

        def from_thread() -> None:
            submitted.set_result(queue.submit(_encode))

        await loop.run_in_executor(None, from_thread)
        waiting = submitted.result()
        await _until(lambda: len(ledger.proposals) == 2, "the thread's proposal")
        RaftGroupLog._committed(ledger.proposals[1][1], [(0, 10, 400)], "n0")
        assert waiting.result(0) == AppendResult(AppendStatus.OK, 10, 400, 400 + BODY_OFFSET, "n0")

    asyncio.run(main())


def test_a_receiver_without_committed_gets_an_ok_result_per_append() -> None:
    got: list[tuple[int, AppendResult | BaseException]] = []
    RaftGroupLog._committed(lambda slot, outcome: got.append((slot, outcome)), [(2, 5, 0), (0, 6, 96)], None)
    assert got == [
        (2, AppendResult(AppendStatus.OK, 5, 0, BODY_OFFSET, None)),
        (0, AppendResult(AppendStatus.OK, 6, 96, 96 + BODY_OFFSET, None)),
    ]


def _one_put(
    outcomes: list[PutMessageResult | Exception],
    told: list[int] | None = None,
    stats: StoreStats | None = None,
) -> _OnePut:
    """A one-message put whose append took queue offset 4; ``told`` counts the append listener's
    calls; ``stats``: the counters the put counts itself in."""
    listened = told if told is not None else []
    cl = types.SimpleNamespace(_append_listener=lambda: listened.append(1), _store_host=STORE_HOST)
    cl._put_ok = functools.partial(DLedgerCommitLog._put_ok, cl)
    ledger = types.SimpleNamespace(state=types.SimpleNamespace(leader_address=None))
    e = (None, None, 181, 0, 0, True, b"T", b"", 0)  # the record's size is e[2]
    put = _OnePut(cl, ledger, e, outcomes.append, stats)  # type: ignore[arg-type]
    put.queue_offset, put.store_timestamp, put.calls = 4, 1_700_000_000_000, 1
    return put


def test_the_one_message_puts_result_from_a_commit_is_the_ok_results() -> None:
    by_commit: list[PutMessageResult | Exception] = []
    by_result: list[PutMessageResult | Exception] = []
    told_commit: list[int] = []
    told_result: list[int] = []
    _one_put(by_commit, told_commit).committed(3, 1000, "n0")
    _one_put(by_result, told_result).set_result(
        AppendResult(AppendStatus.OK, 3, 1000, 1000 + BODY_OFFSET, "n0")
    )
    expected = PutMessageResult(
        (PutMessageStatus.PUT_OK, 1000 + BODY_OFFSET, 181, 4, 1_700_000_000_000, STORE_HOST, 1, None)
    )
    assert by_commit == by_result == [expected]
    assert told_commit == told_result == [1]  # the append listener (dispatch) told once


def test_a_one_message_put_counts_its_outcome_in_the_stores_stats_before_answering() -> None:
    stats = StoreStats()
    seen: list[tuple[int, int, int]] = []

    def answered(outcome: PutMessageResult | Exception) -> None:
        seen.append((stats.put_count, stats.put_bytes, stats.put_failures))

    for finish in (
        lambda put: put.committed(3, 1000, "n0"),
        lambda put: put.set_result(AppendResult(AppendStatus.OK, 4, 1200, 1200 + BODY_OFFSET, "n0")),
        lambda put: put.set_result(AppendResult(AppendStatus.TIMEOUT, 5, 1400, 1400 + BODY_OFFSET, "n0")),
        lambda put: put.set_exception(RuntimeError("log stopped")),
    ):
        put = _one_put([], stats=stats)
        put._done = answered
        finish(put)
    # two commits of 181 B counted, then a failed append, then an append the log failed
    assert seen == [(1, 181, 0), (2, 362, 0), (2, 362, 1), (2, 362, 2)]


def test_a_put_the_expiry_failed_is_not_answered_again_by_a_late_commit() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        expiry = Expiry(loop, 0.05)
        outcomes: list[PutMessageResult | Exception] = []
        put = _one_put(outcomes)
        expiry.add(put)
        for _ in range(200):  # bounded poll: the expiry's timer fails it after 50 ms
            if outcomes:
                break
            await asyncio.sleep(0.01)
        assert len(outcomes) == 1 and isinstance(outcomes[0], ReplicationError), outcomes
        assert "did not finish in time" in str(outcomes[0])
        put.committed(3, 1000, "n0")
        assert len(outcomes) == 1 and put.done()

    asyncio.run(main())


class Grouped:
    """A put's callback that takes several results at once (``answer_all``), as the broker's
    sends do; ``log`` records what each call got."""

    log: ClassVar[list[object]] = []

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, outcome: PutMessageResult | Exception) -> None:
        Grouped.log.append(("one", self.name, outcome))

    @staticmethod
    def answer_all(results: list[tuple[Any, PutMessageResult]]) -> None:
        Grouped.log.append(("all", [(g.name, r) for g, r in results]))


def test_a_committed_run_of_one_message_puts_is_answered_in_one_call_per_group_in_order() -> None:
    """``CommittedRun.resolve`` of a run whose first waiter is a one-message put: one call
    (``committed_run``) tells every waiter once, in order; the append listener is told once,
    before any result; consecutive callbacks with the same ``answer_all`` get their results in
    one call, with the result ``committed`` gives; another kind of waiter, or a callback
    without ``answer_all``, ends a group; a put the expiry failed gets nothing more."""
    Grouped.log = []
    told: list[int] = []
    plain: list[PutMessageResult | Exception] = []
    puts = [_one_put([], told) for _ in range(6)]
    for put, name in zip(puts, "abcdef", strict=True):
        put._done = Grouped(name)
    cl = puts[0].cl
    for put in puts:
        put.cl = cl
    puts[4]._done = plain.append  # no answer_all: answered on its own
    puts[5]._finished = True  # failed by the expiry before the commit
    other = Told()
    entries = [
        (puts[0], 1, 100),
        (puts[1], 2, 300),
        (other, 3, 500),
        (puts[2], 4, 700),
        (puts[3], 5, 900),
        (puts[4], 6, 1100),
        (puts[5], 7, 1300),
    ]

    def ok(pos: int) -> PutMessageResult:
        return PutMessageResult(
            (PutMessageStatus.PUT_OK, pos + BODY_OFFSET, 181, 4, 1_700_000_000_000, STORE_HOST, 1, None)
        )

    seen_told: list[int] = []
    cl._append_listener = lambda: seen_told.append(len(Grouped.log))
    CommittedRun(entries, "n0").resolve()  # type: ignore[arg-type]
    assert seen_told == [0]  # once, before any answer
    assert Grouped.log == [
        ("all", [("a", ok(100)), ("b", ok(300))]),
        ("all", [("c", ok(700)), ("d", ok(900))]),
    ]
    assert other.commits == [(3, 500, "n0")]
    assert plain == [ok(1100)]
    assert all(put.done() for put in puts)
    # each answered once: a second resolve of the same run answers nobody again
    Grouped.log = []
    cl._append_listener = lambda: None
    CommittedRun(entries[:2] + entries[3:], "n0").resolve()  # type: ignore[arg-type]
    assert Grouped.log == [] and plain == [ok(1100)]


def _batch_put(outcomes: list[PutMessageResult | Exception], n: int = 3) -> _BatchPut:
    """A put of ``n`` messages whose appends took queue offsets 4, 5, ...: its items as the
    append queue holds them."""
    table = {0: 4 + n}  # queue 0 of topic T: the next queue offset
    cl = types.SimpleNamespace(
        _append_listener=None,
        _store_host=STORE_HOST,
        _put_lock=threading.Lock(),
        topic_queue_table=types.SimpleNamespace(of_topic=lambda topic: table),
        table=table,
    )
    cl._put_ok = functools.partial(DLedgerCommitLog._put_ok, cl)
    ledger = types.SimpleNamespace(state=types.SimpleNamespace(leader_address="127.0.0.1:10911"))
    m = types.SimpleNamespace(topic="T", queue_id=0)
    encoded = [(m, None, 100 + i, 0, 0, True, b"T", b"", 0) for i in range(n)]
    put = _BatchPut(cl, ledger, encoded, outcomes.append)  # type: ignore[arg-type]
    for i, item in enumerate(put.items):
        item.queue_offset, item.store_timestamp, item.calls = 4 + i, 1_700_000_000_000 + i, 1
    return put


def test_a_batch_put_is_answered_once_when_its_last_message_commits() -> None:
    """Commits may reach the items in any order and in several runs; the put is answered once,
    with each message's offset in its place, the first queue offset and the last timestamp."""
    outcomes: list[PutMessageResult | Exception] = []
    put = _batch_put(outcomes)
    put.items[2].committed(12, 2000, "n0")
    put.items[0].committed(10, 1000, "n0")
    assert outcomes == [] and not put.done()
    put.items[1].set_result(AppendResult(AppendStatus.OK, 11, 1500, 1500 + BODY_OFFSET, "n0"))
    assert outcomes == [
        PutMessageResult(
            (
                PutMessageStatus.PUT_OK, 1000 + BODY_OFFSET, 303, 4, 1_700_000_000_002, STORE_HOST, 3,
                [1000 + BODY_OFFSET, 1500 + BODY_OFFSET, 2000 + BODY_OFFSET],
            )
        )
    ]  # fmt: skip
    assert all(item.done() for item in put.items)


def test_a_batch_put_fails_once_at_its_first_failure_and_ignores_later_outcomes() -> None:
    refused: list[PutMessageResult | Exception] = []
    put = _batch_put(refused)
    put.items[0].committed(10, 1000, "n0")
    put.items[1].set_result(AppendResult(AppendStatus.NOT_LEADER, leader_id="n1"))
    put.items[2].set_result(AppendResult(AppendStatus.NOT_LEADER, leader_id="n1"))
    assert len(refused) == 1 and isinstance(refused[0], ServiceNotAvailable), refused
    # an outcome after the proposal was made gives no queue offset back: those of entries not
    # placed went back while it was made (test_offsets_of_entries_not_placed_go_back_...)
    assert put.cl.table == {0: 7}
    put.items[2].committed(12, 2000, "n0")  # a late commit changes nothing
    assert len(refused) == 1

    broken: list[PutMessageResult | Exception] = []
    put = _batch_put(broken)
    put.items[1].set_exception(OSError("disk gone"))
    put.items[0].committed(10, 1000, "n0")
    assert len(broken) == 1 and isinstance(broken[0], OSError)


def test_a_batch_put_the_expiry_failed_is_not_answered_again() -> None:
    async def main() -> None:
        outcomes: list[PutMessageResult | Exception] = []
        put = _batch_put(outcomes, 2)
        expiry = Expiry(asyncio.get_running_loop(), 0.05)
        expiry.add(put)  # the batch is one waiter of the expiry
        put.items[0].committed(10, 1000, "n0")
        for _ in range(200):  # bounded poll: the expiry's timer fails it after 50 ms
            if outcomes:
                break
            await asyncio.sleep(0.01)
        assert len(outcomes) == 1 and isinstance(outcomes[0], ReplicationError), outcomes
        put.items[1].committed(11, 1500, "n0")
        assert len(outcomes) == 1 and put.done()

    asyncio.run(main())


def test_a_batch_message_that_cannot_be_encoded_stops_the_later_ones() -> None:
    put = _batch_put([])
    for item in put.items:
        item.calls = 0
    put.items[0].e = None  # its encoder raises (no message to encode)
    with pytest.raises(TypeError):
        put.items[0].encode(1000)
    with pytest.raises(ReplicationError, match="an earlier message of the batch was not appended"):
        put.items[1].encode(2000)


class Refusing:
    """A replicated log double that answers each proposal as the core answers one it takes the
    first ``take`` entries of: those placed (appended, waiting for their quorum), the rest
    refused one by one in order (BUSY), or ``fail`` for the last when given (its placement
    failed: an exception while the proposal is made)."""

    def __init__(self, take: int, fail: BaseException | None = None) -> None:
        self.take = take
        self.fail = fail

    def append_batch(self, encoders: Sequence[RecordEncoder], done: BatchDone) -> None:
        n = len(encoders)
        if self.fail is not None:
            done(n - 1, self.fail)
            n -= 1
        for i in range(n):
            if i >= self.take:
                done(i, AppendResult(AppendStatus.BUSY, leader_id="n0"))


@pytest.mark.parametrize(
    ("take", "fail", "table"),
    [(0, None, 4), (1, None, 5), (2, None, 6), (3, None, 7), (2, OSError("full"), 6), (0, OSError("x"), 4)],
)
def test_offsets_of_entries_not_placed_go_back_while_the_proposal_is_made(
    take: int, fail: BaseException | None, table: int
) -> None:
    """A put of three messages whose encoders took queue offsets 4, 5 and 6: what the log did
    not place gives its offset back before the proposal's call returns, last taken first (the
    core refuses a proposal's tail entry by entry from its first), so that the next put takes
    the first one not placed; the placed ones keep theirs."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        outcomes: list[PutMessageResult | Exception] = []
        put = _batch_put(outcomes, 3)
        queue = AppendQueue(Refusing(take, fail), LedgerLoop.adopt(loop))  # type: ignore[arg-type]
        queue.submit_all([(item.encode, item) for item in put.items], loop)
        await _until(lambda: queue._outboxes[loop] == [], "the proposal")
        assert put.cl.table == {0: table}
        if take < 3:
            await _until(lambda: outcomes, "the put's failure")
            assert isinstance(outcomes[0], SystemBusy if fail is None else OSError), outcomes

    asyncio.run(main())


def test_expire_all_fails_every_waiter_at_once_and_leaves_the_answered_ones_alone() -> None:
    """A broker's shutdown stops waiting for the quorum: every put still waiting (those added in
    this loop iteration too) fails now with ReplicationError (outcome unknown), long before its
    own deadline; one that was answered keeps its answer."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        expiry = Expiry(loop, 60.0)
        earlier = [loop.create_future() for _ in range(3)]
        for fut in earlier:
            expiry.add(fut)
        await asyncio.sleep(0)  # their deadline is set at the end of the iteration
        earlier[0].set_result("committed")
        just_added: asyncio.Future[object] = loop.create_future()
        expiry.add(just_added)
        assert expiry.expire_all("broker shutting down") == 3
        assert earlier[0].result() == "committed"
        for fut in (*earlier[1:], just_added):
            with pytest.raises(ReplicationError, match="broker shutting down; outcome unknown"):
                fut.result()
        assert expiry.expire_all("again") == 0
        await asyncio.sleep(0)  # the end-of-iteration step finds nothing left to time

    asyncio.run(main())
