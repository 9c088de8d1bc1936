"""The Raft core of DLedger mode: a pure state machine, events in, actions out.

One idea: the Raft rules of one member (election, replication, commit, transfer) as one state
machine; the log view, the message types and the configuration live in their own modules.

Theory of operation
-------------------
:class:`RaftNode` has no I/O, no clock and no threads. The driver feeds it events — elapsed time
(:class:`Tick`), peer messages, client proposals, "the log is written/fsynced up to here"
(:class:`Persisted`), leadership-transfer requests — and carries out the returned actions in order
(see :mod:`rocketq.ha.raft_types` for the storage contract). Randomness (election timeouts) comes
from the ``random.Random`` passed in, so a seeded run is reproducible.

Rules kept (section numbers are spec/replication.md's):

* **Persist before send.** After a change of term or vote, a :class:`PersistHardState` precedes the
  next :class:`Send`; the driver completes it first. DLedger 0.3.1.2 does not fsync it (§1.1).
* **Elections.** Randomized timeouts in ``[T, 2T)``. Pre-vote first ("would you vote for me in
  term+1?" changes no term; DLedger retries in the same term instead, §1.2): an isolated node never
  inflates its term. A node that heard from a leader within the election timeout ignores
  (pre-)votes unless they come from a transfer (the lease). **Check-quorum**: a leader that has not
  heard from a majority within an election timeout steps down (DLedger: 6 s, §1.2).
* **No-op on election, and commit only current-term entries** (Raft §5.4.2). The commit index is the
  quorum-th highest match index, taken only when the entry there has the leader's term. DLedger
  0.3.1.2 takes the median whatever the term (§1.3), which commits an older term's entry by
  counting replicas: Figure 8, ``tests/unit/test_raft_figure8.py``. The no-op commits the previous
  terms' tail promptly, which the broker's LEADER hook waits for (§2.4).
* **Follower commit** = max(own commit, min(leader commit, last index verified to match this
  leader)): never an entry not checked against the leader (DLedger #316, §1.3).
* **Truncation never at or below the commit index**: asserted; a leader never truncates.
* **Fast back-up.** A rejection carries the conflicting term and its first index (or the follower's
  end), so the leader skips a whole term per round trip instead of DLedger's one-entry walk (§1.3).
* **Flow control.** Per follower: PROBE (one message at a time, until its position is known) and
  REPLICATE (pipelined, at most ``max_inflight_msgs`` messages and ``max_inflight_bytes`` in flight,
  each at most ``max_batch_bytes``). Without an ack for ``resend_timeout_ms`` the follower goes
  back to PROBE and the leader resends (DLedger's re-push).
* **Leadership transfer**, TimeoutNow style: proposals are refused with ``LEADER_TRANSFERRING``,
  the target is brought up to date, then told to campaign at once; abandoned after an election
  timeout. With ``preferred_leader_id`` set, a leader that is not the preferred node transfers to
  it once it is live and within ``max_transfer_lag`` entries (DLedger's checkPreferredLeader).
* **Deleted prefix.** Retention may delete the entry store's leading data files (all committed):
  the log then begins at ``first_index``. A follower takes an append whose previous entry it
  deleted as matching (it was committed); a leader never builds an append from entries it
  deleted: the follower that needs them is logged (ERROR, once per position) and left behind.
* **Proposals** on a non-leader fail at once with ``NOT_LEADER`` and the known leader id. On the
  leader they end as SUCCESS (committed), ``WAIT_QUORUM_ACK_TIMEOUT`` after ``ack_timeout_ms`` or
  ``TERM_CHANGED`` on step-down; the last two are indeterminate (§1.6).

Acknowledgement policy: followers report the written and the fsynced end of the prefix matching
the leader; the leader counts one per ``RaftConfig.ack_policy``, its own position likewise:
``AckPolicy.APPENDED`` ("page_cache", DLedger's; survives ``kill -9``, not power loss) or
``AckPolicy.FSYNCED`` (survives any crash). Committed entries are applied once written locally.
"""

from __future__ import annotations

import collections
import logging
import random
from typing import NoReturn

