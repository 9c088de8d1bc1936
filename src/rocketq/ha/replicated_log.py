"""The contract between a replicated log and the broker that stores its CommitLog in it.

In DLedger mode the broker's CommitLog records are the bodies of the log's entries (one record per
entry, as RocketMQ's ``DLedgerCommitLog`` does). The broker sees the log only through
:class:`ReplicatedLog`; two implementations exist: the Raft group (:mod:`rocketq.ha.driver`, the
asyncio driver of :class:`rocketq.ha.raft.RaftNode` over an :class:`~rocketq.ha.entry_store.EntryStore`)
and a group of one.

Positions are byte positions in the entry store's data files, the same on every replica (followers
place each entry where the leader did). A record's physical offset, the offset ConsumeQueue units
and message ids carry, is ``entry pos + BODY_OFFSET`` (48), computed by the leader before the entry
is appended (``append`` passes it to ``encode``) so that the stored record names its own offset.

=========================  =================================================================
member                     meaning
=========================  =================================================================
``append(encode)``         leader only: ``encode(physical_offset) -> record bytes`` builds the
                           body for the entry's position; the entry is appended and the call
                           returns once the ack policy's quorum holds it (``AppendResult``) or
                           with a definite / indeterminate failure
``committed_pos``          entries wholly before this position are committed (never decreases);
                           dispatch builds ConsumeQueues and indexes only up to it on every node
``read(pos, size)``        bytes of the data files, e.g. one record at ``physical_offset``
``entries_from(pos)``      ``(entry pos, body)`` of the committed entries from ``pos`` on, for
                           dispatch and recovery, in order
``state``                  role, term, leader id and the leader's address
``on_state_change``        called on the event loop whenever ``state`` changes
``transfer_leadership``    ask the leader to hand leadership to ``target`` (admin)
=========================  =================================================================
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from rocketq.ha.entry_format import BODY_OFFSET
from rocketq.ha.raft_types import Outcome, Role


class AppendStatus(enum.Enum):
    """What an append came to. The put status and wire code each maps to are RocketMQ's
    (``DLedgerCommitLog.asyncPutMessage``, spec/replication.md §2.2): NOT_LEADER →
    SERVICE_NOT_AVAILABLE (14), TIMEOUT → IN_SYNC_REPLICAS_NOT_ENOUGH → SYSTEM_ERROR (1), BUSY →
    OS_PAGE_CACHE_BUSY → SYSTEM_BUSY (2), TERM_CHANGED → UNKNOWN_ERROR → SYSTEM_ERROR (1); the
    producer retries all of them, so an indeterminate outcome may be stored twice, never lost."""

    OK = "OK"  # committed by the ack policy's quorum
    NOT_LEADER = "NOT_LEADER"  # definite: nothing appended anywhere
    TIMEOUT = "TIMEOUT"  # indeterminate: appended here, the quorum not reached in time
    TERM_CHANGED = "TERM_CHANGED"  # indeterminate: leadership lost after the append
    BUSY = "BUSY"  # definite: too many appends pending

    @property
    def definite(self) -> bool:
        """True when the message certainly is, or certainly is not, in the log."""
        return self not in (AppendStatus.TIMEOUT, AppendStatus.TERM_CHANGED)

    @staticmethod
    def of(outcome: Outcome) -> AppendStatus:
        return {
            Outcome.SUCCESS: AppendStatus.OK,
            Outcome.NOT_LEADER: AppendStatus.NOT_LEADER,
            Outcome.TERM_CHANGED: AppendStatus.TERM_CHANGED,
            Outcome.WAIT_QUORUM_ACK_TIMEOUT: AppendStatus.TIMEOUT,
            Outcome.LEADER_PENDING_FULL: AppendStatus.BUSY,
            Outcome.LEADER_TRANSFERRING: AppendStatus.NOT_LEADER,
        }[outcome]


@dataclass(frozen=True, slots=True)
class AppendResult:
    status: AppendStatus
    #: the entry's index and position; -1 when nothing was appended here
    index: int = -1
    pos: int = -1
    #: the record's physical offset (``pos + 48``); -1 when nothing was appended here
    physical_offset: int = -1
    #: the known leader when ``status`` is NOT_LEADER (its self id), else None
    leader_id: str | None = None

    @classmethod
    def ok(cls, index: int, pos: int, leader_id: str | None) -> AppendResult:
        """The result of an append committed as entry ``index`` at ``pos``."""
        return cls(AppendStatus.OK, index, pos, pos + BODY_OFFSET, leader_id)


@dataclass(frozen=True, slots=True)
class LogState:
    role: Role
    term: int
    self_id: str
    leader_id: str | None
    #: the remoting address brokers of the group serve clients on, by self id (``dLegerPeers``
    #: gives the peer addresses; the broker maps them to its own listen addresses)
    leader_address: str | None


#: ``encode(physical_offset) -> record bytes``
RecordEncoder = Callable[[int], bytes]


class ReplicatedLog(Protocol):
    @property
    def state(self) -> LogState: ...

    @property
    def committed_pos(self) -> int: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def append(self, encode: RecordEncoder) -> AppendResult: ...

    def read(self, pos: int, size: int) -> bytes: ...

    def entries_from(self, pos: int) -> Iterator[tuple[int, bytes]]: ...

    def on_state_change(self, callback: Callable[[LogState], None]) -> None: ...

    async def transfer_leadership(self, target: str) -> bool: ...
