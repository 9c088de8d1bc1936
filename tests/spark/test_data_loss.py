"""``failOnDataLoss`` end to end: the broker's retention deletes messages a query still needs.

The broker runs with tiny CommitLog segments and ConsumeQueue files, ``fileReservedTime=0`` and
every hour in ``deleteWhen``, so its retention service deletes every segment but the last one on
each of its runs (every 10 s) and then moves the queues' min offsets past the deleted messages —
the same path as expired files at 4 a.m. in production.
"""

from __future__ import annotations

import contextlib
import json
import pathlib
from collections.abc import Callable
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException

from _support.wait import wait_until
from rocketq.client import Admin, Message, MessageQueue, Producer
from rocketq.message import decode_offset_msg_id

TOPIC = "LossyTopic"
SEGMENT_BYTES = 16 * 1024
BODY = b"x" * 900

RETENTION_CONF = {
    "mappedFileSizeCommitLog": SEGMENT_BYTES,
    "mappedFileSizeConsumeQueue": 20 * 8,
    "fileReservedTime": 0,
    "deleteWhen": ";".join(f"{h:02d}" for h in range(24)),
}


def min_max(namesrv: str) -> tuple[int, int]:
    with Admin(namesrv) as admin:
        (status,) = [q for q in admin.topic_status(TOPIC) if q.queue_id == 0]
        return status.min_offset, status.max_offset


def send(producer: Any, first: int, count: int) -> dict[int, int]:
    """Send ``count`` messages to queue 0; queue offset → commit-log offset."""
    where: dict[int, int] = {}
    for i in range(first, first + count):
        r = producer.send(Message(TOPIC, BODY + str(i).encode()), queue=MessageQueue(TOPIC, "broker-a", 0))
        where[r.queue_offset] = decode_offset_msg_id(r.offset_msg_id).offset
    return where


def wait_for_retention(server: Any, phys: dict[int, int], needed: int) -> int:
    """Wait until retention deleted every segment before the one being written (the next one
    is pre-allocated, so that one is never the last file) and the queue's min offset is the
    first message in it; returns that min offset (> ``needed``)."""
    current = max(phys.values()) // SEGMENT_BYTES * SEGMENT_BYTES
    expected = min(q for q, p in phys.items() if p >= current)
    wait_until(
        lambda: min_max(server.namesrv)[0] == expected,
        f"retention to move the min offset to {expected}",
        90,
        0.2,
    )
    assert expected > needed
    return expected


def stream(spark: Any, server: Any, out: pathlib.Path, ck: pathlib.Path, fail_on_loss: bool) -> Any:
    query = (
        spark.readStream.format("rocketq")
        .option("nameServer", server.namesrv)
        .option("topic", TOPIC)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", str(fail_on_loss).lower())
        .load()
        .selectExpr("queueOffset", "CAST(body AS STRING) AS body")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ck))
        .trigger(availableNow=True)
        .start()
    )
    with contextlib.suppress(StreamingQueryException):  # checked by the caller
        query.awaitTermination(180)
    assert not query.isActive, "availableNow query did not finish"
    return query


def test_retention_past_the_checkpoint_fails_or_skips(
    spark: Any, serve_process: Callable[..., Any], tmp_path: pathlib.Path
) -> None:
    server = serve_process(RETENTION_CONF)
    with Admin(server.namesrv) as admin:
        admin.create_topic(TOPIC, read_queue_nums=1, write_queue_nums=1)
    out, ck = tmp_path / "out", tmp_path / "ck"
    with Producer("PG-loss", namesrv_addr=server.namesrv) as producer:
        phys = send(producer, 0, 8)  # fits in the first segment: nothing deleted yet
        first = stream(spark, server, out, ck, fail_on_loss=True)
        assert first.exception() is None
        assert sorted(r.queueOffset for r in spark.read.parquet(str(out)).collect()) == list(range(8))

        # ~100 KB more: six segments roll; retention deletes all but the last
        phys |= send(producer, 8, 110)
    low = wait_for_retention(server, phys, needed=8)
    assert min_max(server.namesrv) == (low, 118)

    failed = stream(spark, server, out, ck, fail_on_loss=True)
    error = str(failed.exception())
    lost = f"offsets [8, {low})"
    assert f"topic {TOPIC}, broker broker-a, queue 0" in error and lost in error, error
    assert "failOnDataLoss=false" in error
    assert len(spark.read.parquet(str(out)).collect()) == 8  # the failed batch wrote nothing

    skipped = stream(spark, server, out, ck, fail_on_loss=False)
    assert skipped.exception() is None
    rows = spark.read.parquet(str(out)).collect()
    offsets = sorted(r.queueOffset for r in rows)
    assert offsets == [*range(8), *range(low, 118)]  # every message still there, exactly once
    assert all(r.body == (BODY + str(r.queueOffset).encode()).decode() for r in rows)

    # a batch read with explicit starting offsets below the min offset
    start = json.dumps({TOPIC: {"broker-a": {"0": 3}}})
    batch = (
        spark.read.format("rocketq")
        .option("nameServer", server.namesrv)
        .option("topic", TOPIC)
        .option("startingOffsets", start)
    )
    with pytest.raises(Exception, match=rf"broker broker-a, queue 0 .*offsets \[3, {low}\)"):
        batch.load().collect()
    kept = batch.option("failOnDataLoss", "false").load().select("queueOffset").collect()
    assert sorted(r.queueOffset for r in kept) == list(range(low, 118))
