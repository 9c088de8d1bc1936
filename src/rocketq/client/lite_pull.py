"""The asyncio lite pull consumer: the one implementation behind :class:`rocketq.client.LitePullConsumer`.

The application pulls: :meth:`AsyncLitePullConsumer.poll` returns the next messages of the
queues the consumer owns, and the consumer keeps one *next offset* per queue (the offset after
the last message poll returned). There is no prefetching: a poll pulls on demand, so ``seek``
takes effect on the very next poll and ``commit`` stores exactly what the application got.

Group membership, rebalancing, offsets, single pulls and the requests brokers send are the
:class:`~rocketq.client.consumer_core.ConsumerCore`'s (heartbeat ``consumeType``
CONSUME_ACTIVELY). Two ways to own queues (not both):

* ``assign(queues)`` — the application names the queues (``fetch_message_queues`` lists them);
* ``subscribe(topic, "TagA || TagB")`` — the group shares the topic's queues (rebalanced by the
  ``allocate_strategy``, :mod:`rocketq.client.allocate`: ``AVG`` by default, one contiguous
  share; ``AVG_BY_CIRCLE``; ``CONSISTENT_HASH``). A queue that leaves the assignment has its
  offset committed first. With ``message_model=MessageModel.BROADCASTING`` every consumer owns
  every queue and offsets are kept in a local file (:mod:`rocketq.client.offset_store`) instead
  of on the brokers.

Poll, per call (spec/remoting.md §4)::

    one LITE_PULL_MESSAGE (361) per queue without SUSPEND, round-robin from the queue after the
    last one that gave messages; the first that returns messages answers the poll
      →  nothing anywhere: one suspended pull per queue (long polling, held by the broker up to
         the poll's remaining time, at most 15 s); the first with messages answers, the others
         are cancelled (their offsets do not move)

Starting offset of a queue: the group's committed offset, else by ``consume_from_where``
(:meth:`ConsumerCore.initial_offset`). Commits (UPDATE_CONSUMER_OFFSET 15) of every owned
queue: every ``auto_commit_interval_ms`` when ``auto_commit``, on :meth:`commit`, before a
rebalance gives a queue away and at :meth:`shutdown`. With ``auto_commit`` a queue's position
also rides on its next pull (COMMIT_OFFSET flag and ``commitOffset`` in the pull header, no
request of its own), and the periodic commit skips the queues whose position the broker already
holds. :meth:`commit` keeps its meaning: it stores every owned queue's position at once, with one
UPDATE_CONSUMER_OFFSET per queue, and raises when one fails. An offset reset relayed by a broker
(RESET_CONSUMER_CLIENT_OFFSET 220) moves the owned queues of that topic as a seek and commits
them at once.

Poison records (a record a pull cannot decode: CRC mismatch, a body marked compressed that does
not inflate, a record that does not parse) are skipped: the pull logs each at ERROR with its
topic, queue and offsets, poll delivers the queue's other messages in order, and the offset
moves past it (committed like any other). The record stays in the store; ``Admin`` reads it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from rocketq.client._facade import BlockingFacade, blocking, takes_arguments_of
from rocketq.client.allocate import AllocateStrategy, allocate_averagely
from rocketq.client.config import ClientConfig, ConsumeFromWhere, MessageModel
from rocketq.client.consumer_api import ConsumerApi, ConsumerFacade
from rocketq.client.consumer_core import (
    DEFAULT_PULL_BATCH_SIZE,
    DEFAULT_REBALANCE_INTERVAL_MS,
    ERROR_BACKOFF_S,
    MAX_PULL_BATCH_SIZE,
    MAX_SUSPEND_MS,
    ConsumerCore,
    decode_messages,
    reset_offset_table,
)
from rocketq.client.offset_store import DEFAULT_OFFSET_STORE_DIR
from rocketq.errors import ConfigError, RocketqError
from rocketq.message import MessageExt
from rocketq.protocol.queue import MessageQueue

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_POLL_TIMEOUT_MS = 5_000


class AsyncLitePullConsumer(ConsumerApi):
    """A RocketMQ lite pull consumer on the running asyncio event loop.

    Settings shared with the other clients (name servers, instance name, client IP, request
    timeout, heartbeat and commit intervals) come from ``config`` (a
    :class:`~rocketq.client.config.ClientConfig`); the keyword arguments of the same meaning
    override it when given (``auto_commit_interval_ms`` is the config's
    ``persist_consumer_offset_interval_ms``). ``consume_from_where`` applies to queues the group
    has no committed offset for; ``consume_timestamp_ms`` is the start for
    ``CONSUME_FROM_TIMESTAMP`` (default: 30 minutes ago, as RocketMQ). All timeouts are
    milliseconds."""

    def __init__(
        self,
        group: str,
        *,
        config: ClientConfig | None = None,
        namesrv_addr: str | Sequence[str] | None = None,
        instance_name: str | None = None,
        client_ip: str | None = None,
        pull_batch_size: int = DEFAULT_PULL_BATCH_SIZE,
        poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS,
        auto_commit: bool = True,
        auto_commit_interval_ms: int | None = None,
        consume_from_where: ConsumeFromWhere | str = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp_ms: int | None = None,
        heartbeat_interval_ms: int | None = None,
        rebalance_interval_ms: int = DEFAULT_REBALANCE_INTERVAL_MS,
        request_timeout_ms: int | None = None,
        allocate_strategy: str | AllocateStrategy = "AVG",
        message_model: MessageModel | str = MessageModel.CLUSTERING,
        offset_store_dir: str = DEFAULT_OFFSET_STORE_DIR,
    ) -> None:
        if poll_timeout_ms <= 0:
            raise ConfigError(
                f"invalid lite pull consumer config: poll_timeout_ms={poll_timeout_ms} must be > 0"
            )
        self._core = ConsumerCore.of_facade("CONSUME_ACTIVELY", locals())
        self._core.poison_action = "skipped: not delivered, the offset moves past it"
        self.poll_timeout_ms = poll_timeout_ms
        self._rr = 0

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Connect and, in subscribe mode, heartbeat and rebalance once before returning."""
        if self._core.running:
            return
        await self._core.start()
        log.info("lite pull consumer %s started as %s", self.group, self.client_id)

    async def shutdown(self) -> None:
        """Commit every owned queue's offset, leave the group, close connections; idempotent."""
        was_running = self._core.running
        await self._core.shutdown()
        if was_running:
            log.info("lite pull consumer %s shut down", self.group)

    # -- ownership ---------------------------------------------------------------------------
    def assign(self, message_queues: Iterable[MessageQueue]) -> None:
        """Own exactly ``message_queues`` (offsets of queues kept stay where they are)."""
        self._core.assign(message_queues)

    # -- polling -----------------------------------------------------------------------------
    async def poll(self, timeout_ms: int | None = None) -> list[MessageExt]:
        """The next messages of one owned queue, in queue order; ``[]`` when none arrived
        within ``timeout_ms`` (default ``poll_timeout_ms``)."""
        core = self._core
        core.check_running()
        timeout_s = (self.poll_timeout_ms if timeout_ms is None else timeout_ms) / 1000
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_s, 0.0)
        while True:
            queues = core.owned_queues()
            if not queues:
                if not await self._wait_assignment(deadline - loop.time()):
                    return []
                continue
            start = self._rr % len(queues)
            order = queues[start:] + queues[:start]
            failed = 0
            for mq in order:
                got = await self._pull_once(mq, suspend_ms=0)
                if got is None:
                    failed += 1
                    continue
                if got:
                    self._rr = queues.index(mq) + 1
                    return got
            remaining = deadline - loop.time()
            if remaining <= 0:
                return []
            if failed == len(order):
                await self._wait_assignment(min(remaining, ERROR_BACKOFF_S))
                continue
            got_any = await self._long_poll(order, remaining)
            if got_any is not None:
                mq, msgs = got_any
                owned = core.owned_queues()
                if mq in owned:
                    self._rr = owned.index(mq) + 1
                return msgs
            if deadline - loop.time() <= 0:
                return []

    async def _wait_assignment(self, timeout_s: float) -> bool:
        if timeout_s <= 0:
            return False
        event = self._core.assignment_changed
        event.clear()
        try:
            await asyncio.wait_for(event.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def _long_poll(
        self, queues: list[MessageQueue], remaining_s: float
    ) -> tuple[MessageQueue, list[MessageExt]] | None:
        suspend_ms = max(1, min(int(remaining_s * 1000), MAX_SUSPEND_MS))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + remaining_s
        tasks = {loop.create_task(self._pull_once(mq, suspend_ms)): mq for mq in queues}
        changed_event = self._core.assignment_changed
        changed_event.clear()

        async def assignment_changed() -> list[MessageExt] | None:
            await changed_event.wait()
            return None

        changed = loop.create_task(assignment_changed())
        try:
            pending = {*tasks, changed}
            while True:
                left = deadline - loop.time()
                if left <= 0:
                    return None
                done, pending = await asyncio.wait(pending, timeout=left, return_when=asyncio.FIRST_COMPLETED)
                # Several pulls can answer in one loop iteration, and each moved its queue's
                # offset: the one returned keeps its move, the others are given back (their
                # queues' offsets go back to their first message), or their messages would be
                # skipped by this poll and, once committed, by the whole group.
                answered = [(tasks[t], got) for t in done if t is not changed and (got := t.result())]
                if changed in done:
                    answered, lost = [], answered
                else:
                    lost = answered[1:]
                for mq, msgs in lost:
                    state = self._core.queue_state(mq)
                    if state is not None:
                        state.offset = msgs[0].queue_offset
                if answered:
                    return answered[0]
                if changed in done or pending == {changed}:
                    return None
        finally:
            for task in [*tasks, changed]:
                task.cancel()
            await asyncio.gather(*tasks, changed, return_exceptions=True)

    async def _pull_once(self, mq: MessageQueue, suspend_ms: int) -> list[MessageExt] | None:
        """Pull ``mq`` once and move its offset; None when the pull failed."""
        core = self._core
        state = core.queue_state(mq)
        if state is None:
            return []
        try:
            if state.offset is None:
                version = state.version
                offset = await core.initial_offset(mq)
                if state.offset is None and state.version == version:
                    state.offset = offset
            assert state.offset is not None
            pulled = await core.pull(
                mq,
                state.offset,
                suspend_ms,
                version=state.version,
                commit_offset=core.ride_along_offset(mq),
            )
        except asyncio.CancelledError:
            raise
        except RocketqError as exc:
            log.warning("pull of %s failed: %s", mq, exc)
            return None
        if (
            core.queue_state(mq) is not state
            or state.version != pulled.version
            or state.offset != pulled.offset
        ):
            return []  # sought or reassigned meanwhile: the answer is stale
        if pulled.offset_moved:
            log.warning("offset %d of %s moved to %d", pulled.offset, mq, pulled.next_offset)
        state.offset = pulled.next_offset
        return pulled.messages

    # -- offsets -----------------------------------------------------------------------------
    async def seek(self, mq: MessageQueue, offset: int) -> None:
        """Make the next poll of ``mq`` start at ``offset`` (between its min and max offset)."""
        state = self._core.owned(mq)
        low, high = await self.min_offset(mq), await self.max_offset(mq)
        if not low <= offset <= high:
            raise ValueError(f"offset {offset} of {mq} is outside [{low}, {high}]")
        state.move_to(offset)

    async def seek_to_begin(self, mq: MessageQueue) -> None:
        """Make the next poll of ``mq`` start at its oldest message."""
        await self.seek(mq, await self.min_offset(mq))

    async def seek_to_end(self, mq: MessageQueue) -> None:
        """Make the next poll of ``mq`` return only messages sent from now on."""
        await self.seek(mq, await self.max_offset(mq))

    async def offset_for_timestamp(self, mq: MessageQueue, ts_ms: int) -> int:
        """The first offset of ``mq`` whose store time is ``>= ts_ms`` (SEARCH_OFFSET_BY_TIMESTAMP)."""
        return await self._core.offset_for_timestamp(mq, ts_ms)

    async def min_offset(self, mq: MessageQueue) -> int:
        """The offset of the oldest message of ``mq``."""
        return await self._core.min_offset(mq)

    async def max_offset(self, mq: MessageQueue) -> int:
        """The offset after the newest message of ``mq``."""
        return await self._core.max_offset(mq)

    async def committed(self, mq: MessageQueue) -> int:
        """The group's committed offset of ``mq`` on the broker, -1 when it has none."""
        return await self._core.committed(mq)

    async def commit(self) -> None:
        """Store every owned queue's next offset as the group's committed offset."""
        await self._core.commit()

    # -- routes ------------------------------------------------------------------------------
    async def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        """The readable queues of ``topic`` on brokers with a master, sorted."""
        return await self._core.fetch_message_queues(topic)


class LitePullConsumer(ConsumerFacade[AsyncLitePullConsumer]):
    """A lite pull consumer with blocking methods; same arguments as :class:`AsyncLitePullConsumer`.

    ``start()`` creates one event loop and one daemon thread (``rocketq-lite-pull-<group>``)
    that runs the core; every method submits the matching coroutine there and waits for it.
    ``subscribe``/``assign`` may be called before ``start()``. ``shutdown()`` commits offsets,
    stops the loop and joins the thread.

    >>> c = LitePullConsumer("CG", namesrv_addr="127.0.0.1:9876")   # doctest: +SKIP
    >>> c.subscribe("T", "TagA || TagB"); c.start()                 # doctest: +SKIP
    >>> msgs = c.poll(timeout_ms=1000)                               # doctest: +SKIP
    >>> c.shutdown()                                                 # doctest: +SKIP
    """

    @takes_arguments_of(AsyncLitePullConsumer)
    def __init__(self, group: str, **kwargs: Any) -> None:
        BlockingFacade.__init__(
            self, AsyncLitePullConsumer(group, **kwargs), f"rocketq-lite-pull-{group}", f"consumer {group}"
        )

    def assign(self, message_queues: Iterable[MessageQueue]) -> None:
        """Own exactly ``message_queues``."""
        self._sync(self._core.assign, list(message_queues))

    poll = blocking(AsyncLitePullConsumer.poll)
    seek = blocking(AsyncLitePullConsumer.seek)
    seek_to_begin = blocking(AsyncLitePullConsumer.seek_to_begin)
    seek_to_end = blocking(AsyncLitePullConsumer.seek_to_end)
    offset_for_timestamp = blocking(AsyncLitePullConsumer.offset_for_timestamp)
    min_offset = blocking(AsyncLitePullConsumer.min_offset)
    max_offset = blocking(AsyncLitePullConsumer.max_offset)
    commit = blocking(AsyncLitePullConsumer.commit)
    committed = blocking(AsyncLitePullConsumer.committed)
    fetch_message_queues = blocking(AsyncLitePullConsumer.fetch_message_queues)


__all__ = [
    "DEFAULT_POLL_TIMEOUT_MS",
    "MAX_PULL_BATCH_SIZE",
    "AsyncLitePullConsumer",
    "LitePullConsumer",
    "allocate_averagely",
    "decode_messages",
    "reset_offset_table",
]
