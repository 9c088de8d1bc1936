"""A DLedger store's queue-offset table on a new leader: rebuilt by the store itself, once a term.

Queue offsets are assigned by the leader from its queue-offset table. A member that becomes
leader holds a table from before: the one it opened with, or the one of a term it led earlier;
meanwhile other leaders numbered and committed messages it only received as a follower. The
store itself (not its owner: a broker's role handler, or nobody in an embedded group) makes
sure it never hands out such an offset again::

    log's loop (role change, before any append)     dispatch thread (after each of its steps)
    LeaderTable.on_state: lead_term = term or -1     LeaderTable.check:
      lead_term != table_term: puts refused            leads a term the table is not for?
      (ServiceNotAvailable, "catching up")             committed == ledger end, dispatched there?
      wake the dispatch thread                         rebuild from the ConsumeQueues, then under
                                                       the put lock, still that term: swap the
                                                       table, table_term = term: puts go on

* ``lead_term`` and ``table_term`` live on the CommitLog
  (:class:`~rocketq.store.dledger_commitlog.DLedgerCommitLog`) and are folded into its
  ``_accepting`` flag, which every put reads under the put lock before it takes an offset: the
  check costs a put nothing. A follower or candidate (``lead_term`` -1) is not refused here:
  its log answers NOT_LEADER, as before.
* The rebuild (:func:`queue_table_nexts`: each queue past its last unit and past the queue
  offset its last message carries) runs once per term, when this member leads, its log is
  caught up (``committed_pos`` equals ``ledger_end_pos`` when the log tells it: every entry it
  holds, earlier terms' and its own NOOP, is committed) and dispatch has reached the committed
  position. Nothing can be appended meanwhile (puts are refused), so the ConsumeQueues it reads
  hold every committed message and the table it makes continues after all of them.
* Where it runs: in the dispatch thread, after a step. Not on the log's loop (the state
  callback comes before the log is caught up, and a rebuild reads the last unit and record
  head of every queue: it would stall the log's heartbeats and appends for that long), not in
  the first put after catch-up (which may be on the log's loop too, and a broker must know when
  to register as master without a put). The dispatch thread is where "dispatched to the
  committed end" becomes true; it is woken by every advance of the commit and by the role
  change, and looks at least once a second anyway. The ConsumeQueues' repair lock is held
  through the rebuild and the swap, so a queue rebuilt at a read is either in the rebuild or
  raises the table after it; the swap happens under the put lock only if the member still leads
  the same term (a newer term is rebuilt for in turn). Terms only grow, so a table rebuilt for
  the term the member leads stays right for as long as it leads it.
* At open (:meth:`~rocketq.store.dledger_store.DLedgerMessageStore._load_and_recover`) the
  table is rebuilt once as before; a member that leads and is caught up then (a group of one)
  has it for its term at once and never refuses.

A broker's role handler (``rocketq.broker.dledger_role``) waits for the same thing
(:meth:`~rocketq.store.dledger_store.DLedgerMessageStore.leads_caught_up`) before it registers
as master; it keeps its own refusals (a follower's, naming the leader) on top.
"""

from __future__ import annotations

import logging
import struct
from typing import TYPE_CHECKING

from rocketq.ha.raft_types import Role
from rocketq.ha.replicated_log import LogState, ReplicatedLog
from rocketq.protocol import record as rec

if TYPE_CHECKING:
    from rocketq.store.dledger_store import DLedgerMessageStore

log = logging.getLogger(__name__)
#: a record's TOTALSIZE, MAGICCODE, BODYCRC, QUEUEID, FLAG and QUEUEOFFSET
_RECORD_HEAD = struct.Struct(">iiiiiq")
_MESSAGE_MAGICS = (rec.MESSAGE_MAGIC_CODE, rec.MESSAGE_MAGIC_CODE_V2)


