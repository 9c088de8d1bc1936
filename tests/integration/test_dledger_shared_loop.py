"""A Raft group whose logs live on a running event loop they were given, as a broker's does
(``DLedgerMessageStore.run_ledger_on``): three DLedger stores in this process, all on one loop
running in its own thread, opened from the test's thread, real sockets on 127.0.0.1 and real
files. Puts made on that loop reach the log and come back with no thread hand-off; a
synchronous put made on it raises at once (it would wait for itself), one made from another
thread waits for its quorum as before; shutdown leaves the loop running and nothing of the logs
on it."""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib
import sys
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from _support.dledger_stores import caught_up_leader, store_group
from _support.procs import free_port
from _support.wait import wait_until
from rocketq.config import StoreConfig
from rocketq.ha.driver import RaftGroupLog
from rocketq.message import BrokerMessage, Message
from rocketq.store.commitlog import PutMessageResult, PutMessageStatus
from rocketq.store.dledger_appends import LedgerLoop
from rocketq.store.dledger_store import DLedgerMessageStore
from rocketq.store.message_store import open_message_store

T = TypeVar("T")
PUTS = 40


class Host:
    """An event loop running in a thread of its own (the broker's loop of these tests)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="host-loop", daemon=True)
        self.thread.start()

    def call(self, coro: Coroutine[Any, Any, T], timeout_s: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def host() -> Iterator[Host]:
    h = Host()
    try:
        yield h
    finally:
        h.close()


@pytest.fixture
def group(
    tmp_path: pathlib.Path, store_config: StoreConfig, host: Host
) -> Iterator[list[DLedgerMessageStore]]:
    with store_group(
        store_config, tmp_path, before_start=lambda store: store.run_ledger_on(host.loop)
    ) as stores:  # started from this thread, while the host loop runs: the logs start there
        yield stores


_leader = caught_up_leader


def _msg(body: bytes) -> BrokerMessage:
    return BrokerMessage.from_message(Message("T", body), 0)


def test_puts_on_the_logs_loop_reach_it_and_come_back_without_a_thread_hand_off(
    group: list[DLedgerMessageStore], host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    leader = wait_until(lambda: _leader(group), "a leader", 30)
    for store in group:
        assert store.ledger_loop is not None and store.ledger_loop.loop is host.loop
        assert not store.ledger_loop.owns_thread

    async def task_names() -> set[str]:
        return {t.get_name() for t in asyncio.all_tasks()}

    assert {"raft-tick-n0", "raft-tick-n1", "raft-tick-n2"} <= host.call(task_names())

    # every callback handed to the host loop from another thread, by name
    handed: list[str] = []
    threadsafe = host.loop.call_soon_threadsafe

    def counting(callback: Callable[..., object], *args: Any, **kwargs: Any) -> asyncio.Handle:
        handed.append(getattr(callback, "__qualname__", repr(callback)))
        return threadsafe(callback, *args, **kwargs)

    monkeypatch.setattr(host.loop, "call_soon_threadsafe", counting)

    async def put_all() -> list[PutMessageResult | Exception]:
        loop = asyncio.get_running_loop()
        outcomes: list[PutMessageResult | Exception] = []
        all_done = loop.create_future()

        def done(outcome: PutMessageResult | Exception) -> None:
            outcomes.append(outcome)
            if len(outcomes) == PUTS and not all_done.done():
                all_done.set_result(None)

        for i in range(PUTS // 2):
            leader.put_messages_then([_msg(f"then{i}".encode())], done)
        awaited = await asyncio.gather(
            *(leader.put_messages_async([_msg(f"async{i}".encode())]) for i in range(PUTS // 2))
        )
        outcomes += awaited
        if len(outcomes) == PUTS:
            all_done.set_result(None)
        await all_done
        return outcomes

    counted, size = leader.stats.put_count, leader.stats.put_bytes
    outcomes = host.call(put_all())
    monkeypatch.undo()
    results = [o for o in outcomes if isinstance(o, PutMessageResult)]
    assert len(results) == PUTS and all(r.status is PutMessageStatus.PUT_OK for r in results), outcomes
    # every put counted in the store's stats, the one-message puts of put_messages_then too
    assert leader.stats.put_count - counted == PUTS
    assert leader.stats.put_bytes - size == sum(r.size for r in results)
    assert sorted(r.queue_offset for r in results) == list(range(PUTS))
    # neither the appends nor their outcomes crossed threads
    assert not {"_AppendQueue._start_all", "_resolve"} & set(handed), handed
    for store in group:  # committed on every member
        for r in results:
            m = wait_until(lambda s=store, o=r.physical_offset: s.look_message_by_offset(o), "a record", 30)
            assert m.queue_offset == r.queue_offset


def test_puts_a_followers_acknowledgement_commits_are_answered_within_its_delivery(
    group: list[DLedgerMessageStore], host: Host
) -> None:
    """On the log's own loop, the puts a follower's acknowledgement commits are answered as
    soon as the driver has handled that acknowledgement, inside its delivery (the peer
    connection's read), not from a loop callback of the append queue's own."""
    leader = wait_until(lambda: _leader(group), "a leader", 30)
    wait_until(lambda: leader.commitlog.writable, "the leader taking writes", 30)
    deliver = RaftGroupLog._deliver.__code__

    def in_delivery() -> bool:
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code is deliver:
                return True
            frame = frame.f_back  # type: ignore[assignment]
        return False

    async def put_all() -> list[tuple[PutMessageResult | Exception, bool]]:
        loop = asyncio.get_running_loop()
        outcomes: list[tuple[PutMessageResult | Exception, bool]] = []
        all_done = loop.create_future()

        def done(outcome: PutMessageResult | Exception) -> None:
            outcomes.append((outcome, in_delivery()))
            if len(outcomes) == PUTS:
                all_done.set_result(None)

        for i in range(PUTS):
            leader.put_messages_then([_msg(f"m{i}".encode())], done)
            if i % 10 == 9:  # a few proposals
                await asyncio.sleep(0)
        await all_done
        return outcomes

    outcomes = host.call(put_all())
    assert all(isinstance(o, PutMessageResult) and o.status is PutMessageStatus.PUT_OK for o, _ in outcomes)
    assert [inside for _, inside in outcomes] == [True] * PUTS


def test_a_synchronous_put_on_the_logs_loop_raises_and_one_from_another_thread_commits(
    group: list[DLedgerMessageStore], host: Host
) -> None:
    leader = wait_until(lambda: _leader(group), "a leader", 30)
    wait_until(lambda: leader.commitlog.writable, "the leader taking writes", 30)

    async def put_on_the_loop() -> PutMessageResult:
        return leader.put_message(Message("T", b"on the loop"), queue_id=0)

    with pytest.raises(
        RuntimeError, match="synchronous DLedger put called on the replicated log's event loop"
    ):
        host.call(put_on_the_loop(), 10)  # raises at once: no deadlock, no queue offset taken
    r = leader.put_message(Message("T", b"from a thread"), queue_id=0)
    assert r.status is PutMessageStatus.PUT_OK and r.queue_offset == 0
    m = leader.look_message_by_offset(r.physical_offset)
    assert m is not None and m.body == b"from a thread"


def test_an_adopted_loop_is_left_to_its_owner(host: Host) -> None:
    ledger_loop = LedgerLoop.adopt(host.loop)
    assert not ledger_loop.owns_thread and not ledger_loop.on_loop()

    async def nested() -> int:
        return 1

    async def wait_inside() -> int:
        assert ledger_loop.on_loop()
        return ledger_loop.run(nested(), 5)

    with pytest.raises(RuntimeError, match="called on the ledger loop itself"):
        host.call(wait_inside(), 10)
    assert ledger_loop.run(nested(), 5) == 1
    ledger_loop.stop()  # not the owner: the loop goes on
    assert host.loop.is_running() and ledger_loop.run(nested(), 5) == 1


def test_a_store_opened_on_the_loop_it_was_given_fails_clearly(
    tmp_path: pathlib.Path, store_config: StoreConfig, host: Host
) -> None:
    cfg = dataclasses.replace(
        store_config,
        store_path_root_dir=str(tmp_path / "n0"),
        enable_dleger_commit_log=True,
        d_leger_peers=f"n0-127.0.0.1:{free_port()};n1-127.0.0.1:{free_port()}",
        d_leger_self_id="n0",
    )
    store = open_message_store(cfg)
    assert isinstance(store, DLedgerMessageStore)
    store.run_ledger_on(host.loop)

    async def open_here() -> None:
        store.start()

    with pytest.raises(RuntimeError, match="called on the ledger loop itself"):
        host.call(open_here(), 30)
    store.shutdown()


def test_a_put_given_its_callers_loop_does_not_look_it_up_and_each_loop_gets_its_own_outcomes(
    group: list[DLedgerMessageStore], host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``put_messages_then(msgs, done, caller)``: a caller that hands over its running loop (a
    broker's connection) saves the lookup (``asyncio.get_running_loop()``, a system call);
    without it the loop is looked up. Either way the outcome comes on the caller's own loop and
    the put expiry follows the loop the puts come from: the log's loop, or another one."""
    leader = wait_until(lambda: _leader(group), "a leader", 30)
    wait_until(lambda: leader.commitlog.writable, "the leader taking writes", 30)
    lookups = [0]
    original = asyncio.get_running_loop

    def counting() -> asyncio.AbstractEventLoop:
        lookups[0] += 1
        return original()

    monkeypatch.setattr(asyncio, "get_running_loop", counting)

    async def puts(hand_over: bool, batch: int) -> tuple[int, list[tuple[object, threading.Thread]]]:
        """Four puts of ``batch`` messages: the lookups they made, their outcomes and threads."""
        loop = original()
        outcomes: list[tuple[object, threading.Thread]] = []
        all_done = loop.create_future()

        def done(outcome: PutMessageResult | Exception) -> None:
            outcomes.append((outcome, threading.current_thread()))
            if len(outcomes) == 4:
                all_done.set_result(None)

        made = 0
        for i in range(4):
            msgs = [_msg(f"p{i}.{k}".encode()) for k in range(batch)]
            before = lookups[0]
            leader.put_messages_then(msgs, done, loop if hand_over else None)
            made += lookups[0] - before
        await all_done
        assert leader.commitlog._expiry is not None and leader.commitlog._expiry.loop is loop
        return made, outcomes

    other = Host()
    try:
        for hand_over, lookups_per_put in ((True, 0), (False, 1)):
            for batch in (1, 2):
                for where in (host, other):  # the log's loop, then one of another thread
                    made, outcomes = where.call(puts(hand_over, batch))
                    assert made == 4 * lookups_per_put, (hand_over, batch)
                    assert all(
                        isinstance(o, PutMessageResult) and o.status is PutMessageStatus.PUT_OK
                        for o, _ in outcomes
                    ), outcomes
                    assert {t for _, t in outcomes} == {where.thread}
    finally:
        other.close()
