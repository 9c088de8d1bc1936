"""Pop consumption over a bare :class:`~rocketq.store.message_store.MessageStore`, no network.

:func:`standalone_context` builds the :class:`~rocketq.broker.context.BrokerContext` a
:class:`~rocketq.broker.pop.service.PopService` needs from an open store, with in-memory topic,
subscription-group and offset tables (nothing of them is written to ``config/``; the pop state
itself is durable in ``<storePathRootDir>/pop/`` as always). Embedded use, tools and tests::

    with MessageStore(cfg) as store:
        ctx = standalone_context(store, topics={"T": 4})
        pop = PopService(ctx); pop.start()
        ...  # await pop.receive(...), pop.ack(...)
        await pop.shutdown()

The caller starts the store and shuts it down after the service. Call :func:`hook_arrivals`
to let held receives be woken by dispatched messages.
"""

from __future__ import annotations

from collections.abc import Mapping

from rocketq.broker.client_manager import ConsumerManager, ProducerManager
from rocketq.broker.config import BrokerConfig
from rocketq.broker.consumer_offset import ConsumerOffsetManager
from rocketq.broker.context import BrokerContext
from rocketq.broker.long_polling import PullRequestHoldService
from rocketq.broker.pop.service import PopService
from rocketq.broker.subscription_group import SubscriptionGroupManager
from rocketq.broker.topic_config import TopicConfigManager
from rocketq.protocol.topic import PERM_READ, PERM_WRITE, TopicConfig
from rocketq.store.message_store import MessageStore


def standalone_context(
    store: MessageStore,
    *,
    topics: Mapping[str, int] | None = None,
    broker_config: BrokerConfig | None = None,
) -> BrokerContext:
    """A context over ``store``; ``topics`` maps topic names to their queue counts (read-write)."""
    cfg = broker_config or BrokerConfig(
        broker_name="standalone", broker_ip1="127.0.0.1", bind_address="127.0.0.1", namesrv_addr=None
    )
    topic_table = TopicConfigManager(cfg)
    for name, queues in (topics or {}).items():
        topic_table.update(TopicConfig(name, queues, queues, PERM_READ | PERM_WRITE))
    return BrokerContext(
        config=cfg,
        store=store,
        topics=topic_table,
        groups=SubscriptionGroupManager(auto_create=True),
        offsets=ConsumerOffsetManager(),
        consumers=ConsumerManager(),
        producers=ProducerManager(),
        hold=PullRequestHoldService(store.get_max_offset),
        broker_addr=cfg.broker_addr,
    )


def hook_arrivals(store: MessageStore, pop: PopService) -> None:
    """Wake ``pop``'s held receives when the store dispatches messages."""
    if store.reput is not None:
        store.reput.arrival_listeners.append(pop.arrival_listener)


__all__ = ["hook_arrivals", "standalone_context"]
