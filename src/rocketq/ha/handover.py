"""Whom a stopping leader hands its leadership to.

One idea: the choice of the member a leader that is being stopped (SIGTERM, a rolling restart)
transfers its leadership to before it goes, so that the group has a leader again within a few
round trips instead of after a follower's election timeout. The transfer itself is the core's
(:meth:`rocketq.ha.raft.RaftNode` on ``TransferLeadership``: proposals refused, the target
brought up to date, then told to campaign at once); the broker's shutdown asks for it and waits
with a bound (:meth:`rocketq.ha.driver.RaftGroupLog.hand_over`,
:meth:`rocketq.broker.dledger_role.DLedgerRoleHandler.hand_over`).

Rules (pure: the leader's view of its followers in, a self id or None out):

* a **candidate** is a follower heard from (any reply: an append's or a heartbeat's) within
  ``live_within_ms`` of now and at most ``max_lag`` entries behind the leader's last index by
  its match index (what counts for commit): it can win the election the transfer starts and has
  little to catch up first;
* the **preferred leader** (``preferredLeaderId``) when it is a candidate;
* else the candidate with the **highest match index** (ties: the first in member order);
* **None** when no follower is a candidate: the leader stops without a hand-over (as without
  this feature, the group elects a leader after an election timeout).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rocketq.ha.raft_types import Progress

__all__ = ["FollowerView", "choose_target", "views_of"]


@dataclass(frozen=True, slots=True)
class FollowerView:
    """What the leader knows of one follower for the choice."""

    #: highest index counted for commit on that follower (-1: none yet)
    match: int
    #: milliseconds since it last answered; None: not since this leader took over
    heard_ago_ms: int | None


def choose_target(
    followers: Mapping[str, FollowerView],
    *,
    last_index: int,
    preferred: str | None,
    live_within_ms: int,
    max_lag: int,
) -> str | None:
    """The follower to hand leadership to, or None (see the module docstring). ``followers``
    in member order, without the leader itself."""
    candidates = [
        peer
        for peer, view in followers.items()
        if view.heard_ago_ms is not None
        and view.heard_ago_ms <= live_within_ms
        and last_index - view.match <= max_lag
    ]
    if not candidates:
        return None
    if preferred is not None and preferred in candidates:
        return preferred
    best = max(followers[peer].match for peer in candidates)
    return next(peer for peer in candidates if followers[peer].match == best)


def views_of(progress: Mapping[str, Progress], now_ms: int) -> dict[str, FollowerView]:
    """The leader's per-follower progress as :class:`FollowerView` (same order)."""
    return {
        peer: FollowerView(pr.match, None if pr.last_heard_ms is None else now_ms - pr.last_heard_ms)
        for peer, pr in progress.items()
    }
