"""Sends put on the broker's loop are dispatched by the loop itself when their window is small
(``inline_dispatch_max_bytes``), without waking the dispatch thread; a larger window, and every
window with the bound at 0, goes to the thread as before. Real broker, real sockets, real store."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from test_broker_server import decode_records, dispatched, run, running_broker

from _support.requests import create_topic_request, pull_request, send_request
from _support.wait import wait_until_async
from rocketq.broker.long_polling import ARRIVED
from rocketq.broker.loop_coalesce import LoopWakeup
from rocketq.broker.server import INLINE_WINDOW_PUTS, Broker
from rocketq.config import StoreConfig
from rocketq.errors import ResponseCode
from rocketq.message import Message
from rocketq.remoting import RemotingClient, RequestCode, create_request, timer_selector
from rocketq.store import PutMessageStatus
from rocketq.store.dledger_store import DLedgerMessageStore
from rocketq.store.record_scan import DispatchRequest

TOPIC = "InlineT"


class Windows:
    """A dispatcher noting which thread dispatched each window, and how many records."""

    def __init__(self) -> None:
        self.threads: list[str] = []
        self.sizes: list[int] = []
        self.records = 0

    def __call__(self, reqs: list[DispatchRequest]) -> None:
        self.threads.append(threading.current_thread().name)
        self.sizes.append(len(reqs))
        self.records += len(reqs)


@asynccontextmanager
async def broker_with_topic(cfg: StoreConfig) -> AsyncIterator[tuple[Broker, RemotingClient, str]]:
    """:func:`running_broker` with ``TOPIC`` (one queue) created."""
    async with running_broker(cfg) as (broker, client, addr):
        assert (await client.invoke(addr, create_topic_request(TOPIC, queues=1))).code == ResponseCode.SUCCESS
        yield broker, client, addr


def watch(broker: Broker) -> tuple[Windows, LoopWakeup]:
    store = broker.store
    assert store is not None and store.reput is not None
    windows = Windows()
    store.reput.dispatchers.append(windows)
    # the thread's idle wait ends only when woken from now on (no periodic pass taking a window)
    store.reput.interval_s = None
    wake = store.commitlog.append_listener
    assert isinstance(wake, LoopWakeup)
    return windows, wake


@pytest.mark.parametrize("max_bytes", [64 * 1024, 0], ids=["inline", "off"])
def test_sends_are_dispatched_on_the_loop_without_a_thread_wakeup(
    store_config: StoreConfig, max_bytes: int
) -> None:
    cfg = dataclasses.replace(
        store_config, flush_disk_type="ASYNC_FLUSH", inline_dispatch_max_bytes=max_bytes
    )

    async def main() -> None:
        async with broker_with_topic(cfg) as (broker, client, addr):
            windows, wake = watch(broker)
            loop_thread = threading.current_thread().name  # client and broker share this loop
            for i in range(20):
                answer = await client.invoke(addr, send_request(TOPIC, b"m%d" % i))
                assert answer.code == ResponseCode.SUCCESS
            store = broker.store
            assert store is not None
            # not store.wait_dispatched: it wakes the thread, which would take a window the
            # loop holds for the end of its interval
            await wait_until_async(lambda: store.get_max_offset(TOPIC, 0) == 20, "20 dispatched", 10)
            assert windows.records == 20
            assert broker.store is not None and broker.store.get_max_offset(TOPIC, 0) == 20
            if max_bytes:
                assert set(windows.threads) == {loop_thread}
                assert wake.wakeups == 0 and wake.handled_on_loop >= 1
            else:
                assert set(windows.threads) == {"ReputMessageService"}
                assert wake.wakeups >= 1 and wake.handled_on_loop == 0

    run(main())


@pytest.mark.parametrize("interval_ms", [2000, 0], ids=["coalesced", "every-iteration"])
def test_sends_within_one_interval_share_a_window(store_config: StoreConfig, interval_ms: int) -> None:
    """The first send after a quiet interval is dispatched at once; sends answered within the
    next ``inline_dispatch_interval_ms`` wait for one window together (with 0, each send's
    iteration dispatches its own)."""
    cfg = dataclasses.replace(
        store_config, flush_disk_type="ASYNC_FLUSH", inline_dispatch_interval_ms=interval_ms
    )

    async def main() -> None:
        async with broker_with_topic(cfg) as (broker, client, addr):
            windows, _wake = watch(broker)
            store = broker.store
            assert store is not None
            assert (await client.invoke(addr, send_request(TOPIC, b"first"))).code == ResponseCode.SUCCESS
            await wait_until_async(lambda: store.get_max_offset(TOPIC, 0) == 1, "the first dispatched", 10)
            for i in range(4):
                answer = await client.invoke(addr, send_request(TOPIC, b"m%d" % i))
                assert answer.code == ResponseCode.SUCCESS
            cq = store.consume_queues.find(TOPIC, 0)
            assert cq is not None
            if interval_ms:
                assert cq.max_offset_in_queue == 1  # the four wait for the next window
                assert store.dispatch_window is not None and store.dispatch_window.pending
            else:
                assert store.dispatch_window is None
            # a read takes the waiting window (here at once, not at the interval's end)
            await wait_until_async(lambda: store.get_max_offset(TOPIC, 0) == 5, "the five dispatched", 10)
            assert windows.sizes == ([1, 4] if interval_ms else [1, 1, 1, 1, 1])

    run(main())


def test_reads_after_an_answered_send_take_the_waiting_window(store_config: StoreConfig) -> None:
    """With dispatch windows (an interval far longer than the test), the offset query, the pull
    and the key query that follow answered sends find them: each read takes the window still
    waiting for its time, on the loop; a read from another thread waits for the dispatch
    thread to take it. Without the reads' settling every assertion after the sends fails."""
    cfg = dataclasses.replace(
        store_config, flush_disk_type="ASYNC_FLUSH", inline_dispatch_interval_ms=600_000
    )

    async def main() -> None:
        async with broker_with_topic(cfg) as (broker, client, addr):
            windows, _wake = watch(broker)
            store = broker.store
            assert store is not None and store.dispatch_window is not None
            first = await client.invoke(addr, send_request(TOPIC, b"first"))
            assert first.code == ResponseCode.SUCCESS  # after a quiet interval: dispatched at once
            await wait_until_async(lambda: windows.records == 1, "the first dispatched", 10)
            for i in range(3):
                answer = await client.invoke(
                    addr, send_request(TOPIC, b"m%d" % i, properties={"KEYS": f"k{i}"})
                )
                assert answer.code == ResponseCode.SUCCESS
            assert store.dispatch_window.pending and windows.records == 1  # waiting for its time
            max_offset = await client.invoke(
                addr, create_request(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": 0})
            )
            assert max_offset.code == ResponseCode.SUCCESS and max_offset.ext_fields["offset"] == "4"
            assert windows.sizes == [1, 3] and not store.dispatch_window.pending

            await client.invoke(addr, send_request(TOPIC, b"pulled", properties={"KEYS": "kp"}))
            pulled = await client.invoke(addr, pull_request(TOPIC, 4))
            assert pulled.code == ResponseCode.SUCCESS
            assert [m.body for m in decode_records(pulled.body)] == [b"pulled"]

            await client.invoke(addr, send_request(TOPIC, b"keyed", properties={"KEYS": "wanted"}))
            query = create_request(
                RequestCode.QUERY_MESSAGE,
                {
                    "topic": TOPIC,
                    "key": "wanted",
                    "maxNum": 32,
                    "beginTimestamp": 0,
                    "endTimestamp": time.time_ns() // 1_000_000 + 1000,
                },
            )
            found = await client.invoke(addr, query)
            assert found.code == ResponseCode.SUCCESS, found.remark
            assert [m.body for m in decode_records(found.body)] == [b"keyed"]

            await client.invoke(addr, send_request(TOPIC, b"elsewhere"))
            assert store.dispatch_window.pending
            # a read from another thread (a worker, the dashboard's HTTP thread)
            assert await asyncio.to_thread(store.get_max_offset, TOPIC, 0) == 7
            assert windows.threads[-1] == "ReputMessageService"
            assert windows.records == 7

    run(main())


def test_a_window_over_the_bound_goes_to_the_dispatch_thread(store_config: StoreConfig) -> None:
    cfg = dataclasses.replace(store_config, flush_disk_type="ASYNC_FLUSH", inline_dispatch_max_bytes=2048)

    async def main() -> None:
        async with broker_with_topic(cfg) as (broker, client, addr):
            windows, wake = watch(broker)
            store = broker.store
            assert store is not None
            small = await client.invoke(addr, send_request(TOPIC, b"small"))
            assert small.code == ResponseCode.SUCCESS
            # (not store.wait_dispatched, which wakes the thread itself)
            await wait_until_async(lambda: store.get_max_offset(TOPIC, 0) == 1, "the small one", 10)
            assert windows.threads == [threading.current_thread().name] and wake.wakeups == 0
            big = await client.invoke(addr, send_request(TOPIC, b"B" * 4096))  # one record over 2 KiB
            assert big.code == ResponseCode.SUCCESS
            await wait_until_async(lambda: store.get_max_offset(TOPIC, 0) == 2, "the big one", 10)
            assert windows.threads[1:] == ["ReputMessageService"] and wake.wakeups == 1
            assert windows.records == 2

    run(main())


def test_a_held_pull_is_woken_by_an_inline_dispatch(store_config: StoreConfig) -> None:
    """The arrival reaches the held pull directly from the loop's dispatch: no hand-off through
    the thread-safe batcher's scheduled delivery."""
    cfg = dataclasses.replace(store_config, flush_disk_type="ASYNC_FLUSH")

    async def main() -> None:
        async with broker_with_topic(cfg) as (broker, client, addr):
            windows, wake = watch(broker)
            assert broker.ctx is not None
            hold = broker.ctx.hold
            held = asyncio.ensure_future(
                client.invoke(addr, pull_request(TOPIC, 0, suspend=True, suspend_ms=20_000), 30.0)
            )
            await wait_until_async(lambda: hold.held_count == 1, "the pull to be held", 10, 0.005)
            loop = asyncio.get_running_loop()
            scheduled_from_threads: list[object] = []
            original = loop.call_soon_threadsafe

            def spy(callback: object, *args: object, **kwargs: object) -> object:
                scheduled_from_threads.append(callback)
                return original(callback, *args, **kwargs)  # type: ignore[arg-type]

            loop.call_soon_threadsafe = spy  # type: ignore[method-assign]
            try:
                sent = await client.invoke(addr, send_request(TOPIC, b"late"))
                assert sent.code == ResponseCode.SUCCESS
                answer = await held
            finally:
                del loop.call_soon_threadsafe
            assert answer.code == ResponseCode.SUCCESS and answer.ext_fields["nextBeginOffset"] == "1"
            assert hold.wakeups[ARRIVED] == 1
            assert windows.threads == [threading.current_thread().name] and wake.wakeups == 0
            # no delivery of arrivals through the self-pipe (other hand-offs, a metadata write's
            # future, may happen meanwhile)
            assert [
                cb for cb in scheduled_from_threads if getattr(cb, "__self__", None) is hold._arrivals
            ] == []

    run(main())


def test_sync_flush_sends_are_dispatched_on_the_loop_after_their_round(store_config: StoreConfig) -> None:
    """Under SYNC_FLUSH the group commit's round is carried to the loop, which dispatches the
    round's records itself once it has answered their sends: the dispatch thread is not woken."""
    cfg = dataclasses.replace(store_config, flush_disk_type="SYNC_FLUSH")

    async def main() -> None:
        async with broker_with_topic(cfg) as (broker, client, addr):
            store = broker.store
            assert store is not None and store.reput is not None
            hop = store.flushed_dispatch_wake
            assert isinstance(hop, LoopWakeup) and store.commitlog.append_listener is None
            windows = Windows()
            store.reput.dispatchers.append(windows)
            store.reput.interval_s = None
            for i in range(10):
                answer = await client.invoke(addr, send_request(TOPIC, b"s%d" % i))
                assert answer.code == ResponseCode.SUCCESS
            reput = store.reput
            await wait_until_async(
                lambda: windows.records == 10 and reput.behind() == 0, "dispatch", 10, 0.001
            )
            assert set(windows.threads) == {threading.current_thread().name}
            assert hop.wakeups == 0 and hop.handled_on_loop >= 1
            assert store.get_max_offset(TOPIC, 0) == 10

    run(main())


def test_a_put_from_another_thread_still_wakes_the_dispatch_thread(store_config: StoreConfig) -> None:
    """Puts made off the loop (pop, transactions, worker threads) wake the thread at once, as
    before: the loop is not asked to dispatch them."""
    cfg = dataclasses.replace(store_config, flush_disk_type="ASYNC_FLUSH")

    async def main() -> None:
        async with broker_with_topic(cfg) as (broker, _client, _addr):
            windows, wake = watch(broker)
            store = broker.store
            assert store is not None
            put = await asyncio.to_thread(store.put_message, Message(TOPIC, b"from a worker"), 0)
            assert put.status is PutMessageStatus.PUT_OK
            await dispatched(broker)
            assert windows.threads == ["ReputMessageService"]
            assert wake.wakeups == 1 and wake.handled_on_loop == 0

    run(main())


@pytest.mark.parametrize("max_bytes", [4096, 64, 0], ids=["default", "window-over-the-bound", "inline-off"])
def test_dledger_reads_take_the_window_waiting_for_the_thread(
    store_config: StoreConfig, monkeypatch: pytest.MonkeyPatch, max_bytes: int
) -> None:
    """DLedger mode wakes the dispatch thread at most once per ``DISPATCH_WAKE_INTERVAL_S``
    (here far longer than the test) for the puts committed on the loop (a group of one put on
    the loop here, as a Raft group's puts complete there): the offset query after them
    dispatches the window still waiting on the loop, whatever ``inline_dispatch_max_bytes``
    says (up to ``DLEDGER_SETTLE_MAX_BYTES``), and a read from another thread waits for the
    thread to take it. Without the reads' settling both find one record. With inline dispatch
    off the read wakes the thread at once instead."""
    monkeypatch.setattr(DLedgerMessageStore, "DISPATCH_WAKE_INTERVAL_S", 600.0)
    monkeypatch.setattr(DLedgerMessageStore, "FOLLOWER_DISPATCH_WAKE_INTERVAL_S", 300.0)
    cfg = dataclasses.replace(
        store_config,
        flush_disk_type="ASYNC_FLUSH",
        enable_dleger_commit_log=True,
        d_leger_self_id="n0",
        inline_dispatch_max_bytes=max_bytes,
    )

    async def main() -> None:
        async with broker_with_topic(cfg) as (broker, client, addr):
            windows, wake = watch(broker)
            store = broker.store
            assert isinstance(store, DLedgerMessageStore) and store.dispatch_window is wake
            assert wake.next_interval() == 600.0  # the leader's interval: a group of one leads
            assert store.put_message(Message(TOPIC, b"first"), 0).status is PutMessageStatus.PUT_OK
            # after a quiet interval: the thread, at the end of the loop's iteration
            await wait_until_async(lambda: windows.records == 1, "the first dispatched", 10)
            assert windows.threads == ["ReputMessageService"] and wake.wakeups == 1
            for i in range(3):
                put = store.put_message(Message(TOPIC, b"m%d" % i * 40), 0)
                assert put.status is PutMessageStatus.PUT_OK
                await asyncio.sleep(0)  # a loop iteration each
            assert wake.pending and windows.records == 1  # waiting for the interval's end
            assert store.reput is not None and store.reput.behind() > 64
            max_offset = await client.invoke(
                addr, create_request(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": 0})
            )
            assert max_offset.code == ResponseCode.SUCCESS
            assert not wake.pending
            if not max_bytes:  # the thread, woken by the read
                assert wake.wakeups == 2 and wake.handled_on_loop == 0
                await wait_until_async(lambda: windows.records == 4, "the three dispatched", 10)
                assert windows.threads == ["ReputMessageService"] * 2
                return
            assert max_offset.ext_fields["offset"] == "4"
            assert windows.sizes == [1, 3] and windows.threads[-1] == threading.current_thread().name
            assert wake.wakeups == 1 and wake.handled_on_loop == 1

            assert store.put_message(Message(TOPIC, b"elsewhere"), 0).status is PutMessageStatus.PUT_OK
            assert wake.pending
            assert await asyncio.to_thread(store.get_max_offset, TOPIC, 0) == 5
            assert windows.threads[-1] == "ReputMessageService" and windows.records == 5

    run(main())


def test_a_window_of_small_sends_over_the_bound_stays_on_the_loop(store_config: StoreConfig) -> None:
    """With dispatch windows the bound holds per put the window covers (up to
    ``INLINE_WINDOW_PUTS`` of them): three sends of 1 KiB waiting in one window (more than the
    2 KiB bound together) are dispatched on the loop; one record over the bound still goes to the
    thread, and so does a window of more small sends than the scale allows."""
    cfg = dataclasses.replace(
        store_config,
        flush_disk_type="ASYNC_FLUSH",
        inline_dispatch_max_bytes=2048,
        inline_dispatch_interval_ms=600_000,  # every window after the first waits for a read
    )
    loop_thread = threading.current_thread().name

    async def main() -> None:
        async with broker_with_topic(cfg) as (broker, client, addr):
            windows, wake = watch(broker)
            store = broker.store
            assert store is not None

            async def send(body: bytes) -> None:
                assert (await client.invoke(addr, send_request(TOPIC, body))).code == ResponseCode.SUCCESS

            await send(b"first")  # after a quiet interval: dispatched at once
            await wait_until_async(lambda: store.get_max_offset(TOPIC, 0) == 1, "the first", 10)
            for _ in range(3):
                await send(b"s" * 1024)
            assert wake.pending and wake.puts == 3
            assert store.get_max_offset(TOPIC, 0) == 4  # the read takes the window, on the loop
            assert wake.window_puts == 3 and windows.sizes == [1, 3]
            assert windows.threads == [loop_thread] * 2 and wake.wakeups == 0

            await send(b"B" * 3000)  # one put over the bound: the thread's
            await wait_until_async(lambda: store.get_max_offset(TOPIC, 0) == 5, "the big one", 10)
            assert windows.threads[2:] == ["ReputMessageService"] and wake.wakeups == 1

            n = INLINE_WINDOW_PUTS + 1  # more than the scale: 2 KiB x 3 < 4 x 1.6 KiB
            for _ in range(n):
                await send(b"m" * 1600)
            await wait_until_async(lambda: store.get_max_offset(TOPIC, 0) == 5 + n, "the last window", 10)
            assert windows.threads[3:] == ["ReputMessageService"] and wake.wakeups == 2
            assert windows.records == 5 + n

    run(main())


@pytest.mark.parametrize("selector", ["epoll", "timerfd"])
def test_a_held_pull_is_answered_within_the_window_when_no_send_follows(
    store_config: StoreConfig, selector: str
) -> None:
    """A send that opens a dispatch window (within the interval of the last one) and is followed
    by no other traffic: the window's timer takes it on the loop at the end of the interval, and
    the pull held for it is answered then, not at the hold service's periodic check (5 s), the
    dispatch thread's periodic pass or the pull's suspend timeout (20 s). On the timerfd
    selector (what ``rocketq serve`` runs on) the timerfd wakes the loop for it."""
    if selector == "timerfd" and not timer_selector.available():
        pytest.skip("no timerfd here")
    interval_s = 0.3
    cfg = dataclasses.replace(
        store_config, flush_disk_type="ASYNC_FLUSH", inline_dispatch_interval_ms=int(interval_s * 1000)
    )

    async def main() -> None:
        async with broker_with_topic(cfg) as (broker, client, addr):
            windows, wake = watch(broker)
            assert broker.ctx is not None
            hold = broker.ctx.hold
            loop = asyncio.get_running_loop()
            first = await client.invoke(addr, send_request(TOPIC, b"first"))
            assert first.code == ResponseCode.SUCCESS  # after a quiet interval: dispatched at once
            held = asyncio.ensure_future(
                client.invoke(addr, pull_request(TOPIC, 1, suspend=True, suspend_ms=20_000), 30.0)
            )
            await wait_until_async(lambda: hold.held_count == 1, "the pull to be held", 10, 0.005)
            sent_at = loop.time()
            late = await client.invoke(addr, send_request(TOPIC, b"late"))
            assert late.code == ResponseCode.SUCCESS
            assert wake.pending, "the send opened a window (the interval since the first not over)"
            answer = await asyncio.wait_for(held, 10.0)
            waited = loop.time() - sent_at
            assert answer.code == ResponseCode.SUCCESS and answer.ext_fields["nextBeginOffset"] == "2"
            assert waited <= interval_s + 0.5, f"the held pull waited {waited:.3f} s"
            # the window's timer took it on the loop (not the dispatch thread's own periodic pass)
            assert windows.sizes == [1, 1] and wake.wakeups == 0
            assert windows.threads == [threading.current_thread().name] * 2
            assert hold.wakeups[ARRIVED] == 1
            if selector == "timerfd":
                assert isinstance(loop._selector, timer_selector.TimerfdSelector)  # type: ignore[attr-defined]

    if selector == "epoll":
        run(main())
    else:
        with asyncio.Runner(loop_factory=timer_selector.new_event_loop) as runner:
            runner.run(asyncio.wait_for(main(), 90))
