"""A test double of :class:`~rocketq.ha.replicated_log.ReplicatedLog`: a real log (a group of
one) whose role the test sets, as a Raft member's role changes come, and whose ledger end it may
hold past the committed position (entries still to commit).

``force(state)`` (call it on the log's loop) makes ``state`` the log's and tells every state
callback; ``force(None)`` gives the real log's state back. While the forced role is not LEADER,
appends answer NOT_LEADER as a follower's log does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from rocketq.ha.raft_types import Role
from rocketq.ha.replicated_log import AppendResult, AppendStatus, LogState, RecordEncoder, ReplicatedLog


class SteeredLog:
    """See the module docstring."""

    def __init__(self, inner: ReplicatedLog) -> None:
        self.inner = inner
        self.forced: LogState | None = None
        #: the ledger end a new leader waits for its commit to reach (None: it does not wait)
        self.ledger_end_pos: int | None = None
        self._callbacks: list[Callable[[LogState], None]] = []

    @property
    def state(self) -> LogState:
        return self.forced or self.inner.state

    @property
    def committed_pos(self) -> int:
        return self.inner.committed_pos

    async def start(self) -> None:
        await self.inner.start()

    async def stop(self) -> None:
        await self.inner.stop()

    async def append(self, encode: RecordEncoder) -> AppendResult:
        if self.state.role is not Role.LEADER:
            return AppendResult(AppendStatus.NOT_LEADER, leader_id=self.state.leader_id)
        return await self.inner.append(encode)

    def read(self, pos: int, size: int) -> bytes:
        return self.inner.read(pos, size)

    def entries_from(self, pos: int) -> Iterator[tuple[int, bytes]]:
        return self.inner.entries_from(pos)

    def on_state_change(self, callback: Callable[[LogState], None]) -> None:
        self._callbacks.append(callback)

    async def transfer_leadership(self, target: str) -> bool:
        return False

    def force(self, state: LogState | None) -> None:
        self.forced = state
        for callback in self._callbacks:
            callback(self.state)
