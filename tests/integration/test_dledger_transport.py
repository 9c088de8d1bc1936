"""The Raft peer transport (rocketq.ha.peer_transport) on real sockets: a peer that is down, then up."""

from __future__ import annotations

import asyncio
import time

from _support.procs import free_port
from _support.wait import wait_until_async
from rocketq.ha.peer_transport import PeerTransport
from rocketq.ha.raft_types import Append, Entry, Heartbeat, Message


def test_a_peer_that_is_down_costs_no_wait_and_is_reached_once_it_is_up() -> None:
    async def main() -> None:
        a_addr, b_addr = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        got: list[Message] = []
        a = PeerTransport("a", a_addr, {"b": b_addr}, lambda m, raw: None)
        b = PeerTransport("b", b_addr, {"a": a_addr}, lambda m, raw: got.append(m))
        await a.start()
        try:
            t0 = time.perf_counter()
            for k in range(1000):  # b is not listening: every send is dropped at once
                assert not a.send(Heartbeat("a", "b", 1, k))
            assert time.perf_counter() - t0 < 1.0
            assert a.control["b"].dropped == 1000 and not got
            await b.start()  # now reachable: the link reconnects on its backoff

            def through() -> bool:
                a.send(Heartbeat("a", "b", 1, 7))
                a.send(Append("a", "b", 1, -1, 0, (Entry(0, 1, b"x" * 100),), -1))
                return any(isinstance(m, Heartbeat) for m in got) and any(isinstance(m, Append) for m in got)

            await wait_until_async(through, "messages through after the peer came up", 10, 0.02)
            assert a.control["b"].connected and a.bulk["b"].connected
            assert next(m for m in got if isinstance(m, Append)).entries[0].data == b"x" * 100
        finally:
            await a.close()
            await b.close()

    asyncio.run(asyncio.wait_for(main(), 30))
