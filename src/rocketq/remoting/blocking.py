"""Blocking remoting calls in the caller's thread: a plain socket, the sans-IO frame codec.

The synchronous producer sends with these instead of handing every call to its event-loop thread
and back (two thread hand-offs per call). Frames are made by :func:`~rocketq.remoting.codec.encode`
and read by :class:`~rocketq.remoting.codec.FrameDecoder`, the same code the asyncio
:class:`~rocketq.remoting.connection.Connection` uses.

:class:`BlockingConnection` carries one call at a time: it writes the request, then reads until the
response with the request's opaque arrives. A plain TCP socket makes two system calls per call
where a socket with a timeout makes six (``settimeout`` is an ``ioctl``, and each send and receive
polls first): the request is written at once without blocking (``MSG_DONTWAIT``; ``poll`` only when
the kernel's buffer is full), and the read blocks in ``recv_into`` itself, bounded by the socket's
receive timeout (``SO_RCVTIMEO``), which is set only when the time left to the call's deadline no
longer fits it (at most half of that time, at least 1 ms; the range of time left that keeps the
setting is noted when it is made, so the usual read compares once): a read that times out checks
the deadline and reads again. Reads go into one buffer per connection (``recv_into``) instead of a
fresh 256 KiB allocation each. A caller may hand a ``quick`` function to
:meth:`BlockingConnection.invoke_frame`: a read made while no partial frame is buffered goes to it
first, and what it makes of the bytes (the blocking producer's SendResult) is returned without the
frame decoder; when it returns None the read is decoded as always. A TLS socket keeps a timeout
(its records may hold bytes no ``poll`` sees). Responses with another opaque (the late answer to a
call that timed out earlier) are dropped; a request the server sends on it is answered
REQUEST_CODE_NOT_SUPPORTED (nothing for a oneway one), as an asyncio connection without a handler
does. Any socket error or protocol error closes the connection.

:class:`BlockingConnectionPool` hands a connection to one thread at a time: a caller takes an idle
connection to the address (or opens one), makes its call and gives it back, so threads calling
at once use one connection each and a connection is never shared by two calls in flight.
:meth:`BlockingConnectionPool.close` closes the idle connections and every busy one when it is
given back.
The idle connections are taken and given back without a lock: a list's ``pop`` and ``append``
are each one step with the GIL held, so two threads never take one connection; the lock only
guards the dict of lists when an address is new. ``close`` marks the pool closed before it
empties the lists, and a give-back looks at the mark again after its append, so a connection
given back while the pool closes is closed by one of the two. A connection that sat idle for
:data:`IDLE_CHECK_AFTER_S` or longer is looked at before it is used (one ``recv`` with
``MSG_PEEK``): one whose peer closed it meanwhile (a broker restarted, or a DLedger leader changed
at an address) is closed and the next one taken or a new one opened, so the call it was taken for
does not fail on it.
"""

from __future__ import annotations

import math
import select
import socket
import ssl
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Final, TypeVar, overload

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
from rocketq.remoting.connection import QuickAnswer, parse_address

_RECV_SIZE: Final = 256 * 1024
#: The longest wait of one ``poll`` (its timeout is a C int of milliseconds); a call polls again.
_POLL_MAX_MS: Final = 0x7FFFFFFF
#: The shortest and the longest receive timeout of a plain socket's blocking read, seconds.
_READ_SLICE_MIN_S: Final = 0.001
_READ_SLICE_MAX_S: Final = 3600.0
#: ``struct timeval`` (seconds, microseconds) for ``SO_RCVTIMEO``.
_TIMEVAL: Final = struct.Struct("@ll")
_MSG_DONTWAIT: Final = socket.MSG_DONTWAIT

_T = TypeVar("_T")

#: A pooled connection idle at least this long (s) is looked at before it is used again: one its
#: peer closed meanwhile (a broker restarted, a new DLedger leader at the old address) is
#: dropped there, instead of failing the call it was taken for.
IDLE_CHECK_AFTER_S: Final = 1.0

#: ``hook(remote_addr, request)``: changes a request in place before it is sent (as RpcHook).
BlockingRpcHook = Callable[[str, RemotingCommand], None]


