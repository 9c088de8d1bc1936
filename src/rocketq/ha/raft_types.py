"""The vocabulary of the Raft core: configuration, log entries, peer messages, events in, actions out.

Everything here is an immutable value. :class:`rocketq.ha.raft.RaftNode` takes events
(:class:`Tick`, :class:`Receive`, :class:`Propose`, :class:`ProposeBatch`, :class:`Persisted`,
:class:`TransferLeadership`) and returns a list of actions (:class:`PersistHardState`,
:class:`TruncateLog`, :class:`AppendEntries`, :class:`Send`, :class:`Apply`,
:class:`ProposalResult`, :class:`RoleChanged`) that a driver carries out **in order**. The
storage interface the driver must provide is exactly what these actions imply:

=====================  =====================================================================
action                 what the driver does
=====================  =====================================================================
PersistHardState       write ``(term, vote)`` durably (tmp + fsync + rename + fsync dir) and
                       finish before carrying out any later action of the same list
TruncateLog            drop every entry at and after ``from_index`` (never a committed one)
AppendEntries          write the entries after the current end, in order; report completion with
                       ``Persisted(index, term, synced=False)`` once written (page cache) and
                       ``Persisted(index, term, synced=True)`` once fsynced
Send                   hand the message to the transport (best effort; loss is tolerated)
Apply                  committed entries, in index order, each exactly once per process lifetime
ProposalResult         answer the clients that proposed ``proposal_id`` (and the ``count - 1``
                       proposals after it, proposed together)
RoleChanged            role, term or known leader changed (the broker flips master/slave on it)
=====================  =====================================================================

Indexes start at 0 as in DLedger; an empty log has ``last_index == -1`` and the empty prefix has
term 0 (the first elected leader has term 1).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

#: DLedger's entry header (``DLedgerEntry.BODY_OFFSET``), counted in an entry's size for flow control.
ENTRY_OVERHEAD = 48


class Role(enum.Enum):
    FOLLOWER = "FOLLOWER"
    PRE_CANDIDATE = "PRE_CANDIDATE"
    CANDIDATE = "CANDIDATE"
    LEADER = "LEADER"


class EntryKind(enum.IntEnum):
    NORMAL = 0
    NOOP = 1  # appended by every new leader so its term's commit carries the previous terms' tail


class AckPolicy(enum.Enum):
    """Which replica position the leader counts towards a quorum.

    ``APPENDED``: an entry counts once a replica has written it (page cache). This is DLedger's and
    RocketMQ's behaviour; it survives ``kill -9`` of any number of processes and the power loss of a
    minority of machines, not the simultaneous power loss of a majority.
    ``FSYNCED``: an entry counts once a replica has fsynced it; survives any crash.
    """

    APPENDED = "page_cache"
    FSYNCED = "fsync"


class Outcome(enum.IntEnum):
    """What a proposal came to; values are DLedger's response codes (spec/replication.md §1.6)."""

    SUCCESS = 200
    NOT_LEADER = 404
    TERM_CHANGED = 501
    WAIT_QUORUM_ACK_TIMEOUT = 502
    LEADER_PENDING_FULL = 503
    LEADER_TRANSFERRING = 506

    @property
    def definite(self) -> bool:
        """True when the outcome is certain: committed, or never appended anywhere.

        ``TERM_CHANGED`` and ``WAIT_QUORUM_ACK_TIMEOUT`` are indeterminate: the entry is in the old
        leader's log and may still be committed by a later leader.
        """
        return self not in (Outcome.TERM_CHANGED, Outcome.WAIT_QUORUM_ACK_TIMEOUT)


@dataclass(frozen=True, slots=True)
class Entry:
    index: int
    term: int
    data: bytes
    kind: EntryKind = EntryKind.NORMAL

    @property
    def size(self) -> int:
        """Bytes this entry costs on the wire and on disk (body plus DLedger's header)."""
        return len(self.data) + ENTRY_OVERHEAD


_new = object.__new__
# the slots' own setters: a frozen dataclass's __init__ sets each field through
# object.__setattr__ by name, which costs a proposal of many entries more than the rest of its step
_set_index, _set_term, _set_data, _set_kind = (
    vars(Entry)[name].__set__ for name in ("index", "term", "data", "kind")
)


def entry_run(first: int, term: int, data: Sequence[bytes]) -> tuple[Entry, ...]:
    """NORMAL entries ``first, first + 1, ...`` of ``term`` with the bodies ``data``: what
    ``Entry(first + i, term, d)`` of each gives, built without the dataclass constructor."""
    normal = EntryKind.NORMAL
    out: list[Entry] = []
    append = out.append
    for index, d in enumerate(data, first):
        e = _new(Entry)
        _set_index(e, index)
        _set_term(e, term)
        _set_data(e, d)
        _set_kind(e, normal)
        append(e)
    return tuple(out)


