"""``rocketq spark verify|export|stats|rebuild-index <storeDir> ...``.

:func:`add_parser` only declares arguments; PySpark is imported when a subcommand runs, so the
rest of the ``rocketq`` command starts without a JVM or PySpark installed. A Spark session that
is already active in the process is reused; otherwise one is created with ``--master``
(``local[*]`` by default). Exit status: 0 when the job succeeded (and, for ``verify``, found no
damage), 1 when ``verify`` found damage, 2 on a usage or store error.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from typing import Any

from rocketq.errors import RocketqError


def _time_ms(text: str) -> int:
    """Epoch milliseconds, or an ISO-8601 date/time (UTC unless it carries an offset)."""
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither epoch milliseconds nor an ISO-8601 time"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


def _size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower().removesuffix("b").removesuffix("i")
    try:
        if t and t[-1] in units:
            return int(float(t[:-1]) * units[t[-1]])
        return int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 268435456, 256m, 1g)") from None


def add_parser(sub: Any) -> None:
    """Add ``spark`` and its subcommands to the ``rocketq`` subparsers."""
    spark = sub.add_parser("spark", help="Spark jobs over the files of a stopped store")
    jobs = spark.add_subparsers(dest="spark_command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "store_dir",
            help="store root (with commitlog/ or a DLedger dledger-<selfId>/), the commitlog directory, "
            "or a dledger-<selfId> directory",
        )
        p.add_argument("--master", default="local[*]", help="Spark master URL (default local[*])")
        p.add_argument(
            "--split-bytes",
            type=_size,
            default=None,
            help="split segments larger than this at proven record starts (default: a task per segment)",
        )
        p.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
        p.set_defaults(func=_run)

    p = jobs.add_parser("verify", help="check CRCs and structure; report the exact offsets of damage")
    common(p)
    p = jobs.add_parser("export", help="write messages to Parquet")
    common(p)
    p.add_argument("--out", required=True, help="output path (Parquet directory)")
    p.add_argument(
        "--topic", action="append", dest="topics", help="topic to export (repeatable; default all)"
    )
    p.add_argument("--begin", type=_time_ms, help="store time from (epoch ms or ISO-8601, inclusive)")
    p.add_argument("--end", type=_time_ms, help="store time until (epoch ms or ISO-8601, exclusive)")
    p.add_argument("--broker-name", help="value of the brokerName column")
    p.add_argument(
        "--mode",
        default="errorifexists",
        choices=["errorifexists", "overwrite", "append", "ignore"],
        help="Spark save mode when --out exists (default %(default)s)",
    )
    p = jobs.add_parser("stats", help="messages and bytes per topic, queue and hour")
    common(p)
    p.add_argument("--csv", help="also write the full table as CSV to this path")
    p = jobs.add_parser("rebuild-index", help="rebuild consumequeue/ and index/ from the CommitLog")
    common(p)
    p.add_argument("--out", required=True, help="directory to write consumequeue/ and index/ into")
    p.add_argument("--cq-file-size", type=_size, default=None, help="ConsumeQueue file size (6000000)")
    p.add_argument("--hash-slots", type=int, default=None, help="index hash slots per file (5000000)")
    p.add_argument("--index-num", type=int, default=None, help="index entries per file (20000000)")
    p.add_argument("--no-index", action="store_true", help="rebuild the ConsumeQueues only")
    p.add_argument("--delay-levels", default=None, help="messageDelayLevel (RocketMQ's default)")


def _session(master: str) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession  # noqa: PLC0415 - only when a job runs

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    session = (
        SparkSession.builder.master(master)
        .appName("rocketq-store-jobs")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


def _store_config(args: argparse.Namespace) -> Any:
    from rocketq.config import StoreConfig  # noqa: PLC0415

    kwargs: dict[str, Any] = {}
    if args.cq_file_size is not None:
        kwargs["mapped_file_size_consume_queue"] = args.cq_file_size
    if args.hash_slots is not None:
        kwargs["max_hash_slot_num"] = args.hash_slots
    if args.index_num is not None:
        kwargs["max_index_num"] = args.index_num
    if args.no_index:
        kwargs["message_index_enable"] = False
    if args.delay_levels is not None:
        kwargs["message_delay_level"] = args.delay_levels
    return StoreConfig(**kwargs)


def _run(args: argparse.Namespace) -> int:
    from rocketq.spark.jobs import api  # noqa: PLC0415 - imports PySpark

    progress = not args.no_progress
    try:
        if not os.path.isdir(args.store_dir):
            raise RocketqError(f"store directory {args.store_dir} does not exist")
        config = _store_config(args) if args.spark_command == "rebuild-index" else None
        spark = _session(args.master)
        if args.spark_command == "verify":
            report = api.verify(spark, args.store_dir, split_bytes=args.split_bytes, progress=progress)
            print(report.summary())
            return 0 if report.ok else 1
        if args.spark_command == "export":
            summary = api.export(
                spark,
                args.store_dir,
                args.out,
                topics=args.topics,
                begin_ms=args.begin,
                end_ms=args.end,
                broker_name=args.broker_name,
                mode=args.mode,
                split_bytes=args.split_bytes,
                progress=progress,
            )
            print(summary.text())
            return 0
        if args.spark_command == "stats":
            df = api.stats(spark, args.store_dir, split_bytes=args.split_bytes, progress=progress)
            rows = df.collect()
            print(api.stats_summary(rows))
            if args.csv:
                df.write.mode("overwrite").option("header", "true").csv(args.csv)
            return 0
        result = api.rebuild_index(
            spark, args.store_dir, args.out, config=config, split_bytes=args.split_bytes, progress=progress
        )
        print(result.text())
        return 0
    except (RocketqError, ValueError) as exc:
        print(f"rocketq spark {args.spark_command}: {exc}", file=sys.stderr)
        return 2


__all__ = ["add_parser"]
