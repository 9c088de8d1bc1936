"""The broker core: RocketMQ's remoting protocol over the embedded store.

Modules (each named after what it is)::

    config.py            BrokerConfig, load_broker_conf (RocketMQ broker.conf)
    topic_config.py      topics, permissions, system topics, auto-create, topics.json
    subscription_group.py  consumer-group settings, subscriptionGroup.json
    consumer_offset.py   committed offsets, consumerOffset.json
    heartbeat.py         HeartbeatData / SubscriptionData parsing, tag filters
    client_manager.py    producer and consumer registries (channels, expiry, ids-changed)
    long_polling.py      PullRequestHoldService: held pulls woken by dispatch
    rebalance_lock.py    queue locks of orderly consumers (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ)
    headers.py, batch.py request headers and the batch body (pure codecs)
    send.py pull.py query.py consumer_manage.py admin.py   request processors
    registration.py      REGISTER_BROKER / UNREGISTER_BROKER with the name servers
    context.py           BrokerContext: what the processors share; worker-thread store calls
    config_file.py       config/*.json persistence off the event loop
    data_version.py, jsonutil.py, stats.py   DataVersion, tolerant JSON readers, put/get rates
    server.py            Broker: lifecycle, dispatch table, periodic work; run_broker
"""

from rocketq.broker.config import BrokerConfig, load_broker_conf
from rocketq.broker.server import Broker, run_broker, serve_broker

__all__ = ["Broker", "BrokerConfig", "load_broker_conf", "run_broker", "serve_broker"]
