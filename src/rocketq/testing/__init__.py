"""Public helpers for testing applications against a real rocketq, inside the test process.

Modules::

    cluster.py        InProcessCluster: a name server and brokers on a background event loop
    fault_proxy.py    FaultProxy: a TCP proxy that pauses, cuts, refuses and delays connections
    pytest_plugin.py  the ``rocketq_cluster`` fixture (needs pytest; loaded only when asked for)

``from rocketq.testing import rocketq_cluster`` imports the fixture lazily, so this package
imports without pytest installed. See docs/testing.md.
"""

from __future__ import annotations

from typing import Any

from rocketq.testing.cluster import ClusterStartError, InProcessCluster
from rocketq.testing.fault_proxy import FaultProxy


def __getattr__(name: str) -> Any:
    if name == "rocketq_cluster":
        from rocketq.testing.pytest_plugin import rocketq_cluster  # noqa: PLC0415 - needs pytest

        return rocketq_cluster
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ClusterStartError", "FaultProxy", "InProcessCluster", "rocketq_cluster"]
