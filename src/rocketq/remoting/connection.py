"""One remoting connection, either end: the ``asyncio.Protocol`` that RemotingServer and
RemotingClient both run, with the address helpers and the close-everything step they share.

Both ends of a remoting connection speak both ways on one socket: the client sends requests and
receives responses, and the broker sends its own requests (NOTIFY_CONSUMER_IDS_CHANGED,
GET_CONSUMER_RUNNING_INFO, ...) to the client with its own opaques. :class:`Connection` is the
``asyncio.Protocol`` for either end.

One idea: the state of one connection, both directions, over one asyncio transport.


* inbound bytes go through one :class:`~rocketq.remoting.codec.FrameDecoder` ``feed`` per
  ``data_received``; a frame with flag bit0 completes the pending call with its opaque
  (unmatched responses are dropped), any other frame is a request and runs the handler as its own
  task, so a held request (a long-polling pull) never delays the others on the socket and
  responses leave in completion order;
* an optional immediate handler is asked first, inside ``data_received``: a request it can
  answer without awaiting (a send under ASYNC_FLUSH) costs no task and no extra loop iteration;
  it returns None for anything else, which then takes the task path, and may answer with the
  response frame already encoded (see :func:`~rocketq.remoting.codec.success_frame`); it may
  also take the request and answer later (:data:`DEFERRED`, then :meth:`Connection.answer`: a
  send on a DLedger leader, answered when its quorum is reached), still without a task;
* a server may give its connections an ``after_read`` callback, called at the end of each read
  whose requests went to the handlers: an immediate handler that queued work for the read's
  requests together (the Raft peer transport's replies to the appends of one read) does it then;
* a server may also have a lone handler (:data:`LoneHandler`), asked before the decoder with a
  read's bytes when nothing is buffered: a read that is exactly one request it answers at once
  (a producer's single send with one request in flight) skips the decoder, the dispatch and the
  enqueueing, with the same answer bytes; it returns None for anything else;
* a handler exception becomes a response with the error's wire code (SYSTEM_ERROR, 1, for
  anything that is not a :class:`~rocketq.errors.RocketqError`) and the exception text as
  remark; oneway requests (flag bit1) never get a response;
* a call made with a quick answer (:meth:`Connection.request_frame`, the asyncio producer's
  send) has a read that arrives while it is the only call pending, with nothing buffered, offered
  to that function first: the read that is exactly its response becomes the call's result
  without the decoder or a RemotingCommand (the compiled
  :func:`~rocketq.client.send_answer.send_result`); anything else is decoded as always;
* a response completes its call with :func:`~rocketq.remoting.task_resume.complete_resuming`:
  a task awaiting the call goes on inside the read that brought the answer (its next request
  then leaves in the same loop iteration) rather than an iteration later;
* a bad frame closes only that connection (logged with the reason); the stream cannot be
  re-synchronised after it;
* the first outbound frame of an event-loop iteration is written at once; the frames that follow
  it in the same iteration are joined into one more ``transport.write`` at its end (one send
  for a burst of pipelined responses, no added latency for a lone one); when the first is
  queued inside ``data_received`` (the answers to one read's requests) the rest are written at
  the end of that call, which saves a loop callback per read. A deferred answer's frame is
  never written at once: it waits for the end of the iteration with the others (they come in
  runs, the sends a DLedger leader's commit answers together: one write for the run), or for
  the end of a :func:`answers_held` block when it is answered inside one (a DLedger leader
  answers the sends a follower's acknowledgement commits within that acknowledgement's read:
  one write per connection at the read's end, no loop callback per connection). On the calling
  side (:class:`CallingConnection`) a first frame also schedules no flush when no frame went out
  alone since the last read or flush: a caller with one call in flight writes, reads the
  answer, writes again, and the flush would cost its loop an iteration per call with nothing
  to join; a second frame before a read waits for the flush, and the rest of its burst joins it.
  Frames queued on the calling side inside a read of several answers (the next requests of the
  calls they resumed) are not written at once, the first included: they leave together when
  the read is done, and the server reads the burst whole. Written first-at-once, a producer's
  burst of 32 sends reached a DLedger leader as a read of one send and a read of 31, and the
  leader made a proposal of each (docs/benchmarks.md, "A producer's burst in one write"). A
  read of one answer keeps the first-at-once rule: a lone call's next request leaves at once.

Read size. A serving connection reads at most ``read_max_bytes`` per read (a server's
``ServerLimits.read_max_bytes``, 32 KiB by default; asyncio's own read is 256 KiB), so the loop
takes one peer's burst in parts, with the other connections' reads between them. A DLedger
leader gains most from it: with 256 KiB reads the sends of a producer's whole
burst arrive in one read and go into one proposal, and the producer, the leader and the followers
then take turns on one burst at a time; in parts, the first part's proposal is replicated,
committed and answered while the leader takes the next (docs/benchmarks.md). While a frame
larger than that is incomplete, each read takes what it misses, up to 256 KiB
(``READ_GROWN_MAX_BYTES``), so a large message costs no more reads than before. It applies to
asyncio's socket transports; a TLS or uvloop transport reads in its own sizes.

Back-pressure. Each transport has write-buffer limits (``WRITE_BUFFER_HIGH_BYTES`` /
``WRITE_BUFFER_LOW_BYTES``). On the serving side a full write buffer pauses reading from that
peer until it drains (a client that pipelines requests but does not read its responses stops
being read). At most ``max_pending_requests`` handler tasks run per connection: requests decoded
beyond that wait in a FIFO backlog while reading is paused, and reading resumes once the backlog
is empty and half the slots are free (a few held pulls never reach the cap, a flood does; a
server's default is 1,024, rocketq.remoting.limits, where its other limits are described too).
The calling side never stops reading (that could deadlock two peers that both wait for the other
to read); instead :meth:`Connection.invoke` waits for the buffer to drain before
queueing more. When a connection closes, every call pending on it fails with
:class:`~rocketq.errors.ConnectionClosed` and its close callbacks run (the broker drops client
registrations there); handler tasks already running finish and their responses are dropped.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import math
import time
from collections.abc import Awaitable, Callable, Collection, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast

from rocketq.errors import (
    ConnectionClosed,
    LocalProtocolError,
    RemoteProtocolError,
    RemotingError,
    RemotingTimeout,
    ResponseCode,
    RocketqError,
)
from rocketq.remoting.codec import FrameDecoder, encode
from rocketq.remoting.codes import (
    DEFAULT_MAX_FRAME_SIZE,
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    REQUEST_CODE_NOT_SUPPORTED_REMARK,
)
from rocketq.remoting.command import RemotingCommand
from rocketq.remoting.task_resume import complete_resuming

if TYPE_CHECKING:
    from rocketq.remoting.limits import LimitGuard

log = logging.getLogger(__name__)

RequestHandler = Callable[["Connection", RemotingCommand], Awaitable["RemotingCommand | None"]]
"""``handler(connection, request)``: the response to send, or None to send nothing."""

#: Answers a request at once, or None to send it to the RequestHandler. The answer is a response
#: command, or the response frame already encoded (opaque and response flag in it).
ImmediateHandler = Callable[["Connection", RemotingCommand], "RemotingCommand | bytes | None"]
"""``immediate(connection, request)``: the response when the request can be answered at once,
without awaiting anything, or None to hand the request to the RequestHandler as usual."""


class Deferred:
    """The type of :data:`DEFERRED`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "DEFERRED"


