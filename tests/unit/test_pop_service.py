"""PopService over a real MessageStore (no network): pop, ack, redelivery, DLQ, FIFO, filters,
long polling, group commit, compaction and restart."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from _support.wait import wait_until, wait_until_async
from rocketq.broker.config import BrokerConfig
from rocketq.broker.context import BrokerContext
from rocketq.broker.pop.service import PoppedMessage, PopService
from rocketq.broker.pop.standalone import hook_arrivals, standalone_context
from rocketq.broker.subscription_group import SubscriptionGroupConfig
from rocketq.config import StoreConfig
from rocketq.errors import InvalidParameter, InvalidReceiptHandle, ServiceNotAvailable, TopicNotExist
from rocketq.message import PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_RETRY_TOPIC, Message
from rocketq.store import MessageStore

T = TypeVar("T")
WAIT_S = 20.0


def run(coro: Coroutine[Any, Any, T]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, 60)

    return asyncio.run(bounded())


class Clock:
    """A settable wall clock (epoch ms) for invisible-time tests."""

    def __init__(self) -> None:
        self.now_ms = time.time_ns() // 1_000_000

    def __call__(self) -> int:
        return self.now_ms


class Env:
    def __init__(self, store: MessageStore, **broker_kwargs: Any) -> None:
        self.store = store
        cfg = BrokerConfig(
            broker_name="b",
            broker_ip1="127.0.0.1",
            bind_address="127.0.0.1",
            namesrv_addr=None,
            **broker_kwargs,
        )
        self.ctx: BrokerContext = standalone_context(
            store, topics={"T": 2, "F": 1, "Q": 1}, broker_config=cfg
        )
        self.clock = Clock()

    def pop(self, clock: Callable[[], int] | None = None) -> PopService:
        pop = PopService(self.ctx, clock_ms=clock or self.clock)
        pop.start()
        hook_arrivals(self.store, pop)
        self.ctx.pop = pop
        return pop

    def put(self, topic: str, n: int, queue_id: int = 0, tags: str | None = None) -> None:
        before = self.store.get_max_offset(topic, queue_id)
        for i in range(n):
            self.store.put_message(
                Message(topic, f"{topic}-{queue_id}-{before + i}".encode(), tags=tags), queue_id
            )
        wait_until(
            lambda: self.store.get_max_offset(topic, queue_id) >= before + n,
            "dispatch to catch up",
            WAIT_S,
            0.002,
        )


@pytest.fixture
def env(store_config: StoreConfig) -> Iterator[Env]:
    store = MessageStore(store_config)
    store.start()
    try:
        yield Env(store)
    finally:
        store.shutdown()


async def recv(pop: PopService, topic: str = "T", **kw: Any) -> list[PoppedMessage]:
    args: dict[str, Any] = {"group": "G", "topic": topic, "queue_id": None, "max_messages": 32}
    args.update({"invisible_ms": 10_000, "long_poll_ms": 0})
    args.update(kw)
    return await pop.receive(**args)


def offsets(msgs: list[PoppedMessage]) -> list[tuple[int, int]]:
    return sorted((m.queue_id, m.queue_offset) for m in msgs)


def test_pop_ack_and_consumer_offset(env: Env) -> None:
    env.put("T", 3, 0)
    env.put("T", 2, 1)

    async def go() -> None:
        pop = env.pop()
        got = await recv(pop)
        assert offsets(got) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]
        assert {m.delivery_attempt for m in got} == {1}
        assert len({m.receipt_handle for m in got}) == 5
        assert all(m.message.topic == "T" and m.message.queue_offset == m.queue_offset for m in got)
        assert all(m.invisible_until_ms == env.clock.now_ms + 10_000 for m in got)
        assert await recv(pop) == []  # all invisible
        by = {(m.queue_id, m.queue_offset): m for m in got}
        await pop.ack(group="G", topic="T", receipt_handle=by[(0, 1)].receipt_handle)
        assert env.ctx.offsets.query_offsets("G", "T") == {0: 0, 1: 0}
        await pop.ack(group="G", topic="T", receipt_handle=by[(0, 0)].receipt_handle)
        assert env.ctx.offsets.query_offsets("G", "T") == {0: 2, 1: 0}
        with pytest.raises(InvalidReceiptHandle, match="stale"):
            await pop.ack(group="G", topic="T", receipt_handle=by[(0, 0)].receipt_handle)
        env.clock.now_ms += 10_000
        again = await recv(pop)
        assert offsets(again) == [(0, 2), (1, 0), (1, 1)]  # acked ones are not redelivered
        assert {m.delivery_attempt for m in again} == {2}
        await pop.shutdown()

    run(go())


def test_redelivery_makes_old_handle_stale_and_expired_handles_fail(env: Env) -> None:
    env.put("Q", 1)

    async def go() -> None:
        pop = env.pop()
        (first,) = await recv(pop, "Q", invisible_ms=1000)
        env.clock.now_ms += 1000
        with pytest.raises(InvalidReceiptHandle, match="expired"):
            await pop.ack(group="G", topic="Q", receipt_handle=first.receipt_handle)
        (second,) = await recv(pop, "Q", invisible_ms=1000)
        assert second.delivery_attempt == 2 and second.queue_offset == 0
        assert second.message.body == first.message.body
        with pytest.raises(InvalidReceiptHandle, match="stale"):
            await pop.ack(group="G", topic="Q", receipt_handle=first.receipt_handle)
        with pytest.raises(InvalidReceiptHandle, match="does not belong"):
            await pop.ack(group="G2", topic="Q", receipt_handle=second.receipt_handle)
        await pop.ack(group="G", topic="Q", receipt_handle=second.receipt_handle)
        env.clock.now_ms += 5000
        assert await recv(pop, "Q") == []
        await pop.shutdown()

    run(go())


def test_change_invisible(env: Env) -> None:
    env.put("Q", 2)

    async def go() -> None:
        pop = env.pop()
        got = await recv(pop, "Q", invisible_ms=60_000)
        handle = got[0].receipt_handle
        new = await pop.change_invisible(group="G", topic="Q", receipt_handle=handle, invisible_ms=500)
        assert new != handle and new.isprintable()
        with pytest.raises(InvalidReceiptHandle):
            await pop.ack(group="G", topic="Q", receipt_handle=handle)
        with pytest.raises(InvalidParameter):
            await pop.change_invisible(group="G", topic="Q", receipt_handle=new, invisible_ms=-1)
        env.clock.now_ms += 500
        again = await recv(pop, "Q")
        assert [(m.queue_offset, m.delivery_attempt) for m in again] == [(0, 2)]
        # the other message keeps its long invisible time; extending works on the current handle
        newer = await pop.change_invisible(
            group="G", topic="Q", receipt_handle=got[1].receipt_handle, invisible_ms=1
        )
        env.clock.now_ms += 1
        third = await recv(pop, "Q")
        assert [(m.queue_offset, m.delivery_attempt) for m in third] == [(1, 2)]
        with pytest.raises(InvalidReceiptHandle):
            await pop.ack(group="G", topic="Q", receipt_handle=newer)
        await pop.shutdown()

    run(go())


def test_max_delivery_attempts_goes_to_dlq(env: Env) -> None:
    env.ctx.groups.update(SubscriptionGroupConfig("G", retry_max_times=1))
    env.put("Q", 2)

    async def go() -> None:
        pop = env.pop()
        assert pop.max_delivery_attempts("G") == 2
        assert pop.max_delivery_attempts("unknown-group") == 17
        got = await recv(pop, "Q", invisible_ms=100)
        await pop.ack(group="G", topic="Q", receipt_handle=got[1].receipt_handle)
        env.clock.now_ms += 100
        (again,) = await recv(pop, "Q", invisible_ms=100)
        assert (again.queue_offset, again.delivery_attempt) == (0, 2)
        env.clock.now_ms += 100
        assert await recv(pop, "Q") == []
        assert env.ctx.offsets.query_offsets("G", "Q") == {0: 2}
        dlq = env.ctx.topics.select("%DLQ%G")
        assert dlq is not None
        env.put("%DLQ%G", 0)
        await wait_until_async(
            lambda: env.store.get_max_offset("%DLQ%G", 0) >= 1, "the DLQ copy", WAIT_S, 0.005
        )
        (dead,) = env.store.get_message("x", "%DLQ%G", 0, 0, 8).messages
        assert dead.body == again.message.body
        assert dead.properties[PROPERTY_RETRY_TOPIC] == "Q"
        assert dead.properties[PROPERTY_ORIGIN_MESSAGE_ID] == again.message.msg_id
        await pop.shutdown()

    run(go())


def test_forward_to_dlq(env: Env) -> None:
    env.put("Q", 1)

    async def go() -> None:
        pop = env.pop()
        (m,) = await recv(pop, "Q")
        await pop.forward_to_dlq(group="G", topic="Q", receipt_handle=m.receipt_handle)
        with pytest.raises(InvalidReceiptHandle):
            await pop.ack(group="G", topic="Q", receipt_handle=m.receipt_handle)
        env.clock.now_ms += 60_000
        assert await recv(pop, "Q") == []
        await wait_until_async(
            lambda: env.store.get_max_offset("%DLQ%G", 0) >= 1, "the DLQ copy", WAIT_S, 0.005
        )
        (dead,) = env.store.get_message("x", "%DLQ%G", 0, 0, 8).messages
        assert dead.body == m.message.body
        await pop.shutdown()

    run(go())


def test_fifo_blocks_queue_until_ack_or_expiry(env: Env) -> None:
    env.put("F", 4)

    async def go() -> None:
        pop = env.pop()
        (a,) = await recv(pop, "F", max_messages=1, fifo=True, invisible_ms=1000)
        assert a.queue_offset == 0
        assert await recv(pop, "F", fifo=True) == []  # blocked by offset 0
        env.clock.now_ms += 1000
        batch = await recv(pop, "F", max_messages=2, fifo=True, invisible_ms=1000)
        # the expired message comes first, again, then the next fresh one
        assert [(m.queue_offset, m.delivery_attempt) for m in batch] == [(0, 2), (1, 1)]
        await pop.ack(group="G", topic="F", receipt_handle=batch[0].receipt_handle)
        assert await recv(pop, "F", fifo=True) == []  # offset 1 still in flight
        await pop.ack(group="G", topic="F", receipt_handle=batch[1].receipt_handle)
        rest = await recv(pop, "F", fifo=True)
        assert [m.queue_offset for m in rest] == [2, 3]
        await pop.shutdown()

    run(go())


def test_fifo_partial_batch_of_expired_does_not_skip_ahead(env: Env) -> None:
    env.put("F", 3)

    async def go() -> None:
        pop = env.pop()
        got = await recv(pop, "F", fifo=True, invisible_ms=10)
        assert [m.queue_offset for m in got] == [0, 1, 2]
        env.clock.now_ms += 10
        (first,) = await recv(pop, "F", fifo=True, max_messages=1, invisible_ms=10)
        assert (first.queue_offset, first.delivery_attempt) == (0, 2)
        assert await recv(pop, "F", fifo=True) == []
        await pop.shutdown()

    run(go())


def test_filter_rejects_for_good(env: Env) -> None:
    env.put("Q", 2, tags="A")
    env.put("Q", 1, tags="B")
    env.put("Q", 1, tags="A")

    async def go() -> None:
        pop = env.pop()
        got = await recv(pop, "Q", message_filter=lambda m: m.tags == "B")
        assert [m.queue_offset for m in got] == [2]
        assert env.ctx.offsets.query_offsets("G", "Q") == {0: 2}
        await pop.ack(group="G", topic="Q", receipt_handle=got[0].receipt_handle)
        assert env.ctx.offsets.query_offsets("G", "Q") == {0: 4}
        env.clock.now_ms += 60_000
        assert await recv(pop, "Q") == []  # rejected messages are consumed for this group
        await pop.shutdown()

    run(go())


def test_filter_that_raises_changes_nothing(env: Env) -> None:
    env.put("Q", 2)

    def boom(_m: object) -> bool:
        raise RuntimeError("bad filter")

    async def go() -> None:
        pop = env.pop()
        with pytest.raises(RuntimeError):
            await recv(pop, "Q", message_filter=boom)
        assert [m.queue_offset for m in await recv(pop, "Q")] == [0, 1]
        await pop.shutdown()

    run(go())


def test_long_poll_woken_by_arrival(env: Env) -> None:
    async def go() -> None:
        pop = env.pop(clock=lambda: time.time_ns() // 1_000_000)
        began = time.monotonic()
        task = asyncio.create_task(recv(pop, "Q", long_poll_ms=30_000))
        await wait_until_async(lambda: "Q" in pop._waiters, "the receive to be held", WAIT_S, 0.002)
        await asyncio.to_thread(env.store.put_message, Message("Q", b"late"), 0)
        got = await asyncio.wait_for(task, WAIT_S)
        assert [m.message.body for m in got] == [b"late"]
        assert time.monotonic() - began < WAIT_S
        await pop.shutdown()

    run(go())


def test_long_poll_times_out_empty(env: Env) -> None:
    async def go() -> None:
        pop = env.pop()
        began = time.monotonic()
        assert await recv(pop, "Q", long_poll_ms=200) == []
        assert time.monotonic() - began >= 0.2
        await pop.shutdown()

    run(go())


def test_long_poll_woken_by_redelivery_deadline(env: Env) -> None:
    env.put("Q", 1)

    async def go() -> None:
        pop = env.pop(clock=lambda: time.time_ns() // 1_000_000)
        (m,) = await recv(pop, "Q", invisible_ms=300)
        began = time.monotonic()
        (again,) = await recv(pop, "Q", long_poll_ms=30_000)
        assert (again.queue_offset, again.delivery_attempt) == (0, 2)
        assert 0.2 <= time.monotonic() - began < WAIT_S
        assert again.receipt_handle != m.receipt_handle
        await pop.shutdown()

    run(go())


def test_shutdown_ends_held_receive_and_refuses_calls(env: Env) -> None:
    async def go() -> None:
        pop = env.pop()
        task = asyncio.create_task(recv(pop, "Q", long_poll_ms=30_000))
        await wait_until_async(lambda: "Q" in pop._waiters, "the receive to be held", WAIT_S, 0.002)
        began = time.monotonic()
        await pop.shutdown()
        assert await asyncio.wait_for(task, WAIT_S) == []
        assert time.monotonic() - began < WAIT_S
        with pytest.raises(ServiceNotAvailable):
            await recv(pop, "Q")
        with pytest.raises(ServiceNotAvailable):
            await pop.ack(group="G", topic="Q", receipt_handle="1.0.0.1.0.0.0")

    run(go())


def test_bad_arguments(env: Env) -> None:
    async def go() -> None:
        pop = env.pop()
        with pytest.raises(TopicNotExist):
            await recv(pop, "Nope")
        with pytest.raises(InvalidParameter, match="queue 5"):
            await recv(pop, "Q", queue_id=5)
        with pytest.raises(InvalidParameter, match="max_messages"):
            await recv(pop, "Q", max_messages=0)
        with pytest.raises(InvalidParameter, match="invisible_ms"):
            await recv(pop, "Q", invisible_ms=-1)
        with pytest.raises(InvalidParameter, match="group"):
            await recv(pop, "Q", group="")
        with pytest.raises(InvalidReceiptHandle):
            await pop.ack(group="G", topic="Q", receipt_handle="not-a-handle")
        with pytest.raises(InvalidReceiptHandle):
            await pop.forward_to_dlq(group="G", topic="Q", receipt_handle="")
        await pop.shutdown()

    run(go())


def test_group_commit_shares_fsyncs(env: Env) -> None:
    env.put("Q", 64)

    async def go() -> None:
        pop = env.pop()
        got = await recv(pop, "Q", max_messages=64)
        assert len(got) == 64
        before = pop.syncs
        await asyncio.gather(*(pop.ack(group="G", topic="Q", receipt_handle=m.receipt_handle) for m in got))
        assert pop.syncs - before < 64
        assert env.ctx.offsets.query_offsets("G", "Q") == {0: 64}
        await pop.shutdown()

    run(go())


def test_concurrent_receives_never_share_a_message(env: Env) -> None:
    env.put("T", 40, 0)
    env.put("T", 40, 1)

    async def go() -> None:
        pop = env.pop()
        results = await asyncio.gather(*(recv(pop, max_messages=7) for _ in range(16)))
        seen = [o for r in results for o in offsets(r)]
        assert len(seen) == len(set(seen)) == 80
        await pop.shutdown()

    run(go())


def test_rotation_over_queues(env: Env) -> None:
    env.put("T", 3, 0)
    env.put("T", 3, 1)

    async def go() -> None:
        pop = env.pop()
        queues = [(await recv(pop, max_messages=1))[0].queue_id for _ in range(6)]
        assert queues.count(0) == 3 and queues.count(1) == 3
        assert queues[0] != queues[1]
        await pop.shutdown()

    run(go())


def test_restart_keeps_acks_in_flight_and_attempts(env: Env) -> None:
    env.put("T", 4, 0)

    async def go() -> None:
        pop = env.pop()
        got = await recv(pop, queue_id=0, invisible_ms=1000)
        await pop.ack(group="G", topic="T", receipt_handle=got[0].receipt_handle)
        await pop.ack(group="G", topic="T", receipt_handle=got[2].receipt_handle)
        # no shutdown: every call above returned, so it is on disk
        env.ctx.offsets.offset_table.clear()
        pop2 = env.pop()
        assert env.ctx.offsets.query_offsets("G", "T") == {0: 1}
        await pop2.ack(group="G", topic="T", receipt_handle=got[1].receipt_handle)  # handle survives
        env.clock.now_ms += 1000
        again = await recv(pop2, queue_id=0)
        assert [(m.queue_offset, m.delivery_attempt) for m in again] == [(3, 2)]
        env.put("T", 1, 0)
        fresh = await recv(pop2, queue_id=0)
        assert [(m.queue_offset, m.delivery_attempt) for m in fresh] == [(4, 1)]
        await pop2.shutdown()
        await pop.shutdown()

    run(go())


def test_compaction_then_restart(store_config: StoreConfig) -> None:
    store = MessageStore(store_config)
    store.start()
    try:
        env = Env(store, pop_journal_compact_bytes=2048)
        env.put("Q", 60)

        async def go() -> None:
            pop = env.pop()
            handles: dict[int, str] = {}
            for _ in range(20):
                for m in await recv(pop, "Q", max_messages=3):
                    handles[m.queue_offset] = m.receipt_handle
            assert len(handles) == 60
            for offset in range(0, 60, 2):
                await pop.ack(group="G", topic="Q", receipt_handle=handles[offset])
            assert pop.compactions >= 1
            pop2 = env.pop()
            state = pop2.table.states[("G", "Q", 0)]
            assert state.next_offset == 60
            assert sorted(state.in_flight) == list(range(1, 60, 2))
            await pop2.ack(group="G", topic="Q", receipt_handle=handles[1])
            await pop2.shutdown()
            await pop.shutdown()

        run(go())
    finally:
        store.shutdown()


def test_receive_in_a_thread_safe_way_from_dispatch(env: Env) -> None:
    """Arrivals are reported from the dispatcher thread while receives run on the loop."""
    stop = threading.Event()

    def producer() -> None:
        i = 0
        while not stop.is_set() and i < 200:
            env.store.put_message(Message("Q", str(i).encode()), 0)
            i += 1

    async def go() -> None:
        pop = env.pop(clock=lambda: time.time_ns() // 1_000_000)
        thread = threading.Thread(target=producer)
        thread.start()
        got: list[int] = []

        async def received_all() -> bool:
            for m in await recv(pop, "Q", long_poll_ms=1000):
                got.append(int(m.message.body))
                await pop.ack(group="G", topic="Q", receipt_handle=m.receipt_handle)
            return len(got) >= 200

        await wait_until_async(received_all, lambda: f"200 messages (got {len(got)})", WAIT_S, 0)
        stop.set()
        thread.join()
        assert got == list(range(200))
        await pop.shutdown()

    run(go())
