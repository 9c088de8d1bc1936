"""The asyncio driver of DLedger mode: a :class:`RaftNode` over an :class:`EntryStore` and peers.

One idea: carrying out the pure core's actions (persist, send, apply, acknowledge) on real files
and sockets, and feeding it what they answer; the parts are in their own modules (transport,
entry store, event log, config), what stays here is the loop that ties them to the core.

:class:`RaftGroupLog` is the :class:`~rocketq.ha.replicated_log.ReplicatedLog` of a Raft group.
It owns the core, the entry store and the peer transport, all on one event loop:

* **Events in.** Ticks every ``tick_ms`` from the loop's monotonic clock (``Tick(elapsed_ms)``,
  the remainder carried), peer messages from the transport (delivered inside ``data_received``),
  proposals from :meth:`append`, write completions, transfer requests. The core's RNG is seeded
  from ``DLedgerConfig.seed``.
* **Actions out, in order** (``_step``): an event's actions are carried out before the next event
  is fed; events an action produces (``Persisted`` after a write) queue behind them.

  =====================  ===================================================================
  PersistHardState       ``EntryStore.set_term`` (durable) on the loop, before the next action
  TruncateLog            ``EntryStore.truncate``; the flusher's pending report is discarded
  AppendEntries          follower: the leader's entry bytes verbatim
                         (``EntryStore.append_entry_bytes``: position, term order and chain
                         checked); leader: the batch being proposed written together
                         (``EntryStore.append_run``) at the positions its records were
                         encoded for (checked), other entries (its NOOP) one by one
                         (``EntryStore.append_raw_at``); then ``Persisted(synced=False)``;
                         then the flusher is woken
  Send                   :class:`~rocketq.ha.peer_transport.PeerTransport` (never blocks)
  Apply                  ``committed_pos`` advances; the committed index goes to the store
                         and into ``checkpoint`` every ``checkpoint_interval_ms``
  ProposalResult         the outcome of each proposal it answers (a run of them proposed
                         together) goes to its :meth:`append_batch` caller as an
                         :class:`AppendResult`
  RoleChanged            ``state`` changes (the leader's address from
                         ``DLedgerConfig.client_addresses``, else its peer address), the
                         ``on_state_change`` callbacks run
  =====================  ===================================================================

  With ``DLedgerConfig.event_log_path`` set, role changes, votes granted, commits and truncations
  also go to the member's :class:`~rocketq.ha.event_log.EventLog` as they are carried out.

* **Group commit.** One flusher task runs ``EntryStore.flush_unlocked`` (fsync of data, then index) on a
  worker thread whenever something was written, reporting ``Persisted(synced=True)`` for what
  each fsync covered: every write that arrives during an fsync is covered by the next one. Under
  ``AckPolicy.APPENDED`` (nobody waits for the fsync) a thread of its own fsyncs what was written
  every ``DLedgerConfig.flush_file_interval_ms`` instead (broker.conf ``flushFileInterval``,
  DLedger's 10 ms by default), taking turns with the checkpoint writes; its report waits for the
  loop's next peer message or tick (the loop is not woken for it).
* **Positions.** The leader asks the store where the next entries go (:meth:`EntryStore.placer`),
  encodes each record for its position and proposes them together (:meth:`append_batch`: one
  ``ProposeBatch``, one write of the entries, one append message per follower), all in one
  synchronous stretch of the loop, so nothing can be appended in between. A record whose size
  pushes it into the next data file is encoded a second time for that position. The leader
  keeps the bytes it wrote, for replication and dispatch; a follower writes those it received
  and keeps none (its dispatch reads committed runs from the store).

The loop is the broker's own in a broker process (its requests share it), else a loop thread
of its own. The store's open, the fsync and term scan that build the core at start, the
flusher's fsyncs, checkpoints and the close run in the executor or the flusher thread; the
flusher's fsyncs (``EntryStore.flush_unlocked``) hold no lock, so appends go on during them.
Not done: the store's other synchronous work (mmap writes, a new data file, ``currterm``
fsyncs on a term change, a follower's truncation, a lagging follower's reads) runs on the loop.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import operator
import random
import struct
import threading
from collections.abc import Callable, Iterator, Sequence

from rocketq.errors import ConfigError, DiskFull
from rocketq.ha.driver_config import DLedgerConfig
from rocketq.ha.entry_format import BODY_OFFSET, MAGIC_NOOP, MAGIC_NORMAL, EntryNotFound, EntryStoreError
from rocketq.ha.entry_store import EntryStore
from rocketq.ha.event_log import EventLog
from rocketq.ha.group_config import LedgerSpec
from rocketq.ha.handover import choose_target, views_of
from rocketq.ha.paced import paced_turns
from rocketq.ha.peer_codec import RawEntries
from rocketq.ha.peer_transport import PeerTransport
from rocketq.ha.raft import RaftNode
from rocketq.ha.raft_log import Compacted, RaftLog
from rocketq.ha.raft_types import (
    AckPolicy,
    Action,
    Append,
    AppendEntries,
    Apply,
    Entry,
    EntryKind,
    Event,
    HardState,
    Message,
    Persisted,
    PersistHardState,
    ProposalResult,
    ProposeBatch,
    Receive,
    Role,
    RoleChanged,
    Send,
    Tick,
    TransferLeadership,
    TruncateLog,
    VoteReply,
)
from rocketq.ha.replicated_log import AppendResult, AppendStatus, LogState, RecordEncoder
from rocketq.ha.sent_runs import SentRuns
from rocketq.remoting.connection import RequestHandler
from rocketq.tasks import settle

log = logging.getLogger(__name__)

__all__ = ["RaftGroupLog", "config_of", "open_group_log"]

#: The leader keeps the bytes of the entries it wrote last, up to this much, for replication.
SENT_CACHE_BYTES = 16 << 20
#: After a write fails on a full disk the member takes no messages for this long, then tries again.
DISK_FULL_RETRY_MS = 1000
_POS = struct.Struct(">q")  # an entry's ``pos`` field, at byte 24 of its header
_POS_OFFSET = 24

#: ``done(slot, outcome)``: where :meth:`RaftGroupLog.append_batch` reports each append's outcome
BatchDone = Callable[[int, "AppendResult | BaseException"], None]


class _StoreReader:
    """The core's :class:`~rocketq.ha.raft_log.EntryReader` over the entry store."""

    def __init__(self, store: EntryStore) -> None:
        self._store = store

    def read(self, lo: int, max_bytes: int, hi: int | None = None) -> Sequence[Entry]:
        out: list[Entry] = []
        total = 0
        store = self._store
        with store.lock:
            end = store.ledger_end_index if hi is None else min(hi, store.ledger_end_index)
            begin = store.ledger_begin_index
            if lo < begin:  # retention deleted them: the core's log begins at ``begin`` from now
                raise Compacted(
                    f"entry {lo} was deleted (the store begins at {begin})", begin, store.term_before_begin()
                )
            i = lo
            while i <= end:
                e = store.get(i)
                kind = EntryKind.NOOP if e.magic == MAGIC_NOOP else EntryKind.NORMAL
                entry = Entry(e.index, e.term, e.body, kind)
                if out and total + entry.size > max_bytes:
                    break
                out.append(entry)
                total += entry.size
                i += 1
        return out


