"""Dispatch cost per record by window size: record-by-record parsing against columns.

    python bench/dispatch_windows.py            # windows of 8 ... 1024 records, 5 rounds
    python bench/dispatch_windows.py --rounds 9
    python bench/dispatch_windows.py --sizes 8,32,180,1000

A store with its dispatch thread stopped; each step puts one batch of N messages (136 B bodies,
UNIQ_KEY, WAIT, TAGS, 4 queues) and then runs one dispatch pass over exactly those N records on
this thread (``ReputMessageService.do_reput``: parse, ConsumeQueue units, index entries), once
with every window parsed record by record, once with every window in columns and once as the
store chooses. The figure is the thread CPU of the dispatch pass per record, the median over the
rounds (the machine is noisy). ``MIN_COLUMNAR_RECORDS`` in ``store/record_scan.py`` is where the
two lines cross for the pure parser, ``MIN_COMPILED_COLUMNAR_RECORDS`` for the compiled scan
(which makes the requests of a "record by record" window as objects in C); ``ROCKETQ_PURE=1``
runs the pure one.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from rocketq import speedups
from rocketq.config import StoreConfig
from rocketq.store import record_scan
from rocketq.store.message_store import MessageStore
from store_write import make_messages

SIZES = (8, 16, 32, 64, 128, 160, 192, 256, 512, 1024)
PER_STEP = 1024  # records dispatched per size, per path and round


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="records per window, comma-separated")
    args = ap.parse_args()
    try:
        sizes = tuple(int(n) for n in args.sizes.split(","))
    except ValueError:
        ap.error(f"--sizes: {args.sizes!r} is not a comma-separated list of numbers")
    if not sizes or min(sizes) < 1 or max(sizes) > PER_STEP:
        ap.error(f"--sizes: each size must be between 1 and {PER_STEP}")
    root = tempfile.mkdtemp(prefix="rocketq-bench-dispatch-")
    default = record_scan.MIN_COLUMNAR_RECORDS
    default_compiled = record_scan.MIN_COMPILED_COLUMNAR_RECORDS
    paths = (("records", 1 << 30, 1 << 30), ("columns", 1, 1), ("store", default, default_compiled))
    try:
        store = MessageStore(StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=1 << 30))
        store.start()
        reput = store.reput
        assert reput is not None
        reput.shutdown()  # the thread stops (nothing to dispatch yet): dispatch runs here only
        msgs = make_messages(PER_STEP, 136)
        costs: dict[tuple[int, str], list[float]] = {}
        for _ in range(args.rounds):
            for n in sizes:
                for path, threshold, compiled_threshold in paths:
                    record_scan.MIN_COLUMNAR_RECORDS = threshold
                    record_scan.MIN_COMPILED_COLUMNAR_RECORDS = compiled_threshold
                    cpu = 0.0
                    for i in range(0, PER_STEP, n):
                        store.put_messages(msgs[i : i + n])
                        c0 = time.thread_time()
                        reput.do_reput()
                        cpu += time.thread_time() - c0
                    costs.setdefault((n, path), []).append(cpu / PER_STEP * 1e6)
        store.shutdown()
    finally:
        record_scan.MIN_COLUMNAR_RECORDS = default
        record_scan.MIN_COMPILED_COLUMNAR_RECORDS = default_compiled
        shutil.rmtree(root, ignore_errors=True)
    print(f"# dispatch CPU per record by window size ({args.rounds} rounds, median, µs)")
    print(f"# {speedups.describe()}")
    print()
    print("| records per window | record by record | columns | as the store chooses | faster |")
    print("|---:|---:|---:|---:|---|")
    for n in sizes:
        a = statistics.median(costs[(n, "records")])
        b = statistics.median(costs[(n, "columns")])
        c = statistics.median(costs[(n, "store")])
        print(f"| {n} | {a:.2f} | {b:.2f} | {c:.2f} | {'columns' if b < a else 'records'} |")
    print()
    print(f"MIN_COLUMNAR_RECORDS = {default}, MIN_COMPILED_COLUMNAR_RECORDS = {default_compiled}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
