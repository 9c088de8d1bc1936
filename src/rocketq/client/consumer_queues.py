"""A consumer group member's queues: its settings, the queues it owns, their positions, the
routes to their brokers, and the group's committed offsets.

:class:`ConsumerQueues` is the lowest layer of :class:`~rocketq.client.consumer_core.ConsumerCore`
(whose constructor it has); :class:`~rocketq.client.rebalance.GroupMembership` and the core
build on it.

Positions: one :class:`QueueState` per owned queue (the next offset to hand out, ``None`` until
the start offset is known, and a version that changes on every seek). A queue with no committed
offset starts by ``consume_from_where``: last = GET_MAX_OFFSET (30), first = GET_MIN_OFFSET (31),
timestamp = SEARCH_OFFSET_BY_TIMESTAMP (29). Unlike Java clients the core asks
QUERY_CONSUMER_OFFSET (14) with ``setZeroIfNotFound=false``, so a new group really starts where
``consume_from_where`` says.

Commits: UPDATE_CONSUMER_OFFSET (15), as a request that is answered (Java sends it oneway), of
the owned queues' positions; every ``persist_consumer_offset_interval_ms`` (5 s) when
``auto_commit``, on :meth:`ConsumerQueues.commit`, before a rebalance gives a queue away and at
shutdown. With ``auto_commit`` the position of a queue also rides on its next pull (the pull
header's ``commitOffset`` with the COMMIT_OFFSET sys flag, as RocketMQ's push consumer sends it;
:meth:`ConsumerQueues.ride_along_offset`), and the periodic commit then skips the queues whose
position the broker already holds, so a consumer that keeps pulling sends no commit requests.
With ``MessageModel.BROADCASTING`` offsets are kept in a local file
(:mod:`rocketq.client.offset_store`) under ``<offset_store_dir>/<client id>/<group>/`` instead
of on the brokers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from rocketq.client._routes import RouteCache
from rocketq.client.allocate import AllocateStrategy, resolve_strategy
from rocketq.client.config import ClientConfig, ConsumeFromWhere, MessageModel, parse_enum
from rocketq.client.offset_store import DEFAULT_OFFSET_STORE_DIR, LocalOffsetStore, default_offset_path
from rocketq.client.pull_decode import PoisonRecord
from rocketq.client.send_values import _GROUP_PATTERN, GROUP_MAX_LENGTH, error_for_response
from rocketq.errors import ClientStateError, ConfigError, ResponseCode, RocketqError, TopicNotExist
from rocketq.message import MessageExt
from rocketq.protocol.heartbeat import SubscriptionData, build_subscription
from rocketq.protocol.queue import MessageQueue
from rocketq.protocol.route import MASTER_ID, TopicRouteData
from rocketq.protocol.topic import PERM_READ
from rocketq.remoting import RemotingClient, RemotingCommand, RequestCode, create_request

log = logging.getLogger(__name__)

DEFAULT_PULL_BATCH_SIZE = 32
DEFAULT_REBALANCE_INTERVAL_MS = 20_000
MAX_PULL_BATCH_SIZE = 1024


#: ``handler(request) -> response`` (None: no answer) for a request code brokers send.
BrokerRequestHandler = Callable[[RemotingCommand], Awaitable[RemotingCommand | None]]


@dataclass(slots=True)
class QueueState:
    """The position in one owned queue: ``offset`` is the next offset to hand out (None until
    known); ``version`` changes on every seek, so an answer to an older pull can be told apart."""

    offset: int | None = None
    version: int = 0
    #: The offset this member last stored on the broker for the queue (by a commit or riding
    #: on a pull), None when it has stored none: the periodic commit skips the queue while
    #: ``offset`` equals it.
    committed: int | None = None

    def move_to(self, offset: int) -> None:
        """A seek: the next offset becomes ``offset`` and pulls in flight become stale."""
        self.offset = offset
        self.version += 1


@dataclass(slots=True)
class PullResult:
    """The answer to one pull of ``mq`` at ``offset`` (``version``: the state's at the time)."""

    mq: MessageQueue
    offset: int
    version: int
    code: int
    next_offset: int
    messages: list[MessageExt]
    #: Records that cannot be delivered (already logged by the pull), tag-filtered like messages.
    poison: list[PoisonRecord] = field(default_factory=list)

    @property
    def offset_moved(self) -> bool:
        return self.code == ResponseCode.PULL_OFFSET_MOVED


class ConsumerQueues:
    """The queues, positions, routes and offsets of :class:`~rocketq.client.consumer_core.ConsumerCore`
    (whose constructor this is)."""

    def __init__(
        self,
        group: str,
        config: ClientConfig,
        *,
        consume_type: str = "CONSUME_ACTIVELY",
        pull_batch_size: int = DEFAULT_PULL_BATCH_SIZE,
        auto_commit: bool = True,
        consume_from_where: ConsumeFromWhere | str = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp_ms: int | None = None,
        rebalance_interval_ms: int = DEFAULT_REBALANCE_INTERVAL_MS,
        allocate_strategy: str | AllocateStrategy = "AVG",
        message_model: MessageModel | str = MessageModel.CLUSTERING,
        offset_store_dir: str = DEFAULT_OFFSET_STORE_DIR,
    ) -> None:
        problems = []
        if not group or _GROUP_PATTERN.fullmatch(group) is None or len(group) > GROUP_MAX_LENGTH:
            problems.append(
                f"consumer group {group[:64]!r} must be 1..{GROUP_MAX_LENGTH} chars of [%|a-zA-Z0-9_-]"
            )
        if not 1 <= pull_batch_size <= MAX_PULL_BATCH_SIZE:
            problems.append(f"pull_batch_size={pull_batch_size} must be in [1, {MAX_PULL_BATCH_SIZE}]")
        if rebalance_interval_ms <= 0:
            problems.append(f"rebalance_interval_ms={rebalance_interval_ms} must be > 0")
        for name, enum_cls, value in (
            ("consume_from_where", ConsumeFromWhere, consume_from_where),
            ("message_model", MessageModel, message_model),
        ):
            try:
                parse_enum(enum_cls, name, value)
            except ConfigError as exc:
                problems.append(str(exc))
        if problems:
            raise ConfigError("invalid consumer config: " + "; ".join(problems))
        self.group = group
        self.config = config
        self.namesrv_addrs = config.namesrv_addrs()
        self.consume_type = consume_type
        self.pull_batch_size = pull_batch_size
        self.auto_commit = auto_commit
        self.consume_from_where: ConsumeFromWhere = ConsumeFromWhere(consume_from_where)
        self.message_model: MessageModel = MessageModel(message_model)
        if consume_timestamp_ms is None:
            consume_timestamp_ms = time.time_ns() // 1_000_000 - 30 * 60 * 1000
        self.consume_timestamp_ms = consume_timestamp_ms
        self.rebalance_interval_ms = rebalance_interval_ms
        self.allocate_strategy = resolve_strategy(allocate_strategy)
        broadcasting = self.message_model is MessageModel.BROADCASTING
        #: ``<ip>@<instance name>``; a clustering member left at ``DEFAULT`` gets ``<pid>#<n>``.
        self.client_id = config.client_id(pid_name=not broadcasting)
        #: Broadcasting keeps offsets in a local file instead of on the brokers.
        self.offset_store: LocalOffsetStore | None = None
        if broadcasting:
            self.offset_store = LocalOffsetStore(default_offset_path(offset_store_dir, self.client_id, group))
        #: Called with the new offsets when a broker relays an offset reset (RESET_CONSUMER_CLIENT_OFFSET);
        #: None: the offsets of owned queues are simply moved (a seek).
        self.reset_listener: Callable[[dict[MessageQueue, int]], Awaitable[None]] | None = None
        #: What the consumer does with a poison record, for the ERROR line a pull logs.
        self.poison_action = "skipped"
        self._handlers: dict[int, BrokerRequestHandler] = {}
        self._mode: str | None = None  # "assign" | "subscribe"
        self._subscriptions: dict[str, SubscriptionData] = {}
        self._queues: dict[MessageQueue, QueueState] = {}
        self._broker_addrs: dict[str, str] = {}
        self._remoting: RemotingClient | None = None
        self._routes: RouteCache | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._rebalance_wanted: asyncio.Event | None = None
        self._assignment_changed: asyncio.Event | None = None
        self._subs_changed = False
        self._state = "created"

    # -- settings from the config ------------------------------------------------------------
    @property
    def request_timeout_ms(self) -> int:
        return self.config.request_timeout_ms

    @property
    def heartbeat_interval_ms(self) -> int:
        return self.config.heartbeat_interval_ms

    @property
    def auto_commit_interval_ms(self) -> int:
        return self.config.persist_consumer_offset_interval_ms

    @property
    def clustering(self) -> bool:
        return self.message_model is MessageModel.CLUSTERING

    @property
    def running(self) -> bool:
        return self._state == "running"

    def check_running(self) -> None:
        """Raise ClientStateError unless started and not shut down."""
        self._running()

    def _running(self) -> RemotingClient:
        if self._state != "running" or self._remoting is None:
            what = "not started" if self._state == "created" else "shut down"
            raise ClientStateError(f"consumer {self.group} is {what}")
        return self._remoting

    def _running_or_stopping(self) -> RemotingClient:
        if self._state == "stopping" and self._remoting is not None:
            return self._remoting
        return self._running()

    @property
    def assignment_changed(self) -> asyncio.Event:
        """Set whenever the owned queues change (exists once started)."""
        event = self._assignment_changed
        if event is None:
            raise ClientStateError(f"consumer {self.group} is not started")
        return event

    def register_request_handler(self, code: int, handler: BrokerRequestHandler) -> None:
        """Answer broker requests of ``code`` (one the core does not handle itself) with ``handler``."""
        self._handlers[code] = handler

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

    def subscriptions(self) -> list[str]:
        """The subscribed topics."""
        return list(self._subscriptions)

    def assign(self, message_queues: Iterable[MessageQueue]) -> None:
        """Own exactly ``message_queues`` (positions of queues kept stay where they are)."""
        if self._mode == "subscribe":
            raise ClientStateError("assign() cannot be combined with subscribe()")
        self._mode = "assign"
        wanted = list(dict.fromkeys(message_queues))
        self._queues = {mq: self._queues.get(mq) or QueueState() for mq in wanted}
        if self._assignment_changed is not None:
            self._assignment_changed.set()

    def assignment(self) -> list[MessageQueue]:
        """The queues this consumer owns now, sorted."""
        return sorted(self._queues)

    def owned_queues(self) -> list[MessageQueue]:
        """The queues this consumer owns now, in their internal (sorted at change) order."""
        return list(self._queues)

    def queue_state(self, mq: MessageQueue) -> QueueState | None:
        """The position in ``mq``; None when ``mq`` is not owned (the object is replaced when
        the queue is given away and owned again, so identity tells a re-assignment)."""
        return self._queues.get(mq)

    def owned(self, mq: MessageQueue) -> QueueState:
        """The position in ``mq``; ValueError when it is not owned."""
        state = self._queues.get(mq)
        if state is None:
            raise ValueError(f"{mq} is not assigned to consumer {self.group}")
        return state

    # -- offsets -----------------------------------------------------------------------------
    async def offset_for_timestamp(self, mq: MessageQueue, ts_ms: int) -> int:
        """The first offset of ``mq`` whose store time is ``>= ts_ms`` (SEARCH_OFFSET_BY_TIMESTAMP)."""
        return await self._offset_request(
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
            mq,
            {"topic": mq.topic, "queueId": mq.queue_id, "timestamp": ts_ms},
        )

    async def min_offset(self, mq: MessageQueue) -> int:
        """The offset of the oldest message of ``mq`` (GET_MIN_OFFSET)."""
        return await self._offset_request(
            RequestCode.GET_MIN_OFFSET, mq, {"topic": mq.topic, "queueId": mq.queue_id}
        )

    async def max_offset(self, mq: MessageQueue) -> int:
        """The offset after the newest message of ``mq`` (GET_MAX_OFFSET)."""
        return await self._offset_request(
            RequestCode.GET_MAX_OFFSET, mq, {"topic": mq.topic, "queueId": mq.queue_id}
        )

    async def committed(self, mq: MessageQueue) -> int:
        """The group's committed offset of ``mq`` (the local file when broadcasting), -1 when none."""
        if self.offset_store is not None:
            return self.offset_store.read(mq)
        fields = {
            "consumerGroup": self.group,
            "topic": mq.topic,
            "queueId": mq.queue_id,
            "setZeroIfNotFound": "false",
        }
        response = await self.invoke(RequestCode.QUERY_CONSUMER_OFFSET, mq, fields)
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return -1
        return self._offset_of(response, mq)

    async def initial_offset(self, mq: MessageQueue) -> int:
        """Where consuming ``mq`` starts: the committed offset, else by ``consume_from_where``."""
        committed = await self.committed(mq)
        if committed >= 0:
            return committed
        if self.consume_from_where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
            return await self.min_offset(mq)
        if self.consume_from_where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
            return await self.offset_for_timestamp(mq, self.consume_timestamp_ms)
        return await self.max_offset(mq)

    async def commit(self) -> None:
        """Store every owned queue's position as the group's committed offset; raises on failure."""
        self._running()
        await self.commit_offsets(raise_errors=True)

    async def commit_offsets(
        self,
        *,
        raise_errors: bool,
        queues: Iterable[MessageQueue] | None = None,
        changed_only: bool = False,
    ) -> None:
        """Store the positions of ``queues`` (default: every owned queue); failures are logged,
        and with ``raise_errors`` the first is raised after trying every queue. ``changed_only``
        skips the queues whose position this member already stored (the periodic commit).

        The requests of all queues are in flight together (one round trip for all of them, not
        one per queue); their brokers' addresses are looked up first, one queue after another,
        so a route unknown yet is fetched once. Failures are logged in queue order."""
        if self.offset_store is not None:
            await self._commit_local(raise_errors=raise_errors, queues=queues)
            return
        todo: list[tuple[MessageQueue, QueueState, int]] = []
        failed: dict[MessageQueue, RocketqError] = {}
        for mq in list(self._queues if queues is None else queues):
            state = self._queues.get(mq)
            if state is None or state.offset is None:
                continue
            offset = state.offset
            if changed_only and offset == state.committed:
                continue
            try:
                await self.broker_addr(mq)
            except RocketqError as exc:
                failed[mq] = exc
            todo.append((mq, state, offset))
        outcomes: list[BaseException | None] = [None] * len(todo)
        sent = [i for i, (mq, _, _) in enumerate(todo) if mq not in failed]
        if len(sent) == 1:
            mq, _, offset = todo[sent[0]]
            try:
                await self.update_broker_offset(mq, offset)
            except RocketqError as exc:
                outcomes[sent[0]] = exc
        elif sent:
            answers = await asyncio.gather(
                *(self.update_broker_offset(todo[i][0], todo[i][2]) for i in sent), return_exceptions=True
            )
            for i, answer in zip(sent, answers, strict=True):
                if isinstance(answer, BaseException) and not isinstance(answer, RocketqError):
                    raise answer
                outcomes[i] = answer
        first: BaseException | None = None
        for (mq, state, offset), answered in zip(todo, outcomes, strict=True):
            error = failed.get(mq, answered)
            if error is not None:
                log.warning("commit of offset %d of %s failed: %s", offset, mq, error)
                first = first or error
                continue
            state.committed = offset
        if first is not None and raise_errors:
            raise first

    def ride_along_offset(self, mq: MessageQueue) -> int | None:
        """The offset of ``mq`` to commit on its next pull: its position when ``auto_commit``,
        offsets are kept on the brokers (clustering) and the broker does not hold it yet;
        else None (nothing rides along)."""
        if not self.auto_commit or self.offset_store is not None:
            return None
        state = self._queues.get(mq)
        if state is None or state.offset is None or state.offset == state.committed:
            return None
        return state.offset

    async def update_broker_offset(self, mq: MessageQueue, offset: int) -> None:
        """UPDATE_CONSUMER_OFFSET of one queue on its broker; raises RocketqError on failure."""
        fields = {
            "consumerGroup": self.group,
            "topic": mq.topic,
            "queueId": mq.queue_id,
            "commitOffset": offset,
        }
        response = await self.invoke(RequestCode.UPDATE_CONSUMER_OFFSET, mq, fields)
        if response.code != ResponseCode.SUCCESS:
            raise error_for_response(response, mq.broker_name)

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

    async def _offset_request(self, code: int, mq: MessageQueue, fields: dict[str, object]) -> int:
        response = await self.invoke(code, mq, fields)
        if response.code != ResponseCode.SUCCESS:
            raise error_for_response(response, mq.broker_name)
        return self._offset_of(response, mq)

    @staticmethod
    def _offset_of(response: RemotingCommand, mq: MessageQueue) -> int:
        if response.code != ResponseCode.SUCCESS:
            raise error_for_response(response, mq.broker_name)
        try:
            return int(response.ext_fields["offset"])
        except (KeyError, ValueError):
            raise RocketqError(f"broker {mq.broker_name} answered without an offset for {mq}") from None

    # -- requests to brokers -----------------------------------------------------------------
    async def invoke(
        self, code: int, mq: MessageQueue, fields: dict[str, object], body: bytes = b""
    ) -> RemotingCommand:
        """Send request ``code`` to the master of ``mq``'s broker and return its answer (also
        while shutting down, for the last commits and unlocks)."""
        remoting = self._running_or_stopping()
        addr = await self.broker_addr(mq)
        return await remoting.invoke(addr, create_request(code, fields, body), self.request_timeout_ms / 1000)

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

    async def broker_addr(self, mq: MessageQueue) -> str:
        """The master address of ``mq``'s broker (from the route, fetched when unknown)."""
        addr = self._broker_addrs.get(mq.broker_name)
        if addr is None:
            await self.fetch_message_queues(mq.topic)
            addr = self._broker_addrs.get(mq.broker_name)
        if addr is None:
            raise TopicNotExist(f"broker {mq.broker_name} of topic {mq.topic!r} has no master address")
        return addr

    async def _auto_commit_loop(self) -> None:
        while True:
            await asyncio.sleep(self.auto_commit_interval_ms / 1000)
            await self.commit_offsets(raise_errors=False, changed_only=True)
