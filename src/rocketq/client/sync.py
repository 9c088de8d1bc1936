"""The synchronous producer facade: :class:`AsyncProducer` on a private event loop.

``start()`` creates one event loop and one daemon thread (``rocketq-producer-<group>``) that runs
it; every method submits the matching coroutine to that loop and waits for its result in the
calling thread. ``shutdown()`` shuts the producer down, stops the loop and joins the thread.
There is no other hidden thread or global loop; several ``Producer`` objects own one each.
Methods may be called from any thread, but not from the facade's own loop (selectors run there).

:meth:`Producer.send` does its I/O in the calling thread, as blocking clients such as redis-py
do, instead of handing the call to the loop thread and back (two thread hand-offs per send): it
runs the same send steps as :meth:`AsyncProducer.send` (checks, queue selection, retries with
fault back-off, one ``send_timeout_ms`` deadline: :meth:`AsyncProducer._send_steps`) and makes
the broker calls on a blocking socket (:mod:`rocketq.remoting.blocking`, the same frame codec).
With one send in flight the client's Python is on every round trip, so the first attempt of a
send whose route is cached is made without the generator, from the same parts (queue choice,
result, failure handling), its request framed in one call (``send_request_frame``) and its
answer, when the read is the usual one, made into the SendResult in one call
(:func:`rocketq.client.send_answer.send_result`, which hands anything else to the general
decoding); a failure hands the retries to the generator with the attempt counted.
A plain message (no properties, tags, keys or delay level, a ``bytes`` body below the compress
threshold) sent without key, selector or queue is made ready in one compiled call once its queue
is picked: its UNIQ_KEY, opaque and frame (:func:`rocketq.client.send_plain.plain_send_frame`,
the same values and bytes as ``_prepare`` and ``_request_frame``); any other message is
prepared the general way for the same queue.
Threads calling at once each get a connection of their own from a pool (a connection is never
shared by two sends in flight; it goes back to the pool when the send ends). Only a topic whose
route is not cached yet is looked up on the loop thread; the periodic route refresh stays there.
:meth:`Producer.send_batch` does the same with the batch's single request. A producer with a
``request_handler`` (brokers call back on its connections) or with ``auto_batch`` (sends from
several threads coalesce on the loop) sends through the loop, as does ``send_oneway``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from threading import get_ident
from typing import Any

from rocketq.client._facade import BlockingFacade, blocking, takes_arguments_of
from rocketq.client._routes import TopicPublishInfo
from rocketq.client.aio import AsyncProducer, InvokeStep, QueueSelector, RouteStep, SendResult, resume_send
from rocketq.client.send_answer import send_result as _send_result
from rocketq.client.send_values import SendAttempts, _Prepared, validate_send_topic
from rocketq.errors import RocketqError
from rocketq.message import Message
from rocketq.protocol.queue import MessageQueue
from rocketq.remoting.blocking import BlockingConnectionPool
from rocketq.remoting.client import DEFAULT_CONNECT_TIMEOUT_S
from rocketq.remoting.codes import RequestCode
from rocketq.remoting.command import RemotingCommand

_SEND_MESSAGE_V2 = int(RequestCode.SEND_MESSAGE_V2)


class Producer(BlockingFacade[AsyncProducer]):
    """A RocketMQ producer with blocking methods; same arguments as :class:`AsyncProducer`.

    >>> p = Producer("PG", namesrv_addr="127.0.0.1:9876"); p.start()   # doctest: +SKIP
    >>> p.send(Message("T", b"hello"), sharding_key="order-42")       # doctest: +SKIP
    >>> p.shutdown()                                                   # doctest: +SKIP
    """

    #: The blocking connections of :meth:`send` (None before start, after shutdown, and when
    #: the core has a request handler or auto-batches).
    _pool: BlockingConnectionPool | None = None
    #: ``threading.get_ident()`` of the loop's thread, where :meth:`send` hands the call to the loop.
    _loop_ident: int | None = None

    @takes_arguments_of(AsyncProducer)
    def __init__(self, group: str, **kwargs: Any) -> None:
        BlockingFacade.__init__(
            self, AsyncProducer(group, **kwargs), f"rocketq-producer-{group}", f"producer {group}"
        )
        self._pool: BlockingConnectionPool | None = None

    @property
    def group(self) -> str:
        return self._core.group

    def start(self) -> None:
        BlockingFacade.start(self)
        if self._thread is not None:
            self._loop_ident = self._thread.ident
        if self._pool is None and self._core.request_handler is None and not self._core.auto_batch:
            config = self._core.config
            self._pool = BlockingConnectionPool(
                connect_timeout_s=DEFAULT_CONNECT_TIMEOUT_S,
                rpc_hook=config.rpc_hook(),
                ssl_context=config.ssl_context(),
            )

    def shutdown(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
        BlockingFacade.shutdown(self)

    def send(
        self,
        msg: Message,
        *,
        sharding_key: str | None = None,
        selector: QueueSelector | None = None,
        queue: MessageQueue | None = None,
    ) -> SendResult:
        """Send one message and wait for the broker's answer (see :meth:`AsyncProducer.send`);
        the broker call is made in the calling thread."""
        pool = self._pool
        core = self._core
        if pool is None or self._loop is None or get_ident() == self._loop_ident:
            return self._call(core.send(msg, sharding_key=sharding_key, selector=selector, queue=queue))
        routes = core._routes
        if (
            sharding_key is not None
            or selector is not None
            or queue is not None
            or routes is None
            or pool.rpc_hook is not None
            or _send_result is None
            or not core._plain(msg)
        ):
            return self._send_prepared(
                pool,
                core._prepare_send(msg, sharding_key, selector, queue),
                msg,
                sharding_key,
                selector,
                queue,
            )
        # the plain path (what _prepare cannot fail on): the checks _prepare_send makes that can
        # fail here (the topic's), the queue as _pick_queue picks it with no key, selector or
        # queue, then the message's id, opaque and frame in one call when it is plain (else, an
        # odd type or a body to compress, prepared as usual for that queue)
        validate_send_topic(msg.topic)
        info = routes.cached(msg.topic)
        if info is None or not info.queues:
            return self._send_here(pool, core._prepare(msg), None, None, None, msg)
        began = time.monotonic()  # the attempt's latency counts its own preparation too
        deadline = began + core.send_timeout_ms / 1000
        mq = info.select(core.faults)
        made = core._plain_frame(msg, mq)
        if made is None:
            return self._first_attempt(pool, core._prepare(msg), info, mq, deadline, None, None, None, msg)
        frame, opaque, msg_id = made
        try:
            # the queue's broker in the route it came from (_broker_addr looks further, or raises)
            addr = info.broker_addrs.get(mq.broker_name) or core._broker_addr(mq, routes)
            response = pool.invoke_frame(
                addr, frame, opaque, _SEND_MESSAGE_V2, deadline - began, _send_result, (msg_id, mq)
            )
            result = core._plain_result(response, msg_id, mq, addr)
        except RocketqError as exc:
            prepared, tried = core._plain_failed(exc, msg, msg_id, mq, began, deadline)
            return self._send_here(pool, prepared, None, None, None, msg, tried)
        return core._plain_succeeded(result, info, began)

    def _send_prepared(
        self,
        pool: BlockingConnectionPool,
        prepared: _Prepared,
        msg: Message,
        sharding_key: str | None,
        selector: QueueSelector | None,
        queue: MessageQueue | None,
    ) -> SendResult:
        """:meth:`send` of ``prepared`` (``msg`` made ready by ``_prepare_send``)."""
        core = self._core
        routes = core._routes
        info = routes.cached(prepared.topic) if routes is not None else None
        if routes is None or info is None or not info.queues:
            return self._send_here(pool, prepared, sharding_key, selector, queue, msg)
        # the first attempt made here, as _send_steps makes each (its rules are shared): the
        # usual send needs no generator; a failed attempt hands the retries to _send_steps
        deadline = time.monotonic() + core.send_timeout_ms / 1000
        mq = core._pick_queue(prepared, info, sharding_key, selector, queue, msg, None)
        return self._first_attempt(pool, prepared, info, mq, deadline, sharding_key, selector, queue, msg)

    def _first_attempt(
        self,
        pool: BlockingConnectionPool,
        prepared: _Prepared,
        info: TopicPublishInfo,
        mq: MessageQueue,
        deadline: float,
        sharding_key: str | None,
        selector: QueueSelector | None,
        queue: MessageQueue | None,
        msg: Message,
    ) -> SendResult:
        """The first attempt of the send of ``prepared`` to ``mq`` (then the retries when it
        fails), within ``deadline``."""
        core = self._core
        routes = core._routes
        assert routes is not None
        began = time.monotonic()
        try:
            addr = core._broker_addr(mq, routes)
            response: RemotingCommand | SendResult
            if pool.rpc_hook is None:  # framed at once, no command built
                frame, opaque, code = core._request_frame(prepared, mq)
                if _send_result is None:
                    response = pool.invoke_frame(addr, frame, opaque, code, deadline - began)
                else:  # the usual answer read straight into its SendResult
                    response = pool.invoke_frame(
                        addr, frame, opaque, code, deadline - began, _send_result, (prepared.msg_id, mq)
                    )
            else:
                response = pool.invoke(addr, core._request(prepared, mq), deadline - began)
            result = (
                response if isinstance(response, SendResult) else core._result(response, prepared, mq, addr)
            )
        except RocketqError as exc:
            tried = SendAttempts(deadline)
            core._attempt_failed(exc, prepared.topic, mq, began, tried)  # raises when not retriable
            return self._send_here(pool, prepared, sharding_key, selector, queue, msg, tried)
        return core._attempt_succeeded(result, info, began)

    def send_batch(self, msgs: Sequence[Message]) -> SendResult:
        """Send several messages of one topic in one SEND_BATCH_MESSAGE request (see
        :meth:`AsyncProducer.send_batch`); the broker call is made in the calling thread."""
        pool = self._pool
        core = self._core
        if pool is None or self._loop is None or self._thread is threading.current_thread():
            return self._call(core.send_batch(msgs))
        prepared = core._prepare_batch(msgs)
        return self._send_here(pool, prepared, None, None, None, msgs[0])

    def _send_here(
        self,
        pool: BlockingConnectionPool,
        prepared: _Prepared,
        sharding_key: str | None,
        selector: QueueSelector | None,
        queue: MessageQueue | None,
        msg: Message,
        tried: SendAttempts | None = None,
    ) -> SendResult:
        """The send steps of ``prepared`` with the broker calls made on ``pool`` in this thread
        (a route not cached yet is fetched on the loop thread), after the attempts ``tried``."""
        core = self._core
        steps = core._send_steps(prepared, sharding_key, selector, queue, msg, tried)
        step: RouteStep | InvokeStep | SendResult = next(steps)
        while not isinstance(step, SendResult):
            outcome: object
            try:
                if isinstance(step, RouteStep):  # not cached: fetched on the loop thread
                    outcome = self._call(self._fetch_route(step.topic, step.timeout_s))
                else:
                    outcome = pool.invoke(step.addr, step.request, step.timeout_s)
            except (RocketqError, TimeoutError) as exc:
                outcome = exc
            step = resume_send(steps, outcome)
        return step

    async def _fetch_route(self, topic: str, timeout_s: float) -> TopicPublishInfo:
        return await asyncio.wait_for(self._core._route_cache.publish_info(topic), timeout_s)

    send_oneway = blocking(AsyncProducer.send_oneway)


__all__ = ["Producer"]