from rocketq.ha.raft_log import Compacted, RaftLog
from rocketq.ha.raft_types import (
    AckPolicy,
    Action,
    Append,
    AppendEntries,
    AppendReply,
    Apply,
    Entry,
    EntryKind,
    Event,
    HardState,
    Heartbeat,
    HeartbeatReply,
    Message,
    Outcome,
    Persisted,
    PersistHardState,
    PreVote,
    PreVoteReply,
    Progress,
    ProposalResult,
    Propose,
    ProposeBatch,
    RaftConfig,
    Receive,
    Role,
    RoleChanged,
    Tick,
    TimeoutNow,
    TransferLeadership,
    TruncateLog,
    Vote,
    VoteReply,
    append_of,
    entry_run,
    result_of,
    send_of,
)

log = logging.getLogger(__name__)


class RaftNode:
    """One member of a Raft group; see the module comment for the rules it keeps."""

    def __init__(
        self,
        config: RaftConfig,
        rng: random.Random,
        hard_state: HardState | None = None,
        entries: tuple[Entry, ...] | RaftLog = (),
        commit_index: int = -1,
        applied_index: int = -1,
    ) -> None:
        self.config = config
        self.id = config.node_id
        self.peers = tuple(m for m in config.members if m != self.id)
        self._quorum = config.quorum
        self._rng = rng
        hard_state = hard_state or HardState()
        self.term = hard_state.term
        self.vote = hard_state.vote
        self._persisted_hs = hard_state
        self.log = entries if isinstance(entries, RaftLog) else RaftLog(entries)
        if not -1 <= applied_index <= commit_index <= self.log.last_index:
            raise ValueError(
                f"raft restart with applied {applied_index}, commit {commit_index} and last index "
                f"{self.log.last_index}: need applied <= commit <= last"
            )
        # what survived a restart counts as written and fsynced: the driver fsyncs what its
        # recovery kept before building the core
        self.appended_index = self.log.last_index
        self.synced_index = self.log.last_index
        self.commit_index = commit_index
        self.applied_index = applied_index
        self.role = Role.FOLLOWER
        self.leader_id: str | None = None
        self.now_ms = 0
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        self._timeout = self._random_timeout()
        self._votes: dict[str, bool] = {}
        self.progress: dict[str, Progress] = {}
        #: proposals waiting for their commit, in index order: runs of consecutive entries
        #: proposed together, ``(first index, first proposal id, count, deadline)``; a queue,
        #: not a dict by index, whose first key after many pops from its front is found by
        #: scanning the freed slots
        self._pending: collections.deque[tuple[int, int, int, int]] = collections.deque()
        self._pending_count = 0
        self.transferee: str | None = None
        self._transfer_abandoned_ms = -(1 << 62)
        self._verified = -1  # end of the prefix known to match the current leader's log
        self._reported = (-1, -1)
        self._announced: tuple[Role, int, str | None] = (self.role, self.term, None)
        self._out: list[Action] = []
        #: leader: followers that need entries retention deleted here, by the index they need
        self.unservable: dict[str, int] = {}

    # ------------------------------------------------------------------------------ entry point

    def step(self, event: Event) -> list[Action]:
        """Process one event; the returned actions must be carried out in order."""
        self._out = []
        if isinstance(event, Tick):
            self._tick(event.elapsed_ms)
        elif isinstance(event, Receive):
            self._receive(event.message)
        elif isinstance(event, Propose):
            self._propose(event.proposal_id, event.data)
        elif isinstance(event, ProposeBatch):
            self._propose_batch(event.first_id, event.data)
        elif isinstance(event, Persisted):
            self._persisted(event)
        elif isinstance(event, TransferLeadership):
            self._transfer(event.target)
        else:  # pragma: no cover - the Event union is closed
            raise TypeError(f"unknown raft event {event!r}")
        self._maybe_apply()
        self._flush_hard_state()
        now = (self.role, self.term, self.leader_id)
        if now != self._announced:
            self._announced = now
            self._out.append(RoleChanged(*now))
        out, self._out = self._out, []
        return out

    @property
    def hard_state(self) -> HardState:
        return HardState(self.term, self.vote)

    # ------------------------------------------------------------------------------ plumbing

    def _flush_hard_state(self) -> None:
        done = self._persisted_hs
        if done.term != self.term or done.vote != self.vote:  # no HardState built per step
            self._persisted_hs = HardState(self.term, self.vote)
            self._out.append(PersistHardState(self.term, self.vote))

    def _send(self, message: Message) -> None:
        self._flush_hard_state()  # persist before any message that depends on term or vote
        self._out.append(send_of(message))

    def _random_timeout(self) -> int:
        t = self.config.election_timeout_ms
        return t + self._rng.randrange(t)

    def _own_match(self) -> int:
        if self.config.ack_policy is AckPolicy.FSYNCED:
            return self.synced_index
        return self.appended_index

    def _in_lease(self) -> bool:
        return (
            self.config.check_quorum
            and self.leader_id is not None
            and self._election_elapsed < self.config.election_timeout_ms
        )

    # ------------------------------------------------------------------------------ roles

    def _reset(self, term: int) -> None:
        if self.role is Role.LEADER:
            self._fail_pending(Outcome.TERM_CHANGED)  # answered with the term they were proposed in
            self.progress = {}
        if term != self.term:
            self.term = term
            self.vote = None
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        self._timeout = self._random_timeout()
        self._votes = {}
        self.transferee = None

    def _become_follower(self, term: int, leader: str | None) -> None:
        if term != self.term or leader != self.leader_id:
            self._verified = -1
            self._reported = (-1, -1)
        self._reset(term)
        self.role = Role.FOLLOWER
        self.leader_id = leader

    def _campaign(self, pre: bool, transfer: bool = False) -> None:
        self._reset(self.term)
        self.leader_id = None
        self._verified = -1
        if pre:
            self.role = Role.PRE_CANDIDATE
            term = self.term + 1
        else:
            self._reset(self.term + 1)
            self.role = Role.CANDIDATE
            self.vote = self.id
            term = self.term
        self._votes = {self.id: True}
        if self._won():  # a group of one
            if pre:
                self._campaign(pre=False)
            else:
                self._become_leader()
            return
        last = (self.log.last_index, self.log.last_term)
        for peer in self.peers:
            self._send(
                PreVote(self.id, peer, term, *last) if pre else Vote(self.id, peer, term, *last, transfer)
            )

    def _won(self) -> bool:
        return sum(self._votes.values()) >= self._quorum

    def _lost(self) -> bool:
        return sum(not v for v in self._votes.values()) >= self._quorum

    def _become_leader(self) -> None:
        self._reset(self.term)
        self.role = Role.LEADER
        self.leader_id = self.id
        nxt = self.log.last_index + 1
        self.progress = {p: Progress(next=nxt, last_ack_ms=self.now_ms) for p in self.peers}
        noop = Entry(nxt, self.term, b"", EntryKind.NOOP)
        self.log.append((noop,))
        self._out.append(AppendEntries((noop,)))
        for peer in self.peers:
            self._send_append(peer, allow_empty=True)

    # ------------------------------------------------------------------------------ time

    def _tick(self, elapsed_ms: int) -> None:
        if elapsed_ms < 0:
            raise ValueError(f"raft tick with negative elapsed time {elapsed_ms} ms")
        self.now_ms += elapsed_ms
        self._election_elapsed += elapsed_ms
        if self.role is not Role.LEADER:
            if self._election_elapsed >= self._timeout:
                self._campaign(pre=self.config.pre_vote)
            return
        cfg = self.config
        if self._election_elapsed >= cfg.election_timeout_ms:
            self._election_elapsed = 0
            active = 1 + sum(pr.recent_active for pr in self.progress.values())
            if cfg.check_quorum and active < cfg.quorum:
                self._become_follower(self.term, None)  # check-quorum: a majority went silent
                return
            for pr in self.progress.values():
                pr.recent_active = False
            if self.transferee is not None:  # not finished within a timeout: abandoned
                self.transferee = None
                self._transfer_abandoned_ms = self.now_ms
        self._heartbeat_elapsed += elapsed_ms
        if self._heartbeat_elapsed >= cfg.heartbeat_interval_ms:
            self._heartbeat_elapsed = 0
            for peer in self.peers:
                self._send(Heartbeat(self.id, peer, self.term, self.commit_index))
            self._check_preferred_leader()
        for peer, pr in self.progress.items():
            waited = self.now_ms - (pr.last_send_ms if pr.probing else pr.last_ack_ms)
            if (pr.probe_sent or pr.inflight) and waited >= cfg.resend_timeout_ms:
                pr.become_probe()
                self._send_append(peer, allow_empty=True)
        pending = self._pending
        while pending and pending[0][3] <= self.now_ms:
            index, pid, count, _ = pending.popleft()
            self._pending_count -= count
            self._out.append(
                ProposalResult(pid, Outcome.WAIT_QUORUM_ACK_TIMEOUT, index, self.term, self.leader_id, count)
            )

    def _check_preferred_leader(self) -> None:
        preferred = self.config.preferred_leader_id
        if preferred is None or preferred == self.id or self.transferee is not None:
            return
        if self.now_ms - self._transfer_abandoned_ms < 2 * self.config.election_timeout_ms:
            return  # the last transfer failed: let proposals through for a while
        pr = self.progress[preferred]
        if pr.recent_active and self.log.last_index - pr.accepted <= self.config.max_transfer_lag:
            self._transfer(preferred)

    # ------------------------------------------------------------------------------ messages

    def _receive(self, m: Message) -> None:
        if m.dst != self.id:
            raise ValueError(f"raft node {self.id!r} received a message for {m.dst!r}")
        if type(m) is AppendReply and m.term == self.term and self.role is Role.LEADER:
            self._handle_append_reply(m)  # the leader's most frequent message, where the tests below lead
            return
        if m.term > self.term:
            if isinstance(m, PreVote | Vote):
                transfer = isinstance(m, Vote) and m.transfer
                if self._in_lease() and not transfer:
                    return  # a live leader is known: do not let a rejoining node disrupt it
            if isinstance(m, PreVote) or (isinstance(m, PreVoteReply) and m.granted):
                pass  # pre-vote traffic never changes a term
            else:
                leader = m.src if isinstance(m, Append | Heartbeat) else None
                self._become_follower(m.term, leader)
        elif m.term < self.term:
            if isinstance(m, Append | Heartbeat):
                # a stale leader: the reply's term makes it step down
                self._send(HeartbeatReply(self.id, m.src, self.term, self.log.last_index))
            elif isinstance(m, PreVote):
                self._send(PreVoteReply(self.id, m.src, self.term, False))
            return
        if isinstance(m, PreVote | Vote):
            self._handle_vote(m)
        elif isinstance(m, PreVoteReply | VoteReply):
            pre = isinstance(m, PreVoteReply)  # a granted pre-vote carries the term to campaign in
            if self.role is (Role.PRE_CANDIDATE if pre else Role.CANDIDATE) and (
                m.term == self.term + pre or not m.granted
            ):
                self._votes[m.src] = m.granted
                if self._won() and pre:
                    self._campaign(pre=False)
                elif self._won():
                    self._become_leader()
                elif self._lost():
                    self._become_follower(self.term, None)
        elif isinstance(m, Append | Heartbeat | TimeoutNow):
            if self.role is Role.LEADER:
                raise AssertionError(f"raft node {self.id} is leader of term {self.term} and got {m!r}")
            if self.role is not Role.FOLLOWER or self.leader_id != m.src:
                self._become_follower(self.term, m.src)
            self._election_elapsed = 0
            if isinstance(m, Append):
                self._handle_append(m)
            elif isinstance(m, Heartbeat):
                self._verified = max(self._verified, self.commit_index)
                self._advance_follower_commit(m.commit)
                appended, synced = self._positions()
                reply = HeartbeatReply(
                    self.id, m.src, self.term, self.log.last_index, self._verified, appended, synced
                )
                self._send(reply)
            else:
                self._campaign(pre=False, transfer=True)
        elif isinstance(m, AppendReply) and self.role is Role.LEADER:
            self._handle_append_reply(m)
        elif isinstance(m, HeartbeatReply) and self.role is Role.LEADER:
            pr = self.progress[m.src]
            pr.recent_active = True
            pr.last_heard_ms = self.now_ms
            if m.last_index < pr.accepted:
                pr.lost_entries(m.last_index)
            pr.match = max(pr.match, min(self._policy_position(m), pr.accepted))
            self._maybe_commit()
            pr.probe_sent = False
            if m.src in self.unservable:  # refused before: rebuilt from a copy meanwhile?
                nxt = min(m.last_index, self.log.last_index) + 1
                if self.log.can_send_from(nxt):  # probe where its log ends now (once a heartbeat)
                    pr.become_probe()
                    pr.next = nxt
                    self._send_append(m.src, allow_empty=True)
                    return
            # a follower that cannot vouch for the prefix it acknowledged (it restarted) gets an
            # empty append at that point: its commit index may only follow a verified prefix
            self._send_append(m.src, allow_empty=m.verified_index < min(pr.accepted, self.commit_index))

    def _handle_vote(self, m: PreVote | Vote) -> None:
        up_to_date = (m.last_term, m.last_index) >= (self.log.last_term, self.log.last_index)
        can_vote = (
            self.vote == m.src
            or (self.vote is None and self.leader_id is None)
            or (isinstance(m, PreVote) and m.term > self.term)
        )
        grant = can_vote and up_to_date
        if isinstance(m, PreVote):
            self._send(PreVoteReply(self.id, m.src, m.term if grant else self.term, grant))
            return
        if grant:
            self.vote = m.src
            self._election_elapsed = 0
        self._send(VoteReply(self.id, m.src, self.term, grant))

    # ------------------------------------------------------------------------------ follower side

    def _handle_append(self, m: Append) -> None:
        self._verified = max(self._verified, self.commit_index)  # a committed prefix matches every leader
        prev, prev_term, entries = m.prev_index, m.prev_term, m.entries
        first = self.log.first_index  # entries before it were deleted by retention: committed
        matched = False
        if prev < self.commit_index or prev < first:
            # what is committed here is in every later leader's log (leader completeness): a
            # leader that disagrees proves a broken invariant, which no truncation may hide
            if prev >= max(first, 0) and self.log.term_at(prev) != prev_term:
                self._refuse_committed_conflict(prev)
            for e in entries[: self.commit_index - prev]:
                if e.index >= first and self.log.term_at(e.index) != e.term:
                    self._refuse_committed_conflict(e.index)
            entries = entries[max(self.commit_index - prev, 0) :]
            prev, matched = max(prev, self.commit_index), True
        if not matched and (prev > self.log.last_index or self.log.term_at(prev) != prev_term):
            if prev > self.log.last_index:
                conflict_term, conflict_index = 0, self.log.last_index + 1
            else:
                conflict_term = self.log.term_at(prev)
                conflict_index = self.log.first_index_of_term(conflict_term, self.commit_index + 1)
            self._send(
                AppendReply(
                    self.id, m.src, self.term, False, self._verified,
                    reject_index=m.prev_index, conflict_term=conflict_term, conflict_index=conflict_index,
                )
            )  # fmt: skip
            return
        new: tuple[Entry, ...] = ()
        for i, e in enumerate(entries):
            if e.index > self.log.last_index:
                new = entries[i:]
                break
            if self.log.term_at(e.index) != e.term:
                self._truncate(e.index)
                new = entries[i:]
                break
        if new:
            self.log.append(new)
            self._out.append(AppendEntries(new))
        end = max(m.prev_index + len(m.entries), self.commit_index)
        self._verified = max(self._verified, end)
        self._advance_follower_commit(m.commit)
        self._reply_append(m.src, end)

    def _truncate(self, from_index: int) -> None:
        if self.role is Role.LEADER:
            raise AssertionError(f"raft leader {self.id} asked to truncate its log at {from_index}")
        if from_index <= self.commit_index:
            self._refuse_committed_conflict(from_index)
        self.log.truncate(from_index)
        self.appended_index = min(self.appended_index, from_index - 1)
        self.synced_index = min(self.synced_index, from_index - 1)
        self._verified = min(self._verified, from_index - 1)
        self._out.append(TruncateLog(from_index))

    def _refuse_committed_conflict(self, index: int) -> NoReturn:
        raise AssertionError(
            f"raft node {self.id} would truncate at {index}, at or below its commit index {self.commit_index}"
        )

    def _advance_follower_commit(self, leader_commit: int) -> None:
        target = min(leader_commit, self._verified)
        self.commit_index = max(self.commit_index, target)

    def _positions(self) -> tuple[int, int]:
        """Written and fsynced ends of the prefix verified against the current leader."""
        return min(self._verified, self.appended_index), min(self._verified, self.synced_index)

    def _reply_append(self, leader: str, match_index: int) -> None:
        appended, synced = self._reported = self._positions()
        self._send(AppendReply(self.id, leader, self.term, True, match_index, appended, synced))

    def _persisted(self, ev: Persisted) -> None:
        if not self.log.has(ev.index, ev.term):
            return  # the entry was truncated meanwhile: a stale notification
        self.appended_index = max(self.appended_index, ev.index)
        if ev.synced:
            self.synced_index = max(self.synced_index, ev.index)
        if self.role is Role.LEADER:
            self._maybe_commit()
        elif (
            self.role is Role.FOLLOWER and self.leader_id is not None and self._positions() != self._reported
        ):
            self._reply_append(self.leader_id, self._verified)

    # ------------------------------------------------------------------------------ leader side

    def _send_append(self, peer: str, allow_empty: bool = False) -> None:
        pr = self.progress[peer]
        cfg = self.config
        while not pr.paused(cfg):
            lo = pr.next
            if lo > self.log.last_index and not allow_empty:
                return
            if not self.log.can_send_from(lo):
                self._cannot_serve(peer, lo)
                return
            allow_empty = False
            try:
                entries, size = self.log.sized_batch(lo, cfg.max_batch_bytes)
                prev_term = self.log.term_at(lo - 1)
            except Compacted:  # retention deleted them while this member runs
                self._cannot_serve(peer, lo)
                return
            self._send(append_of(self.id, peer, self.term, lo - 1, prev_term, entries, self.commit_index))
            pr.last_send_ms = self.now_ms
            if pr.probing:
                pr.probe_sent = True
                return
            if not entries:
                return
            pr.next = entries[-1].index + 1
            if not pr.inflight:
                pr.last_ack_ms = self.now_ms  # the resend timer runs from the window's first send
            pr.inflight.append((entries[-1].index, size))
            pr.inflight_bytes += size

    def _cannot_serve(self, peer: str, lo: int) -> None:
        """``peer`` needs entries from ``lo`` on, and retention deleted some of them here (or the
        term before them is unknown): it gets no appends (heartbeats still) and stays behind
        until an operator rebuilds its data directory (docs/replication.md). Logged once per
        position; the next try comes with the peer's next reply, never in a loop."""
        if self.unservable.get(peer) != lo:
            self.unservable[peer] = lo
            log.error(
                "raft leader %s: follower %s needs entries from index %d, but this log begins at %d "
                "(retention deleted them); it cannot catch up from this leader: rebuild its data "
                "directory from a copy of another member's (docs/replication.md)",
                self.id, peer, lo, self.log.first_index,
            )  # fmt: skip

    def _handle_append_reply(self, m: AppendReply) -> None:
        pr = self.progress[m.src]
        pr.recent_active = True
        pr.last_heard_ms = self.now_ms
        if not m.success:
            if m.conflict_term == 0 and m.conflict_index - 1 < pr.accepted:
                pr.lost_entries(m.conflict_index - 1)
            elif (not pr.probing and m.reject_index <= pr.accepted) or (
                pr.probing and m.reject_index != pr.next - 1
            ):
                return  # stale rejection
            else:
                nxt = m.conflict_index
                if m.conflict_term > 0:
                    last = self.log.last_index_of_term(m.conflict_term)
                    if last is not None:
                        nxt = last + 1  # fast back-up: skip the follower's whole conflicting term
                pr.become_probe()
                pr.next = max(min(nxt, m.reject_index), pr.accepted + 1)
            self._send_append(m.src, allow_empty=True)
            return
        pr.acknowledged(m.match_index, self._policy_position(m), self.now_ms)
        self.unservable.pop(m.src, None)
        self._maybe_commit()
        if self.transferee == m.src and pr.accepted == self.log.last_index:
            self._send(TimeoutNow(self.id, m.src, self.term))
        self._send_append(m.src)

    def _policy_position(self, m: AppendReply | HeartbeatReply) -> int:
        return m.synced_index if self.config.ack_policy is AckPolicy.FSYNCED else m.appended_index

    def _maybe_commit(self) -> None:
        matches = [pr.match for pr in self.progress.values()]
        matches.append(self._own_match())
        matches.sort(reverse=True)
        q = matches[self._quorum - 1]
        # Raft §5.4.2: only an entry of the leader's own term is committed by counting replicas
        if q > self.commit_index and self.log.term_at(q) == self.term:
            self.commit_index = q
            pending = self._pending
            while pending and pending[0][0] <= q:
                index, pid, count, deadline = pending[0]
                done = min(count, q - index + 1)
                if done == count:
                    pending.popleft()
                else:  # the rest of the run waits for a later commit
                    pending[0] = (index + done, pid + done, count - done, deadline)
                self._pending_count -= done
                self._out.append(result_of(pid, Outcome.SUCCESS, index, self.term, self.id, done))

    def _fail_pending(self, outcome: Outcome) -> None:
        for index, pid, count, _ in self._pending:
            self._out.append(ProposalResult(pid, outcome, index, self.term, None, count))
        self._pending.clear()
        self._pending_count = 0

    def _propose(self, pid: int, data: bytes) -> None:
        if self.role is not Role.LEADER:
            self._out.append(ProposalResult(pid, Outcome.NOT_LEADER, leader_id=self.leader_id))
            return
        if self.transferee is not None:
            self._out.append(ProposalResult(pid, Outcome.LEADER_TRANSFERRING, leader_id=self.id))
            return
        if self._pending_count >= self.config.max_pending_proposals:
            self._out.append(ProposalResult(pid, Outcome.LEADER_PENDING_FULL, leader_id=self.id))
            return
        e = Entry(self.log.last_index + 1, self.term, data)
        self.log.append((e,))
        self._out.append(AppendEntries((e,)))
        self._pending.append((e.index, pid, 1, self.now_ms + self.config.ack_timeout_ms))
        self._pending_count += 1
        for peer in self.peers:
            self._send_append(peer)

    def _propose_batch(self, first_id: int, data: tuple[bytes, ...]) -> None:
        """:meth:`_propose` of each in turn, with one append of all accepted entries and one
        round of sends to the followers (what the proposals one by one would have sent, merged)."""
        refused: Outcome | None = None
        leader: str | None = self.id
        if self.role is not Role.LEADER:
            refused, leader = Outcome.NOT_LEADER, self.leader_id
        elif self.transferee is not None:
            refused = Outcome.LEADER_TRANSFERRING
        room = 0 if refused is not None else self.config.max_pending_proposals - self._pending_count
        take = max(0, min(room, len(data)))
        if take:
            nxt, term = self.log.last_index + 1, self.term
            entries = entry_run(nxt, term, data if take == len(data) else data[:take])
            self.log.append_run(entries)  # consecutive, one term
            self._out.append(AppendEntries(entries))
            self._pending.append((nxt, first_id, take, self.now_ms + self.config.ack_timeout_ms))
            self._pending_count += take
        if take < len(data):
            outcome = refused or Outcome.LEADER_PENDING_FULL
            self._out.append(
                ProposalResult(first_id + take, outcome, leader_id=leader, count=len(data) - take)
            )
        if take:
            for peer in self.peers:
                self._send_append(peer)

    def _transfer(self, target: str) -> None:
        if self.role is not Role.LEADER or target == self.id or target not in self.progress:
            return
        if self.transferee == target:
            return
        self.transferee = target
        self._election_elapsed = 0  # the transfer is abandoned after one election timeout
        pr = self.progress[target]
        if pr.accepted == self.log.last_index:
            self._send(TimeoutNow(self.id, target, self.term))
        else:
            pr.become_probe()  # bring the target up to date now, not after the resend timeout
            self._send_append(target, allow_empty=True)

    # ------------------------------------------------------------------------------ apply

    def _maybe_apply(self) -> None:
        upto = min(self.commit_index, self.appended_index)
        if upto > self.applied_index:
            entries = self.log.entries(self.applied_index + 1, upto)
            self.applied_index = upto
            self._out.append(Apply(entries))
            self.log.release(upto)  # applied and written: the entry store serves them from now on
