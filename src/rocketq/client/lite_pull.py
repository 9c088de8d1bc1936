"""The asyncio lite pull consumer: the one implementation behind :class:`rocketq.client.LitePullConsumer`.

The application pulls: :meth:`AsyncLitePullConsumer.poll` returns the next messages of the
queues the consumer owns, and the consumer keeps one *next offset* per queue (the offset after
the last message poll returned). There is no prefetching: a poll pulls on demand, so ``seek``
takes effect on the very next poll and ``commit`` stores exactly what the application got.

Two ways to own queues (not both):

* ``assign(queues)`` — the application names the queues (``fetch_message_queues`` lists them);
* ``subscribe(topic, "TagA || TagB")`` — the group shares the topic's queues. The consumer sends
  HEART_BEAT (34) with its subscription to every broker of the topic every 30 s, and rebalances
  every 20 s and whenever a broker sends NOTIFY_CONSUMER_IDS_CHANGED (40): consumer ids from
  GET_CONSUMER_LIST_BY_GROUP (38) and the topic's readable queues are sorted, and the
  ``allocate_strategy`` (:mod:`rocketq.client.allocate`: ``AVG`` by default, one contiguous
  share; ``AVG_BY_CIRCLE``; ``CONSISTENT_HASH``) picks this consumer's share. A queue that
  leaves the assignment has its offset committed first. With ``message_model="BROADCASTING"``
  every consumer owns every queue and offsets are kept in a local file
  (:mod:`rocketq.client.offset_store`) instead of on the brokers.

Poll, per call (spec/remoting.md §4)::

    one LITE_PULL_MESSAGE (361) per queue without SUSPEND, round-robin from the queue after the
    last one that gave messages; the first that returns messages answers the poll
      →  nothing anywhere: one suspended pull per queue (long polling, held by the broker up to
         the poll's remaining time, at most 15 s); the first with messages answers, the others
         are cancelled (their offsets do not move)

Pull results: FOUND (0) → records (§3.7) decoded in queue order, zlib bodies inflated, messages
whose ``TAGS`` are not in the subscription dropped (tag codes only pre-filter on the broker);
PULL_NOT_FOUND (19), NO_MATCHED_MSG (20) and OFFSET_MOVED (21) → the queue's offset becomes
``nextBeginOffset``. A pull never piggybacks a commit (no COMMIT_OFFSET bit).

Starting offset of a queue: the group's committed offset (QUERY_CONSUMER_OFFSET 14); a group with
none starts by ``consume_from_where``: last = GET_MAX_OFFSET (30), first = GET_MIN_OFFSET (31),
timestamp = SEARCH_OFFSET_BY_TIMESTAMP (29). Unlike Java clients we ask with
``setZeroIfNotFound=false``, so a new group really starts where ``consume_from_where`` says.

Commits: UPDATE_CONSUMER_OFFSET (15), as a request that is answered (Java sends it oneway), for
every owned queue; every ``auto_commit_interval_ms`` when ``auto_commit``, on :meth:`commit`,
before a rebalance gives a queue away and at :meth:`shutdown`.

Offset resets: a broker relays ``resetOffsetByTime`` as RESET_CONSUMER_CLIENT_OFFSET (220, header
``topic``/``group``/``timestamp``/``isForce``, body ``{"offsetTable":{{queue}:offset}}``); owned
queues of that topic move to the new offsets (as a seek) and are committed at once.
GET_CONSUMER_STATUS_FROM_CLIENT (221) is answered with the owned queues' current offsets.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import socket
import time
import zlib
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from rocketq.broker import objkey_json
from rocketq.broker.headers import PULL_FLAG_LITE_PULL, PULL_FLAG_SUBSCRIPTION, PULL_FLAG_SUSPEND
from rocketq.broker.heartbeat import SubscriptionData, build_subscription
from rocketq.broker.rebalance_lock import MessageQueue as WireQueue
from rocketq.client._facade import BlockingFacade
from rocketq.client._routes import MASTER_ID, MessageQueue, RouteCache
from rocketq.client.aio import (
    _GROUP_PATTERN,
    GROUP_MAX_LENGTH,
    SYS_FLAG_COMPRESSED,
    error_for_response,
    parse_namesrv_addrs,
)
from rocketq.client.allocate import AllocateStrategy, allocate_averagely, resolve_strategy
from rocketq.client.offset_store import DEFAULT_OFFSET_STORE_DIR, LocalOffsetStore, default_offset_path
from rocketq.errors import (
    BodyFormatError,
    ClientStateError,
    ConfigError,
    ResponseCode,
    RocketqError,
    TopicNotExist,
)
from rocketq.message import MessageExt
from rocketq.namesrv.bodies import PERM_READ, TopicRouteData
from rocketq.protocol import record as rec
from rocketq.protocol.record import view_to_message
from rocketq.remoting import (
    Connection,
    RemotingClient,
    RemotingCommand,
    RequestCode,
    create_request,
    create_response,
)
from rocketq.remoting.codes import REQUEST_CODE_NOT_SUPPORTED_REMARK

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_PULL_BATCH_SIZE = 32
DEFAULT_POLL_TIMEOUT_MS = 5_000
DEFAULT_AUTO_COMMIT_INTERVAL_MS = 5_000
DEFAULT_HEARTBEAT_INTERVAL_MS = 30_000
DEFAULT_REBALANCE_INTERVAL_MS = 20_000
DEFAULT_REQUEST_TIMEOUT_MS = 3_000
#: Longest time the broker holds a suspended pull (RocketMQ's brokerSuspendMaxTimeMillis).
MAX_SUSPEND_MS = 15_000
#: Extra time a suspended pull waits for its answer beyond the hold time.
SUSPEND_MARGIN_S = 5.0
#: Pause before polling again when every queue failed.
ERROR_BACKOFF_S = 1.0
MAX_PULL_BATCH_SIZE = 1024
CONSUME_FROM = ("CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_FIRST_OFFSET", "CONSUME_FROM_TIMESTAMP")
MESSAGE_MODELS = ("CLUSTERING", "BROADCASTING")

_SUCCESS = 0
_PULL_NOT_FOUND = 19
_NO_MATCHED_MSG = 20
_OFFSET_MOVED = 21
_QUERY_NOT_FOUND = 22
_instance_ids = itertools.count(1)


def _local_ip() -> str:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            return str(s.getsockname()[0])
    except OSError:
        return "127.0.0.1"


def decode_messages(body: bytes) -> list[MessageExt]:
    """The messages of a pull body (concatenated records), zlib bodies inflated."""
    out: list[MessageExt] = []
    pos = 0
    while pos < len(body):
        view = rec.decode_record(body, pos, check_crc=True)
        if view.kind is not rec.RecordKind.MESSAGE:
            if view.kind is rec.RecordKind.CORRUPT:
                raise RocketqError(f"pulled record at byte {pos} is corrupt: {view.reason}")
            break
        msg = view_to_message(view)
        if msg.sys_flag & SYS_FLAG_COMPRESSED:
            msg.body = zlib.decompress(msg.body)
        out.append(msg)
        pos += view.size
    return out


@dataclass(slots=True)
class _QueueState:
    """The consumer's position in one owned queue; ``version`` changes on every seek."""

    offset: int | None = None
    version: int = 0


