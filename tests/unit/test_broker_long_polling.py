"""PullRequestHoldService without sockets or a store: a dict stands in for the queue max offsets."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from _support.wait import wait_until_async
from rocketq.broker.long_polling import (
    ARRIVED,
    CHECKED,
    CLOSED,
    SHUTDOWN,
    TIMEOUT,
    PullRequestHoldService,
)

T = TypeVar("T")
WAIT_S = 10.0


def run(coro: Coroutine[Any, Any, T]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, 30)

    return asyncio.run(bounded())


@dataclass
class Arrival:
    topic: str
    queue_id: int
    consume_queue_offset: int
    tags_code: int


class Queues:
    def __init__(self) -> None:
        self.max: dict[tuple[str, int], int] = {}

    def __call__(self, topic: str, queue_id: int) -> int:
        return self.max.get((topic, queue_id), 0)


class FakeConnection:
    def __init__(self) -> None:
        self.callbacks: list[Callable[..., None]] = []

    def add_close_callback(self, callback: Callable[..., None]) -> None:
        self.callbacks.append(callback)

    def remove_close_callback(self, callback: Callable[..., None]) -> None:
        self.callbacks.remove(callback)

    def close(self) -> None:
        for cb in list(self.callbacks):
            cb(self)


def test_arrival_wakes_matching_pulls_only() -> None:
    async def main() -> None:
        queues = Queues()
        hold = PullRequestHoldService(queues)
        hold.start()
        any_tag = asyncio.ensure_future(hold.suspend("T", 0, 0, None, WAIT_S))
        tag_a = asyncio.ensure_future(hold.suspend("T", 0, 0, frozenset({65}), WAIT_S))
        other_queue = asyncio.ensure_future(hold.suspend("T", 1, 0, None, WAIT_S))
        await wait_until_async(lambda: hold.held_count == 3, "three held pulls", WAIT_S, 0)
        queues.max[("T", 0)] = 1
        hold.notify_arrivals([(("T", 0), 1, 66)])  # tag 66: only the unfiltered pull wakes
        assert await any_tag == ARRIVED
        assert not tag_a.done() and hold.held_count == 2
        hold.notify_arrivals([(("T", 0), 2, 65)])
        assert await tag_a == ARRIVED
        assert not other_queue.done()
        await hold.stop()
        assert await other_queue == SHUTDOWN
        assert hold.held_count == 0

    run(main())


def test_arrival_listener_hands_over_from_the_dispatcher_thread() -> None:
    async def main() -> None:
        hold = PullRequestHoldService(Queues())
        hold.start()
        hold.arrival_listener([Arrival("T", 0, 0, 0)])  # nothing held: a no-op
        pull = asyncio.ensure_future(hold.suspend("T", 0, 5, None, WAIT_S))
        await wait_until_async(lambda: hold.held_count == 1, "the held pull", WAIT_S, 0)
        thread = threading.Thread(
            target=hold.arrival_listener,
            args=([Arrival("Other", 0, 9, 0), Arrival("T", 0, 4, 0), Arrival("T", 0, 5, 0)],),
        )
        thread.start()
        thread.join()
        assert await pull == ARRIVED
        await hold.stop()

    run(main())


def test_timeout_recheck_close_and_periodic_check() -> None:
    async def main() -> None:
        queues = Queues()
        hold = PullRequestHoldService(queues, check_interval_s=3600)
        hold.start()
        loop = asyncio.get_running_loop()
        began = loop.time()
        assert await hold.suspend("T", 0, 0, None, 0.05) == TIMEOUT
        assert loop.time() - began >= 0.05
        # the queue already moved past the offset when parking: woken at once
        queues.max[("T", 0)] = 3
        assert await hold.suspend("T", 0, 2, None, WAIT_S) == CHECKED
        # the client goes away
        conn = FakeConnection()
        pull = asyncio.ensure_future(hold.suspend("T", 0, 3, None, WAIT_S, channel=conn))
        await wait_until_async(lambda: hold.held_count == 1, "the held pull", WAIT_S, 0)
        conn.close()
        assert await pull == CLOSED
        assert conn.callbacks == []
        # filtered arrivals are picked up by the periodic check
        filtered = asyncio.ensure_future(hold.suspend("T", 0, 3, frozenset({1}), WAIT_S))
        await wait_until_async(lambda: hold.held_count == 1, "the held pull", WAIT_S, 0)
        queues.max[("T", 0)] = 4
        hold.notify_arrivals([(("T", 0), 4, 2)])
        assert hold.check_now() == 1
        assert await filtered == CHECKED
        assert hold.wakeups[TIMEOUT] == 1 and hold.wakeups[CHECKED] == 2
        await hold.stop()
        assert await hold.suspend("T", 0, 9, None, WAIT_S) == SHUTDOWN

    run(main())


def test_cancelled_pull_leaves_nothing_behind() -> None:
    async def main() -> None:
        hold = PullRequestHoldService(Queues())
        hold.start()
        pull = asyncio.ensure_future(hold.suspend("T", 0, 0, None, WAIT_S))
        await wait_until_async(lambda: hold.held_count == 1, "the held pull", WAIT_S, 0)
        pull.cancel()
        await asyncio.gather(pull, return_exceptions=True)
        assert hold.held_count == 0
        await hold.stop()

    run(main())
