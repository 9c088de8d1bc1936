"""The name server's Prometheus metrics (RocketMQ 5's name server exports none; the names
follow the broker's, docs/metrics.md).

Counted: ``rocketmq_rpc_latency`` by request and response code (its ``_count`` is the number of
requests per code), by wrapping the processor table once when metrics are on. Read at scrape
time from the route table (on the loop, which owns it): the live brokers per cluster, the
topics, the clusters. Labels: ``node_type="nameserver"`` and ``node_id`` = the listening address.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from rocketq.errors import ConfigError
from rocketq.metrics.exposition import GAUGE, Family, Labels
from rocketq.namesrv.config import NamesrvConfig
from rocketq.namesrv.routes import RouteTable
from rocketq.remoting.rpc_metrics import RpcLatency

if TYPE_CHECKING:
    from rocketq.metrics.http import MetricsServer
    from rocketq.remoting.server import RemotingServer


class NamesrvMetrics:
    def __init__(self, node_id: str) -> None:
        self.base: Labels = (("node_type", "nameserver"), ("node_id", node_id))
        self.rpc = RpcLatency()

    def instrument(self, processors: dict[int, Any]) -> None:
        self.rpc.instrument(processors)

    def families(self, routes: RouteTable) -> list[Family]:
        base = self.base
        brokers = Family("rocketq_namesrv_brokers", GAUGE, "Live brokers registered, per cluster (count).")
        per_cluster = Counter(info.cluster for info in routes.live_brokers())
        for cluster in sorted(per_cluster):
            brokers.add((*base, ("cluster", cluster)), per_cluster[cluster])
        return [
            self.rpc.family(base),
            brokers,
            Family("rocketq_namesrv_topics", GAUGE, "Topics with routes (count).").add(
                base, len(routes.all_topics())
            ),
            Family("rocketq_namesrv_clusters", GAUGE, "Clusters with registered brokers (count).").add(
                base, len(routes.cluster_info().cluster_addr_table)
            ),
        ]


__all__ = ["NamesrvMetrics"]


async def serve_metrics(
    config: NamesrvConfig, families: Callable[[], Awaitable[list[Family]]], remoting: RemotingServer
) -> MetricsServer:
    """Serve ``/metrics`` on the configured host and port; a port that cannot be bound closes
    ``remoting`` (the name server's port) and raises ConfigError naming the setting."""
    from rocketq.metrics.exposition import render  # noqa: PLC0415
    from rocketq.metrics.http import MetricsServer  # noqa: PLC0415

    async def collect() -> str:
        return render(await families())

    host = config.metrics_prom_exporter_host or config.bind_address
    server = MetricsServer(host, config.metrics_prom_exporter_port, collect)
    try:
        await server.start()
    except OSError as exc:
        await remoting.close()
        raise ConfigError(
            f"cannot serve metrics on {host}:{config.metrics_prom_exporter_port}: {exc.strerror or exc}; "
            "choose another metricsPromExporterPort (--metrics-port)"
        ) from None
    return server
