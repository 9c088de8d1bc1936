"""ServiceThread: the loop, wake-ups, stop, errors and fault hooks; store services driven by step()."""

from __future__ import annotations

import pathlib
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from rocketq.store.allocate import AllocateMappedFileService
from rocketq.store.flush import CommitRealTimeService, FlushRealTimeService
from rocketq.store.mapped_file import MappedFile, MappedFileQueue, offset_to_file_name
from rocketq.store.service import ServiceThread
from rocketq.store.transient_pool import TransientStorePool

SIZE = 64 * 1024


def wait_until(cond: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)  # polling a condition with a deadline
    return True


class Counter(ServiceThread):
    name = "Counter"

    def __init__(self, interval_s: float | None, *, more: int = 0, fail: int = 0) -> None:
        super().__init__(interval_s)
        self.steps = 0
        self.more = more  # the first `more` steps report work left
        self.fail = fail  # the first `fail` steps raise
        self.shutdowns: list[str] = []

    def step(self) -> bool:
        self.steps += 1
        if self.steps <= self.fail:
            raise RuntimeError(f"step {self.steps} failed")
        return self.steps <= self.more

    def on_shutdown(self) -> None:
        self.shutdowns.append(threading.current_thread().name)


class WaitFirst(Counter):
    name = "WaitFirst"
    wait_first = True


@pytest.fixture
def services() -> Iterator[list[ServiceThread]]:
    started: list[ServiceThread] = []
    yield started
    for svc in started:
        svc.shutdown()


def test_step_without_thread() -> None:
    svc = Counter(None, more=1)
    assert svc.step() is True
    assert svc.step() is False
    assert svc.steps == 2 and not svc.is_alive()


def test_idles_until_woken_then_runs_once_per_wakeup(services: list[ServiceThread]) -> None:
    svc = Counter(None)  # no interval: only wake-ups run it
    services.append(svc)
    svc.start()
    assert wait_until(lambda: svc.steps == 1)  # work first, then idle
    for n in (2, 3):
        svc.wakeup()
        assert wait_until(lambda n=n: svc.steps == n)  # type: ignore[misc]
    assert svc.steps == 3


def test_true_from_step_runs_again_without_waiting(services: list[ServiceThread]) -> None:
    svc = Counter(None, more=5)
    services.append(svc)
    svc.start()
    assert wait_until(lambda: svc.steps == 6)  # five "more" and the one that said done; no wake-up needed


def test_wait_first_waits_before_the_first_step(services: list[ServiceThread]) -> None:
    svc = WaitFirst(None)
    services.append(svc)
    stepped = threading.Event()
    svc.fault_hook = lambda s: stepped.set()
    svc.start()
    assert not stepped.wait(0.2)  # a Counter without wait_first steps at once (test above)
    assert svc.steps == 0
    svc.wakeup()
    assert wait_until(lambda: svc.steps == 1)


def test_shutdown_ends_the_idle_wait_and_runs_on_shutdown_in_the_thread() -> None:
    svc = Counter(3600.0)
    svc.start()
    assert wait_until(lambda: svc.steps == 1)
    started = time.monotonic()
    svc.shutdown()
    assert time.monotonic() - started < 5
    assert not svc.is_alive() and svc.stopped
    assert svc.shutdowns == ["Counter"]
    assert svc.steps == 1


def test_shutdown_before_start_and_twice() -> None:
    svc = Counter(1.0)
    svc.shutdown()
    svc.shutdown()
    assert svc.steps == 0 and svc.shutdowns == []


def test_failed_steps_are_recorded_and_the_loop_goes_on(services: list[ServiceThread]) -> None:
    svc = Counter(0.001, fail=3)
    services.append(svc)
    svc.start()
    assert wait_until(lambda: svc.steps >= 5)
    assert isinstance(svc.error, RuntimeError) and "step 3 failed" in str(svc.error)
    assert svc.is_alive()


