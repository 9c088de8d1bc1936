"""Remoting transport over real loopback sockets: correlation, concurrency, errors, both directions."""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import logging
import socket
import struct
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from _support.remoting import WAIT_S, RawPeer, run
from _support.wait import wait_until_async
from rocketq.errors import ConnectionClosed, MessageIllegal, RemotingConnectError, RemotingTimeout
from rocketq.remoting import (
    FLAG_ONEWAY,
    Connection,
    FrameDecoder,
    RemotingClient,
    RemotingCommand,
    RemotingServer,
    RequestCode,
    create_request,
    create_response,
    encode,
)
from rocketq.remoting.connection import CallingConnection

Handler = Callable[[Connection, RemotingCommand], Awaitable[RemotingCommand | None]]


async def echo(conn: Connection, request: RemotingCommand) -> RemotingCommand:
    return create_response(request, 0, remark="ok", ext_fields={"code": request.code}, body=request.body)


async def start(handler: Handler = echo, **kwargs: Any) -> RemotingServer:
    server = RemotingServer("127.0.0.1", 0, handler, **kwargs)
    await server.start()
    return server


def test_request_response() -> None:
    async def main() -> None:
        server = await start()
        client = RemotingClient()
        try:
            request = create_request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}, b"payload")
            response = await client.invoke(server.address, request, WAIT_S)
            assert response.is_response
            assert response.opaque == request.opaque
            assert response.code == 0
            assert response.remark == "ok"
            assert response.ext_fields == {"code": "105"}
            assert response.body == b"payload"
            # One connection per address, reused.
            again = await client.invoke(server.address, create_request(34), WAIT_S)
            assert again.ext_fields == {"code": "34"}
            assert len(client.connections) == 1
            assert len(server.connections) == 1
        finally:
            await client.close()
            await server.close()

    run(main())


def test_200_concurrent_requests_answered_out_of_order() -> None:
    async def main() -> None:
        release = asyncio.Event()
        held_started = 0
        all_held = asyncio.Event()
        answer_order: list[int] = []

        async def handler(conn: Connection, request: RemotingCommand) -> RemotingCommand:
            nonlocal held_started
            index = int(request.ext_fields["i"])
            if index % 2 == 0:  # held, like a long-polling pull
                held_started += 1
                if held_started == 100:
                    all_held.set()
                await release.wait()
            answer_order.append(index)
            return create_response(request, 0, ext_fields={"i": index}, body=request.body)

        server = await start(handler)
        client = RemotingClient()
        try:
            requests = [
                create_request(RequestCode.PULL_MESSAGE, {"i": i}, str(i).encode()) for i in range(200)
            ]
            calls = [asyncio.ensure_future(client.invoke(server.address, r, WAIT_S)) for r in requests]
            free = [calls[i] for i in range(1, 200, 2)]
            # The 100 free requests complete while all 100 held ones are still pending.
            done = await asyncio.gather(*free)
            await asyncio.wait_for(all_held.wait(), WAIT_S)
            assert not any(calls[i].done() for i in range(0, 200, 2))
            assert [r.ext_fields["i"] for r in done] == [str(i) for i in range(1, 200, 2)]
            release.set()
            responses = await asyncio.gather(*calls)
            for i, (request, response) in enumerate(zip(requests, responses, strict=True)):
                assert response.opaque == request.opaque
                assert response.body == str(i).encode()
            assert answer_order[:100] == list(range(1, 200, 2))
            assert len(server.connections) == 1
        finally:
            await client.close()
            await server.close()

    run(main())


def test_oneway_requests_get_no_response() -> None:
    async def main() -> None:
        seen: list[int] = []
        oneway_seen = asyncio.Event()

        async def handler(conn: Connection, request: RemotingCommand) -> RemotingCommand:
            seen.append(request.code)
            if request.is_oneway:
                oneway_seen.set()
            return create_response(request, 0)  # must be dropped for oneway requests

        async def failing(conn: Connection, request: RemotingCommand) -> RemotingCommand:
            if request.is_oneway:
                raise RuntimeError("oneway failure must not be answered either")
            return create_response(request, 0)

        server = await start(handler)
        failing_server = await start(failing)
        client = RemotingClient()
        try:
            oneway = create_request(RequestCode.UPDATE_CONSUMER_OFFSET, {"commitOffset": 5})
            await client.invoke_oneway(server.address, oneway)
            assert oneway.flag & FLAG_ONEWAY
            await asyncio.wait_for(oneway_seen.wait(), WAIT_S)

            # On a raw socket: a oneway frame then a normal request; the first (and only) frame
            # coming back answers the normal request.
            for srv in (server, failing_server):
                peer = await RawPeer.connect(srv)
                first = create_request(RequestCode.UPDATE_CONSUMER_OFFSET, oneway=True)
                second = create_request(RequestCode.HEART_BEAT)
                await peer.send(encode(first) + encode(second))
                reply = await peer.next_command()
                assert reply.opaque == second.opaque
                assert peer.received == []
                await peer.close()
            assert seen.count(RequestCode.UPDATE_CONSUMER_OFFSET) == 2
        finally:
            await client.close()
            await server.close()
            await failing_server.close()

    run(main())


