"""What the lite pull and push consumers show alike, asyncio and blocking.

Both asyncio consumers (:class:`~rocketq.client.lite_pull.AsyncLitePullConsumer`,
:class:`~rocketq.client.push.AsyncPushConsumer`) compose a
:class:`~rocketq.client.consumer_core.ConsumerCore`; :class:`ConsumerApi` is their common base:
the properties that read the core (group, client id, config, message model, where a new group
starts), the subscription calls and ``async with``. :class:`ConsumerFacade` is the matching base
of their blocking facades: the same properties, and the subscription calls run on the facade's
loop (or right away before it starts).
"""

from __future__ import annotations

from typing import Protocol, Self, TypeVar

from rocketq.client._facade import BlockingFacade, on_loop
from rocketq.client.config import ClientConfig, ConsumeFromWhere, MessageModel
from rocketq.client.consumer_core import ConsumerCore
from rocketq.protocol.queue import MessageQueue


class _Consumer(Protocol):
    """What :class:`ConsumerViews` reads: a consumer core, or an asyncio consumer."""

    @property
    def config(self) -> ClientConfig: ...
    @property
    def group(self) -> str: ...
    @property
    def client_id(self) -> str: ...
    @property
    def message_model(self) -> MessageModel: ...
    @property
    def consume_from_where(self) -> ConsumeFromWhere: ...


class ConsumerViews:
    """The properties both kinds of consumer show, read from ``_core``: the
    :class:`~rocketq.client.consumer_core.ConsumerCore` of an asyncio consumer, the asyncio
    consumer of a blocking one."""

    @property
    def _viewed(self) -> _Consumer:
        core: _Consumer = getattr(self, "_core")  # noqa: B009 - set by the subclasses
        return core

    @property
    def config(self) -> ClientConfig:
        return self._viewed.config

    @property
    def group(self) -> str:
        return self._viewed.group

    @property
    def client_id(self) -> str:
        """``<ip>@<instance name>`` (see :mod:`rocketq.client.config`)."""
        return self._viewed.client_id

    @property
    def message_model(self) -> MessageModel:
        return self._viewed.message_model

    @property
    def consume_from_where(self) -> ConsumeFromWhere:
        return self._viewed.consume_from_where


class ConsumerApi(ConsumerViews):
    """Base of the asyncio consumers: ``_core`` is set by their constructors."""

    _core: ConsumerCore

    async def start(self) -> None:
        raise NotImplementedError

    async def shutdown(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    @property
    def core(self) -> ConsumerCore:
        """The consumer core: membership, owned queues, offsets and pulls."""
        return self._core

    def subscribe(self, topic: str, expression: str = "*", expression_type: str = "TAG") -> None:
        """Consume ``topic``'s messages whose tag is in ``expression`` (``"*"`` or
        ``"TagA || TagB"``), or with ``expression_type="SQL92"`` whose properties satisfy the
        selector ``expression`` (filtered by the broker); the group shares the topic's queues.
        May be called before or after start. Raises :class:`SubscriptionParseFailed` for a bad
        expression."""
        self._core.subscribe(topic, expression, expression_type)

    def unsubscribe(self, topic: str) -> None:
        """Stop consuming ``topic`` (its queues leave at the next rebalance)."""
        self._core.unsubscribe(topic)

    def assignment(self) -> list[MessageQueue]:
        """The queues this consumer owns now, sorted."""
        return self._core.assignment()


A = TypeVar("A", bound=ConsumerApi)


class ConsumerFacade(ConsumerViews, BlockingFacade[A]):
    """Base of the blocking consumers."""

    subscribe = on_loop(ConsumerApi.subscribe)
    unsubscribe = on_loop(ConsumerApi.unsubscribe)
    assignment = on_loop(ConsumerApi.assignment)


__all__ = ["ConsumerApi", "ConsumerFacade"]