class BlockingConnection:
    """One socket to one remoting server, used by one thread at a time."""

    __slots__ = (
        "_buf",
        "_decoder",
        "_max_frame_size",
        "_pending",
        "_plain",
        "_read_slice",
        "_slice_hi",
        "_slice_lo",
        "_sock",
        "_view",
        "addr",
        "closed",
        "idle_since",
    )

    def __init__(self, addr: str, sock: socket.socket, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.addr = addr
        self._sock = sock
        self._max_frame_size = max_frame_size
        self._decoder = FrameDecoder(max_frame_size)
        self._pending: deque[RemotingCommand] = deque()  # decoded commands not yet looked at
        self._buf = bytearray(_RECV_SIZE)
        self._view = memoryview(self._buf)
        # A plain socket blocks in its reads, bounded by SO_RCVTIMEO (_read_slice seconds, 0 while
        # unset), and writes with MSG_DONTWAIT; a TLS socket is used with a timeout.
        self._plain = not isinstance(sock, ssl.SSLSocket)
        self._read_slice = 0.0
        # the times left to the deadline for which the slice set is the one wanted anyway (no
        # min/max to work out on each read): none while unset
        self._slice_lo, self._slice_hi = 1.0, 0.0
        if self._plain:
            sock.settimeout(None)  # blocking: CPython then reads and writes without a poll first
        self.closed = False
        #: ``time.monotonic()`` when a pool last took it back (0.0: never)
        self.idle_since = 0.0

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

    def peer_closed(self) -> bool:
        """Whether the peer closed (or reset) this connection while it was idle: an end of
        stream waits to be read. A TLS connection is not looked at (it cannot peek): False."""
        if not self._plain or self.closed:
            return self.closed
        try:
            return self._sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:  # nothing to read: open
            return False
        except OSError:  # reset
            return True

    def invoke(self, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        """Send request ``cmd`` and return its response within ``timeout_s``.

        Raises RemotingTimeout (the connection stays usable), ConnectionClosed (closed),
        LocalProtocolError when ``cmd`` cannot be framed (nothing sent)."""
        if self.closed:
            raise ConnectionClosed(f"connection {self.addr} is closed; cannot send code {cmd.code}")
        return self.invoke_frame(encode(cmd), cmd.opaque, cmd.code, timeout_s)

    @overload
    def invoke_frame(self, frame: bytes, opaque: int, code: int, timeout_s: float) -> RemotingCommand: ...

    @overload
    def invoke_frame(
        self,
        frame: bytes,
        opaque: int,
        code: int,
        timeout_s: float,
        quick: QuickAnswer[_T],
        quick_args: tuple[Any, ...],
    ) -> RemotingCommand | _T: ...

    def invoke_frame(
        self,
        frame: bytes,
        opaque: int,
        code: int,
        timeout_s: float,
        quick: QuickAnswer[_T] | None = None,
        quick_args: tuple[Any, ...] = (),
    ) -> RemotingCommand | _T:
        """:meth:`invoke` of a request already framed (``frame``: its whole frame, ``opaque``
        and ``code`` its own). With ``quick``, a read made while nothing else is buffered goes
        to ``quick`` first (see :data:`QuickAnswer`): what it makes of the read is returned in
        place of the response, and a None has the read decoded as usual."""
        if self.closed:
            raise ConnectionClosed(f"connection {self.addr} is closed; cannot send code {code}")
        if len(frame) > self._max_frame_size:
            raise LocalProtocolError(
                f"frame of {len(frame)} B (code {code}) exceeds max {self._max_frame_size} B"
            )
        deadline = time.monotonic() + timeout_s
        try:
            if self._plain:  # _write's usual case inline: the whole frame taken at once
                try:
                    sent = self._sock.send(frame, _MSG_DONTWAIT)
                except BlockingIOError:
                    sent = 0
                if sent != len(frame):
                    self._write_rest(memoryview(frame)[sent:], deadline)
            else:
                self._write(frame, deadline)
            pending = self._pending
            decoder = self._decoder
            while True:
                while pending:
                    got = pending.popleft()
                    if got.flag & FLAG_RESPONSE:
                        if got.opaque == opaque:
                            return got
                        continue  # the late answer to a call that timed out
                    self._refuse(got, deadline)
                n = self._read_into(deadline)
                if quick is not None and decoder.idle:
                    made = quick(self._buf, n, opaque, *quick_args, self._max_frame_size)
                    if made is not None:
                        return made
                read = decoder.feed(self._view[:n].tobytes())
                if len(read) == 1:  # the usual read: the answer alone
                    answer = read[0]
                    if answer.flag & FLAG_RESPONSE and answer.opaque == opaque:
                        return answer
                pending.extend(read)
        except TimeoutError:
            raise RemotingTimeout(
                f"no response to code {code} from {self.addr} within {timeout_s:g} s"
            ) from None
        except RemoteProtocolError:
            self.close()
            raise
        except OSError as exc:
            self.close()
            raise ConnectionClosed(f"connection {self.addr} failed: {exc}") from exc

    def _write(self, data: bytes, deadline: float) -> None:
        """Write all of ``data`` before ``deadline`` (TimeoutError otherwise)."""
        sock = self._sock
        if not self._plain:
            sock.settimeout(_seconds_left(deadline))
            sock.sendall(data)
            return
        try:
            sent = sock.send(data, _MSG_DONTWAIT)
        except BlockingIOError:
            sent = 0
        if sent != len(data):
            self._write_rest(memoryview(data)[sent:], deadline)

    def _write_rest(self, rest: memoryview, deadline: float) -> None:
        """Write ``rest`` of a frame whose beginning the plain socket took, before ``deadline``."""
        sock = self._sock
        poll_out = select.poll()
        poll_out.register(sock, select.POLLOUT)
        while rest:
            if not poll_out.poll(_poll_ms(deadline)):
                continue  # _poll_ms raises TimeoutError once the deadline has passed
            try:
                rest = rest[sock.send(rest, _MSG_DONTWAIT) :]
            except BlockingIOError:
                continue

    def _read_into(self, deadline: float) -> int:
        """Read the next bytes from the peer into the connection's buffer, waiting until
        ``deadline`` (TimeoutError after it); how many. ConnectionClosed when the peer has
        closed."""
        sock = self._sock
        while True:
            if not self._plain:
                sock.settimeout(_seconds_left(deadline))
            else:
                remaining = deadline - time.monotonic()
                if not self._slice_lo <= remaining <= self._slice_hi:
                    if remaining <= 0:
                        raise TimeoutError
                    wait = self._read_slice
                    want = min(max(remaining / 2, _READ_SLICE_MIN_S), _READ_SLICE_MAX_S)
                    if not want / 2 <= wait <= max(remaining, _READ_SLICE_MIN_S):
                        self._set_read_slice(want)
            try:
                n = sock.recv_into(self._buf)
            except BlockingIOError:
                continue  # the receive timeout passed without data: check the deadline
            if not n:
                self.close()
                raise ConnectionClosed(f"connection {self.addr} closed by the peer")
            return n

    def _set_read_slice(self, seconds: float) -> None:
        """Bound each blocking read of the plain socket to ``seconds`` (SO_RCVTIMEO)."""
        whole = int(seconds)
        micros = max(int((seconds - whole) * 1_000_000), 0 if whole else 1)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _TIMEVAL.pack(whole, micros))
        self._read_slice = seconds
        # within these bounds of the time left the test above keeps this slice (remaining / 2
        # is then the slice wanted, and a quarter of the time left up to all of it fits)
        self._slice_lo = max(seconds, 2 * _READ_SLICE_MIN_S)
        self._slice_hi = min(4 * seconds, 2 * _READ_SLICE_MAX_S)

    def _refuse(self, request: RemotingCommand, deadline: float) -> None:
        if request.flag & FLAG_ONEWAY:
            return
        response = RemotingCommand.create_response(
            request,
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
            REQUEST_CODE_NOT_SUPPORTED_REMARK.format(code=request.code),
        )
        self._write(encode(response), deadline)


def _seconds_left(deadline: float) -> float:
    """The time to ``deadline`` as a socket timeout; TimeoutError when it has passed."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError
    return max(remaining, 0.001)


def _poll_ms(deadline: float) -> int:
    """The time to ``deadline`` as a ``poll`` timeout (whole ms, rounded up); TimeoutError when
    it has passed."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError
    return min(math.ceil(remaining * 1000), _POLL_MAX_MS)


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
            lists = list(self._idle.values())
        return sum(len(conns) for conns in lists)

    def invoke(self, addr: str, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        """Send request ``cmd`` to ``addr`` on a connection of this thread's own for the call;
        ``timeout_s`` covers connecting and waiting."""
        if self.rpc_hook is not None:
            self.rpc_hook(addr, cmd)
        return self.invoke_frame(addr, encode(cmd), cmd.opaque, cmd.code, timeout_s, signed=True)

    @overload
    def invoke_frame(
        self, addr: str, frame: bytes, opaque: int, code: int, timeout_s: float, *, signed: bool = False
    ) -> RemotingCommand: ...

    @overload
    def invoke_frame(
        self,
        addr: str,
        frame: bytes,
        opaque: int,
        code: int,
        timeout_s: float,
        quick: QuickAnswer[_T],
        quick_args: tuple[Any, ...],
        *,
        signed: bool = False,
    ) -> RemotingCommand | _T: ...

    def invoke_frame(
        self,
        addr: str,
        frame: bytes,
        opaque: int,
        code: int,
        timeout_s: float,
        quick: QuickAnswer[_T] | None = None,
        quick_args: tuple[Any, ...] = (),
        *,
        signed: bool = False,
    ) -> RemotingCommand | _T:
        """:meth:`invoke` of a request already framed (its ``opaque`` and ``code``), for a pool
        without an ``rpc_hook`` (a hook signs the command, so it is called with :meth:`invoke`,
        which passes ``signed``). ``quick`` and ``quick_args``: as
        :meth:`BlockingConnection.invoke_frame` takes them."""
        if self.rpc_hook is not None and not signed:
            raise LocalProtocolError(f"code {code}: a framed request cannot be signed by the rpc hook")
        if self._closed:
            raise ConnectionClosed(f"the producer's connections are closed; cannot call {addr}")
        conn = None
        conns = self._idle.get(addr)
        while conns:  # the most recently given back open connection (inline: on every call)
            try:
                conn = conns.pop()
            except IndexError:  # another thread took the last one meanwhile
                break
            if not conn.closed:
                if time.monotonic() - conn.idle_since < IDLE_CHECK_AFTER_S or not conn.peer_closed():
                    break
                conn.close()  # its peer went away while it was idle
            conn = None
        if conn is None:
            deadline = time.monotonic() + timeout_s
            conn = BlockingConnection.open(
                addr, min(timeout_s, self._connect_timeout_s), self._max_frame_size, self._ssl_context
            )
            timeout_s = deadline - time.monotonic()
            if timeout_s <= 0:
                self._give_back(conn)
                raise RemotingTimeout(f"connecting to {addr} used up the call's deadline (code {code})")
        try:
            if quick is None:
                return conn.invoke_frame(frame, opaque, code, timeout_s)
            return conn.invoke_frame(frame, opaque, code, timeout_s, quick, quick_args)
        finally:
            self._give_back(conn)

    def close(self) -> None:
        """Close the idle connections; busy ones are closed when their call ends."""
        self._closed = True
        self._close_idle()

    def _close_idle(self) -> None:
        with self._lock:
            lists = list(self._idle.values())
        for conns in lists:
            while True:
                try:
                    conn = conns.pop()
                except IndexError:
                    break
                conn.close()

    def _give_back(self, conn: BlockingConnection) -> None:
        if conn.closed:
            return
        if self._closed:
            conn.close()
            return
        conns = self._idle.get(conn.addr)
        if conns is None:
            with self._lock:
                conns = self._idle.setdefault(conn.addr, [])
        conn.idle_since = time.monotonic()
        conns.append(conn)
        if self._closed:  # closed meanwhile: its sweep may have come before the append
            self._close_idle()


__all__ = ["BlockingConnection", "BlockingConnectionPool", "BlockingRpcHook"]
