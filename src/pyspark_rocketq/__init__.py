"""Registers the ``rocketq`` Spark data source automatically.

PySpark imports every top-level ``pyspark_*`` module it finds and registers its ``DefaultSource``,
so with rocketq installed ``spark.read.format("rocketq")`` works without
``spark.dataSource.register(...)``.
"""

from __future__ import annotations

from rocketq.spark.source import RocketqDataSource as DefaultSource

__all__ = ["DefaultSource"]
