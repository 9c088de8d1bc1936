"""Blocking remoting calls in the caller's thread: a plain socket, the sans-IO frame codec.

The synchronous producer sends with these instead of handing every call to its event-loop thread
and back (two thread hand-offs per call). Frames are made by :func:`~rocketq.remoting.codec.encode`
and read by :class:`~rocketq.remoting.codec.FrameDecoder`, the same code the asyncio
:class:`~rocketq.remoting.connection.Connection` uses.

:class:`BlockingConnection` carries one call at a time: it writes the request, then reads until
the response with the request's opaque arrives. Responses with another opaque (the late answer to
a call that timed out earlier) are dropped; a request the server sends on it is answered
REQUEST_CODE_NOT_SUPPORTED (nothing for a oneway one), as an asyncio connection without a handler
does. Any socket error or protocol error closes the connection.

:class:`BlockingConnectionPool` hands a connection to one thread at a time: a caller takes an idle
connection to the address (or opens one), makes its call and gives it back, so threads calling
at once use one connection each and a connection is never shared by two calls in flight.
:meth:`BlockingConnectionPool.close` closes the idle connections and every busy one when it is
given back.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Final

from rocketq.errors import (
    ConnectionClosed,
    LocalProtocolError,
    RemoteProtocolError,
    RemotingConnectError,
    RemotingTimeout,
    ResponseCode,
)
from rocketq.remoting.codec import FrameDecoder, encode
from rocketq.remoting.codes import (
    DEFAULT_MAX_FRAME_SIZE,
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    REQUEST_CODE_NOT_SUPPORTED_REMARK,
)
from rocketq.remoting.command import RemotingCommand
from rocketq.remoting.connection import parse_address

_RECV_SIZE: Final = 256 * 1024

#: ``hook(remote_addr, request)``: changes a request in place before it is sent (as RpcHook).
BlockingRpcHook = Callable[[str, RemotingCommand], None]


class BlockingConnection:
    """One socket to one remoting server, used by one thread at a time."""

    __slots__ = ("_decoder", "_max_frame_size", "_pending", "_sock", "addr", "closed")

    def __init__(self, addr: str, sock: socket.socket, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.addr = addr
        self._sock = sock
        self._max_frame_size = max_frame_size
        self._decoder = FrameDecoder(max_frame_size)
        self._pending: list[RemotingCommand] = []  # decoded commands not yet looked at
        self.closed = False

    @classmethod
    def open(
        cls,
        addr: str,
        timeout_s: float,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        ssl_context: ssl.SSLContext | None = None,
    ) -> BlockingConnection:
        """Connect to ``addr`` within ``timeout_s`` (with TLS when ``ssl_context`` is given, the
        handshake within the same time); RemotingConnectError when it fails."""
        host, port = parse_address(addr)
        try:
            sock = socket.create_connection((host, port), timeout=max(timeout_s, 0.001))
        except TimeoutError:
            raise RemotingConnectError(f"connecting to {addr} timed out after {timeout_s:g} s") from None
        except OSError as exc:
            raise RemotingConnectError(f"cannot connect to {addr}: {exc}") from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if ssl_context is not None:
            try:
                sock = ssl_context.wrap_socket(sock, server_hostname=host)
            except (OSError, ssl.SSLError) as exc:
                sock.close()
                raise RemotingConnectError(f"TLS handshake with {addr} failed: {exc}") from exc
        return cls(addr, sock, max_frame_size)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._sock.close()

    def invoke(self, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        """Send request ``cmd`` and return its response within ``timeout_s``.

        Raises RemotingTimeout (the connection stays usable), ConnectionClosed (closed),
        LocalProtocolError when ``cmd`` cannot be framed (nothing sent)."""
        if self.closed:
            raise ConnectionClosed(f"connection {self.addr} is closed; cannot send code {cmd.code}")
        frame = encode(cmd)
        if len(frame) > self._max_frame_size:
            raise LocalProtocolError(
                f"frame of {len(frame)} B (code {cmd.code}) exceeds max {self._max_frame_size} B"
            )
        deadline = time.monotonic() + timeout_s
        sock = self._sock
        try:
            sock.settimeout(max(timeout_s, 0.001))
            sock.sendall(frame)
            opaque = cmd.opaque
            while True:
                while self._pending:
                    got = self._pending.pop(0)
                    if got.flag & FLAG_RESPONSE:
                        if got.opaque == opaque:
                            return got
                        continue  # the late answer to a call that timed out
                    self._refuse(got)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError
                sock.settimeout(remaining)
                data = sock.recv(_RECV_SIZE)
                if not data:
                    self.close()
                    raise ConnectionClosed(f"connection {self.addr} closed by the peer")
                self._pending.extend(self._decoder.feed(data))
        except TimeoutError:
            raise RemotingTimeout(
                f"no response to code {cmd.code} from {self.addr} within {timeout_s:g} s"
            ) from None
        except RemoteProtocolError:
            self.close()
            raise
        except OSError as exc:
            self.close()
            raise ConnectionClosed(f"connection {self.addr} failed: {exc}") from exc

    def _refuse(self, request: RemotingCommand) -> None:
        if request.flag & FLAG_ONEWAY:
            return
        response = RemotingCommand.create_response(
            request,
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
            REQUEST_CODE_NOT_SUPPORTED_REMARK.format(code=request.code),
        )
        self._sock.sendall(encode(response))


class BlockingConnectionPool:
    """Idle :class:`BlockingConnection` objects by address; one per concurrent caller."""

    def __init__(
        self,
        *,
        connect_timeout_s: float,
        rpc_hook: BlockingRpcHook | None = None,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.rpc_hook = rpc_hook
        self._ssl_context = ssl_context
        self._connect_timeout_s = connect_timeout_s
        self._max_frame_size = max_frame_size
        self._idle: dict[str, list[BlockingConnection]] = {}
        self._lock = threading.Lock()
        self._closed = False

    @property
    def idle_connections(self) -> int:
        with self._lock:
            return sum(len(conns) for conns in self._idle.values())

    def invoke(self, addr: str, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        """Send request ``cmd`` to ``addr`` on a connection of this thread's own for the call;
        ``timeout_s`` covers connecting and waiting."""
        if self.rpc_hook is not None:
            self.rpc_hook(addr, cmd)
        deadline = time.monotonic() + timeout_s
        conn = self._take(addr, timeout_s)
        try:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RemotingTimeout(f"connecting to {addr} used up the call's deadline (code {cmd.code})")
            return conn.invoke(cmd, remaining)
        finally:
            self._give_back(conn)

    def close(self) -> None:
        """Close the idle connections; busy ones are closed when their call ends."""
        with self._lock:
            self._closed = True
            conns = [c for cs in self._idle.values() for c in cs]
            self._idle.clear()
        for conn in conns:
            conn.close()

    def _take(self, addr: str, timeout_s: float) -> BlockingConnection:
        with self._lock:
            if self._closed:
                raise ConnectionClosed(f"the producer's connections are closed; cannot call {addr}")
            conns = self._idle.get(addr)
            while conns:
                conn = conns.pop()
                if not conn.closed:
                    return conn
        return BlockingConnection.open(
            addr, min(timeout_s, self._connect_timeout_s), self._max_frame_size, self._ssl_context
        )

    def _give_back(self, conn: BlockingConnection) -> None:
        if conn.closed:
            return
        with self._lock:
            if not self._closed:
                self._idle.setdefault(conn.addr, []).append(conn)
                return
        conn.close()


__all__ = ["BlockingConnection", "BlockingConnectionPool", "BlockingRpcHook"]
