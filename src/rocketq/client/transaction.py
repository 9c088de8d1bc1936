"""Transactional producers: half message, local transaction, END_TRANSACTION, state checks.

:meth:`AsyncTransactionProducer.send_message_in_transaction` (RocketMQ
``DefaultMQProducerImpl.sendMessageInTransaction``)::

    half message: the AsyncProducer send path (routes, retries, compression) with the TRAN_MSG=true
      and PGROUP=<group> properties and sysFlag PREPARED (4); the broker keeps it out of sight
    send status not SEND_OK      → ROLLBACK_MESSAGE, the local transaction does not run
    local_transaction(msg, arg)  → COMMIT_MESSAGE / ROLLBACK_MESSAGE / UNKNOW (an exception: UNKNOW)
    END_TRANSACTION (37), oneway, to the master that stored the half: commitOrRollback 8 / 12 / 0

The producer heartbeats its group (HEART_BEAT, 34, ``producerDataSet``) to every broker of its
routes, at once to a broker it has not heartbeated yet when a half lands there and then every
``heartbeat_interval_ms``, so brokers know a channel of the group. A broker whose half stayed
unresolved (UNKNOW, a lost END_TRANSACTION, a crashed producer) sends CHECK_TRANSACTION_STATE
(39, oneway, body = the half's record) on that channel; the producer calls
``check_listener(message_ext)`` and answers with END_TRANSACTION, ``fromTransactionCheck=true``, on
the same connection. The listener sees the half with its real topic and queue id (from
``REAL_TOPIC`` / ``REAL_QID``). A listener exception answers UNKNOW (the broker asks again later).

The asyncio core accepts plain callables and coroutine functions for both callbacks; the
synchronous :class:`TransactionProducer` runs them in a worker thread, never on its event loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rocketq.client._facade import BlockingFacade, takes_arguments_of
from rocketq.client.aio import (
    DEFAULT_COMPRESS_LEVEL,
    DEFAULT_COMPRESS_THRESHOLD_BYTES,
    DEFAULT_MAX_MESSAGE_SIZE_BYTES,
    DEFAULT_RETRY_TIMES_WHEN_SEND_FAILED,
    DEFAULT_SEND_TIMEOUT_MS,
    AsyncProducer,
    SendResult,
    SendStatus,
    validate_message,
)
from rocketq.client.config import ClientConfig, resolve_config
from rocketq.client.consumer_core import decode_messages
from rocketq.client.sync import Producer
from rocketq.errors import MessageIllegal, ResponseCode, RocketqError
from rocketq.message import (
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    Message,
    MessageExt,
    decode_offset_msg_id,
)
from rocketq.protocol.heartbeat import encode_producer_heartbeat
from rocketq.remoting import Connection, RemotingCommand, RequestCode, create_request
from rocketq.remoting.command import not_supported_response
from rocketq.tasks import cancel_and_wait

log = logging.getLogger(__name__)

#: sysFlag of a half message (``MessageSysFlag.TRANSACTION_PREPARED_TYPE``).
SYS_FLAG_TRANSACTION_PREPARED = 0x4


class LocalTransactionState(enum.Enum):
    """The outcome of a local transaction, as RocketMQ names it (``UNKNOW`` included)."""

    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"


#: ``commitOrRollback`` of END_TRANSACTION (``MessageSysFlag`` transaction types).
_END_TYPE = {
    LocalTransactionState.COMMIT_MESSAGE: 8,
    LocalTransactionState.ROLLBACK_MESSAGE: 12,
    LocalTransactionState.UNKNOW: 0,
}

#: ``local_transaction(msg, arg)``: a state, or an awaitable of one (asyncio core only).
LocalTransaction = Callable[[Message, Any], LocalTransactionState | Awaitable[LocalTransactionState]]
#: ``check_listener(message_ext)``: the state of the transaction of a half the broker asks about.
CheckListener = Callable[[MessageExt], LocalTransactionState | Awaitable[LocalTransactionState]]


@dataclass(frozen=True, slots=True)
class TransactionSendResult(SendResult):
    """A :class:`SendResult` for the half message plus the state the local transaction reported."""

    local_transaction_state: LocalTransactionState = LocalTransactionState.UNKNOW


async def _resolve(value: LocalTransactionState | Awaitable[LocalTransactionState]) -> LocalTransactionState:
    if inspect.isawaitable(value):
        value = await value
    if not isinstance(value, LocalTransactionState):
        raise TypeError(f"expected a LocalTransactionState, got {value!r}")
    return value


class AsyncTransactionProducer:
    """A transactional RocketMQ producer on the running asyncio event loop.

    ``check_listener(message_ext)`` answers the brokers' questions about unresolved halves.
    ``config``, ``namesrv_addr``, ``instance_name``, ``client_ip`` and
    ``heartbeat_interval_ms`` are as for the consumers (the client id is ``<ip>@<instance
    name>``); the other keyword arguments are those of :class:`AsyncProducer`;
    :attr:`producer` is that producer (it sends ordinary messages too)."""

    def __init__(
        self,
        group: str,
        *,
        check_listener: CheckListener,
        config: ClientConfig | None = None,
        namesrv_addr: str | Sequence[str] | None = None,
        instance_name: str | None = None,
        client_ip: str | None = None,
        heartbeat_interval_ms: int | None = None,
        send_timeout_ms: int = DEFAULT_SEND_TIMEOUT_MS,
        retry_times_when_send_failed: int = DEFAULT_RETRY_TIMES_WHEN_SEND_FAILED,
        compress_threshold_bytes: int = DEFAULT_COMPRESS_THRESHOLD_BYTES,
        compress_level: int = DEFAULT_COMPRESS_LEVEL,
        max_message_size_bytes: int = DEFAULT_MAX_MESSAGE_SIZE_BYTES,
        route_refresh_interval_ms: int | None = None,
        fault_avoidance: bool = True,
    ) -> None:
        cfg = resolve_config(
            config,
            namesrv_addr=namesrv_addr,
            instance_name=instance_name,
            client_ip=client_ip,
            heartbeat_interval_ms=heartbeat_interval_ms,
        )
        self._producer = AsyncProducer(
            group,
            config=cfg,
            request_handler=self._on_request,
            send_timeout_ms=send_timeout_ms,
            retry_times_when_send_failed=retry_times_when_send_failed,
            compress_threshold_bytes=compress_threshold_bytes,
            compress_level=compress_level,
            max_message_size_bytes=max_message_size_bytes,
            route_refresh_interval_ms=route_refresh_interval_ms,
            fault_avoidance=fault_avoidance,
        )
        self.check_listener = check_listener
        self.heartbeat_interval_ms = cfg.heartbeat_interval_ms
        self.client_id = cfg.client_id()
        self._heartbeated: set[str] = set()
        self._heartbeater: asyncio.Task[None] | None = None
        self._checks: set[asyncio.Task[None]] = set()

    @property
    def producer(self) -> AsyncProducer:
        return self._producer

    @property
    def config(self) -> ClientConfig:
        return self._producer.config

    @property
    def group(self) -> str:
        return self._producer.group

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the producer and the periodic heartbeat."""
        if self._heartbeater is not None:
            return
        await self._producer.start()
        self._heartbeater = asyncio.get_running_loop().create_task(
            self._heartbeat_loop(), name=f"rocketq-tx-producer-{self.group}-heartbeat"
        )

    async def shutdown(self) -> None:
        """Stop heartbeating, unregister the group from the brokers, close; idempotent."""
        tasks = [t for t in (self._heartbeater, *self._checks) if t is not None]
        self._heartbeater = None
        await cancel_and_wait(*tasks)
        await self._unregister()
        await self._producer.shutdown()

    async def __aenter__(self) -> AsyncTransactionProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    # -- public API --------------------------------------------------------------------------
    async def send_message_in_transaction(
        self,
        msg: Message,
        local_transaction: LocalTransaction,
        arg: Any = None,
        *,
        sharding_key: str | None = None,
    ) -> TransactionSendResult:
        """Send ``msg`` as a half message, run ``local_transaction(msg, arg)`` and end the
        transaction on the broker with its outcome (see the module documentation).

        ``local_transaction`` gets a copy of ``msg`` carrying the ``UNIQ_KEY``, ``TRAN_MSG`` and
        ``PGROUP`` properties. ``sharding_key`` picks the queue as for :meth:`AsyncProducer.send`.
        Send failures raise as for :meth:`AsyncProducer.send`."""
        producer = self._producer
        if msg.delay_level > 0:
            raise MessageIllegal("a transactional message cannot have a delay level")
        validate_message(msg, producer.max_message_size_bytes)
        remoting, routes = producer._running()
        props = dict(msg.properties)
        props.setdefault(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, producer._ids.next_id())
        props[PROPERTY_TRANSACTION_PREPARED] = "true"
        props[PROPERTY_PRODUCER_GROUP] = self.group
        half = dataclasses.replace(msg, properties=props)
        prepared = producer._prepare(half)
        prepared.sys_flag |= SYS_FLAG_TRANSACTION_PREPARED
        sent = await producer._send_with_retries(prepared, sharding_key, None, None, half)
        mq = sent.message_queue
        addr = routes.broker_addr(mq.broker_name, mq.topic)
        if addr is not None and addr not in self._heartbeated:
            await self._heartbeat(addr)
        if sent.status is SendStatus.SEND_OK:
            try:
                state = await _resolve(local_transaction(half, arg))
            except Exception:
                log.warning(
                    "local transaction of message %s failed; left to the broker's check",
                    sent.msg_id,
                    exc_info=True,
                )
                state = LocalTransactionState.UNKNOW
        else:
            state = LocalTransactionState.ROLLBACK_MESSAGE
        transaction_id = sent.transaction_id or sent.msg_id
        if addr is None:
            log.warning("no address of broker %s to end transaction %s", mq.broker_name, transaction_id)
        else:
            request = self._end_request(
                tran_state_offset=sent.queue_offset,
                commit_log_offset=decode_offset_msg_id(sent.offset_msg_id).offset,
                state=state,
                from_check=False,
                msg_id=sent.msg_id,
                transaction_id=transaction_id,
                topic=msg.topic,
            )
            try:
                await remoting.invoke_oneway(addr, request, producer.send_timeout_ms / 1000)
            except RocketqError as exc:
                log.warning("END_TRANSACTION %s to %s failed (the broker will check): %s", state, addr, exc)
        fields = {f.name: getattr(sent, f.name) for f in dataclasses.fields(SendResult)}
        fields["transaction_id"] = transaction_id
        return TransactionSendResult(**fields, local_transaction_state=state)

    # -- END_TRANSACTION ---------------------------------------------------------------------
    def _end_request(
        self,
        *,
        tran_state_offset: int,
        commit_log_offset: int,
        state: LocalTransactionState,
        from_check: bool,
        msg_id: str,
        transaction_id: str,
        topic: str,
    ) -> RemotingCommand:
        fields = {
            "producerGroup": self.group,
            "tranStateTableOffset": str(tran_state_offset),
            "commitLogOffset": str(commit_log_offset),
            "commitOrRollback": str(_END_TYPE[state]),
            "fromTransactionCheck": "true" if from_check else "false",
            "msgId": msg_id,
            "transactionId": transaction_id,
            "topic": topic,
        }
        return create_request(RequestCode.END_TRANSACTION, fields, oneway=True)

    # -- transaction checks ------------------------------------------------------------------
    async def _on_request(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        if request.code != RequestCode.CHECK_TRANSACTION_STATE:
            return not_supported_response(request, f"request code {request.code} not supported")
        task = asyncio.get_running_loop().create_task(self._check(conn, request))
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)
        return None

    async def _check(self, conn: Connection, request: RemotingCommand) -> None:
        ext = request.ext_fields
        try:
            messages = decode_messages(request.body)
            tran_state_offset = int(ext["tranStateTableOffset"])
            commit_log_offset = int(ext["commitLogOffset"])
        except (RocketqError, KeyError, ValueError) as exc:
            log.warning("malformed CHECK_TRANSACTION_STATE from %s: %s", conn.remote_address, exc)
            return
        if not messages:
            log.warning("CHECK_TRANSACTION_STATE from %s carries no message", conn.remote_address)
            return
        message = messages[0]
        real_topic = message.properties.get(PROPERTY_REAL_TOPIC)
        if real_topic:
            message.topic = real_topic
            real_queue = message.properties.get(PROPERTY_REAL_QUEUE_ID, "")
            message.queue_id = int(real_queue) if real_queue.isdigit() else message.queue_id
        uniq = message.uniq_key or ext.get("msgId") or ""
        try:
            state = await _resolve(self.check_listener(message))
        except Exception:
            log.warning("check listener failed for transaction %s; answering UNKNOW", uniq, exc_info=True)
            state = LocalTransactionState.UNKNOW
        request_out = self._end_request(
            tran_state_offset=tran_state_offset,
            commit_log_offset=commit_log_offset,
            state=state,
            from_check=True,
            msg_id=uniq,
            transaction_id=ext.get("transactionId") or uniq,
            topic=ext.get("topic") or message.topic,
        )
        hook = self._producer.config.rpc_hook()  # answered on the broker's connection: sign here
        if hook is not None:
            hook(conn.remote_address, request_out)
        try:
            conn.send_oneway(request_out)
        except RocketqError as exc:
            log.info("cannot answer the check of transaction %s: %s", uniq, exc)

    # -- heartbeats --------------------------------------------------------------------------
    def _broker_addrs(self) -> set[str]:
        routes = self._producer._routes
        if routes is None:
            return set()
        addrs: set[str] = set()
        for topic in routes.topics:
            info = routes.last_known(topic)  # also while a failed send has it re-checked
            if info is not None:
                addrs.update(a for a in info.broker_addrs.values() if a)
        return addrs

    async def _heartbeat(self, addr: str) -> None:
        remoting, _ = self._producer._running()
        body = encode_producer_heartbeat(self.client_id, [self.group])
        request = create_request(RequestCode.HEART_BEAT, {}, body)
        try:
            response = await remoting.invoke(addr, request, self._producer.send_timeout_ms / 1000)
        except RocketqError as exc:
            log.warning("heartbeat of producer group %s to %s failed: %s", self.group, addr, exc)
            return
        if response.code != ResponseCode.SUCCESS:
            log.warning("broker %s refused the heartbeat: %s %s", addr, response.code, response.remark)
            return
        self._heartbeated.add(addr)

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_interval_ms / 1000)
            for addr in sorted(self._broker_addrs()):
                await self._heartbeat(addr)

    async def _unregister(self) -> None:
        remoting = self._producer._remoting
        if remoting is None:
            return
        for addr in sorted(self._heartbeated):
            request = create_request(
                RequestCode.UNREGISTER_CLIENT, {"clientID": self.client_id, "producerGroup": self.group}
            )
            try:
                await remoting.invoke(addr, request, self._producer.send_timeout_ms / 1000)
            except RocketqError as exc:
                log.debug("unregister from broker %s failed: %s", addr, exc)
        self._heartbeated.clear()


