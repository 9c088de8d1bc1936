"""The RocketMQ name server: a pure route table and its asyncio server.

The bodies it reads and writes (routes, cluster info, registrations) are wire values shared with
brokers and clients: :mod:`rocketq.protocol.route`. Modules::

    routes.py   RouteTable: brokers, topics' queue data, clusters, liveness, KV config (pure)
    server.py   NamesrvConfig, NameServer (request processors on a RemotingServer), run_namesrv
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rocketq.namesrv.routes import (
        DEFAULT_BROKER_HEARTBEAT_TIMEOUT_MS,
        BrokerLiveInfo,
        RegisterBrokerResult,
        RemovedBroker,
        RouteTable,
    )
    from rocketq.namesrv.server import NameServer, NamesrvConfig, run_namesrv, serve_namesrv

# Imported from their modules on first use (PEP 562).
_EXPORTS: dict[str, str] = {
    "DEFAULT_BROKER_HEARTBEAT_TIMEOUT_MS": "rocketq.namesrv.routes",
    "BrokerLiveInfo": "rocketq.namesrv.routes",
    "NameServer": "rocketq.namesrv.server",
    "NamesrvConfig": "rocketq.namesrv.server",
    "RegisterBrokerResult": "rocketq.namesrv.routes",
    "RemovedBroker": "rocketq.namesrv.routes",
    "RouteTable": "rocketq.namesrv.routes",
    "run_namesrv": "rocketq.namesrv.server",
    "serve_namesrv": "rocketq.namesrv.server",
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


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
