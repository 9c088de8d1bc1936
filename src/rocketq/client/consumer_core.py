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

Positions, routes and committed offsets: :mod:`rocketq.client.consumer_queues`; heartbeats and
rebalancing: :mod:`rocketq.client.rebalance`; decoding pull bodies: :mod:`rocketq.client.pull_decode`.
The core adds the lifecycle, the pulls and the requests brokers send.

Pulls: :meth:`ConsumerCore.pull` sends one LITE_PULL_MESSAGE (361), suspended on the broker
when ``suspend_ms`` > 0. FOUND (0) → records (spec §3.7) decoded in queue order one by one
(:func:`decode_pull_body`), zlib bodies inflated, messages whose ``TAGS`` are not in the
subscription dropped (tag codes only pre-filter on the broker); PULL_NOT_FOUND (19),
NO_MATCHED_MSG (20) and OFFSET_MOVED (21) → no messages and ``nextBeginOffset``. A pull
carries a commit (COMMIT_OFFSET bit and ``commitOffset``) when
the consumer passes one: with ``auto_commit`` the lite pull and push consumers send the queue's
position along when the broker does not hold it yet (:meth:`ConsumerQueues.ride_along_offset`).
A record that cannot be delivered — CRC mismatch, a
body marked compressed that does not inflate, a record that does not parse — is a *poison
record*: the pull logs it at ERROR (topic, queue, offsets, reason, :attr:`poison_action`) and
returns it in :attr:`PullResult.poison` beside the good messages, which are delivered as usual;
when a record does not parse, ``next_offset`` becomes the offset after it (the rest of that
body could not be read).

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
import logging
from collections.abc import Mapping
from typing import Any

from rocketq.client._routes import RouteCache
from rocketq.client.aio import error_for_response
from rocketq.client.config import resolve_config
from rocketq.client.consumer_queues import (
    DEFAULT_PULL_BATCH_SIZE,
    DEFAULT_REBALANCE_INTERVAL_MS,
    MAX_PULL_BATCH_SIZE,
    BrokerRequestHandler,
    PullResult,
    QueueState,
)
from rocketq.client.pull_decode import (
    DecodedBody,
    PoisonRecord,
    decode_messages,
    decode_pull_body,
    log_poison,
)
from rocketq.client.rebalance import GroupMembership, RebalancePlan, plan_rebalance
from rocketq.errors import BodyFormatError, ClientStateError, ResponseCode
from rocketq.message import MessageExt
from rocketq.protocol.fastjson import OBJECT_KEYS
from rocketq.protocol.headers import (
    PULL_FLAG_COMMIT_OFFSET,
    PULL_FLAG_LITE_PULL,
    PULL_FLAG_SUBSCRIPTION,
    PULL_FLAG_SUSPEND,
)
from rocketq.protocol.queue import MessageQueue, message_queue_table
from rocketq.remoting import (
    Connection,
    RemotingClient,
    RemotingCommand,
    RequestCode,
    create_request,
    create_response,
)
from rocketq.remoting.command import not_supported_response
from rocketq.tasks import cancel_and_wait

log = logging.getLogger(__name__)

#: Longest time the broker holds a suspended pull (RocketMQ's brokerSuspendMaxTimeMillis).
MAX_SUSPEND_MS = 15_000
#: Extra time a suspended pull waits for its answer beyond the hold time.
SUSPEND_MARGIN_S = 5.0
#: Pause before trying again when pulls failed.
ERROR_BACKOFF_S = 1.0
#: The constructor keywords a consumer facade passes on to its core unchanged.
_CORE_KEYWORDS = (
    "pull_batch_size",
    "auto_commit",
    "consume_from_where",
    "consume_timestamp_ms",
    "rebalance_interval_ms",
    "allocate_strategy",
    "message_model",
    "offset_store_dir",
)


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


class ConsumerCore(GroupMembership):
    """One member of consumer group ``group``: membership, owned queues, offsets and pulls.

    ``config`` supplies the name servers, client id, request timeout, heartbeat and commit
    intervals. ``consume_type`` is what heartbeats say (CONSUME_ACTIVELY for the lite pull
    consumer, CONSUME_PASSIVELY for the push consumer). ``consume_timestamp_ms`` is the start
    for ``CONSUME_FROM_TIMESTAMP`` (default: 30 minutes ago, as RocketMQ)."""

    @classmethod
    def of_facade(cls, consume_type: str, arguments: Mapping[str, Any]) -> ConsumerCore:
        """The core of a consumer facade, from its constructor's arguments (its ``locals()``;
        each facade keeps its explicit signature): the client settings resolved over its
        ``config`` (``auto_commit_interval_ms`` is ``persist_consumer_offset_interval_ms``), and
        the keywords of :data:`_CORE_KEYWORDS` it has passed on as they are."""
        a = arguments
        cfg = resolve_config(
            a["config"],
            namesrv_addr=a["namesrv_addr"],
            instance_name=a["instance_name"],
            client_ip=a["client_ip"],
            request_timeout_ms=a["request_timeout_ms"],
            heartbeat_interval_ms=a["heartbeat_interval_ms"],
            persist_consumer_offset_interval_ms=a["auto_commit_interval_ms"],
        )
        core_keywords = {name: a[name] for name in _CORE_KEYWORDS if name in a}
        return cls(a["group"], cfg, consume_type=consume_type, **core_keywords)

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
        await cancel_and_wait(*self._tasks)
        try:
            await self.commit_offsets(raise_errors=False)
            if self._mode == "subscribe":
                await self._unregister()
        finally:
            self._state = "shutdown"
            if self._remoting is not None:
                await self._remoting.close()

    # -- pulls -------------------------------------------------------------------------------
    async def pull(
        self,
        mq: MessageQueue,
        offset: int,
        suspend_ms: int,
        *,
        version: int = 0,
        commit_offset: int | None = None,
    ) -> PullResult:
        """One LITE_PULL_MESSAGE of ``mq`` from ``offset``, held by the broker up to
        ``suspend_ms`` when > 0. Raises RocketqError for a failed request or an error answer.

        ``commit_offset`` (see :meth:`ride_along_offset`) is stored by the broker as the group's
        offset of ``mq`` (COMMIT_OFFSET sys flag); once the broker answered, the queue's state
        records it as committed."""
        remoting = self._running()
        sub = self._subscriptions.get(mq.topic)
        sys_flag = PULL_FLAG_SUBSCRIPTION | PULL_FLAG_LITE_PULL
        if suspend_ms > 0:
            sys_flag |= PULL_FLAG_SUSPEND
        if commit_offset is not None:
            sys_flag |= PULL_FLAG_COMMIT_OFFSET
        fields = {
            "consumerGroup": self.group,
            "topic": mq.topic,
            "queueId": mq.queue_id,
            "queueOffset": offset,
            "maxMsgNums": self.pull_batch_size,
            "sysFlag": sys_flag,
            "commitOffset": 0 if commit_offset is None else commit_offset,
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
        if commit_offset is not None:
            state = self._queues.get(mq)
            if state is not None:
                state.committed = commit_offset
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
        return not_supported_response(request)

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
