"""Dispatch: from CommitLog records to ConsumeQueue units and index entries (ReputMessageService).

This module currently defines :class:`DispatchRequest`, the parsed form of one record that every
dispatcher receives.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class DispatchRequest:
    """One CommitLog record as the dispatchers see it (RocketMQ ``DispatchRequest``)."""

    topic: str
    queue_id: int
    commit_log_offset: int
    msg_size: int
    tags_code: int
    store_timestamp: int
    consume_queue_offset: int
    keys: str = ""
    uniq_key: str | None = None
    sys_flag: int = 0
    prepared_transaction_offset: int = 0
    properties: dict[str, str] = field(default_factory=dict)
