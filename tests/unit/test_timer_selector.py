"""The timerfd selector: asyncio's timers run at their times from untimed epoll waits, a timer
cancelled before its time does not wake the loop, the timerfd is set only when the loop's next
timer moves, and sockets are served as on the plain selector."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from rocketq.remoting import timer_selector
from rocketq.remoting.timer_selector import SLACK_S, TimerfdSelector

pytestmark = pytest.mark.skipif(not timer_selector.available(), reason="no timerfd here")

T = TypeVar("T")


def run_on_timerfd(main: Callable[[TimerfdSelector], Awaitable[T]]) -> T:
    selector = TimerfdSelector()
    loop = asyncio.SelectorEventLoop(selector)
    try:
        return loop.run_until_complete(asyncio.wait_for(main(selector), 60))
    finally:
        loop.close()


def test_timers_run_at_their_times_and_the_timerfd_ends_the_waits() -> None:
    """Sleeps on a loop with nothing else to do: each ends when the timerfd fires (the epoll
    waits have no timeout), never before its time, and the timerfd is set once per sleep."""

    async def main(selector: TimerfdSelector) -> list[float]:
        loop = asyncio.get_running_loop()
        lateness = []
        for _ in range(10):
            began = loop.time()
            await asyncio.sleep(0.02)
            lateness.append(loop.time() - began - 0.02)
        assert selector.timer_wakeups == 10 and selector.sets == 10
        return lateness

    lateness = run_on_timerfd(main)
    assert min(lateness) >= -0.001  # the loop's clock resolution
    # late by the slack plus scheduling on a shared machine; a missed timerfd would hang instead
    assert sorted(lateness)[5] < SLACK_S + 0.05


#: the cancelled timer's delay: the cancel, 10 ms after the start from another thread, must come
#: first also when a loaded host holds that thread or the loop back for a while
SOON_S = 1.5


def test_a_timer_cancelled_before_its_time_does_not_wake_the_loop() -> None:
    """The timerfd set for a timer that is then cancelled (here by a call from another thread,
    which wakes the loop through its self-pipe) is set again, to the next timer, at the next
    wait: one timerfd wake-up (the later timer's), not a second at the cancelled one's time."""

    async def main(selector: TimerfdSelector) -> None:
        loop = asyncio.get_running_loop()
        fired: list[str] = []
        soon = loop.call_later(SOON_S, fired.append, "soon")  # far enough for a loaded host
        cancelled: asyncio.Future[None] = loop.create_future()

        def cancel() -> None:
            soon.cancel()
            cancelled.set_result(None)

        threading.Timer(0.01, loop.call_soon_threadsafe, (cancel,)).start()
        await cancelled  # the loop waits with the soon timer first: the timerfd is set for it
        assert selector.sets == 1 and selector.timer_wakeups == 0
        began = loop.time()
        await asyncio.sleep(SOON_S + 0.3)  # past the cancelled timer's time
        assert loop.time() - began >= SOON_S + 0.3 - 0.001
        assert fired == [] and selector.timer_wakeups == 1 and selector.sets == 2

    run_on_timerfd(main)


def test_the_timerfd_is_set_only_when_the_next_timer_moves() -> None:
    """Many waits ended by reads while one far timer is pending: the timerfd is set once for
    it, not per wait; sockets are read and written as on the plain selector."""

    async def main(selector: TimerfdSelector) -> None:
        loop = asyncio.get_running_loop()
        far = loop.call_later(3600, lambda: None)

        class Echo(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                assert isinstance(transport, asyncio.Transport)
                self.transport = transport

            def data_received(self, data: bytes) -> None:
                self.transport.write(data)

        server = await loop.create_server(Echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        sets = selector.sets
        for i in range(200):
            writer.write(b"ping %d\n" % i)
            assert await reader.readline() == b"ping %d\n" % i
        assert selector.sets == sets  # the far timer's setting holds across all those waits
        assert selector.timer_wakeups == 0
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()
        far.cancel()

    run_on_timerfd(main)


def test_close_closes_the_timerfd() -> None:
    selector = TimerfdSelector()
    tfd = selector._tfd
    os.fstat(tfd)
    loop = asyncio.SelectorEventLoop(selector)
    loop.close()
    with pytest.raises(OSError):
        os.fstat(tfd)


def test_new_event_loop_is_on_the_timerfd_selector_unless_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(timer_selector.LOOP_TIMERFD_ENV, raising=False)
    loop = timer_selector.new_event_loop()
    try:
        assert isinstance(loop._selector, TimerfdSelector)  # type: ignore[attr-defined]
    finally:
        loop.close()
    monkeypatch.setenv(timer_selector.LOOP_TIMERFD_ENV, "0")
    loop = timer_selector.new_event_loop()
    try:
        assert not isinstance(loop._selector, TimerfdSelector)  # type: ignore[attr-defined]
    finally:
        loop.close()


def test_a_wait_without_timeout_still_ends_on_a_read() -> None:
    """No timer pending at all: the wait is the plain untimed epoll wait, ended by a read."""

    async def main(selector: TimerfdSelector) -> bytes:
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair()
        with a, b:
            a.setblocking(False)
            b.setblocking(False)
            got: asyncio.Future[bytes] = loop.create_future()
            loop.add_reader(a, lambda: got.set_result(a.recv(16)) if not got.done() else None)
            loop.call_soon(b.send, b"hello")
            data = await got
            loop.remove_reader(a)
        assert selector.timer_wakeups == 0
        return data

    assert run_on_timerfd(main) == b"hello"
