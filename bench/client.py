"""Client benchmark through the whole stack: the SDK in this process, ``rocketq serve`` in a child.

    python bench/client.py                 # 100,000 messages per producer case (about two minutes)
    python bench/client.py --count 20000   # shorter

Starts ``python -m rocketq.cli serve`` (ASYNC_FLUSH, empty temporary data directory, free ports
on 127.0.0.1), then runs :mod:`rocketq.client.bench` cases in order: producer ``sync`` (16
threads on the blocking facade), ``async`` (16 coroutines) and ``batch`` (16 coroutines, 32
messages per batch), 128 B bodies, then one push consumer reading everything the producers
stored (end-to-end latency is therefore mostly queueing time: the messages were produced before
the consumer started). Prints one summary line per case, the machine's floor (a bare asyncio echo
between two processes, from bench/broker.py, before and after) and a Markdown table for
docs/benchmarks.md. The same cases run against any cluster with ``rocketq bench produce|consume``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time

from rocketq.free_ports import free_port

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from broker import echo_floor  # bench/broker.py: the machine's loopback round-trip floor
from rocketq.client.bench import BenchConfig, Summary, run_consume, run_produce

HOST = "127.0.0.1"


def start_serve(data_dir: str) -> tuple[subprocess.Popen[bytes], str]:
    namesrv_port, broker_port = free_port(), free_port()
    env = dict(os.environ)
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rocketq.cli",
            "serve",
            "--data-dir",
            data_dir,
            "--namesrv-port",
            str(namesrv_port),
            "--broker-port",
            str(broker_port),
            "--grpc-port",
            "-1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    for raw in proc.stdout:
        if b"rocketq ready" in raw:
            break
        if time.monotonic() > deadline:
            break
    else:
        raise SystemExit(f"rocketq serve exited with {proc.wait()}")
    return proc, f"{HOST}:{namesrv_port}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=100_000, help="messages per producer case")
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--size", type=int, default=128)
    args = parser.parse_args()
    floor_before = asyncio.run(echo_floor(2.0))
    load_before = os.getloadavg()[0]
    data_dir = tempfile.mkdtemp(prefix="rocketq-bench-client-")
    proc, namesrv = start_serve(data_dir)
    rows: list[Summary] = []
    try:
        for mode in ("sync", "async", "batch"):
            cfg = BenchConfig(
                namesrv_addr=namesrv,
                topic="RocketqBench",
                size_bytes=args.size,
                concurrency=args.threads,
                count=args.count,
                duration_s=120,
                mode=mode,
            )
            summary = asyncio.run(run_produce(cfg, sys.stdout))
            print(summary.line(), flush=True)
            rows.append(summary)
        total = sum(r.messages for r in rows) + 1 + 1 + 1  # plus each case's route warm-up send
        cfg = BenchConfig(namesrv_addr=namesrv, count=total, duration_s=300, concurrency=args.threads)
        summary = asyncio.run(run_consume(cfg, sys.stdout))
        print(summary.line(), flush=True)
        rows.append(summary)
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(data_dir, ignore_errors=True)
    floor_after = asyncio.run(echo_floor(2.0))
    print()
    print(
        f"floor (bare asyncio echo, 1 in flight): {floor_before:,.0f} / {floor_after:,.0f} round trips/s "
        f"before / after; load average {load_before:.1f} / {os.getloadavg()[0]:.1f}"
    )
    print()
    print("| case | msgs/s | latency p50 ms | p99 ms | max ms | errors |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r.what} | {r.msgs_per_s:,.0f} | {r.latency_p50_ms:.2f} | {r.latency_p99_ms:.2f} "
            f"| {r.latency_max_ms:.2f} | {r.errors} |"
        )


if __name__ == "__main__":
    main()
