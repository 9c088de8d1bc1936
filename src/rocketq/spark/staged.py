"""What a write task staged: half messages and how END_TRANSACTION names them.

A :class:`StagedMessage` travels from the write task to the driver inside a
:class:`StagedBatch` (pickled by Spark) and into the streaming sink's batch markers (as JSON of
its fields; fields added later have defaults, so older markers still load).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from pyspark.sql.datasource import WriterCommitMessage

from rocketq.errors import RocketqError

#: commitOrRollback values of END_TRANSACTION.
COMMIT = 8
ROLLBACK = 12


class StagedWriteError(RocketqError):
    """Staged rows could not be committed (too old, or a broker refused the commit)."""


@dataclass(frozen=True, slots=True)
class StagedMessage:
    """One half message: where it is and how END_TRANSACTION names it."""

    addr: str
    topic: str
    tran_state_offset: int  # the half's offset in the broker's half queue
    commit_log_offset: int
    msg_id: str
    broker: str = ""  # broker name and queue id the row is published to (for error messages)
    queue_id: int = -1


@dataclass
class StagedBatch(WriterCommitMessage):
    """What one write task staged (its commit message to the driver)."""

    partition_id: int
    staged_at_ms: int
    messages: list[StagedMessage]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


__all__ = ["COMMIT", "ROLLBACK", "StagedBatch", "StagedMessage", "StagedWriteError", "now_ms"]
