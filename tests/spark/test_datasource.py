"""The ``rocketq`` Spark data source against a real ``rocketq serve`` process and local[2] Spark."""

from __future__ import annotations

import asyncio
import json
import pathlib
import re
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

import pytest
from pyspark.sql import Row
from pyspark.sql.functions import udf

from _support.wait import wait_until
from rocketq.client import Admin, Message, MessageQueue, Producer
from rocketq.remoting import RemotingClient, RequestCode, create_request
from rocketq.spark.options import parse_write_options
from rocketq.spark.writer import SinkMarkers, StreamWriter

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"


@pytest.fixture(scope="module")
def serve_endpoints(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A ``rocketq serve`` process on free ports; yields the name server and broker addresses."""
    data = tmp_path_factory.mktemp("rocketq-data")
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "rocketq.cli", "serve", "--data-dir", str(data)),
            *("--namesrv-port", "0", "--broker-port", "0"),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    found: dict[str, str] = {}
    ready = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            m = re.match(r"\s*(name server|broker)\s+(\S+:\d+)", line)
            if m:
                found[m.group(1)] = m.group(2)
                if len(found) == 2:
                    ready.set()
        ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert ready.wait(30) and len(found) == 2, "rocketq serve did not print its endpoints"
        yield found["name server"], found["broker"]
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
            reader.join(10)
            assert proc.stdout is not None
            proc.stdout.close()


@pytest.fixture(scope="module")
def serve(serve_endpoints: tuple[str, str]) -> str:
    return serve_endpoints[0]


def broker_max_offset(broker: str, topic: str, queue_id: int = 0) -> int:
    """GET_MAX_OFFSET straight to the broker (works for system topics without a route)."""

    async def ask() -> int:
        client = RemotingClient()
        try:
            fields = {"topic": topic, "queueId": queue_id}
            response = await client.invoke(broker, create_request(RequestCode.GET_MAX_OFFSET, fields), 10)
            return int(response.ext_fields.get("offset", 0)) if response.code == 0 else 0
        finally:
            await client.close()

    return asyncio.run(ask())


def wait_dispatched(broker: str) -> None:
    """Wait until the broker's dispatch has caught up with its CommitLog (dispatchBehindBytes 0
    in GET_BROKER_RUNTIME_INFO): an acknowledged message reaches its ConsumeQueue, and so the
    max offset, asynchronously, as in RocketMQ."""

    async def behind() -> int:
        client = RemotingClient()
        try:
            response = await client.invoke(broker, create_request(RequestCode.GET_BROKER_RUNTIME_INFO), 10)
            assert response.code == 0, response.remark
            return int(json.loads(response.body)["table"]["dispatchBehindBytes"])
        finally:
            await client.close()

    wait_until(lambda: asyncio.run(behind()) == 0, f"dispatch of {broker} to catch up", 30, 0.02)


def create_topic(namesrv: str, topic: str, queues: int, *, wait_queues: int | None = None) -> None:
    """Create (or resize) ``topic`` and wait until the route shows ``queues`` read queues."""
    with Admin(namesrv) as admin:
        admin.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues)

        def routed() -> bool:
            try:
                route = admin.topic_route(topic)
            except Exception:
                return False
            return bool(route.queue_datas) and route.queue_datas[0].read_queue_nums == (wait_queues or queues)

        wait_until(routed, f"the route of {topic} to show {wait_queues or queues} queues", 40, 0.05)


def max_offsets(namesrv: str, topic: str) -> dict[int, int]:
    with Admin(namesrv) as admin:
        return {q.queue_id: q.max_offset for q in admin.topic_status(topic)}


def reader(spark: Any, namesrv: str, topic: str) -> Any:
    return spark.read.format("rocketq").option("nameServer", namesrv).option("topic", topic)


def test_batch_read_equals_what_was_sent(spark: Any, serve: str) -> None:
    topic = "BatchRead"
    create_topic(serve, topic, 4)
    sent: dict[tuple[int, int], tuple[Message, Any]] = {}
    with Producer("PG-batch", namesrv_addr=serve) as producer:
        for i in range(120):
            msg = Message(
                topic,
                f"body-{i}".encode() + bytes([i % 256, 0, 255]),
                tags=("TagA", "TagB", "TagC")[i % 3],
                keys=[f"k{i}", f"order-{i % 7}"],
                properties={"seq": str(i), "ünï": "cödé"},
            )
            r = producer.send(msg, sharding_key=f"order-{i % 7}")
            sent[(r.message_queue.queue_id, r.queue_offset)] = (msg, r)
    assert len({q for q, _ in sent}) > 1

    rows = reader(spark, serve, topic).load().collect()
    assert len(rows) == len(sent)
    by_queue: dict[int, list[int]] = defaultdict(list)
    for row in rows:
        msg, r = sent[(row.queueId, row.queueOffset)]
        by_queue[row.queueId].append(row.queueOffset)
        assert row.topic == topic
        assert row.brokerName == r.message_queue.broker_name
        assert row.msgId == r.msg_id
        assert row.body == msg.body
        assert row.tags == msg.tags
        assert row.keys == " ".join(msg.keys)
        assert row.properties["seq"] == msg.properties["seq"]
        assert row.properties["ünï"] == "cödé"
        assert row.properties["UNIQ_KEY"] == r.msg_id
        assert row.reconsumeTimes == 0
        assert row.storeHost and row.bornHost
        # PySpark hands TIMESTAMP values over as naive local times (whatever the session zone)
        born = row.bornTimestamp.astimezone(UTC)
        stored = row.storeTimestamp.astimezone(UTC)
        assert abs((stored - born).total_seconds()) < 60
        assert abs((datetime.now(UTC) - stored).total_seconds()) < 600
    for queue_id, offsets in by_queue.items():
        assert offsets == sorted(offsets), f"queue {queue_id} out of order"
        assert offsets == list(range(len(offsets)))

    # JSON offsets (-2 earliest, -1 latest), a tag filter, minPartitions
    per_queue = max_offsets(serve, topic)
    q0 = min(per_queue)
    starting = json.dumps({topic: {"broker-a": {str(q0): 2}}})
    ending = json.dumps({topic: {"broker-a": {str(q0): 5}}})
    df = (
        reader(spark, serve, topic)
        .option("startingOffsets", starting)
        .option("endingOffsets", ending)
        .option("subExpression", "TagA || TagC")
        .option("minPartitions", "8")
        .load()
    )
    assert df.rdd.getNumPartitions() >= 8
    got = {(r.queueId, r.queueOffset) for r in df.select("queueId", "queueOffset").collect()}
    want = set()
    for (q, off), (msg, _) in sent.items():
        lo, hi = (2, 5) if q == q0 else (0, per_queue[q])
        if lo <= off < hi and msg.tags in ("TagA", "TagC"):
            want.add((q, off))
    assert got == want

    # filter pushdown narrows the scan to one queue and an offset range
    pushed = (
        reader(spark, serve, topic)
        .option("pushFilters", "true")
        .load()
        .where(f"queueId = {q0} AND queueOffset >= 3 AND queueOffset < 6 AND tags = 'TagB'")
    )
    got = {(r.queueId, r.queueOffset) for r in pushed.collect()}
    want = {(q, off) for (q, off), (m, _) in sent.items() if q == q0 and 3 <= off < 6 and m.tags == "TagB"}
    assert got == want
    assert pushed.rdd.getNumPartitions() == 1


def test_bad_options_fail_with_a_clear_error(spark: Any, serve: str) -> None:
    with pytest.raises(Exception, match="nameServer is required"):
        spark.read.format("rocketq").option("topic", "T").load().collect()
    with pytest.raises(Exception, match="endingOffsets cannot be 'earliest'"):
        reader(spark, serve, "T").option("endingOffsets", "earliest").load().collect()


def run_available_now(spark: Any, serve: str, topic: str, out: pathlib.Path, ck: pathlib.Path) -> list[int]:
    query = (
        spark.readStream.format("rocketq")
        .option("nameServer", serve)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "15")
        .option("consumerGroup", "CG-spark-stream")
        .load()
        .selectExpr("queueId", "queueOffset", "CAST(body AS STRING) AS body")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ck))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180), "availableNow query did not finish"
    assert query.exception() is None
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def test_stream_available_now_resumes_exactly_once_with_a_new_queue(
    spark: Any, serve: str, tmp_path: pathlib.Path
) -> None:
    topic = "StreamRead"
    create_topic(serve, topic, 4)
    out, ck = tmp_path / "out", tmp_path / "ck"
    bodies: set[str] = set()
    with Producer("PG-stream", namesrv_addr=serve) as producer:
        for q in range(4):
            for i in range(10):
                body = f"r1-{q}-{i}"
                producer.send(Message(topic, body.encode()), queue=MessageQueue(topic, "broker-a", q))
                bodies.add(body)

        batches = run_available_now(spark, serve, topic, out, ck)
        assert sum(batches) == 40
        assert max(batches) <= 15 and len(batches) >= 3  # admission control

        # between runs: more messages, and the topic grows a fifth queue
        create_topic(serve, topic, 5)
        for q in range(5):
            for i in range(3):
                body = f"r2-{q}-{i}"
                producer.send(Message(topic, body.encode()), queue=MessageQueue(topic, "broker-a", q))
                bodies.add(body)

    batches = run_available_now(spark, serve, topic, out, ck)
    assert sum(batches) == 15
    rows = spark.read.parquet(str(out)).collect()
    assert len(rows) == len(bodies) == 55
    assert {r.body for r in rows} == bodies
    assert {(r.queueId, r.queueOffset) for r in rows if r.queueId == 4} == {(4, 0), (4, 1), (4, 2)}
    with Admin(serve) as admin:
        progress = admin.consumer_progress("CG-spark-stream", topic)
    assert progress.total_consumer_offset >= 40  # run 1's offsets committed as the group's


def test_write_then_read_round_trip_keeps_sharding_key_order(
    spark: Any, serve_endpoints: tuple[str, str]
) -> None:
    serve, broker = serve_endpoints
    topic = "WriteRound"
    create_topic(serve, topic, 4)
    rows = [
        (f"key-{i % 5}", i, f"payload-{i}", "TagW" if i % 2 else None, f"id-{i} other") for i in range(200)
    ]
    df = (
        spark.createDataFrame(rows, "shardingKey STRING, seq INT, text STRING, tags STRING, keys STRING")
        .coalesce(1)
        .selectExpr(
            "shardingKey",
            "CAST(text AS BINARY) AS body",
            "tags",
            "keys",
            "map('seq', CAST(seq AS STRING)) AS properties",
        )
    )
    df.write.format("rocketq").option("nameServer", serve).option("topic", topic).mode("append").save()
    wait_dispatched(broker)
    back = reader(spark, serve, topic).load().orderBy("queueId", "queueOffset").collect()
    assert len(back) == 200
    queues_of_key: dict[str, set[int]] = defaultdict(set)
    seqs_of_key: dict[str, list[int]] = defaultdict(list)
    for r in back:
        seq = int(r.properties["seq"])
        key = f"key-{seq % 5}"
        queues_of_key[key].add(r.queueId)
        seqs_of_key[key].append(seq)
        assert r.body == f"payload-{seq}".encode()
        assert r.tags == ("TagW" if seq % 2 else None)
        assert r.keys == f"id-{seq} other"
    assert all(len(q) == 1 for q in queues_of_key.values())
    assert all(s == sorted(s) for s in seqs_of_key.values())
    assert sum(len(s) for s in seqs_of_key.values()) == 200


def test_failed_write_task_publishes_nothing(spark: Any, serve_endpoints: tuple[str, str]) -> None:
    serve, broker = serve_endpoints
    topic = "WriteFail"
    create_topic(serve, topic, 4)
    halves_before = broker_max_offset(broker, HALF_TOPIC)
    ops_before = broker_max_offset(broker, OP_TOPIC)
    half_topic = HALF_TOPIC

    @udf(returnType="binary", useArrow=False)
    def body_or_fail(i: int) -> bytes:
        if i == 1900:
            # Spark evaluates the UDF ahead of the writer; fail only once the other task has
            # staged rows (polled with a deadline), so that there is something to roll back
            async def halves() -> int:
                client = RemotingClient()
                try:
                    ask = create_request(RequestCode.GET_MAX_OFFSET, {"topic": half_topic, "queueId": 0})
                    response = await client.invoke(broker, ask, 10)
                    return int(response.ext_fields.get("offset", 0)) if response.code == 0 else 0
                finally:
                    await client.close()

            deadline = time.monotonic() + 60
            while asyncio.run(halves()) < halves_before + 150 and time.monotonic() < deadline:
                threading.Event().wait(0.05)
            raise ValueError("row 1900 is poisoned")
        return f"row-{i}".encode()

    df = spark.range(0, 2000, 1, 2).select(body_or_fail("id").alias("body"))
    with pytest.raises(Exception, match="row 1900 is poisoned"):
        df.write.format("rocketq").option("nameServer", serve).option("topic", topic).mode("append").save()
    assert sum(max_offsets(serve, topic).values()) == 0
    staged = broker_max_offset(broker, HALF_TOPIC) - halves_before
    rolled_back = broker_max_offset(broker, OP_TOPIC) - ops_before
    # rows were staged before the poisoned one, and ended ROLLBACK by the driver at once (the
    # half queue may also hold copies the broker's transaction check made of older halves)
    assert rolled_back >= 100, (staged, rolled_back)
    assert staged >= rolled_back, (staged, rolled_back)


def test_stream_sink_publishes_a_replayed_batch_once(
    serve_endpoints: tuple[str, str], tmp_path: pathlib.Path
) -> None:
    serve, broker = serve_endpoints
    topic = "SinkOnce"
    create_topic(serve, topic, 2)
    opts = parse_write_options(
        {"nameServer": serve, "topic": topic, "checkpointLocation": str(tmp_path)}, streaming=True
    )
    sink = StreamWriter(opts)
    rows = [Row(body=f"m{i}".encode(), shardingKey=f"k{i % 3}") for i in range(10)]

    def published() -> int:
        wait_dispatched(broker)
        return sum(max_offsets(serve, topic).values())

    sink.commit([sink.write(iter(rows))], 7)
    assert published() == 10
    # a restarted query replays batch 7: its rows are staged again but not published twice
    sink.commit([sink.write(iter(rows))], 7)
    assert published() == 10
    # the driver died while committing batch 8: the replay finishes the first attempt only
    first = sink.write(iter(rows[:4]))
    state = {"state": "committing", "group": sink.group, "messages": [asdict(m) for m in first.messages]}
    SinkMarkers(str(tmp_path)).write(8, state)
    sink.commit([sink.write(iter(rows[:4]))], 8)
    assert published() == 14
    assert SinkMarkers(str(tmp_path)).read(8)["state"] == "committed"
    # an aborted batch publishes nothing
    sink.abort([sink.write(iter(rows))], 9)
    assert published() == 14


def test_stream_to_stream_copy_through_the_rocketq_sink(
    spark: Any, serve: str, tmp_path: pathlib.Path
) -> None:
    source, target = "SinkSource", "SinkTarget"
    create_topic(serve, source, 2)
    create_topic(serve, target, 2)
    with Producer("PG-sink-e2e", namesrv_addr=serve) as producer:
        for i in range(30):
            producer.send(Message(source, f"s{i}".encode(), tags="Copy"), sharding_key=f"k{i % 4}")

    def copy() -> None:
        query = (
            spark.readStream.format("rocketq")
            .option("nameServer", serve)
            .option("topic", source)
            .option("startingOffsets", "earliest")
            .load()
            .selectExpr("body", "tags", "CAST(queueId AS STRING) AS shardingKey")
            .writeStream.format("rocketq")
            .option("nameServer", serve)
            .option("topic", target)
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(180)
        assert query.exception() is None

    copy()
    copy()  # a second run over the same checkpoint has nothing new and publishes nothing
    rows = reader(spark, serve, target).load().collect()
    assert sorted(r.body for r in rows) == sorted(f"s{i}".encode() for i in range(30))
    assert {r.tags for r in rows} == {"Copy"}
