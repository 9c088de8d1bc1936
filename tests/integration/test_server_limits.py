"""The remoting server's resource limits over real loopback sockets (rocketq.remoting.limits):
each tripped limit closes (or pauses) only the offending connection while others are served.
Limits are configured small so that every test finishes in well under a second of waiting."""

from __future__ import annotations

import asyncio
import struct
import time
from typing import Any

import pytest

from _support.remoting import HOST, QUIET, WAIT_S, closed_by_server, echo, run
from _support.wait import wait_until_async
from rocketq.broker.config import broker_config_from_properties
from rocketq.errors import ConfigError
from rocketq.namesrv.config import NamesrvConfig
from rocketq.namesrv.server import NameServer
from rocketq.remoting import (
    Connection,
    RemotingClient,
    RemotingCommand,
    RemotingServer,
    RequestCode,
    create_request,
    create_response,
    encode,
)
from rocketq.remoting.codec import FrameDecoder
from rocketq.remoting.limits import ServerLimits


async def start(**limits: Any) -> RemotingServer:
    server = RemotingServer(HOST, 0, echo, limits=ServerLimits(**limits))
    await server.start()
    return server


async def served(client: RemotingClient, server: RemotingServer) -> None:
    """A normal client's request is answered."""
    response = await client.invoke(server.address, create_request(RequestCode.HEART_BEAT, body=b"hi"), WAIT_S)
    assert response.code == 0 and response.body == b"hi"


def partial_frame(declared: int, sent: int) -> bytes:
    """The first ``sent`` bytes of a frame whose length field announces ``declared`` bytes."""
    return (struct.pack(">iI", declared, 0) + bytes(sent))[: max(sent, 8)]


def test_a_frame_left_incomplete_is_closed_after_the_cap_while_others_are_served() -> None:
    async def main() -> None:
        server = await start(partial_frame_timeout_s=0.3, idle_timeout_s=0.0)
        client = RemotingClient()
        try:
            reader, writer = await asyncio.open_connection(HOST, server.port)
            began = time.monotonic()
            writer.write(partial_frame(100_000, 1000))
            await writer.drain()
            await wait_until_async(lambda: server.guard.buffered > 0, timeout_s=WAIT_S)
            await served(client, server)  # while the slow one holds its partial frame

            async def trickle() -> None:  # progress on the frame does not reset its age
                while not writer.is_closing():
                    writer.write(b"\0" * 10)
                    await asyncio.sleep(0.02)

            trickling = asyncio.ensure_future(trickle())
            try:
                assert await closed_by_server(reader)
            finally:
                trickling.cancel()
            assert time.monotonic() - began >= 0.3
            assert server.guard.tripped == {"partial_frame_timeout_s": 1}
            await wait_until_async(lambda: server.guard.buffered == 0, timeout_s=WAIT_S)
            await served(client, server)
            writer.close()
        finally:
            await client.close()
            await server.close()

    run(main())


def test_the_buffered_bytes_cap_closes_the_connection_that_crosses_it() -> None:
    async def main() -> None:
        server = await start(max_buffered_bytes=64 * 1024, **QUIET)
        client = RemotingClient()
        try:
            first_reader, first = await asyncio.open_connection(HOST, server.port)
            body = bytes(40_000)
            frame = encode(create_request(RequestCode.HEART_BEAT, body=body))
            first.write(frame[:30_000])
            await first.drain()
            await wait_until_async(lambda: server.guard.buffered >= 30_000, timeout_s=WAIT_S)
            second_reader, second = await asyncio.open_connection(HOST, server.port)
            second.write(partial_frame(1_000_000, 40_000))
            await second.drain()
            assert await closed_by_server(second_reader)
            assert server.guard.tripped == {"max_buffered_bytes": 1}
            assert server.guard.buffered == 30_000  # the first one's bytes are still held
            # the first connection is unaffected: its frame completes and is answered
            first.write(frame[30_000:])
            await first.drain()
            header = await asyncio.wait_for(first_reader.readexactly(4), WAIT_S)
            (length,) = struct.unpack(">i", header)
            assert length > len(body)
            await served(client, server)
            assert server.guard.buffered == 0
            first.close()
            second.close()
        finally:
            await client.close()
            await server.close()

    run(main())


