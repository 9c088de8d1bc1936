"""The broker core: RocketMQ's remoting protocol over the embedded store.

Request headers, heartbeat and subscription data, topic configs and the other wire values the
broker shares with clients are in :mod:`rocketq.protocol`. Modules (each named after what it is)::

    config.py            BrokerConfig, load_broker_conf (RocketMQ broker.conf)
    topic_config.py      the topic table: system topics, auto-create, topics.json
    subscription_group.py  consumer-group settings, subscriptionGroup.json
    consumer_offset.py   committed offsets, consumerOffset.json
    client_manager.py    producer and consumer registries (channels, expiry, ids-changed)
    long_polling.py      PullRequestHoldService: held pulls woken by dispatch
    rebalance_lock.py    queue locks of orderly consumers (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ)
    send.py pull.py query.py consumer_manage.py admin.py   request processors
    registration.py      REGISTER_BROKER / UNREGISTER_BROKER with the name servers
    context.py           BrokerContext: what the processors share; worker-thread store calls
    config_file.py       config/*.json persistence off the event loop
    data_version.py, stats.py   DataVersion, put/get rates
    server.py            Broker: lifecycle, dispatch table, periodic work; run_broker
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocketq._lazy import lazy_exports

if TYPE_CHECKING:
    from rocketq.broker.config import BrokerConfig, load_broker_conf
    from rocketq.broker.server import Broker, run_broker, serve_broker

# Imported from their modules on first use (PEP 562): ``import rocketq.broker.config`` does not
# load the server.
_EXPORTS: dict[str, str] = {
    "Broker": "rocketq.broker.server",
    "BrokerConfig": "rocketq.broker.config",
    "load_broker_conf": "rocketq.broker.config",
    "run_broker": "rocketq.broker.server",
    "serve_broker": "rocketq.broker.server",
}

__all__ = ["Broker", "BrokerConfig", "load_broker_conf", "run_broker", "serve_broker"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
