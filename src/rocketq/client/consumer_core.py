"""The consumer core: what the lite pull, push and orderly consumers share.

:class:`ConsumerCore` is one member of a consumer group on the running event loop. It owns the
connections, the group membership, the owned queues with their positions and the offsets; the
consumers (:mod:`rocketq.client.lite_pull`, :mod:`rocketq.client.push`,
:mod:`rocketq.client.orderly`) compose it and use only its public methods.

Two ways to own queues (not both):

* :meth:`ConsumerCore.assign` — the application names the queues;
* :meth:`ConsumerCore.subscribe` — the group shares the topic's queues. The core sends
  HEART_BEAT (34) with its subscriptions to every broker of its topics every
  ``heartbeat_interval_ms`` (30 s), and rebalances every ``rebalance_interval_ms`` (20 s) and
  whenever a broker sends NOTIFY_CONSUMER_IDS_CHANGED (40): for each topic, the readable queues
  (from the route) and the consumer ids of the group (GET_CONSUMER_LIST_BY_GROUP 38) go through
  :func:`plan_rebalance` with the ``allocate_strategy`` (:mod:`rocketq.client.allocate`). A
  queue that leaves the assignment has its offset committed first; :attr:`assignment_changed`
  is set when the owned queues change. With ``MessageModel.BROADCASTING`` every consumer owns
  every queue and offsets are kept in a local file (:mod:`rocketq.client.offset_store`) under
  ``<offset_store_dir>/<client id>/<group>/`` instead of on the brokers.

Positions: one :class:`QueueState` per owned queue (the next offset to hand out, ``None`` until
the start offset is known, and a version that changes on every seek). A queue with no committed
offset starts by ``consume_from_where``: last = GET_MAX_OFFSET (30), first = GET_MIN_OFFSET (31),
timestamp = SEARCH_OFFSET_BY_TIMESTAMP (29). Unlike Java clients the core asks
QUERY_CONSUMER_OFFSET (14) with ``setZeroIfNotFound=false``, so a new group really starts where
``consume_from_where`` says.

Pulls: :meth:`ConsumerCore.pull` sends one LITE_PULL_MESSAGE (361), suspended on the broker
when ``suspend_ms`` > 0. FOUND (0) → records (spec §3.7) decoded in queue order one by one
(:func:`decode_pull_body`), zlib bodies inflated, messages whose ``TAGS`` are not in the
subscription dropped (tag codes only pre-filter on the broker); PULL_NOT_FOUND (19),
NO_MATCHED_MSG (20) and OFFSET_MOVED (21) → no messages and ``nextBeginOffset``. A pull never
piggybacks a commit (no COMMIT_OFFSET bit). A record that cannot be delivered — CRC mismatch, a
body marked compressed that does not inflate, a record that does not parse — is a *poison
record*: the pull logs it at ERROR (topic, queue, offsets, reason, :attr:`poison_action`) and
returns it in :attr:`PullResult.poison` beside the good messages, which are delivered as usual;
when a record does not parse, ``next_offset`` becomes the offset after it (the rest of that
body could not be read).

Commits: UPDATE_CONSUMER_OFFSET (15), as a request that is answered (Java sends it oneway), of
the owned queues' positions; every ``persist_consumer_offset_interval_ms`` (5 s) when
``auto_commit``, on :meth:`ConsumerCore.commit`, before a rebalance gives a queue away and at
:meth:`ConsumerCore.shutdown`.

Requests from brokers:

* NOTIFY_CONSUMER_IDS_CHANGED (40) → a rebalance now;
* RESET_CONSUMER_CLIENT_OFFSET (220, ``resetOffsetByTime``; header ``topic``/``group``/
  ``timestamp``/``isForce``, body ``{"offsetTable":{{queue}:offset}}``) → the owned queues of that
  topic move to the new offsets (through :attr:`ConsumerCore.reset_listener` when set, else as a
  seek) and are committed at once;
* GET_CONSUMER_STATUS_FROM_CLIENT (221) → the owned queues' current offsets;
* any other code (GET_CONSUMER_RUNNING_INFO 307, CONSUME_MESSAGE_DIRECTLY 309, …) → the handler
  given to :meth:`ConsumerCore.register_request_handler`, else REQUEST_CODE_NOT_SUPPORTED.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import zlib
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field

from rocketq.client._routes import RouteCache
from rocketq.client.aio import (
    _GROUP_PATTERN,
    GROUP_MAX_LENGTH,
    SYS_FLAG_COMPRESSED,
    error_for_response,
)
from rocketq.client.allocate import AllocateStrategy, resolve_strategy
from rocketq.client.config import (
    ClientConfig,
    ConsumeFromWhere,
    MessageModel,
    parse_enum,
)
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
from rocketq.protocol import record as rec
from rocketq.protocol.fastjson import OBJECT_KEYS
from rocketq.protocol.headers import PULL_FLAG_LITE_PULL, PULL_FLAG_SUBSCRIPTION, PULL_FLAG_SUSPEND
from rocketq.protocol.heartbeat import SubscriptionData, build_subscription
from rocketq.protocol.queue import MessageQueue, message_queue_table
from rocketq.protocol.record import view_to_message
from rocketq.protocol.route import MASTER_ID, TopicRouteData
from rocketq.protocol.topic import PERM_READ, is_retry_topic
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

DEFAULT_PULL_BATCH_SIZE = 32
DEFAULT_REBALANCE_INTERVAL_MS = 20_000
#: Longest time the broker holds a suspended pull (RocketMQ's brokerSuspendMaxTimeMillis).
MAX_SUSPEND_MS = 15_000
#: Extra time a suspended pull waits for its answer beyond the hold time.
SUSPEND_MARGIN_S = 5.0
#: Pause before trying again when pulls failed.
ERROR_BACKOFF_S = 1.0
MAX_PULL_BATCH_SIZE = 1024


#: ``handler(request) -> response`` (None: no answer) for a request code brokers send.
BrokerRequestHandler = Callable[[RemotingCommand], Awaitable[RemotingCommand | None]]


def _route_miss_level(topic: str) -> int:
    """How loudly to log a topic without a route: a group's ``%RETRY%`` topic has none until the
    group's first heartbeat makes the broker create it and register it with the name servers, so
    a fresh group misses it at start (DEBUG, as RocketMQ's client); any other topic: WARNING."""
    return logging.DEBUG if is_retry_topic(topic) else logging.WARNING


#: Compression types (sysFlag bits 8-10) this client inflates: 0 (old producers) and 3 are zlib.
_ZLIB_TYPES = (0, 3)
_COMPRESSION_TYPE_MASK = 0x700
_COMPRESSION_NAMES = {1: "LZ4", 2: "ZSTD"}


@dataclass(slots=True)
class PoisonRecord:
    """A record of a pull body that cannot be delivered as a message (a *poison message*).

    ``message`` is the record as stored (body not inflated) when its structure is intact — a
    body marked compressed that does not inflate, a body CRC mismatch — and None when the record
    itself does not parse: then nothing after it in the body could be read either, and
    ``queue_offset`` is where it was expected (the offset after the last record read, or the
    pull's offset; -1 when unknown)."""

    reason: str
    position: int
    queue_offset: int
    message: MessageExt | None = None


@dataclass(slots=True)
class DecodedBody:
    """A pull body decoded record by record: the deliverable ``messages`` (bodies inflated) and
    the ``poison`` records, each list in body order."""

    messages: list[MessageExt]
    poison: list[PoisonRecord]

    @property
    def truncated(self) -> bool:
        """A record did not parse, so the body's remaining records were not read."""
        return any(p.message is None for p in self.poison)


def decode_pull_body(body: bytes, *, first_offset: int = -1) -> DecodedBody:
    """Decode a pull/pop body (concatenated records) one record at a time: a record that fails
    (CRC, a compressed body that does not inflate, a record that does not parse) becomes a
    :class:`PoisonRecord` instead of failing the others. ``first_offset`` (the pull's offset)
    places a first record that does not parse. Never raises."""
    out = DecodedBody([], [])
    expected = first_offset
    pos = 0
    while pos < len(body):
        view = rec.decode_record(body, pos, check_crc=True)
        if view.kind is rec.RecordKind.CORRUPT and view.size > 0:
            # CRC mismatch (or a later field): read it again without the CRC check to name it
            raw = rec.decode_record(body, pos, check_crc=False)
            if raw.kind is rec.RecordKind.MESSAGE:
                msg = view_to_message(raw)
                out.poison.append(PoisonRecord(view.reason, pos, msg.queue_offset, msg))
                expected = msg.queue_offset + 1
                pos += raw.size
                continue
        if view.kind is not rec.RecordKind.MESSAGE:
            if view.kind is rec.RecordKind.CORRUPT:
                out.poison.append(PoisonRecord(f"record does not parse: {view.reason}", pos, expected))
            break
        msg = view_to_message(view)
        pos += view.size
        expected = msg.queue_offset + 1
        if msg.sys_flag & SYS_FLAG_COMPRESSED:
            problem = _inflate(msg)
            if problem:
                out.poison.append(PoisonRecord(problem, pos - view.size, msg.queue_offset, msg))
                continue
        out.messages.append(msg)
    return out


def _inflate(msg: MessageExt) -> str:
    """Inflate ``msg.body`` in place; why it cannot be, or "" when done."""
    ctype = (msg.sys_flag & _COMPRESSION_TYPE_MASK) >> 8
    if ctype not in _ZLIB_TYPES:
        name = _COMPRESSION_NAMES.get(ctype)
        how = f"{name}-compressed" if name else f"compressed with unknown compression type {ctype}"
        return f"body is {how} (sysFlag 0x{msg.sys_flag:X}); only zlib is supported"
    try:
        msg.body = zlib.decompress(msg.body)
    except zlib.error as exc:
        return f"body marked compressed (sysFlag 0x{msg.sys_flag:X}) does not inflate: {exc}"
    return ""


def log_poison(what: str, poison: Iterable[PoisonRecord], action: str) -> None:
    """One ERROR line per poison record: where it is (topic, queue, queue and commit-log
    offsets), why, and what the consumer does with it."""
    for p in poison:
        m = p.message
        if m is not None:
            log.error(
                "poison message in %s: topic %s queue %d offset %d (commit-log offset %d, msgId %s): %s; %s",
                what, m.topic, m.queue_id, m.queue_offset, m.commit_log_offset, m.client_msg_id,
                p.reason, action,
            )  # fmt: skip
        else:
            log.error(
                "poison record in %s near offset %d (byte %d of the pull body): %s; %s",
                what, p.queue_offset, p.position, p.reason, action,
            )  # fmt: skip


def decode_messages(body: bytes) -> list[MessageExt]:
    """The deliverable messages of a pull body (concatenated records), zlib bodies inflated;
    poison records (:func:`decode_pull_body`) are logged at ERROR and left out."""
    decoded = decode_pull_body(body)
    log_poison("a pulled body", decoded.poison, "left out")
    return decoded.messages


def reset_offset_table(body: bytes) -> dict[MessageQueue, int]:
    """The ``offsetTable`` of a ResetOffsetBody (fastjson, queue objects as keys)."""
    try:
        doc = OBJECT_KEYS.loads(body)
    except ValueError as exc:
        raise BodyFormatError(f"reset offset body does not parse: {exc}") from None
    if not isinstance(doc, dict):
        raise BodyFormatError("reset offset body is not a JSON object")
    return {
        MessageQueue(mq.topic, mq.broker_name, mq.queue_id): int(value)
        for mq, value in message_queue_table(doc.get("offsetTable")).items()
        if isinstance(value, int) and not isinstance(value, bool)
    }


# -- rebalance, as a pure function -------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RebalancePlan:
    """One topic's rebalance: the queues this client should own, and the change from ``owned``
    (all three sorted)."""

    assigned: tuple[MessageQueue, ...]
    added: tuple[MessageQueue, ...]
    dropped: tuple[MessageQueue, ...]


def plan_rebalance(
    queues: Sequence[MessageQueue],
    client_ids: Sequence[str],
    client_id: str,
    strategy: AllocateStrategy,
    *,
    owned: Iterable[MessageQueue] = (),
    message_model: MessageModel = MessageModel.CLUSTERING,
) -> RebalancePlan:
    """The share of ``client_id`` of one topic's readable ``queues`` among the group's
    ``client_ids`` by ``strategy``, and what changes from the queues of the topic it ``owned``.

    Broadcasting: every queue. Clustering with no client id known (the broker answered none):
    nothing changes, as RocketMQ, which skips the topic rather than give every queue up."""
    current = sorted(set(owned))
    if message_model is MessageModel.BROADCASTING:
        assigned = sorted(set(queues))
    elif not client_ids:
        assigned = current
    else:
        assigned = sorted(set(strategy(sorted(set(queues)), sorted(set(client_ids)), client_id)))
    keep = set(assigned)
    was = set(current)
    return RebalancePlan(
        assigned=tuple(assigned),
        added=tuple(mq for mq in assigned if mq not in was),
        dropped=tuple(mq for mq in current if mq not in keep),
    )


# -- positions ---------------------------------------------------------------------------------
@dataclass(slots=True)
class QueueState:
    """The position in one owned queue: ``offset`` is the next offset to hand out (None until
    known); ``version`` changes on every seek, so an answer to an older pull can be told apart."""

    offset: int | None = None
    version: int = 0

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


class ConsumerCore:
    """One member of consumer group ``group``: membership, owned queues, offsets and pulls.

    ``config`` supplies the name servers, client id, request timeout, heartbeat and commit
    intervals. ``consume_type`` is what heartbeats say (CONSUME_ACTIVELY for the lite pull
    consumer, CONSUME_PASSIVELY for the push consumer). ``consume_timestamp_ms`` is the start
    for ``CONSUME_FROM_TIMESTAMP`` (default: 30 minutes ago, as RocketMQ)."""

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

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Connect and, in subscribe mode, heartbeat and rebalance once before returning."""
        if self._state == "running":
            return
        if self._state != "created":
            raise ClientStateError(f"consumer {self.group} was shut down and cannot be restarted")
        if self.offset_store is not None:
            self.offset_store.load()
        self._remoting = RemotingClient(
            self._on_broker_request, rpc_hook=self.config.rpc_hook(), ssl=self.config.ssl_context()
        )
        self._routes = RouteCache(self._remoting, self.namesrv_addrs, self.request_timeout_ms / 1000)
        self._rebalance_wanted = asyncio.Event()
        self._assignment_changed = asyncio.Event()
        self._state = "running"
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._rebalance_loop(), name=f"rocketq-consumer-{self.group}-rebalance"),
            loop.create_task(self._heartbeat_loop(), name=f"rocketq-consumer-{self.group}-heartbeat"),
        ]
        if self.auto_commit:
            self._tasks.append(
                loop.create_task(self._auto_commit_loop(), name=f"rocketq-consumer-{self.group}-commit")
            )
        if self._mode == "subscribe":
            self._subs_changed = False
            await self._heartbeat_all()
            await self._rebalance()

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
            await self.commit_offsets(raise_errors=False)
            if self._mode == "subscribe":
                await self._unregister()
        finally:
            self._state = "shutdown"
            if self._remoting is not None:
                await self._remoting.close()

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

    # -- pulls -------------------------------------------------------------------------------
    async def pull(self, mq: MessageQueue, offset: int, suspend_ms: int, *, version: int = 0) -> PullResult:
        """One LITE_PULL_MESSAGE of ``mq`` from ``offset``, held by the broker up to
        ``suspend_ms`` when > 0. Raises RocketqError for a failed request or an error answer."""
        remoting = self._running()
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
        addr = await self.broker_addr(mq)
        timeout_s = self.request_timeout_ms / 1000 + (
            suspend_ms / 1000 + SUSPEND_MARGIN_S if suspend_ms else 0
        )
        response = await remoting.invoke(
            addr, create_request(RequestCode.LITE_PULL_MESSAGE, fields), timeout_s
        )
        code = response.code
        if code not in (
            ResponseCode.SUCCESS,
            ResponseCode.PULL_NOT_FOUND,
            ResponseCode.PULL_RETRY_IMMEDIATELY,
            ResponseCode.PULL_OFFSET_MOVED,
        ):
            raise error_for_response(response, f"{mq.broker_name}@{addr}")
        next_offset = int(response.ext_fields.get("nextBeginOffset", offset))
        messages: list[MessageExt] = []
        poison: list[PoisonRecord] = []
        if code == ResponseCode.SUCCESS:
            decoded = decode_pull_body(response.body, first_offset=offset)
            messages, poison = decoded.messages, decoded.poison
            if sub is not None and sub.tags_set:
                tags = sub.tags_set
                messages = [m for m in messages if m.tags is not None and m.tags in tags]
                poison = [
                    p
                    for p in poison
                    if p.message is None or (p.message.tags is not None and p.message.tags in tags)
                ]
            if decoded.truncated:
                # the records after one that does not parse were not read: go on right after it
                # (its offset is a guess when the broker filtered some out; a guess too low costs
                # one more pull, never a stall)
                bad = next(p.queue_offset for p in poison if p.message is None)
                next_offset = min(next_offset, max(bad, offset) + 1)
            if poison:
                log_poison(f"pull by group {self.group} from {mq.broker_name}", poison, self.poison_action)
        return PullResult(mq, offset, version, code, next_offset, messages, poison)

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
        self, *, raise_errors: bool, queues: Iterable[MessageQueue] | None = None
    ) -> None:
        """Store the positions of ``queues`` (default: every owned queue); failures are logged,
        and with ``raise_errors`` the first is raised after trying every queue."""
        if self.offset_store is not None:
            await self._commit_local(raise_errors=raise_errors, queues=queues)
            return
        first: RocketqError | None = None
        for mq in list(self._queues if queues is None else queues):
            state = self._queues.get(mq)
            if state is None or state.offset is None:
                continue
            try:
                await self.update_broker_offset(mq, state.offset)
            except RocketqError as exc:
                log.warning("commit of offset %d of %s failed: %s", state.offset, mq, exc)
                first = first or exc
        if first is not None and raise_errors:
            raise first

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

    # -- group membership (subscribe mode) ---------------------------------------------------
    def _heartbeat_body(self) -> bytes:
        consumer = {
            "groupName": self.group,
            "consumeType": self.consume_type,
            "messageModel": self.message_model.value,
            "consumeFromWhere": self.consume_from_where.value,
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
                log.log(_route_miss_level(topic), "route of topic %s unavailable: %s", topic, exc)
        return sorted(set(self._broker_addrs.values()))

    async def _heartbeat_all(self) -> None:
        remoting = self._running()
        body = self._heartbeat_body()
        for addr in await self._subscribed_brokers():
            request = create_request(RequestCode.HEART_BEAT, {}, body)
            try:
                response = await remoting.invoke(addr, request, self.request_timeout_ms / 1000)
                if response.code != ResponseCode.SUCCESS:
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
            if response.code == ResponseCode.SUCCESS and response.body:
                ids = json.loads(response.body).get("consumerIdList") or []
                return [str(i) for i in ids]
        return []

    async def _rebalance(self) -> None:
        """Recompute the owned queues of every subscribed topic (:func:`plan_rebalance`)."""
        if self._mode != "subscribe":
            return
        assert self._routes is not None
        wanted: set[MessageQueue] = set()
        for topic in list(self._subscriptions):
            owned = [mq for mq in self._queues if mq.topic == topic]
            try:
                queues = self._read_queues(topic, await self._routes.fetch_route(topic))
            except RocketqError as exc:
                log.log(_route_miss_level(topic), "rebalance of topic %s skipped, no route: %s", topic, exc)
                wanted.update(owned)
                continue
            ids: list[str] = []
            if self.clustering and queues:
                ids = await self._consumer_ids(queues)
            plan = plan_rebalance(
                queues,
                ids,
                self.client_id,
                self.allocate_strategy,
                owned=owned,
                message_model=self.message_model,
            )
            wanted.update(plan.assigned)
        # queues of topics no longer subscribed leave too
        removed = [mq for mq in self._queues if mq not in wanted]
        added = [mq for mq in sorted(wanted) if mq not in self._queues]
        if not removed and not added:
            return
        if removed:
            await self.commit_offsets(raise_errors=False, queues=removed)
        queues_now = {mq: st for mq, st in self._queues.items() if mq in wanted}
        queues_now.update((mq, QueueState()) for mq in added)
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
            await self.commit_offsets(raise_errors=False)

    # -- requests from brokers ---------------------------------------------------------------
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
        handler = self._handlers.get(request.code)
        if handler is not None:
            return await handler(request)
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
                    state.move_to(offset)
        await self.commit_offsets(raise_errors=False, queues=[mq for mq in table if mq in self._queues])

    def _status_body(self, request: RemotingCommand) -> bytes:
        """GetConsumerStatusBody: the positions of the owned queues of the asked topic."""
        ext = request.ext_fields
        table: dict[MessageQueue, int] = {}
        if ext.get("group") == self.group:
            for mq, state in self._queues.items():
                if mq.topic == ext.get("topic") and state.offset is not None:
                    table[MessageQueue(mq.topic, mq.broker_name, mq.queue_id)] = state.offset
        return OBJECT_KEYS.dumps({"consumerTable": {}, "messageQueueTable": table}).encode()


__all__ = [
    "DEFAULT_PULL_BATCH_SIZE",
    "DEFAULT_REBALANCE_INTERVAL_MS",
    "ERROR_BACKOFF_S",
    "MAX_PULL_BATCH_SIZE",
    "MAX_SUSPEND_MS",
    "BrokerRequestHandler",
    "ConsumerCore",
    "DecodedBody",
    "PoisonRecord",
    "PullResult",
    "QueueState",
    "RebalancePlan",
    "decode_messages",
    "decode_pull_body",
    "log_poison",
    "plan_rebalance",
    "reset_offset_table",
]