def test_handler_exception_becomes_system_error() -> None:
    async def main() -> None:
        async def handler(conn: Connection, request: RemotingCommand) -> RemotingCommand:
            if request.code == RequestCode.SEND_MESSAGE:
                raise ValueError("boom: bad header")
            if request.code == RequestCode.SEND_MESSAGE_V2:
                raise MessageIllegal("message body 5242881 B exceeds max 4194304 B")
            return create_response(request, 0)

        server = await start(handler)
        client = RemotingClient()
        try:
            response = await client.invoke(server.address, create_request(RequestCode.SEND_MESSAGE), WAIT_S)
            assert response.code == 1
            assert response.remark == "boom: bad header"
            response = await client.invoke(
                server.address, create_request(RequestCode.SEND_MESSAGE_V2), WAIT_S
            )
            assert response.code == 13  # a RocketqError answers with its own wire code
            assert response.remark == "message body 5242881 B exceeds max 4194304 B"
            # The connection is still fine.
            response = await client.invoke(server.address, create_request(RequestCode.HEART_BEAT), WAIT_S)
            assert response.code == 0
        finally:
            await client.close()
            await server.close()

    run(main())


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(struct.pack(">iI", 2048, 10) + b"x" * 16, id="oversize"),
        pytest.param(struct.pack(">i", -7) + b"\x00" * 8, id="negative-length"),
        pytest.param(struct.pack(">iI", 4 + 9, 9) + b"not json!", id="garbage-header"),
        pytest.param(struct.pack(">iI", 4 + 2, 50) + b"{}", id="header-beyond-frame"),
    ],
)
def test_bad_frame_closes_only_that_connection(bad: bytes, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        server = await start(max_frame_size=1024)
        good = RemotingClient()
        try:
            assert (await good.invoke(server.address, create_request(34), WAIT_S)).code == 0
            peer = await RawPeer.connect(server)
            # A valid request first: it is answered, then the bad frame kills the connection.
            request = create_request(RequestCode.HEART_BEAT)
            await peer.send(encode(request))
            assert (await peer.next_command()).opaque == request.opaque
            with caplog.at_level(logging.WARNING, logger="rocketq.remoting.connection"):
                await peer.send(bad)
                await peer.wait_closed_by_peer()
            await peer.close()
            # The other client keeps working on its existing connection.
            assert (await good.invoke(server.address, create_request(34), WAIT_S)).code == 0
            assert len(server.connections) == 1
        finally:
            await good.close()
            await server.close()

    run(main())
    assert any("closing connection from 127.0.0.1:" in r.getMessage() for r in caplog.records)


def test_server_to_client_oneway_and_invoke() -> None:
    async def main() -> None:
        connected: asyncio.Future[Connection] = asyncio.get_running_loop().create_future()
        notified = asyncio.Event()
        client_seen: list[RemotingCommand] = []

        async def client_handler(conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
            client_seen.append(request)
            if request.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
                notified.set()
                return None
            if request.code == RequestCode.GET_CONSUMER_RUNNING_INFO:
                return create_response(request, 0, body=b'{"running":true}')
            return create_response(request, 3)

        async def server_handler(conn: Connection, request: RemotingCommand) -> RemotingCommand:
            if not connected.done():
                connected.set_result(conn)
            return create_response(request, 0)

        server = await start(server_handler)
        client = RemotingClient(client_handler)
        plain = RemotingClient()  # no handler: answers requests with REQUEST_CODE_NOT_SUPPORTED
        try:
            await client.invoke(server.address, create_request(RequestCode.HEART_BEAT), WAIT_S)
            conn = await asyncio.wait_for(connected, WAIT_S)
            assert conn.remote_address.startswith("127.0.0.1:")
            assert conn in server.connections

            conn.send(
                create_request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "CG"}, oneway=True)
            )
            await asyncio.wait_for(notified.wait(), WAIT_S)
            assert client_seen[0].ext_fields == {"consumerGroup": "CG"}
            assert client_seen[0].is_oneway

            info = create_request(RequestCode.GET_CONSUMER_RUNNING_INFO, {"clientId": "c1"})
            response = await conn.invoke(info, WAIT_S)
            assert response.opaque == info.opaque
            assert response.body == b'{"running":true}'

            # A client without a handler.
            before = set(server.connections)
            await plain.invoke(server.address, create_request(RequestCode.HEART_BEAT), WAIT_S)
            (plain_conn,) = set(server.connections) - before
            response = await plain_conn.invoke(create_request(RequestCode.GET_CONSUMER_RUNNING_INFO), WAIT_S)
            assert response.code == 3
            assert (
                response.remark == f" request type {int(RequestCode.GET_CONSUMER_RUNNING_INFO)} not supported"
            )
        finally:
            await client.close()
            await plain.close()
            await server.close()

    run(main())


