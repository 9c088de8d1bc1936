"""Raw loopback peers of the remoting tests: a bounded ``asyncio.run`` and a bare socket client
that sends exactly the bytes a test wants and reads what comes back."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from rocketq.remoting import Connection, FrameDecoder, RemotingCommand, RemotingServer, create_response

T = TypeVar("T")
WAIT_S = 10.0  # upper bound for anything that should happen promptly
HOST = "127.0.0.1"
#: Server limits that stay out of the way of a test about another one (``ServerLimits(**QUIET)``).
QUIET = {"idle_timeout_s": 0.0, "partial_frame_timeout_s": 0.0}


async def echo(conn: Connection, request: RemotingCommand) -> RemotingCommand:
    """A server handler that answers every request with its own body."""
    return create_response(request, 0, body=request.body)


def run(coro: Coroutine[Any, Any, T]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, 60)

    return asyncio.run(bounded())


async def closed_by_server(reader: asyncio.StreamReader) -> bool:
    """Read until the server closes the connection (EOF or reset); False on a timeout."""
    try:
        while await asyncio.wait_for(reader.read(65536), WAIT_S):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        return False
    return True


class RawPeer:
    """A bare socket client, to send exactly the bytes a test wants and read what comes back."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder()
        self.received: list[RemotingCommand] = []

    @classmethod
    async def connect(cls, server: RemotingServer) -> RawPeer:
        reader, writer = await asyncio.open_connection(HOST, server.port)
        return cls(reader, writer)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def next_command(self) -> RemotingCommand:
        while not self.received:
            data = await asyncio.wait_for(self.reader.read(65536), WAIT_S)
            if not data:
                raise ConnectionError("EOF")
            self.received += self.decoder.feed(data)
        return self.received.pop(0)

    async def wait_closed_by_peer(self) -> None:
        if not await closed_by_server(self.reader):
            raise TimeoutError(f"the peer did not close the connection within {WAIT_S}s")

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except ConnectionError:
            pass
