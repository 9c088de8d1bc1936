"""Batch read rate of the ``rocketq`` Spark data source against the client's own read rate.

    python bench/spark.py [--count 200000] [--body-bytes 128] [--runs 2]

1. Starts ``rocketq serve`` on free ports in a temporary directory, creates a topic with four
   queues and loads ``--count`` messages of ``--body-bytes`` (batches of 256 through
   ``Producer.send_batch``).
2. Client: one ``LitePullConsumer`` (assign mode, all four queues, from the beginning) polls
   until it has every message — the plain client read rate in one process.
3. Data source without Spark: the four input partitions read one after another in this
   process by ``rocketq.spark.batch.read_partition`` (pipelined pulls + Arrow batches).
4. Spark: ``spark.read.format("rocketq")...load().write.format("noop")`` on ``local[2]``; best
   of ``--runs`` after one warm-up run (Python worker start-up).

Prints rows/s for each.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

from pyspark.sql import SparkSession  # noqa: E402

from rocketq.client import Admin, LitePullConsumer, Message, Producer  # noqa: E402
from rocketq.spark.batch import make_partitions, plan_ranges, read_partition  # noqa: E402
from rocketq.spark.options import parse_read_options  # noqa: E402

TOPIC = "BenchSpark"


def start_serve(data_dir: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "rocketq.cli", "serve", "--data-dir", data_dir),
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

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(60) or "name server" not in found:
        proc.kill()
        raise SystemExit("rocketq serve did not start")
    return proc, found["name server"]


def load(namesrv: str, count: int, body_bytes: int) -> None:
    with Admin(namesrv) as admin:
        admin.create_topic(TOPIC, read_queue_nums=4, write_queue_nums=4)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if admin.topic_route(TOPIC).queue_datas:
                    break
            except Exception:
                pass
            threading.Event().wait(0.1)
    body = b"x" * body_bytes
    with Producer("PG-bench-spark", namesrv_addr=namesrv) as producer:
        sent = 0
        while sent < count:
            n = min(256, count - sent)
            producer.send_batch([Message(TOPIC, body, tags="T") for _ in range(n)])
            sent += n


def client_rate(namesrv: str, count: int) -> float:
    with LitePullConsumer("CG-bench-spark", namesrv_addr=namesrv, auto_commit=False) as consumer:
        queues = consumer.fetch_message_queues(TOPIC)
        consumer.assign(queues)
        for mq in queues:
            consumer.seek_to_begin(mq)
        got = 0
        t0 = time.perf_counter()
        while got < count:
            got += len(consumer.poll(timeout_ms=5000))
        return got / (time.perf_counter() - t0)


def source_rate_without_spark(namesrv: str, count: int) -> float:
    opts = parse_read_options({"nameServer": namesrv, "topic": TOPIC}, streaming=False)
    t0 = time.perf_counter()
    rows = 0
    for part in make_partitions(opts, plan_ranges(opts)):
        rows += sum(batch.num_rows for batch in read_partition(part))
    assert rows == count, (rows, count)
    return rows / (time.perf_counter() - t0)


def spark_rate(namesrv: str, count: int, runs: int) -> float:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    df = spark.read.format("rocketq").option("nameServer", namesrv).option("topic", TOPIC).load()
    assert df.count() == count
    best = 0.0
    for _ in range(runs):
        t0 = time.perf_counter()
        df.write.format("noop").mode("overwrite").save()
        best = max(best, count / (time.perf_counter() - t0))
    spark.stop()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--body-bytes", type=int, default=128)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rocketq-bench-spark-") as tmp:
        proc, namesrv = start_serve(os.path.join(tmp, "data"))
        try:
            t0 = time.perf_counter()
            load(namesrv, args.count, args.body_bytes)
            print(f"loaded {args.count} messages of {args.body_bytes} B in {time.perf_counter() - t0:.1f} s")
            rows = [
                ("client LitePullConsumer.poll, 1 process", client_rate(namesrv, args.count)),
                (
                    "data source read_partition, 1 process, no Spark",
                    source_rate_without_spark(namesrv, args.count),
                ),
                (
                    "spark.read.format('rocketq') -> noop, local[2]",
                    spark_rate(namesrv, args.count, args.runs),
                ),
            ]
        finally:
            proc.terminate()
            proc.wait(30)
    print(f"{'path':<52} {'rows/s':>10}")
    for name, rate in rows:
        print(f"{name:<52} {rate:>10,.0f}")


if __name__ == "__main__":
    main()