def test_client_timeout() -> None:
    async def main() -> None:
        release = asyncio.Event()
        answered = asyncio.Event()

        async def handler(conn: Connection, request: RemotingCommand) -> RemotingCommand:
            if request.code == RequestCode.PULL_MESSAGE:
                await release.wait()
                answered.set()
            return create_response(request, 0)

        server = await start(handler)
        client = RemotingClient()
        try:
            loop = asyncio.get_running_loop()
            started = loop.time()
            with pytest.raises(RemotingTimeout, match="no response to code 11"):
                await client.invoke(server.address, create_request(RequestCode.PULL_MESSAGE), 0.2)
            assert loop.time() - started >= 0.2
            (conn,) = client.connections.values()
            assert conn.pending_calls == 0
            # The late answer is dropped; the connection keeps serving.
            release.set()
            await asyncio.wait_for(answered.wait(), WAIT_S)
            response = await client.invoke(server.address, create_request(RequestCode.HEART_BEAT), WAIT_S)
            assert response.code == 0
            assert client.connections == {server.address: conn}
        finally:
            await client.close()
            await server.close()

    run(main())


def test_server_going_away_fails_pending_calls_and_client_reconnects() -> None:
    async def main() -> None:
        held = asyncio.Event()

        async def holding(conn: Connection, request: RemotingCommand) -> RemotingCommand:
            if request.code == RequestCode.PULL_MESSAGE:
                held.set()
                await asyncio.Event().wait()  # never answers
            return create_response(request, 0)

        server = await start(holding)
        port = server.port
        address = server.address
        client = RemotingClient()
        try:
            pending = asyncio.ensure_future(
                client.invoke(address, create_request(RequestCode.PULL_MESSAGE), 30)
            )
            await asyncio.wait_for(held.wait(), WAIT_S)
            await server.close()
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(pending, WAIT_S)

            with pytest.raises(RemotingConnectError):
                await client.invoke(address, create_request(RequestCode.HEART_BEAT), WAIT_S)

            server = RemotingServer("127.0.0.1", port, echo)
            await server.start()
            response = await client.invoke(address, create_request(RequestCode.HEART_BEAT), WAIT_S)
            assert response.code == 0
        finally:
            await client.close()
            await server.close()

    run(main())


def test_close_callbacks_and_client_close_fails_pending_calls() -> None:
    async def main() -> None:
        closed_on_server: asyncio.Future[Connection] = asyncio.get_running_loop().create_future()
        held = asyncio.Event()

        def on_connection(conn: Connection) -> None:
            conn.add_close_callback(closed_on_server.set_result)

        async def handler(conn: Connection, request: RemotingCommand) -> RemotingCommand:
            held.set()
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

        server = await start(handler, on_connection=on_connection)
        client = RemotingClient()
        try:
            pending = asyncio.ensure_future(
                client.invoke(server.address, create_request(RequestCode.PULL_MESSAGE), 30)
            )
            await asyncio.wait_for(held.wait(), WAIT_S)
            (server_conn,) = server.connections
            await client.close()
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(pending, WAIT_S)
            assert await asyncio.wait_for(closed_on_server, WAIT_S) is server_conn
            assert server_conn.closed
            assert server.connections == frozenset()
            with pytest.raises(ConnectionClosed):
                await client.invoke(server.address, create_request(34), WAIT_S)
            with pytest.raises(ConnectionClosed):
                server_conn.send(create_request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, oneway=True))
        finally:
            await server.close()

    run(main())


def test_connect_refused() -> None:
    async def main() -> None:
        server = await start()
        address = server.address
        await server.close()
        client = RemotingClient()
        try:
            with pytest.raises(RemotingConnectError, match=f"cannot connect to {address}"):
                await client.invoke(address, create_request(34), WAIT_S)
        finally:
            await client.close()

    run(main())


def test_reading_pauses_at_max_pending_requests_and_resumes() -> None:
    async def main() -> None:
        release = asyncio.Event()
        running = 0
        peak = 0
        reached = asyncio.Event()

        async def handler(conn: Connection, request: RemotingCommand) -> RemotingCommand:
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            if running == 4:
                reached.set()
            await release.wait()
            running -= 1
            return create_response(request, 0)

        server = await start(handler, max_pending_requests=4)
        client = RemotingClient()
        try:
            calls = [
                asyncio.ensure_future(
                    client.invoke(server.address, create_request(RequestCode.PULL_MESSAGE), WAIT_S)
                )
                for _ in range(40)
            ]
            await asyncio.wait_for(reached.wait(), WAIT_S)
            release.set()
            responses = await asyncio.gather(*calls)
            assert all(r.code == 0 for r in responses)
            assert peak == 4
        finally:
            await client.close()
            await server.close()

    run(main())


def test_large_bodies_both_ways() -> None:
    async def main() -> None:
        server = await start()
        client = RemotingClient()
        try:
            body = bytes(range(256)) * 40_000  # ~10 MiB, beyond the write-buffer high-water mark
            calls = [
                client.invoke(server.address, create_request(RequestCode.SEND_MESSAGE, body=body), WAIT_S)
            ]
            calls += [client.invoke(server.address, create_request(34, body=b"x"), WAIT_S) for _ in range(50)]
            responses = await asyncio.gather(*calls)
            assert responses[0].body == body
            assert all(r.body == b"x" for r in responses[1:])
        finally:
            await client.close()
            await server.close()

    run(main())


