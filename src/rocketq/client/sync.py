"""The synchronous producer facade: :class:`AsyncProducer` on a private event loop.

``start()`` creates one event loop and one daemon thread (``rocketq-producer-<group>``) that runs
it; every method submits the matching coroutine to that loop and waits for its result in the
calling thread. ``shutdown()`` shuts the producer down, stops the loop and joins the thread.
There is no other hidden thread or global loop; several ``Producer`` objects own one each.
Methods may be called from any thread, but not from the facade's own loop (selectors run there).
"""

from __future__ import annotations

from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from rocketq.client._facade import BlockingFacade
from rocketq.client.aio import (
    DEFAULT_COMPRESS_LEVEL,
    DEFAULT_COMPRESS_THRESHOLD_BYTES,
    DEFAULT_MAX_MESSAGE_SIZE_BYTES,
    DEFAULT_RETRY_TIMES_WHEN_SEND_FAILED,
    DEFAULT_SEND_TIMEOUT_MS,
    AsyncProducer,
    QueueSelector,
    SendResult,
)
from rocketq.client.config import ClientConfig
from rocketq.message import Message
from rocketq.protocol.queue import MessageQueue
from rocketq.remoting import RequestHandler

T = TypeVar("T")


class Producer(BlockingFacade):
    """A RocketMQ producer with blocking methods; same arguments as :class:`AsyncProducer`.

    >>> p = Producer("PG", namesrv_addr="127.0.0.1:9876"); p.start()   # doctest: +SKIP
    >>> p.send(Message("T", b"hello"), sharding_key="order-42")       # doctest: +SKIP
    >>> p.shutdown()                                                   # doctest: +SKIP
    """

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
    ) -> None:
        self._core = AsyncProducer(
            group,
            config=config,
            namesrv_addr=namesrv_addr,
            send_timeout_ms=send_timeout_ms,
            retry_times_when_send_failed=retry_times_when_send_failed,
            compress_threshold_bytes=compress_threshold_bytes,
            compress_level=compress_level,
            max_message_size_bytes=max_message_size_bytes,
            route_refresh_interval_ms=route_refresh_interval_ms,
            fault_avoidance=fault_avoidance,
            request_handler=request_handler,
        )
        BlockingFacade.__init__(self, f"rocketq-producer-{group}", f"producer {group}")

    @property
    def core(self) -> AsyncProducer:
        """The asyncio producer this facade drives (use it only on the facade's loop)."""
        return self._core

    @property
    def group(self) -> str:
        return self._core.group

    @property
    def config(self) -> ClientConfig:
        return self._core.config

    def _core_start(self) -> Coroutine[Any, Any, None]:
        return self._core.start()

    def _core_shutdown(self) -> Coroutine[Any, Any, None]:
        return self._core.shutdown()

    def send(
        self,
        msg: Message,
        *,
        sharding_key: str | None = None,
        selector: QueueSelector | None = None,
        queue: MessageQueue | None = None,
    ) -> SendResult:
        """Send one message and return the broker's result (see :meth:`AsyncProducer.send`)."""
        return self._call(self._core.send(msg, sharding_key=sharding_key, selector=selector, queue=queue))

    def send_oneway(self, msg: Message, *, sharding_key: str | None = None) -> None:
        """Send one message without waiting for an answer."""
        self._call(self._core.send_oneway(msg, sharding_key=sharding_key))

    def send_batch(self, msgs: Sequence[Message]) -> SendResult:
        """Send messages of one topic as one batch."""
        return self._call(self._core.send_batch(msgs))


__all__ = ["Producer"]