#: What a :data:`DeferringHandler` returns for a request it took and answers later, exactly
#: once, through :meth:`Connection.answer` (from the connection's loop).
DEFERRED: Final = Deferred()

DeferringHandler = Callable[["Connection", RemotingCommand], "RemotingCommand | bytes | Deferred | None"]
"""An :data:`ImmediateHandler` that may also take the request and answer it later: it returns
:data:`DEFERRED`, and the answer comes through :meth:`Connection.answer`. The connection's
immediate handler is one of these."""

LoneHandler = Callable[["Connection", bytes, int], "bytes | None"]
"""``lone(connection, data, max_body)``: the answer frame to ``data`` when it is one whole
request the handler takes and answers at once (a single send under ASYNC_FLUSH, read on its
own), or None, with nothing done, to leave ``data`` to the frame decoder and the handlers.
``max_body`` is the largest length field the connection accepts."""

CloseCallback = Callable[["Connection"], None]

#: The most a serving connection reads at once while a frame larger than its read size is
#: incomplete (asyncio's own read size).
READ_GROWN_MAX_BYTES: Final = 256 * 1024
#: A transport's write buffer above this pauses the writer (serving side: stops reading).
WRITE_BUFFER_HIGH_BYTES: Final = 4 * 1024 * 1024
#: ... and below this resumes it.
WRITE_BUFFER_LOW_BYTES: Final = 1024 * 1024
#: Handler tasks running at once per connection; further requests wait and reading pauses.
DEFAULT_MAX_PENDING_REQUESTS: Final = 10_000
DEFAULT_INVOKE_TIMEOUT_S: Final = 3.0
#: The buffer a calling connection reads into (:class:`CallingConnection`); a larger message
#: arrives in several reads.
CALLING_READ_BUFFER_BYTES: Final = 128 * 1024
#: How long close() waits for connections to flush before aborting them.
DEFAULT_CLOSE_TIMEOUT_S: Final = 5.0

_T = TypeVar("_T")

#: ``quick(buf, n, opaque, *quick_args, max_frame_size)``: the caller's answer made straight from
#: a read ``buf[:n]`` of an idle connection when the read is exactly the response to ``opaque``,
#: or None to decode the read as usual (e.g. :func:`rocketq.client.send_answer.send_result`).
QuickAnswer = Callable[..., _T | None]

#: Call deadlines are rounded up to this grid (one timer per slot, not per call).
_TIMEOUT_TICK_S: Final = 0.01
_TICKS_PER_S: Final = round(1 / _TIMEOUT_TICK_S)

#: per event loop, the connections whose deferred answers wait for the end of the
#: :func:`answers_held` block under way on that loop (absent: none under way)
_HELD_ANSWERS: dict[asyncio.AbstractEventLoop, list[Connection]] = {}


@contextlib.contextmanager
def answers_held(loop: asyncio.AbstractEventLoop) -> Iterator[None]:
    """The deferred answers given as frames (:meth:`Connection.answer`, a DLedger leader's
    PUT_OK answers) on ``loop`` inside this block are written when it ends, one write per
    connection (its frames in order, the same bytes), not from a callback at the end of the
    loop iteration. Called on ``loop``'s thread; a block inside another one on the same loop
    leaves the writes to the outer one."""
    if loop in _HELD_ANSWERS:
        yield
        return
    held: list[Connection] = []
    _HELD_ANSWERS[loop] = held
    try:
        yield
    finally:
        del _HELD_ANSWERS[loop]
        for conn in held:
            conn._flush()