class FakeTransport(asyncio.Transport):
    """Records what a Connection does to its transport."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []
        self.reading = True
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("10.0.0.2", 5000), "sockname": ("10.0.0.1", 10911)}.get(name, default)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written.append(bytes(data))

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True


def written_commands(transport: FakeTransport) -> list[RemotingCommand]:
    return FrameDecoder().feed(b"".join(transport.written))


def test_write_pressure_pauses_reading_only_on_the_serving_side() -> None:
    async def main() -> None:
        serving = Connection(echo, serving=True)
        transport = FakeTransport()
        serving.connection_made(transport)
        assert serving.remote_address == "10.0.0.2:5000"
        serving.pause_writing()
        assert serving.writing_paused
        assert serving.reading_paused
        assert not transport.reading
        serving.resume_writing()
        assert not serving.reading_paused
        assert transport.reading

        calling = Connection(None, serving=False)
        transport = FakeTransport()
        calling.connection_made(transport)
        calling.pause_writing()
        assert transport.reading  # a caller keeps reading, or two peers could wait on each other
        request = create_request(RequestCode.HEART_BEAT)
        call = asyncio.ensure_future(calling.invoke(request, WAIT_S))
        await asyncio.sleep(0)  # let the call run up to its wait for the drain
        assert transport.written == []
        calling.resume_writing()
        await wait_until_async(lambda: transport.written, "the drained write", WAIT_S, 0)
        assert written_commands(transport) == [request]
        calling.data_received(encode(create_response(request, 0, remark="drained")))
        assert (await call).remark == "drained"
        calling.connection_lost(None)
        serving.connection_lost(None)

    run(main())


def test_answers_to_one_read_leave_in_two_writes_by_its_end() -> None:
    """The answers to the requests of one read: the first written at once, the rest joined
    into one write when data_received returns (no loop callback left for them); frames queued
    outside data_received still go out at the end of the loop iteration."""

    async def main() -> None:
        def immediate(conn: Connection, request: RemotingCommand) -> RemotingCommand:
            return create_response(request, 0, remark=request.ext_fields["i"])

        serving = Connection(echo, serving=True, immediate=immediate)
        transport = FakeTransport()
        serving.connection_made(transport)
        requests = [create_request(RequestCode.SEND_MESSAGE_V2, {"i": str(i)}) for i in range(4)]
        serving.data_received(b"".join(encode(r) for r in requests))
        assert len(transport.written) == 2  # already, before any loop callback ran
        answers = written_commands(transport)
        assert [a.remark for a in answers] == ["0", "1", "2", "3"]
        assert [a.opaque for a in answers] == [r.opaque for r in requests]
        assert transport.written[0] == encode(answers[0])  # the first on its own

        serving.data_received(encode(requests[0]))  # a lone request: one write, nothing after it
        assert len(transport.written) == 3
        await asyncio.sleep(0)
        assert len(transport.written) == 3

        serving.send(create_request(RequestCode.HEART_BEAT))  # outside data_received
        serving.send(create_request(RequestCode.HEART_BEAT))
        assert len(transport.written) == 4  # the first at once, the second at the iteration's end
        await wait_until_async(lambda: len(transport.written) == 5, "the iteration's flush", WAIT_S, 0)
        serving.connection_lost(None)

    run(main())


def test_requests_over_the_cap_wait_in_order() -> None:
    async def main() -> None:
        release = asyncio.Event()
        started: list[int] = []

        async def handler(conn: Connection, request: RemotingCommand) -> RemotingCommand:
            started.append(int(request.ext_fields["i"]))
            await release.wait()
            return create_response(request, 0, ext_fields={"i": request.ext_fields["i"]})

        conn = Connection(handler, serving=True, max_pending_requests=3)
        transport = FakeTransport()
        conn.connection_made(transport)
        requests = [create_request(RequestCode.PULL_MESSAGE, {"i": i}) for i in range(10)]
        conn.data_received(b"".join(encode(r) for r in requests))
        assert conn.running_requests == 3
        assert conn.reading_paused
        await wait_until_async(lambda: len(started) >= 3, "three requests started", WAIT_S, 0)
        assert started == [0, 1, 2]
        release.set()
        await wait_until_async(lambda: len(written_commands(transport)) >= 10, "ten answers", WAIT_S, 0)
        assert started == list(range(10))
        assert sorted(int(r.ext_fields["i"]) for r in written_commands(transport)) == list(range(10))
        assert not conn.reading_paused
        assert transport.reading
        conn.connection_lost(None)

    run(main())


def test_request_futures_many_in_flight_timeout_and_cancel() -> None:
    """``Connection.request``: a future per call, no task. Responses complete their futures and
    leave nothing behind; a call past its deadline fails with RemotingTimeout; a cancelled call
    is forgotten and its late answer dropped."""

    async def main() -> None:
        release = asyncio.Event()

        async def handler(conn: Connection, request: RemotingCommand) -> RemotingCommand:
            if request.code == RequestCode.PULL_MESSAGE:
                await release.wait()
            return create_response(request, 0, ext_fields={"n": request.ext_fields.get("n", "")})

        server = await start(handler)
        client = RemotingClient()
        try:
            conn = await client.connection(server.address)
            futures = [
                conn.request(create_request(RequestCode.HEART_BEAT, {"n": i}), WAIT_S) for i in range(300)
            ]
            responses = await asyncio.wait_for(asyncio.gather(*futures), WAIT_S)
            assert [r.ext_fields["n"] for r in responses] == [str(i) for i in range(300)]
            assert conn.pending_calls == 0
            assert not any(conn._expiring.values())  # answered calls hold no deadline entry

            loop = asyncio.get_running_loop()
            started = loop.time()
            late = conn.request(create_request(RequestCode.PULL_MESSAGE), 0.2)
            with pytest.raises(RemotingTimeout, match="no response to code 11"):
                await late
            assert loop.time() - started >= 0.2
            assert conn.pending_calls == 0

            cancelled = conn.request(create_request(RequestCode.PULL_MESSAGE), WAIT_S)
            forever = conn.request(create_request(RequestCode.PULL_MESSAGE), float("inf"))
            assert conn.pending_calls == 2
            cancelled.cancel()
            forever.cancel()
            await asyncio.sleep(0)  # done callbacks run on the next iteration
            assert conn.pending_calls == 1  # the infinite one is forgotten at once ...
            release.set()
            ok = await conn.invoke(create_request(RequestCode.HEART_BEAT, {"n": "after"}), WAIT_S)
            assert ok.ext_fields["n"] == "after"
            # ... the other when its answer arrives (dropped: nobody waits for it)
            await wait_until_async(
                lambda: conn.pending_calls == 0, "the last pending call to end", WAIT_S, 0.01
            )
        finally:
            await client.close()
            await server.close()

    run(main())


def test_request_on_a_closed_connection_raises_at_once() -> None:
    async def main() -> None:
        server = await start()
        client = RemotingClient()
        try:
            conn = await client.connection(server.address)
            pending = conn.request(create_request(RequestCode.PULL_MESSAGE), WAIT_S)
            conn.close()
            with pytest.raises(ConnectionClosed):
                conn.request(create_request(RequestCode.HEART_BEAT), WAIT_S)
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(pending, WAIT_S)
            assert conn.pending_calls == 0
        finally:
            await client.close()
            await server.close()

    run(main())


def test_oneway_commands_written_at_once_leave_no_flush_and_keep_their_place() -> None:
    """``write_oneway_all``: the frames of ``send_oneway_all`` in one write at once, with no
    end-of-iteration flush scheduled; behind frames that already wait for that flush; refused
    on a closed connection."""

    async def main() -> None:
        conn = Connection(None, serving=False)
        transport = FakeTransport()
        conn.connection_made(transport)
        first = [create_request(RequestCode.HEART_BEAT) for _ in range(3)]
        conn.write_oneway_all(first)
        assert len(transport.written) == 1 and not conn._flush_scheduled
        assert written_commands(transport) == first and all(c.flag & 2 for c in first)
        twin = Connection(None, serving=False)
        twin_transport = FakeTransport()
        twin.connection_made(twin_transport)
        twin.send_oneway_all(first)  # the same frames through the iteration's batching
        assert twin_transport.written == transport.written
        twin.connection_lost(None)

        queued = [create_request(RequestCode.HEART_BEAT) for _ in range(3)]
        conn.send_oneway(queued[0])  # at once, and a flush scheduled for what follows
        conn.send_oneway(queued[1])  # waits for that flush
        conn.write_oneway_all([queued[2]])  # so this one goes behind it
        assert len(transport.written) == 2
        await wait_until_async(lambda: len(transport.written) == 3, "the iteration's flush", WAIT_S, 0)
        assert written_commands(transport) == first + queued
        conn.write_oneway_all([])
        assert len(transport.written) == 3
        conn.connection_lost(None)
        with pytest.raises(ConnectionClosed, match="cannot send 1 commands"):
            conn.write_oneway_all([create_request(RequestCode.HEART_BEAT)])

    run(main())


def test_after_read_runs_once_at_the_end_of_each_read_after_its_answers() -> None:
    async def main() -> None:
        seen: list[tuple[str, bool]] = []

        def immediate(conn: Connection, request: RemotingCommand) -> RemotingCommand:
            seen.append((request.ext_fields["i"], conn.receiving))
            return create_response(request, 0)

        serving = Connection(
            echo,
            serving=True,
            immediate=immediate,
            after_read=lambda: seen.append(("end", serving.receiving)),
        )
        transport = FakeTransport()
        serving.connection_made(transport)
        requests = [create_request(RequestCode.SEND_MESSAGE_V2, {"i": str(i)}) for i in range(3)]
        frames = b"".join(encode(r) for r in requests)
        serving.data_received(frames[:-5])  # the last request incomplete: two handled
        assert seen == [("0", True), ("1", True), ("end", False)]
        assert len(written_commands(transport)) == 2  # their answers written before the end
        serving.data_received(frames[-5:])
        assert seen[3:] == [("2", True), ("end", False)] and not serving.receiving
        serving.connection_lost(None)

    run(main())


def test_a_calls_quick_answer_takes_the_read_that_is_its_response() -> None:
    """``request_frame`` with a quick answer: the read that is exactly the response of the one
    call pending goes to the quick function, whose value completes the call; a None from it, or
    two calls pending, leave the reads to the decoder; a call that times out leaves nothing
    behind. The calling connection reads into its own buffer (a BufferedProtocol)."""

    async def main() -> None:
        release = asyncio.Event()

        async def handler(conn: Connection, request: RemotingCommand) -> RemotingCommand:
            if request.code == RequestCode.PULL_MESSAGE:
                await release.wait()
            return create_response(request, 0, remark="ok", body=request.body)

        server = await start(handler)
        client = RemotingClient()
        seen: list[tuple[bytes, int]] = []

        def quick(buf: bytes | bytearray, n: int, opaque: int, tag: str, max_frame_size: int) -> Any:
            seen.append((bytes(buf[:n]), opaque))
            (length,) = struct.unpack_from(">i", buf, 0)
            if tag == "decline" or length + 4 != n:
                return None
            (answer,) = FrameDecoder().feed(bytes(buf[:n]))
            return (tag, opaque) if answer.opaque == opaque else None

        try:
            await client.invoke(server.address, create_request(RequestCode.HEART_BEAT), WAIT_S)
            conn = client.ready_connection(server.address)
            assert conn is not None and isinstance(conn, asyncio.BufferedProtocol)

            def framed(code: int, body: bytes = b"") -> tuple[bytes, int]:
                request = create_request(code, None, body)
                return encode(request), request.opaque

            frame, opaque = framed(RequestCode.HEART_BEAT, b"one")
            made = await conn.request_frame(frame, opaque, 34, WAIT_S, quick, ("mine",))
            assert made == ("mine", opaque)
            assert seen[-1][1] == opaque and FrameDecoder().feed(seen[-1][0])[0].body == b"one"

            frame, opaque = framed(RequestCode.HEART_BEAT, b"two")
            declined = await conn.request_frame(frame, opaque, 34, WAIT_S, quick, ("decline",))
            assert isinstance(declined, RemotingCommand) and declined.body == b"two"

            # two calls pending: the read answering one of them is not offered to the quick function;
            # the other's, once it is the only call pending, is
            before = len(seen)
            held, held_opaque = framed(RequestCode.PULL_MESSAGE)
            held_call = conn.request_frame(held, held_opaque, 11, WAIT_S, quick, ("held",))
            frame, opaque = framed(RequestCode.HEART_BEAT, b"three")
            third = await conn.request_frame(frame, opaque, 34, WAIT_S, quick, ("third",))
            assert isinstance(third, RemotingCommand) and third.body == b"three"
            assert len(seen) == before
            release.set()
            assert await held_call == ("held", held_opaque)
            assert len(seen) == before + 1

            # a call that times out is forgotten with its quick answer
            release.clear()
            frame, opaque = framed(RequestCode.PULL_MESSAGE)
            with pytest.raises(RemotingTimeout):
                await conn.request_frame(frame, opaque, 11, 0.05, quick, ("late",))
            assert conn.pending_calls == 0 and not conn._quick
            release.set()
            # a response larger than the read buffer arrives in several reads
            big = bytes(range(256)) * 2048  # 512 KiB
            frame, opaque = framed(RequestCode.HEART_BEAT, big)
            large = await conn.request_frame(frame, opaque, 34, WAIT_S, quick, ("big",))
            assert isinstance(large, RemotingCommand) and large.body == big
        finally:
            await client.close()
            await server.close()

    run(main())


def test_writes_after_the_peer_reset_the_connection_are_dropped_without_asyncio_warnings(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A peer gone with a reset: the first write finds it and the transport starts closing; the
    writes that follow in the same loop iteration (a Raft link's heartbeats, an iteration's
    answers) are dropped, not handed to the closing transport (where each one past the fifth
    makes asyncio log "socket.send() raised exception.")."""

    async def main() -> None:
        server = await start()
        peer = socket.create_connection(("127.0.0.1", server.port))
        try:
            await wait_until_async(lambda: len(server.connections) == 1, "the server's connection", WAIT_S, 0)
            [conn] = server.connections
            peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            peer.close()  # a reset, on loopback delivered before close returns
            with caplog.at_level(logging.WARNING, logger="asyncio"):
                for _ in range(12):  # one iteration: connection_lost cannot run in between
                    conn.write_oneway_all([create_request(RequestCode.HEART_BEAT)])
                    conn.send_oneway(create_request(RequestCode.HEART_BEAT))
                    conn.flush()
            await wait_until_async(lambda: not server.connections, "the connection closed", WAIT_S, 0)
            assert not [r for r in caplog.records if r.name == "asyncio"], caplog.text
        finally:
            peer.close()
            await server.close()


