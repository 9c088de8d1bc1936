"""The calling end of the remoting protocol: RemotingClient keeps one connection per
``host:port`` address and sends requests on it.

A connection is opened on first use and reopened on the first call after it dropped; callers that
ask for the same address while it is being opened share one connect attempt. ``timeout_s`` of a
call covers connecting and waiting for the response. The connections are calling-side
:class:`~rocketq.remoting.connection.Connection` objects: they never stop reading, and a call
waits for a full write buffer to drain before it is sent. An optional request handler answers the
requests servers send back on these connections (a broker asking a consumer for its running
info); without one they get REQUEST_CODE_NOT_SUPPORTED. An optional ``rpc_hook(addr, request)``
runs on every request just before it is sent (ACL signing: :class:`rocketq.acl.AclClientRpcHook`).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import Final, TypeAlias

from rocketq.errors import ConnectionClosed, RemotingConnectError, RemotingTimeout
from rocketq.remoting.codes import DEFAULT_MAX_FRAME_SIZE
from rocketq.remoting.command import RemotingCommand
from rocketq.remoting.connection import (
    DEFAULT_CLOSE_TIMEOUT_S,
    DEFAULT_INVOKE_TIMEOUT_S,
    DEFAULT_MAX_PENDING_REQUESTS,
    CallingConnection,
    Connection,
    RequestHandler,
    close_connections,
    parse_address,
)

log = logging.getLogger(__name__)

DEFAULT_CONNECT_TIMEOUT_S: Final = 3.0

#: ``hook(remote_addr, request)``: changes a request in place before it is sent.
RpcHook: TypeAlias = Callable[[str, RemotingCommand], None]


class RemotingClient:
    """Calls remoting servers; one lazily opened connection per ``host:port`` address.

    ``handler`` (optional) answers requests the servers send on those connections; without one,
    such requests get REQUEST_CODE_NOT_SUPPORTED (oneway ones nothing). ``rpc_hook`` (optional)
    runs on every request sent through :meth:`invoke` and :meth:`invoke_oneway` first. ``ssl``
    (optional, :func:`rocketq.remoting.tls.client_context`) opens every connection with TLS."""

    def __init__(
        self,
        handler: RequestHandler | None = None,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        max_pending_requests: int = DEFAULT_MAX_PENDING_REQUESTS,
        rpc_hook: RpcHook | None = None,
        ssl: ssl.SSLContext | None = None,
    ) -> None:
        self._handler = handler
        self._ssl = ssl
        self.rpc_hook = rpc_hook
        self._max_frame_size = max_frame_size
        self._connect_timeout_s = connect_timeout_s
        self._max_pending_requests = max_pending_requests
        self._connections: dict[str, Connection] = {}
        self._connecting: dict[str, asyncio.Task[Connection]] = {}
        self._closed = False

    @property
    def connections(self) -> dict[str, Connection]:
        """Open connections by address."""
        return {addr: conn for addr, conn in self._connections.items() if not conn.closed}

    def ready_connection(self, addr: str) -> Connection | None:
        """The open connection to ``addr`` when a call can go out on it at once: no rpc hook
        to run first and its write buffer below the high-water mark. None otherwise: then
        :meth:`invoke` connects, signs or waits as needed."""
        if self.rpc_hook is not None:
            return None
        conn = self._connections.get(addr)
        # Connection.closed and .writing_paused read as their fields (a send makes this call
        # for every message: two property calls less)
        if conn is None or conn._closing or conn._lost or conn._write_paused:
            return None
        return conn

    async def connection(self, addr: str, timeout_s: float | None = None) -> Connection:
        """The open connection to ``addr``, connecting first if there is none."""
        conn = self._connections.get(addr)
        if conn is not None and not conn.closed:
            return conn
        return await self._connect(addr, timeout_s)

    async def invoke(
        self, addr: str, cmd: RemotingCommand, timeout_s: float = DEFAULT_INVOKE_TIMEOUT_S
    ) -> RemotingCommand:
        """Send request ``cmd`` to ``addr`` and return the response. ``timeout_s`` covers
        connecting and waiting. Raises RemotingTimeout, ConnectionClosed, RemotingConnectError."""
        if self.rpc_hook is not None:
            self.rpc_hook(addr, cmd)
        conn = self._connections.get(addr)
        if conn is None or conn.closed:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout_s
            conn = await self._connect(addr, timeout_s)
            timeout_s = deadline - loop.time()
            if timeout_s <= 0:
                raise RemotingTimeout(f"connecting to {addr} used up the call's deadline (code {cmd.code})")
        return await conn.invoke(cmd, timeout_s)

    async def invoke_oneway(
        self, addr: str, cmd: RemotingCommand, timeout_s: float = DEFAULT_INVOKE_TIMEOUT_S
    ) -> None:
        """Mark ``cmd`` oneway (flag bit1) and send it to ``addr`` without waiting for an answer
        (``timeout_s`` bounds connecting only)."""
        if self.rpc_hook is not None:
            self.rpc_hook(addr, cmd)
        conn = self._connections.get(addr)
        if conn is None or conn.closed:
            conn = await self._connect(addr, timeout_s)
        conn.send_oneway(cmd)

    async def close(self, timeout_s: float = DEFAULT_CLOSE_TIMEOUT_S) -> None:
        """Close every connection; calls still pending fail with ConnectionClosed."""
        if self._closed:
            return
        self._closed = True
        for task in list(self._connecting.values()):
            task.cancel()
        connections = list(self._connections.values())
        self._connections.clear()
        await close_connections(connections, timeout_s)

    async def __aenter__(self) -> RemotingClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _connect(self, addr: str, timeout_s: float | None) -> Connection:
        if self._closed:
            raise ConnectionClosed(f"remoting client is closed; cannot connect to {addr}")
        task = self._connecting.get(addr)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._open(addr))
            # a caller whose wait ran out has left: the attempt's failure is then nobody's to
            # take, and asyncio would log it as an error ("never retrieved") when it ends
            task.add_done_callback(_take_outcome)
            self._connecting[addr] = task
        if timeout_s is None:
            return await asyncio.shield(task)
        try:
            return await asyncio.wait_for(asyncio.shield(task), timeout_s)
        except TimeoutError:
            raise RemotingTimeout(f"connecting to {addr} took longer than {timeout_s:g} s") from None

    async def _open(self, addr: str) -> Connection:
        try:
            host, port = parse_address(addr)
            loop = asyncio.get_running_loop()
            try:
                async with asyncio.timeout(self._connect_timeout_s):
                    _, conn = await loop.create_connection(self._make_connection, host, port, ssl=self._ssl)
            except TimeoutError:
                raise RemotingConnectError(
                    f"connecting to {addr} timed out after {self._connect_timeout_s:g} s"
                ) from None
            except ssl.SSLError as exc:
                raise RemotingConnectError(f"TLS handshake with {addr} failed: {_tls_reason(exc)}") from exc
            except OSError as exc:
                if (
                    self._ssl is not None
                    and isinstance(exc, ConnectionError)
                    and not isinstance(exc, ConnectionRefusedError)
                ):  # dropped during the handshake
                    why = str(exc) or type(exc).__name__
                    raise RemotingConnectError(
                        f"cannot connect to {addr} with TLS: {why} (does the server speak TLS?)"
                    ) from exc
                raise RemotingConnectError(f"cannot connect to {addr}: {exc}") from exc
            if self._closed:
                conn.abort()
                raise ConnectionClosed(f"remoting client closed while connecting to {addr}")
            self._connections[addr] = conn
            conn.add_close_callback(lambda c: self._forget(addr, c))
            log.debug("connected to %s", addr)
            return conn
        finally:
            self._connecting.pop(addr, None)

    def _forget(self, addr: str, conn: Connection) -> None:
        if self._connections.get(addr) is conn:
            del self._connections[addr]

    def _make_connection(self) -> Connection:
        return CallingConnection(
            self._handler,
            max_frame_size=self._max_frame_size,
            max_pending_requests=self._max_pending_requests,
            serving=False,
        )


def _take_outcome(task: asyncio.Task[Connection]) -> None:
    if not task.cancelled():
        task.exception()


def _tls_reason(exc: ssl.SSLError) -> str:
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (
            f"the server's certificate is not trusted ({exc.verify_message}); "
            "is the CA file (tls.client.trustCertPath) the one that signed it?"
        )
    reason = exc.reason or str(exc)
    if reason in ("WRONG_VERSION_NUMBER", "PACKET_LENGTH_TOO_LONG", "RECORD_LAYER_FAILURE"):
        return f"{reason}: the server does not speak TLS on this port (tls.server.mode=disabled?)"
    return str(reason)
