"""Segment scan rate: the Spark job against a single-process scan of the same CommitLog files.

    python bench/spark_scan.py [--size-mib 256] [--segment-mib 64] [--body-bytes 1024] [--runs 2]

1. Writes a store of about ``--size-mib`` of CommitLog through ``MessageStore`` (three topics,
   four queues, tags, keys, a unique key per message) into a temporary directory.
2. Raw rate: one process parses every segment with the jobs' column parser into the export's
   Arrow columns (``rocketq.spark.jobs.scan``: walk, structure checks, topic/body/properties
   columns, properties map, hosts, ids) — the same work a Spark task does, without Spark.
3. Spark rate: ``read_commitlog(...).write.format("noop")`` with ``local[1]`` and ``local[2]``,
   each in its own process (a master cannot change within one); best of ``--runs`` after one
   warm-up run (Python worker start-up).

Reports rows/s and the per-core ratio ``spark rate / (raw rate × cores)``; the target is ≥ 50 %.
For each Spark run it also reports where the CPU went: the JVM's and the Python workers' CPU
seconds during the best run (``/proc/<pid>/stat``, Linux only), to compare with the raw scan's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from rocketq.config import StoreConfig
from rocketq.message import Message
from rocketq.spark.jobs import read_commitlog, scan
from rocketq.store import MessageStore


def build_store(root: str, size_mib: int, segment_mib: int, body_bytes: int) -> int:
    cfg = StoreConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log=segment_mib << 20,
        message_index_enable=False,
    )
    body = bytes(range(256)) * (body_bytes // 256 + 1)
    count = 0
    target = size_mib << 20
    written = 0
    with MessageStore(cfg) as st:
        while written < target:
            batch = [
                Message(
                    ("Orders", "Payments", "Audit")[(count + j) % 3],
                    body[(count + j) % 256 : (count + j) % 256 + body_bytes],
                    tags=f"Tag{(count + j) % 4}",
                    keys=[f"order-{count + j}"],
                    properties={"UNIQ_KEY": f"{count + j:032X}"},
                )
                for j in range(256)
            ]
            for qid in range(4):
                result = st.put_messages(batch[qid * 64 : (qid + 1) * 64], queue_id=qid)
                written += result.size
            count += len(batch)
        st.wait_dispatched()
    return count


def raw_scan(root: str) -> tuple[int, float, float]:
    """Rows, wall seconds and CPU seconds of a single-process column scan of every segment."""
    tasks = scan.plan_tasks(scan.list_segments(root))
    began, cpu = time.perf_counter(), time.process_time()
    rows = 0
    for t in tasks:
        for batch in scan.export_batches(t):
            rows += batch.num_rows
    return rows, time.perf_counter() - began, time.process_time() - cpu


_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def _proc_table() -> dict[int, tuple[int, str, float, float]]:
    """pid → (parent pid, name, own CPU s, CPU s of reaped children), from ``/proc/*/stat``."""
    table: dict[int, tuple[int, str, float, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name_end = stat.rindex(")")
        fields = stat[name_end + 2 :].split()
        utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
        table[int(entry)] = (
            int(fields[1]),
            stat[stat.index("(") + 1 : name_end],
            (utime + stime) / _TICKS_PER_S,
            (cutime + cstime) / _TICKS_PER_S,
        )
    return table


def cpu_split() -> tuple[float, float]:
    """CPU seconds so far of this process's JVM and of the Python workers under it (the
    ``pyspark.daemon`` and its forked workers, live or reaped)."""
    table = _proc_table()
    jvm = next(
        (pid for pid, (ppid, name, _, _) in table.items() if ppid == os.getpid() and name == "java"), None
    )
    if jvm is None:
        return 0.0, 0.0
    under: set[int] = set()
    frontier = [jvm]
    while frontier:
        parent = frontier.pop()
        kids = [pid for pid, row in table.items() if row[0] == parent]
        under.update(kids)
        frontier.extend(kids)
    python = sum(table[pid][2] + table[pid][3] for pid in under)
    return table[jvm][2], python


def spark_scan(root: str, master: str, runs: int) -> dict[str, float]:
    """Runs in a child process: best rows/s of ``runs`` noop scans after one warm-up, with the
    CPU seconds of the JVM and of the Python workers during that run."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession  # noqa: PLC0415 - only the child process needs Spark

    spark = (
        SparkSession.builder.master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    rows = read_commitlog(spark, root).count()  # warm-up: starts the Python workers
    best = float("inf")
    jvm_cpu = python_cpu = 0.0
    for _ in range(runs):
        jvm0, py0 = cpu_split()
        began = time.perf_counter()
        read_commitlog(spark, root).write.format("noop").mode("overwrite").save()
        elapsed = time.perf_counter() - began
        jvm1, py1 = cpu_split()
        if elapsed < best:
            best, jvm_cpu, python_cpu = elapsed, jvm1 - jvm0, py1 - py0
    spark.stop()
    return {"rows": rows, "seconds": best, "jvm_cpu_s": jvm_cpu, "python_cpu_s": python_cpu}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--segment-mib", type=int, default=64)
    ap.add_argument("--body-bytes", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--store", help="scan this store instead of building one")
    ap.add_argument("--child", nargs=2, metavar=("STORE", "MASTER"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(spark_scan(args.child[0], args.child[1], args.runs)))
        return
    tmp = None
    root = args.store
    if root is None:
        tmp = tempfile.mkdtemp(prefix="spark-scan-")
        root = os.path.join(tmp, "store")
        began = time.perf_counter()
        n = build_store(root, args.size_mib, args.segment_mib, args.body_bytes)
        print(f"built {n} messages, {args.size_mib} MiB in {time.perf_counter() - began:.1f} s")
    try:
        best_raw = 0.0
        for _ in range(2):
            rows, wall, cpu = raw_scan(root)
            best_raw = max(best_raw, rows / wall)
            print(
                f"raw column scan (1 process): {rows} rows in {wall:.2f} s wall / {cpu:.2f} s CPU "
                f"= {rows / wall:,.0f} rows/s"
            )
        for master, cores in (("local[1]", 1), ("local[2]", 2)):
            out = subprocess.run(
                [sys.executable, __file__, "--child", root, master, "--runs", str(args.runs)],
                check=True,
                capture_output=True,
                text=True,
            )
            res = json.loads(out.stdout.strip().splitlines()[-1])
            rate = res["rows"] / res["seconds"]
            print(
                f"spark {master}: {int(res['rows'])} rows in {res['seconds']:.2f} s = {rate:,.0f} rows/s; "
                f"per core {rate / cores:,.0f} rows/s = {rate / cores / best_raw:.0%} of the raw rate; "
                f"CPU: JVM {res['jvm_cpu_s']:.2f} s, Python workers {res['python_cpu_s']:.2f} s"
            )
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