def test_a_calling_connection_writes_a_lone_call_without_a_flush_and_joins_a_burst() -> None:
    """On the calling side a request with nothing queued before it is written at once and
    schedules no end-of-iteration flush when none went out that way since the last read or
    flush (one call in flight: a loop iteration less per call); a second one before a read is
    queued for the flush, and the rest of its burst joins it in one write, in order."""

    async def main() -> None:
        conn = CallingConnection(None, serving=False)
        transport = FakeTransport()
        conn.connection_made(transport)
        calls = [create_request(RequestCode.HEART_BEAT) for _ in range(7)]
        first = conn.request(calls[0], WAIT_S)
        assert len(transport.written) == 1 and not conn._flush_scheduled
        conn.request(calls[1], WAIT_S)  # no read since the first: waits for the flush
        conn.request(calls[2], WAIT_S)
        assert len(transport.written) == 1 and conn._flush_scheduled
        await wait_until_async(lambda: len(transport.written) == 2, "the burst's flush", WAIT_S, 0)
        assert written_commands(transport) == calls[:3] and not conn._flush_scheduled
        conn.request(calls[3], WAIT_S)  # the flush ended the burst: alone again
        assert len(transport.written) == 3 and not conn._flush_scheduled
        await asyncio.sleep(0)
        conn.request(calls[4], WAIT_S)  # a later iteration, but no read since: queued
        assert len(transport.written) == 3 and conn._flush_scheduled
        await wait_until_async(lambda: len(transport.written) == 4, "the flush", WAIT_S, 0)
        # a read (the first call's answer): the next call goes out alone
        answer = encode(create_response(calls[0], 0, remark="ok"))
        conn.get_buffer(len(answer))[: len(answer)] = answer
        conn.buffer_updated(len(answer))
        assert (await first).remark == "ok"
        conn.request(calls[5], WAIT_S)
        assert len(transport.written) == 5 and not conn._flush_scheduled
        answer = encode(create_response(calls[3], 0))
        conn.get_buffer(len(answer))[: len(answer)] = answer
        conn.buffer_updated(len(answer))
        conn.request(calls[6], WAIT_S)
        assert len(transport.written) == 6 and not conn._flush_scheduled
        assert written_commands(transport) == calls
        conn.connection_lost(None)

    run(main())


