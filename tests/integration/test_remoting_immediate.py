"""The transport's immediate handler (answers inside data_received) over real sockets, on both
event loops the servers can run on."""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest

from _support.remoting import RawPeer
from rocketq.errors import ResponseCode, RocketqError, TopicNotExist
from rocketq.remoting import (
    Connection,
    RemotingClient,
    RemotingCommand,
    RemotingServer,
    create_request,
    create_response,
    encode,
    eventloop,
    timer_selector,
)
from rocketq.remoting.codes import FLAG_ONEWAY
from rocketq.remoting.connection import DEFERRED, Deferred, answers_held

T = TypeVar("T")
WAIT_S = 10.0

LOOPS = [
    "asyncio",
    pytest.param(
        "uvloop",
        marks=pytest.mark.skipif(importlib.util.find_spec("uvloop") is None, reason="uvloop not installed"),
    ),
]

NOW, LATER, REFUSED, BROKEN = 1, 2, 3, 4


def run_on(loop: str, coro: Coroutine[Any, Any, T]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, 60)

    return eventloop.run(bounded(), choice=loop)


async def _no_task_path(conn: Connection, request: RemotingCommand) -> RemotingCommand:
    raise AssertionError("no request takes the task path here")


async def deferring_server(
    immediate: Callable[[Connection, RemotingCommand], Any], conns: list[Connection], **kwargs: Any
) -> RemotingServer:
    """A started server whose every request goes to ``immediate`` (none to the task path), its
    connections listed in ``conns``."""
    server = RemotingServer(
        "127.0.0.1", 0, _no_task_path, immediate=immediate, on_connection=conns.append, **kwargs
    )
    await server.start()
    return server


async def taking_server(
    taken: list[tuple[Connection, RemotingCommand]], conns: list[Connection], **kwargs: Any
) -> RemotingServer:
    """A :func:`deferring_server` that takes every request as DEFERRED, listed in ``taken``
    with its connection, for the test to answer."""

    def immediate(conn: Connection, request: RemotingCommand) -> Deferred:
        taken.append((conn, request))
        return DEFERRED

    return await deferring_server(immediate, conns, **kwargs)


