"""The paced flusher of a DLedger member (``RaftGroupLog._flusher``, APPENDED acks) ends when the
member stops, whenever the stop comes."""

from __future__ import annotations

import asyncio
import threading

import pytest

from _support.wait import wait_until, wait_until_async
from rocketq.ha.driver import RaftGroupLog
from rocketq.ha.driver_config import DLedgerConfig
from rocketq.ha.raft_types import Tick


class StopRightAfterTheWait(threading.Event):
    """A stop event that the member sets (then wakes the flusher) just after the flusher's first
    paced wait came back unset: the interleaving that left the flusher asleep for good."""

    def __init__(self, member: RaftGroupLog) -> None:
        super().__init__()
        self.member = member
        self.fired = False

    def wait(self, timeout: float | None = None) -> bool:
        if not self.fired:
            self.fired = True
            self.set()
            self.member._flusher_wake.set()
            return False
        return super().wait(timeout)


def test_a_stop_between_the_paced_wait_and_the_idle_sleep_ends_the_flusher(tmp_path: object) -> None:
    member = RaftGroupLog(DLedgerConfig(self_id="n0", peers=(("n0", "127.0.0.1:1"),), data_dir=str(tmp_path)))
    member._store = object()  # type: ignore[assignment]  # idle: the flusher never touches it
    loop = asyncio.new_event_loop()
    try:
        thread = threading.Thread(
            target=member._flusher, args=(loop, StopRightAfterTheWait(member)), daemon=True
        )
        thread.start()
        thread.join(5)
        assert not thread.is_alive(), "the flusher slept through the stop"
    finally:
        loop.close()


class CountingStore:
    """Stands in for the entry store: each fsync covers one more entry."""

    def __init__(self) -> None:
        self.flushes = 0

    def flush_unlocked(self) -> int:
        self.flushes += 1
        return self.flushes


def test_fsyncs_made_while_a_report_waits_for_the_loop_are_reported_once(tmp_path: object) -> None:
    """The flusher wakes the loop for its first report only; the fsyncs after it, while the
    loop has not taken that report, replace it: the loop steps once, with the latest index.
    Once the loop took it, the next fsync wakes the loop again."""
    member = RaftGroupLog(DLedgerConfig(self_id="n0", peers=(("n0", "127.0.0.1:1"),), data_dir=str(tmp_path)))
    store = CountingStore()
    member._store = store  # type: ignore[assignment]
    taken: list[tuple[int, int]] = []
    member._flushed = lambda generation, flushed: taken.append((generation, flushed))  # type: ignore[method-assign]
    loop = asyncio.new_event_loop()  # run only when the test says: the reports wait for it
    stop = threading.Event()
    thread = threading.Thread(target=member._flusher, args=(loop, stop), daemon=True)

    def write_and_wait_for_fsync(n: int) -> None:
        member._unflushed = True  # what a write on the loop does
        member._flusher_wake.set()
        wait_until(lambda: store.flushes == n, f"fsync {n}", 5, 0.001)

    thread.start()
    try:
        for n in range(1, 4):
            write_and_wait_for_fsync(n)
        wait_until(lambda: member._flush_report == (0, 3), "the third report", 5, 0.001)
        assert len(loop._ready) == 1  # type: ignore[attr-defined]  # one wake-up of the loop
        loop.run_until_complete(asyncio.sleep(0))
        assert taken == [(0, 3)]
        write_and_wait_for_fsync(4)
        wait_until(lambda: loop._ready, "the fourth report's wake-up", 5, 0.001)  # type: ignore[attr-defined]
        assert len(loop._ready) == 1  # type: ignore[attr-defined]
        loop.run_until_complete(asyncio.sleep(0))
        assert taken == [(0, 3), (0, 4)]
    finally:
        stop.set()
        member._flusher_wake.set()
        thread.join(5)
        loop.close()


def test_ticks_carry_the_elapsed_milliseconds_until_a_failed_step_ends_them(tmp_path: object) -> None:
    """The tick timer steps the core with the milliseconds elapsed (whole ones, the rest
    carried), sets its next timer after each, and stops at the first step that fails: the
    tick task ends with that step's exception (what ``stop`` logs)."""
    member = RaftGroupLog(
        DLedgerConfig(self_id="n0", peers=(("n0", "127.0.0.1:1"),), data_dir=str(tmp_path), tick_ms=2)
    )
    ticks: list[int] = []
    failing = [False]

    def step(event: Tick) -> None:
        if failing[0]:
            raise RuntimeError("the core failed")
        ticks.append(event.elapsed_ms)

    member._step = step  # type: ignore[assignment,method-assign]

    async def main() -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        task = loop.create_task(member._tick_loop())
        await wait_until_async(lambda: len(ticks) >= 20, "20 ticks", 5, 0.001)
        elapsed_ms = (loop.time() - started) * 1000
        assert all(ms >= 1 for ms in ticks) and sum(ticks) <= elapsed_ms + 1
        failing[0] = True
        with pytest.raises(RuntimeError, match="the core failed"):
            await asyncio.wait_for(task, 5)
        count = len(ticks)
        await asyncio.sleep(0.02)  # ten periods: no timer is left to step again
        assert len(ticks) == count

    asyncio.run(main())


def test_a_cancelled_tick_task_leaves_no_timer(tmp_path: object) -> None:
    member = RaftGroupLog(
        DLedgerConfig(self_id="n0", peers=(("n0", "127.0.0.1:1"),), data_dir=str(tmp_path), tick_ms=1)
    )
    ticks: list[int] = []
    member._step = lambda event: ticks.append(event.elapsed_ms)  # type: ignore[assignment,method-assign,attr-defined]

    async def main() -> None:
        loop = asyncio.get_running_loop()
        task = loop.create_task(member._tick_loop())
        await wait_until_async(lambda: len(ticks) >= 3, "3 ticks", 5, 0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        count = len(ticks)
        await asyncio.sleep(0.01)
        assert len(ticks) == count
        assert not [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]

    asyncio.run(main())