def catching_up(term: int) -> str:
    """Why a leader of ``term`` refuses writes until its log is caught up and dispatched and its
    queue-offset table rebuilt (a broker's role handler says the same)."""
    return f"DLedger leader of term {term} is catching up before it accepts writes"


def queue_table_nexts(store: DLedgerMessageStore) -> dict[tuple[str, int], int]:
    """Each queue's next offset from its ConsumeQueue: past its last unit, and past the queue
    offset its last message carries. A queue offset once given out and never appended (a hole,
    from before the put path gave back every offset whose entry was not placed) leaves a queue
    one unit short of its messages' offsets; counting units alone handed its last message's
    offset out again, and the queue kept only one of the two once rebuilt."""
    cl = store.commitlog
    nexts = store.consume_queues.max_offsets()  # queues with a unit or more only
    for key, units in nexts.items():
        cq = store.consume_queues.find(*key)
        unit = cq.get_unit(units - 1) if cq is not None else None
        head = cl.read(unit.offset, _RECORD_HEAD.size) if unit is not None else None
        if unit is None or head is None:
            continue
        size, magic, _, queue_id, _, queue_offset = _RECORD_HEAD.unpack(head)
        # the record the unit names (not another one's bytes): its size, kind and queue
        if size == unit.size and magic in _MESSAGE_MAGICS and queue_id == key[1]:
            nexts[key] = max(units, queue_offset + 1)
    return nexts


class LeaderTable:
    """See the module docstring: follows the log's role (:meth:`on_state`, registered with the
    log here) and rebuilds the table for each term this member leads (:meth:`check`)."""

    def __init__(self, store: DLedgerMessageStore, ledger: ReplicatedLog) -> None:
        self.store = store
        self.ledger = ledger
        #: tables rebuilt for a term led (tests, logs)
        self.rebuilds = 0
        ledger.on_state_change(self.on_state)
        self.on_state(ledger.state)  # the role the log had before the callback was registered

    def on_state(self, _state: LogState) -> None:
        """On the log's loop at each role change (once from the opener): the CommitLog learns
        the term this member leads, if any. The log's latest state is read under the put lock,
        so a late call from the opener never undoes a newer role."""
        cl = self.store.commitlog
        with cl._put_lock:
            state = self.ledger.state
            term = state.term if state.role is Role.LEADER else -1
            if cl.lead_term != term:
                cl.lead_term = term
                cl._update_accepting()  # a leader of a term the table is not for: puts refused
        reput = self.store.reput
        if cl._table_behind() and reput is not None:
            reput.wakeup()  # it rebuilds as soon as it finds the log caught up

    def check(self) -> bool:
        """In the dispatch thread after each step (and once at open): rebuild the table when
        this member leads a term it was not rebuilt for and the log is caught up and dispatched;
        True when it did."""
        store = self.store
        cl = store.commitlog
        term = cl.lead_term
        if term < 0 or term == cl.table_term or not self._caught_up():
            return False
        cqs = store.consume_queues
        with cqs.repair_lock:  # a queue rebuilt at a read is in the walk, or raises it after
            nexts = queue_table_nexts(store)
            with cl._put_lock:
                if cl.lead_term != term:
                    return False  # it left that term meanwhile: the next look decides
                cl.topic_queue_table.replace(nexts)
                cl.table_term = term
                cl._update_accepting()
        self.rebuilds += 1
        log.info(
            "DLedger leader of term %d: queue-offset table of %d queues rebuilt from the ConsumeQueues "
            "(committed and dispatched up to %d); taking writes",
            term,
            len(nexts),
            cl.max_offset,
        )
        return True

    def _caught_up(self) -> bool:
        """Every entry of the log committed (when it tells its end) and dispatched."""
        ledger = self.ledger
        try:
            end = getattr(ledger, "ledger_end_pos", None)
            committed = ledger.committed_pos
        except RuntimeError:  # the log is stopped
            return False
        if end is not None and committed < end:
            return False
        return self.store.dispatch_behind_bytes() == 0
