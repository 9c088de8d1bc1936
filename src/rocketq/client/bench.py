"""Client benchmark: ``rocketq bench produce`` and ``rocketq bench consume``.

Like RocketMQ's benchmark tools (``Producer.sh``/``Consumer.sh``), the commands push messages
through the whole client stack against a running cluster and print, every second, the rate and
latency percentiles of the last second, then a summary::

    rocketq bench produce -t RocketqBench -s 128 -w 16 -n 100000 [--mode sync|async|batch]
    rocketq bench consume -t RocketqBench -g BenchmarkConsumer -n 100000

=================  ==========================================================================
mode               what one unit of work is
=================  ==========================================================================
``sync``           ``-w`` threads, each calling the blocking ``Producer.send`` in a loop
``async``          ``-w`` coroutines on one event loop, each awaiting ``AsyncProducer.send``
``batch``          ``-w`` coroutines, each awaiting ``AsyncProducer.send_batch`` of ``-b`` (32)
=================  ==========================================================================

Producer latency is the time from calling send to its result (the batch's, for every message of a
batch). Consumer latency is end to end: receive time minus the message's born timestamp (both
wall-clock milliseconds; meaningful when producer and consumer run on one machine). The
consumer is a push consumer (concurrent listener, clustering) that starts at the first offset
when its group is new. A run stops after ``-n`` messages or ``-d`` seconds, whichever is first.
The topic is created (``--queues``, 4, on every broker of the only cluster) unless
``--no-create``. ``--json`` prints the summary as JSON and no per-second lines. The arguments are
defined in :mod:`rocketq.bench_cli`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, TextIO

from rocketq.bench_cli import DEFAULT_NAMESRV_ADDR, MODES
from rocketq.client.admin import Admin
from rocketq.client.aio import AsyncProducer
from rocketq.client.push import AsyncPushConsumer, ConsumeStatus
from rocketq.client.sync import Producer
from rocketq.errors import ConfigError, RocketqError
from rocketq.message import Message, MessageExt


@dataclass(frozen=True, slots=True)
class BenchConfig:
    namesrv_addr: str = DEFAULT_NAMESRV_ADDR
    topic: str = "RocketqBench"
    size_bytes: int = 128
    concurrency: int = 16
    count: int = 100_000
    duration_s: float = 60.0
    mode: str = "async"
    batch_size: int = 32
    group: str = "BenchmarkConsumer"
    queues: int = 4
    create_topic: bool = True
    report_interval_s: float = 1.0

    def check(self) -> None:
        problems = []
        if self.mode not in MODES:
            problems.append(f"mode {self.mode!r} must be one of {', '.join(MODES)}")
        for name in ("size_bytes", "concurrency", "count", "batch_size", "queues"):
            if getattr(self, name) <= 0:
                problems.append(f"{name}={getattr(self, name)} must be > 0")
        if self.duration_s <= 0:
            problems.append(f"duration_s={self.duration_s} must be > 0")
        if problems:
            raise ConfigError("invalid benchmark config: " + "; ".join(problems))


def percentile(sorted_values: list[float], pct: float) -> float:
    """The ``pct`` percentile (nearest rank) of already sorted values; 0 when empty."""
    if not sorted_values:
        return 0.0
    rank = math.ceil(pct / 100 * len(sorted_values))
    return sorted_values[max(0, min(len(sorted_values), rank) - 1)]


@dataclass(frozen=True, slots=True)
class Summary:
    what: str
    messages: int
    errors: int
    elapsed_s: float
    msgs_per_s: float
    latency_avg_ms: float
    latency_p50_ms: float
    latency_p99_ms: float
    latency_p999_ms: float
    latency_max_ms: float

    def line(self) -> str:
        return (
            f"{self.what}: {self.messages:,} msgs in {self.elapsed_s:.1f} s = {self.msgs_per_s:,.0f} msgs/s, "
            f"{self.errors} errors; latency ms avg {self.latency_avg_ms:.2f} p50 {self.latency_p50_ms:.2f} "
            f"p99 {self.latency_p99_ms:.2f} p99.9 {self.latency_p999_ms:.2f} max {self.latency_max_ms:.2f}"
        )


class Meter:
    """Counts messages and latencies (thread-safe); per-interval lines and a summary."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._lock = threading.Lock()
        self._all: list[float] = []
        self._window: list[float] = []
        self.messages = 0
        self.errors = 0
        self.started = time.monotonic()
        self._window_start = self.started

    def record(self, latency_ms: float, messages: int = 1) -> None:
        with self._lock:
            self.messages += messages
            self._all.extend([latency_ms] * messages)
            self._window.extend([latency_ms] * messages)

    def error(self) -> None:
        with self._lock:
            self.errors += 1

    def interval_line(self) -> str:
        now = time.monotonic()
        with self._lock:
            window, self._window = self._window, []
            start, self._window_start = self._window_start, now
            total, errors = self.messages, self.errors
        window.sort()
        rate = len(window) / max(now - start, 1e-9)
        return (
            f"[{now - self.started:5.0f} s] {self.what} {rate:>10,.0f} msgs/s  "
            f"total {total:,}  errors {errors}  "
            f"latency ms p50 {percentile(window, 50):.2f} p99 {percentile(window, 99):.2f} "
            f"max {(window[-1] if window else 0.0):.2f}"
        )

    def summary(self) -> Summary:
        elapsed = time.monotonic() - self.started
        with self._lock:
            values = sorted(self._all)
            messages, errors = self.messages, self.errors
        return Summary(
            self.what,
            messages,
            errors,
            elapsed,
            messages / max(elapsed, 1e-9),
            sum(values) / len(values) if values else 0.0,
            percentile(values, 50),
            percentile(values, 99),
            percentile(values, 99.9),
            values[-1] if values else 0.0,
        )


