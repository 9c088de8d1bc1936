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

from rocketq.client._facade import BlockingFacade, takes_arguments_of
from rocketq.client.aio import (
    AsyncProducer,
    QueueSelector,
    SendResult,
)
from rocketq.client.config import ClientConfig
from rocketq.message import Message
from rocketq.protocol.queue import MessageQueue

T = TypeVar("T")


class Producer(BlockingFacade):
    """A RocketMQ producer with blocking methods; same arguments as :class:`AsyncProducer`.

    >>> p = Producer("PG", namesrv_addr="127.0.0.1:9876"); p.start()   # doctest: +SKIP
    >>> p.send(Message("T", b"hello"), sharding_key="order-42")       # doctest: +SKIP
    >>> p.shutdown()                                                   # doctest: +SKIP
    """

    @takes_arguments_of(AsyncProducer)
    def __init__(self, group: str, **kwargs: Any) -> None:
        self._core = AsyncProducer(group, **kwargs)
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
