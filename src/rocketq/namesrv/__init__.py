"""The RocketMQ name server: a pure route table and its asyncio server.

Modules::

    bodies.py   the JSON (and compressed) bodies of spec/remoting.md §3.1–§3.4, as values (pure)
    routes.py   RouteTable: brokers, topics' queue data, clusters, liveness, KV config (pure)
    server.py   NamesrvConfig, NameServer (request processors on a RemotingServer), run_namesrv
"""

from __future__ import annotations

from rocketq.namesrv.bodies import (
    MASTER_ID,
    NAMESPACE_ORDER_TOPIC_CONFIG,
    PERM_INHERIT,
    PERM_PRIORITY,
    PERM_READ,
    PERM_WRITE,
    BrokerData,
    ClusterInfo,
    DataVersion,
    KVTable,
    QueueData,
    RegisterBrokerBody,
    TopicConfig,
    TopicList,
    TopicRouteData,
)
from rocketq.namesrv.routes import (
    DEFAULT_BROKER_HEARTBEAT_TIMEOUT_MS,
    BrokerLiveInfo,
    RegisterBrokerResult,
    RemovedBroker,
    RouteTable,
)
from rocketq.namesrv.server import NameServer, NamesrvConfig, run_namesrv, serve_namesrv

__all__ = [
    "DEFAULT_BROKER_HEARTBEAT_TIMEOUT_MS",
    "MASTER_ID",
    "NAMESPACE_ORDER_TOPIC_CONFIG",
    "PERM_INHERIT",
    "PERM_PRIORITY",
    "PERM_READ",
    "PERM_WRITE",
    "BrokerData",
    "BrokerLiveInfo",
    "ClusterInfo",
    "DataVersion",
    "KVTable",
    "NameServer",
    "NamesrvConfig",
    "QueueData",
    "RegisterBrokerBody",
    "RegisterBrokerResult",
    "RemovedBroker",
    "RouteTable",
    "TopicConfig",
    "TopicList",
    "TopicRouteData",
    "run_namesrv",
    "serve_namesrv",
]
