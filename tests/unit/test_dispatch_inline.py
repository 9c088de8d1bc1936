"""Dispatch in the caller (the broker's event loop) beside the dispatch thread, on a real store:
one dispatcher at a time, a backlog over the bound left to the thread, damage skipped alike,
nothing dispatched once the store is closed."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from _support.wait import wait_until
from rocketq.config import StoreConfig
from rocketq.errors import DiskFull
from rocketq.message import Message
from rocketq.store import MessageStore, PutMessageResult
from rocketq.store.dispatch import ReputMessageService
from rocketq.store.record_scan import DispatchRequest
from rocketq.store.service import ServiceThread

WAIT_S = 30.0
TOPIC = "Inline"


def config(tmp_path: Path) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=str(tmp_path / "store"),
        flush_disk_type="ASYNC_FLUSH",
        mapped_file_size_commit_log=1 << 20,
        mapped_file_size_consume_queue=20 * 1024,
    )


class Gate:
    """A fault hook that parks the dispatch thread before each of its steps (before it takes
    the dispatch lock) until opened: the thread cannot dispatch while the gate is shut."""

    def __init__(self, reput: ReputMessageService) -> None:
        self._open = threading.Event()
        self.parked = threading.Event()
        self._reput = reput
        reput.fault_hook = self  # type: ignore[assignment]

    def __call__(self, _service: ServiceThread) -> None:
        if not self._open.is_set():
            self.parked.set()
            assert self._open.wait(WAIT_S), "gate never opened"

    def open(self) -> None:
        self._open.set()
        self._reput.wakeup()


class Seen:
    """A dispatcher recording each record's offset and the thread that dispatched its window."""

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.threads: list[str] = []

    def __call__(self, reqs: list[DispatchRequest]) -> None:
        self.offsets.extend(r.commit_log_offset for r in reqs)
        self.threads.append(threading.current_thread().name)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    with MessageStore(config(tmp_path)) as s:
        yield s


def put(store: MessageStore, n: int, size: int = 100) -> list[PutMessageResult]:
    return [store.put_message(Message(TOPIC, bytes([65 + i % 26]) * size), queue_id=i % 2) for i in range(n)]


def test_inline_dispatch_takes_a_small_window_and_leaves_a_larger_one_to_the_thread(
    store: MessageStore,
) -> None:
    reput = store.reput
    assert reput is not None
    gate = Gate(reput)
    seen = Seen()
    reput.dispatchers.append(seen)
    results = put(store, 10)
    behind = reput.behind()
    assert behind > 0
    assert not reput.dispatch_inline(behind - 1)  # over the bound: the thread's
    assert seen.offsets == [] and reput.inline_dispatches == 0
    assert reput.dispatch_inline(behind)
    assert reput.behind() == 0 and reput.inline_dispatches == 1
    assert seen.offsets == [r.physical_offset for r in results]
    assert seen.threads == [threading.current_thread().name]
    assert store.get_max_offset(TOPIC, 0) == 5 and store.get_max_offset(TOPIC, 1) == 5
    assert reput.dispatch_inline(0)  # nothing left: nothing for the thread either
    gate.open()


def test_inline_dispatch_is_refused_while_the_thread_dispatches_and_nothing_runs_twice(
    store: MessageStore,
) -> None:
    """The thread holds the dispatch lock (stopped inside a dispatcher): the loop's try fails and
    leaves the records to the thread; the other way round, the thread waits for the inline
    dispatch and dispatches only what came after it. Every record exactly once."""
    reput = store.reput
    assert reput is not None
    seen = Seen()
    inside = threading.Event()
    release = threading.Event()

    def blocking(reqs: list[DispatchRequest]) -> None:
        inside.set()
        assert release.wait(WAIT_S)

    reput.dispatchers.insert(0, blocking)
    reput.dispatchers.append(seen)
    first = put(store, 5)  # wakes the thread, which stops inside `blocking`
    assert inside.wait(WAIT_S)
    second = put(store, 5)
    assert not reput.dispatch_inline(1 << 20)  # the thread holds the lock
    release.set()
    assert store.wait_dispatched(WAIT_S)
    assert seen.offsets == [r.physical_offset for r in first + second]
    assert set(seen.threads) == {"ReputMessageService"}

    # now an inline dispatch holds the lock (stopped inside `blocking`) while the thread is woken
    inside.clear()
    release.clear()
    gate = Gate(reput)
    reput.wakeup()
    assert gate.parked.wait(WAIT_S)  # the thread waits at the gate, outside the lock
    third = put(store, 5)
    outcome: list[bool] = []
    loop_side = threading.Thread(target=lambda: outcome.append(reput.dispatch_inline(1 << 20)), name="loop")
    loop_side.start()
    assert inside.wait(WAIT_S)
    fourth = put(store, 5)  # the thread, let through now, must wait for the lock
    gate.open()
    release.set()
    loop_side.join(WAIT_S)
    assert outcome == [True]
    assert store.wait_dispatched(WAIT_S)
    expected = [r.physical_offset for r in first + second + third + fourth]
    assert seen.offsets == expected
    assert len(set(seen.offsets)) == len(seen.offsets)
    assert store.get_max_offset(TOPIC, 0) == 12 and store.get_max_offset(TOPIC, 1) == 8


def damage_magic(store: MessageStore, r: PutMessageResult) -> None:
    """Overwrite the record's magic code in its segment file (the mapping is shared)."""
    size = store.config.mapped_file_size_commit_log
    seg = r.physical_offset - r.physical_offset % size
    fd = os.open(os.path.join(store.config.commit_log_dir, f"{seg:020d}"), os.O_RDWR)
    try:
        os.pwrite(fd, b"\x00\x00\x00\x00", r.physical_offset - seg + 4)
    finally:
        os.close(fd)


