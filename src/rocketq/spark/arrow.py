"""The row schema of the ``rocketq`` source and messages → Arrow record batches.

Spark accepts a ``pyarrow.RecordBatch`` from a Python data source only when its schema equals
``to_arrow_schema(<Spark schema>, timezone="UTC")`` exactly, so the Arrow schema is derived from
the Spark schema by pyspark itself (:func:`arrow_schema`) and every column is built with that
field's type.

==============  =====================  =====================================================
column          Spark type             from the stored message
==============  =====================  =====================================================
topic           STRING                 topic
brokerName      STRING                 broker that stores the queue
queueId         INT                    queue id
queueOffset     BIGINT                 offset in the queue
msgId           STRING                 producer's unique id (``UNIQ_KEY``), else offset id
keys            STRING                 ``KEYS`` property (space-separated), null if none
tags            STRING                 ``TAGS`` property, null if none
body            BINARY                 body (inflated if it was compressed)
properties      MAP<STRING,STRING>     every property as stored
bornTimestamp   TIMESTAMP              producer's send time (µs, UTC)
storeTimestamp  TIMESTAMP              broker's store time (µs, UTC)
bornHost        STRING                 ``ip:port`` of the producer
storeHost       STRING                 ``ip:port`` of the broker
reconsumeTimes  INT                    redelivery count
==============  =====================  =====================================================
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from rocketq.message import MessageExt

SCHEMA_DDL = (
    "topic STRING, brokerName STRING, queueId INT, queueOffset BIGINT, msgId STRING, keys STRING, "
    "tags STRING, body BINARY, properties MAP<STRING, STRING>, bornTimestamp TIMESTAMP, "
    "storeTimestamp TIMESTAMP, bornHost STRING, storeHost STRING, reconsumeTimes INT"
)
COLUMNS = (
    "topic",
    "brokerName",
    "queueId",
    "queueOffset",
    "msgId",
    "keys",
    "tags",
    "body",
    "properties",
    "bornTimestamp",
    "storeTimestamp",
    "bornHost",
    "storeHost",
    "reconsumeTimes",
)


def spark_schema() -> Any:
    """The read schema as a ``pyspark.sql.types.StructType``."""
    from pyspark.sql.types import (  # noqa: PLC0415 - pyspark only where a Spark schema is needed
        BinaryType,
        IntegerType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    types = {
        "queueId": IntegerType(),
        "queueOffset": LongType(),
        "body": BinaryType(),
        "properties": MapType(StringType(), StringType()),
        "bornTimestamp": TimestampType(),
        "storeTimestamp": TimestampType(),
        "reconsumeTimes": IntegerType(),
    }
    return StructType([StructField(name, types.get(name, StringType()), True) for name in COLUMNS])


@cache
def arrow_schema() -> Any:
    """The ``pyarrow.Schema`` Spark expects for :func:`spark_schema`."""
    from pyspark.sql.pandas.types import to_arrow_schema  # noqa: PLC0415

    return to_arrow_schema(spark_schema(), timezone="UTC")


def to_record_batch(topic: str, broker: str, queue_id: int, messages: Sequence[MessageExt]) -> Any:
    """One ``pyarrow.RecordBatch`` with a row per message (all of one queue)."""
    import pyarrow as pa  # noqa: PLC0415

    schema = arrow_schema()
    n = len(messages)
    props = [m.properties for m in messages]
    columns: dict[str, list[Any]] = {
        "topic": [topic] * n,
        "brokerName": [broker] * n,
        "queueId": [queue_id] * n,
        "queueOffset": [m.queue_offset for m in messages],
        "msgId": [m.uniq_key or m.msg_id for m in messages],
        "keys": [p.get("KEYS") for p in props],
        "tags": [p.get("TAGS") for p in props],
        "body": [m.body for m in messages],
        "properties": [list(p.items()) for p in props],
        "bornTimestamp": [m.born_timestamp * 1000 for m in messages],
        "storeTimestamp": [m.store_timestamp * 1000 for m in messages],
        "bornHost": [m.born_host for m in messages],
        "storeHost": [m.store_host for m in messages],
        "reconsumeTimes": [m.reconsume_times for m in messages],
    }
    arrays = [pa.array(columns[field.name], type=field.type) for field in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


__all__ = ["COLUMNS", "SCHEMA_DDL", "arrow_schema", "spark_schema", "to_record_batch"]
