"""Restart time of a DLedger store (a group of one): store open to ready after a clean stop.

    python bench/dledger_restart.py fill DIR [--messages 200000] [--size 128]
    python bench/dledger_restart.py open DIR [--runs 3]

``fill`` writes the messages (keys set, two queues) and stops the store cleanly; ``open`` times
``open_message_store`` (recovery of the files, the start of the replicated log, dispatch at
start) and its shutdown, ``--runs`` times, and prints each time with the records dispatched at
start. Run ``open`` on a copy of the filled directory per tree compared: an open writes the
checkpoint again.
"""

from __future__ import annotations

import argparse
import os
import time

from rocketq.config import StoreConfig
from rocketq.message import Message
from rocketq.store.message_store import open_message_store


def config(directory: str) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=os.path.abspath(directory),
        enable_dleger_commit_log=True,
        d_leger_self_id="n0",
    )


def fill(directory: str, messages: int, size: int) -> None:
    body = bytes(size)
    began = time.perf_counter()
    with open_message_store(config(directory)) as s:
        batch = 256
        for first in range(0, messages, batch):
            n = min(batch, messages - first)
            msgs = [Message("T", body, keys=[f"k{first + i}"]) for i in range(n)]
            s.put_messages(msgs, queue_id=(first // batch) % 2)
        assert s.wait_dispatched(60)
    print(f"wrote {messages} messages of {size} B in {time.perf_counter() - began:.1f} s")


def open_runs(directory: str, runs: int) -> None:
    for run in range(runs):
        began = time.perf_counter()
        with open_message_store(config(directory)) as s:
            ready = time.perf_counter() - began
            dispatched = s.reput.dispatched_records if s.reput is not None else -1
        print(f"run {run}: open to ready {ready:.3f} s, {dispatched} records dispatched at start")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["fill", "open"])
    ap.add_argument("directory")
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    if args.mode == "fill":
        fill(args.directory, args.messages, args.size)
    else:
        open_runs(args.directory, args.runs)


if __name__ == "__main__":
    main()