class Handlers:
    """An immediate handler for codes NOW/REFUSED/BROKEN, the task handler for the rest."""

    def __init__(self) -> None:
        self.immediate_calls: list[int] = []
        self.task_calls: list[int] = []
        self.in_task: list[bool] = []

    def immediate(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        self.immediate_calls.append(request.code)
        if request.code == NOW:
            return create_response(request, 0, remark="now", body=request.body)
        if request.code == REFUSED:
            raise TopicNotExist("topic[T] not exist")
        if request.code == BROKEN:
            raise ValueError("handler bug")
        return None

    async def handler(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        self.task_calls.append(request.code)
        self.in_task.append(asyncio.current_task() is not None)
        await asyncio.sleep(0)
        return create_response(request, 0, remark="later")


@pytest.mark.parametrize("loop", LOOPS)
def test_immediate_answers_and_falls_back_to_the_task_handler(loop: str) -> None:
    async def main() -> str:
        handlers = Handlers()
        server = RemotingServer("127.0.0.1", 0, handlers.handler, immediate=handlers.immediate)
        await server.start()
        client = RemotingClient()
        try:
            answers = await asyncio.gather(
                *(
                    client.invoke(server.address, create_request(code, body=b"x" * code))
                    for code in (1, 2, 3, 4)
                )
            )
            now, later, refused, broken = answers
            assert (now.code, now.remark, now.body) == (0, "now", b"x")
            assert (later.code, later.remark) == (0, "later")
            assert (refused.code, refused.remark) == (ResponseCode.TOPIC_NOT_EXIST, "topic[T] not exist")
            assert (broken.code, broken.remark) == (ResponseCode.SYSTEM_ERROR, "handler bug")
            assert sorted(handlers.immediate_calls) == [1, 2, 3, 4]
            assert handlers.task_calls == [LATER] and handlers.in_task == [True]

            # a oneway request answered immediately gets no response: the next frame back on
            # the socket answers the request that follows it
            peer = await RawPeer.connect(server)
            oneway = create_request(NOW, oneway=True)
            second = create_request(LATER)
            await peer.send(encode(oneway) + encode(second))
            reply = await asyncio.wait_for(peer.next_command(), WAIT_S)
            assert reply.opaque == second.opaque and reply.remark == "later"
            await peer.close()
            return eventloop.loop_name(asyncio.get_running_loop())
        finally:
            await client.close()
            await server.close()

    assert run_on(loop, main()) == loop


@pytest.mark.parametrize("loop", LOOPS)
def test_pipelined_immediate_answers_keep_their_opaques(loop: str) -> None:
    async def main() -> None:
        handlers = Handlers()
        server = RemotingServer("127.0.0.1", 0, handlers.handler, immediate=handlers.immediate)
        await server.start()
        try:
            peer = await RawPeer.connect(server)
            requests = [create_request(NOW if i % 3 else LATER, body=str(i).encode()) for i in range(300)]
            await peer.send(b"".join(encode(r) for r in requests))
            replies = [await asyncio.wait_for(peer.next_command(), WAIT_S) for _ in requests]
            assert sorted(r.opaque for r in replies) == sorted(r.opaque for r in requests)
            by_opaque = {r.opaque: r for r in replies}
            for request in requests:
                assert by_opaque[request.opaque].remark == ("now" if request.code == NOW else "later")
            await peer.close()
        finally:
            await server.close()

    run_on(loop, main())


@pytest.mark.parametrize("loop", LOOPS)
def test_deferred_answers_come_later_and_count_against_the_request_cap(loop: str) -> None:
    async def main() -> None:
        taken: list[RemotingCommand] = []
        conns: list[Connection] = []

        def immediate(conn: Connection, request: RemotingCommand) -> RemotingCommand | Deferred | None:
            if request.code == NOW:
                return create_response(request, 0, remark="now")
            taken.append(request)
            return DEFERRED

        server = await deferring_server(immediate, conns, max_pending_requests=4)
        try:
            peer = await RawPeer.connect(server)
            requests = [create_request(LATER, body=str(i).encode()) for i in range(4)]
            await peer.send(b"".join(encode(r) for r in requests))
            await asyncio.wait_for(_until(lambda: len(taken) == 4), WAIT_S)
            (conn,) = conns
            # four answers owed, no task: at the cap, so the connection stops reading
            assert conn.running_requests == 4 and conn.reading_paused
            later = create_request(NOW)
            await peer.send(encode(later))
            first, second, third, fourth = taken
            conn.answer(third, encode(create_response(third, 0, remark="frame")))
            assert conn.reading_paused  # three owed: more than half the cap
            conn.answer(first, TopicNotExist("topic[T] not exist"))
            assert not conn.reading_paused  # two owed: reading again, the NOW request is answered
            replies = [await asyncio.wait_for(peer.next_command(), WAIT_S) for _ in range(3)]
            assert [(r.opaque, r.code, r.remark) for r in replies] == [
                (third.opaque, 0, "frame"),
                (first.opaque, ResponseCode.TOPIC_NOT_EXIST, "topic[T] not exist"),
                (later.opaque, 0, "now"),
            ]
            conn.answer(fourth, create_response(fourth, 0, remark="command"))
            conn.answer(second, create_response(second, 0, remark="late"))
            replies = [await asyncio.wait_for(peer.next_command(), WAIT_S) for _ in range(2)]
            assert [(r.opaque, r.remark) for r in replies] == [
                (fourth.opaque, "command"),
                (second.opaque, "late"),
            ]
            assert conn.running_requests == 0
            # an answer owed when the peer goes away is dropped, not written to a closed socket
            await peer.send(encode(create_request(LATER)))
            await asyncio.wait_for(_until(lambda: len(taken) == 5), WAIT_S)
            await peer.close()
            await asyncio.wait_for(conn.wait_closed(), WAIT_S)
            conn.answer(taken[4], create_response(taken[4], 0))
            assert conn.running_requests == 0
        finally:
            await server.close()

    run_on(loop, main())


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.005)


def test_event_loop_choice() -> None:
    # asyncio's loop: on the timerfd selector where there is one
    expected = timer_selector.new_event_loop if timer_selector.available() else None
    assert eventloop.loop_factory("asyncio") is expected
    assert eventloop.loop_factory(" ASYNCIO ") is expected
    with pytest.raises(
        Exception, match=r"ROCKETQ_EVENT_LOOP='tokio' is not an event loop choice; use one of"
    ):
        eventloop.loop_factory("tokio")


def test_event_loop_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    async def name() -> str:
        return eventloop.loop_name(asyncio.get_running_loop())

    monkeypatch.delenv(eventloop.EVENT_LOOP_ENV, raising=False)
    assert eventloop.run(name()) == "asyncio"
    monkeypatch.setenv(eventloop.EVENT_LOOP_ENV, "bogus")
    coro = name()
    with pytest.raises(RocketqError, match="bogus"):
        eventloop.run(coro)
    assert coro.cr_frame is None  # closed, never left dangling
    if importlib.util.find_spec("uvloop") is not None:
        monkeypatch.setenv(eventloop.EVENT_LOOP_ENV, "auto")
        assert eventloop.run(name()) == "uvloop"


@pytest.mark.parametrize("loop", LOOPS)
def test_deferred_answers_inside_answers_held_leave_in_one_write_per_connection_at_its_end(loop: str) -> None:
    """A deferred answer given as its frame inside an ``answers_held`` block schedules no
    end-of-iteration flush: the block's end writes each connection's answers, in order, one write per
    connection; a block inside it leaves them to the outer one; outside a block an answer
    leaves at the end of the iteration, as before."""

    async def main() -> None:
        taken: list[tuple[Connection, RemotingCommand]] = []
        conns: list[Connection] = []
        server = await taking_server(taken, conns)
        try:
            peers = [await RawPeer.connect(server) for _ in range(2)]
            for k, peer in enumerate(peers):
                await peer.send(
                    b"".join(encode(create_request(LATER, body=b"%d" % (3 * k + i))) for i in range(3))
                )
            await asyncio.wait_for(_until(lambda: len(taken) == 6), WAIT_S)
            writes: dict[int, list[bytes]] = {}
            for conn in conns:
                transport = conn._transport
                assert transport is not None
                conn._transport = _Recording(transport, writes.setdefault(id(conn), []))  # type: ignore[assignment]
            loop_ = asyncio.get_running_loop()
            with answers_held(loop_):
                with answers_held(loop_):  # nested: the outer block writes
                    for conn, request in taken[:4]:
                        conn.answer(
                            request, encode(create_response(request, 0, remark=request.body.decode()))
                        )
                for _ in range(5):  # loop iterations pass: nothing is written from a callback
                    await asyncio.sleep(0)
                assert all(w == [] for w in writes.values())
                for conn, request in taken[4:5]:
                    conn.answer(request, encode(create_response(request, 0, remark="frame")))
            assert sorted(len(w) for w in writes.values()) == [1, 1]  # one write per connection
            last_conn, last = taken[5]
            # no block: at the end of the iteration, as before
            last_conn.answer(last, encode(create_response(last, 0, remark="after")))
            assert len(writes[id(last_conn)]) == 1
            replies = [[await asyncio.wait_for(p.next_command(), WAIT_S) for _ in range(3)] for p in peers]
            remarks = sorted([r.remark for r in rs] for rs in replies)
            assert remarks == [["0", "1", "2"], ["3", "frame", "after"]]
            assert sorted(len(w) for w in writes.values()) == [1, 2]
            for p in peers:
                await p.close()
        finally:
            await server.close()

    run_on(loop, main())


@pytest.mark.parametrize("loop", LOOPS)
def test_answer_frames_answers_several_deferred_requests_in_one_write_and_skips_oneway_ones(
    loop: str,
) -> None:
    """``answer_frames`` of several requests taken as DEFERRED: their frames in order, in one
    write at the end of the iteration; a oneway request's frame is dropped; each counts as
    answered (the request cap's count goes back to zero and reading resumes)."""

    async def main() -> None:
        taken: list[tuple[Connection, RemotingCommand]] = []
        conns: list[Connection] = []
        server = await taking_server(taken, conns, max_pending_requests=4)
        try:
            peer = await RawPeer.connect(server)
            requests = [create_request(LATER, body=b"%d" % i) for i in range(4)]
            requests[1].flag |= FLAG_ONEWAY
            await peer.send(b"".join(encode(r) for r in requests))
            await asyncio.wait_for(_until(lambda: len(taken) == 4), WAIT_S)
            (conn,) = conns
            assert conn.running_requests == 4 and conn.reading_paused
            written: list[bytes] = []
            transport = conn._transport
            assert transport is not None
            conn._transport = _Recording(transport, written)  # type: ignore[assignment]
            conn.answer_frames([(r, encode(create_response(r, 0, remark=r.body.decode()))) for _, r in taken])
            assert conn.running_requests == 0 and not conn.reading_paused
            replies = [await asyncio.wait_for(peer.next_command(), WAIT_S) for _ in range(3)]
            assert [r.remark for r in replies] == ["0", "2", "3"]
            assert len(written) == 1
            await peer.close()
        finally:
            await server.close()

    run_on(loop, main())


class _Recording:
    """A transport whose writes are recorded (uvloop's transports take no new attributes)."""

    def __init__(self, transport: asyncio.BaseTransport, written: list[bytes]) -> None:
        self._transport = transport
        self._written = written

    def write(self, data: bytes) -> None:
        self._written.append(bytes(data))
        self._transport.write(data)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
