"""rocketq on Apache Spark (the optional extra ``rocketq[spark]``).

* :mod:`rocketq.spark.source` — the PySpark data source ``rocketq``: batch and streaming reads of
  topics (one Spark partition per message queue), batch and streaming writes through
  transactional half messages. ``pyspark_rocketq`` registers it automatically, so
  ``spark.read.format("rocketq")`` works once rocketq is installed.
* :mod:`rocketq.spark.jobs` — Spark jobs over store files.

Importing this package does not import pyspark; the modules that need it do.
"""

from __future__ import annotations

__all__: list[str] = []