def test_fault_hook_on_an_instance(services: list[ServiceThread]) -> None:
    svc = Counter(0.001)
    other = Counter(0.001)
    services.extend([svc, other])
    seen: list[ServiceThread] = []

    def hook(s: ServiceThread) -> None:
        seen.append(s)
        raise OSError(5, "injected")

    svc.fault_hook = hook
    svc.start()
    other.start()
    assert wait_until(lambda: len(seen) >= 3 and other.steps >= 3)
    assert svc.steps == 0  # the hook raised before every step
    assert isinstance(svc.error, OSError) and "injected" in str(svc.error)
    assert set(seen) == {svc} and other.error is None
    svc.fault_hook = None
    assert wait_until(lambda: svc.steps >= 1)


def test_fault_hook_on_a_class_applies_to_subclasses(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def hook(s: ServiceThread) -> None:  # a plain function: not bound as a method
        calls.append(s.name)

    monkeypatch.setattr(Counter, "fault_hook", hook)
    svc = WaitFirst(None)
    assert svc.run_step() is False
    assert calls == ["WaitFirst"] and svc.steps == 1
    assert ServiceThread.fault_hook is None


# -- store services driven by step() ----------------------------------------------------------
@pytest.fixture
def queue(tmp_path: pathlib.Path) -> Iterator[MappedFileQueue]:
    q = MappedFileQueue(str(tmp_path / "log"), SIZE)
    q.load()
    yield q
    q.shutdown()


def append(q: MappedFileQueue, n: int) -> None:
    mf = q.get_last_mapped_file(0)
    assert mf is not None
    assert mf.append(b"r" * n)


def test_flush_service_step_honours_least_pages_then_thorough(queue: MappedFileQueue) -> None:
    svc = FlushRealTimeService(
        queue, interval_ms=3_600_000, least_pages=2, thorough_interval_ms=3_600_000, timed=False
    )
    append(queue, 100)
    svc.step()
    assert queue.flushed_where == 0  # fewer than two dirty pages
    append(queue, 2 * 4096)
    svc.step()
    assert queue.flushed_where == 100 + 2 * 4096
    append(queue, 10)
    svc._last_thorough = time.monotonic() - 3_600_001  # the thorough interval has passed
    svc.step()
    assert queue.flushed_where == 110 + 2 * 4096
    assert not svc.is_alive()


def test_flush_service_final_flush_on_shutdown(queue: MappedFileQueue) -> None:
    svc = FlushRealTimeService(
        queue, interval_ms=3_600_000, least_pages=1000, thorough_interval_ms=3_600_000, timed=True
    )
    svc.start()
    append(queue, 300)
    svc.shutdown()
    assert queue.flushed_where == 300


def test_commit_service_step_copies_the_write_buffer_and_wakes_flush(tmp_path: pathlib.Path) -> None:
    pool = TransientStorePool(1, SIZE)
    pool.init()
    q = MappedFileQueue(str(tmp_path / "log"), SIZE, transient_pool=pool)
    q.load()
    try:
        flush = Counter(None)
        svc = CommitRealTimeService(
            q, interval_ms=3_600_000, least_pages=0, thorough_interval_ms=3_600_000, flush_service=flush
        )
        append(q, 500)
        assert q.committed_where == 0
        svc.step()
        assert q.committed_where == 500
        assert flush._wakeup.is_set()  # the flush service was told there is work
        with open(tmp_path / "log" / offset_to_file_name(0), "rb") as f:
            assert f.read(500) == b"r" * 500
    finally:
        q.shutdown()
        pool.destroy()


def test_allocate_service_step_creates_requested_segments(tmp_path: pathlib.Path) -> None:
    svc = AllocateMappedFileService(wait_timeout_ms=10_000)
    d = tmp_path / "log"
    got: list[MappedFile] = []
    caller = threading.Thread(
        target=lambda: got.append(
            svc.allocate(str(d / offset_to_file_name(0)), str(d / offset_to_file_name(SIZE)), SIZE)
        )
    )
    caller.start()
    assert wait_until(lambda: svc.pending() == 2)
    assert svc.step() is True  # the requested segment; the next one is still queued
    caller.join(10)
    assert got and got[0].file_from_offset == 0
    assert svc.step() is False  # the pre-created next one; nothing left
    assert (d / offset_to_file_name(SIZE)).stat().st_size == SIZE
    assert svc.step() is False
    got[0].destroy(0)
    svc.shutdown()  # deletes the pre-created segment nobody asked for
    assert not (d / offset_to_file_name(SIZE)).exists()
