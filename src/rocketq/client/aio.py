"""The asyncio producer: the one implementation behind :class:`rocketq.client.Producer`.

One idea: a producer's send, from the caller's message to its SendResult (validation, route,
queue choice, request, retries, auto-batching); the steps shared with the blocking producer
are in :mod:`rocketq.client.send_values`.

Send path (RocketMQ ``DefaultMQProducerImpl.sendDefaultImpl``)::

    validate (group, topic, body size)  →  route (RouteCache, 105)  →  select queue
      →  SEND_MESSAGE_V2 (310) / SEND_BATCH_MESSAGE (320) to the broker's master
      →  SendResult from the response header (msgId, queueId, queueOffset)

* Every message gets a ``UNIQ_KEY`` (kept if the caller set one); it is ``SendResult.msg_id``.
* A single message whose body exceeds ``compress_threshold_bytes`` is sent zlib-compressed with
  sysFlag COMPRESSED (0x1); consumers inflate it. Batches are not compressed (as in RocketMQ).
* Retries: up to ``retry_times_when_send_failed`` more attempts after an error whose class says
  ``retriable`` (timeouts, connection errors, SYSTEM_ERROR, SYSTEM_BUSY, SERVICE_NOT_AVAILABLE,
  NO_PERMISSION, TOPIC_NOT_EXIST, NO_BUYER_ID, NOT_IN_CURRENT_UNIT: the table in
  :mod:`rocketq.errors`), each on a queue of another broker when there is one, all within one
  ``send_timeout_ms`` deadline; the topic's cached route is dropped first when the class says
  ``refresh_route``. A failure whose class says ``recheck_route`` (SERVICE_NOT_AVAILABLE, as
  a DLedger follower refuses a write; connection refused or closed; timeout) makes the topic's
  route be re-checked with the name servers before the next attempt: a master that moved (a
  leader change) is found at once, not at the next periodic refresh (:mod:`rocketq.client._routes`
  says how the re-check is shared, rate-limited and paused). MESSAGE_ILLEGAL, INVALID_PARAMETER
  and local validation errors are raised at once.
* Sends with ``sharding_key``, ``selector`` or ``queue`` always go to the chosen queue (order);
  retriable failures are retried on that same queue.
* Flush/slave timeouts (10/11/12) are not errors: the message is stored and the result's
  ``status`` says what is missing, as in RocketMQ.
* ``auto_batch`` (off by default; RocketMQ 5's ``autoBatch``): concurrent :meth:`AsyncProducer.send`
  calls for one topic (and one ``queue=`` when given) without sharding key, selector, delay
  level or compression coalesce into SEND_BATCH_MESSAGE requests. The key's requests decide
  when (the rule of Nagle's algorithm, not RocketMQ's fixed hold): a send made while no request
  of its key is in flight and none is waiting goes out at once, alone, as an ordinary
  SEND_MESSAGE_V2; a send made while one is in flight waits, and everything waiting goes out
  as one batch when a request of the key is answered, when ``batch_max_bytes`` of bodies and
  properties are waiting, or ``batch_max_delay_ms`` after the first of them, whichever comes
  first. So a lone send never waits, and the more sends are in flight, the larger the batches.
  Each caller still gets its own SendResult: its own ``msg_id`` (UNIQ_KEY), offset message id
  and ``queue_offset`` (the batch's first offset plus its place in the batch). A batch that fails
  fails every send in it, after the retries a single send gets. Shutdown sends what is waiting
  first.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

from rocketq.client._fault import NO_BACK_OFF_BELOW_MS, LatencyFaultTolerance
from rocketq.client._routes import RouteCache, TopicPublishInfo, hash_queue_index
from rocketq.client.config import ClientConfig, parse_namesrv_addrs, resolve_config
from rocketq.client.send_answer import send_result as _send_result
from rocketq.client.send_plain import plain_properties
from rocketq.client.send_plain import plain_send_frame as _plain_send_frame
from rocketq.client.send_request import send_request, send_request_frame
from rocketq.client.send_values import (
    GROUP_MAX_LENGTH,
    NOT_ALLOWED_SEND_TOPICS,
    SYS_FLAG_COMPRESSED,
    TOPIC_MAX_LENGTH,
    InvokeStep,
    QueueSelector,
    RouteStep,
    SendAttempts,
    SendResult,
    SendStatus,
    SendSteps,
    _Prepared,
    encode_batch_body,
    error_for_response,
    resume_send,
    send_result_of,
    validate_body,
    validate_group,
    validate_message,
    validate_send_topic,
)
from rocketq.errors import (
    ClientStateError,
    ConfigError,
    MessageBodyTooLarge,
    MessageIllegal,
    RemotingTimeout,
    RocketqError,
    TopicNotExist,
)
from rocketq.message import (
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    PROPERTY_WAIT_STORE_MSG_OK,
    Message,
    UniqueIdGenerator,
    encode_properties,
)
from rocketq.protocol.queue import MessageQueue
from rocketq.remoting import RemotingClient, RemotingCommand, RequestCode, RequestHandler
from rocketq.remoting.command import next_opaque
from rocketq.tasks import cancel_and_wait
from rocketq.wallclock import wall_clock_ms

log = logging.getLogger(__name__)

_SEND_MESSAGE_V2 = int(RequestCode.SEND_MESSAGE_V2)
#: An answer slower than this (s) puts its broker in back-off (LatencyFaultTolerance.update).
_SLOW_S = NO_BACK_OFF_BELOW_MS / 1000

DEFAULT_SEND_TIMEOUT_MS = 3_000
DEFAULT_RETRY_TIMES_WHEN_SEND_FAILED = 2
DEFAULT_COMPRESS_THRESHOLD_BYTES = 4 * 1024
DEFAULT_COMPRESS_LEVEL = 5  # RocketMQ's rocketmq.message.compressLevel
DEFAULT_MAX_MESSAGE_SIZE_BYTES = 4 * 1024 * 1024
DEFAULT_ROUTE_REFRESH_INTERVAL_MS = 30_000
#: RocketMQ 5's ``batchMaxDelayMs`` and ``batchMaxBytes`` (producer auto-batching).
DEFAULT_BATCH_MAX_DELAY_MS = 10
DEFAULT_BATCH_MAX_BYTES = 32 * 1024
#: The WAIT property of every send as encode_properties writes it.
_WAIT_TRUE = f"{PROPERTY_WAIT_STORE_MSG_OK}\x01true\x02"


@dataclass(slots=True)
class _Accumulating:
    """The sends waiting to go out together as one batch (auto-batching)."""

    first: Message
    items: list[tuple[_Prepared, tuple[bytes, bytes, int], asyncio.Future[SendResult]]] = field(
        default_factory=list
    )
    size: int = 0
    timer: asyncio.TimerHandle | None = None


class AsyncProducer:
    """A RocketMQ producer on the running asyncio event loop.

    ``namesrv_addr`` is ``"host:port"`` or several separated by ``;``; it and
    ``route_refresh_interval_ms`` (the config's ``poll_name_server_interval_ms``) override
    ``config`` (:class:`~rocketq.client.config.ClientConfig`) when given. All timeouts are
    milliseconds. Call :meth:`start` before sending and :meth:`shutdown` at the end (or use
    ``async with``)."""

    def __init__(
        self,
        group: str,
        *,
        config: ClientConfig | None = None,
        namesrv_addr: str | Sequence[str] | None = None,
        send_timeout_ms: int = DEFAULT_SEND_TIMEOUT_MS,
        retry_times_when_send_failed: int = DEFAULT_RETRY_TIMES_WHEN_SEND_FAILED,
        compress_threshold_bytes: int = DEFAULT_COMPRESS_THRESHOLD_BYTES,
        compress_level: int = DEFAULT_COMPRESS_LEVEL,
        max_message_size_bytes: int = DEFAULT_MAX_MESSAGE_SIZE_BYTES,
        route_refresh_interval_ms: int | None = None,
        fault_avoidance: bool = True,
        request_handler: RequestHandler | None = None,
        auto_batch: bool = False,
        batch_max_delay_ms: int = DEFAULT_BATCH_MAX_DELAY_MS,
        batch_max_bytes: int = DEFAULT_BATCH_MAX_BYTES,
    ) -> None:
        validate_group(group)
        problems = []
        if send_timeout_ms <= 0:
            problems.append(f"send_timeout_ms={send_timeout_ms} must be > 0")
        if retry_times_when_send_failed < 0:
            problems.append(f"retry_times_when_send_failed={retry_times_when_send_failed} must be >= 0")
        if compress_threshold_bytes < 0:
            problems.append(f"compress_threshold_bytes={compress_threshold_bytes} must be >= 0")
        if not 0 <= compress_level <= 9:
            problems.append(f"compress_level={compress_level} must be in [0, 9]")
        if max_message_size_bytes <= 0:
            problems.append(f"max_message_size_bytes={max_message_size_bytes} must be > 0")
        if route_refresh_interval_ms is not None and route_refresh_interval_ms <= 0:
            problems.append(f"route_refresh_interval_ms={route_refresh_interval_ms} must be > 0")
        if batch_max_delay_ms < 0:
            problems.append(f"batch_max_delay_ms={batch_max_delay_ms} must be >= 0")
        if batch_max_bytes <= 0:
            problems.append(f"batch_max_bytes={batch_max_bytes} must be > 0")
        if problems:
            raise ConfigError("invalid producer config: " + "; ".join(problems))
        self.config = resolve_config(
            config, namesrv_addr=namesrv_addr, poll_name_server_interval_ms=route_refresh_interval_ms
        )
        self.group = group
        self.namesrv_addrs = self.config.namesrv_addrs()
        self.send_timeout_ms = send_timeout_ms
        self.retry_times_when_send_failed = retry_times_when_send_failed
        self.compress_threshold_bytes = compress_threshold_bytes
        self.compress_level = compress_level
        self.max_message_size_bytes = max_message_size_bytes
        self.route_refresh_interval_ms = self.config.poll_name_server_interval_ms
        self.faults: LatencyFaultTolerance | None = LatencyFaultTolerance() if fault_avoidance else None
        #: Answers the requests brokers send on this producer's connections (transaction checks).
        self.request_handler = request_handler
        self.auto_batch = auto_batch
        self.batch_max_delay_ms = batch_max_delay_ms
        self.batch_max_bytes = batch_max_bytes
        self._batches: dict[tuple[str, MessageQueue | None], _Accumulating] = {}
        #: requests in flight per auto-batching key (sends alone and batches)
        self._in_flight: dict[tuple[str, MessageQueue | None], int] = {}
        self._batch_tasks: set[asyncio.Task[None]] = set()
        self._ids = UniqueIdGenerator()
        self._remoting: RemotingClient | None = None
        self._routes: RouteCache | None = None
        self._refresher: asyncio.Task[None] | None = None
        self._state = "created"

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Open the client and start the periodic route refresh (no I/O until the first send)."""
        if self._state == "running":
            return
        if self._state != "created":
            raise ClientStateError(f"producer {self.group} was shut down and cannot be restarted")
        self._remoting = RemotingClient(
            self.request_handler, rpc_hook=self.config.rpc_hook(), ssl=self.config.ssl_context()
        )
        faults = self.faults
        self._routes = RouteCache(
            self._remoting,
            self.namesrv_addrs,
            self.send_timeout_ms / 1000,
            on_master_moved=None if faults is None else faults.remove,
        )
        self._refresher = asyncio.get_running_loop().create_task(
            self._refresh_routes(), name=f"rocketq-producer-{self.group}-routes"
        )
        self._state = "running"
        log.info("producer %s started (name servers %s)", self.group, ";".join(self.namesrv_addrs))

    async def shutdown(self) -> None:
        """Stop the route refresh and close every connection; idempotent."""
        if self._state != "running":
            self._state = "shutdown"
            return
        while self._batches or self._batch_tasks:  # a batch answered may let another go
            for key in list(self._batches):
                self._flush_batch(key)
            await asyncio.gather(*self._batch_tasks, return_exceptions=True)
        self._state = "shutdown"
        await cancel_and_wait(self._refresher)
        if self._routes is not None:
            await self._routes.close()
        if self._remoting is not None:
            await self._remoting.close()
        log.info("producer %s shut down", self.group)

    async def __aenter__(self) -> AsyncProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    async def _refresh_routes(self) -> None:
        interval_s = self.route_refresh_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            assert self._routes is not None
            await self._routes.refresh_all()

    @property
    def _route_cache(self) -> RouteCache:
        """The route cache (ClientStateError when not running)."""
        return self._running()[1]

    def _running(self) -> tuple[RemotingClient, RouteCache]:
        if self._state != "running" or self._remoting is None or self._routes is None:
            what = "not started" if self._state == "created" else "shut down"
            raise ClientStateError(f"producer {self.group} is {what}")
        return self._remoting, self._routes

    # -- public API --------------------------------------------------------------------------
    async def send(
        self,
        msg: Message,
        *,
        sharding_key: str | None = None,
        selector: QueueSelector | None = None,
        queue: MessageQueue | None = None,
    ) -> SendResult:
        """Send one message and wait for the broker's answer.

        ``sharding_key``: the same key always goes to the same queue (hash selection), so the
        messages of one key keep their order. ``selector`` picks the queue itself; ``queue``
        names it. At most one of the three may be given."""
        routes = self._routes
        if (
            sharding_key is None
            and selector is None
            and queue is None
            and not self.auto_batch
            and routes is not None
            and self._plain(msg)
        ):
            # A plain message (_plain) with no key, selector or queue: the first attempt made
            # here when the route is cached and the queue's broker connection open (the id,
            # opaque and frame in one call once the queue is picked), else the general way.
            # Written out here rather than in a coroutine of its own: one coroutine and one
            # layer of every resumption less per send. The route, its queue round-robin and
            # the broker's address come from one call (RouteCache.plain_target: cached, select
            # and the route's address as they would give them).
            validate_send_topic(msg.topic)
            began = time.monotonic()  # the attempt's latency counts its own preparation too
            target = routes.plain_target(msg.topic, self.faults)
            remoting = self._remoting
            if target is None or remoting is None:
                return await self._send_with_retries(self._prepare(msg), None, None, None, msg)
            info, mq, addr = target
            deadline = began + self.send_timeout_ms / 1000
            if not addr:  # not in the route it came from: _broker_addr looks further, or raises
                addr = self._broker_addr(mq, routes)
            conn = remoting.ready_connection(addr)
            if conn is None:  # the general way, to the queue picked
                return await self._send_with_retries(self._prepare(msg), None, None, None, msg, picked=mq)
            made = self._plain_frame(msg, mq)
            if made is None:  # not plain after all: the general way, to the queue picked
                return await self._send_with_retries(self._prepare(msg), None, None, None, msg, picked=mq)
            frame, opaque, msg_id = made
            try:
                response = await conn.request_frame(
                    frame, opaque, _SEND_MESSAGE_V2, deadline - began, _send_result, (msg_id, mq)
                )
                result = self._plain_result(response, msg_id, mq, addr)
            except RocketqError as exc:
                prepared, tried = self._plain_failed(exc, msg, msg_id, mq, began, deadline)
                return await self._send_with_retries(prepared, None, None, None, msg, tried)
            return self._plain_succeeded(result, info, began)
        prepared = self._prepare_send(msg, sharding_key, selector, queue)
        if (
            self.auto_batch
            and sharding_key is None
            and selector is None
            and msg.delay_level <= 0
            and not prepared.sys_flag & SYS_FLAG_COMPRESSED
        ):
            key = (prepared.topic, queue)
            if key in self._in_flight or key in self._batches:
                return await self._send_batched(prepared, queue, msg)
            return await self._send_alone(key, prepared, queue, msg)
        return await self._send_with_retries(prepared, sharding_key, selector, queue, msg)

    # -- auto-batching -----------------------------------------------------------------------
    async def _send_alone(
        self, key: tuple[str, MessageQueue | None], p: _Prepared, queue: MessageQueue | None, msg: Message
    ) -> SendResult:
        """Send ``p`` at once (nothing of its key in flight or waiting): an ordinary send, counted
        in flight so that the sends made meanwhile wait for it and go together."""
        self._in_flight[key] = self._in_flight.get(key, 0) + 1
        try:
            return await self._send_with_retries(p, None, None, queue, msg)
        finally:
            self._request_done(key)

    def _request_done(self, key: tuple[str, MessageQueue | None]) -> None:
        """A request of ``key`` was answered (or failed): the sends waiting go out now."""
        left = self._in_flight[key] - 1
        if left:
            self._in_flight[key] = left
        else:
            del self._in_flight[key]
        if key in self._batches:
            self._flush_batch(key)

    def _send_batched(
        self, p: _Prepared, queue: MessageQueue | None, msg: Message
    ) -> asyncio.Future[SendResult]:
        """Add ``p`` to the batch waiting for its topic (and queue); the future of its result."""
        loop = asyncio.get_running_loop()
        key = (p.topic, queue)
        entry = (p.body, p.properties.encode("utf-8"), p.flag)
        size = len(entry[0]) + len(entry[1])
        acc = self._batches.get(key)
        if acc is not None and acc.size + size > self.max_message_size_bytes:
            self._flush_batch(key)
            acc = None
        if acc is None:
            acc = self._batches[key] = _Accumulating(msg)
            acc.timer = loop.call_later(self.batch_max_delay_ms / 1000, self._flush_batch, key)
        future: asyncio.Future[SendResult] = loop.create_future()
        acc.items.append((p, entry, future))
        acc.size += size
        if acc.size >= self.batch_max_bytes:
            self._flush_batch(key)
        return future

    def _flush_batch(self, key: tuple[str, MessageQueue | None]) -> None:
        acc = self._batches.pop(key, None)
        if acc is None:
            return
        if acc.timer is not None:
            acc.timer.cancel()
        self._in_flight[key] = self._in_flight.get(key, 0) + 1
        task = asyncio.get_running_loop().create_task(self._send_accumulated(key, acc))
        self._batch_tasks.add(task)
        task.add_done_callback(self._batch_tasks.discard)

    async def _send_accumulated(self, key: tuple[str, MessageQueue | None], acc: _Accumulating) -> None:
        try:
            await self._send_items(key[1], acc)
        finally:
            self._request_done(key)

    async def _send_items(self, queue: MessageQueue | None, acc: _Accumulating) -> None:
        items = acc.items
        try:
            if len(items) == 1:
                results = [await self._send_with_retries(items[0][0], None, None, queue, acc.first)]
            else:
                first = items[0][0]
                body = encode_batch_body([entry for _, entry, _ in items])
                batch_props = {
                    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: self._ids.next_id(),
                    PROPERTY_WAIT_STORE_MSG_OK: "true",
                }
                ids = ",".join(p.msg_id for p, _, _ in items)
                prepared = _Prepared(first.topic, body, encode_properties(batch_props), 0, 0, ids, True)
                r = await self._send_with_retries(prepared, None, None, queue, acc.first)
                offset_ids = r.offset_msg_id.split(",")
                results = [
                    SendResult(
                        status=r.status,
                        msg_id=p.msg_id,
                        offset_msg_id=offset_ids[i] if len(offset_ids) == len(items) else r.offset_msg_id,
                        message_queue=r.message_queue,
                        queue_offset=r.queue_offset + i if r.queue_offset >= 0 else r.queue_offset,
                        transaction_id=r.transaction_id,
                    )
                    for i, (p, _, _) in enumerate(items)
                ]
        except BaseException as exc:
            for _, _, future in items:
                if not future.done():
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for (_, _, future), result in zip(items, results, strict=True):
            if not future.done():
                future.set_result(result)

    def _prepare_send(
        self,
        msg: Message,
        sharding_key: str | None,
        selector: QueueSelector | None,
        queue: MessageQueue | None,
    ) -> _Prepared:
        """What :meth:`send` does before any I/O (arguments, message and state checked, the
        message's properties and body made ready); shared with the blocking facade."""
        if (sharding_key is not None) + (selector is not None) + (queue is not None) > 1:
            raise ValueError("give at most one of sharding_key, selector and queue")
        validate_message(msg, self.max_message_size_bytes)
        if queue is not None and queue.topic != msg.topic:
            raise ValueError(f"queue {queue} is not a queue of topic {msg.topic!r}")
        if self._state != "running":
            self._running()  # raises
        return self._prepare(msg)

    async def send_oneway(self, msg: Message, *, sharding_key: str | None = None) -> None:
        """Send one message without waiting for an answer (no retries, no result)."""
        validate_message(msg, self.max_message_size_bytes)
        remoting, routes = self._running()
        prepared = self._prepare(msg)
        info = await routes.publish_info(msg.topic)
        if sharding_key is not None:
            mq = self._hash_queue(info.queues, sharding_key, msg.topic)
        else:
            mq = info.select(self.faults)
        addr = self._broker_addr(mq, routes)
        request = self._request(prepared, mq)
        await remoting.invoke_oneway(addr, request, self.send_timeout_ms / 1000)

    async def send_batch(self, msgs: Sequence[Message]) -> SendResult:
        """Send several messages of one topic in one SEND_BATCH_MESSAGE request; they get
        consecutive offsets in one queue. Delay levels are not allowed in batches."""
        prepared = self._prepare_batch(msgs)
        return await self._send_with_retries(prepared, None, None, None, msgs[0])

    def _prepare_batch(self, msgs: Sequence[Message]) -> _Prepared:
        """What :meth:`send_batch` does before any I/O (messages and state checked, the batch
        body encoded); shared with the blocking facade."""
        if not msgs:
            raise MessageIllegal("batch is empty")
        topic = msgs[0].topic
        entries: list[tuple[bytes, bytes, int]] = []
        ids: list[str] = []
        max_bytes = self.max_message_size_bytes
        # one id per message (used unless it has its own UNIQ_KEY) and one for the batch
        new_ids = self._ids.next_ids(len(msgs) + 1)
        for i, m in enumerate(msgs):
            if i and m.topic == topic:
                validate_body(m, max_bytes)  # the topic is the first message's, checked
            else:
                validate_message(m, max_bytes)
            if m.topic != topic:
                raise MessageIllegal(f"batch message {i} has topic {m.topic!r}, the batch is for {topic!r}")
            if m.delay_level > 0:
                raise MessageIllegal(
                    f"batch message {i} has delay level {m.delay_level}; batches cannot delay"
                )
            props = m.all_properties()
            uniq = props.setdefault(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, new_ids[i])
            props.setdefault(PROPERTY_WAIT_STORE_MSG_OK, "true")
            ids.append(uniq)
            entries.append((bytes(m.body), encode_properties(props).encode("utf-8"), m.flag))
        body = encode_batch_body(entries)
        if len(body) > self.max_message_size_bytes:
            raise MessageBodyTooLarge(f"batch body {len(body)} B exceeds max {self.max_message_size_bytes} B")
        self._running()
        batch_props = {
            PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: new_ids[-1],
            PROPERTY_WAIT_STORE_MSG_OK: "true",
        }
        return _Prepared(topic, body, encode_properties(batch_props), 0, 0, ",".join(ids), True)

    # -- internals ---------------------------------------------------------------------------
    def _prepare(self, msg: Message) -> _Prepared:
        if msg.properties or msg.tags or msg.keys or msg.delay_level > 0:
            props = msg.all_properties()
            uniq = props.setdefault(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, self._ids.next_id())
            props.setdefault(PROPERTY_WAIT_STORE_MSG_OK, "true")
            properties = encode_properties(props)
        else:  # only the two properties every send adds: what encode_properties makes of them
            uniq = self._ids.next_id()
            properties = f"{PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX}\x01{uniq}\x02{_WAIT_TRUE}"
        body = bytes(msg.body)
        sys_flag = 0
        if len(body) > self.compress_threshold_bytes:
            body = zlib.compress(body, self.compress_level)
            sys_flag |= SYS_FLAG_COMPRESSED
        return _Prepared(msg.topic, body, properties, sys_flag, msg.flag, uniq, False)

    @staticmethod
    def _hash_queue(queues: Sequence[MessageQueue], key: str, topic: str) -> MessageQueue:
        if not queues:
            raise TopicNotExist(f"topic {topic!r} has no writable queue on any master broker")
        return queues[hash_queue_index(key, len(queues))]

    @staticmethod
    def _broker_addr(mq: MessageQueue, routes: RouteCache) -> str:
        addr = routes.broker_addr(mq.broker_name, mq.topic)
        if addr is None:
            raise TopicNotExist(f"broker {mq.broker_name} of topic {mq.topic!r} has no master address")
        return addr

    def _request(self, p: _Prepared, mq: MessageQueue) -> RemotingCommand:
        """The SEND_MESSAGE_V2 (or SEND_BATCH_MESSAGE) request of ``p`` to ``mq``
        (:mod:`rocketq.client.send_request`)."""
        return send_request(
            self.group, p.topic, mq.queue_id, p.sys_flag, time.time_ns() // 1_000_000, p.flag,
            p.properties, p.batch, mq.broker_name, p.body,
        )  # fmt: skip

    def _request_frame(self, p: _Prepared, mq: MessageQueue) -> tuple[bytes, int, int]:
        """:meth:`_request` as its whole frame, with its opaque and code (the blocking producer
        writes it itself)."""
        opaque = next_opaque()
        frame = send_request_frame(
            opaque, self.group, p.topic, mq.queue_id, p.sys_flag, time.time_ns() // 1_000_000, p.flag,
            p.properties, p.batch, mq.broker_name, p.body,
        )  # fmt: skip
        return frame, opaque, RequestCode.SEND_BATCH_MESSAGE if p.batch else RequestCode.SEND_MESSAGE_V2

    def _plain(self, msg: Message) -> bool:
        """Whether ``msg`` may take the plain send (:mod:`rocketq.client.send_plain`): the
        compiled codecs in use, the producer running, a ``bytes`` body of a legal size and no
        properties, tags, keys or delay level. What ``_prepare`` would make of it is then what
        :meth:`_plain_frame` makes (or it returns None and nothing is taken)."""
        body = msg.body
        return (
            _plain_send_frame is not None
            and _send_result is not None
            and self._state == "running"
            and type(body) is bytes
            and 0 < len(body) <= self.max_message_size_bytes
            and not (msg.properties or msg.tags or msg.keys or msg.delay_level > 0)
        )

    def _plain_frame(self, msg: Message, mq: MessageQueue) -> tuple[bytes, int, str] | None:
        """``(frame, opaque, msg_id)`` of plain ``msg`` sent to ``mq`` now, its UNIQ_KEY, opaque
        and SEND_MESSAGE_V2 frame made in one compiled call; None, with nothing taken, for a
        message that is not plain after all (a body to compress, an odd field)."""
        assert _plain_send_frame is not None
        # the id's time field from the born time's clock reading when the id's clock is the wall
        # clock too (UniqueIdGenerator.offset_ms otherwise, and when a month has turned)
        born_ms = time.time_ns() // 1_000_000
        ids = self._ids
        month = ids._month
        if ids._clock_ms is wall_clock_ms and month[0] <= born_ms < month[1]:
            offset_ms = (born_ms - month[0]) & 0xFFFFFFFF
        else:
            offset_ms = ids.offset_ms()
        return _plain_send_frame(
            msg, self.group, mq.queue_id, mq.broker_name, self.max_message_size_bytes,
            self.compress_threshold_bytes, ids._prefix, offset_ms, ids._seq, born_ms,
        )  # fmt: skip

    def _plain_succeeded(self, result: SendResult, info: TopicPublishInfo, began: float) -> SendResult:
        """A plain send's ``result``, through :meth:`_attempt_succeeded` only when that has
        something to do: a broker in back-off (a fast answer takes it out), a slow answer, a
        route from the template."""
        faults = self.faults
        slow = faults is not None and (faults.items or time.monotonic() - began >= _SLOW_S)
        if slow or info.from_template:
            return self._attempt_succeeded(result, info, began)
        return result

    @staticmethod
    def _plain_result(
        response: RemotingCommand | SendResult, msg_id: str, mq: MessageQueue, addr: str
    ) -> SendResult:
        """The SendResult of a plain send's answer (made already by the quick answer, or not)."""
        if isinstance(response, SendResult):
            return response
        return send_result_of(response, msg_id, mq, f"{mq.broker_name}@{addr}")

    def _plain_failed(
        self, exc: RocketqError, msg: Message, msg_id: str, mq: MessageQueue, began: float, deadline: float
    ) -> tuple[_Prepared, SendAttempts]:
        """A plain send's first attempt failed with ``exc``: noted (raised when not retriable),
        and what the retries go on with: the message as ``_prepare`` makes it with the id the
        attempt used, and the attempts so far."""
        tried = SendAttempts(deadline)
        self._attempt_failed(exc, msg.topic, mq, began, tried)  # raises when not retriable
        return _Prepared(msg.topic, msg.body, plain_properties(msg_id), 0, msg.flag, msg_id, False), tried

    async def _send_with_retries(
        self,
        p: _Prepared,
        sharding_key: str | None,
        selector: QueueSelector | None,
        queue: MessageQueue | None,
        msg: Message,
        tried: SendAttempts | None = None,
        picked: MessageQueue | None = None,
    ) -> SendResult:
        """The send of ``p`` with its retries, after the attempts ``tried`` (None: none yet);
        ``picked``: the queue of the first attempt when it is picked already."""
        remoting, routes = self._running()
        info = routes.cached(p.topic)
        if tried is None and info is not None and info.queues:
            # the first attempt made here when the route is cached, as _send_steps makes each
            # (its rules are shared): on an open connection the request framed at once, no
            # generator, no coroutine per layer, the usual answer read straight into its
            # SendResult; a failed attempt hands the retries to _send_steps
            deadline = time.monotonic() + self.send_timeout_ms / 1000
            mq = picked or self._pick_queue(p, info, sharding_key, selector, queue, msg, None)
            began = time.monotonic()
            try:
                addr = self._broker_addr(mq, routes)
                conn = remoting.ready_connection(addr)
                response: RemotingCommand | SendResult
                if conn is None:  # connected (or signed, or waited for) by the general call
                    response = await remoting.invoke(addr, self._request(p, mq), deadline - began)
                elif _send_result is None:
                    response = await conn.request_frame(*self._request_frame(p, mq), deadline - began)
                else:
                    frame, opaque, code = self._request_frame(p, mq)
                    response = await conn.request_frame(
                        frame, opaque, code, deadline - began, _send_result, (p.msg_id, mq)
                    )
                result = response if isinstance(response, SendResult) else self._result(response, p, mq, addr)
                return self._attempt_succeeded(result, info, began)
            except RocketqError as exc:
                tried = SendAttempts(deadline)
                self._attempt_failed(exc, p.topic, mq, began, tried)  # raises when not retriable
        steps = self._send_steps(p, sharding_key, selector, queue, msg, tried)
        step: RouteStep | InvokeStep | SendResult = next(steps)
        while not isinstance(step, SendResult):
            outcome: object
            try:
                if isinstance(step, RouteStep):
                    outcome = await asyncio.wait_for(routes.publish_info(step.topic), step.timeout_s)
                else:
                    outcome = await remoting.invoke(step.addr, step.request, step.timeout_s)
            except (RocketqError, TimeoutError) as exc:
                outcome = exc
            step = resume_send(steps, outcome)
        return step

    def _send_steps(
        self,
        p: _Prepared,
        sharding_key: str | None,
        selector: QueueSelector | None,
        queue: MessageQueue | None,
        msg: Message,
        tried: SendAttempts | None = None,
    ) -> SendSteps:
        """The send with retries, without I/O: yields the route lookups and broker calls it
        needs and takes their results (or their exceptions, thrown in); returns the SendResult.
        The asyncio producer and the blocking facade each drive it with their own I/O. A route
        the cache holds (with a writable queue) is used without a RouteStep: the drivers only
        fetch the ones it lacks (asyncio's ``wait_for`` would cost a task per send). ``tried``:
        the attempts a driver already made itself (their deadline and failures), which this
        goes on from."""
        _, routes = self._running()
        if tried is None:
            tried = SendAttempts(time.monotonic() + self.send_timeout_ms / 1000)
        deadline = tried.deadline
        while tried.count <= self.retry_times_when_send_failed:  # each pass fails, returns or ends
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            info = routes.cached(p.topic)
            if info is None or not info.queues:  # not cached (or no queue): ask the driver
                try:
                    info = cast(TopicPublishInfo, (yield RouteStep(p.topic, remaining)))
                except TimeoutError:
                    if tried.last_exc is not None:  # a re-check outlasted the deadline
                        tried.failures.append(f"route re-check of topic {p.topic!r} outlasted the deadline")
                        break
                    raise RemotingTimeout(
                        f"route lookup for topic {p.topic!r} exceeded send_timeout_ms={self.send_timeout_ms}"
                    ) from None
            mq = self._pick_queue(p, info, sharding_key, selector, queue, msg, tried.last_broker)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            began = time.monotonic()
            try:
                addr = self._broker_addr(mq, routes)
                response = cast(RemotingCommand, (yield InvokeStep(addr, self._request(p, mq), remaining)))
                result = self._result(response, p, mq, addr)
            except RocketqError as exc:
                self._attempt_failed(exc, p.topic, mq, began, tried)  # raises when not retriable
                continue
            return self._attempt_succeeded(result, info, began)
        raise self._send_failed(p.topic, tried)

    def _pick_queue(
        self,
        p: _Prepared,
        info: TopicPublishInfo,
        sharding_key: str | None,
        selector: QueueSelector | None,
        queue: MessageQueue | None,
        msg: Message,
        last_broker: str | None,
    ) -> MessageQueue:
        """The queue of an attempt: the one named, the key's, the selector's, or the next one
        round-robin on an available broker other than ``last_broker`` (the last one failed)."""
        if queue is not None:
            return queue
        if sharding_key is not None:
            return self._hash_queue(info.queues, sharding_key, p.topic)
        if selector is not None:
            if not info.queues:
                raise TopicNotExist(f"topic {p.topic!r} has no writable queue on any master broker")
            return selector(info.queues, msg)
        return info.select(self.faults, last_broker)

    def _attempt_succeeded(self, result: SendResult, info: TopicPublishInfo, began: float) -> SendResult:
        """``result`` of the attempt begun at ``began`` (monotonic s): the broker's latency
        noted, a route made from the template dropped (the topic exists on the broker now)."""
        if self.faults is not None:
            self.faults.update(result.message_queue.broker_name, (time.monotonic() - began) * 1000)
        if info.from_template and self._routes is not None:
            self._routes.invalidate(info.topic)  # fetch the real route next time
        return result

    def _attempt_failed(
        self, exc: RocketqError, topic: str, mq: MessageQueue, began: float, tried: SendAttempts
    ) -> None:
        """Note the failure ``exc`` of an attempt on ``mq`` in ``tried``; raise it when it is
        not retriable, else mark the broker in back-off, and drop the route or have it
        re-checked when the error says so."""
        elapsed_ms = (time.monotonic() - began) * 1000
        tried.last_broker = mq.broker_name
        tried.last_exc = exc
        tried.count += 1
        tried.failures.append(f"attempt {tried.count} to {mq.broker_name} queue {mq.queue_id}: {exc}")
        if not exc.retriable:
            raise exc
        if self.faults is not None:
            self.faults.update(mq.broker_name, elapsed_ms, failed=True)
        routes = self._routes
        if routes is not None:
            if exc.refresh_route:
                routes.invalidate(topic)
            if exc.recheck_route:  # the master may have moved: the next attempt re-checks the route
                addr = routes.broker_addr(mq.broker_name, topic)
                if addr is not None:
                    routes.suspect(topic, mq.broker_name, addr, wait=exc.await_new_master)
        left = 1 + self.retry_times_when_send_failed - tried.count
        log.debug("send to %s failed (%s), %d attempt(s) left", mq, exc, left)

    def _send_failed(self, topic: str, tried: SendAttempts) -> BaseException:
        """The error of a send whose attempts all failed or whose deadline passed."""
        last_exc = tried.last_exc
        if last_exc is None:
            return RemotingTimeout(f"send to topic {topic!r} exceeded {self.send_timeout_ms} ms")
        last_exc.add_note(
            f"send to topic {topic!r} failed {len(tried.failures)} time(s): " + " | ".join(tried.failures)
        )
        return last_exc

    def _result(self, response: RemotingCommand, p: _Prepared, mq: MessageQueue, addr: str) -> SendResult:
        return send_result_of(response, p.msg_id, mq, f"{mq.broker_name}@{addr}")


__all__ = [
    "GROUP_MAX_LENGTH",
    "NOT_ALLOWED_SEND_TOPICS",
    "SYS_FLAG_COMPRESSED",
    "TOPIC_MAX_LENGTH",
    "AsyncProducer",
    "InvokeStep",
    "MessageQueue",
    "QueueSelector",
    "RouteStep",
    "SendResult",
    "SendStatus",
    "SendSteps",
    "encode_batch_body",
    "error_for_response",
    "parse_namesrv_addrs",
    "resume_send",
    "validate_group",
    "validate_message",
]