def test_idle_connections_are_closed_but_not_one_with_a_request_in_flight() -> None:
    async def main() -> None:
        release = asyncio.Event()

        async def held(conn: Connection, request: RemotingCommand) -> RemotingCommand:
            if request.code == RequestCode.PULL_MESSAGE:
                await release.wait()
            return create_response(request, 0)

        server = RemotingServer(HOST, 0, held, limits=ServerLimits(idle_timeout_s=0.3))
        await server.start()
        client = RemotingClient()
        try:
            pull = asyncio.ensure_future(
                client.invoke(server.address, create_request(RequestCode.PULL_MESSAGE), WAIT_S)
            )
            began = time.monotonic()
            reader, writer = await asyncio.open_connection(HOST, server.port)
            assert await closed_by_server(reader)
            assert time.monotonic() - began >= 0.3
            assert server.guard.tripped == {"idle_timeout_s": 1}
            # quiet for as long, but its pull is held: still open, and answered when released
            assert len(server.connections) == 1
            release.set()
            assert (await pull).code == 0
            writer.close()
        finally:
            await client.close()
            await server.close()

    run(main())


def test_connections_beyond_the_per_host_cap_are_closed_and_another_host_is_served() -> None:
    async def main() -> None:
        server = await start(max_connections_per_host=5, **QUIET)
        try:
            peers = [await asyncio.open_connection(HOST, server.port) for _ in range(20)]
            closed = await asyncio.gather(*(closed_by_server_quick(reader) for reader, _ in peers))
            assert sum(closed) == 15
            assert server.guard.connections_from(HOST) == 5
            assert server.guard.tripped == {"max_connections_per_host": 15}
            # another source address (127.0.0.2 is loopback too on Linux) is served
            reader, writer = await asyncio.open_connection(HOST, server.port, local_addr=("127.0.0.2", 0))
            writer.write(encode(create_request(RequestCode.HEART_BEAT, body=b"x")))
            header = await asyncio.wait_for(reader.readexactly(4), WAIT_S)
            assert struct.unpack(">i", header)[0] > 0
            assert server.guard.connections_from("127.0.0.2") == 1
            writer.close()
            # closing one of the admitted ones makes room for a new one from the same host
            for (_, w), was_closed in zip(peers, closed, strict=True):
                if not was_closed:
                    w.close()
                    break
            await wait_until_async(lambda: server.guard.connections_from(HOST) == 4, timeout_s=WAIT_S)
            client = RemotingClient()
            try:
                await served(client, server)
            finally:
                await client.close()
            for _, w in peers:
                w.close()
        finally:
            await server.close()

    run(main())


async def closed_by_server_quick(reader: asyncio.StreamReader) -> bool:
    """True when the server closes the connection within a second (the admitted ones stay
    open: their read times out)."""
    try:
        return await asyncio.wait_for(reader.read(1), 1.0) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_pipelined_unread_requests_pause_reading_at_the_in_flight_cap_and_lose_nothing() -> None:
    count = 10_000
    cap = 16

    async def main() -> None:
        release = asyncio.Event()

        async def held(conn: Connection, request: RemotingCommand) -> RemotingCommand:
            await release.wait()
            return create_response(request, 0)

        server = RemotingServer(HOST, 0, held, limits=ServerLimits(max_in_flight_requests=cap, **QUIET))
        await server.start()
        try:
            reader, writer = await asyncio.open_connection(HOST, server.port)
            frames = [
                encode(create_request(RequestCode.PULL_MESSAGE, body=bytes(1024))) for _ in range(count)
            ]
            frame_size = len(frames[0])
            writer.write(b"".join(frames))  # about 11 MB, none of it read back yet
            await wait_until_async(lambda: len(server.connections) == 1, timeout_s=WAIT_S)
            (conn,) = server.connections
            await wait_until_async(lambda: conn.reading_paused, timeout_s=WAIT_S)
            assert conn.running_requests == cap
            # what the server holds of the stream is bounded by one read, not by the 11 MB sent
            held_requests = len(conn._backlog)
            assert held_requests * frame_size + conn.buffered <= 512 * 1024
            assert writer.transport.get_write_buffer_size() > 4 * 1024 * 1024
            release.set()
            answered = 0
            decoded = bytearray()
            while answered < count:
                decoded += await asyncio.wait_for(reader.read(1 << 20), WAIT_S)
                while len(decoded) >= 4:
                    (length,) = struct.unpack_from(">i", decoded)
                    if len(decoded) < 4 + length:
                        break
                    del decoded[: 4 + length]
                    answered += 1
            assert answered == count
            writer.close()
        finally:
            await server.close()

    run(main())


