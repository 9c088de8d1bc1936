"""The ``rocketq`` command line: the entry point (``rocketq.cli:main``), the top-level parser and
the ``demo`` command; each command family parses and runs in a module of its own.

``build_parser`` asks every family to add its subcommands (servers: :mod:`rocketq.cli.servers`;
``admin``: :mod:`rocketq.cli.admin`; ``bench``: :mod:`rocketq.bench_cli`; ``spark``, ``proxy``:
their packages' ``cli`` modules). Each subcommand sets ``func``, which ``main`` calls with the
parsed arguments; its return value is the exit status. Building the parser loads no client
module: the client SDK is imported inside the runners of the commands that use it.

Logging goes to stderr at WARNING, at INFO with ``-v``; ``ROCKETQ_LOG_INFO`` names loggers
(comma-separated, e.g. ``rocketq.broker.pull``) that log at INFO without ``-v``.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import time
from collections.abc import Sequence

from rocketq import __version__, speedups
from rocketq.bench_cli import add_parser as add_bench_parser
from rocketq.cli.admin import add_parser as add_admin_parser
from rocketq.cli.dashboard import add_parser as add_dashboard_parser
from rocketq.cli.servers import add_server_parsers
from rocketq.config import StoreConfig
from rocketq.message import Message
from rocketq.store import MessageStore

#: comma-separated logger names that log at INFO without ``-v`` (module docstring)
LOG_INFO_ENV = "ROCKETQ_LOG_INFO"


def _demo(args: argparse.Namespace) -> int:
    root = args.data_dir
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    cfg = StoreConfig(
        store_path_root_dir=root,
        flush_disk_type=args.flush,
        mapped_file_size_commit_log=args.segment_mib << 20,
    )
    n = args.count
    print(f"rocketq demo: embedded store in {root!r}, {args.flush}, {args.segment_mib} MiB segments")
    offsets: list[tuple[int, int]] = []
    t0 = time.perf_counter()
    with MessageStore(cfg) as store:
        for i in range(n):
            msg = Message(
                "DemoTopic", f"message {i}".encode(), tags="TagA" if i % 2 else "TagB", keys=[f"k{i}"]
            )
            r = store.put_message(msg, queue_id=i % 4)
            offsets.append((r.physical_offset, r.size))
        first_id = store.put_message(Message("DemoTopic", b"last", keys=["last"])).msg_id
        written = store.get_max_phy_offset()
    t1 = time.perf_counter()
    print(
        f"  wrote {n + 1} messages ({written} bytes of CommitLog) in {(t1 - t0) * 1000:.0f} ms, "
        "then shut down"
    )
    with MessageStore(cfg) as store:
        ok = 0
        for i, (off, size) in enumerate(offsets):
            m = store.look_message_by_offset(off, size)
            if m is not None and m.body == f"message {i}".encode() and m.queue_id == i % 4:
                ok += 1
        segments = len(store.commitlog.queue.files)
        print(f"  reopened: recovered end offset {store.get_max_phy_offset()}, {segments} segment(s)")
        print(f"  read back {ok}/{n} messages intact by physical offset; last msg id {first_id}")
        per_queue = [store.get_max_offset("DemoTopic", q) for q in range(4)]
        page = store.get_message("demo-group", "DemoTopic", 1, 0, 3)
        first = [m.body for m in page.messages]
        print(f"  ConsumeQueue sizes per queue: {per_queue}; queue 1 starts with {first}")
        hits = store.query_messages_by_key("DemoTopic", f"k{n - 1}")
        print(f"  query by key k{n - 1}: {[m.body for m in hits.messages]}")
    return 0 if ok == n else 1


def build_parser() -> argparse.ArgumentParser:
    """The ``rocketq`` argument parser with every subcommand."""
    parser = argparse.ArgumentParser(prog="rocketq", description="RocketMQ-compatible broker and store")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    parser.add_argument(
        "--version",
        action="version",
        version=f"rocketq {__version__} ({speedups.describe()})",
        help="print the version and which codec implementation runs (compiled or pure Python)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="write, flush, reopen and read back an embedded store")
    demo.add_argument("--data-dir", default="demo-data", help="store directory (default %(default)s)")
    demo.add_argument("--count", type=int, default=10_000, help="messages to write (default %(default)s)")
    demo.add_argument(
        "--flush",
        default="SYNC_FLUSH",
        choices=["SYNC_FLUSH", "ASYNC_FLUSH"],
        help="flushDiskType (default %(default)s)",
    )
    demo.add_argument(
        "--segment-mib", type=int, default=1, help="CommitLog segment size in MiB (default %(default)s)"
    )
    demo.add_argument("--keep", action="store_true", help="keep existing data in the directory")
    demo.set_defaults(func=_demo)
    add_server_parsers(sub)
    add_admin_parser(sub)
    add_dashboard_parser(sub)
    add_bench_parser(sub)
    from rocketq.spark.jobs.cli import add_parser as add_spark_parser  # noqa: PLC0415 - lazy: no PySpark

    add_spark_parser(sub)
    from rocketq.proxy.cli import add_parser as add_proxy_parser  # noqa: PLC0415

    add_proxy_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for name in os.environ.get(LOG_INFO_ENV, "").split(","):
        if name.strip():  # these loggers at INFO without -v (the chaos harness's brokers)
            logging.getLogger(name.strip()).setLevel(logging.INFO)
    return int(args.func(args))
