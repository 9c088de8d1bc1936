"""The name server's Prometheus metrics (RocketMQ 5's name server exports none; the names
follow the broker's, docs/metrics.md).

Counted: ``rocketmq_rpc_latency`` by request and response code (its ``_count`` is the number of
requests per code), by wrapping the processor table once when metrics are on. Read at scrape
time from the route table (on the loop, which owns it): the live brokers per cluster, the
topics, the clusters. Labels: ``node_type="nameserver"`` and ``node_id`` = the listening address.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from rocketq.metrics.exposition import GAUGE, Family, Labels
from rocketq.namesrv.routes import RouteTable
from rocketq.remoting.rpc_metrics import RpcLatency


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
