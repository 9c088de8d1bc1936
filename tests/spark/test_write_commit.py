"""The driver's commit of a write while the broker process is killed (SIGKILL) midway.

Rows are staged as half messages by the writer's own staging code, then committed by the
driver's commit while the test kills the broker once part of the rows are visible. With the
broker back on the same address within ``commitRetryMs`` every row is published exactly once;
without it the error names the broker and the queues in doubt, and the rows published are exactly
the ones it did not name (give or take the requests in flight at the kill).
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from pyspark.sql import Row

from _support.wait import wait_until
from rocketq.client import Admin
from rocketq.remoting import RemotingClient, RequestCode, create_request
from rocketq.spark import commit
from rocketq.spark.options import parse_write_options
from rocketq.spark.writer import BatchWriter, CommitIncomplete, CommitReport, _flatten, commit_staged

TOPIC = "CommitKill"
QUEUES = 4
ROWS = 800
IN_FLIGHT = 2  # END_TRANSACTION requests in flight: slow enough for the kill to land midway


def visible(broker: str) -> int:
    """Messages in the topic's queues, asked of the broker directly."""

    async def ask() -> int:
        client = RemotingClient()
        try:
            total = 0
            for q in range(QUEUES):
                request = create_request(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": q})
                response = await client.invoke(broker, request, 10)
                total += int(response.ext_fields.get("offset", 0)) if response.code == 0 else 0
            return total
        finally:
            await client.close()

    return asyncio.run(ask())


def stage(server: Any, **options: str) -> tuple[BatchWriter, Any]:
    with Admin(server.namesrv) as admin:
        admin.create_topic(TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
    opts = parse_write_options({"nameServer": server.namesrv, "topic": TOPIC, **options}, streaming=False)
    writer = BatchWriter(opts)
    rows = [Row(body=f"row-{i}".encode(), shardingKey=f"k{i % 7}") for i in range(ROWS)]
    return writer, writer.write(iter(rows))


def commit_while_killing(
    writer: BatchWriter, batch: Any, server: Any, restart: bool
) -> tuple[CommitReport | BaseException, int]:
    """Run the driver's commit in a thread; SIGKILL the broker once some rows are visible (and
    start it again if ``restart``). Returns the commit's outcome and the rows visible at the kill."""
    staged, oldest = _flatten([batch])
    outcome: list[CommitReport | BaseException] = []

    def run() -> None:
        try:
            outcome.append(commit_staged(writer.opts, writer.group, staged, oldest))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def started() -> int:
        count = visible(server.broker)
        return count if count >= 50 else 0

    seen = wait_until(started, "the commit to start (50 visible messages)", 60, 0)
    server.kill()
    assert thread.is_alive() and not outcome, "the commit finished before the kill"
    if restart:
        server.start()
    thread.join(120)
    assert outcome, "the commit did not return"
    return outcome[0], seen


def published_bodies(spark: Any, server: Any) -> Counter[bytes]:
    rows = spark.read.format("rocketq").option("nameServer", server.namesrv).option("topic", TOPIC)
    return Counter(bytes(r.body) for r in rows.load().select("body").collect())


def test_broker_killed_and_restarted_during_commit_publishes_every_row_once(
    spark: Any, serve_process: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(commit, "END_CONCURRENCY", IN_FLIGHT)
    server = serve_process()
    writer, batch = stage(server, commitRetryMs="90000")
    report, _ = commit_while_killing(writer, batch, server, restart=True)
    assert isinstance(report, CommitReport), report
    assert report.committed == ROWS
    assert report.rounds >= 2  # retried after the kill
    bodies = published_bodies(spark, server)
    assert set(bodies) == {f"row-{i}".encode() for i in range(ROWS)}
    assert max(bodies.values()) == 1, [b for b, n in bodies.items() if n > 1][:5]


def test_broker_killed_for_good_names_the_rows_in_doubt(
    spark: Any, serve_process: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(commit, "END_CONCURRENCY", IN_FLIGHT)
    server = serve_process()
    writer, batch = stage(server, commitRetryMs="1500")
    error, seen = commit_while_killing(writer, batch, server, restart=False)
    assert isinstance(error, CommitIncomplete), error
    text = str(error)
    assert f"broker broker-a ({server.broker})" in text
    assert "in doubt after retrying for 1500 ms" in text
    (doubt,) = error.in_doubt.values()
    per_queue = Counter(m.queue_id for m in doubt)
    for q, n in per_queue.items():
        assert f"{TOPIC}/broker-a/{q} ({n} rows)" in text
    assert seen <= ROWS - len(doubt) <= ROWS

    # back up later: the rows not in doubt are there; of those in doubt at most the requests in
    # flight at the kill were executed by the broker
    server.start()
    published = sum(published_bodies(spark, server).values())
    assert ROWS - len(doubt) <= published <= ROWS - len(doubt) + IN_FLIGHT
