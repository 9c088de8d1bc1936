"""The ``rocketq bench`` command line: its arguments here, its work in :mod:`rocketq.client.bench`.

The work module, and with it the client SDK, is imported only when the command runs, so that
building the ``rocketq`` parser costs the server commands (``serve``, ``broker``, ``namesrv``)
no client modules in memory.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

DEFAULT_NAMESRV_ADDR = "127.0.0.1:9876"
#: ``rocketq bench produce --mode``: what one unit of work is (see :mod:`rocketq.client.bench`)
MODES = ("sync", "async", "batch")


def _run(args: argparse.Namespace) -> int:
    from rocketq.client.bench import run_command  # noqa: PLC0415 - the client SDK, on demand

    return run_command(args)


def add_parser(sub: Any) -> None:
    """Add ``bench produce`` and ``bench consume`` to the ``rocketq`` command's subparsers."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--namesrv-addr",
        default=os.environ.get("NAMESRV_ADDR") or DEFAULT_NAMESRV_ADDR,
        help="name servers, host:port;host:port (default $NAMESRV_ADDR or 127.0.0.1:9876)",
    )
    common.add_argument("-t", "--topic", default="RocketqBench", help="topic (default %(default)s)")
    common.add_argument(
        "-s", "--size", type=int, default=128, help="message body bytes (default %(default)s)"
    )
    common.add_argument(
        "-w",
        "--threads",
        type=int,
        default=16,
        help="concurrent senders / consume threads (default %(default)s)",
    )
    common.add_argument(
        "-n", "--count", type=int, default=100_000, help="stop after this many messages (default %(default)s)"
    )
    common.add_argument(
        "-d",
        "--duration-s",
        type=float,
        default=60.0,
        help="stop after this many seconds (default %(default)s)",
    )
    common.add_argument(
        "-b",
        "--batch-size",
        type=int,
        default=32,
        help="messages per batch send / listener call (default %(default)s)",
    )
    common.add_argument(
        "--queues",
        type=int,
        default=4,
        help="queues per broker when creating the topic (default %(default)s)",
    )
    common.add_argument("--json", action="store_true", help="print only the summary, as JSON")
    bench = sub.add_parser("bench", help="measure producer and consumer throughput and latency")
    cmds = bench.add_subparsers(dest="bench_command", required=True, metavar="COMMAND")
    produce = cmds.add_parser("produce", parents=[common], help="send messages as fast as possible")
    produce.add_argument(
        "--mode",
        choices=MODES,
        default="async",
        help="sync: -w threads, async: -w coroutines, batch: batch sends (default %(default)s)",
    )
    produce.add_argument("--no-create", action="store_true", help="do not create the topic first")
    produce.set_defaults(func=_run)
    consume = cmds.add_parser("consume", parents=[common], help="consume messages with a push consumer")
    consume.add_argument(
        "-g", "--group", default="BenchmarkConsumer", help="consumer group (default %(default)s)"
    )
    consume.set_defaults(func=_run, no_create=True)


__all__ = ["DEFAULT_NAMESRV_ADDR", "MODES", "add_parser"]
