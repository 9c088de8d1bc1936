"""The RocketMQ name server: a pure route table and its asyncio server.

The bodies it reads and writes (routes, cluster info, registrations) are wire values shared with
brokers and clients: :mod:`rocketq.protocol.route`. Modules::

    routes.py   RouteTable: brokers, topics' queue data, clusters, liveness, KV config (pure)
    config.py   NamesrvConfig: the name server's settings
    server.py   NameServer (request processors on a RemotingServer)
    run.py      serve_namesrv / run_namesrv: a name server as a process
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocketq._lazy import lazy_exports

if TYPE_CHECKING:
    from rocketq.namesrv.config import NamesrvConfig
    from rocketq.namesrv.routes import (
        DEFAULT_BROKER_HEARTBEAT_TIMEOUT_MS,
        BrokerLiveInfo,
        RegisterBrokerResult,
        RemovedBroker,
        RouteTable,
    )
    from rocketq.namesrv.run import run_namesrv, serve_namesrv
    from rocketq.namesrv.server import NameServer

# Imported from their modules on first use (PEP 562).
_EXPORTS: dict[str, str] = {
    "DEFAULT_BROKER_HEARTBEAT_TIMEOUT_MS": "rocketq.namesrv.routes",
    "BrokerLiveInfo": "rocketq.namesrv.routes",
    "NameServer": "rocketq.namesrv.server",
    "NamesrvConfig": "rocketq.namesrv.config",
    "RegisterBrokerResult": "rocketq.namesrv.routes",
    "RemovedBroker": "rocketq.namesrv.routes",
    "RouteTable": "rocketq.namesrv.routes",
    "run_namesrv": "rocketq.namesrv.run",
    "serve_namesrv": "rocketq.namesrv.run",
}

__all__ = [
    "DEFAULT_BROKER_HEARTBEAT_TIMEOUT_MS",
    "BrokerLiveInfo",
    "NameServer",
    "NamesrvConfig",
    "RegisterBrokerResult",
    "RemovedBroker",
    "RouteTable",
    "run_namesrv",
    "serve_namesrv",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
