"""Store read-side benchmark: dispatch, reads by queue offset, key lookups, recovery time.

    python bench/store_read.py                  # everything, with a 10 GiB store for the restart
    python bench/store_read.py --quick          # smaller sizes (2 GiB store, 256 MiB tail)
    python bench/store_read.py --quick --reads-only   # only the reads by CPU time

Figures:
* dispatch: records/s of the dispatcher alone (CommitLog → ConsumeQueue + index) against the
  single-writer async put rate of the same messages, measured in alternating rounds of the same
  run (put, dispatch, put, dispatch, ...) by thread CPU time and by wall clock, and their ratio;
  then the put rate and the lag while a writer puts as fast as it can (async flush) with dispatch
  running beside it;
* get_message: messages/s reading batches of 32 by queue offset, and the least thread CPU per
  message read (with and without building the pull body) over interleaved passes;
* query by key: lookups/s of ``query_messages_by_key`` for random keys;
* recovery: start-up time after a SIGKILL with an un-checkpointed tail of the given size, and
  after a clean shutdown of a large store.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from dataclasses import dataclass

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from rocketq.config import StoreConfig
from rocketq.message import BrokerMessage, UniqueIdGenerator, encode_properties
from rocketq.store.message_store import MessageStore

MiB = 1 << 20
GiB = 1 << 30
TOPIC = "BenchTopic"
SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")


def make_messages(n: int, body_size: int, queues: int = 8) -> list[BrokerMessage]:
    ids = UniqueIdGenerator()
    body = os.urandom(body_size)
    out = []
    for i in range(n):
        props = {"UNIQ_KEY": ids.next_id(), "WAIT": "true", "TAGS": "TagA", "KEYS": f"order-{i}"}
        out.append(
            BrokerMessage(
                TOPIC, body, encode_properties(props).encode(), queue_id=i % queues, born_timestamp=1
            )
        )
    return out


def cfg(root: str, **kw: object) -> StoreConfig:
    return StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=256 * MiB, **kw)  # type: ignore[arg-type]


@dataclass
class DispatchFigures:
    """Same-run figures: the single-writer put rate and the dispatch rate over the same records."""

    put_cpu: list[float]  # msgs/s by the writing thread's CPU time, dispatch stopped
    put_wall: list[float]
    dispatch_cpu: list[float]  # records/s by the dispatching thread's CPU time
    dispatch_wall: list[float]
    concurrent: float  # put msgs/s with dispatch running beside the writer
    max_lag: int
    end_lag: int


def _put_then_dispatch(root: str, msgs: list[BrokerMessage]) -> tuple[float, float, float, float]:
    """One round: put every message with the dispatch thread stopped (the async single-writer put
    rate), then dispatch them all in this thread. Rates by thread CPU time and by wall clock."""
    shutil.rmtree(root, ignore_errors=True)
    store = MessageStore(cfg(root))
    store.start()
    reput = store.reput
    assert reput is not None
    reput.shutdown()  # the thread stops (nothing to dispatch yet); do_reput still works here
    put = store.commitlog.put_message  # dispatch is stopped: no back-pressure here
    n = len(msgs)
    w0, c0 = time.perf_counter(), time.thread_time()
    for m in msgs:
        put(m)
    put_cpu, put_wall = n / (time.thread_time() - c0), n / (time.perf_counter() - w0)
    w0, c0 = time.perf_counter(), time.thread_time()
    done = reput.do_reput()
    dispatch_cpu, dispatch_wall = n / (time.thread_time() - c0), n / (time.perf_counter() - w0)
    assert done == n, (done, n)
    store.shutdown()
    shutil.rmtree(root, ignore_errors=True)
    return put_cpu, put_wall, dispatch_cpu, dispatch_wall


def bench_dispatch(base: str, n: int, rounds: int = 3) -> DispatchFigures:
    root = os.path.join(base, "dispatch")
    msgs = make_messages(n, 128)
    figures = DispatchFigures([], [], [], [], 0.0, 0, 0)
    for _ in range(rounds):  # put and dispatch alternate: both see the same machine load
        put_cpu, put_wall, dispatch_cpu, dispatch_wall = _put_then_dispatch(root, msgs)
        figures.put_cpu.append(put_cpu)
        figures.put_wall.append(put_wall)
        figures.dispatch_cpu.append(dispatch_cpu)
        figures.dispatch_wall.append(dispatch_wall)

    # Concurrent: a writer at full speed, the dispatcher beside it.
    shutil.rmtree(root, ignore_errors=True)
    store = MessageStore(cfg(root))
    store.start()
    max_lag = 0
    done = threading.Event()

    def watch() -> None:
        nonlocal max_lag
        while not done.wait(0.01):
            max_lag = max(max_lag, store.dispatch_behind_bytes())

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    put = store.put_message
    t0 = time.perf_counter()
    for m in msgs:
        put(m)
    elapsed = time.perf_counter() - t0
    end_lag = store.dispatch_behind_bytes()
    store.wait_dispatched(60)
    done.set()
    watcher.join()
    store.shutdown()
    shutil.rmtree(root, ignore_errors=True)
    figures.concurrent = n / elapsed
    figures.max_lag = max(max_lag, end_lag)
    figures.end_lag = end_lag
    return figures


def bench_reads(base: str, n: int) -> tuple[float, float]:
    root = os.path.join(base, "reads")
    shutil.rmtree(root, ignore_errors=True)
    msgs = make_messages(n, 128)
    with MessageStore(cfg(root)) as store:
        for i in range(0, n, 32):
            store.put_messages(msgs[i : i + 32])
        store.wait_dispatched(60)
        t0 = time.perf_counter()
        got = 0
        for q in range(8):
            off = 0
            while True:
                r = store.get_message("G", TOPIC, q, off, 32)
                if not r.buffers:
                    break
                got += len(r.buffers)
                off = r.next_begin_offset
        gets = got / (time.perf_counter() - t0)
        assert got == n, (got, n)
        rnd = random.Random(7)
        lookups = 2000
        t0 = time.perf_counter()
        for _ in range(lookups):
            i = rnd.randrange(n)
            found = store.query_messages_by_key(TOPIC, f"order-{i}").messages
            assert found, i
        keys = lookups / (time.perf_counter() - t0)
    shutil.rmtree(root, ignore_errors=True)
    return gets, keys


def bench_read_cpu(base: str, n: int, rounds: int = 7) -> tuple[float, float]:
    """Least CPU µs per message over ``rounds`` passes reading every queue in batches of 32
    (``get_message``, each unit checked against its record), and the same passes joining each
    answer into one pull body as the broker sends it (``result.body``)."""
    root = os.path.join(base, "reads-cpu")
    shutil.rmtree(root, ignore_errors=True)
    msgs = make_messages(n, 128)
    best_get = best_body = float("inf")
    with MessageStore(cfg(root)) as store:
        for i in range(0, n, 32):
            store.put_messages(msgs[i : i + 32])
        store.wait_dispatched(60)
        for _ in range(rounds):
            for with_body in (False, True):
                got = 0
                c0 = time.thread_time()
                for q in range(8):
                    off = 0
                    while True:
                        r = store.get_message("G", TOPIC, q, off, 32)
                        if not r.message_count:
                            break
                        if with_body:
                            got += len(body_of(r))
                        else:
                            got += r.message_count
                        off = r.next_begin_offset
                cpu = (time.thread_time() - c0) / n * 1e6
                if with_body:
                    best_body = min(best_body, cpu)
                else:
                    assert got == n, (got, n)
                    best_get = min(best_get, cpu)
    shutil.rmtree(root, ignore_errors=True)
    return best_get, best_body


def body_of(result: object) -> bytes:
    """The pull body of a read: ``result.body`` where the store builds it, else the join of the
    records (what the broker did before)."""
    body = getattr(result, "body", None)
    if isinstance(body, bytes):
        return body
    return b"".join(result.buffers)  # type: ignore[attr-defined]


WRITER = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, {src!r})
    from rocketq.config import StoreConfig
    from rocketq.message import BrokerMessage
    from rocketq.store.message_store import MessageStore
    cfg = StoreConfig(store_path_root_dir={root!r}, mapped_file_size_commit_log={seg})
    s = MessageStore(cfg)
    s.start()
    body = os.urandom(1024)
    batch = [BrokerMessage("BenchTopic", body, b"TAGS\\x01A\\x02", queue_id=i % 8) for i in range(32)]
    while s.get_max_phy_offset() < {size}:
        s.put_messages(batch)
    print("ready", flush=True)
    sys.stdin.read()
    """
)


