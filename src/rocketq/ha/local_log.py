"""A DLedger group of one: :class:`~rocketq.ha.replicated_log.ReplicatedLog` on an entry store.

The node is leader at once (term 1 on a new store, the stored term after a restart) and an append
is committed as soon as it is written (``fsync=False``: in the page cache, as DLedger acknowledges
by default) or once it is fsync'd (``fsync=True``). This is a legitimate deployment (RocketMQ
accepts a DLedger group of one) and the log the broker runs on when no peers are configured; the
Raft group (:mod:`rocketq.ha.driver`) replaces it by a constructor change.

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

import logging
from collections.abc import Callable, Iterator

from rocketq.ha import entry_format as fmt
from rocketq.ha.entry_format import BODY_OFFSET, MAGIC_NOOP
from rocketq.ha.entry_store import EntryStore
from rocketq.ha.raft_types import Role
from rocketq.ha.replicated_log import AppendResult, AppendStatus, LogState, RecordEncoder

log = logging.getLogger(__name__)


class SingleNodeLog:
    """One node, always leader. :meth:`start` and :meth:`stop` belong to one event loop;
    :meth:`append` never waits for anything (``append_completes_at_once``) and is safe in any
    thread (the entry store's lock), as are :meth:`read`, :meth:`entries_from` and
    :attr:`committed_pos`."""

    #: the coroutine :meth:`append` returns finishes at its first step: a caller in another
    #: thread may drive it there instead of handing it to the loop
    append_completes_at_once = True

    def __init__(
        self, store: EntryStore, *, self_id: str, address: str | None = None, fsync: bool = False
    ) -> None:
        self.store = store
        self.self_id = self_id
        self.address = address
        self.fsync = fsync
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
    ) -> SingleNodeLog:
        store = EntryStore.open(
            base_dir, self_id, data_file_size=data_file_size, data_start_offset=data_start_offset
        )
        return cls(store, self_id=self_id, address=address, fsync=fsync)

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
        self._set_state(LogState(Role.LEADER, store.term, self.self_id, self.self_id, self.address))

    async def stop(self) -> None:
        if not self._started:
            return
        self._started = False  # appends answer NOT_LEADER from here on; no role change is announced
        self.store.close()

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
