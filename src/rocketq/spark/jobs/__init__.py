"""Spark jobs over the files of a stopped store (ours or Apache RocketMQ's).

``verify``, ``export``, ``stats`` and ``rebuild_index`` scan CommitLog segments in parallel, one
Spark task per segment or per proven byte range of a large segment; ``read_commitlog`` gives the
records as a DataFrame. The segment parser (:mod:`rocketq.spark.jobs.scan`) and the index writer
(:mod:`rocketq.spark.jobs.rebuild`) work without Spark. The command line is ``rocketq spark …``
(:mod:`rocketq.spark.jobs.cli`).

Importing this package does not import PySpark; the job functions are loaded on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .api import (
        ExportSummary,
        RebuildSummary,
        SegmentReport,
        VerifyReport,
        export,
        read_commitlog,
        rebuild_index,
        stats,
        verify,
    )

__all__ = [
    "ExportSummary",
    "RebuildSummary",
    "SegmentReport",
    "VerifyReport",
    "export",
    "read_commitlog",
    "rebuild_index",
    "stats",
    "verify",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module(".api", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