@dataclass(slots=True)
class _Pulled:
    mq: MessageQueue
    offset: int
    version: int
    code: int
    next_offset: int
    messages: list[MessageExt]


class AsyncLitePullConsumer:
    """A RocketMQ lite pull consumer on the running asyncio event loop.

    ``consume_from_where`` applies to queues the group has no committed offset for;
    ``consume_timestamp_ms`` is the start for ``CONSUME_FROM_TIMESTAMP`` (default: 30 minutes
    ago, as RocketMQ). All timeouts are milliseconds."""

    def __init__(
        self,
        group: str,
        *,
        namesrv_addr: str | Sequence[str],
        pull_batch_size: int = DEFAULT_PULL_BATCH_SIZE,
        poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS,
        auto_commit: bool = True,
        auto_commit_interval_ms: int = DEFAULT_AUTO_COMMIT_INTERVAL_MS,
        consume_from_where: str = "CONSUME_FROM_LAST_OFFSET",
        consume_timestamp_ms: int | None = None,
        heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
        rebalance_interval_ms: int = DEFAULT_REBALANCE_INTERVAL_MS,
        request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
        allocate_strategy: str | AllocateStrategy = "AVG",
        message_model: str = "CLUSTERING",
        offset_store_dir: str = DEFAULT_OFFSET_STORE_DIR,
    ) -> None:
        problems = []
        if not group or _GROUP_PATTERN.fullmatch(group) is None or len(group) > GROUP_MAX_LENGTH:
            problems.append(
                f"consumer group {group[:64]!r} must be 1..{GROUP_MAX_LENGTH} chars of [%|a-zA-Z0-9_-]"
            )
        if not 1 <= pull_batch_size <= MAX_PULL_BATCH_SIZE:
            problems.append(f"pull_batch_size={pull_batch_size} must be in [1, {MAX_PULL_BATCH_SIZE}]")
        for name, value in (
            ("poll_timeout_ms", poll_timeout_ms),
            ("auto_commit_interval_ms", auto_commit_interval_ms),
            ("heartbeat_interval_ms", heartbeat_interval_ms),
            ("rebalance_interval_ms", rebalance_interval_ms),
            ("request_timeout_ms", request_timeout_ms),
        ):
            if value <= 0:
                problems.append(f"{name}={value} must be > 0")
        if consume_from_where not in CONSUME_FROM:
            problems.append(
                f"consume_from_where={consume_from_where!r} must be one of {', '.join(CONSUME_FROM)}"
            )
        if message_model not in MESSAGE_MODELS:
            problems.append(f"message_model={message_model!r} must be one of {', '.join(MESSAGE_MODELS)}")
        if problems:
            raise ConfigError("invalid lite pull consumer config: " + "; ".join(problems))
        self.allocate_strategy = resolve_strategy(allocate_strategy)
        self.message_model = message_model
        self.group = group
        self.namesrv_addrs = parse_namesrv_addrs(namesrv_addr)
        self.pull_batch_size = pull_batch_size
        self.poll_timeout_ms = poll_timeout_ms
        self.auto_commit = auto_commit
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.consume_from_where = consume_from_where
        if consume_timestamp_ms is None:
            consume_timestamp_ms = time.time_ns() // 1_000_000 - 30 * 60 * 1000
        self.consume_timestamp_ms = consume_timestamp_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.rebalance_interval_ms = rebalance_interval_ms
        self.request_timeout_ms = request_timeout_ms
        ip = _local_ip()
        self.client_id = f"{ip}@{os.getpid()}#{next(_instance_ids)}"
        #: Broadcasting keeps offsets in a local file instead of on the brokers.
        self.offset_store: LocalOffsetStore | None = None
        if message_model == "BROADCASTING":
            self.offset_store = LocalOffsetStore(default_offset_path(offset_store_dir, ip, group))
        #: Called with the new offsets when a broker relays an offset reset (RESET_CONSUMER_CLIENT_OFFSET);
        #: None: the offsets of owned queues are simply moved (a seek).
        self.reset_listener: Callable[[dict[MessageQueue, int]], Awaitable[None]] | None = None
        #: Heartbeat ``consumeType``; the push consumer that drives this core says CONSUME_PASSIVELY.
        self.consume_type = "CONSUME_ACTIVELY"
        self._mode: str | None = None  # "assign" | "subscribe"
        self._subscriptions: dict[str, SubscriptionData] = {}
        self._queues: dict[MessageQueue, _QueueState] = {}
        self._broker_addrs: dict[str, str] = {}
        self._rr = 0
        self._remoting: RemotingClient | None = None
        self._routes: RouteCache | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._rebalance_wanted: asyncio.Event | None = None
        self._assignment_changed: asyncio.Event | None = None
        self._subs_changed = False
        self._state = "created"

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Connect and, in subscribe mode, heartbeat and rebalance once before returning."""
        if self._state == "running":
            return
        if self._state != "created":
            raise ClientStateError(f"consumer {self.group} was shut down and cannot be restarted")
        if self.offset_store is not None:
            self.offset_store.load()
        self._remoting = RemotingClient(self._on_broker_request)
        self._routes = RouteCache(self._remoting, self.namesrv_addrs, self.request_timeout_ms / 1000)
        self._rebalance_wanted = asyncio.Event()
        self._assignment_changed = asyncio.Event()
        self._state = "running"
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._rebalance_loop(), name=f"rocketq-lite-{self.group}-rebalance"),
            loop.create_task(self._heartbeat_loop(), name=f"rocketq-lite-{self.group}-heartbeat"),
        ]
        if self.auto_commit:
            self._tasks.append(
                loop.create_task(self._auto_commit_loop(), name=f"rocketq-lite-{self.group}-commit")
            )
        if self._mode == "subscribe":
            self._subs_changed = False
            await self._heartbeat_all()
            await self._rebalance()
        log.info("lite pull consumer %s started as %s", self.group, self.client_id)

    async def shutdown(self) -> None:
        """Commit every owned queue's offset, leave the group, close connections; idempotent."""
        if self._state != "running":
            self._state = "shutdown"
            return
        self._state = "stopping"
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        try:
            await self._commit_all(raise_errors=False)
            if self._mode == "subscribe":
                await self._unregister()
        finally:
            self._state = "shutdown"
            if self._remoting is not None:
                await self._remoting.close()
        log.info("lite pull consumer %s shut down", self.group)

    async def __aenter__(self) -> AsyncLitePullConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    def _running(self) -> RemotingClient:
        if self._state != "running" or self._remoting is None:
            what = "not started" if self._state == "created" else "shut down"
            raise ClientStateError(f"consumer {self.group} is {what}")
        return self._remoting

    # -- ownership ---------------------------------------------------------------------------
    def subscribe(self, topic: str, expression: str = "*", expression_type: str = "TAG") -> None:
        """Share ``topic``'s queues with the group, receiving messages whose tag is in
        ``expression`` (``"*"`` or ``"TagA || TagB"``), or with ``expression_type="SQL92"`` whose
        properties satisfy the selector ``expression`` (filtered by the broker). May be called
        before or after start. Raises :class:`SubscriptionParseFailed` for a bad expression."""
        if self._mode == "assign":
            raise ClientStateError("subscribe() cannot be combined with assign()")
        self._subscriptions[topic] = build_subscription(
            topic, expression, expression_type, sub_version=time.time_ns() // 1_000_000
        )
        self._mode = "subscribe"
        self._subs_changed = True
        if self._rebalance_wanted is not None:
            self._rebalance_wanted.set()

    def unsubscribe(self, topic: str) -> None:
        """Stop consuming ``topic`` (its queues leave at the next rebalance)."""
        if self._subscriptions.pop(topic, None) is not None:
            self._subs_changed = True
            if self._rebalance_wanted is not None:
                self._rebalance_wanted.set()

    def assign(self, message_queues: Iterable[MessageQueue]) -> None:
        """Own exactly ``message_queues`` (offsets of queues kept stay where they are)."""
        if self._mode == "subscribe":
            raise ClientStateError("assign() cannot be combined with subscribe()")
        self._mode = "assign"
        wanted = list(dict.fromkeys(message_queues))
        self._queues = {mq: self._queues.get(mq) or _QueueState() for mq in wanted}
        if self._assignment_changed is not None:
            self._assignment_changed.set()

    def assignment(self) -> list[MessageQueue]:
        """The queues this consumer owns now, sorted."""
        return sorted(self._queues)

    # -- polling -----------------------------------------------------------------------------
    async def poll(self, timeout_ms: int | None = None) -> list[MessageExt]:
        """The next messages of one owned queue, in queue order; ``[]`` when none arrived
        within ``timeout_ms`` (default ``poll_timeout_ms``)."""
        self._running()
        timeout_s = (self.poll_timeout_ms if timeout_ms is None else timeout_ms) / 1000
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_s, 0.0)
        while True:
            queues = list(self._queues)
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
                if mq in self._queues:
                    self._rr = list(self._queues).index(mq) + 1
                return msgs
            if deadline - loop.time() <= 0:
                return []

    async def _wait_assignment(self, timeout_s: float) -> bool:
        event = self._assignment_changed
        if event is None or timeout_s <= 0:
            return False
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
        changed_event = self._assignment_changed
        assert changed_event is not None
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
                if changed in done:
                    return None
                for task in done:
                    result = task.result()
                    if result:
                        return tasks[task], result
                if pending == {changed}:
                    return None
        finally:
            for task in [*tasks, changed]:
                task.cancel()
            await asyncio.gather(*tasks, changed, return_exceptions=True)

    async def _pull_once(self, mq: MessageQueue, suspend_ms: int) -> list[MessageExt] | None:
        """Pull ``mq`` once and move its offset; None when the pull failed."""
        state = self._queues.get(mq)
        if state is None:
            return []
        try:
            if state.offset is None:
                version = state.version
                offset = await self._initial_offset(mq)
                if state.offset is None and state.version == version:
                    state.offset = offset
            pulled = await self._pull(mq, state, suspend_ms)
        except asyncio.CancelledError:
            raise
        except RocketqError as exc:
            log.warning("pull of %s failed: %s", mq, exc)
            return None
        if (
            self._queues.get(mq) is not state
            or state.version != pulled.version
            or state.offset != pulled.offset
        ):
            return []  # sought or reassigned meanwhile: the answer is stale
        if pulled.code == _OFFSET_MOVED:
            log.warning("offset %d of %s moved to %d", pulled.offset, mq, pulled.next_offset)
        state.offset = pulled.next_offset
        return pulled.messages

    async def _pull(self, mq: MessageQueue, state: _QueueState, suspend_ms: int) -> _Pulled:
        remoting = self._running()
        offset, version = state.offset, state.version
        assert offset is not None
        sub = self._subscriptions.get(mq.topic)
        sys_flag = PULL_FLAG_SUBSCRIPTION | PULL_FLAG_LITE_PULL
        if suspend_ms > 0:
            sys_flag |= PULL_FLAG_SUSPEND
        fields = {
            "consumerGroup": self.group,
            "topic": mq.topic,
            "queueId": mq.queue_id,
            "queueOffset": offset,
            "maxMsgNums": self.pull_batch_size,
            "sysFlag": sys_flag,
            "commitOffset": 0,
            "suspendTimeoutMillis": suspend_ms,
            "subscription": sub.sub_string if sub is not None else "*",
            "subVersion": sub.sub_version if sub is not None else 0,
            "expressionType": sub.expression_type if sub is not None else "TAG",
        }
        addr = await self._broker_addr(mq)
        timeout_s = self.request_timeout_ms / 1000 + (
            suspend_ms / 1000 + SUSPEND_MARGIN_S if suspend_ms else 0
        )
        response = await remoting.invoke(
            addr, create_request(RequestCode.LITE_PULL_MESSAGE, fields), timeout_s
        )
        code = response.code
        if code not in (_SUCCESS, _PULL_NOT_FOUND, _NO_MATCHED_MSG, _OFFSET_MOVED):
            raise error_for_response(response, f"{mq.broker_name}@{addr}")
        next_offset = int(response.ext_fields.get("nextBeginOffset", offset))
        messages: list[MessageExt] = []
        if code == _SUCCESS:
            messages = decode_messages(response.body)
            if sub is not None and sub.tags_set:
                messages = [m for m in messages if m.tags is not None and m.tags in sub.tags_set]
        return _Pulled(mq, offset, version, code, next_offset, messages)

    # -- offsets -----------------------------------------------------------------------------
    def _owned(self, mq: MessageQueue) -> _QueueState:
        state = self._queues.get(mq)
        if state is None:
            raise ValueError(f"{mq} is not assigned to consumer {self.group}")
        return state

    async def seek(self, mq: MessageQueue, offset: int) -> None:
        """Make the next poll of ``mq`` start at ``offset`` (between its min and max offset)."""
        state = self._owned(mq)
        low, high = await self.min_offset(mq), await self.max_offset(mq)
        if not low <= offset <= high:
            raise ValueError(f"offset {offset} of {mq} is outside [{low}, {high}]")
        state.offset = offset
        state.version += 1

    async def seek_to_begin(self, mq: MessageQueue) -> None:
        """Make the next poll of ``mq`` start at its oldest message."""
        await self.seek(mq, await self.min_offset(mq))

    async def seek_to_end(self, mq: MessageQueue) -> None:
        """Make the next poll of ``mq`` return only messages sent from now on."""
        await self.seek(mq, await self.max_offset(mq))

    async def offset_for_timestamp(self, mq: MessageQueue, ts_ms: int) -> int:
        """The first offset of ``mq`` whose store time is ``>= ts_ms`` (SEARCH_OFFSET_BY_TIMESTAMP)."""
        return await self._offset_request(
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
            mq,
            {"topic": mq.topic, "queueId": mq.queue_id, "timestamp": ts_ms},
        )

    async def min_offset(self, mq: MessageQueue) -> int:
        return await self._offset_request(
            RequestCode.GET_MIN_OFFSET, mq, {"topic": mq.topic, "queueId": mq.queue_id}
        )

    async def max_offset(self, mq: MessageQueue) -> int:
        return await self._offset_request(
            RequestCode.GET_MAX_OFFSET, mq, {"topic": mq.topic, "queueId": mq.queue_id}
        )

    async def committed(self, mq: MessageQueue) -> int:
        """The group's committed offset of ``mq`` on the broker, -1 when it has none."""
        fields = {
            "consumerGroup": self.group,
            "topic": mq.topic,
            "queueId": mq.queue_id,
            "setZeroIfNotFound": "false",
        }
        if self.offset_store is not None:
            return self.offset_store.read(mq)
        response = await self._invoke(RequestCode.QUERY_CONSUMER_OFFSET, mq, fields)
        if response.code == _QUERY_NOT_FOUND:
            return -1
        return self._offset_of(response, mq)

    async def commit(self) -> None:
        """Store every owned queue's next offset as the group's committed offset."""
        self._running()
        await self._commit_all(raise_errors=True)

    async def _commit_all(self, *, raise_errors: bool, queues: Iterable[MessageQueue] | None = None) -> None:
        if self.offset_store is not None:
            await self._commit_local(raise_errors=raise_errors, queues=queues)
            return
        first: RocketqError | None = None
        for mq in list(self._queues if queues is None else queues):
            state = self._queues.get(mq)
            if state is None or state.offset is None:
                continue
            fields = {
                "consumerGroup": self.group,
                "topic": mq.topic,
                "queueId": mq.queue_id,
                "commitOffset": state.offset,
            }
            try:
                response = await self._invoke(RequestCode.UPDATE_CONSUMER_OFFSET, mq, fields)
                if response.code != _SUCCESS:
                    raise error_for_response(response, mq.broker_name)
            except RocketqError as exc:
                log.warning("commit of offset %d of %s failed: %s", state.offset, mq, exc)
                first = first or exc
        if first is not None and raise_errors:
            raise first

    async def _commit_local(self, *, raise_errors: bool, queues: Iterable[MessageQueue] | None) -> None:
        store = self.offset_store
        assert store is not None
        for mq in list(self._queues if queues is None else queues):
            state = self._queues.get(mq)
            if state is not None and state.offset is not None:
                store.update(mq, state.offset, increase_only=False)
        try:
            await asyncio.to_thread(store.persist)
        except OSError as exc:
            log.warning("cannot write offset file %s: %s", store.path, exc)
            if raise_errors:
                raise RocketqError(f"cannot write offset file {store.path}: {exc}") from exc

    async def _initial_offset(self, mq: MessageQueue) -> int:
        committed = await self.committed(mq)
        if committed >= 0:
            return committed
        if self.consume_from_where == "CONSUME_FROM_FIRST_OFFSET":
            return await self.min_offset(mq)
        if self.consume_from_where == "CONSUME_FROM_TIMESTAMP":
            return await self.offset_for_timestamp(mq, self.consume_timestamp_ms)
        return await self.max_offset(mq)

    async def _offset_request(self, code: int, mq: MessageQueue, fields: dict[str, object]) -> int:
        response = await self._invoke(code, mq, fields)
        if response.code != _SUCCESS:
            raise error_for_response(response, mq.broker_name)
        return self._offset_of(response, mq)

    @staticmethod
    def _offset_of(response: RemotingCommand, mq: MessageQueue) -> int:
        if response.code != _SUCCESS:
            raise error_for_response(response, mq.broker_name)
        try:
            return int(response.ext_fields["offset"])
        except (KeyError, ValueError):
            raise RocketqError(f"broker {mq.broker_name} answered without an offset for {mq}") from None

    async def _invoke(self, code: int, mq: MessageQueue, fields: dict[str, object]) -> RemotingCommand:
        remoting = self._running_or_stopping()
        addr = await self._broker_addr(mq)
        return await remoting.invoke(addr, create_request(code, fields), self.request_timeout_ms / 1000)

    def _running_or_stopping(self) -> RemotingClient:
        if self._state == "stopping" and self._remoting is not None:
            return self._remoting
        return self._running()

    # -- routes ------------------------------------------------------------------------------
    async def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        """The readable queues of ``topic`` on brokers with a master, sorted."""
        self._running()
        assert self._routes is not None
        route = await self._routes.fetch_route(topic)
        return self._read_queues(topic, route)

    def _read_queues(self, topic: str, route: TopicRouteData) -> list[MessageQueue]:
        for bd in route.broker_datas:
            addr = bd.broker_addrs.get(MASTER_ID)
            if addr:
                self._broker_addrs[bd.broker_name] = addr
        queues = [
            MessageQueue(topic, qd.broker_name, i)
            for qd in route.queue_datas
            if qd.perm & PERM_READ and qd.broker_name in self._broker_addrs
            for i in range(qd.read_queue_nums)
        ]
        return sorted(queues)

    async def _broker_addr(self, mq: MessageQueue) -> str:
        addr = self._broker_addrs.get(mq.broker_name)
        if addr is None:
            await self.fetch_message_queues(mq.topic)
            addr = self._broker_addrs.get(mq.broker_name)
        if addr is None:
            raise TopicNotExist(f"broker {mq.broker_name} of topic {mq.topic!r} has no master address")
        return addr

    # -- group membership (subscribe mode) ---------------------------------------------------
    def _heartbeat_body(self) -> bytes:
        consumer = {
            "groupName": self.group,
            "consumeType": self.consume_type,
            "messageModel": self.message_model,
            "consumeFromWhere": self.consume_from_where,
            "unitMode": False,
            "subscriptionDataSet": [s.to_json() for s in self._subscriptions.values()],
        }
        data = {
            "clientID": self.client_id,
            "producerDataSet": [],
            "consumerDataSet": [consumer],
            "heartbeatFingerprint": 0,
            "withoutSub": False,
        }
        return json.dumps(data, separators=(",", ":")).encode()

    async def _subscribed_brokers(self) -> list[str]:
        assert self._routes is not None
        for topic in list(self._subscriptions):
            try:
                self._read_queues(topic, await self._routes.fetch_route(topic))
            except RocketqError as exc:
                log.warning("route of topic %s unavailable: %s", topic, exc)
        return sorted(set(self._broker_addrs.values()))

    async def _heartbeat_all(self) -> None:
        remoting = self._running()
        body = self._heartbeat_body()
        for addr in await self._subscribed_brokers():
            request = create_request(RequestCode.HEART_BEAT, {}, body)
            try:
                response = await remoting.invoke(addr, request, self.request_timeout_ms / 1000)
                if response.code != _SUCCESS:
                    raise error_for_response(response, addr)
            except RocketqError as exc:
                log.warning("heartbeat to broker %s failed: %s", addr, exc)

    async def _unregister(self) -> None:
        remoting = self._running_or_stopping()
        for addr in sorted(set(self._broker_addrs.values())):
            request = create_request(
                RequestCode.UNREGISTER_CLIENT, {"clientID": self.client_id, "consumerGroup": self.group}
            )
            try:
                await remoting.invoke(addr, request, self.request_timeout_ms / 1000)
            except RocketqError as exc:
                log.debug("unregister from broker %s failed: %s", addr, exc)

    async def _consumer_ids(self, queues: Sequence[MessageQueue]) -> list[str]:
        remoting = self._running()
        for addr in sorted({self._broker_addrs[mq.broker_name] for mq in queues}):
            request = create_request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": self.group})
            try:
                response = await remoting.invoke(addr, request, self.request_timeout_ms / 1000)
            except RocketqError as exc:
                log.warning("consumer list of group %s from %s failed: %s", self.group, addr, exc)
                continue
            if response.code == _SUCCESS and response.body:
                ids = json.loads(response.body).get("consumerIdList") or []
                return [str(i) for i in ids]
        return []

    async def _rebalance(self) -> None:
        """Recompute the owned queues of every subscribed topic (allocate averagely)."""
        if self._mode != "subscribe":
            return
        assert self._routes is not None
        wanted: set[MessageQueue] = set()
        keep_topics: set[str] = set()
        for topic in list(self._subscriptions):
            try:
                queues = self._read_queues(topic, await self._routes.fetch_route(topic))
            except RocketqError as exc:
                log.warning("rebalance of topic %s skipped, no route: %s", topic, exc)
                keep_topics.add(topic)
                continue
            if self.message_model == "BROADCASTING":
                wanted.update(queues)
                continue
            ids = await self._consumer_ids(queues) if queues else []
            if not ids:
                keep_topics.add(topic)
                continue
            wanted.update(self.allocate_strategy(queues, ids, self.client_id))
        wanted.update(mq for mq in self._queues if mq.topic in keep_topics)
        removed = [mq for mq in self._queues if mq not in wanted]
        added = [mq for mq in sorted(wanted) if mq not in self._queues]
        if not removed and not added:
            return
        if removed:
            await self._commit_all(raise_errors=False, queues=removed)
        queues_now = {mq: st for mq, st in self._queues.items() if mq in wanted}
        queues_now.update((mq, _QueueState()) for mq in added)
        self._queues = dict(sorted(queues_now.items()))
        log.info(
            "consumer %s of group %s now owns %d queue(s)", self.client_id, self.group, len(self._queues)
        )
        assert self._assignment_changed is not None
        self._assignment_changed.set()

    async def _rebalance_loop(self) -> None:
        assert self._rebalance_wanted is not None
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._rebalance_wanted.wait(), self.rebalance_interval_ms / 1000)
            self._rebalance_wanted.clear()
            try:
                if self._subs_changed:
                    self._subs_changed = False
                    await self._heartbeat_all()
                await self._rebalance()
            except RocketqError as exc:
                log.warning("rebalance of group %s failed: %s", self.group, exc)

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_interval_ms / 1000)
            if self._mode == "subscribe":
                await self._heartbeat_all()

    async def _auto_commit_loop(self) -> None:
        while True:
            await asyncio.sleep(self.auto_commit_interval_ms / 1000)
            await self._commit_all(raise_errors=False)

    async def _on_broker_request(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        if request.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
            if self._rebalance_wanted is not None:
                self._rebalance_wanted.set()
            return None
        if request.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET:
            await self._on_reset_offset(request)
            return None if request.is_oneway else create_response(request, ResponseCode.SUCCESS)
        if request.code == RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT:
            return create_response(request, ResponseCode.SUCCESS, body=self._status_body(request))
        if request.is_oneway:
            return None
        remark = REQUEST_CODE_NOT_SUPPORTED_REMARK.format(code=request.code)
        return create_response(request, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark)

    async def _on_reset_offset(self, request: RemotingCommand) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET (220): header ``topic``, ``group``, ``timestamp``,
        ``isForce``; body ``{"offsetTable":{{queue}:offset, ...}}``. Owned queues of the topic
        jump to the new offsets, which are committed at once."""
        ext = request.ext_fields
        if ext.get("group") != self.group or self._state != "running":
            return
        try:
            table = reset_offset_table(request.body)
        except BodyFormatError as exc:
            log.warning("offset reset for group %s ignored: %s", self.group, exc)
            return
        topic = ext.get("topic")
        table = {mq: off for mq, off in table.items() if mq.topic == topic and off >= 0}
        log.info("group %s: offsets of %d queue(s) of %s reset by the broker", self.group, len(table), topic)
        if self.reset_listener is not None:
            await self.reset_listener(table)
        else:
            for mq, offset in table.items():
                state = self._queues.get(mq)
                if state is not None:
                    state.offset = offset
                    state.version += 1
        await self._commit_all(raise_errors=False, queues=[mq for mq in table if mq in self._queues])

    def _status_body(self, request: RemotingCommand) -> bytes:
        """GetConsumerStatusBody: the positions of the owned queues of the asked topic."""
        ext = request.ext_fields
        table: dict[WireQueue, int] = {}
        if ext.get("group") == self.group:
            for mq, state in self._queues.items():
                if mq.topic == ext.get("topic") and state.offset is not None:
                    table[WireQueue(mq.topic, mq.broker_name, mq.queue_id)] = state.offset
        return objkey_json.dumps({"consumerTable": {}, "messageQueueTable": table}).encode()


def reset_offset_table(body: bytes) -> dict[MessageQueue, int]:
    """The ``offsetTable`` of a ResetOffsetBody (fastjson, queue objects as keys)."""
    try:
        doc = objkey_json.loads(body)
    except ValueError as exc:
        raise BodyFormatError(f"reset offset body does not parse: {exc}") from None
    if not isinstance(doc, dict):
        raise BodyFormatError("reset offset body is not a JSON object")
    return {
        MessageQueue(mq.topic, mq.broker_name, mq.queue_id): int(value)
        for mq, value in objkey_json.message_queue_table(doc.get("offsetTable")).items()
        if isinstance(value, int) and not isinstance(value, bool)
    }


class LitePullConsumer(BlockingFacade):
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

    def __init__(
        self,
        group: str,
        *,
        namesrv_addr: str | Sequence[str],
        pull_batch_size: int = DEFAULT_PULL_BATCH_SIZE,
        poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS,
        auto_commit: bool = True,
        auto_commit_interval_ms: int = DEFAULT_AUTO_COMMIT_INTERVAL_MS,
        consume_from_where: str = "CONSUME_FROM_LAST_OFFSET",
        consume_timestamp_ms: int | None = None,
        **options: Any,
    ) -> None:
        self._core = AsyncLitePullConsumer(
            group,
            namesrv_addr=namesrv_addr,
            pull_batch_size=pull_batch_size,
            poll_timeout_ms=poll_timeout_ms,
            auto_commit=auto_commit,
            auto_commit_interval_ms=auto_commit_interval_ms,
            consume_from_where=consume_from_where,
            consume_timestamp_ms=consume_timestamp_ms,
            **options,
        )
        BlockingFacade.__init__(self, f"rocketq-lite-pull-{group}", f"consumer {group}")

    @property
    def core(self) -> AsyncLitePullConsumer:
        """The asyncio consumer this facade drives (use it only on the facade's loop)."""
        return self._core

    @property
    def group(self) -> str:
        return self._core.group

    @property
    def client_id(self) -> str:
        return self._core.client_id

    def _core_start(self) -> Coroutine[Any, Any, None]:
        return self._core.start()

    def _core_shutdown(self) -> Coroutine[Any, Any, None]:
        return self._core.shutdown()

    def subscribe(self, topic: str, expression: str = "*", expression_type: str = "TAG") -> None:
        """Share ``topic``'s queues with the group (see :meth:`AsyncLitePullConsumer.subscribe`)."""
        self._sync(self._core.subscribe, topic, expression, expression_type)

    def unsubscribe(self, topic: str) -> None:
        self._sync(self._core.unsubscribe, topic)

    def assign(self, message_queues: Iterable[MessageQueue]) -> None:
        """Own exactly ``message_queues``."""
        self._sync(self._core.assign, list(message_queues))

    def assignment(self) -> list[MessageQueue]:
        return self._sync(self._core.assignment)

    def poll(self, timeout_ms: int | None = None) -> list[MessageExt]:
        """The next messages of one owned queue in queue order (``[]`` after ``timeout_ms``)."""
        return self._call(self._core.poll(timeout_ms))

    def seek(self, mq: MessageQueue, offset: int) -> None:
        self._call(self._core.seek(mq, offset))

    def seek_to_begin(self, mq: MessageQueue) -> None:
        self._call(self._core.seek_to_begin(mq))

    def seek_to_end(self, mq: MessageQueue) -> None:
        self._call(self._core.seek_to_end(mq))

    def offset_for_timestamp(self, mq: MessageQueue, ts_ms: int) -> int:
        return self._call(self._core.offset_for_timestamp(mq, ts_ms))

    def commit(self) -> None:
        """Store every owned queue's next offset as the group's committed offset."""
        self._call(self._core.commit())

    def committed(self, mq: MessageQueue) -> int:
        """The group's committed offset of ``mq`` (-1 when none)."""
        return self._call(self._core.committed(mq))

    def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        return self._call(self._core.fetch_message_queues(topic))


__all__ = [
    "AsyncLitePullConsumer",
    "LitePullConsumer",
    "allocate_averagely",
    "decode_messages",
    "reset_offset_table",
]