def test_a_calling_connection_writes_the_requests_made_inside_a_read_together_at_its_end() -> None:
    """One read brings the answers of several calls, and the tasks awaiting them make their
    next requests inside it: none is written before the read is done, the first included, and
    they all leave in one write, in order, when it is (a first one written at once split the
    burst in two on the serving side). A read of one answer keeps the first-at-once rule: its
    task's next request leaves inside the read."""

    async def main() -> None:
        conn = CallingConnection(None, serving=False)
        transport = FakeTransport()
        conn.connection_made(transport)
        n = 8
        firsts = [create_request(RequestCode.HEART_BEAT) for _ in range(n)]
        seconds = [create_request(RequestCode.HEART_BEAT) for _ in range(n)]
        writes_seen: list[int] = []

        async def caller(i: int) -> str:
            await conn.request(firsts[i], WAIT_S)
            writes_seen.append(len(transport.written))  # inside the read, as it resumed us
            second = conn.request(seconds[i], WAIT_S)
            writes_seen.append(len(transport.written))
            return (await second).remark

        tasks = [asyncio.ensure_future(caller(i)) for i in range(n)]
        await wait_until_async(lambda: len(written_commands(transport)) == n, "the first calls", WAIT_S, 0)
        before = len(transport.written)
        after_read: list[int] = []

        def read() -> None:  # a loop callback, as a transport's read is (no task running)
            conn.data_received(b"".join(encode(create_response(r, 0)) for r in firsts))
            after_read.append(len(transport.written))

        asyncio.get_running_loop().call_soon(read)
        await wait_until_async(lambda: after_read, "the read", WAIT_S, 0)
        assert writes_seen == [before] * (2 * n)  # every task resumed inside the read; nothing out
        assert after_read == [before + 1]  # when the read returned: one write
        assert FrameDecoder().feed(transport.written[-1]) == seconds
        assert not conn._flush_scheduled

        conn.data_received(b"".join(encode(create_response(r, 0, remark="ok")) for r in seconds))
        assert await asyncio.gather(*tasks) == ["ok"] * n

        writes_seen.clear()
        after_read.clear()
        firsts[0], seconds[0] = create_request(RequestCode.HEART_BEAT), create_request(RequestCode.HEART_BEAT)
        lone = asyncio.ensure_future(caller(0))
        await wait_until_async(lambda: written_commands(transport)[-1] == firsts[0], "the call", WAIT_S, 0)
        before = len(transport.written)
        firsts = firsts[:1]  # read() answers this one call alone
        asyncio.get_running_loop().call_soon(read)
        await wait_until_async(lambda: after_read, "the read", WAIT_S, 0)
        assert writes_seen == [before, before + 1]  # written inside the read, at once
        assert after_read == [before + 1] and transport.written[-1] == encode(seconds[0])
        conn.data_received(encode(create_response(seconds[0], 0, remark="ok")))
        assert await lone == "ok"
        conn.connection_lost(None)

    run(main())


