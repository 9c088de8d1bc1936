"""A broker start cancelled while a step runs in a worker thread leaves nothing open.

The pop state is loaded in a worker thread (``PopService.start`` opens ``pop/journal``). A thread
cannot be stopped, so when the task starting the broker is cancelled meanwhile the load still
finishes; the abandoned start must then close the journal (and the store, the servers, the
threads) before the cancellation reaches the caller. The test holds ``PopService.start`` on an
event, cancels the start, releases the event and checks what is left: no descriptor of the
journal, no extra non-daemon thread, and a broker that starts again on the same directory.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import threading

import pytest
from test_broker_server import WAIT_S, broker_config

from _support.wait import wait_until
from rocketq.broker import Broker
from rocketq.broker.pop.journal import JOURNAL_NAME
from rocketq.broker.pop.service import PopService
from rocketq.config import StoreConfig


def open_paths() -> set[str]:
    """The files this process has descriptors on."""
    paths = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            paths.add(os.readlink(f"/proc/self/fd/{fd}"))
        except FileNotFoundError:  # the descriptor of the listing itself, gone by now
            continue
    return paths


def non_daemon_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.is_alive() and not t.daemon}


def test_start_cancelled_while_the_pop_state_loads_closes_the_pop_journal(
    store_config: StoreConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered = threading.Event()
    release = threading.Event()
    services: list[PopService] = []
    original_start = PopService.start

    def held_start(self: PopService) -> None:
        services.append(self)
        entered.set()
        assert release.wait(WAIT_S), "the test never released PopService.start"
        original_start(self)

    monkeypatch.setattr(PopService, "start", held_start)
    threads_before = non_daemon_threads()

    async def main() -> None:
        broker = Broker(broker_config(), store_config)
        starting = asyncio.create_task(broker.start())
        assert await asyncio.to_thread(entered.wait, WAIT_S), "the start never reached PopService.start"
        starting.cancel()
        # let the cancellation reach the start task while PopService.start is still held
        await asyncio.sleep(0)
        assert not starting.done()  # the start waits for the thread it cannot stop
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(starting, WAIT_S)
        assert not broker.ready

    asyncio.run(main())

    assert len(services) == 1
    journal = pathlib.Path(services[0].directory, JOURNAL_NAME).resolve()
    assert journal.exists()  # PopService.start did run to its end and open it
    assert str(journal) not in open_paths(), "the pop journal is still open after the cancelled start"
    wait_until(
        lambda: not non_daemon_threads() - threads_before,
        lambda: f"the cancelled start's threads to end: {sorted(t.name for t in non_daemon_threads())}",
        WAIT_S,
        0.1,
    )

    # the directory is usable: a normal start (PopService.start no longer held) and a clean stop
    monkeypatch.setattr(PopService, "start", original_start)

    async def restart() -> None:
        broker = Broker(broker_config(), store_config)
        await broker.start()
        try:
            assert broker.ready
        finally:
            await broker.shutdown()

    asyncio.run(restart())
    assert str(journal) not in open_paths()
