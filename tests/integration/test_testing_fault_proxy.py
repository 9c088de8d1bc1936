"""rocketq.testing.FaultProxy in front of a real in-process name server and broker: bytes pass
through; pause, cut, refuse and delay reach the project's remoting client and SDK as the
timeouts and connection errors they must handle."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from _support.wait import wait_until_async
from rocketq.client import Message, Producer, SendStatus
from rocketq.errors import ConnectionClosed, RemotingConnectError, RemotingTimeout, RocketqError
from rocketq.remoting.client import RemotingClient
from rocketq.remoting.codec import encode
from rocketq.remoting.codes import RequestCode
from rocketq.remoting.command import RemotingCommand, create_request
from rocketq.testing import FaultProxy, InProcessCluster

T = TypeVar("T")
WAIT_S = 30.0


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, 60))


def cluster_info() -> RemotingCommand:
    return create_request(RequestCode.GET_BROKER_CLUSTER_INFO)


@pytest.fixture(scope="module")
def cluster() -> Iterator[InProcessCluster]:
    with InProcessCluster() as started:
        yield started


@pytest.fixture
def proxy(cluster: InProcessCluster) -> Iterator[FaultProxy]:
    with FaultProxy(cluster.namesrv_addr) as started:
        yield started


def test_requests_and_answers_pass_through_unchanged(cluster: InProcessCluster, proxy: FaultProxy) -> None:
    async def main() -> None:
        client = RemotingClient()
        try:
            direct = await client.invoke(cluster.namesrv_addr, cluster_info(), 10)
            request = cluster_info()
            via_proxy = await client.invoke(proxy.listen_addr, request, 10)
            assert via_proxy.code == direct.code == 0
            assert via_proxy.body == direct.body and b"broker-a" in via_proxy.body
            assert proxy.bytes_to_upstream == len(encode(request))
            assert proxy.bytes_to_client == len(encode(via_proxy))
            assert proxy.accepted == 1 and proxy.connections == 1
        finally:
            await client.close()

    run(main())


def test_bulk_bytes_keep_their_order_under_delay_and_back_pressure() -> None:
    """8 MiB each way through an echo server, 1 ms delay per chunk: nothing lost or reordered."""
    payload = os.urandom(1 << 20) * 8

    async def main() -> None:
        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while chunk := await reader.read(1 << 16):
                writer.write(chunk)
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            with FaultProxy(f"127.0.0.1:{port}", delay_ms=1) as proxy:
                host, proxy_port = proxy.listen_addr.split(":")
                reader, writer = await asyncio.open_connection(host, int(proxy_port))

                async def send() -> None:
                    for i in range(0, len(payload), 1 << 18):
                        writer.write(payload[i : i + (1 << 18)])
                        await writer.drain()
                    writer.write_eof()

                sender = asyncio.create_task(send())
                received = await reader.read(-1)  # until the proxy closes after the echo's EOF
                await sender
                writer.close()
                assert len(received) == len(payload)
                assert received == payload
                assert proxy.bytes_to_upstream == proxy.bytes_to_client == len(payload)
        finally:
            server.close()
            await server.wait_closed()

    run(main())


def test_pause_silences_calls_until_resume(proxy: FaultProxy) -> None:
    async def main() -> None:
        client = RemotingClient()
        try:
            assert (await client.invoke(proxy.listen_addr, cluster_info(), 10)).code == 0
            proxy.pause()
            with pytest.raises(RemotingTimeout):
                await client.invoke(proxy.listen_addr, cluster_info(), 0.3)
            assert proxy.connections == 1  # open, just silent
            proxy.resume()
            assert (await client.invoke(proxy.listen_addr, cluster_info(), 10)).code == 0
            assert proxy.accepted == 1  # the same connection served again
        finally:
            await client.close()

    run(main())


def test_a_new_connection_stays_silent_while_paused(proxy: FaultProxy) -> None:
    async def main() -> None:
        client = RemotingClient()
        try:
            proxy.pause()
            with pytest.raises(RemotingTimeout):
                await client.invoke(proxy.listen_addr, cluster_info(), 0.3)
            assert proxy.bytes_to_client == 0
            proxy.resume()
            assert (await client.invoke(proxy.listen_addr, cluster_info(), 10)).code == 0
        finally:
            await client.close()

    run(main())


def test_cut_fails_the_call_in_flight_and_the_client_reconnects(proxy: FaultProxy) -> None:
    async def main() -> None:
        client = RemotingClient()
        try:
            proxy.delay_ms = 60_000  # the request is held in the proxy: in flight, unanswered
            request = cluster_info()
            call = asyncio.create_task(client.invoke(proxy.listen_addr, request, 30))
            await wait_until_async(
                lambda: proxy.bytes_to_upstream >= len(encode(request)), "the request", WAIT_S
            )
            assert not call.done()
            assert proxy.cut() == 1
            with pytest.raises(ConnectionClosed):
                await call
            assert proxy.connections == 0
            proxy.delay_ms = 0
            assert (await client.invoke(proxy.listen_addr, cluster_info(), 10)).code == 0
            assert proxy.accepted == 2  # a new connection
        finally:
            await client.close()

    run(main())


def test_cut_resets_rather_than_closes(proxy: FaultProxy) -> None:
    async def main() -> None:
        host, port = proxy.listen_addr.split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            await wait_until_async(lambda: proxy.connections == 1, "the proxy to accept", WAIT_S)
            assert proxy.cut() == 1
            with pytest.raises(ConnectionResetError):  # an orderly close would read b"" instead
                await reader.read(1)
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    run(main())


def test_refuse_resets_new_connections_until_turned_off(proxy: FaultProxy) -> None:
    async def main() -> None:
        client = RemotingClient()
        try:
            proxy.refuse(True)
            with pytest.raises((ConnectionClosed, RemotingConnectError)):
                await client.invoke(proxy.listen_addr, cluster_info(), 10)
            assert proxy.refused >= 1 and proxy.connections == 0
            proxy.refuse(False)
            assert (await client.invoke(proxy.listen_addr, cluster_info(), 10)).code == 0
        finally:
            await client.close()

    run(main())


def test_delay_holds_each_direction_at_least_the_configured_time(proxy: FaultProxy) -> None:
    async def main() -> float:
        client = RemotingClient()
        try:
            await client.invoke(proxy.listen_addr, cluster_info(), 10)  # connect first
            proxy.delay_ms = 150
            began = time.monotonic()
            assert (await client.invoke(proxy.listen_addr, cluster_info(), 10)).code == 0
            return time.monotonic() - began
        finally:
            await client.close()

    assert run(main()) >= 2 * 0.150  # request and answer are each held 150 ms (lower bound only)
    with pytest.raises(ValueError, match="negative"):
        proxy.delay_ms = -1


def test_producer_routes_through_a_paused_name_server_proxy_only_after_resume(
    cluster: InProcessCluster, proxy: FaultProxy
) -> None:
    cluster.create_topic("ViaProxy", queues=2)
    proxy.pause()
    with Producer("PG", namesrv_addr=proxy.listen_addr, send_timeout_ms=800) as producer:
        with pytest.raises(RocketqError):  # no route: the name server does not answer
            producer.send(Message("ViaProxy", b"lost"))
        proxy.resume()
        assert producer.send(Message("ViaProxy", b"kept")).status is SendStatus.SEND_OK
    assert proxy.bytes_to_client > 0


def test_stop_is_idempotent_and_ends_the_thread(cluster: InProcessCluster) -> None:
    before = set(threading.enumerate())
    proxy = FaultProxy(cluster.namesrv_addr)
    with pytest.raises(RocketqError, match="not started"):
        _ = proxy.listen_addr
    proxy.start()
    addr = proxy.listen_addr
    proxy.stop()
    proxy.stop()
    assert not [t for t in threading.enumerate() if t not in before and t.is_alive()]

    async def connect_refused() -> None:
        host, port = addr.split(":")
        with pytest.raises(OSError):
            await asyncio.open_connection(host, int(port))

    run(connect_refused())
    with pytest.raises(ValueError, match="not host:port"):
        FaultProxy("nohost")


class _Upstream:
    """A raw TCP server for the block / loss tests: what each connection received, and its writer."""

    def __init__(self) -> None:
        self.received: list[bytearray] = []
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            got = bytearray()
            self.received.append(got)
            self.writers.append(writer)
            with contextlib.suppress(OSError):
                while chunk := await reader.read(1 << 16):
                    got += chunk
            writer.close()

        self.server = await asyncio.start_server(serve, "127.0.0.1", 0)
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    def got(self, k: int) -> bytes:
        return bytes(self.received[k]) if len(self.received) > k else b""

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            for writer in self.writers:
                writer.close()


async def _connect(proxy: FaultProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = proxy.listen_addr.split(":")
    return await asyncio.open_connection(host, int(port))


def test_block_discards_one_direction_while_the_other_flows_and_heal_resets_the_holed_link() -> None:
    async def main() -> None:
        upstream = _Upstream()
        addr = await upstream.start()
        try:
            with FaultProxy(addr) as proxy:
                reader, writer = await _connect(proxy)
                writer.write(b"before")
                await wait_until_async(lambda: upstream.got(0) == b"before", "the first bytes", WAIT_S)
                assert proxy.block(to_upstream=True) == 0
                writer.write(b"lost!")
                await wait_until_async(lambda: proxy.bytes_dropped == 5, "the bytes discarded", WAIT_S)
                upstream.writers[0].write(b"answer")  # the other direction still flows
                assert await asyncio.wait_for(reader.readexactly(6), WAIT_S) == b"answer"
                assert bytes(upstream.received[0]) == b"before" and proxy.connections == 1
                assert proxy.block(to_upstream=True, on=False) == 1  # the stream has a hole: reset
                with pytest.raises((ConnectionResetError, asyncio.IncompleteReadError)):
                    await asyncio.wait_for(reader.readexactly(1), WAIT_S)
                writer.close()
                _reader2, writer2 = await _connect(proxy)  # a new connection passes everything
                writer2.write(b"after")
                await wait_until_async(
                    lambda: upstream.got(1) == b"after",
                    "the bytes of the new connection",
                    WAIT_S,
                )
                writer2.close()
        finally:
            await upstream.close()

    run(main())


def test_heal_leaves_links_that_lost_nothing_and_block_drops_what_is_still_queued() -> None:
    async def main() -> None:
        upstream = _Upstream()
        addr = await upstream.start()
        try:
            with FaultProxy(addr) as proxy:
                _reader, writer = await _connect(proxy)
                writer.write(b"x")
                await wait_until_async(lambda: upstream.got(0) == b"x", "the first byte", WAIT_S)
                proxy.block(to_upstream=False)
                assert proxy.block(to_upstream=False, on=False) == 0  # nothing was lost: no reset
                proxy.delay_ms = 60_000
                upstream.writers[0].write(b"queued")  # held in the proxy by the delay
                await wait_until_async(lambda: proxy.bytes_to_client == 6, "the answer read", WAIT_S)
                proxy.block(to_upstream=False)
                proxy.delay_ms = 0
                await wait_until_async(lambda: proxy.bytes_dropped == 6, "the queued bytes dropped", WAIT_S)
                assert proxy.block(to_upstream=False, on=False) == 1
                writer.close()
        finally:
            await upstream.close()

    run(main())


def test_block_to_the_client_makes_calls_time_out_and_heal_lets_the_client_reconnect(
    proxy: FaultProxy,
) -> None:
    async def main() -> None:
        client = RemotingClient()
        try:
            assert (await client.invoke(proxy.listen_addr, cluster_info(), 10)).code == 0
            proxy.block(to_upstream=False)
            before = proxy.bytes_to_upstream
            with pytest.raises(RemotingTimeout):
                await client.invoke(proxy.listen_addr, cluster_info(), 0.5)
            assert proxy.bytes_to_upstream > before and proxy.bytes_dropped > 0  # answered, then lost
            assert proxy.block(to_upstream=False, on=False) == 1
            assert proxy.connections == 0

            async def answered() -> bool:  # the client may try the reset connection once more
                try:
                    return (await client.invoke(proxy.listen_addr, cluster_info(), 10)).code == 0
                except ConnectionClosed:
                    return False

            await wait_until_async(answered, "an answer on a new connection", WAIT_S)
            assert proxy.accepted == 2
        finally:
            await client.close()

    run(main())


def test_loss_rate_resets_links_and_zero_restores_the_link(cluster: InProcessCluster) -> None:
    with pytest.raises(ValueError, match="probability"):
        FaultProxy(cluster.namesrv_addr, loss_rate=1.5)

    async def main() -> None:
        with FaultProxy(cluster.namesrv_addr, loss_rate=1.0, seed=7) as proxy:
            client = RemotingClient()
            try:
                with pytest.raises((ConnectionClosed, RemotingTimeout)):
                    await client.invoke(proxy.listen_addr, cluster_info(), 5)
                assert proxy.loss_resets >= 1 and proxy.bytes_to_client == 0
                proxy.loss_rate = 0
                assert (await client.invoke(proxy.listen_addr, cluster_info(), 10)).code == 0
            finally:
                await client.close()

    run(main())


def test_loss_draws_repeat_with_the_same_seed() -> None:
    a, b = FaultProxy("127.0.0.1:1", loss_rate=0.5, seed=3), FaultProxy("127.0.0.1:1", loss_rate=0.5, seed=3)
    assert [a.rng.random() for _ in range(20)] == [b.rng.random() for _ in range(20)]