def test_limit_keys_are_read_from_broker_conf_and_namesrv_conf() -> None:
    props = {
        "serverChannelMaxIdleTimeSeconds": "60",
        "serverBufferedFramesMaxBytes": "1048576",
        "serverPartialFrameTimeout": "5000",
        "serverMaxConnectionsPerHost": "10",
        "serverMaxInFlightRequests": "32",
        "serverReadMaxBytes": "65536",
    }
    expected = ServerLimits(
        idle_timeout_s=60.0,
        max_buffered_bytes=1 << 20,
        partial_frame_timeout_s=5.0,
        max_connections_per_host=10,
        max_in_flight_requests=32,
        read_max_bytes=65536,
    )
    assert broker_config_from_properties(props, broker_name="b", broker_ip1=HOST).server_limits() == expected
    assert NamesrvConfig.from_rocketmq_properties(props).server_limits() == expected
    assert NamesrvConfig().server_limits() == ServerLimits()
    with pytest.raises(ConfigError, match="server_max_in_flight_requests=0 is below 1"):
        NamesrvConfig(server_max_in_flight_requests=0)
    with pytest.raises(ConfigError, match="server_channel_max_idle_time_seconds=-1 is negative"):
        broker_config_from_properties({"serverChannelMaxIdleTimeSeconds": "-1"}, broker_name="b")
    with pytest.raises(ConfigError, match="server_read_max_bytes=-1 is negative"):
        NamesrvConfig.from_rocketmq_properties({"serverReadMaxBytes": "-1"})
    assert ServerLimits().read_max_bytes == 32 * 1024


def test_a_name_server_applies_its_configured_limits_and_updates_them_live() -> None:
    async def main() -> None:
        namesrv = NameServer(
            NamesrvConfig(bind_address=HOST, listen_port=0, server_channel_max_idle_time_seconds=1)
        )
        await namesrv.start()
        client = RemotingClient()
        try:
            began = time.monotonic()
            reader, writer = await asyncio.open_connection(HOST, namesrv.port)
            assert await closed_by_server(reader)  # idle for the configured second
            assert 1.0 <= time.monotonic() - began < WAIT_S
            writer.close()
            update = create_request(
                RequestCode.UPDATE_NAMESRV_CONFIG, body=b"serverMaxConnectionsPerHost=1\n"
            )
            assert (await client.invoke(namesrv.address, update, WAIT_S)).code == 0
            assert namesrv.config.server_max_connections_per_host == 1
            # the client's own connection is the one this host may have: another is refused
            reader, writer = await asyncio.open_connection(HOST, namesrv.port)
            assert await closed_by_server_quick(reader)
            writer.close()
        finally:
            await client.close()
            await namesrv.close()

    run(main())


def test_time_with_reading_paused_does_not_age_an_incomplete_frame() -> None:
    async def main() -> None:
        release = asyncio.Event()

        async def held(conn: Connection, request: RemotingCommand) -> RemotingCommand:
            await release.wait()
            return create_response(request, 0)

        limits = ServerLimits(max_in_flight_requests=1, partial_frame_timeout_s=0.2, idle_timeout_s=0.0)
        server = RemotingServer(HOST, 0, held, limits=limits)
        await server.start()
        try:
            reader, writer = await asyncio.open_connection(HOST, server.port)
            frames = [encode(create_request(RequestCode.PULL_MESSAGE, body=b"x")) for _ in range(3)]
            writer.write(frames[0] + frames[1] + frames[2][:10])  # at the cap, a frame incomplete
            await wait_until_async(lambda: len(server.connections) == 1, timeout_s=WAIT_S)
            (conn,) = server.connections
            await wait_until_async(lambda: conn.reading_paused and conn.buffered == 10, timeout_s=WAIT_S)
            since = conn.partial_since
            assert since is not None
            # sweeps go by well past the incomplete frame's timeout: paused, so not closed
            await wait_until_async(
                lambda: asyncio.get_running_loop().time() - since > 0.6 and server.guard.sweeps >= 10,
                timeout_s=WAIT_S,
            )
            assert not conn.closed and server.guard.tripped == {}
            release.set()
            writer.write(frames[2][10:])
            answered = 0
            decoder = FrameDecoder()
            while answered < 3:
                answered += len(decoder.feed(await asyncio.wait_for(reader.read(65536), WAIT_S)))
            writer.close()
        finally:
            await server.close()

    run(main())
