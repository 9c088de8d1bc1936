"""Coalesced loop hand-offs: one dispatch wake-up per loop iteration, one arrival delivery in
flight at a time, nothing lost, and a real store dispatching through them."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from _support.wait import wait_until_async
from rocketq.broker.long_polling import ARRIVED, PullRequestHoldService
from rocketq.broker.loop_coalesce import LoopWakeup, ThreadsafeBatcher
from rocketq.config import StoreConfig
from rocketq.message import Message
from rocketq.store.message_store import MessageStore

WAIT_S = 10.0


def test_loop_wakeup_runs_once_per_iteration_on_the_loop_thread() -> None:
    async def main() -> None:
        calls: list[int] = []
        wake = LoopWakeup(asyncio.get_running_loop(), lambda: calls.append(1))
        for _ in range(100):  # one iteration: a hundred appends
            wake()
        assert calls == []  # deferred to the end of the iteration
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert len(calls) == 1 and wake.wakeups == 1
        wake()  # a later iteration wakes again
        await wait_until_async(lambda: len(calls) == 2, "two calls", WAIT_S, 0)

    asyncio.run(main())


def test_loop_wakeup_with_an_interval_wakes_at_most_once_an_interval() -> None:
    interval = 0.05

    async def main() -> None:
        loop = asyncio.get_running_loop()
        fired: list[float] = []
        wake = LoopWakeup(loop, lambda: fired.append(loop.time()), min_interval_s=interval)
        wake()  # the first: at the end of this iteration, no timer
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert len(fired) == 1
        for _ in range(3):  # a steady stream of puts over several iterations
            for _ in range(10):
                wake()
            await asyncio.sleep(0)
        assert len(fired) == 1  # held back until the interval is over
        await wait_until_async(lambda: len(fired) == 2, "the timed wake-up", WAIT_S, 0.005)
        assert fired[1] - fired[0] >= interval - 0.001  # the loop clock's granularity
        await asyncio.sleep(interval * 1.5)  # a quiet interval
        quiet = loop.time()
        wake()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert len(fired) == 3 and fired[2] - quiet < interval  # at once again
        assert wake.wakeups == 3

    asyncio.run(main())


def test_loop_wakeup_from_another_thread_or_a_closed_loop_wakes_at_once() -> None:
    calls: list[str] = []

    async def main() -> LoopWakeup:
        wake = LoopWakeup(asyncio.get_running_loop(), lambda: calls.append(threading.current_thread().name))
        thread = threading.Thread(target=wake, name="putter")
        thread.start()
        thread.join()
        assert calls == ["putter"]  # not deferred to the loop
        return wake

    wake = asyncio.run(main())
    wake()  # the loop is closed now: no callback could run, so it wakes in the caller
    assert calls == ["putter", "MainThread"]


def test_loop_wakeup_tries_on_loop_first_and_wakes_only_when_it_declines() -> None:
    """``on_loop`` (the broker's inline dispatch) runs at the end of the iteration on the loop;
    ``wake`` runs only when it returns False, and always for a call from another thread."""
    calls: list[str] = []
    answers: list[bool | None] = [True, False, None]

    async def main() -> None:
        def on_loop() -> bool:
            calls.append("on_loop")
            answer = answers.pop(0)
            if answer is None:
                raise RuntimeError("failed on the loop")
            return answer

        wake = LoopWakeup(asyncio.get_running_loop(), lambda: calls.append("wake"), on_loop=on_loop)
        for _ in range(2):
            for _ in range(10):
                wake()
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        assert calls == ["on_loop", "on_loop", "wake"]
        assert wake.handled_on_loop == 1 and wake.wakeups == 1
        wake()  # on_loop raises: logged, and the thread is woken instead
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert calls == ["on_loop", "on_loop", "wake", "on_loop", "wake"] and wake.wakeups == 2
        thread = threading.Thread(target=wake)
        thread.start()
        thread.join()
        assert calls[-1] == "wake" and len(calls) == 6  # another thread: the wake itself

    asyncio.run(main())


def test_loop_wakeup_hopping_from_threads_runs_on_the_loop_once_per_hop() -> None:
    """With ``hop_from_threads`` (the group commit's rounds under SYNC_FLUSH) a call from another
    thread is carried to the loop: calls made while one hop is in flight share it, and
    ``on_loop`` runs there after the callbacks queued before the hop; a closed loop wakes at once."""
    calls: list[str] = []

    async def main() -> LoopWakeup:
        loop = asyncio.get_running_loop()

        def on_loop() -> bool:
            calls.append("on_loop:" + threading.current_thread().name)
            return True

        wake = LoopWakeup(
            loop, lambda: calls.append("wake:" + threading.current_thread().name), on_loop=on_loop
        )
        hop = LoopWakeup(loop, wake._wake, on_loop=on_loop, hop_from_threads=True)

        def round_done() -> None:
            loop.call_soon_threadsafe(calls.append, "answer")  # the round's futures, then its hook
            for _ in range(5):
                hop()

        thread = threading.Thread(target=round_done, name="flusher")
        thread.start()
        thread.join()
        assert calls == []
        await wait_until_async(lambda: len(calls) >= 2, "the hop to run", WAIT_S, 0)
        assert calls == ["answer", "on_loop:MainThread"]
        assert hop.handled_on_loop == 1 and hop.wakeups == 0
        return hop

    hop = asyncio.run(main())
    thread = threading.Thread(target=hop, name="late")
    thread.start()
    thread.join()
    assert calls[-1] == "wake:late" and hop.wakeups == 1


def test_batcher_posting_on_the_loop_delivers_at_once_after_what_is_pending() -> None:
    """An inline dispatch posts on the loop: delivered in the call, after the items other
    threads posted before it (their scheduled delivery then finds nothing)."""

    async def main() -> None:
        got: list[list[int]] = []
        batcher: ThreadsafeBatcher[int] = ThreadsafeBatcher(asyncio.get_running_loop(), got.append)
        thread = threading.Thread(target=batcher.post, args=([1, 2],))
        thread.start()
        thread.join()
        assert got == []  # scheduled for the loop
        batcher.post([3])
        assert got == [[1, 2, 3]]
        batcher.post([4])
        assert got == [[1, 2, 3], [4]]
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert got == [[1, 2, 3], [4]] and batcher.deliveries == 2

    asyncio.run(main())


def test_batcher_delivers_everything_in_order_with_few_loop_wakeups() -> None:
    async def main() -> None:
        got: list[list[int]] = []
        batcher: ThreadsafeBatcher[int] = ThreadsafeBatcher(asyncio.get_running_loop(), got.append)

        def post_many() -> None:
            for i in range(0, 2000, 2):
                batcher.post([i, i + 1])

        thread = threading.Thread(target=post_many)
        thread.start()
        await wait_until_async(
            lambda: not thread.is_alive() and sum(map(len, got)) == 2000,
            "2000 appends and the thread to end",
            WAIT_S,
            0,
        )
        assert [x for batch in got for x in batch] == list(range(2000))
        assert batcher.deliveries == len(got) <= 1000

    asyncio.run(main())


def test_batcher_coalesces_posts_made_before_the_loop_runs() -> None:
    async def main() -> None:
        got: list[list[str]] = []
        batcher: ThreadsafeBatcher[str] = ThreadsafeBatcher(asyncio.get_running_loop(), got.append)
        threads = [threading.Thread(target=batcher.post, args=([name],)) for name in "abc"]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        await wait_until_async(lambda: sum(map(len, got)) == 3, "three appends", WAIT_S, 0)
        # the loop was blocked in join() while all three posted: one delivery takes them all
        assert len(got) == 1 and sorted(got[0]) == ["a", "b", "c"]

    asyncio.run(main())


def test_batcher_after_the_loop_closed_drops_without_error() -> None:
    async def main() -> ThreadsafeBatcher[int]:
        return ThreadsafeBatcher(asyncio.get_running_loop(), lambda items: None)

    batcher = asyncio.run(main())
    batcher.post([1, 2])  # nothing raises, nothing is kept
    batcher.post([3])
    assert batcher.deliveries == 0


def test_store_dispatch_and_held_pulls_through_the_coalesced_hand_offs(tmp_path: Path) -> None:
    """A real MessageStore (ASYNC_FLUSH) whose append listener is a LoopWakeup, as the broker
    installs it: puts made in one loop iteration are dispatched with one wake-up, and held pulls
    on every queue are woken by the batched arrival notifications."""
    cfg = StoreConfig(
        store_path_root_dir=str(tmp_path),
        flush_disk_type="ASYNC_FLUSH",
        mapped_file_size_commit_log=1 << 20,
        mapped_file_size_consume_queue=20 * 1024,
    )

    async def main(store: MessageStore) -> None:
        assert store.reput is not None
        hold = PullRequestHoldService(store.get_max_offset, check_interval_s=3600)
        hold.start()
        store.reput.arrival_listeners.append(hold.arrival_listener)
        wake = LoopWakeup(asyncio.get_running_loop(), store.reput.wakeup)
        store.commitlog.append_listener = wake
        pulls = [asyncio.ensure_future(hold.suspend("T", q, 0, None, WAIT_S)) for q in range(4)]
        await wait_until_async(lambda: hold.held_count == 4, "four held pulls", WAIT_S, 0)
        for i in range(40):  # one loop iteration
            store.put_message(Message("T", b"m%d" % i), queue_id=i % 4)
        assert wake.wakeups == 0
        assert await asyncio.gather(*pulls) == [ARRIVED] * 4
        assert wake.wakeups == 1
        for q in range(4):
            assert store.get_max_offset("T", q) == 10
        await hold.stop()
        store.commitlog.append_listener = store.reput.wakeup

    with MessageStore(cfg) as store:
        asyncio.run(main(store))


def test_settle_runs_a_waiting_wake_up_now_and_once() -> None:
    """``settle`` on the loop runs the wake-up waiting for the interval's timer at once and
    cancels the timer (the work is not done twice); with nothing pending it does nothing; from
    another thread it calls ``settle_elsewhere`` and leaves the loop's callback alone."""
    interval = 600.0

    async def main() -> None:
        loop = asyncio.get_running_loop()
        fired: list[str] = []
        elsewhere: list[str] = []
        wake = LoopWakeup(
            loop,
            lambda: fired.append(threading.current_thread().name),
            min_interval_s=interval,
            settle_elsewhere=lambda: elsewhere.append(threading.current_thread().name),
        )
        wake.settle()
        assert fired == [] and elsewhere == []  # nothing pending
        wake()  # after a quiet interval: at the end of this iteration
        assert wake.pending
        wake.settle()  # ... or now, when a read asks first
        assert len(fired) == 1 and not wake.pending
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert len(fired) == 1  # the end-of-iteration callback was cancelled
        wake()  # within the interval: waits for the timer
        assert wake.pending and len(fired) == 1
        await asyncio.to_thread(wake.settle)
        assert elsewhere == [elsewhere[0]] and elsewhere[0] != threading.current_thread().name
        assert len(fired) == 1 and wake.pending  # the loop's wake-up still waits
        wake.settle()
        assert len(fired) == 2 and not wake.pending
        for _ in range(3):
            await asyncio.sleep(0)
        assert len(fired) == 2 and wake.wakeups == 2
        wake()  # the next one waits for a new timer, not for the cancelled one
        assert wake.pending and len(fired) == 2

    asyncio.run(main())


def test_settle_on_the_loop_tries_settle_on_loop_while_the_wake_ups_stay_the_threads() -> None:
    """With ``settle_on_loop`` and no ``on_loop`` (DLedger mode: the dispatch thread takes the
    windows, a read takes a small waiting one on the loop): wake-ups at their time wake the
    thread; a settle asks ``settle_on_loop`` first and wakes the thread only when it declines."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        fired: list[str] = []
        handled: list[bool] = []
        accept = [True]

        def here() -> bool:
            handled.append(accept[0])
            return accept[0]

        wake = LoopWakeup(loop, lambda: fired.append("thread"), min_interval_s=600.0, settle_on_loop=here)
        wake()  # after a quiet interval: at the end of this iteration, to the thread
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert fired == ["thread"] and handled == [] and wake.handled_on_loop == 0
        wake()  # within the interval: waits for its timer
        assert wake.pending
        wake.settle()  # a read: done on the loop, the thread not woken
        assert not wake.pending and fired == ["thread"] and handled == [True]
        assert wake.handled_on_loop == 1 and wake.wakeups == 1
        accept[0] = False
        wake()
        wake.settle()  # declined (a window over the bound, the thread dispatching): woken
        assert not wake.pending and fired == ["thread", "thread"] and handled == [True, False]
        assert wake.handled_on_loop == 1 and wake.wakeups == 2

    asyncio.run(main())


def test_loop_wakeup_asks_interval_of_for_each_next_interval() -> None:
    """With ``interval_of`` the interval after each wake-up is the one it gives when the
    wake-up runs (a DLedger member's: longer while it does not lead)."""
    intervals = [0.2, 0.0]

    async def main() -> None:
        loop = asyncio.get_running_loop()
        fired: list[float] = []
        wake = LoopWakeup(
            loop, lambda: fired.append(loop.time()), min_interval_s=0.01, interval_of=lambda: intervals[0]
        )
        assert wake.next_interval() == 0.2
        wake()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert len(fired) == 1
        intervals[0] = 0.05  # read when the next wake-up runs, not now
        wake()
        await asyncio.sleep(0.03)  # past the fixed 10 ms: still held by the 200 ms asked at the first
        assert len(fired) == 1 and wake.pending
        await wait_until_async(lambda: len(fired) == 2, "the timed wake-up", WAIT_S, 0.005)
        assert fired[1] - fired[0] >= 0.2 - 0.001
        wake()  # the second set 50 ms
        await wait_until_async(lambda: len(fired) == 3, "the next timed wake-up", WAIT_S, 0.005)
        assert 0.05 - 0.001 <= fired[2] - fired[1] < 0.2

    asyncio.run(main())
