"""A serving connection's read size (``ServerLimits.read_max_bytes``, rocketq.remoting.connection
"Read size") over real loopback sockets: a burst of requests is taken in reads of at most that
size, a frame larger than it is read in larger steps while incomplete, and the read size returns
once it is complete; every request is answered, in order, whatever the read size."""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncIterator
from typing import Any

from _support.remoting import HOST, QUIET, WAIT_S, echo, run
from _support.wait import wait_until_async
from rocketq.remoting import (
    Connection,
    RemotingCommand,
    RemotingServer,
    RequestCode,
    create_request,
    encode,
)
from rocketq.remoting.codec import FrameDecoder
from rocketq.remoting.connection import READ_GROWN_MAX_BYTES
from rocketq.remoting.limits import DEFAULT_READ_MAX_BYTES, ServerLimits


class Reads:
    """Counts the reads whose requests went to the handlers (the server's ``after_read``)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


async def start(reads: Reads, **limits: Any) -> RemotingServer:
    server = RemotingServer(HOST, 0, echo, limits=ServerLimits(**QUIET, **limits), after_read=reads)
    await server.start()
    return server


def requests(count: int, body_size: int) -> tuple[bytes, list[int]]:
    frames = []
    opaques = []
    for _ in range(count):
        request = create_request(RequestCode.HEART_BEAT, body=bytes(body_size))
        opaques.append(request.opaque)
        frames.append(encode(request))
    return b"".join(frames), opaques


async def answers(reader: asyncio.StreamReader, count: int) -> list[RemotingCommand]:
    decoder = FrameDecoder()
    out: list[RemotingCommand] = []
    while len(out) < count:
        chunk = await asyncio.wait_for(reader.read(1 << 20), WAIT_S)
        assert chunk, "the server closed the connection"
        out += decoder.feed(chunk)
    return out


def served_transport(server: RemotingServer) -> Any:
    (conn,) = server.connections
    return conn._transport


@contextlib.asynccontextmanager
async def connected(
    **limits: Any,
) -> AsyncIterator[tuple[RemotingServer, Reads, asyncio.StreamReader, asyncio.StreamWriter, Connection]]:
    """A server with ``limits``, one client connection to it and the server's side of it."""
    reads = Reads()
    server = await start(reads, **limits)
    try:
        reader, writer = await asyncio.open_connection(HOST, server.port)
        await wait_until_async(lambda: len(server.connections) == 1, timeout_s=WAIT_S)
        (conn,) = server.connections
        yield server, reads, reader, writer, conn
        writer.close()
    finally:
        await server.close()


def test_a_burst_is_read_in_parts_of_the_read_size_and_every_request_is_answered_in_order() -> None:
    async def main() -> None:
        for read_max, fewest_reads in ((DEFAULT_READ_MAX_BYTES, 6), (0, 1)):
            async with connected(read_max_bytes=read_max) as (server, reads, reader, writer, _):
                # 400 requests of about 500 B: about 200 KiB written at once
                burst, opaques = requests(400, 450)
                assert len(burst) > 6 * DEFAULT_READ_MAX_BYTES
                writer.write(burst)
                got = await answers(reader, len(opaques))
                assert [a.opaque for a in got] == opaques
                assert all(a.code == 0 and len(a.body) == 450 for a in got)
                if read_max:
                    assert served_transport(server).max_size == read_max
                    # no read took more than the read size: at least 200 KiB / 32 KiB reads
                    assert reads.count >= fewest_reads
                else:  # the event loop's own read size: untouched
                    assert served_transport(server).max_size == 256 * 1024

    run(main())


def test_a_frame_larger_than_the_read_size_is_read_in_larger_steps_then_the_size_returns() -> None:
    async def main() -> None:
        async with connected() as (server, _, reader, writer, conn):
            transport = served_transport(server)
            assert transport.max_size == DEFAULT_READ_MAX_BYTES
            big = create_request(RequestCode.HEART_BEAT, body=bytes(range(256)) * 4096)  # 1 MiB
            frame = encode(big)
            half = len(frame) // 2
            writer.write(frame[:half])
            await writer.drain()
            # the first read leaves the frame incomplete: the next reads take up to 256 KiB
            await wait_until_async(lambda: conn._decoder.buffered > 0, timeout_s=WAIT_S)
            assert transport.max_size == READ_GROWN_MAX_BYTES
            # what stays to read decides once it is below 256 KiB (bytes held in the socket
            # buffers count as still missing until read)
            await wait_until_async(lambda: conn._decoder.buffered >= half, timeout_s=WAIT_S)
            missing = len(frame) - conn._decoder.buffered
            assert transport.max_size == min(max(missing, DEFAULT_READ_MAX_BYTES), READ_GROWN_MAX_BYTES)
            writer.write(frame[half:])
            small, opaques = requests(3, 10)
            writer.write(small)
            got = await answers(reader, 4)
            assert [a.opaque for a in got] == [big.opaque, *opaques]
            assert got[0].body == big.body
            assert transport.max_size == DEFAULT_READ_MAX_BYTES  # back once nothing is incomplete
            assert not conn._read_grown

    run(main())


def test_the_read_size_grows_only_to_what_the_frame_misses() -> None:
    async def main() -> None:
        async with connected() as (server, _, reader, writer, conn):
            # a frame of 40 KiB sent but for its last 100 bytes: it misses less than the read size
            request = create_request(RequestCode.HEART_BEAT, body=bytes(40 * 1024))
            frame = encode(request)
            writer.write(frame[:-100])
            await wait_until_async(lambda: conn._decoder.buffered == len(frame) - 100, timeout_s=WAIT_S)
            assert conn._decoder.missing == 100
            assert served_transport(server).max_size == DEFAULT_READ_MAX_BYTES
            writer.write(frame[-100:])
            (got,) = await answers(reader, 1)
            assert got.opaque == request.opaque

    run(main())


def test_a_transport_without_a_read_size_of_its_own_is_left_alone() -> None:
    """A TLS or uvloop transport has no ``max_size``: the connection sets none and never
    resizes its reads."""

    class Transport(asyncio.Transport):
        def __init__(self) -> None:
            super().__init__()
            self.limits: tuple[int, int] | None = None

        def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
            self.limits = (high or 0, low or 0)

        def get_extra_info(self, name: str, default: Any = None) -> Any:
            return ("127.0.0.1", 1) if name in ("peername", "sockname") else default

    async def main() -> None:
        conn = Connection(echo, serving=True, read_max_bytes=DEFAULT_READ_MAX_BYTES)
        transport = Transport()
        conn.connection_made(transport)
        assert conn._read_max == 0
        assert not hasattr(transport, "max_size")
        header = struct.pack(">iI", 1000, 0)
        conn.data_received(header)  # a frame begun: nothing resized
        assert not hasattr(transport, "max_size")

    run(main())