def entries_size(entries: Sequence[Entry]) -> int:
    """The entries' :attr:`Entry.size` summed (one pass over the bodies, no property call each:
    the leader sums every batch it sends)."""
    return sum([len(e.data) for e in entries]) + ENTRY_OVERHEAD * len(entries)


@dataclass(frozen=True, slots=True)
class HardState:
    term: int = 0
    vote: str | None = None


@dataclass(frozen=True, slots=True)
class RaftConfig:
    """Settings of one member; times in milliseconds of the caller's clock.

    Defaults are DLedger 0.3.1.2's (spec/replication.md §1.7): heartbeat 2 s, a follower waits
    3 heartbeats (6 s) before campaigning, ack timeout 2.5 s, 10000 pending proposals, 1000
    appends in flight per follower, 4 KB batches, re-push after 1 s, transfer lag 1000 entries.
    """

    node_id: str
    members: tuple[str, ...]
    heartbeat_interval_ms: int = 2000
    election_timeout_ms: int = 6000  # randomized in [timeout, 2 * timeout) per round
    pre_vote: bool = True
    check_quorum: bool = True
    ack_policy: AckPolicy = AckPolicy.APPENDED
    ack_timeout_ms: int = 2500
    max_pending_proposals: int = 10000
    max_inflight_msgs: int = 1000
    max_inflight_bytes: int = 64 << 20
    max_batch_bytes: int = 4096  # an append message carries at least one entry whatever its size
    resend_timeout_ms: int = 1000
    preferred_leader_id: str | None = None
    max_transfer_lag: int = 1000

    def __post_init__(self) -> None:
        if self.node_id not in self.members:
            raise ValueError(f"raft node id {self.node_id!r} is not among the members {self.members!r}")
        if len(set(self.members)) != len(self.members):
            raise ValueError(f"raft members {self.members!r} repeat an id")
        if self.preferred_leader_id is not None and self.preferred_leader_id not in self.members:
            raise ValueError(f"preferred leader {self.preferred_leader_id!r} is not among {self.members!r}")
        if not 0 < self.heartbeat_interval_ms < self.election_timeout_ms:
            raise ValueError(
                f"heartbeat interval {self.heartbeat_interval_ms} ms must be positive and below the "
                f"election timeout {self.election_timeout_ms} ms"
            )
        for name in ("ack_timeout_ms", "max_pending_proposals", "max_inflight_msgs", "max_inflight_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"raft {name} must be positive, got {getattr(self, name)}")
        if self.max_batch_bytes <= 0 or self.resend_timeout_ms <= 0:
            raise ValueError("raft max_batch_bytes and resend_timeout_ms must be positive")

    @property
    def quorum(self) -> int:
        return len(self.members) // 2 + 1


# ---------------------------------------------------------------------------------------- messages


@dataclass(frozen=True, slots=True)
class Message:
    src: str
    dst: str
    term: int


@dataclass(frozen=True, slots=True)
class PreVote(Message):
    """``term`` is the term the sender would campaign in; nobody changes state on it."""

    last_index: int
    last_term: int


@dataclass(frozen=True, slots=True)
class PreVoteReply(Message):
    granted: bool


@dataclass(frozen=True, slots=True)
class Vote(Message):
    last_index: int
    last_term: int
    transfer: bool = False  # campaign ordered by the leader (TimeoutNow): voters skip the lease check


@dataclass(frozen=True, slots=True)
class VoteReply(Message):
    granted: bool


@dataclass(frozen=True, slots=True)
class Append(Message):
    prev_index: int
    prev_term: int
    entries: tuple[Entry, ...]
    commit: int


@dataclass(frozen=True, slots=True)
class AppendReply(Message):
    """A follower's answer, also sent unprompted when its writes complete.

    ``match_index``: the end of the prefix known to match the leader (in memory). ``appended_index``
    and ``synced_index``: how much of that prefix is written / fsynced. On a rejection,
    ``reject_index`` is the rejected ``prev_index`` and the conflict hints let the leader skip a
    whole term at once: ``conflict_term == 0`` means the follower's log ends at ``conflict_index - 1``.
    """

    success: bool
    match_index: int
    appended_index: int = -1
    synced_index: int = -1
    reject_index: int = -1
    conflict_term: int = 0
    conflict_index: int = -1


@dataclass(frozen=True, slots=True)
class Heartbeat(Message):
    commit: int


@dataclass(frozen=True, slots=True)
class HeartbeatReply(Message):
    """``last_index``: the follower's log end (the leader notices lost entries); ``verified_index``:
    the end of its prefix checked against this leader, which bounds its commit index (after a
    restart it is -1 and the leader re-verifies with an empty append); ``appended_index`` and
    ``synced_index`` as in :class:`AppendReply`, repeated so a lost ack cannot stall the commit."""

    last_index: int = -1
    verified_index: int = -1
    appended_index: int = -1
    synced_index: int = -1


@dataclass(frozen=True, slots=True)
class TimeoutNow(Message):
    """Leadership transfer: campaign at once, without pre-vote."""


#: Elections and liveness; a driver sends these ahead of bulk appends (DLedger has separate executors).
CONTROL_MESSAGES = (PreVote, PreVoteReply, Vote, VoteReply, Heartbeat, HeartbeatReply, TimeoutNow)


def is_control(message: Message) -> bool:
    return isinstance(message, CONTROL_MESSAGES)


# ------------------------------------------------------------------------------------------ events


@dataclass(frozen=True, slots=True)
class Tick:
    elapsed_ms: int


@dataclass(frozen=True, slots=True)
class Receive:
    message: Message


@dataclass(frozen=True, slots=True)
class Propose:
    proposal_id: int
    data: bytes


@dataclass(frozen=True, slots=True)
class ProposeBatch:
    """Proposals ``first_id``, ``first_id + 1``, ... of ``data`` (in order) as one event: their
    entries are appended together (one :class:`AppendEntries`) and sent to each follower in one
    message; the proposals are answered as with :class:`Propose`, those answered together by one
    :class:`ProposalResult` for all of them (``count``)."""

    first_id: int
    data: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class Persisted:
    """The log up to ``index`` (whose entry has ``term``) is written, or fsynced when ``synced``."""

    index: int
    term: int
    synced: bool


@dataclass(frozen=True, slots=True)
class TransferLeadership:
    target: str


Event = Tick | Receive | Propose | ProposeBatch | Persisted | TransferLeadership

# ----------------------------------------------------------------------------------------- actions


@dataclass(frozen=True, slots=True)
class PersistHardState:
    term: int
    vote: str | None


@dataclass(frozen=True, slots=True)
class TruncateLog:
    from_index: int


@dataclass(frozen=True, slots=True)
class AppendEntries:
    entries: tuple[Entry, ...]


@dataclass(frozen=True, slots=True)
class Send:
    message: Message


@dataclass(frozen=True, slots=True)
class Apply:
    entries: tuple[Entry, ...]


@dataclass(frozen=True, slots=True)
class ProposalResult:
    """The outcome of proposals ``proposal_id, ..., proposal_id + count - 1`` (proposed together,
    answered together), whose entries are at ``index, ..., index + count - 1`` (``index`` -1:
    none was appended)."""

    proposal_id: int
    outcome: Outcome
    index: int = -1
    term: int = 0
    leader_id: str | None = None
    count: int = 1

    def each(self) -> Iterator[ProposalResult]:
        """The result of each proposal on its own (``count`` 1)."""
        if self.count == 1:
            yield self
            return
        for k in range(self.count):
            index = self.index + k if self.index >= 0 else -1
            yield ProposalResult(self.proposal_id + k, self.outcome, index, self.term, self.leader_id)


@dataclass(frozen=True, slots=True)
class RoleChanged:
    role: Role
    term: int
    leader_id: str | None


Action = PersistHardState | TruncateLog | AppendEntries | Send | Apply | ProposalResult | RoleChanged


@dataclass(slots=True)
class Progress:
    """The leader's view of one follower.

    ``accepted``: highest index the follower confirmed matching (drives ``next`` and the window).
    ``match``: highest index counted for commit, the follower's appended or synced position per
    the ack policy; never above ``accepted``. PROBE sends one message at a time until the
    follower's position is known; REPLICATE pipelines up to the in-flight window.
    """

    next: int
    accepted: int = -1
    match: int = -1
    probing: bool = True
    probe_sent: bool = False
    inflight: list[tuple[int, int]] = field(default_factory=list)  # (last index, bytes) per message
    inflight_bytes: int = 0
    recent_active: bool = False
    last_ack_ms: int = 0
    last_send_ms: int = 0
    #: when the follower last answered anything (an append or a heartbeat, accepted or not);
    #: None: not since this leader took over. A stopping leader hands over only to a follower
    #: heard from lately (:mod:`rocketq.ha.handover`)
    last_heard_ms: int | None = None

    def become_probe(self) -> None:
        self.probing = True
        self.probe_sent = False
        if self.accepted >= 0:
            self.next = self.accepted + 1
        # else the follower never answered this leader: ``next`` stays the leader's guess (its
        # log end at the election, or past what it sent since), and a rejection says where
        # the follower's log ends. Index 0 would be a read of the log's oldest entry, and where
        # retention deleted it, a follower wrongly reported as needing a rebuild.
        self.inflight.clear()
        self.inflight_bytes = 0

    def become_replicate(self) -> None:
        self.probing = False
        self.probe_sent = False
        self.next = self.accepted + 1

    def acknowledged(self, match_index: int, position: int, now_ms: int) -> None:
        """A successful reply: the follower matches up to ``match_index``, and ``position`` (its
        written or fsynced end, per the ack policy) counts for commit."""
        self.last_ack_ms = now_ms
        self.accepted = max(self.accepted, match_index)
        self.match = max(self.match, min(position, self.accepted))
        if self.probing:
            self.become_replicate()
        else:
            self.free_to(match_index)
            self.next = max(self.next, self.accepted + 1)

    def lost_entries(self, last_index: int) -> None:
        """The follower's log ends at ``last_index``, before what it acknowledged: it lost entries
        (a power loss, a lost disk; DLedger #61). Start over from there."""
        self.accepted = last_index
        self.match = min(self.match, last_index)
        self.become_probe()
        self.next = last_index + 1  # also when its log is empty now (-1): from the start

    def free_to(self, index: int) -> None:
        n = 0
        for last, size in self.inflight:
            if last > index:
                break
            n += 1
            self.inflight_bytes -= size
        if n:
            del self.inflight[:n]

    def paused(self, config: RaftConfig) -> bool:
        if self.probing:
            return self.probe_sent
        full = len(self.inflight) >= config.max_inflight_msgs
        return full or self.inflight_bytes >= config.max_inflight_bytes


# ------------------------------------------------------------------------------- fast constructors
# What the leader builds for every follower and proposal, built as :func:`entry_run` builds
# entries: through the slots' setters, equal to what the constructors give.


def _setter(cls: type, name: str) -> Callable[[Any, Any], None]:
    for klass in cls.__mro__:
        slot = vars(klass).get(name)
        if slot is not None:
            return slot.__set__  # type: ignore[no-any-return]
    raise AttributeError(f"{cls.__name__} has no slot {name!r}")


_SEND_MESSAGE = _setter(Send, "message")
_APPEND_FIELDS = tuple(
    _setter(Append, name) for name in ("src", "dst", "term", "prev_index", "prev_term", "entries", "commit")
)
_REPLY_FIELDS = tuple(
    _setter(AppendReply, name)
    for name in (
        "src", "dst", "term", "success", "match_index", "appended_index", "synced_index", "reject_index",
        "conflict_term", "conflict_index",
    )
)  # fmt: skip
_RESULT_FIELDS = tuple(
    _setter(ProposalResult, name)
    for name in ("proposal_id", "outcome", "index", "term", "leader_id", "count")
)


def send_of(message: Message) -> Send:
    """``Send(message)``."""
    send = _new(Send)
    _SEND_MESSAGE(send, message)
    return send


def append_of(
    src: str, dst: str, term: int, prev_index: int, prev_term: int, entries: tuple[Entry, ...], commit: int
) -> Append:
    """``Append(src, dst, term, prev_index, prev_term, entries, commit)``."""
    m = _new(Append)
    s_src, s_dst, s_term, s_prev_index, s_prev_term, s_entries, s_commit = _APPEND_FIELDS
    s_src(m, src)
    s_dst(m, dst)
    s_term(m, term)
    s_prev_index(m, prev_index)
    s_prev_term(m, prev_term)
    s_entries(m, entries)
    s_commit(m, commit)
    return m


def result_of(
    proposal_id: int, outcome: Outcome, index: int, term: int, leader_id: str | None, count: int
) -> ProposalResult:
    """``ProposalResult(proposal_id, outcome, index, term, leader_id, count)``."""
    r = _new(ProposalResult)
    s_pid, s_outcome, s_index, s_term, s_leader, s_count = _RESULT_FIELDS
    s_pid(r, proposal_id)
    s_outcome(r, outcome)
    s_index(r, index)
    s_term(r, term)
    s_leader(r, leader_id)
    s_count(r, count)
    return r


def append_reply_of(
    src: str,
    dst: str,
    term: int,
    success: bool,
    match_index: int,
    appended_index: int,
    synced_index: int,
    reject_index: int,
    conflict_term: int,
    conflict_index: int,
) -> AppendReply:
    """``AppendReply(src, dst, term, success, match_index, ...)`` (the leader's most frequent
    message, decoded from every follower's reply)."""
    m = _new(AppendReply)
    values = (
        src, dst, term, success, match_index, appended_index, synced_index, reject_index, conflict_term,
        conflict_index,
    )  # fmt: skip
    for set_field, value in zip(_REPLY_FIELDS, values, strict=True):
        set_field(m, value)
    return m