async def _report(meter: Meter, interval_s: float, out: TextIO | None) -> None:
    while True:
        await asyncio.sleep(interval_s)
        if out is not None:
            print(meter.interval_line(), file=out, flush=True)


def _body(size_bytes: int) -> bytes:
    return (b"rocketq-bench-" * (size_bytes // 14 + 1))[:size_bytes]


class _Budget:
    """Hands out message counts until ``count`` is reached or the deadline passed."""

    def __init__(self, count: int, duration_s: float) -> None:
        self.left = count
        self.deadline = time.monotonic() + duration_s
        self._lock = threading.Lock()

    def take(self, n: int) -> int:
        with self._lock:
            if self.left <= 0 or time.monotonic() >= self.deadline:
                return 0
            got = min(n, self.left)
            self.left -= got
            return got


def _ensure_topic(cfg: BenchConfig) -> None:
    if cfg.create_topic:
        with Admin(cfg.namesrv_addr) as admin:
            admin.create_topic(cfg.topic, cfg.queues, cfg.queues)


async def run_produce(cfg: BenchConfig, out: TextIO | None = sys.stdout) -> Summary:
    """Send ``cfg.count`` messages (or for ``cfg.duration_s``) and measure send latency."""
    cfg.check()
    await asyncio.to_thread(_ensure_topic, cfg)
    meter = Meter(f"produce/{cfg.mode}")
    body = _body(cfg.size_bytes)
    budget = _Budget(cfg.count, cfg.duration_s)
    reporter = asyncio.get_running_loop().create_task(_report(meter, cfg.report_interval_s, out))
    try:
        if cfg.mode == "sync":
            await asyncio.to_thread(_produce_threads, cfg, body, budget, meter)
        else:
            async with AsyncProducer("BenchmarkProducer", namesrv_addr=cfg.namesrv_addr) as producer:
                # the first send fetches the route; keep it out of the figures
                await producer.send(Message(cfg.topic, body))
                meter.started = time.monotonic()
                await asyncio.gather(
                    *(_produce_async(cfg, producer, body, budget, meter) for _ in range(cfg.concurrency))
                )
    finally:
        reporter.cancel()
    return meter.summary()


def _produce_threads(cfg: BenchConfig, body: bytes, budget: _Budget, meter: Meter) -> None:
    with Producer("BenchmarkProducer", namesrv_addr=cfg.namesrv_addr) as producer:
        producer.send(Message(cfg.topic, body))
        meter.started = time.monotonic()

        def work() -> None:
            while budget.take(1):
                began = time.perf_counter()
                try:
                    producer.send(Message(cfg.topic, body))
                except RocketqError:
                    meter.error()
                    continue
                meter.record((time.perf_counter() - began) * 1000)

        threads = [threading.Thread(target=work, name=f"bench-send-{i}") for i in range(cfg.concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


async def _produce_async(
    cfg: BenchConfig, producer: AsyncProducer, body: bytes, budget: _Budget, meter: Meter
) -> None:
    per_call = cfg.batch_size if cfg.mode == "batch" else 1
    while n := budget.take(per_call):
        began = time.perf_counter()
        try:
            if cfg.mode == "batch":
                await producer.send_batch([Message(cfg.topic, body) for _ in range(n)])
            else:
                await producer.send(Message(cfg.topic, body))
        except RocketqError:
            meter.error()
            continue
        meter.record((time.perf_counter() - began) * 1000, n)


async def run_consume(cfg: BenchConfig, out: TextIO | None = sys.stdout) -> Summary:
    """Consume ``cfg.count`` messages (or for ``cfg.duration_s``) with a push consumer and
    measure end-to-end latency (receive time - born timestamp)."""
    cfg.check()
    meter = Meter("consume")
    done = asyncio.Event()
    loop = asyncio.get_running_loop()

    def listen(msgs: list[MessageExt]) -> ConsumeStatus:
        now_ms = time.time_ns() / 1_000_000
        for m in msgs:
            meter.record(max(0.0, now_ms - m.born_timestamp))
        if meter.messages >= cfg.count:
            loop.call_soon(done.set)
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = AsyncPushConsumer(
        cfg.group,
        namesrv_addr=cfg.namesrv_addr,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        consume_thread_nums=cfg.concurrency,
        consume_message_batch_max_size=cfg.batch_size,
    )
    consumer.subscribe(cfg.topic, "*")
    consumer.register_listener(listen)
    reporter = loop.create_task(_report(meter, cfg.report_interval_s, out))
    try:
        await consumer.start()
        meter.started = time.monotonic()
        try:
            await asyncio.wait_for(done.wait(), cfg.duration_s)
        except TimeoutError:
            pass
        summary = meter.summary()
    finally:
        reporter.cancel()
        await consumer.shutdown()
    return summary


# -- command line ------------------------------------------------------------------------------
def _config(args: argparse.Namespace) -> BenchConfig:
    return BenchConfig(
        namesrv_addr=args.namesrv_addr,
        topic=args.topic,
        size_bytes=args.size,
        concurrency=args.threads,
        count=args.count,
        duration_s=args.duration_s,
        mode=getattr(args, "mode", "async"),
        batch_size=args.batch_size,
        group=getattr(args, "group", "BenchmarkConsumer"),
        queues=args.queues,
        create_topic=not getattr(args, "no_create", False),
    )


def run_command(args: argparse.Namespace) -> int:
    """Run ``rocketq bench produce|consume`` as parsed by :mod:`rocketq.bench_cli`."""
    return _run(run_produce if args.bench_command == "produce" else run_consume, args)


def _run(runner: Callable[[BenchConfig, TextIO | None], Any], args: argparse.Namespace) -> int:
    try:
        cfg = _config(args)
        summary: Summary = asyncio.run(runner(cfg, None if args.json else sys.stdout))
    except RocketqError as exc:
        print(f"rocketq bench {args.bench_command}: error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(asdict(summary), indent=2, sort_keys=True))
    else:
        print(summary.line())
    return 0 if summary.errors == 0 else 2


__all__ = ["BenchConfig", "Meter", "Summary", "percentile", "run_command", "run_consume", "run_produce"]
