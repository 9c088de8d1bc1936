"""The Raft peer transport: remoting connections between the members of a group.

Each member listens on its ``dLegerPeers`` address with a :class:`RemotingServer`; the Raft codes
(:mod:`rocketq.ha.peer_codec`) are answered by an immediate handler that decodes the message and
hands it to the driver inside ``data_received`` (no task per message). Other request codes go
to an optional handler (the test node's control codes).

Outbound, every peer has **two links, each its own TCP connection**: *control* (pre-votes, votes,
heartbeats, their replies, TimeoutNow: ``raft_types.is_control``) and *bulk* (appends and their
replies). A vote or heartbeat therefore never waits behind megabytes of entries in a socket
buffer: the kernel and the peer's reader serve the two connections independently.

Flow control. Sending never blocks the event loop and never buffers without bound:

* the Raft core keeps at most ``max_inflight_msgs`` / ``max_inflight_bytes`` appends in flight
  per follower;
* a link whose transport write buffer is above the remoting high-water mark (4 MiB) drops what
  it is given (counted in :attr:`PeerLink.dropped`); the core resends after its resend timeout;
* a link that is not connected drops too. Every link connects at start and keeps itself
  connected in the background, whether or not anything is sent on it: a failed attempt or a
  lost connection is followed by another after a backoff (``RECONNECT_MIN_S`` doubling to
  ``RECONNECT_MAX_S``; back to the minimum after a connection that lasted that long).

Loss is part of the core's model, so dropping is always safe.

Coalescing (with ``merge_bytes`` > 0, batch push on). Bulk messages are not written at once but
at the end of the loop iteration, and consecutive appends to the same follower in the same term
whose entries continue each other are merged into one message (first ``prev``, the entries of
both, the later commit index) up to ``merge_bytes`` of entries: many proposals of one iteration
(concurrent producers) then cost one frame per follower instead of one each. The follower sees
exactly what it would have seen from the messages in sequence, and its one reply acknowledges
them all (the core frees every in-flight slot up to the acknowledged index). The merge keeps the
entries in a list with their running size (constant work per merged message, whatever the batch
holds). Likewise a successful append reply is replaced by a later one of the same iteration that
says at least as much (same term; match, written and fsynced ends no lower): a follower that
acknowledges an append and then its write sends one reply.

Sending at once. A leader's new entries are not left for the end of the iteration: the driver
calls :meth:`PeerTransport.flush` after each proposal (having called :meth:`PeerTransport.hold`
before it, so that the proposal's messages schedule no end-of-iteration flush that would find
nothing left), and a flush also writes what the link's
connection holds for the iteration's end (a second frame of an iteration waits there). On a
broker's loop the rest of an iteration can be long (the sends that arrived meanwhile), and what
only the leader holds when it dies is gone (never acknowledged; a new leader writes over it).
Likewise a follower's reply to the appends of one read is written at the end of that read
(the server's ``after_read``), not from a callback at the end of the iteration: one reply, as
its replies supersede each other, and no loop iteration of its own. A link writes
what it is given at once (``Connection.write_oneway_all``): the transport has already joined
the frames of a flush for each peer, so the connection's own end-of-iteration flush would find
nothing to join and only cost a loop callback per write.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Final

from rocketq.errors import RocketqError
from rocketq.ha import peer_codec
from rocketq.ha.raft_types import Append, AppendReply, Entry, Message, entries_size, is_control
from rocketq.remoting.client import RemotingClient
from rocketq.remoting.command import RemotingCommand
from rocketq.remoting.connection import Connection, RequestHandler, answers_held, parse_address
from rocketq.remoting.server import RemotingServer

log = logging.getLogger(__name__)

RECONNECT_MIN_S: Final = 0.05
#: at most this long between attempts: a member that was restarted is reached this soon after it
#: listens again (a leader's appends to it are dropped until then; a rolling restart stops the
#: leader next, and its successor needs this member for its quorum)
RECONNECT_MAX_S: Final = 0.25
CONNECT_TIMEOUT_S: Final = 1.0
_HANDLED: Final = RemotingCommand(0)  # the immediate handler's "done" (oneway: nothing is sent)


class PeerLink:
    """One outbound connection to one peer; sends are fire-and-forget, dropped when not writable."""

    def __init__(self, addr: str, name: str) -> None:
        self.addr = addr
        self.name = name
        self._client = RemotingClient(connect_timeout_s=CONNECT_TIMEOUT_S)
        self._conn: Connection | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._backoff = RECONNECT_MIN_S
        self._next_attempt = 0.0
        self._closed = False
        self.sent = 0
        self.dropped = 0

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.closed

    def send(self, code: int, body: bytes) -> bool:
        return self.send_all([(code, body)]) == 1

    def send_all(self, messages: list[tuple[int, bytes]]) -> int:
        """:meth:`send` of each ``(code, body)``, their frames in one write (all dropped, as one
        is, when the link is down or its buffer full); returns how many were sent."""
        conn = self._conn
        if conn is None or conn.closed:
            self._conn = None
            self._ensure_connecting()
            self.dropped += len(messages)
            return 0
        if conn.writing_paused:
            self.dropped += len(messages)
            return 0
        try:
            # written at once: the transport joins an iteration's frames per peer itself
            conn.write_oneway_all([RemotingCommand(code, body=body) for code, body in messages])
        except RocketqError:
            self.dropped += len(messages)
            return 0
        self.sent += len(messages)
        return len(messages)

    def flush(self) -> None:
        """Write what the connection holds for the end of this loop iteration now."""
        conn = self._conn
        if conn is not None:
            conn.flush()

    def _ensure_connecting(self) -> None:
        if self._closed or self._connecting is not None:
            return
        self._connecting = asyncio.get_running_loop().create_task(self._keep_connected())

    async def _keep_connected(self) -> None:
        """Connect, and again whenever the connection is lost or an attempt fails (backoff), until
        the link is closed: a link is up whenever its peer is, also one nothing is sent on (a
        follower's links to the other followers), so a new leader's first appends reach every
        follower at once instead of being dropped while a link connects (the core would resend
        them only after the follower's next heartbeat reply)."""
        loop = asyncio.get_running_loop()
        try:
            while not self._closed:
                delay = self._next_attempt - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                try:
                    conn = await self._client.connection(self.addr, CONNECT_TIMEOUT_S)
                except (RocketqError, OSError) as exc:
                    log.debug("raft link %s to %s: %s", self.name, self.addr, exc)
                    self._retry_later(loop)
                    continue
                self._conn = conn
                up = loop.time()
                await conn.wait_closed()
                if loop.time() - up >= RECONNECT_MAX_S:
                    self._backoff = RECONNECT_MIN_S  # it was up for a while: try again soon
                self._retry_later(loop)
        finally:
            self._connecting = None

    def _retry_later(self, loop: asyncio.AbstractEventLoop) -> None:
        self._next_attempt = loop.time() + self._backoff
        self._backoff = min(self._backoff * 2, RECONNECT_MAX_S)

    async def close(self) -> None:
        self._closed = True
        task = self._connecting
        if task is not None:
            task.cancel()
        await self._client.close(timeout_s=0.5)


class _Merging:
    """Appends to one follower being merged (see the module comment): the first one's head, the
    entries of all of them, their size, the latest commit index."""

    __slots__ = ("commit", "entries", "first", "size")

    def __init__(self, first: Append) -> None:
        self.first = first
        self.entries: list[Entry] = list(first.entries)
        self.size = -1  # summed when a second append comes (most of them leave alone)
        self.commit = first.commit

    def add(self, second: Append, merge_bytes: int) -> bool:
        first = self.first
        if first.term != second.term or second.prev_index != first.prev_index + len(self.entries):
            return False
        if not self.entries and second.prev_term != first.prev_term:
            return False
        if self.size < 0:
            self.size = entries_size(self.entries)
        size = self.size + entries_size(second.entries)
        if self.entries and size > merge_bytes:
            return False
        self.entries.extend(second.entries)
        self.size = size
        self.commit = max(self.commit, second.commit)
        return True

    def message(self) -> Append:
        f = self.first
        if len(self.entries) == len(f.entries) and self.commit == f.commit:
            return f
        return Append(f.src, f.dst, f.term, f.prev_index, f.prev_term, tuple(self.entries), self.commit)


def _supersedes(later: AppendReply, earlier: Message | _Merging) -> bool:
    """A successful reply that tells the leader everything ``earlier`` (one to the same leader,
    sent before it in the same iteration) did."""
    return (
        isinstance(earlier, AppendReply)
        and earlier.success
        and later.success
        and earlier.term == later.term
        and later.match_index >= earlier.match_index
        and later.appended_index >= earlier.appended_index
        and later.synced_index >= earlier.synced_index
    )


class _Shared:
    """A raw reader that reads each range of entries once (one flush's appends to the followers)."""

    __slots__ = ("_read", "_seen")

    def __init__(self, read: peer_codec.RawReader) -> None:
        self._read = read
        self._seen: dict[tuple[int, int], bytes] = {}

    def __call__(self, index: int, size: int) -> bytes:
        raw = self._seen.get((index, size))
        if raw is None:
            raw = self._seen[(index, size)] = self._read(index, size)
        return raw


class PeerTransport:
    """Listens on ``listen_addr`` and sends Raft messages to the other members.

    ``deliver(message, raw)`` is called on the event loop for every Raft message addressed to
    ``self_id`` (``raw``: an append's entries as the leader's store holds them, else None);
    ``other`` (optional) serves any other request code. ``raw_reader`` (optional) gives appends
    their entries' store bytes (peer_codec form 1)."""

    def __init__(
        self,
        self_id: str,
        listen_addr: str,
        peers: Mapping[str, str],
        deliver: Callable[[Message, list[bytes] | None], None],
        other: RequestHandler | None = None,
        merge_bytes: int = 0,
        raw_reader: peer_codec.RawReader | None = None,
    ) -> None:
        self.self_id = self_id
        self.merge_bytes = merge_bytes
        self._raw_reader = raw_reader
        self._bulk_out: dict[str, list[Message | _Merging]] = {}
        self._flush_scheduled = False
        #: an append of the read being handled was delivered: what is queued for the bulk links
        #: is flushed at the read's end
        self._answering = False
        #: a proposal is being made: what it queues is flushed by its caller (:meth:`hold`)
        self._holding = False
        self.merged = 0
        host, port = parse_address(listen_addr)
        self._deliver = deliver
        self._other = other
        self.server = RemotingServer(
            host, port, self._handle, immediate=self._immediate, after_read=self._read_done
        )
        self.control = {p: PeerLink(a, f"{self_id}->{p}/control") for p, a in peers.items()}
        self.bulk = {p: PeerLink(a, f"{self_id}->{p}/bulk") for p, a in peers.items()}
        self.received = 0

    async def start(self) -> None:
        await self.server.start()
        for links in (self.control, self.bulk):
            for link in links.values():
                link._ensure_connecting()

    async def close(self) -> None:
        for links in (self.control, self.bulk):
            for link in links.values():
                await link.close()
        await self.server.close(timeout_s=0.5)

    def send(self, message: Message) -> bool:
        """Send (control) or queue for the end of this loop iteration (bulk, when coalescing)."""
        control = is_control(message)
        links = self.control if control else self.bulk
        link = links.get(message.dst)
        if link is None:
            log.warning("raft message for unknown member %r dropped", message.dst)
            return False
        if control or self.merge_bytes <= 0:
            code, body = peer_codec.encode(message, self._raw_reader)
            return link.send(code, body)
        queue = self._bulk_out.setdefault(message.dst, [])
        if isinstance(message, Append):
            last = queue[-1] if queue else None
            if isinstance(last, _Merging) and last.add(message, self.merge_bytes):
                self.merged += 1
                return True
            queue.append(_Merging(message))
        elif queue and isinstance(message, AppendReply) and _supersedes(message, queue[-1]):
            queue[-1] = message
            self.merged += 1
            return True
        else:
            queue.append(message)
        if not (self._flush_scheduled or self._answering or self._holding):
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_bulk)
        return True

    def hold(self) -> None:
        """What is queued for the bulk links from now on waits for the caller's :meth:`flush`
        (a leader's proposal: flushed as soon as its step is done), with no end-of-iteration
        callback of its own."""
        self._holding = True

    def _flush_bulk(self) -> None:
        self._flush_scheduled = False
        self.flush()

    def flush(self) -> None:
        """Send what is queued for the end of this loop iteration now (a leader's new entries:
        the sooner they leave, the shorter the time only the leader holds them). Messages
        queued after it in this iteration still leave at its end."""
        self._holding = False
        out, self._bulk_out = self._bulk_out, {}
        reader = self._raw_reader
        tails: peer_codec.AppendTails | None = None
        if len(out) > 1:  # the followers get the same entries: read and encode them once
            tails = {}
            if reader is not None:
                reader = _Shared(reader)
        for dst, messages in out.items():
            encoded = []
            for queued in messages:
                message = queued.message() if isinstance(queued, _Merging) else queued
                encoded.append(peer_codec.encode(message, reader, tails))
            # one write per follower: it reads them together, and answers them with one reply
            self.bulk[dst].send_all(encoded)
        for link in self.bulk.values():  # a connection holds a second frame of an iteration
            link.flush()

    def _immediate(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        if request.code not in peer_codec.RAFT_CODES:
            return None
        message, raw = peer_codec.decode_raw(request.code, request.body)
        if message.dst != self.self_id:
            log.warning("raft message for %r arrived at %r; dropped", message.dst, self.self_id)
            return _HANDLED
        self.received += 1
        if type(message) is not Append:
            # the sends a leader's commit answers here leave together at the end of this
            # delivery, one write per producer connection (RaftGroupLog.after_delivery)
            with answers_held(conn.loop):
                self._deliver(message, raw)
        elif conn.receiving:
            # a follower's replies to the appends of one read leave together at its end
            # (_read_done), not from a callback at the end of the loop iteration
            self._answering = True
            self._deliver(message, raw)
        else:  # not within a read (no _read_done to come): its reply leaves when it returns
            self._answering = True
            try:
                self._deliver(message, raw)
            finally:
                self._read_done()
        return _HANDLED

    def _read_done(self) -> None:
        """The end of a read of the peers' messages: what its appends' deliveries queued (a
        follower's replies, superseding each other) is written now."""
        if self._answering:
            self._answering = False
            if self._bulk_out and not self._flush_scheduled:
                self.flush()

    async def _handle(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        if self._other is not None:
            return await self._other(conn, request)
        return RemotingCommand.create_response(request, 3, f"request code {request.code} not supported")