class TransactionProducer(Producer):
    """The synchronous transactional producer: :class:`AsyncTransactionProducer` on the
    private event loop of a :class:`Producer` (whose ``send`` methods it keeps).

    ``local_transaction`` and ``check_listener`` are plain callables; they run in worker
    threads, so they may block."""

    @takes_arguments_of(AsyncTransactionProducer)
    def __init__(
        self, group: str, *, check_listener: Callable[[MessageExt], LocalTransactionState], **kwargs: Any
    ) -> None:
        self.check_listener = check_listener

        async def check_in_thread(message: MessageExt) -> LocalTransactionState:
            return await asyncio.to_thread(self.check_listener, message)

        self._tx = AsyncTransactionProducer(group, check_listener=check_in_thread, **kwargs)
        BlockingFacade.__init__(self, self._tx.producer, f"rocketq-producer-{group}", f"producer {group}")

    @property
    def client_id(self) -> str:
        return self._tx.client_id

    @property
    def producer(self) -> TransactionProducer:
        """The producer of ordinary messages: this object (it keeps :class:`Producer`'s sends),
        as :attr:`AsyncTransactionProducer.producer` is the asyncio one."""
        return self

    @property
    def transaction_core(self) -> AsyncTransactionProducer:
        """The asyncio transactional producer this facade drives (only on the facade's loop)."""
        return self._tx

    def start(self) -> None:
        """Start the private event-loop thread, the producer and its heartbeat."""
        super().start()
        try:
            self._call(self._tx.start())
        except BaseException:
            super().shutdown()
            raise

    def shutdown(self) -> None:
        """Unregister, shut the producer down and stop its thread; idempotent."""
        if self._loop is None:
            return
        try:
            self._call(self._tx.shutdown())
        finally:
            super().shutdown()

    def __enter__(self) -> TransactionProducer:
        self.start()
        return self

    def send_message_in_transaction(
        self,
        msg: Message,
        local_transaction: Callable[[Message, Any], LocalTransactionState],
        arg: Any = None,
        *,
        sharding_key: str | None = None,
    ) -> TransactionSendResult:
        """Send a half message, run ``local_transaction(msg, arg)`` in a worker thread and end
        the transaction (see :meth:`AsyncTransactionProducer.send_message_in_transaction`)."""

        async def in_thread(half: Message, argument: Any) -> LocalTransactionState:
            return await asyncio.to_thread(local_transaction, half, argument)

        return self._call(
            self._tx.send_message_in_transaction(msg, in_thread, arg, sharding_key=sharding_key)
        )


__all__ = [
    "AsyncTransactionProducer",
    "CheckListener",
    "LocalTransaction",
    "LocalTransactionState",
    "TransactionProducer",
    "TransactionSendResult",
]