def _term_runs(store: EntryStore) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    begin, end = store.ledger_begin_index, store.ledger_end_index
    if end >= 0 and begin < 0:
        raise EntryStoreError(f"entry store {store.home} has entries up to {end} but no first entry")
    last_term = 0
    for i in range(max(begin, 0), end + 1):  # from the first entry retention left
        term = store.term_at(i)
        if term != last_term:
            runs.append((i, term))
            last_term = term
    return runs


class RaftGroupLog:
    """A member of a Raft group as a :class:`~rocketq.ha.replicated_log.ReplicatedLog`."""

    def __init__(self, config: DLedgerConfig, *, other_requests: RequestHandler | None = None) -> None:
        self.config = config
        self._other_requests = other_requests
        self._store: EntryStore | None = None
        self._node: RaftNode | None = None
        self._transport: PeerTransport | None = None
        self._events: collections.deque[Event] = collections.deque()
        self._stepping = False
        #: proposal id -> (where its outcome goes, its slot there, its entry's position)
        self._futures: dict[int, tuple[BatchDone, int, int]] = {}
        self._next_pid = 1
        # the batch being proposed: its first entry's index, its bodies and their positions
        self._proposing_first = -1
        self._proposing: list[bytes] = []
        self._proposing_pos: list[int] = []
        #: the append being received: its entries and their bytes as the leader's store holds them
        self._raw: tuple[tuple[Entry, ...], list[bytes]] | None = None
        #: the leader's recent entries as stored, for the transport (no re-read, no CRC
        #: re-check), as the runs it wrote them in
        self._sent_cache = SentRuns(SENT_CACHE_BYTES)
        self._state = LogState(Role.FOLLOWER, 0, config.self_id, None, None)
        self._callbacks: list[Callable[[LogState], None]] = []
        self._commit_callbacks: list[Callable[[], None]] = []
        self._state_changed = asyncio.Event()
        self._flush_wanted = asyncio.Event()
        self._unflushed = False  # written since the paced flusher's last fsync (APPENDED acks)
        self._flusher_wake = threading.Event()  # set: the paced flusher is not idle
        #: the paced flusher's latest report (generation, flushed index) that the loop has not
        #: taken yet; while one waits, later fsyncs replace it instead of waking the loop again
        self._flush_report: tuple[int, int] | None = None
        self._flush_report_lock = threading.Lock()
        self._io_lock = threading.Lock()  # the paced flusher's fsyncs and the checkpoints in turn
        self._truncations = 0
        self._committed_pos = -1
        self._tasks: list[asyncio.Task[None]] = []
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._failed: BaseException | None = None
        self._stopped = False
        self._elog: EventLog | None = None
        #: A store write failed for want of disk space and none has succeeded since: no
        #: campaigns, and no messages until ``_disk_full_until`` (loop time)
        self._disk_full = False
        self._disk_full_until = 0.0
        self._proposing_pids = range(0)
        #: (end of the last entry :meth:`entries_from` gave, the index after it): where a call
        #: from that end starts, without searching the index
        self._entries_hint = (-1, -1)
        #: callbacks for the end of the peer message being delivered (:meth:`after_delivery`);
        #: None while no delivery is under way
        self._after_delivery: list[Callable[[], None]] | None = None

    # -- life cycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        cfg = self.config
        loop = asyncio.get_running_loop()
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"dledger-{cfg.self_id}")
        store = await loop.run_in_executor(
            self._executor,
            lambda: EntryStore.open(
                cfg.data_dir,
                cfg.self_id,
                data_file_size=cfg.data_file_size,
                index_file_size=cfg.index_file_size,
                data_start_offset=cfg.data_start_offset,
            ),
        )
        self._store = store
        # the fsync of what the store holds and the scan of its terms: off the loop, which may
        # be a broker's, serving already
        self._node = await loop.run_in_executor(self._executor, self._core_from_store)
        commit = self._node.commit_index
        self._committed_pos = store.committed_pos
        if cfg.event_log_path:
            self._elog = EventLog(cfg.event_log_path, cfg.self_id)
            self._elog.event("start", term=store.term, ledgerEnd=store.ledger_end_index, commit=commit)
        peers = {i: a for i, a in cfg.peers if i != cfg.self_id}
        self._transport = PeerTransport(
            cfg.self_id,
            cfg.self_address,
            peers,
            self._deliver,
            self._other_requests,
            merge_bytes=cfg.max_batch_bytes if cfg.enable_batch_push else 0,
            raw_reader=self._raw_entries,
        )
        await self._transport.start()
        self._tasks = [
            loop.create_task(self._tick_loop(), name=f"raft-tick-{cfg.self_id}"),
            loop.create_task(self._flush_loop(), name=f"raft-flush-{cfg.self_id}"),
            loop.create_task(self._checkpoint_loop(), name=f"raft-checkpoint-{cfg.self_id}"),
        ]
        log.info(
            "raft member %s of group %s started: term %d, last index %d, commit %d",
            cfg.self_id, cfg.group, store.term, store.ledger_end_index, commit,
        )  # fmt: skip

    def _core_from_store(self) -> RaftNode:
        """A Raft core over what the store holds durably: its term and vote, its log (all of it
        fsynced first), its committed index; as a restart of the member builds it."""
        store = self.store
        store.flush()  # what the store holds counts as fsynced in the core
        raft_log = RaftLog.from_store(
            _term_runs(store),
            store.ledger_end_index,
            _StoreReader(store),
            first_index=max(store.ledger_begin_index, 0),
            base_term=store.term_before_begin(),
        )
        commit = min(store.committed_index, store.ledger_end_index)
        return RaftNode(
            self.config.raft_config(),
            random.Random(self.config.seed),
            HardState(store.term, store.voted_for),
            raft_log,
            commit_index=commit,
            applied_index=commit,
        )

    async def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass
            except Exception:
                log.exception("raft task failed")
        if self._transport is not None:
            await self._transport.close()
        node = self._node
        self._end_pending()
        if self._store is not None:
            store = self._store
            if node is not None:
                store.set_committed_index(node.commit_index)
            await asyncio.get_running_loop().run_in_executor(self._executor, store.close)
        if self._elog is not None:
            self._elog.event("stop", commit=self._store.committed_index if self._store else -1)
            self._elog.close()
        if self._executor is not None:
            self._executor.shutdown(wait=True)

    # -- ReplicatedLog --------------------------------------------------------------------------
    @property
    def state(self) -> LogState:
        return self._state

    @property
    def committed_pos(self) -> int:
        return self._committed_pos

    @property
    def ledger_end_pos(self) -> int:
        """End of the last entry in this member's log; a new leader's role handler waits until
        :attr:`committed_pos` reaches it (its NOOP, and everything before, committed)."""
        return self.store.write_pos

    @property
    def store(self) -> EntryStore:
        if self._store is None:
            raise RuntimeError("raft group log is not started")
        return self._store

    @property
    def node(self) -> RaftNode:
        if self._node is None:
            raise RuntimeError("raft group log is not started")
        return self._node

    @property
    def transport(self) -> PeerTransport:
        if self._transport is None:
            raise RuntimeError("raft group log is not started")
        return self._transport

    def on_state_change(self, callback: Callable[[LogState], None]) -> None:
        self._callbacks.append(callback)

    def on_commit(self, callback: Callable[[], None]) -> None:
        """``callback()`` on the log's loop each time the committed position advances (a
        follower's dispatch learns of the leader's commits this way, with no polling)."""
        self._commit_callbacks.append(callback)

    def follower_match_indexes(self) -> dict[str, int] | None:
        """Retention's read-only view (rocketq.store.dledger_retention): on the leader, each
        follower's match index (the entries up to it are on that follower; -1 until it answered
        this leader); None on a follower or a stopped member."""
        node = self._node
        if node is None or self._stopped or node.role is not Role.LEADER:
            return None
        return {peer: pr.match for peer, pr in node.progress.items()}

    async def append(self, encode: RecordEncoder) -> AppendResult:
        fut: asyncio.Future[AppendResult] = asyncio.get_running_loop().create_future()
        self.append_batch((encode,), lambda _slot, outcome: settle(fut, outcome))
        return await fut

    def append_batch(self, encoders: Sequence[RecordEncoder], done: BatchDone) -> None:
        """Append one record per encoder, in order, as one proposal of the core (one write of the
        entries, one append message per follower); ``done(i, outcome)`` gets the outcome of
        ``encoders[i]`` (an :class:`AppendResult`, or the exception its encoder or the write
        raised), at once or when the core answers. Called on the log's loop, not inside a step."""
        node = self._node
        if node is None or self._stopped or self._failed is not None or node.role is not Role.LEADER:
            live = node is not None and not self._stopped and self._failed is None
            leader = node.leader_id if live and node is not None else None
            refused = AppendResult(AppendStatus.NOT_LEADER, leader_id=leader)
            for slot in range(len(encoders)):
                done(slot, refused)
            return
        if self._stepping:  # pragma: no cover - never called inside a step
            raise RuntimeError("raft append called while the driver carries out actions")
        # from here to the step: nothing else is appended in between (no await)
        # each record encoded for its position (a second time for the next data file when it
        # does not fit the current one)
        encode_at = self.store.placer().encode_at
        bodies: list[bytes] = []
        positions: list[int] = []
        slots: list[int] = []
        for slot, encode in enumerate(encoders):
            try:
                pos, body = encode_at(encode)
            except Exception as exc:  # this record only; the others go on
                done(slot, exc)
                continue
            bodies.append(body)
            positions.append(pos)
            slots.append(slot)
        if not bodies:
            return
        first = self._next_pid
        self._next_pid += len(bodies)
        futures = self._futures
        for i, slot in enumerate(slots):
            futures[first + i] = (done, slot, positions[i])
        self._proposing_first = node.log.last_index + 1
        self._proposing, self._proposing_pos = bodies, positions
        self._proposing_pids = range(first, first + len(bodies))
        transport = self._transport
        if transport is not None:
            transport.hold()
        try:
            self._step(ProposeBatch(first, tuple(bodies)))
        finally:
            self._proposing, self._proposing_pos = [], []
            self._proposing_pids = range(0)
            # the entries to the followers now, not at the end of the loop iteration: on a
            # broker's loop the rest of the iteration (the sends that arrived meanwhile) would
            # stand between the leader's write and theirs
            if transport is not None:
                transport.flush()

    def read(self, pos: int, size: int) -> bytes:
        store = self.store
        out = bytearray()
        with store.lock:
            while size > 0:
                mf = store.data.find_by_offset(pos)
                rel = -1 if mf is None else pos - mf.file_from_offset
                n = min(size, store.data_file_size - rel)
                chunk = None if mf is None else mf.read(rel, n)
                if chunk is None:
                    raise EntryNotFound(f"no data at position {pos} ({size} B wanted)")
                out += chunk
                pos += n
                size -= n
        return bytes(out)

    def _first_committed_at(self, pos: int, lo: int, hi: int) -> int:
        """The first committed entry (of ``lo`` .. ``hi``) at or after ``pos``; ``hi`` when none
        is (the caller checks that entry's position)."""
        hint_pos, hint = self._entries_hint
        if hint_pos == pos and lo <= hint <= hi + 1:  # dispatch goes on where it stopped
            return hint
        store = self.store
        first, last = lo, hi
        while first < last:  # first committed entry at or after pos (index records only)
            mid = (first + last) // 2
            if store.pos_at(mid) < pos:
                first = mid + 1
            else:
                last = mid
        return first

    def entries_from(self, pos: int) -> Iterator[tuple[int, bytes]]:
        store = self.store
        hi = store.committed_index
        lo = store.ledger_begin_index
        if hi < 0 or lo < 0:
            return
        first = self._first_committed_at(pos, lo, hi)
        cached = self._sent_cache.entry  # the bytes just written, checked then: no re-read
        for i in range(first, hi + 1):
            got = cached(i)
            if got is not None:
                raw, start, end = got
                at = _POS.unpack_from(raw, start + _POS_OFFSET)[0]
                if at >= pos:
                    # the first entry at or after this one's end is the next (committed: stays)
                    self._entries_hint = (at + end - start, i + 1)
                    yield at, (raw[start + BODY_OFFSET : end] if raw[start + 3] == MAGIC_NORMAL else b"")
                continue
            e = store.get(i)
            if e.pos >= pos:  # NOOPs too (empty body): dispatch reaches the committed end
                self._entries_hint = (e.pos + e.size, i + 1)
                yield e.pos, (e.body if e.magic == MAGIC_NORMAL else b"")

    def committed_run(
        self, pos: int, limit: int, max_entries: int, max_bytes: int
    ) -> tuple[int, int, bytes] | None:
        """The committed entries from the first at or after ``pos`` as one run of the data file's
        bytes, for dispatch (``rocketq.store.dledger_window.parse_entry_run``): (its first entry's
        index, that entry's position, the bytes of whole entries, headers and all). At most
        ``max_entries`` entries and ``max_bytes`` bytes (one entry at least), all ending by
        ``limit`` and in the first one's data file (one copy of them, no step per entry). None
        when no committed entry ends by ``limit`` there."""
        store = self.store
        with store.lock:
            hi = store.committed_index
            lo = store.ledger_begin_index
            if hi < 0 or lo < 0 or hi < lo:
                return None
            first = self._first_committed_at(pos, lo, hi)
            if first > hi:
                return None
            start = store.pos_at(first)
            mf = store.data.find_by_offset(start)
            if start < pos or mf is None:
                return None
            cap = min(limit, start + max_bytes, mf.file_from_offset + mf.file_size)
            last = min(hi, first + max_entries - 1)
            if store.entry_end(last) > cap:
                if store.entry_end(first) > limit:
                    return None
                low, high = first, last - 1  # the last entry that ends by cap (the first one at least)
                while low < high:
                    mid = (low + high + 1) // 2
                    if store.entry_end(mid) <= cap:
                        low = mid
                    else:
                        high = mid - 1
                last = low
            end = store.entry_end(last)
        # the copy without the lock (the log's appends wait on it): committed entries stay as
        # they are, and the file is held while it is read (None once it is closed)
        data = mf.read(start - mf.file_from_offset, end - start)
        if data is None:
            return None
        self._entries_hint = (end, last + 1)
        return first, start, data

    async def transfer_leadership(self, target: str, timeout_s: float | None = None) -> bool:
        """Ask this leader to hand leadership to ``target``; True once ``target`` leads."""
        node = self._node
        if node is None or node.role is not Role.LEADER or target not in node.peers:
            return False
        self._step(TransferLeadership(target))
        wait = timeout_s if timeout_s is not None else 2 * self.config.election_timeout_ms / 1000
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while self._state.leader_id != target:
            if loop.time() >= deadline or (node.role is Role.LEADER and node.transferee is None):
                return False  # timed out, or the core gave the transfer up
            self._state_changed.clear()
            try:
                await asyncio.wait_for(self._state_changed.wait(), min(deadline - loop.time(), 0.05))
            except TimeoutError:
                pass
        return True

    async def hand_over(self, timeout_s: float) -> tuple[str | None, bool]:
        """A stopping leader's hand-over (:mod:`rocketq.ha.handover`): choose the target and
        transfer leadership to it, waiting at most ``timeout_s``. Returns ``(target, moved)``:
        ``(None, False)`` when this member is no leader or no follower is live and caught up."""
        node = self._node
        if node is None or self._stopped or node.role is not Role.LEADER:
            return None, False
        cfg = node.config
        target = choose_target(
            views_of(node.progress, node.now_ms),
            last_index=node.log.last_index,
            preferred=cfg.preferred_leader_id,
            # a live follower answers every heartbeat; two intervals allow for one lost or late
            live_within_ms=2 * cfg.heartbeat_interval_ms,
            max_lag=cfg.max_transfer_lag,
        )
        if target is None:
            return None, False
        return target, await self.transfer_leadership(target, timeout_s)

    # -- the loop -------------------------------------------------------------------------------
    def _deliver(self, message: Message, raw: list[bytes] | None) -> None:
        if self._node is None or self._stopped:
            return
        if self._disk_full and asyncio.get_running_loop().time() < self._disk_full_until:
            return  # as if unreachable for a while; the leader resends
        after: list[Callable[[], None]] = []
        self._after_delivery = after
        try:
            if self._flush_report is not None:  # the paced flusher's fsync, before the message
                self._take_flush_report()
            if raw is not None and isinstance(message, Append) and len(raw) == len(message.entries):
                self._raw = (message.entries, raw)
            self._step(Receive(message))
        finally:
            self._raw = None
            self._after_delivery = None
            for callback in after:
                try:
                    callback()
                except Exception:
                    log.exception("raft after-delivery callback failed")

    def after_delivery(self, callback: Callable[[], None]) -> bool:
        """Have ``callback()`` called once the peer message being delivered was handled (its
        step and the actions it led to done, outside the step): True; False, with nothing
        done, when no delivery is under way (the caller schedules it itself).

        A leader's commit comes with a follower's acknowledgement: the appends it answers
        (:class:`rocketq.store.dledger_appends.AppendQueue`) are answered within that read,
        not from a loop callback of their own, and their requests' answers leave at its end
        (``answers_held`` in :meth:`PeerTransport._immediate`)."""
        after = self._after_delivery
        if after is None:
            return False
        after.append(callback)
        return True

    def _step(self, event: Event) -> None:
        self._events.append(event)
        if self._stepping:
            return
        if self._failed is not None:
            self._events.clear()
            return
        self._stepping = True
        try:
            while self._events:
                for action in self.node.step(self._events.popleft()):
                    self._do(action)
        except DiskFull as exc:
            self._events.clear()
            self._out_of_disk(exc)
        except BaseException as exc:
            self._failed = exc
            log.critical("raft member %s stopped on %r", self.config.self_id, exc, exc_info=True)
            self._end_pending()
            self._events.clear()
            raise
        finally:
            self._stepping = False

    def _do(self, action: Action) -> None:
        store = self.store
        if isinstance(action, Send):
            self.transport.send(action.message)
            if self._elog is not None and isinstance(action.message, VoteReply) and action.message.granted:
                self._elog.event("vote", term=action.message.term, candidate=action.message.dst)
        elif isinstance(action, AppendEntries):
            if self._raw is not None and self._append_received(action.entries, *self._raw):
                pass  # the leader's bytes, verbatim: index, position, term order and the chain checked
            elif self._is_proposing(action.entries):
                # the batch being proposed, as proposed: written together at the positions its
                # records were encoded for (checked)
                entries, n = action.entries, len(action.entries)
                head = entries[0]
                bodies = self._proposing if n == len(self._proposing) else self._proposing[:n]
                raw = store.append_run(head.index, head.term, bodies, self._proposing_pos[:n])
                self._sent_cache.add(head.index, raw, n)
            else:
                first, bodies, positions = self._proposing_first, self._proposing, self._proposing_pos
                for e in action.entries:
                    magic = MAGIC_NOOP if e.kind is EntryKind.NOOP else MAGIC_NORMAL
                    k = e.index - first
                    want = positions[k] if 0 <= k < len(bodies) and e.data is bodies[k] else None
                    raw = store.append_raw_at(e.index, e.term, e.data, magic=magic, pos=want)
                    self._sent_cache.add(e.index, raw, 1)
            last = action.entries[-1]
            self._events.append(Persisted(last.index, last.term, False))
            self._unflushed = True
            if not self._flusher_wake.is_set():  # the paced flusher sleeps until a write
                self._flusher_wake.set()
            self._flush_wanted.set()
            if self._disk_full:
                self._disk_full = False
                log.warning(
                    "raft member %s: the disk has room again; writing and campaigning again",
                    self.config.self_id,
                )
        elif isinstance(action, Apply):
            self._committed_pos = store.commit_to(action.entries[-1].index)
            if self._elog is not None:
                self._elog.commit(action.entries[-1].index, action.entries[-1].term)
            for callback in self._commit_callbacks:
                try:
                    callback()
                except Exception:
                    log.exception("raft commit callback failed")
        elif isinstance(action, ProposalResult):
            self._answer(action)
        elif isinstance(action, PersistHardState):
            store.set_term(action.term, action.vote)
        elif isinstance(action, TruncateLog):
            if self._elog is not None:  # commit: what was applied so far, not the core's new index
                node = self.node
                self._elog.truncated(action.from_index, store.ledger_end_index, store.committed_index, node)
            store.truncate(action.from_index)
            self._truncations += 1
            self._sent_cache.clear()
        elif isinstance(action, RoleChanged):
            self._role_changed(action)
        else:  # pragma: no cover - the Action union is closed
            raise TypeError(f"unknown raft action {action!r}")

    def _append_received(
        self, entries: tuple[Entry, ...], received: tuple[Entry, ...], raws: list[bytes]
    ) -> bool:
        """Write the core's new ``entries`` from the leader's bytes ``raws`` of the ``received``
        ones when they are the tail of those (the usual case: all of them, or those after the
        ones this log holds already). False (nothing written) when they are not.

        A follower does not keep the entries' bytes in the sent cache: its dispatch reads
        committed runs from the store (``committed_run``), and were it elected, the transport
        would read what the cache lacks from the store too. Caching each entry (and dropping
        as many old ones) took about 9 % of a follower's busy loop under load (py-spy, 128
        senders)."""
        skip = len(received) - len(entries)
        if skip < 0 or entries != received[skip:]:  # the same objects: compared by identity
            return False
        block = raws.block if isinstance(raws, RawEntries) else None
        if skip:
            raws = raws[skip:]
            at = len(block) - sum(map(len, raws)) if block is not None else 0
            block = block[at:] if block is not None else None
        data = block if block is not None else b"".join(raws)
        self.store.append_entry_bytes(data)  # raises on the first entry that does not follow
        return True

    def _is_proposing(self, entries: Sequence[Entry]) -> bool:
        """``entries`` are the first ones of the batch being proposed, its bodies, NORMAL."""
        bodies = self._proposing
        if not bodies or entries[0].index != self._proposing_first or len(entries) > len(bodies):
            return False
        same = all(map(operator.is_, [e.data for e in entries], bodies))  # the very bodies
        return same and {e.kind for e in entries} == {EntryKind.NORMAL}

    def _out_of_disk(self, exc: DiskFull) -> None:
        """A store write (an entry, ``currterm``, the checkpoint before a truncation) failed on a
        full disk; nothing of it was written. The core is rebuilt from the store, as a restart
        would, as a follower; pending proposals end indeterminate (TERM_CHANGED), the one being
        proposed, whose entry was neither written nor sent, with the error. Until a write
        succeeds the member does not campaign, and it takes no messages for
        ``DISK_FULL_RETRY_MS`` after each failure, so the others carry on without it."""
        if not self._disk_full:
            log.error(
                "raft member %s: %s; it follows without writing or campaigning until there is room "
                "(retrying every %d ms)", self.config.self_id, exc, DISK_FULL_RETRY_MS,
            )  # fmt: skip
        self._disk_full = True
        self._disk_full_until = asyncio.get_running_loop().time() + DISK_FULL_RETRY_MS / 1000
        self._end_pending(DiskFull(f"DLedger append not written: {exc}"))
        self._sent_cache.clear()
        self._truncations += 1  # a flush under way reported for the old core: not delivered
        was = self.node.role
        self._node = self._core_from_store()
        if was is not Role.FOLLOWER or self._state.role is not Role.FOLLOWER:
            self._role_changed(RoleChanged(Role.FOLLOWER, self._node.term, None))

    def _end_pending(self, proposing: BaseException | None = None) -> None:
        """Every pending append ends indeterminate (TERM_CHANGED); those being proposed, whose
        entries were neither written nor sent, with ``proposing`` when given."""
        pending, self._futures = self._futures, {}
        for pid, (done, slot, pos) in pending.items():
            if proposing is not None and pid in self._proposing_pids:
                done(slot, proposing)
            else:
                done(slot, AppendResult(AppendStatus.TERM_CHANGED, -1, pos, pos + BODY_OFFSET))

    def _raw_entries(self, index: int, size: int) -> bytes:
        """The store's bytes of the entries from ``index`` on, ``size`` bytes in all (the
        transport's reader): from the runs the leader wrote last (the usual read: the one
        just written, whole), else from the store."""
        raw = self._sent_cache.read(index, size)
        return raw if raw is not None else self.store.read_bytes(index, size)

    def _answer(self, result: ProposalResult) -> None:
        futures = self._futures
        status = AppendStatus.of(result.outcome)
        pid, index, leader = result.proposal_id, result.index, result.leader_id
        if status is AppendStatus.OK and index >= 0:
            # the usual outcome: the appends that committed, handed to each receiver as one run
            # of (slot, entry index, entry pos) instead of an AppendResult per append
            receiver: BatchDone | None = None
            run: list[tuple[int, int, int]] = []
            pop = futures.pop
            for k in range(result.count):
                got = pop(pid + k, None)
                if got is None:
                    continue
                done, slot, pos = got
                if done is not receiver:
                    if receiver is not None:
                        self._committed(receiver, run, leader)
                    receiver, run = done, []
                run.append((slot, index + k, pos))
            if receiver is not None:
                self._committed(receiver, run, leader)
            return
        for k in range(result.count):
            got = futures.pop(pid + k, None)
            if got is None:
                continue
            done, slot, pos = got
            if index < 0:  # nothing appended
                done(slot, AppendResult(status, leader_id=leader))
            else:
                done(slot, AppendResult(status, index + k, pos, pos + BODY_OFFSET, leader))

    @staticmethod
    def _committed(done: BatchDone, run: list[tuple[int, int, int]], leader: str | None) -> None:
        """``run``'s appends committed: ``done.committed(run, leader)`` when the receiver takes
        a run (:class:`rocketq.store.dledger_appends.AppendQueue`'s), else an OK
        :class:`AppendResult` per append."""
        committed = getattr(done, "committed", None)
        if committed is not None:
            committed(run, leader)
            return
        for slot, index, pos in run:
            done(slot, AppendResult.ok(index, pos, leader))

    def _role_changed(self, change: RoleChanged) -> None:
        leader = change.leader_id
        address = None if leader is None else self.config.client_address(leader)
        self._state = LogState(change.role, change.term, self.config.self_id, leader, address)
        log.info(
            "raft member %s: %s in term %d, leader %s",
            self.config.self_id,
            change.role.value,
            change.term,
            leader,
        )
        self._state_changed.set()
        if self._elog is not None:
            self._elog.role(change, self.store.ledger_end_index, self.store.committed_index)
        for callback in list(self._callbacks):
            try:
                callback(self._state)
            except Exception:
                log.exception("raft state change callback failed")

    async def _tick_loop(self) -> None:
        """The core's clock: a ``Tick`` of the milliseconds elapsed every ``tick_ms``, from a
        timer callback that sets its next timer (one timer handle a tick, where a sleeping task
        took a timer, a future's callback and a task step). The task holds the ticks' life: its
        cancellation stops them, and a failed step ends it with the step's exception."""
        loop = asyncio.get_running_loop()
        period = self.config.tick_ms / 1000
        ended: asyncio.Future[None] = loop.create_future()
        last = loop.time()
        carry = 0.0
        timer: asyncio.TimerHandle | None = None

        def tick() -> None:
            nonlocal last, carry, timer
            now = loop.time()
            carry += (now - last) * 1000
            last = now
            ms = int(carry)
            if ms > 0:
                carry -= ms
                if not self._disk_full:  # no campaign while writes fail
                    try:
                        if self._flush_report is not None:  # no peer message took it
                            self._take_flush_report()
                        self._step(Tick(ms))
                    except Exception as exc:
                        if not ended.done():
                            ended.set_exception(exc)
                        return
            timer = loop.call_later(period, tick)

        timer = loop.call_later(period, tick)
        try:
            await ended
        finally:
            timer.cancel()  # the one set last (a failed step set none after its own)

    async def _flush_loop(self) -> None:
        if self.config.ack_policy is AckPolicy.APPENDED:
            await self._paced_flushes()
            return
        loop = asyncio.get_running_loop()
        store = self.store
        while True:
            await self._flush_wanted.wait()
            self._flush_wanted.clear()
            generation = self._truncations
            flushed = await loop.run_in_executor(self._executor, store.flush_unlocked)
            if generation != self._truncations:
                self._flush_wanted.set()  # the log changed under the fsync: report the next one
                continue
            node = self.node
            if 0 <= flushed <= node.log.last_index:
                self._step(Persisted(flushed, node.log.term_at(flushed), True))

    async def _paced_flushes(self) -> None:
        """Under APPENDED acks nobody waits for an fsync: a thread of its own fsyncs what was
        written every ``flush_file_interval_ms`` and leaves the loop its report, so the loop hands no
        work to a thread per fsync (waking a worker from the loop cost a follower about a tenth
        of its time under load). With nothing written it sleeps until the loop's next write
        wakes it (once per idle spell, not per write)."""
        stop = threading.Event()
        name = f"dledger-flush-{self.config.self_id}"
        thread = threading.Thread(target=self._flusher, args=(stop,), name=name, daemon=True)
        thread.start()
        try:
            await asyncio.get_running_loop().create_future()  # until the member stops
        finally:
            stop.set()
            self._flusher_wake.set()
            await asyncio.to_thread(thread.join)

    def _flusher(self, stop: threading.Event) -> None:
        """Every ``flush_file_interval_ms``, the fsync of what was written; its report waits in
        ``_flush_report`` for the loop, which takes it at its next peer message or tick
        (:meth:`_take_flush_report`): nobody waits for an fsync under APPENDED acks, so the
        loop is not woken for it (a wake-up of the loop per fsync, and on a follower a reply
        of its own to the leader)."""
        store = self.store
        interval_s = self.config.flush_file_interval_ms / 1000
        # idle: asleep until the loop writes (no wake-ups meanwhile)
        for _ in paced_turns(interval_s, stop, self._flusher_wake, lambda: self._unflushed):
            self._unflushed = False
            generation = self._truncations
            try:
                with self._io_lock:
                    flushed = store.flush_unlocked()
                with self._flush_report_lock:  # a report the loop has not taken yet is replaced
                    self._flush_report = (generation, flushed)
            except Exception:
                log.exception("raft member %s: flush failed; no more fsyncs", self.config.self_id)
                return

    def _take_flush_report(self) -> None:
        """On the loop: the paced flusher's latest report, covering every fsync since the loop
        took the one before (one ``Persisted`` step for them, not one each). Taken before a
        peer message is stepped, so that a follower's reply to that message carries it (no
        reply of its own), and at each tick when no message came."""
        with self._flush_report_lock:
            report, self._flush_report = self._flush_report, None
        if report is not None:
            self._flushed(*report)

    def _flushed(self, generation: int, flushed: int) -> None:
        if self._stopped or self._node is None:
            return
        if generation != self._truncations:
            self._unflushed = True  # the log changed under the fsync: report the next one
            return
        node = self.node
        if 0 <= flushed <= node.log.last_index:
            self._step(Persisted(flushed, node.log.term_at(flushed), True))

    async def _checkpoint_loop(self) -> None:
        loop = asyncio.get_running_loop()
        store = self.store
        written = -2
        while True:
            await asyncio.sleep(self.config.checkpoint_interval_ms / 1000)
            if store.committed_index != written or store.flushed_index != store.checkpoint_flushed:
                written = store.committed_index
                try:
                    await loop.run_in_executor(self._executor, self._persist_checkpoint)
                except DiskFull as exc:  # the last one written stays; try again next time
                    log.warning("raft member %s: checkpoint not written: %s", self.config.self_id, exc)
                    written = -2

    def _persist_checkpoint(self) -> None:
        with self._io_lock:
            self.store.persist_checkpoint()


