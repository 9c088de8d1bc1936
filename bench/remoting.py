"""Remoting round trips per second over loopback (request and response with a 128 B body).

    python bench/remoting.py                # server in a child process, about 20 s
    python bench/remoting.py --seconds 5    # longer runs per scenario
    python bench/remoting.py --inproc       # server and clients on one event loop

Scenarios: one connection with many calls in flight (pipelined: the server's bulk parsing and
task-per-request dispatch), 16 connections with one call in flight each, and one connection with
one call in flight (pure latency). The server answers with an echo of the body. The client side
is rocketq's RemotingClient, so the figures are bounded by the slower of the two processes.

The last row is a floor measured in the same run: a bare ``asyncio.Protocol`` that echoes bytes,
one frame in flight, no codec. The machine is shared and noisy (spec/perf-facts.md): compare the
rows with that floor, and with other runs only as ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from rocketq.remoting import Connection, RemotingClient, RemotingCommand, RemotingServer, RequestCode, encode

BODY = b"x" * 128


async def echo(conn: Connection, request: RemotingCommand) -> RemotingCommand:
    return RemotingCommand.create_response(request, 0, body=request.body)


class RawEcho(asyncio.Protocol):
    """The floor: echo whatever arrives, no parsing."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)


class RawCaller(asyncio.Protocol):
    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.received = 0
        self.waiter: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.received += len(data)
        if self.received >= self.expected and self.waiter is not None and not self.waiter.done():
            self.received -= self.expected
            self.waiter.set_result(None)


async def serve(port_queue: Any, stop: Any) -> None:
    loop = asyncio.get_running_loop()
    server = RemotingServer("127.0.0.1", 0, echo)
    await server.start()
    raw = await loop.create_server(RawEcho, "127.0.0.1", 0)
    port_queue.put((server.port, raw.sockets[0].getsockname()[1]))
    await loop.run_in_executor(None, stop.wait)
    raw.close()
    await server.close()


def serve_process(port_queue: Any, stop: Any) -> None:
    asyncio.run(serve(port_queue, stop))


@dataclass
class Result:
    name: str
    connections: int
    in_flight: int
    calls: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.calls / self.seconds


async def run_scenario(addr: str, name: str, connections: int, in_flight: int, seconds: float) -> Result:
    clients = [RemotingClient() for _ in range(connections)]
    for client in clients:
        await client.connection(addr)
    count = 0
    stop_at = 0.0

    async def worker(client: RemotingClient) -> None:
        nonlocal count
        loop = asyncio.get_running_loop()
        n = 0
        while loop.time() < stop_at:
            request = RemotingCommand.create_request(RequestCode.SEND_MESSAGE, {"topic": "T"}, BODY)
            await client.invoke(addr, request, 10.0)
            n += 1
        count += n

    # Warm-up, then the measured run.
    for measured in (False, True):
        count = 0
        loop = asyncio.get_running_loop()
        duration = seconds if measured else min(0.5, seconds)
        start = loop.time()
        stop_at = start + duration
        await asyncio.gather(*(worker(c) for c in clients for _ in range(in_flight)))
        elapsed = loop.time() - start
    for client in clients:
        await client.close()
    return Result(name, connections, in_flight, count, elapsed)


async def run_floor(port: int, seconds: float) -> Result:
    loop = asyncio.get_running_loop()
    frame = RemotingCommand.create_request(RequestCode.SEND_MESSAGE, {"topic": "T"}, BODY)
    data = encode(frame)
    transport, caller = await loop.create_connection(lambda: RawCaller(len(data)), "127.0.0.1", port)
    count = 0
    start = loop.time()
    stop_at = start + seconds
    while loop.time() < stop_at:
        caller.waiter = loop.create_future()
        transport.write(data)
        await caller.waiter
        count += 1
    elapsed = loop.time() - start
    transport.close()
    return Result("floor: bare asyncio.Protocol echo", 1, 1, count, elapsed)


async def run_all(addr: str, seconds: float, raw_port: int | None) -> list[Result]:
    results = [
        await run_scenario(addr, "pipelined", 1, 256, seconds),
        await run_scenario(addr, "16 connections", 16, 1, seconds),
        await run_scenario(addr, "1 connection, 1 in flight", 1, 1, seconds),
    ]
    if raw_port is not None:
        results.append(await run_floor(raw_port, seconds))
    return results


async def run_inproc(seconds: float) -> list[Result]:
    server = RemotingServer("127.0.0.1", 0, echo)
    await server.start()
    try:
        return await run_all(server.address, seconds, None)
    finally:
        await server.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=3.0, help="measured time per scenario")
    parser.add_argument("--inproc", action="store_true", help="server and clients on one event loop")
    args = parser.parse_args()

    started = time.perf_counter()
    if args.inproc:
        results = asyncio.run(run_inproc(args.seconds))
        where = "server and clients on one event loop"
    else:
        ctx = multiprocessing.get_context("spawn")
        port_queue = ctx.Queue()
        stop = ctx.Event()
        proc = ctx.Process(target=serve_process, args=(port_queue, stop), daemon=True)
        proc.start()
        try:
            port, raw_port = port_queue.get(timeout=30)
            results = asyncio.run(run_all(f"127.0.0.1:{port}", args.seconds, raw_port))
        finally:
            stop.set()
            proc.join(timeout=10)
        where = "server in a child process, clients in this one"

    print(f"Remoting round trips over loopback, 128 B body, {where} (Python {sys.version.split()[0]})")
    print()
    print("| scenario | connections | in flight per connection | round trips/s | µs per round trip |")
    print("|---|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r.name} | {r.connections} | {r.in_flight} | {r.rate:,.0f} | {1e6 / r.rate:.1f} |")
    print()
    print(f"total run time {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
