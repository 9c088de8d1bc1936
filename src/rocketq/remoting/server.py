"""The listening end of the remoting protocol: RemotingServer accepts connections on
``host:port`` and runs one request handler for every request on any of them.

Each accepted socket becomes a serving :class:`~rocketq.remoting.connection.Connection` (a full
write buffer pauses reading from that peer; see that module for framing, dispatch and
back-pressure). The server keeps the set of open connections so that ``close()`` can stop
accepting, cancel the handlers still running, flush and close every connection, and abort the
ones whose peer does not take the queued bytes within the close timeout. A port of 0 binds a
free port; the bound port is kept, so a restart after close() listens on the same one.

Resource limits (idle connections, buffered incomplete frames, connections per host, requests in
flight per connection) are :class:`~rocketq.remoting.limits.ServerLimits`, applied by one
:class:`~rocketq.remoting.limits.LimitGuard` per server: it admits each accepted connection,
is told by each connection how many incomplete-frame bytes it holds, and sweeps idle and
stalled connections (``limits=None``: the defaults).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import Final

from rocketq.remoting.codes import DEFAULT_MAX_FRAME_SIZE
from rocketq.remoting.connection import (
    DEFAULT_CLOSE_TIMEOUT_S,
    Connection,
    DeferringHandler,
    LoneHandler,
    RequestHandler,
    close_connections,
    format_address,
)
from rocketq.remoting.limits import LimitGuard, ServerLimits
from rocketq.remoting.tls import HANDSHAKE_TIMEOUT_S, PermissiveServer, create_permissive_server

log = logging.getLogger(__name__)

DEFAULT_BACKLOG: Final = 1024

#: Listen addresses that mean "every interface".
WILDCARD_ADDRESSES: Final = frozenset(("", "0.0.0.0", "::", "*"))


def is_wildcard_address(host: str) -> bool:
    """True when listening on ``host`` accepts connections on every interface."""
    return host.strip() in WILDCARD_ADDRESSES


def is_loopback_address(host: str) -> bool:
    """True for ``localhost`` and addresses in 127.0.0.0/8 or ``::1``."""
    host = host.strip().strip("[]")
    return host == "localhost" or host.startswith("127.") or host == "::1"


def exposure_warning(what: str, host: str, port: int, acl_enable: bool) -> str | None:
    """The start-up warning for a server that listens on every interface without ACL, or None."""
    if acl_enable or not is_wildcard_address(host):
        return None
    return (
        f"the {what} listens on all interfaces ({format_address((host or '0.0.0.0', port))}) "
        "without ACL: anyone who reaches this port can use it; set bindAddress (--bind) to "
        "127.0.0.1 or one interface's address, or turn on aclEnable (docs/security.md)"
    )


class RemotingServer:
    """Accepts remoting connections on ``host:port`` and runs ``handler`` for every request.

    ``await server.start()`` (or ``async with server``) binds; port 0 picks a free port, read it
    back from :attr:`port`. ``on_connection(conn)`` runs for every accepted connection.
    ``immediate(conn, request)`` (optional) is asked first for every request and answers the
    ones it can without awaiting (see :mod:`rocketq.remoting.connection`). ``ssl`` (optional)
    serves TLS, only TLS unless ``tls_permissive`` (then TLS or plaintext, by the first byte a
    client sends; :mod:`rocketq.remoting.tls`). ``limits`` are the per-connection and per-server
    resource limits; ``max_pending_requests``, when given, overrides their
    ``max_in_flight_requests``."""

    def __init__(
        self,
        host: str,
        port: int,
        handler: RequestHandler,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        max_pending_requests: int | None = None,
        on_connection: Callable[[Connection], None] | None = None,
        backlog: int = DEFAULT_BACKLOG,
        immediate: DeferringHandler | None = None,
        ssl: ssl.SSLContext | None = None,
        tls_permissive: bool = False,
        limits: ServerLimits | None = None,
        after_read: Callable[[], None] | None = None,
    ) -> None:
        self.host = host
        #: each connection calls it at the end of a read whose requests it handled
        self._after_read = after_read
        self._ssl = ssl
        self._tls_permissive = tls_permissive and ssl is not None
        self._immediate = immediate
        #: Asked first with a read's bytes (see :data:`~rocketq.remoting.connection.LoneHandler`);
        #: connections accepted from then on use it.
        self.lone: LoneHandler | None = None
        self._port = port
        self._handler = handler
        self._max_frame_size = max_frame_size
        self.limits = limits = limits or ServerLimits()
        self._max_pending_requests = (
            limits.max_in_flight_requests if max_pending_requests is None else max_pending_requests
        )
        #: Applies :attr:`limits`; its counters show what they did.
        self.guard = LimitGuard(limits)
        self._on_connection = on_connection
        self._backlog = backlog
        self._server: asyncio.Server | PermissiveServer | None = None
        self._connections: set[Connection] = set()

    @property
    def port(self) -> int:
        """The listening port (once started, the real one when constructed with port 0)."""
        return self._port

    @property
    def address(self) -> str:
        return format_address((self.host, self.port))

    @property
    def connections(self) -> frozenset[Connection]:
        """The connections currently open."""
        return frozenset(self._connections)

    async def start(self) -> None:
        if self._server is not None:
            return
        loop = asyncio.get_running_loop()
        # Bound first, recorded, then serving: create_server's own start of serving ends in an
        # await, and a start cancelled there would leave a listening socket nobody can close.
        server: asyncio.Server | PermissiveServer
        if self._tls_permissive:
            assert self._ssl is not None
            server = await create_permissive_server(
                self._make_connection, self.host, self._port, self._ssl, backlog=self._backlog
            )
        else:
            server = await loop.create_server(
                self._make_connection,
                self.host,
                self._port,
                backlog=self._backlog,
                reuse_address=True,
                start_serving=False,
                ssl=self._ssl,
                ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S if self._ssl is not None else None,
            )
        self._server = server
        if server.sockets:
            self._port = int(server.sockets[0].getsockname()[1])  # a restart reuses it
        await server.start_serving()
        self.guard.start(self._connections)
        log.info("remoting server listening on %s", self.address)

    def update_limits(self, limits: ServerLimits) -> None:
        """New resource limits from now on (see :meth:`LimitGuard.update`)."""
        self.limits = limits
        self._max_pending_requests = limits.max_in_flight_requests
        self.guard.update(limits)

    async def close(self, timeout_s: float = DEFAULT_CLOSE_TIMEOUT_S) -> None:
        """Stop accepting, cancel running handlers, close every connection (abort after
        ``timeout_s`` if a peer does not take the queued bytes)."""
        server = self._server
        if server is None:
            return
        self._server = None
        self.guard.stop()
        server.close()
        connections = list(self._connections)
        for conn in connections:
            conn.cancel_requests()
        await close_connections(connections, timeout_s)
        await server.wait_closed()
        log.info("remoting server on %s closed", self.address)

    async def __aenter__(self) -> RemotingServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _make_connection(self) -> Connection:
        return Connection(
            self._handler,
            max_frame_size=self._max_frame_size,
            max_pending_requests=self._max_pending_requests,
            serving=True,
            on_made=self._register,
            immediate=self._immediate,
            guard=self.guard,
            lone=self.lone,
            after_read=self._after_read,
            read_max_bytes=self.limits.read_max_bytes,
        )

    def _register(self, conn: Connection) -> None:
        if not self.guard.admit(conn):
            return
        self._connections.add(conn)
        conn.add_close_callback(self._connections.discard)
        if self._on_connection is not None:
            try:
                self._on_connection(conn)
            except Exception:
                log.exception("on_connection callback failed for %s", conn.remote_address)