def config_of(spec: LedgerSpec) -> DLedgerConfig:
    """The member settings a broker's :class:`LedgerSpec` gives: the store in
    ``<base_dir>/dledger-<self_id>/`` (its first data file at ``data_start_offset``), acks after
    fsync under SYNC_FLUSH, else after the write (RocketMQ's DLedger default), and each member's
    broker address as the leader address the broker reports to clients and copies metadata from."""
    unknown = sorted(set(spec.broker_addresses or {}) - set(spec.peers))
    if unknown:
        raise ConfigError(f"dLegerBrokerAddresses names {', '.join(unknown)}, not among dLegerPeers")
    clients = dict(spec.broker_addresses or {})
    if spec.broker_address:
        clients[spec.self_id] = spec.broker_address
    timing: dict[str, int] = {}
    if spec.election_timeout_ms is not None:
        timing["election_timeout_ms"] = spec.election_timeout_ms
    if spec.heartbeat_interval_ms is not None:
        timing["heartbeat_interval_ms"] = spec.heartbeat_interval_ms
    if spec.flush_file_interval_ms is not None:
        timing["flush_file_interval_ms"] = spec.flush_file_interval_ms
    return DLedgerConfig(
        self_id=spec.self_id,
        peers=tuple(spec.peers.items()),
        data_dir=spec.base_dir,
        group=spec.group or "default",
        ack_policy=AckPolicy.FSYNCED if spec.fsync else AckPolicy.APPENDED,
        preferred_leader_id=spec.preferred_leader_id,
        enable_batch_push=spec.enable_batch_push,
        max_batch_bytes=spec.max_batch_bytes,
        data_file_size=spec.data_file_size,
        data_start_offset=spec.data_start_offset,
        client_addresses=tuple(clients.items()),
        event_log_path=spec.event_log_path,
        **timing,
    )


def open_group_log(spec: LedgerSpec) -> RaftGroupLog:
    """The Raft group member of a broker (``rocketq.ha.group_config.open_ledger``'s factory for
    groups of more than one); started by the broker's store on its log loop."""
    return RaftGroupLog(config_of(spec))
