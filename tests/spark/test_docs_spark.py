"""Every ``python`` block of ``docs/spark.md`` runs as written, in document order and in one
namespace (later blocks use the ``spark`` session and DataFrames of earlier ones, as a reader's
session would), in a Python process of its own whose working directory is a temporary one: the
blocks' relative paths (``out/``, ``ck/``) are resolved by Spark's JVM, so that JVM must start
there, and the first block's ``getOrCreate()`` starts it. ``PYSPARK_SUBMIT_ARGS`` gives it the
tests' settings (local[2], no UI) without touching the code. The server is a ``rocketq serve``
process; the topics the page reads exist with messages, as they would for a reader who followed
docs/client.md; the only rewrite is the name server address (``tests/_support/doc_blocks.py``),
and blocks marked ``<!-- not-run: reason -->`` are skipped."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pyarrow.parquet as pq
import pytest

from _support.doc_blocks import python_blocks, with_endpoint
from _support.procs import child_env
from _support.spark_log import LOG4J2
from rocketq.client import Admin, Message, MessageQueue, Producer
from rocketq.client.admin import wait_for_route

BLOCKS = python_blocks("spark.md")
RUN_DEADLINE_S = 420


def _seed(namesrv: str) -> None:
    with Admin(namesrv) as admin:
        for topic in ("TopicTest", "Orders", "Payments"):
            admin.create_topic(topic, 2, 2, cluster="DefaultCluster")
            wait_for_route(admin, topic)
    with Producer("DocSeed", namesrv_addr=namesrv) as p:
        for topic in ("TopicTest", "Orders", "Payments"):
            for i in range(130):
                tag = ("TagA", "TagB", "TagC")[i % 3]
                msg = Message(topic, f"{topic} {i}".encode(), tags=tag)
                p.send(msg, queue=MessageQueue(topic, "broker-a", i % 2))


def _script(namesrv: str) -> str:
    """One program that runs the page's blocks in order and names the block that failed."""
    lines = ["import sys", "namespace = {'__name__': '__main__'}"]
    for block in BLOCKS:
        if block.not_run is not None:
            continue
        code = with_endpoint(block.code, namesrv)
        lines += [
            f"print('running {block.name}', file=sys.stderr, flush=True)",
            f"exec(compile({code!r}, {block.name!r}, 'exec'), namespace)",
        ]
    lines.append("print('all blocks ran', file=sys.stderr, flush=True)")
    return "\n".join(lines) + "\n"


def test_every_block_of_spark_md_runs(serve_process: Callable[..., Any], tmp_path: pathlib.Path) -> None:
    assert sum(b.not_run is None for b in BLOCKS) >= 4
    server = serve_process()
    _seed(server.namesrv)
    work = tmp_path / "cwd"
    work.mkdir()
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "log4j2.properties").write_text(LOG4J2, encoding="utf-8")
    (work / "run_blocks.py").write_text(_script(server.namesrv), encoding="utf-8")
    env = child_env()
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env["PYSPARK_SUBMIT_ARGS"] = (
        "--master local[2] --conf spark.ui.enabled=false --conf spark.ui.showConsoleProgress=false "
        "--conf spark.sql.shuffle.partitions=2 --driver-java-options -XX:TieredStopAtLevel=1 pyspark-shell"
    )
    env["SPARK_CONF_DIR"] = str(tmp_path / "conf")
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    r = subprocess.run(
        [sys.executable, "run_blocks.py"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_DEADLINE_S,
        check=False,
    )
    assert r.returncode == 0 and "all blocks ran" in r.stderr, r.stderr[-6000:]
    # what the blocks did: the parquet export holds Orders, the writes reached Orders and its copy
    assert pq.read_table(work / "out").num_rows == 130
    with Admin(server.namesrv) as admin:
        assert sum(q.max_offset for q in admin.topic_status("Orders")) == 132
        wait_for_route(admin, "OrdersCopy")  # created by the copy's first send, registered after
        assert sum(q.max_offset for q in admin.topic_status("OrdersCopy")) == 132
        written = admin.consume_message("Orders", 0, 65, 10) + admin.consume_message("Orders", 1, 65, 10)
    # the two rows of the batch write, keyed by order id, with the status as tag
    rows = sorted((json.loads(m.body)["order_id"], m.tags) for m in written)
    assert rows == [(42, "Created"), (43, "Created")]


def _spark_error(fn: Callable[[], object]) -> str:
    with pytest.raises(Exception) as exc:
        fn()
    return str(exc.value)


def test_batch_write_modes(spark: Any, serve_process: Callable[..., Any]) -> None:
    server = serve_process()
    df = spark.createDataFrame([("hello",)], ["body"])

    def writer() -> Any:
        return df.write.format("rocketq").option("nameServer", server.namesrv).option("topic", "ModeT")

    # Spark's default mode is refused by Spark itself for every Python data source (docs/spark.md)
    assert "UNSUPPORTED_DATA_SOURCE_SAVE_MODE" in _spark_error(lambda: writer().save())
    message = _spark_error(lambda: writer().mode("overwrite").save())
    assert 'a rocketq topic is append-only and cannot be overwritten: write with .mode("append")' in message
    writer().mode("append").save()
    with Admin(server.namesrv) as admin:
        wait_for_route(admin, "ModeT")
        assert sum(q.max_offset for q in admin.topic_status("ModeT")) == 1
