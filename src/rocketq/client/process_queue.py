"""The process queue of the push consumer: one owned queue's pulled, not yet consumed messages.

The pull loop of a queue adds what it pulled (:meth:`ProcessQueue.add`) and stops pulling while
the queue holds too many messages or bytes (:meth:`ProcessQueue.over_threshold`); consumers
remove what they consumed (:meth:`ProcessQueue.remove`). The offset that may be committed is
the smallest offset still held, or the next pull offset when nothing is (:meth:`committable`),
so a message is committed only once every message before it was consumed. A queue given away
or reset is marked ``dropped`` and abandoned.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from rocketq.message import MessageExt
from rocketq.protocol.queue import MessageQueue


class ProcessQueue:
    """The pulled, not yet consumed messages of one owned queue, by queue offset."""

    def __init__(self, mq: MessageQueue, pull_offset: int) -> None:
        self.mq = mq
        self.pull_offset = pull_offset
        self.messages: dict[int, MessageExt] = {}
        self.size = 0
        self.dropped = False
        self.freed = asyncio.Event()

    def add(self, messages: Sequence[MessageExt], next_offset: int) -> list[MessageExt]:
        """Cache ``messages`` and move the pull offset; the messages that were new."""
        added = []
        for m in messages:
            if m.queue_offset not in self.messages:
                self.messages[m.queue_offset] = m
                self.size += len(m.body)
                added.append(m)
        self.pull_offset = next_offset
        return added

    def remove(self, messages: Sequence[MessageExt]) -> int:
        """Forget consumed ``messages``; the offset that may be committed now."""
        for m in messages:
            if self.messages.pop(m.queue_offset, None) is not None:
                self.size -= len(m.body)
        self.freed.set()
        return self.committable()

    def committable(self) -> int:
        """The smallest offset held, or the next pull offset when none is."""
        return min(self.messages) if self.messages else self.pull_offset

    def over_threshold(self, max_count: int, max_bytes: int) -> bool:
        """Whether more than ``max_count`` messages or ``max_bytes`` of bodies are held."""
        return len(self.messages) > max_count or self.size > max_bytes


__all__ = ["ProcessQueue"]
