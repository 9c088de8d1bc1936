"""The PySpark data source ``rocketq``: topics as DataFrames, DataFrames into topics.

::

    spark.read.format("rocketq").option("nameServer", "127.0.0.1:9876").option("topic", "T").load()
    spark.readStream.format("rocketq").option(...).load()
    df.write.format("rocketq").option("nameServer", ...).option("topic", "T").mode("append").save()
    df.writeStream.format("rocketq").option(...).option("checkpointLocation", dir).start()

Roles: :mod:`rocketq.spark.batch` (batch reader), :mod:`rocketq.spark.stream` (stream reader),
:mod:`rocketq.spark.writer` (batch and stream writers); options are parsed once by
:mod:`rocketq.spark.options` and the row schema is :data:`rocketq.spark.arrow.SCHEMA_DDL`.
The class is importable (never defined in ``__main__``), so Spark's workers unpickle it by
reference. ``pyspark_rocketq.DefaultSource`` is this class, which Spark registers on its own.

Batch writes take ``mode("append")``: Spark hands a Python data source only append and
overwrite (its default mode, ErrorIfExists, fails in Spark before the source is asked), and a
topic cannot be overwritten, so ``overwrite`` is refused here with an error that says so.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader

from rocketq.errors import ConfigError
from rocketq.spark.arrow import SCHEMA_DDL
from rocketq.spark.batch import make_reader
from rocketq.spark.options import parse_read_options, parse_write_options
from rocketq.spark.stream import StreamReader
from rocketq.spark.writer import BatchWriter, StreamWriter, check_write_schema


def _field_types(schema: Any) -> dict[str, str]:
    return {f.name: f.dataType.simpleString() for f in schema.fields}


class RocketqDataSource(DataSource):
    """``format("rocketq")``; see ``docs/spark.md`` for options and columns."""

    @classmethod
    def name(cls) -> str:
        return "rocketq"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: Any) -> DataSourceReader:
        return make_reader(parse_read_options(self.options, streaming=False))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return StreamReader(parse_read_options(self.options, streaming=True))

    def writer(self, schema: Any, overwrite: bool) -> BatchWriter:
        if overwrite:
            raise ConfigError(
                'a rocketq topic is append-only and cannot be overwritten: write with .mode("append")'
            )
        opts = parse_write_options(self.options, streaming=False)
        check_write_schema(_field_types(schema), opts.topic)
        return BatchWriter(opts)

    def streamWriter(self, schema: Any, overwrite: bool) -> StreamWriter:
        opts = parse_write_options(self.options, streaming=True)
        check_write_schema(_field_types(schema), opts.topic)
        return StreamWriter(opts)


__all__ = ["RocketqDataSource"]
