"""The ``rocketq_cluster`` pytest fixture: a started :class:`InProcessCluster` per test.

Use it from a ``conftest.py``, either as a plugin (``pytest_plugins =
["rocketq.testing.pytest_plugin"]``) or by importing the fixture (``from rocketq.testing import
rocketq_cluster``). The fixture is function-scoped and never autouse: a test gets a cluster only
when it asks for one by name. Nothing heavier than pytest is imported until a test asks.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from rocketq.testing.cluster import InProcessCluster


@pytest.fixture
def rocketq_cluster() -> Iterator[InProcessCluster]:
    """A name server and one broker (``broker-a``) running in this process for one test; the
    data directory is removed afterwards. For other settings, write a fixture of your own that
    starts :class:`~rocketq.testing.InProcessCluster` with them."""
    from rocketq.testing.cluster import InProcessCluster  # noqa: PLC0415 - only when used

    with InProcessCluster() as cluster:
        yield cluster


__all__ = ["rocketq_cluster"]