@pytest.mark.parametrize("path", ["thread", "inline"])
def test_a_damaged_record_is_skipped_alike_by_the_thread_and_inline(store: MessageStore, path: str) -> None:
    """A record that does not decode inside readable data is skipped by its extent (found as
    recovery finds the next intact record), and the records after it are dispatched: the same
    positions, counts and queues whichever path dispatches."""
    reput = store.reput
    assert reput is not None
    gate = Gate(reput)
    seen = Seen()
    reput.dispatchers.append(seen)
    results = put(store, 9)
    victim = results[4]
    damage_magic(store, victim)
    if path == "inline":
        assert reput.dispatch_inline(1 << 20)
        assert reput.inline_dispatches >= 1
        gate.open()
    else:
        gate.open()
        assert store.wait_dispatched(WAIT_S)
        assert reput.inline_dispatches == 0
    assert reput.behind() == 0
    assert reput.reput_from_offset == store.commitlog.max_offset
    assert reput.damaged == {victim.physical_offset: results[5].physical_offset}
    assert seen.offsets == [r.physical_offset for r in results if r is not victim]
    assert reput.dispatched_records == 8
    # queue 0 holds records 0, 2, 6, 8 (4 was the victim, at queue offset 2)
    cq = store.find_consume_queue(TOPIC, 0)
    assert cq is not None
    units = [cq.get_unit(i) for i in range(cq.max_offset_in_queue)]
    present = [u.offset for u in units if u is not None and u.size > 0 and not u.is_filler]
    assert present == [results[i].physical_offset for i in (0, 2, 6, 8)]


def test_no_dispatch_after_the_store_is_closed(tmp_path: Path) -> None:
    store = MessageStore(config(tmp_path))
    store.start()
    reput = store.reput
    assert reput is not None
    put(store, 3)
    store.shutdown()
    dispatched = reput.dispatched_records
    assert dispatched == 3  # shutdown dispatched what was there
    assert not reput.dispatch_inline(1 << 20)
    reput.step()  # a step of a closed service does nothing either
    assert reput.dispatched_records == dispatched


def test_inline_dispatch_never_waits_for_a_consume_queue_rebuild(store: MessageStore) -> None:
    """A rebuild holds the ConsumeQueues' repair lock (which dispatch waits for): the loop does
    not wait for it, it leaves the window to the thread."""
    reput = store.reput
    assert reput is not None
    gate = Gate(reput)
    put(store, 4)
    held = threading.Event()
    done = threading.Event()

    def rebuild() -> None:
        with store.consume_queues.repair_lock:
            held.set()
            assert done.wait(WAIT_S)

    rebuilder = threading.Thread(target=rebuild)
    rebuilder.start()
    assert held.wait(WAIT_S)
    try:
        assert not reput.dispatch_inline(1 << 20)
        assert reput.dispatched_records == 0
    finally:
        done.set()
        rebuilder.join(WAIT_S)
    assert reput.dispatch_inline(1 << 20) and reput.dispatched_records == 4
    gate.open()


def test_a_failed_inline_dispatch_leaves_dispatch_to_the_thread_until_it_succeeds(
    store: MessageStore,
) -> None:
    reput = store.reput
    assert reput is not None
    gate = Gate(reput)
    failures = [RuntimeError("disk trouble")]

    def flaky(reqs: list[DispatchRequest]) -> None:
        if failures:
            raise failures.pop()

    reput.dispatchers.insert(0, flaky)
    put(store, 4)
    assert not reput.dispatch_inline(1 << 20)  # failed: the caller wakes the thread
    put(store, 2)
    assert not reput.dispatch_inline(1 << 20)  # still the thread's until one of its steps succeeds
    gate.open()
    assert store.wait_dispatched(WAIT_S)
    assert store.get_max_offset(TOPIC, 0) == 3 and store.get_max_offset(TOPIC, 1) == 3
    put(store, 2)
    assert reput.dispatch_inline(1 << 20)  # the thread's good step gave it back
    assert reput.behind() == 0


def test_a_shutdown_whose_dispatch_waits_for_disk_space_neither_waits_nor_raises(tmp_path: Path) -> None:
    """Dispatch that fails for want of space (the ConsumeQueues cannot grow) is not waited for
    at shutdown, and its last try (in the caller) does not raise: the store shuts down, keeps
    its abort file, and the next start dispatches the rest."""
    store = MessageStore(config(tmp_path))
    store.start()
    reput = store.reput
    assert reput is not None
    attempts = threading.Event()

    def full(reqs: list[DispatchRequest]) -> None:
        attempts.set()
        raise DiskFull("disk full: cannot reserve 20000 B for a ConsumeQueue segment")

    reput.dispatchers.insert(0, full)
    put(store, 3)
    reput.wakeup()
    assert attempts.wait(WAIT_S)
    wait_until(lambda: reput._waiting_for_space, "dispatch to report the full disk", WAIT_S)
    began = time.monotonic()
    store.shutdown()  # raised DiskFull before, after waiting 5 s for the dispatch
    assert time.monotonic() - began < 4.0
    assert os.path.exists(store.abort_file)  # dispatch was behind: the next start recovers
    reput.dispatchers.remove(full)
    with MessageStore(config(tmp_path)) as again:  # recovers abnormally and dispatches the rest
        assert again.get_max_offset(TOPIC, 0) == 2 and again.get_max_offset(TOPIC, 1) == 1
