"""The paced flusher of a DLedger member (``RaftGroupLog._flusher``, APPENDED acks) ends when the
member stops, whenever the stop comes."""

from __future__ import annotations

import asyncio
import threading

import pytest

from _support.wait import wait_until, wait_until_async
from rocketq.ha.driver import RaftGroupLog
from rocketq.ha.driver_config import DLedgerConfig
from rocketq.ha.raft_types import Heartbeat, Tick


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
    thread = threading.Thread(target=member._flusher, args=(StopRightAfterTheWait(member),), daemon=True)
    thread.start()
    thread.join(5)
    assert not thread.is_alive(), "the flusher slept through the stop"


class CountingStore:
    """Stands in for the entry store: each fsync covers one more entry."""

    def __init__(self) -> None:
        self.flushes = 0

    def flush_unlocked(self) -> int:
        self.flushes += 1
        return self.flushes


def test_fsync_reports_wait_for_the_loop_without_waking_it(tmp_path: object) -> None:
    """The flusher leaves its report for the loop and does not wake it: the fsyncs made while
    a report waits replace it, and the loop steps once, with the latest index, when it takes
    the report (at a peer message or a tick). The next fsync leaves a new report."""
    member = RaftGroupLog(DLedgerConfig(self_id="n0", peers=(("n0", "127.0.0.1:1"),), data_dir=str(tmp_path)))
    store = CountingStore()
    member._store = store  # type: ignore[assignment]
    taken: list[tuple[int, int]] = []
    member._flushed = lambda generation, flushed: taken.append((generation, flushed))  # type: ignore[method-assign]
    stop = threading.Event()
    thread = threading.Thread(target=member._flusher, args=(stop,), daemon=True)

    def write_and_wait_for_fsync(n: int) -> None:
        member._unflushed = True  # what a write on the loop does
        member._flusher_wake.set()
        wait_until(lambda: store.flushes == n, f"fsync {n}", 5, 0.001)

    thread.start()
    try:
        for n in range(1, 4):
            write_and_wait_for_fsync(n)
        wait_until(lambda: member._flush_report == (0, 3), "the third report", 5, 0.001)
        assert taken == []  # nothing ran on the loop's behalf
        member._take_flush_report()
        assert taken == [(0, 3)] and member._flush_report is None
        member._take_flush_report()  # nothing new: no step
        assert taken == [(0, 3)]
        write_and_wait_for_fsync(4)
        wait_until(lambda: member._flush_report == (0, 4), "the fourth report", 5, 0.001)
        member._take_flush_report()
        assert taken == [(0, 3), (0, 4)]
    finally:
        stop.set()
        member._flusher_wake.set()
        thread.join(5)


def test_a_waiting_fsync_report_is_stepped_before_the_next_peer_message(tmp_path: object) -> None:
    """A peer message takes the waiting report first (a follower's reply to it then carries
    the fsynced index); with no report waiting, only the message is stepped."""
    member = RaftGroupLog(DLedgerConfig(self_id="n0", peers=(("n0", "127.0.0.1:1"),), data_dir=str(tmp_path)))
    member._node = object()  # type: ignore[assignment]  # started, as far as _deliver looks
    order: list[object] = []
    member._flushed = lambda generation, flushed: order.append(("fsynced", flushed))  # type: ignore[method-assign]
    member._step = lambda event: order.append(type(event).__name__)  # type: ignore[assignment,method-assign]
    beat = Heartbeat("n1", "n0", 1, 5)
    member._flush_report = (0, 7)
    member._deliver(beat, None)
    member._deliver(beat, None)
    assert order == [("fsynced", 7), "Receive", "Receive"]


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


def test_a_tick_takes_the_fsync_report_no_peer_message_took(tmp_path: object) -> None:
    member = RaftGroupLog(
        DLedgerConfig(self_id="n0", peers=(("n0", "127.0.0.1:1"),), data_dir=str(tmp_path), tick_ms=1)
    )
    order: list[object] = []
    member._flushed = lambda generation, flushed: order.append(("fsynced", flushed))  # type: ignore[method-assign]
    member._step = lambda event: order.append(type(event).__name__)  # type: ignore[assignment,method-assign]
    member._flush_report = (0, 3)

    async def main() -> None:
        task = asyncio.get_running_loop().create_task(member._tick_loop())
        await wait_until_async(lambda: order.count("Tick") >= 2, "2 ticks", 5, 0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert order[:2] == [("fsynced", 3), "Tick"] and ("fsynced", 3) not in order[2:]


class StopAfterWaits(threading.Event):
    """A stop event that records each paced wait's timeout, has the loop write something during
    each (so the flusher fsyncs after it), and stops the flusher at the ``n``-th wait."""

    def __init__(self, member: RaftGroupLog, n: int) -> None:
        super().__init__()
        self.member = member
        self.n = n
        self.timeouts: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.timeouts.append(timeout)
        if len(self.timeouts) >= self.n:
            self.set()
        else:
            self.member._unflushed = True  # a write on the loop meanwhile
        return self.is_set()


@pytest.mark.parametrize(("conf", "interval_s"), [({}, 0.01), ({"flushFileInterval": "500"}, 0.5)])
def test_the_paced_flusher_waits_flush_file_interval_between_fsyncs(
    tmp_path: object, conf: dict[str, str], interval_s: float
) -> None:
    """Under APPENDED acks the flusher fsyncs at most once per ``flushFileInterval`` (broker.conf,
    DLedger's name; DLedger's 10 ms by default): each of its waits is that long."""
    props = {"dLegerPeers": "n0-127.0.0.1:1", "dLegerSelfId": "n0", "storePathRootDir": str(tmp_path)}
    cfg = DLedgerConfig.from_broker_conf({**props, **conf})
    member = RaftGroupLog(cfg)
    store = CountingStore()
    member._store = store  # type: ignore[assignment]
    member._unflushed = True
    stop = StopAfterWaits(member, 4)
    thread = threading.Thread(target=member._flusher, args=(stop,), daemon=True)
    thread.start()
    thread.join(5)
    assert not thread.is_alive()
    assert stop.timeouts == [interval_s] * 4
    assert store.flushes == 3  # one fsync after each wait but the last, which stopped it