def bench_crash_recovery(base: str, tail_bytes: int) -> tuple[float, int]:
    """Seconds to start after SIGKILL with ``tail_bytes`` written since the last checkpoint."""
    root = os.path.join(base, "crash")
    shutil.rmtree(root, ignore_errors=True)
    code = WRITER.format(src=SRC, root=root, seg=256 * MiB, size=tail_bytes)
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == b"ready", line
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    t0 = time.perf_counter()
    store = MessageStore(cfg(root))
    store.start()
    elapsed = time.perf_counter() - t0
    assert not store.last_exit_ok
    scanned = store.recovery.records_scanned if store.recovery else 0
    store.shutdown()
    shutil.rmtree(root, ignore_errors=True)
    return elapsed, scanned


def bench_clean_restart(base: str, size: int) -> tuple[float, float]:
    """(seconds to write ``size`` bytes, seconds to start the store again after a clean shutdown)."""
    root = os.path.join(base, "big")
    shutil.rmtree(root, ignore_errors=True)
    config = StoreConfig(store_path_root_dir=root)  # 1 GiB segments, as RocketMQ
    body = os.urandom(4096)
    ids = UniqueIdGenerator()
    t0 = time.perf_counter()
    with MessageStore(config) as store:
        while store.get_max_phy_offset() < size:
            batch = [
                BrokerMessage(
                    TOPIC, body, encode_properties({"UNIQ_KEY": ids.next_id()}).encode(), queue_id=i % 8
                )
                for i in range(64)
            ]
            store.put_messages(batch)
    write_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    store = MessageStore(config)
    store.start()
    start_s = time.perf_counter() - t0
    store.shutdown()
    shutil.rmtree(root, ignore_errors=True)
    return write_s, start_s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--dir", default=None, help="directory for the test stores (default: a temp dir)")
    ap.add_argument("--big-gib", type=int, default=None, help="size of the store for the clean restart")
    ap.add_argument("--dispatch-only", action="store_true", help="only the dispatch figures")
    ap.add_argument(
        "--reads-only", action="store_true", help="only the read figures by CPU time (get_message, pull body)"
    )
    args = ap.parse_args()
    base = args.dir or tempfile.mkdtemp(prefix="rocketq-bench-")
    n = 50_000 if args.quick else 200_000
    big = (args.big_gib or (2 if args.quick else 10)) * GiB
    tail = (256 if args.quick else 1024) * MiB
    print(f"# rocketq store read benchmark ({os.cpu_count()} CPUs, Python {sys.version.split()[0]})")
    get_us, body_us = bench_read_cpu(base, min(n, 100_000))
    read_rows = [
        ("get_message, batches of 32: least thread CPU per message", f"{get_us:.2f} µs"),
        ("the same plus the pull body (one bytes per answer)", f"{body_us:.2f} µs"),
    ]
    if args.reads_only:
        print()
        print("| measure | figure |")
        print("|---|---:|")
        for name, figure in read_rows:
            print(f"| {name} | {figure} |")
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
        return 0
    disp = bench_dispatch(base, n)
    put_cpu, put_wall = statistics.median(disp.put_cpu), statistics.median(disp.put_wall)
    dsp_cpu, dsp_wall = statistics.median(disp.dispatch_cpu), statistics.median(disp.dispatch_wall)
    ratios_cpu = " ".join(f"{d / p:.2f}" for d, p in zip(disp.dispatch_cpu, disp.put_cpu, strict=True))
    ratios_wall = " ".join(f"{d / p:.2f}" for d, p in zip(disp.dispatch_wall, disp.put_wall, strict=True))
    share = disp.concurrent / put_wall
    rows = [
        (
            "async single-writer put, dispatch stopped (CPU / wall)",
            f"{put_cpu:,.0f} / {put_wall:,.0f} msgs/s",
        ),
        (
            "dispatch alone (CQ + index, 128 B, UNIQ_KEY + 1 key; CPU / wall)",
            f"{dsp_cpu:,.0f} / {dsp_wall:,.0f} records/s",
        ),
        ("dispatch ÷ put, per round (CPU)", ratios_cpu),
        ("dispatch ÷ put, per round (wall)", ratios_wall),
        (
            "async put with dispatch running",
            f"{disp.concurrent:,.0f} msgs/s ({share:.2f} of put alone, wall)",
        ),
        (
            "dispatch lag while writing: max / at end",
            f"{disp.max_lag / MiB:.1f} MiB / {disp.end_lag / MiB:.1f} MiB",
        ),
    ]
    if not args.dispatch_only:
        gets, keys = bench_reads(base, n)
        crash_s, scanned = bench_crash_recovery(base, tail)
        write_s, start_s = bench_clean_restart(base, big)
        rows += [
            ("get_message, batches of 32", f"{gets:,.0f} msgs/s"),
            *read_rows,
            ("query by key", f"{keys:,.0f} lookups/s"),
            (
                f"start after SIGKILL, {tail // MiB} MiB un-checkpointed tail",
                f"{crash_s:.2f} s ({scanned:,} records)",
            ),
            (f"clean restart of a {big // GiB} GiB store", f"{start_s:.3f} s (written in {write_s:.0f} s)"),
        ]
    print()
    print("| measure | figure |")
    print("|---|---:|")
    for name, figure in rows:
        print(f"| {name} | {figure} |")
    if not args.dir:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