_PAUSED_BY_WRITES: Final = 1
_PAUSED_BY_REQUESTS: Final = 2


def parse_address(addr: str) -> tuple[str, int]:
    """``"host:port"`` or ``"[v6]:port"`` → (host, port)."""
    host, sep, port_text = addr.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise RemotingError(f"bad remoting address {addr!r}: expected host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port_text)


def format_address(peer: object) -> str:
    """A socket address as ``host:port`` (IPv6 hosts in brackets)."""
    if isinstance(peer, tuple) and len(peer) >= 2:
        host, port = peer[0], peer[1]
        if isinstance(host, str) and ":" in host:
            return f"[{host}]:{port}"
        return f"{host}:{port}"
    return str(peer)


class Connection(asyncio.Protocol):
    """One remoting connection (either end). Created by RemotingServer / RemotingClient."""

    def __init__(
        self,
        handler: RequestHandler | None,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        max_pending_requests: int = DEFAULT_MAX_PENDING_REQUESTS,
        serving: bool = False,
        on_made: Callable[[Connection], None] | None = None,
        immediate: DeferringHandler | None = None,
        guard: LimitGuard | None = None,
        lone: LoneHandler | None = None,
        after_read: Callable[[], None] | None = None,
        read_max_bytes: int = 0,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        #: the serving side's read size (0: the transport's own; see "Read size" above), and
        #: whether the transport's read size is above it now (a large frame being read)
        self._read_max = read_max_bytes if serving else 0
        self._read_grown = False
        #: the loop's clock: time.monotonic itself when the loop's time() is asyncio's own
        #: (which returns time.monotonic()), one Python call less per call's deadline slot
        self._loop_time: Callable[[], float] = (
            time.monotonic if type(self._loop).time is asyncio.BaseEventLoop.time else self._loop.time
        )
        #: a call's future: asyncio.Future on this loop made directly when the loop's
        #: create_future is asyncio's own (which makes just that), one Python call less per call
        self._new_future: Callable[[], asyncio.Future[Any]] = (
            functools.partial(asyncio.Future, loop=self._loop)
            if type(self._loop).create_future is asyncio.BaseEventLoop.create_future
            else self._loop.create_future
        )
        # Server limits (rocketq.remoting.limits): the guard, activity since its last sweep,
        # incomplete-frame bytes reported to it and since when the current one is incomplete.
        self._guard = guard
        self._active = True
        #: Incomplete-frame bytes last reported to the guard.
        self.held_bytes = 0
        #: Loop time of the last sweep that saw this connection active.
        self.quiet_since = self._loop.time()
        #: Loop time the incomplete frame now buffered began to arrive; None when none is.
        self.partial_since: float | None = None
        self._handler = handler
        self._immediate = immediate
        self._lone = lone
        #: called at the end of each read whose requests went to the handlers (after their
        #: answers are written): a handler that queued work of its own for the read does it then
        self._after_read = after_read
        self._lone_max_body = max_frame_size - 4  # the decoder's largest length field
        self._max_frame_size = max_frame_size
        self._max_pending_requests = max(1, max_pending_requests)
        self._serving = serving
        self._on_made = on_made
        self._decoder = FrameDecoder(max_frame_size)
        self._transport: asyncio.Transport | None = None
        # opaque -> (future, deadline slot) of the calls waiting for their response (-1: no deadline)
        self._pending: dict[int, tuple[asyncio.Future[RemotingCommand], int]] = {}
        # deadline slot -> {opaque: (future, request code, timeout)} of the calls expiring then
        self._expiring: dict[int, dict[int, tuple[asyncio.Future[RemotingCommand], int, float]]] = {}
        # opaque -> (quick answer, its arguments) of the pending calls made with one
        self._quick: dict[int, tuple[QuickAnswer[object], tuple[object, ...]]] = {}
        self._tasks: dict[int, asyncio.Task[None]] = {}  # running handler tasks by sequence number
        self._task_seq = 0
        self._deferred = 0  # requests an immediate handler took and has not answered yet
        self._backlog: collections.deque[RemotingCommand] = collections.deque()  # requests over the cap
        self._out: list[bytes] = []  # frames waiting for the _flush at the end of this iteration
        self._flush_scheduled = False
        # inside data_received: a batch of frames opened there is written at its end, without a
        # loop callback; True once such a batch is open
        self._receiving = False
        self._receive_batch = False
        #: commands in the read under way (while ``_receiving``)
        self._read_commands = 0
        self._closing = False
        self._lost = False
        self._close_reason: str | None = None
        self._close_callbacks: list[CloseCallback] = []
        self._closed_future: asyncio.Future[None] = self._loop.create_future()
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._read_paused = 0
        self.remote_address = "?"
        self.remote_host = "?"
        self.local_address = "?"

    # -- public -------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once closing started (locally or by the peer); no new calls are accepted."""
        return self._closing or self._lost

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop the connection runs on."""
        return self._loop

    @property
    def pending_calls(self) -> int:
        """Outbound calls waiting for their response."""
        return len(self._pending)

    @property
    def running_requests(self) -> int:
        """Inbound requests whose handler has not finished (deferred answers included)."""
        return len(self._tasks) + self._deferred

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a decoded command (an incomplete frame)."""
        return self._decoder.buffered

    @property
    def receiving(self) -> bool:
        """Inside ``data_received``, handing a read's requests to the handlers (the
        ``after_read`` callback comes at its end)."""
        return self._receiving

    def seen_activity(self) -> bool:
        """True when bytes arrived since the last call, or a request or call is in flight (for
        the idle check); clears the arrival mark."""
        active = self._active
        self._active = False
        return active or bool(self._tasks or self._backlog or self._pending or self._deferred)

    @property
    def reading_paused(self) -> bool:
        """Reading from the peer is paused (write buffer full on the serving side, or at the
        request cap)."""
        return bool(self._read_paused)

    @property
    def writing_paused(self) -> bool:
        """The transport's write buffer is above its high-water mark."""
        return self._write_paused

    def add_close_callback(self, callback: CloseCallback) -> None:
        """Run ``callback(connection)`` once the connection is gone (now, if it already is)."""
        if self._lost:
            callback(self)
        else:
            self._close_callbacks.append(callback)

    def remove_close_callback(self, callback: CloseCallback) -> None:
        with contextlib.suppress(ValueError):
            self._close_callbacks.remove(callback)

    def send(self, cmd: RemotingCommand) -> None:
        """Queue ``cmd`` without waiting for anything (oneway requests, notifications)."""
        if self._closing or self._lost:
            raise ConnectionClosed(f"connection {self.remote_address} is closed; cannot send code {cmd.code}")
        self._enqueue(self._frame(cmd))

    def send_oneway(self, cmd: RemotingCommand) -> None:
        """Mark ``cmd`` oneway (flag bit1) and send it."""
        cmd.flag |= FLAG_ONEWAY
        self.send(cmd)

    def _oneway_frames(self, cmds: Collection[RemotingCommand]) -> bytes:
        """The frames of ``cmds`` marked oneway, joined (empty for none); ConnectionClosed when
        this connection is closing or lost."""
        if self._closing or self._lost:
            raise ConnectionClosed(
                f"connection {self.remote_address} is closed; cannot send {len(cmds)} commands"
            )
        frames = []
        for cmd in cmds:
            cmd.flag |= FLAG_ONEWAY
            frames.append(self._frame(cmd))
        return frames[0] if len(frames) == 1 else b"".join(frames)

    def send_oneway_all(self, cmds: Collection[RemotingCommand]) -> None:
        """:meth:`send_oneway` of each of ``cmds``, in order, their frames in one write: the same
        bytes, and a peer that reads them finds them together."""
        data = self._oneway_frames(cmds)
        if data:
            self._enqueue(data)

    def write_oneway_all(self, cmds: Collection[RemotingCommand]) -> None:
        """:meth:`send_oneway_all` written at once, without the end-of-iteration flush it
        schedules for a first frame (for a caller that joins an iteration's frames itself, as
        the Raft peer links do): the same bytes, behind any frames that wait for that flush."""
        data = self._oneway_frames(cmds)
        if not data:
            return
        if self._out:  # frames of this iteration wait for its flush: these go behind them
            self._out.append(data)
        elif (transport := self._transport) is not None and not transport.is_closing():
            transport.write(data)

    def answer(self, request: RemotingCommand, response: RemotingCommand | bytes | Exception) -> None:
        """Answer a request the immediate handler took (:data:`DEFERRED`), on this connection's
        loop: a response command, the response frame already encoded, or the exception the
        request failed with (answered as a handler's exception is). Dropped, like a task's
        answer, when the connection is gone or the request was oneway. A frame goes out with
        the other frames of this loop iteration, in one write at its end, even when it is the
        first (deferred answers come in runs: a DLedger leader's sends committed together)."""
        self._deferred -= 1
        if not request.flag & FLAG_ONEWAY:
            if isinstance(response, Exception):
                self._respond(request, self._error_response(request, response))
            elif isinstance(response, RemotingCommand):
                self._respond(request, response)
            elif not (self._closing or self._lost):
                self._out.append(response)
                self._flush_with_iteration()
        if self._read_paused & _PAUSED_BY_REQUESTS and self._handler is not None:
            self._request_slot_freed(self._handler)

    def answer_frames(self, answers: Sequence[tuple[RemotingCommand, bytes]]) -> None:
        """:meth:`answer` of several requests the immediate handler took, each with its answer
        frame, in order (a DLedger leader's sends committed together): the same frames in the
        same write, one call for them all."""
        self._deferred -= len(answers)
        if not (self._closing or self._lost):
            out = self._out
            for request, frame in answers:
                if not request.flag & FLAG_ONEWAY:
                    out.append(frame)
            if out:
                self._flush_with_iteration()
        if self._read_paused & _PAUSED_BY_REQUESTS and self._handler is not None:
            self._request_slot_freed(self._handler)

    def _flush_with_iteration(self) -> None:
        """Have the queued frames (deferred answers; on the calling side, requests made inside a
        read of several answers) written with this iteration's other frames, none at once (as
        :meth:`_enqueue` schedules the flush, without its write): at the end of the read under
        way, at the end of the :func:`answers_held` block, else by the end-of-iteration flush."""
        if self._flush_scheduled:
            return
        self._flush_scheduled = True
        if self._receiving:
            self._receive_batch = True
        elif (held := _HELD_ANSWERS.get(self._loop)) is not None:
            held.append(self)  # written at the end of the answers_held block
        else:
            self._loop.call_soon(self._flush)

    async def invoke(
        self, cmd: RemotingCommand, timeout_s: float = DEFAULT_INVOKE_TIMEOUT_S
    ) -> RemotingCommand:
        """Send request ``cmd`` and wait for the response with its opaque.

        Raises RemotingTimeout after ``timeout_s``, ConnectionClosed if the connection drops
        first, LocalProtocolError if ``cmd`` cannot be framed. Waits for the write buffer to drain
        first when it is above its high-water mark."""
        if self._write_paused and not (self._closing or self._lost):
            deadline = self._loop.time() + timeout_s
            await self._wait_writable(cmd, timeout_s)
            timeout_s = deadline - self._loop.time()
        future = self.request(cmd, timeout_s)
        try:
            return await future
        finally:
            if not future.done() or future.cancelled():  # this coroutine was cancelled
                self._forget(cmd.opaque, future)

    def request(
        self, cmd: RemotingCommand, timeout_s: float = DEFAULT_INVOKE_TIMEOUT_S
    ) -> asyncio.Future[RemotingCommand]:
        """Send request ``cmd`` now and return the future of its response: :meth:`invoke`
        without a coroutine, for callers that keep many calls in flight (a future and a done
        callback cost a sender about half of what a task per call does).

        The future fails with RemotingTimeout after ``timeout_s`` and with ConnectionClosed if
        the connection drops first; a cancelled future is forgotten. Raises ConnectionClosed or
        LocalProtocolError at once. Unlike :meth:`invoke` it does not wait for a full write buffer to
        drain: check :attr:`writing_paused` to apply back-pressure."""
        if self._closing or self._lost:
            raise ConnectionClosed(f"connection {self.remote_address} is closed; cannot send code {cmd.code}")
        return self.request_frame(encode(cmd), cmd.opaque, cmd.code, timeout_s)  # its size checked there

    def request_frame(
        self,
        frame: bytes,
        opaque: int,
        code: int,
        timeout_s: float = DEFAULT_INVOKE_TIMEOUT_S,
        quick: QuickAnswer[_T] | None = None,
        quick_args: tuple[object, ...] = (),
    ) -> asyncio.Future[RemotingCommand | _T]:
        """:meth:`request` of a request already framed (``frame``: its whole frame, ``opaque``
        and ``code`` its own). With ``quick`` (see :data:`QuickAnswer`), a read that arrives
        while this is the only call pending and nothing is buffered goes to ``quick`` first:
        what it makes of the read completes the future in place of the response; a None has
        the read decoded as usual."""
        if self._closing or self._lost:
            raise ConnectionClosed(f"connection {self.remote_address} is closed; cannot send code {code}")
        if len(frame) > self._max_frame_size:
            raise LocalProtocolError(
                f"frame of {len(frame)} B (code {code}) exceeds max {self._max_frame_size} B"
            )
        loop = self._loop
        pending = self._pending
        if opaque in pending:
            raise LocalProtocolError(f"opaque {opaque} is already in flight on {self.remote_address}")
        future: asyncio.Future[RemotingCommand | _T] = self._new_future()
        self._enqueue(frame)
        # Deadlines share one timer per _TIMEOUT_TICK_S slot instead of one timer per call. The
        # response removes its call from both tables; the expiry forgets a call whose future was
        # cancelled. An infinite timeout gets no timer: a done callback forgets a cancelled call.
        if timeout_s < math.inf:
            slot = int((self._loop_time() + timeout_s) * _TICKS_PER_S) + 1
            expiring = self._expiring.get(slot)
            if expiring is None:
                expiring = self._expiring[slot] = {}
                loop.call_at(slot / _TICKS_PER_S, self._expire, slot)
            expiring[opaque] = (future, code, timeout_s)  # type: ignore[assignment]
        else:
            slot = -1
            future.add_done_callback(lambda f: self._forget(opaque, f) if f.cancelled() else None)
        pending[opaque] = (future, slot)  # type: ignore[assignment]
        if quick is not None:
            self._quick[opaque] = (quick, quick_args)
        return future

    def _forget(self, opaque: int, future: object) -> None:
        """Drop a call nobody waits for any more (its response, if it comes, is dropped)."""
        entry = self._pending.get(opaque)
        if entry is not None and entry[0] is future:
            del self._pending[opaque]
            self._quick.pop(opaque, None)
            expiring = self._expiring.get(entry[1])
            if expiring is not None:
                expiring.pop(opaque, None)

    def close(self) -> None:
        """Flush what is queued and close; pending calls fail with ConnectionClosed."""
        if self._closing or self._lost:
            return
        self._closing = True
        self._flush()
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        """Close at once, dropping unsent data."""
        self._closing = True
        self._out.clear()
        if self._transport is not None and not self._lost:
            self._transport.abort()

    async def wait_closed(self) -> None:
        """Return once the connection is gone."""
        await asyncio.shield(self._closed_future)

    def cancel_requests(self) -> None:
        """Cancel the handler tasks still running for this connection's inbound requests."""
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()

    def __repr__(self) -> str:
        state = "lost" if self._lost else "closing" if self._closing else "open"
        return f"<Connection {self.local_address} <-> {self.remote_address} {state}>"

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport; uvloop's is not a subclass of asyncio.Transport, hence no isinstance.
        self._transport = transport = cast(asyncio.Transport, transport)
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH_BYTES, low=WRITE_BUFFER_LOW_BYTES)
        if self._read_max and type(getattr(transport, "max_size", None)) is int:
            transport.max_size = self._read_max  # type: ignore[attr-defined]
        else:  # a transport that reads in sizes of its own (TLS, uvloop)
            self._read_max = 0
        peer = transport.get_extra_info("peername")
        self.remote_address = format_address(peer)
        self.remote_host = str(peer[0]) if isinstance(peer, tuple) and peer else self.remote_address
        self.local_address = format_address(transport.get_extra_info("sockname"))
        log.debug("connection %s <-> %s open", self.local_address, self.remote_address)
        if self._on_made is not None:
            self._on_made(self)

    def _took_quick(self, buf: bytes | bytearray, n: int) -> bool:
        """Whether the read ``buf[:n]`` completed the one call pending through its quick
        answer (made with one, nothing buffered), without the decoder."""
        quick = self._quick
        if len(quick) != 1 or len(self._pending) != 1 or not self._decoder.idle:
            return False
        ((opaque, (answer, args)),) = quick.items()
        made = answer(buf, n, opaque, *args, self._max_frame_size)
        if made is None:
            return False
        self._active = True
        del quick[opaque]
        future, slot = self._pending.pop(opaque)
        expiring = self._expiring.get(slot)
        if expiring is not None:
            expiring.pop(opaque, None)
        if not future.done():  # last: the task awaiting it may run inside (task_resume)
            complete_resuming(future, made, self._loop)
        return True

    def data_received(self, data: bytes) -> None:
        if self._quick and self._took_quick(data, len(data)):
            return
        self._received(data)

    def _received(self, data: bytes) -> None:
        """A read not taken by a quick answer: to the lone handler, else the decoder."""
        lone = self._lone
        if (
            lone is not None
            and self._decoder.idle
            and not (self.held_bytes or self._backlog or self._closing or self._lost)
        ):
            # one whole request in this read that the lone handler answers at once: what the
            # decoder, _dispatch and _enqueue below do for it, without them
            frame = lone(self, data, self._lone_max_body)
            if frame is not None:
                self._active = True
                if self._flush_scheduled:  # frames already wait for this iteration's flush
                    self._out.append(frame)
                elif (transport := self._transport) is not None and not transport.is_closing():
                    transport.write(frame)
                return
        try:
            commands = self._decoder.feed(data)
        except RemoteProtocolError as exc:
            self._protocol_error(str(exc))
            return
        self._active = True
        if self._read_max and (self._read_grown or not self._decoder.idle):
            self._size_next_read()
        guard = self._guard
        if guard is not None:
            held = self._decoder.buffered
            if (held or self.held_bytes) and guard.account(self, held, bool(commands)):
                return
        pending = self._pending
        quick = self._quick
        self._read_commands = len(commands)
        self._receiving = True
        try:
            for cmd in commands:
                if cmd.flag & FLAG_RESPONSE:
                    entry = pending.pop(cmd.opaque, None)
                    if quick:
                        quick.pop(cmd.opaque, None)
                    if entry is None:
                        log.debug("dropping unmatched response %r from %s", cmd, self.remote_address)
                        continue
                    future, slot = entry
                    expiring = self._expiring.get(slot)
                    if expiring is not None:
                        expiring.pop(cmd.opaque, None)
                    if not future.done():
                        complete_resuming(future, cmd, self._loop)
                else:
                    self._dispatch(cmd)
        finally:
            self._receiving = False
            if self._receive_batch:  # the frames queued after this call's first one, in one write
                self._receive_batch = self._flush_scheduled = False
                if self._out:
                    self.flush()
            if self._after_read is not None:
                self._after_read()

    def _size_next_read(self) -> None:
        """The next read's size: what the incomplete frame misses, between the read size and
        :data:`READ_GROWN_MAX_BYTES`; the read size again once no frame is incomplete."""
        read_max = self._read_max
        size = min(max(self._decoder.missing, read_max), READ_GROWN_MAX_BYTES)
        transport = self._transport
        if transport is not None:
            transport.max_size = size  # type: ignore[attr-defined]
        self._read_grown = size != read_max

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._closing = True
        if self.held_bytes and self._guard is not None:
            self._guard.account(self, 0, False)
        self._out.clear()
        self._backlog.clear()
        reason = self._close_reason or (str(exc) if exc else None)
        log.debug("connection %s <-> %s closed%s", self.local_address, self.remote_address, _suffix(reason))
        pending = [future for future, _ in self._pending.values()]
        self._pending.clear()
        self._expiring.clear()
        self._quick.clear()
        for future in pending:
            if not future.done():
                future.set_exception(self._closed_error(reason))
        waiters = self._drain_waiters
        self._drain_waiters = []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_exception(self._closed_error(reason))
        if not self._closed_future.done():
            self._closed_future.set_result(None)
        callbacks = self._close_callbacks
        self._close_callbacks = []
        for callback in callbacks:
            try:
                callback(self)
            except Exception:
                log.exception("close callback %r for %s failed", callback, self.remote_address)

    def pause_writing(self) -> None:
        self._write_paused = True
        if self._serving:
            self._pause_reading(_PAUSED_BY_WRITES)

    def resume_writing(self) -> None:
        self._write_paused = False
        waiters = self._drain_waiters
        self._drain_waiters = []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
        if self._serving:
            self._resume_reading(_PAUSED_BY_WRITES)

    # -- internals ----------------------------------------------------------------------------

    def _closed_error(self, reason: str | None) -> ConnectionClosed:
        return ConnectionClosed(f"connection {self.remote_address} closed{_suffix(reason)}")

    def _frame(self, cmd: RemotingCommand) -> bytes:
        frame = encode(cmd)
        if len(frame) > self._max_frame_size:
            raise LocalProtocolError(
                f"frame of {len(frame)} B (code {cmd.code}) exceeds max {self._max_frame_size} B"
            )
        return frame

    def _enqueue(self, frame: bytes) -> None:
        # The first frame of a loop iteration is written at once (no added latency); frames
        # queued after it in the same iteration go out together in one write from _flush: at
        # the end of data_received when the first was queued there (the answers to the requests
        # of one read; no loop callback), else at the end of the iteration.
        if self._flush_scheduled:
            self._out.append(frame)
            return
        self._flush_scheduled = True
        if self._receiving:
            self._receive_batch = True
        else:
            self._loop.call_soon(self._flush)
        transport = self._transport
        if transport is not None and not self._lost and not transport.is_closing():
            transport.write(frame)

    def _flush(self) -> None:
        self._flush_scheduled = False
        self.flush()

    def flush(self) -> None:
        """Write the frames queued for the end of this loop iteration now (frames queued after
        it in the same iteration still go out at its end)."""
        out = self._out
        if not out:
            return
        self._out = []
        transport = self._transport
        if transport is None or self._lost or transport.is_closing():
            return
        transport.write(out[0] if len(out) == 1 else b"".join(out))

    def _expire(self, slot: int) -> None:
        expiring = self._expiring.pop(slot, None)
        if not expiring:
            return
        pending = self._pending
        quick = self._quick
        for opaque, (future, code, timeout_s) in expiring.items():
            pending.pop(opaque, None)  # a call is in both tables until its response or expiry
            if quick:
                quick.pop(opaque, None)
            if not future.done():
                future.set_exception(
                    RemotingTimeout(
                        f"no response to code {code} (opaque {opaque}) from {self.remote_address} "
                        f"within {timeout_s:g} s"
                    )
                )

    async def _wait_writable(self, cmd: RemotingCommand, timeout_s: float) -> None:
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._drain_waiters.append(waiter)
        try:
            await asyncio.wait_for(waiter, timeout_s)
        except TimeoutError:
            raise RemotingTimeout(
                f"write buffer to {self.remote_address} did not drain within {timeout_s:g} s "
                f"(code {cmd.code})"
            ) from None

    def _protocol_error(self, reason: str) -> None:
        log.warning("closing connection from %s: %s", self.remote_address, reason)
        self._close_reason = reason
        self.abort()

    def _pause_reading(self, why: int) -> None:
        if not self._read_paused and self._transport is not None and not self._lost:
            self._transport.pause_reading()
        self._read_paused |= why

    def _resume_reading(self, why: int) -> None:
        if not self._read_paused & why:
            return
        self._read_paused &= ~why
        if not self._read_paused and self._transport is not None and not self._lost:
            self._transport.resume_reading()
            if self.partial_since is not None:  # its age counts from now: we were not reading
                self.partial_since = self._loop.time()

    def _dispatch(self, cmd: RemotingCommand) -> None:
        handler = self._handler
        if handler is None:
            if not cmd.flag & FLAG_ONEWAY:
                self._respond(
                    cmd,
                    RemotingCommand.create_response(
                        cmd,
                        ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                        REQUEST_CODE_NOT_SUPPORTED_REMARK.format(code=cmd.code),
                    ),
                )
            return
        immediate = self._immediate
        if immediate is not None and not self._backlog:
            try:
                response = immediate(self, cmd)
            except Exception as exc:
                response = self._error_response(cmd, exc)
            if response is not None:
                if isinstance(response, Deferred):  # answered later through answer(): counts as running
                    self._deferred += 1
                    if len(self._tasks) + self._deferred >= self._max_pending_requests:
                        self._pause_reading(_PAUSED_BY_REQUESTS)
                    return
                if cmd.flag & FLAG_ONEWAY:
                    return
                if isinstance(response, RemotingCommand):
                    self._respond(cmd, response)
                elif not (self._closing or self._lost):
                    self._enqueue(response)  # a frame the handler encoded itself
                return
        if self._backlog or len(self._tasks) + self._deferred >= self._max_pending_requests:
            # At the cap: park the (already decoded) request and stop reading more.
            self._backlog.append(cmd)
            self._pause_reading(_PAUSED_BY_REQUESTS)
            return
        self._start(handler, cmd)

    def _start(self, handler: RequestHandler, cmd: RemotingCommand) -> None:
        seq = self._task_seq = self._task_seq + 1
        self._tasks[seq] = self._loop.create_task(self._serve(handler, cmd, seq))

    async def _serve(self, handler: RequestHandler, cmd: RemotingCommand, seq: int) -> None:
        try:
            try:
                response = await handler(self, cmd)
            except Exception as exc:
                response = self._error_response(cmd, exc)
            if response is not None and not cmd.flag & FLAG_ONEWAY:
                self._respond(cmd, response)
        finally:
            tasks = self._tasks
            tasks.pop(seq, None)
            if self._read_paused & _PAUSED_BY_REQUESTS:
                self._request_slot_freed(handler)

    def _error_response(self, cmd: RemotingCommand, exc: Exception) -> RemotingCommand:
        """The answer to a request whose handler raised ``exc``: its wire code (SYSTEM_ERROR for
        anything that is not a RocketqError) with the message as remark."""
        if isinstance(exc, RocketqError):
            code = int(exc.code)
            log.debug("request %r from %s failed: %s", cmd, self.remote_address, exc)
        else:
            code = ResponseCode.SYSTEM_ERROR
            log.warning("handler failed for %r from %s", cmd, self.remote_address, exc_info=exc)
        return RemotingCommand.create_response(cmd, code, str(exc) or type(exc).__name__)

    def _request_slot_freed(self, handler: RequestHandler) -> None:
        tasks = self._tasks
        backlog = self._backlog
        limit = self._max_pending_requests
        while backlog and len(tasks) + self._deferred < limit and not self._lost:
            self._start(handler, backlog.popleft())
        if not backlog and len(tasks) + self._deferred <= limit // 2:
            self._resume_reading(_PAUSED_BY_REQUESTS)

    def _respond(self, request: RemotingCommand, response: RemotingCommand) -> None:
        if self._closing or self._lost:
            log.debug("dropping response to %r: connection %s is closed", request, self.remote_address)
            return
        self._enqueue(self.response_frame(request, response))

    def response_frame(self, request: RemotingCommand, response: RemotingCommand | Exception) -> bytes:
        """The frame that answers ``request`` with ``response``, or with the error response of
        an exception the request failed with, as a handler's are written."""
        if isinstance(response, Exception):
            response = self._error_response(request, response)
        response.opaque = request.opaque
        response.flag |= FLAG_RESPONSE
        try:
            frame = self._frame(response)
        except Exception as exc:
            log.warning("cannot send response to %r to %s: %s", request, self.remote_address, exc)
            frame = encode(
                RemotingCommand.create_response(
                    request, ResponseCode.SYSTEM_ERROR, f"response not sendable: {exc}"
                )
            )
        return frame


def _suffix(reason: str | None) -> str:
    return f": {reason}" if reason else ""


class CallingConnection(Connection, asyncio.BufferedProtocol):
    """The calling side's connection (:class:`~rocketq.remoting.client.RemotingClient`): a
    :class:`Connection` that asyncio reads into one buffer of its own.

    Why. asyncio's plain transport reads with ``recv(256 KiB)`` into a new bytes object each time;
    in a process whose allocator has not yet raised glibc's mmap threshold above that size (a
    small client process), every read then costs an ``mmap``, an ``mremap`` and a ``munmap``,
    about 30 µs of CPU per round trip in our measurements (docs/benchmarks.md, "The asyncio
    producer's first attempt and its reads"). Reading into a buffer kept for the
    connection allocates nothing; a read that completes a call's quick answer is taken from the
    buffer itself, and any other read is copied out once and decoded as always.
    """

    def __init__(self, handler: RequestHandler | None, **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self._read_buf = bytearray(CALLING_READ_BUFFER_BYTES)
        self._read_view = memoryview(self._read_buf)
        #: a frame went out alone (no flush scheduled) since the last read or flush
        self._wrote_alone = False

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._read_view

    def buffer_updated(self, nbytes: int) -> None:
        self._wrote_alone = False
        if self._quick and self._took_quick(self._read_buf, nbytes):
            return
        self._received(self._read_view[:nbytes].tobytes())

    def data_received(self, data: bytes) -> None:
        self._wrote_alone = False
        super().data_received(data)

    def _enqueue(self, frame: bytes) -> None:
        # A caller with one call in flight writes a request, waits for its answer, writes the
        # next: the end-of-iteration flush that Connection._enqueue schedules with each first
        # frame then has nothing to join and costs the loop an iteration of its own per call
        # (an epoll_wait and a callback). So a frame with nothing queued before it, outside
        # data_received, is written at once without it when no frame went out that way since
        # the last read or flush; a second one (a burst of calls made in one iteration, with no
        # answer read between) is queued for the flush as the frames after a first one are,
        # and the rest of the burst joins it: the same bytes in the same order, and a burst
        # still goes out in two writes.
        if self._receiving and self._read_commands > 1:
            # inside a read of several answers: the calls they resumed make their next requests
            # here, and they all wait for the read's end, the first too, and leave in one write.
            # A first frame written at once split each burst in two on the serving side, and a
            # DLedger leader made a proposal of that one send (its quorum round costs what a
            # full one does); see the module docstring
            self._out.append(frame)
            self._flush_with_iteration()
            return
        if self._flush_scheduled or self._receiving or self._out:
            super()._enqueue(frame)
            return
        if not self._wrote_alone:
            self._wrote_alone = True
            transport = self._transport
            if transport is not None and not self._lost and not transport.is_closing():
                transport.write(frame)
            return
        self._out.append(frame)
        self._flush_scheduled = True
        self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._wrote_alone = False
        super()._flush()


async def close_connections(connections: Collection[Connection], timeout_s: float) -> None:
    """Close ``connections`` (flushing what is queued) and wait for them to go; abort the ones
    still open after ``timeout_s`` (a peer that does not take the queued bytes)."""
    for conn in connections:
        conn.close()
    if not connections:
        return
    waits = [asyncio.ensure_future(conn.wait_closed()) for conn in connections]
    _, not_done = await asyncio.wait(waits, timeout=timeout_s)
    for waiter in not_done:
        waiter.cancel()
    for conn in connections:
        if not conn._lost:
            conn.abort()
