"""A DLedger group of one: :class:`~rocketq.ha.replicated_log.ReplicatedLog` on an entry store.

The node is leader at once (term 1 on a new store, the stored term after a restart) and an append
is committed as soon as it is written (``fsync=False``: in the page cache, as DLedger acknowledges
by default) or once it is fsync'd (``fsync=True``). With ``fsync=False`` a thread of its own fsyncs
what was written every ``flush_interval_ms`` (broker.conf ``flushFileInterval``, DLedger's 10 ms:
DLedger's ``FlushDataService``) and writes ``checkpoint`` every ``checkpoint_interval_ms`` when it
changed, and once more when the appends stop; it sleeps while nothing is written (the next
append wakes it). This is a legitimate deployment (RocketMQ accepts a DLedger group of one) and
the log the broker runs on when no peers are configured; the Raft group
(:mod:`rocketq.ha.driver`) replaces it by a constructor change.

``encode`` may be called twice for one append: first for the position the entry would take if it
fits the current data file, again for the next file when the record turned out too large for the
rest of it (the record's length does not depend on its offset, so this is known only after the
first call). Encoders therefore assign queue offsets once and only re-pack on a second call.
An encoder may raise (the broker refuses the put, e.g. it stopped being writable): nothing is
appended then and the exception propagates out of ``append``.
:meth:`SingleNodeLog.entries_from` yields every committed entry, a NOOP with an empty body (which
dispatch skips): a dispatcher that never saw the last entry would never reach ``committed_pos``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator

from rocketq.ha import entry_format as fmt
from rocketq.ha.driver_config import FLUSH_FILE_INTERVAL_MS
from rocketq.ha.entry_format import BODY_OFFSET, MAGIC_NOOP, EntryStoreError
from rocketq.ha.entry_store import EntryStore
from rocketq.ha.paced import paced_turns
from rocketq.ha.raft_types import Role
from rocketq.ha.replicated_log import AppendResult, AppendStatus, LogState, RecordEncoder

log = logging.getLogger(__name__)

#: How often a group of one writes ``checkpoint`` while entries come (DLedger's ``checkPointInterval``).
CHECKPOINT_INTERVAL_MS = 3000


class SingleNodeLog:
    """One node, always leader. :meth:`start` and :meth:`stop` belong to one event loop;
    :meth:`append` never waits for anything (``append_completes_at_once``) and is safe in any
    thread (the entry store's lock), as are :meth:`read`, :meth:`entries_from` and
    :attr:`committed_pos`."""

    #: the coroutine :meth:`append` returns finishes at its first step: a caller in another
    #: thread may drive it there instead of handing it to the loop
    append_completes_at_once = True

    def __init__(
        self,
        store: EntryStore,
        *,
        self_id: str,
        address: str | None = None,
        fsync: bool = False,
        flush_interval_ms: int = FLUSH_FILE_INTERVAL_MS,
        checkpoint_interval_ms: int = CHECKPOINT_INTERVAL_MS,
    ) -> None:
        self.store = store
        self.self_id = self_id
        self.address = address
        self.fsync = fsync
        self.flush_interval_ms = flush_interval_ms
        self.checkpoint_interval_ms = checkpoint_interval_ms
        #: written since the paced flusher's last fsync (``fsync=False``)
        self._unflushed = False
        self._flusher_wake = threading.Event()  # set: the paced flusher is not idle
        self._flusher_stop = threading.Event()
        self._flusher: threading.Thread | None = None
        self._callbacks: list[Callable[[LogState], None]] = []
        self._started = False
        self._state = LogState(Role.FOLLOWER, store.term, self_id, None, None)

    @classmethod
    def open(
        cls,
        base_dir: str,
        self_id: str,
        *,
        data_file_size: int = fmt.DEFAULT_DATA_FILE_SIZE,
        data_start_offset: int = 0,
        address: str | None = None,
        fsync: bool = False,
        flush_interval_ms: int = FLUSH_FILE_INTERVAL_MS,
    ) -> SingleNodeLog:
        store = EntryStore.open(
            base_dir, self_id, data_file_size=data_file_size, data_start_offset=data_start_offset
        )
        return cls(store, self_id=self_id, address=address, fsync=fsync, flush_interval_ms=flush_interval_ms)

    # -- ReplicatedLog ----------------------------------------------------------------------------
    @property
    def state(self) -> LogState:
        return self._state

    @property
    def committed_pos(self) -> int:
        store = self.store
        pos = store.committed_pos
        if pos >= 0:
            return pos
        with store.lock:  # nothing committed yet: the first entry's position, or where it will go
            return store._index_record(store.begin_index).pos if store.begin_index >= 0 else store.write_pos

    @property
    def ledger_end_pos(self) -> int:
        """End of the last entry (equal to :attr:`committed_pos` except while an fsync is due);
        the role handler waits for the two to meet before a leader takes writes."""
        return self.store.write_pos

    async def start(self) -> None:
        store = self.store
        if store.term < 1:
            store.set_term(1, self.self_id)
        # Alone, every entry recovery kept is the group's log: all of it is committed.
        store.set_committed_index(store.end_index)
        self._started = True
        if not self.fsync:
            self._flusher_stop.clear()
            self._flusher = threading.Thread(
                target=self._paced_flushes, name=f"dledger-flush-{self.self_id}", daemon=True
            )
            self._flusher.start()
        self._set_state(LogState(Role.LEADER, store.term, self.self_id, self.self_id, self.address))

    async def stop(self) -> None:
        if not self._started:
            return
        self._started = False  # appends answer NOT_LEADER from here on; no role change is announced
        flusher, self._flusher = self._flusher, None
        if flusher is not None:
            self._flusher_stop.set()
            self._flusher_wake.set()
            await asyncio.to_thread(flusher.join)
        self.store.close()

    def _paced_flushes(self) -> None:
        """Page-cache acks: every ``flush_interval_ms`` the fsync of what was written, and every
        ``checkpoint_interval_ms`` the checkpoint when it changed; asleep while nothing is
        written. Ends at :meth:`stop` (which closes the store after it), or at a failed fsync,
        logged (the entries stay acknowledged in the page cache, as before the thread)."""
        store = self.store
        interval_s = self.flush_interval_ms / 1000
        checkpoint_every_s = self.checkpoint_interval_ms / 1000
        next_checkpoint = time.monotonic() + checkpoint_every_s

        def idle() -> None:  # the checkpoint brought up to date, then asleep
            nonlocal next_checkpoint
            if store.checkpoint_flushed != store.flushed_index:
                self._checkpoint()
                next_checkpoint = time.monotonic() + checkpoint_every_s

        stop, wake = self._flusher_stop, self._flusher_wake
        for _ in paced_turns(interval_s, stop, wake, lambda: self._unflushed, idle):
            self._unflushed = False  # before the fsync: a write during it is covered next time
            try:
                store.flush_unlocked()
            except EntryStoreError:  # closed under it: the stop is on its way
                return
            except OSError:
                log.exception("dledger %s: fsync failed; no more paced fsyncs", self.self_id)
                return
            now = time.monotonic()
            if now >= next_checkpoint and store.checkpoint_flushed != store.flushed_index:
                next_checkpoint = now + checkpoint_every_s
                self._checkpoint()

    def _checkpoint(self) -> None:
        try:
            self.store.persist_checkpoint()
        except OSError as exc:  # a full disk among them: the last one stays, tried again later
            log.warning("dledger %s: checkpoint not written: %s", self.self_id, exc)
        except EntryStoreError:  # closed under it: the stop is on its way
            pass

    async def append(self, encode: RecordEncoder) -> AppendResult:
        if not self._started:
            return AppendResult(AppendStatus.NOT_LEADER)
        store = self.store
        with store.lock:
            guess = store.write_pos
            body = encode(guess + BODY_OFFSET)
            pos = store._place(BODY_OFFSET + len(body))
            if pos != guess:
                body = encode(pos + BODY_OFFSET)
            index, pos = store.append(store.term, body)
            if not self.fsync:
                store.set_committed_index(index)
                self._unflushed = True
                if not self._flusher_wake.is_set():  # the paced flusher sleeps until a write
                    self._flusher_wake.set()
        if self.fsync:
            store.flush()
            store.set_committed_index(index)
        return AppendResult.ok(index, pos, self.self_id)

    def read(self, pos: int, size: int) -> bytes:
        store = self.store
        with store.lock:
            mf = store.data.find_by_offset(pos)
            data = None if mf is None else mf.read(pos - mf.file_from_offset, size)
        return b"" if data is None else data

    def entries_from(self, pos: int) -> Iterator[tuple[int, bytes]]:
        store = self.store
        with store.lock:
            index = self._first_index_at_or_after(pos)
        while index >= 0:
            with store.lock:
                if index > store.committed_index:
                    return
                entry = store.get(index)
            index += 1
            # a NOOP is yielded too (empty body): dispatch must reach committed_pos, and a new
            # leader waits for exactly that
            yield entry.pos, b"" if entry.magic == MAGIC_NOOP else entry.body

    def on_state_change(self, callback: Callable[[LogState], None]) -> None:
        self._callbacks.append(callback)

    async def transfer_leadership(self, target: str) -> bool:
        return target == self.self_id

    # -- helpers ----------------------------------------------------------------------------------
    def _first_index_at_or_after(self, pos: int) -> int:
        """The first entry whose position is ``pos`` or later; -1 when none (under the lock)."""
        store = self.store
        lo, hi = store.begin_index, store.end_index
        if lo < 0 or store._index_record(hi).pos < pos:
            return -1
        while lo < hi:
            mid = (lo + hi) // 2
            if store._index_record(mid).pos < pos:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _set_state(self, state: LogState) -> None:
        self._state = state
        for callback in list(self._callbacks):
            try:
                callback(state)
            except Exception:
                log.exception("state change callback failed")