class ThreadedAnswerer:
    """A peer on a thread of its own, with blocking sockets (its I/O never runs on the test's
    loop): it answers the requests it reads, ``batch`` answers at a time in one send."""

    def __init__(self, batch: int = 1) -> None:
        self.batch = batch
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, name="answerer", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        peer, _ = self.listener.accept()
        decoder = FrameDecoder()
        held: list[bytes] = []
        with peer:
            while data := peer.recv(65536):
                held += [encode(create_response(cmd, 0, remark="ok")) for cmd in decoder.feed(data)]
                if len(held) >= self.batch:
                    peer.sendall(b"".join(held))
                    held.clear()

    def close(self) -> None:
        self.listener.close()
        self.thread.join(WAIT_S)


def count_selects(loop: asyncio.AbstractEventLoop) -> tuple[list[int], Callable[[], None]]:
    """Count the loop's selector polls (one per loop iteration); returns the count and an undo."""
    selector = loop._selector  # type: ignore[attr-defined]
    real = selector.select
    count = [0]

    def counting(timeout: float | None = None) -> Any:
        count[0] += 1
        return real(timeout)

    selector.select = counting

    def undo() -> None:
        selector.select = real

    return count, undo


def test_a_task_awaiting_a_call_resumes_within_the_read_of_its_answer() -> None:
    """One call in flight over a real socket (the peer on another thread): the task awaiting the
    call goes on inside the read that brought the answer, so each call costs the calling loop one
    iteration, with the answer taken by a quick answer and by the decoder alike (asyncio's own
    resumption, one iteration after the read, made it two)."""

    async def main() -> None:
        peer = ThreadedAnswerer()
        client = RemotingClient()
        loop = asyncio.get_running_loop()
        calls = 300

        def quick(buf: bytes | bytearray, n: int, opaque: int, max_frame_size: int) -> Any:
            (answer,) = FrameDecoder().feed(bytes(buf[:n]))
            return answer.remark if answer.opaque == opaque else None

        try:
            await client.invoke(peer.address, create_request(RequestCode.HEART_BEAT), WAIT_S)
            conn = client.ready_connection(peer.address)
            assert conn is not None
            selects, undo = count_selects(loop)
            try:
                for _ in range(calls):
                    assert (await conn.request(create_request(RequestCode.HEART_BEAT), WAIT_S)).remark == "ok"
                decoded = selects[0]
                for _ in range(calls):
                    request = create_request(RequestCode.HEART_BEAT)
                    frame = encode(request)
                    assert await conn.request_frame(frame, request.opaque, 34, WAIT_S, quick) == "ok"
                quick_answers = selects[0] - decoded
            finally:
                undo()
            assert decoded < 1.5 * calls, f"{decoded} loop iterations for {calls} decoded answers"
            assert quick_answers < 1.5 * calls, f"{quick_answers} loop iterations for {calls} quick answers"
        finally:
            await client.close()
            peer.close()

    run(main())


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_a_task_that_closes_the_connection_inside_the_read_leaves_the_read_whole(loop_name: str) -> None:
    """Two answers in one read; the task the first one resumes closes the connection before
    the second is taken: the read goes on without an error, the second call gets the answer
    the read brought (as it did when the task resumed after the read), the connection closes
    and a call made after the close fails at once. On asyncio's loop and on uvloop alike (the
    task resumed inside the read on both)."""
    if loop_name == "uvloop" and importlib.util.find_spec("uvloop") is None:
        pytest.skip("uvloop is not installed")

    async def main() -> None:
        peer = ThreadedAnswerer(batch=2)
        client = RemotingClient()
        loop = asyncio.get_running_loop()
        errors: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda _loop, context: errors.append(context))
        try:
            conn = await client.connection(peer.address, WAIT_S)
            first = conn.request(create_request(RequestCode.HEART_BEAT), WAIT_S)
            second = conn.request(create_request(RequestCode.HEART_BEAT), WAIT_S)
            states: list[bool] = []

            async def closer() -> None:
                await first
                conn.close()
                states.append(second.done())

            await asyncio.wait_for(closer(), WAIT_S)
            assert states == [False]  # resumed before the read took the second answer
            assert (await asyncio.wait_for(second, WAIT_S)).remark == "ok"
            await asyncio.wait_for(conn.wait_closed(), WAIT_S)
            with pytest.raises(ConnectionClosed):
                conn.request(create_request(RequestCode.HEART_BEAT), WAIT_S)
            assert errors == []
        finally:
            await client.close()
            peer.close()

    if loop_name == "uvloop":
        uvloop = importlib.import_module("uvloop")
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(asyncio.wait_for(main(), 60))
    else:
        run(main())
