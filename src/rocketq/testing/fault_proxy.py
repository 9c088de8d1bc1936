"""A fault-injecting TCP proxy for tests: put it between a client and a server, then break things.

Theory of operation::

    client ──► listen_addr (127.0.0.1:0) ══ FaultProxy loop thread ══► upstream host:port
               one link per accepted connection: client socket ⇄ upstream socket

    per direction:  data_received ─► count bytes ─► [queue of (due time, chunk)] ─► peer.write
                                                     └ only when delay_ms > 0, paused, or behind

Faults (each takes effect on the proxy's loop before the method returns):

=====================  =========================================================================
``pause()``            stop reading from both sides of every link (new ones too) and stop
                       delivering queued chunks: connections stay open but silent; what the peers
                       send waits in their kernel buffers, nothing new is buffered here
``resume()``           undo ``pause()``: queued chunks go out in order, reading starts again
``cut()``              abort every link, both sockets, with SO_LINGER 0 (the peers get an RST)
``refuse(True)``       connections accepted from now on are reset at once; ``refuse(False)`` ends it
``delay_ms = N``       each chunk is held N ms before it is delivered, in both directions (order
                       kept; applies to chunks read after the change)
``block(up, True)``    a one-way partition: the bytes of one direction (``up``: client →
                       upstream, else upstream → client) are read and **discarded**, also those
                       still queued (delayed or paused) in that direction; the other direction
                       flows. Connections stay open, so neither peer notices anything but
                       silence, and new connections are accepted (their bytes are discarded too)
``block(up, False)``   heal that direction: every link that discarded bytes of it is **reset**
                       (RST to both peers), since a TCP stream with a hole cannot go on; the
                       peers reconnect. This is what a long partition does to a real TCP
                       connection (retransmissions time out, the connection dies); links that
                       lost nothing go on untouched
``loss_rate = p``      a lossy link: each chunk read (either direction) is, with probability
                       ``p``, not delivered and its link reset instead (TCP cannot lose a few
                       bytes without corrupting the stream; what a peer sees of a lossy path is
                       stalls and broken connections). Chunks are what one read returned (up to
                       64 KiB); ``seed`` makes the draws repeatable
=====================  =========================================================================

Why discard rather than hold for a partition: bytes held and delivered on heal are what TCP
does for a partition shorter than its retransmission timeout (``pause()`` models that); a
network partition proper loses what was sent across it, and the peers find out only by
silence and, later, by broken connections. Held bytes would deliver stale messages long after
the fact, which a real network does not.

Invariants: bytes leave a direction in the order they arrived; a link whose one side closes
delivers what it still holds to the other side, then closes it; reading from one side pauses
while the other side's write buffer is above its high-water mark (back-pressure), and while the
proxy is paused. Counters (``bytes_to_upstream``, ``bytes_to_client``) count what the proxy read
from each side, whether or not it was delivered yet; ``bytes_dropped`` what ``block`` discarded,
``loss_resets`` the links ``loss_rate`` reset. With no block and ``loss_rate`` 0 (the defaults)
nothing is ever discarded.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import random
import socket
import struct
import threading
from collections.abc import Callable
from types import TracebackType
from typing import TypeVar

from rocketq.errors import RocketqError
from rocketq.testing.loop_thread import run_loop

log = logging.getLogger(__name__)

T = TypeVar("T")

HOST = "127.0.0.1"
#: Bound on every wait for the proxy's loop (start, faults, stop).
CONTROL_TIMEOUT_S = 10.0
#: How long an upstream connection attempt may take before the client link is reset.
UPSTREAM_CONNECT_TIMEOUT_S = 10.0
_LINGER_ZERO = struct.pack("ii", 1, 0)


def _split_addr(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"address {addr!r} is not host:port")
    return host.strip("[]"), int(port)


def _reset(transport: asyncio.Transport | None) -> None:
    """Abort ``transport`` so that its peer sees an RST rather than a FIN."""
    if transport is None or transport.is_closing():
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_ZERO)
    transport.abort()


class _Direction:
    """Chunks on their way from one side of a link to the other."""

    def __init__(self, link: _Link, to_upstream: bool) -> None:
        self.link = link
        self.to_upstream = to_upstream
        self.queue: collections.deque[tuple[float, bytes]] = collections.deque()
        self.pump: asyncio.Task[None] | None = None
        #: The destination's write buffer is above its high-water mark.
        self.dest_full = False
        #: How the source ended: None (open), "eof" (half-closed: pass the EOF on once the
        #: queue is delivered) or "lost" (closed: close the destination once it is delivered).
        self.end: str | None = None
        self.finished = False
        #: Bytes of this direction were discarded by ``block``: the link is reset when it heals.
        self.holed = False

    @property
    def dest(self) -> asyncio.Transport | None:
        return self.link.upstream if self.to_upstream else self.link.client

    def feed(self, data: bytes) -> None:
        proxy = self.link.proxy
        if self.to_upstream:
            proxy.bytes_to_upstream += len(data)
        else:
            proxy.bytes_to_client += len(data)
        if proxy.blocking[self.to_upstream]:
            self.discard(len(data))
            return
        if proxy.loss_rate > 0 and proxy.rng.random() < proxy.loss_rate:
            proxy.loss_resets += 1
            self.link.reset()
            return
        dest = self.dest
        delay_s = proxy.delay_ms / 1000
        if not self.queue and delay_s <= 0 and not proxy.paused and dest is not None:
            dest.write(data)
            return
        self.queue.append((proxy.loop_time() + delay_s, data))
        self.wake()

    def wake(self) -> None:
        if self.pump is None or self.pump.done():
            self.pump = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        proxy = self.link.proxy
        loop = asyncio.get_running_loop()
        while self.queue:
            due, data = self.queue[0]
            wait_s = due - loop.time()
            if wait_s > 0:
                await asyncio.sleep(wait_s)
                continue
            if proxy.blocking[self.to_upstream]:
                self.discard(len(self.queue.popleft()[1]))
                continue
            if proxy.paused:
                await proxy.resumed.wait()
                continue
            dest = self.dest
            if dest is None or dest.is_closing():
                self.queue.clear()
                break
            self.queue.popleft()
            dest.write(data)
        if not self.queue and self.end is not None:
            self.finish()

    def discard(self, size: int) -> None:
        """Bytes of this direction are lost to a block: the stream has a hole from now on."""
        self.link.proxy.bytes_dropped += size
        self.holed = True

    def source_ended(self, how: str) -> None:
        self.end = how
        if self.queue:
            self.wake()
        else:
            self.finish()

    def finish(self) -> None:
        """The source ended and everything it sent is delivered: pass the end on."""
        dest = self.dest
        if self.finished or dest is None or dest.is_closing():
            return
        self.finished = True
        if self.end == "eof" and dest.can_write_eof():
            dest.write_eof()
            self.link.close_if_done()
        else:
            dest.close()

    def drop(self) -> None:
        self.queue.clear()
        if self.pump is not None:
            self.pump.cancel()


class _Link:
    """One proxied connection."""

    def __init__(self, proxy: FaultProxy) -> None:
        self.proxy = proxy
        self.client: asyncio.Transport | None = None
        self.upstream: asyncio.Transport | None = None
        self.up = _Direction(self, to_upstream=True)
        self.down = _Direction(self, to_upstream=False)
        self.reading = {"client": True, "upstream": True}
        self.closed = False

    def update_reading(self) -> None:
        """Read from a side only when the proxy runs and the other side keeps up."""
        running = not self.proxy.paused and not self.closed
        for name, transport, want in (
            ("client", self.client, running and self.upstream is not None and not self.up.dest_full),
            ("upstream", self.upstream, running and not self.down.dest_full),
        ):
            if transport is None or transport.is_closing() or self.reading[name] == want:
                continue
            self.reading[name] = want
            if want:
                transport.resume_reading()
            else:
                transport.pause_reading()

    def reset(self) -> None:
        self.closed = True
        self.up.drop()
        self.down.drop()
        _reset(self.client)
        _reset(self.upstream)
        self.proxy.links.discard(self)

    def close_if_done(self) -> None:
        """Both sides sent EOF and both EOFs were passed on: close the link."""
        if self.up.finished and self.down.finished:
            for transport in (self.client, self.upstream):
                if transport is not None:
                    transport.close()

    def side_lost(self, client_side: bool) -> None:
        # what the lost side sent is still delivered; what was on its way to it is dropped
        (self.up if client_side else self.down).source_ended("lost")
        (self.down if client_side else self.up).drop()
        if (self.client is None or self.client.is_closing()) and (
            self.upstream is None or self.upstream.is_closing()
        ):
            self.closed = True
            self.proxy.links.discard(self)


class _ClientSide(asyncio.Protocol):
    def __init__(self, proxy: FaultProxy) -> None:
        self.proxy = proxy
        self.link = _Link(proxy)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        proxy = self.proxy
        proxy.accepted += 1
        if proxy.refusing:
            proxy.refused += 1
            _reset(transport)
            return
        link = self.link
        link.client = transport
        link.reading["client"] = False
        transport.pause_reading()  # until the upstream side is connected
        proxy.links.add(link)
        proxy.track(asyncio.get_running_loop().create_task(self._connect_upstream()))

    async def _connect_upstream(self) -> None:
        link, proxy = self.link, self.proxy
        loop = asyncio.get_running_loop()
        try:
            transport, _ = await asyncio.wait_for(
                loop.create_connection(lambda: _UpstreamSide(link), proxy.upstream_host, proxy.upstream_port),
                UPSTREAM_CONNECT_TIMEOUT_S,
            )
        except (OSError, TimeoutError) as exc:
            log.info("fault proxy: upstream %s unreachable: %s", proxy.upstream, exc)
            link.reset()
            return
        if link.closed:
            _reset(transport)
            return
        link.upstream = transport
        link.update_reading()

    def data_received(self, data: bytes) -> None:
        self.link.up.feed(data)

    def eof_received(self) -> bool:
        self.link.up.source_ended("eof")
        return True  # half-closed: the answer may still come back

    def pause_writing(self) -> None:
        self.link.down.dest_full = True
        self.link.update_reading()

    def resume_writing(self) -> None:
        self.link.down.dest_full = False
        self.link.update_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.link.client is not None:
            self.link.side_lost(client_side=True)


class _UpstreamSide(asyncio.Protocol):
    def __init__(self, link: _Link) -> None:
        self.link = link

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.pause_reading()
        self.link.reading["upstream"] = False

    def data_received(self, data: bytes) -> None:
        self.link.down.feed(data)

    def eof_received(self) -> bool:
        self.link.down.source_ended("eof")
        return True

    def pause_writing(self) -> None:
        self.link.up.dest_full = True
        self.link.update_reading()

    def resume_writing(self) -> None:
        self.link.up.dest_full = False
        self.link.update_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.link.side_lost(client_side=False)


class FaultProxy:
    """A TCP proxy on 127.0.0.1 in front of ``upstream`` (``host:port``), on its own thread.

    >>> with FaultProxy(cluster.namesrv_addr) as proxy:     # doctest: +SKIP
    ...     client = Admin(proxy.listen_addr)
    ...     proxy.pause(); ...; proxy.resume()
    """

    def __init__(
        self,
        upstream: str,
        *,
        listen_port: int = 0,
        delay_ms: float = 0,
        loss_rate: float = 0,
        seed: int | None = None,
    ) -> None:
        self.upstream = upstream
        self.upstream_host, self.upstream_port = _split_addr(upstream)
        self.listen_port = listen_port
        self.delay_ms = delay_ms
        self.loss_rate = loss_rate
        #: The draws of ``loss_rate`` (used on the proxy's loop only).
        self.rng = random.Random(seed)
        #: Directions discarding their bytes, by ``to_upstream`` (see :meth:`block`).
        self.blocking = {True: False, False: False}
        #: Bytes discarded by ``block``; links reset by ``loss_rate``.
        self.bytes_dropped = 0
        self.loss_resets = 0
        #: Bytes read from clients / from the upstream since start.
        self.bytes_to_upstream = 0
        self.bytes_to_client = 0
        #: Connections accepted (refused ones included) / reset at once by ``refuse``.
        self.accepted = 0
        self.refused = 0
        self.paused = False
        self.refusing = False
        self.links: set[_Link] = set()
        self.resumed = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._lock = threading.Lock()

    # -- properties -----------------------------------------------------------------------------
    @property
    def delay_ms(self) -> float:
        """Added one-way delay per chunk, both directions (0 = none)."""
        return self._delay_ms

    @delay_ms.setter
    def delay_ms(self, value: float) -> None:
        if value < 0:
            raise ValueError(f"delay_ms={value} is negative")
        self._delay_ms = float(value)

    @property
    def loss_rate(self) -> float:
        """Probability, per chunk read, that the chunk is lost and its link reset (0 = never)."""
        return self._loss_rate

    @loss_rate.setter
    def loss_rate(self, value: float) -> None:
        if not 0 <= value <= 1:
            raise ValueError(f"loss_rate={value} is not a probability in [0, 1]")
        self._loss_rate = float(value)

    @property
    def listen_addr(self) -> str:
        """``127.0.0.1:PORT`` for clients to connect to."""
        if self._server is None:
            raise RocketqError("the fault proxy is not started")
        return f"{HOST}:{self.listen_port}"

    @property
    def connections(self) -> int:
        """Links open now."""
        return len(self.links)

    def loop_time(self) -> float:
        assert self._loop is not None
        return self._loop.time()

    def track(self, task: asyncio.Task[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> FaultProxy:
        with self._lock:
            if self._loop is not None:
                return self
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._thread = threading.Thread(
                target=run_loop, args=(loop,), name="rocketq-fault-proxy", daemon=True
            )
            self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._start(), loop).result(CONTROL_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Reset every link, stop listening, end the thread. Safe to call more than once."""
        with self._lock:
            loop, thread = self._loop, self._thread
            if loop is None:
                return
        try:
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._stop(), loop).result(CONTROL_TIMEOUT_S)
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(loop.stop)
            if thread is not None:
                thread.join(CONTROL_TIMEOUT_S)
        finally:
            with self._lock:
                self._loop = None
                self._thread = None
                self._server = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- faults ---------------------------------------------------------------------------------
    def pause(self) -> None:
        """Stop forwarding in both directions; connections stay open but silent."""
        self._call(self._pause)

    def resume(self) -> None:
        """Forward again (held chunks first, in order)."""
        self._call(self._resume)

    def cut(self) -> int:
        """Reset every open link (RST to both peers); returns how many were cut."""
        return self._call(self._cut)

    def refuse(self, on: bool = True) -> None:
        """Reset connections accepted from now on (``on``), or accept them again."""
        self._call(lambda: setattr(self, "refusing", on))

    def block(self, to_upstream: bool, on: bool = True) -> int:
        """Discard the bytes of one direction (``on``: a one-way partition), or heal it.

        ``to_upstream``: client → upstream, else upstream → client. Healing resets every link
        that lost bytes of that direction (returns how many); blocking returns 0."""
        return self._call(lambda: self._block(to_upstream, on))

    # -- loop side ------------------------------------------------------------------------------
    def _call(self, fn: Callable[[], T]) -> T:
        loop = self._loop
        if loop is None:
            raise RocketqError("the fault proxy is not started")

        async def run() -> T:
            return fn()

        try:
            return asyncio.run_coroutine_threadsafe(run(), loop).result(CONTROL_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            raise RocketqError(f"the fault proxy did not answer within {CONTROL_TIMEOUT_S:.0f} s") from None

    async def _start(self) -> None:
        self.resumed = asyncio.Event()
        self.resumed.set()
        server = await asyncio.get_running_loop().create_server(
            lambda: _ClientSide(self), HOST, self.listen_port
        )
        self.listen_port = int(server.sockets[0].getsockname()[1])
        self._server = server
        log.info("fault proxy %s:%d → %s", HOST, self.listen_port, self.upstream)

    async def _stop(self) -> None:
        server = self._server
        if server is not None:
            server.close()
        self._cut()
        if server is not None:
            await server.wait_closed()
        for task in list(self._tasks):
            task.cancel()

    def _pause(self) -> None:
        self.paused = True
        self.resumed.clear()
        for link in list(self.links):
            link.update_reading()

    def _resume(self) -> None:
        self.paused = False
        self.resumed.set()
        for link in list(self.links):
            link.update_reading()
            for direction in (link.up, link.down):
                if direction.queue:
                    direction.wake()

    def _block(self, to_upstream: bool, on: bool) -> int:
        self.blocking[to_upstream] = on
        if on:
            for link in self.links:  # what is still queued that way is lost as well
                direction = link.up if to_upstream else link.down
                if direction.queue:
                    direction.discard(sum(len(chunk) for _due, chunk in direction.queue))
                    direction.drop()
            return 0
        holed = [
            link for link in self.links if (link.up if to_upstream else link.down).holed and not link.closed
        ]
        for link in holed:
            link.reset()
        return len(holed)

    def _cut(self) -> int:
        links = list(self.links)
        for link in links:
            link.reset()
        return len(links)


__all__ = ["FaultProxy"]
