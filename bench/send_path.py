"""The broker's send path by CPU time: what one SEND_MESSAGE_V2 costs the event-loop thread.

    python bench/send_path.py                 # 5 rounds of 20,000 sends
    python bench/send_path.py --rounds 9 --count 40000
    python bench/send_path.py --trace         # with brokerTraceEnable=true (a Pub record per send)
    python bench/send_path.py --metrics       # the same with /metrics served (counting on)
    python bench/send_path.py --metrics-ab    # one broker, rounds alternating counting off / on
    python bench/send_path.py --metrics-ab --handler   # the same, the send handler alone (no sockets)
    python bench/send_path.py --metrics-ab --handler --part wrapper   # one part of counting only
    python bench/send_path.py --metrics-ab --handler --opcodes        # bytecode per send, off / on

A broker runs in this process (``rocketq.testing.InProcessCluster``: the broker ``rocketq
serve`` runs, on an event loop in a thread of its own, ASYNC_FLUSH). A plain blocking socket
sends it SEND_MESSAGE_V2 requests as a Java producer fills them (UNIQ_KEY, WAIT, TAGS; 136 B
bodies; the topic's four queues in turn), encoded before the clock starts, pipelined in
bursts of ``--burst`` frames, and reads every answer. What is measured is the CPU time of the
broker's loop thread (``pthread_getcpuclockid``) per message: decoding, checks, the put, the
answer, and the share of ``recv``/``send`` a burst leaves to each message. Wall-clock latency
on this machine swings with its neighbours (see docs/benchmarks.md); the CPU a thread spent on
its own work moves much less, so this is the figure to compare before and after a change to the
send path (run both in one sitting, interleaved). The dispatch thread is not counted. The
process's CPU per message is printed too: it adds the sending socket, the dispatch thread and,
with ``--trace``, the worker threads that write the trace messages.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from types import FrameType
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from broker import QUEUES, Ids, encode_latency_frames
from rocketq.errors import ResponseCode
from rocketq.remoting.codec import FrameDecoder
from rocketq.remoting.command import RemotingCommand
from rocketq.testing import InProcessCluster

TOPIC = "SendPathBench"


def frames(count: int) -> list[bytes]:
    """``count`` SEND_MESSAGE_V2 frames as DefaultMQProducer sends them (the latency case's)."""
    encoded, _, _ = encode_latency_frames(Ids(), TOPIC, os.urandom(120), count)
    return [bytes(frame) for frame in encoded]


def send_all(sock: socket.socket, batch: list[bytes], burst: int) -> None:
    """Send ``batch`` in bursts, reading every answer of a burst before the next; each must be
    SUCCESS."""
    decoder = FrameDecoder()
    for at in range(0, len(batch), burst):
        chunk = batch[at : at + burst]
        sock.sendall(b"".join(chunk))
        answered = 0
        while answered < len(chunk):
            data = sock.recv(1 << 20)
            if not data:
                raise RuntimeError("the broker closed the connection")
            for cmd in decoder.feed(data):
                if cmd.code != ResponseCode.SUCCESS:
                    raise RuntimeError(f"send failed: code {cmd.code} {cmd.remark}")
                answered += 1


#: What counting on turns on: the request timing of the broker's dispatch ("wrapper": it was a
#: wrapper of each handler), the record of each send (and pull, pop), the store's sampled put
#: timing.
PARTS = ("wrapper", "record", "put")


def opcode_tracer(counts: Counter[str]) -> Callable[[FrameType, str, object], Callable[..., object]]:
    """A ``sys.settrace`` function that counts the bytecode run by each function (by its
    qualified name) into ``counts``."""

    def tracer(frame: FrameType, event: str, arg: object) -> Callable[..., object]:
        frame.f_trace_opcodes, frame.f_trace_lines = True, False
        name = frame.f_code.co_qualname

        def opcode(frame: FrameType, event: str, arg: object) -> Callable[..., object]:
            if event == "opcode":
                counts[name] += 1
            return opcode

        return opcode

    return tracer


def counting_switch(
    cluster: InProcessCluster, parts: Sequence[str] = PARTS
) -> Callable[[bool], Coroutine[Any, Any, None]]:
    """A coroutine function that turns the broker's metrics counting off or on, on its loop:
    the dispatch's request timing, the context's counters, the
    store's put timing (what a broker started with metrics off or on has); ``parts`` limits
    "on" to some of them."""
    broker = cluster.broker(cluster.broker_names[0])
    ctx = broker.ctx
    assert ctx is not None and ctx.metrics is not None
    metrics, put_latency = ctx.metrics, ctx.store.put_latency
    # the bench reaches in on purpose: the dispatch's timing (its attribute before 5bf1d4b was
    # _rpc_ok, so this file runs in an export of the tree before too, for a comparison)
    timing = "_rpc_call" if hasattr(broker, "_rpc_call") else "_rpc_ok"
    rpc, rpc_call = broker._rpc, getattr(broker, timing)

    async def switch(on: bool) -> None:
        timed = on and "wrapper" in parts
        broker._rpc = rpc if timed else None
        setattr(broker, timing, rpc_call if timed else None)
        ctx.metrics = metrics if on and "record" in parts else None
        ctx.store.put_latency = put_latency if on and "put" in parts else None

    return switch


def deferred_counting(cluster: InProcessCluster) -> Callable[[bool], Coroutine[Any, Any, None]]:
    """A coroutine function that finishes, on the loop, the counting a round left for later: a
    send appends a record that the broker folds into the counters once a second
    (``BrokerMetrics.fold``). Rounds call it before their clock stops, so each round pays for
    folding its own records, not whichever round the timer happens to hit (an off round after
    an on round, half of the time: that hid part of the cost of counting)."""
    ctx = cluster.broker(cluster.broker_names[0]).ctx
    assert ctx is not None and ctx.metrics is not None
    metrics = ctx.metrics

    async def settle(on: bool) -> None:
        if on:
            metrics.fold()

    return settle


def paired(by_mode: dict[bool, list[float]]) -> str:
    """The median of the on/off ratios of neighbouring rounds (the i-th off round against the
    i-th on round: off, on, on, off, ... puts each pair next to each other), a figure that a
    drift of the machine's load over the run moves less than the ratio of the two medians."""
    ratios = [on / off for off, on in zip(by_mode[False], by_mode[True], strict=True)]
    return f"paired median {(statistics.median(ratios) - 1) * 100:+.1f} % over {len(ratios)} pairs"


class _Peer:
    """What the send handler reads of its connection."""

    remote_address = "127.0.0.1:40000"
    remote_host = "127.0.0.1"


def handler_ab(rounds: int, count: int, parts: Sequence[str] = PARTS) -> int:
    """``--metrics-ab --handler``: rounds of ``count`` decoded SEND_MESSAGE_V2 requests handed to
    the broker's immediate dispatch one after another on its loop thread (what ``data_received``
    does with a decoded frame), counting off and on alternating as ``--metrics-ab`` does; loop
    thread CPU per send."""
    options: dict[str, object] = {"metrics_exporter_type": "PROM", "metrics_prom_exporter_port": 0}
    with InProcessCluster(broker_options=options) as cluster:
        cluster.create_topic(TOPIC, QUEUES)
        broker = cluster.broker(cluster.broker_names[0])
        switch, settle = counting_switch(cluster, parts), deferred_counting(cluster)
        peer = _Peer()

        def requests() -> list[RemotingCommand]:
            return FrameDecoder().feed(b"".join(frames(count)))

        async def run(counting: bool, batch: list[RemotingCommand]) -> float:
            await switch(counting)
            clock = time.pthread_getcpuclockid(threading.get_ident())
            handle = broker._handle_now  # the bench reaches in on purpose
            began = time.clock_gettime(clock)
            for request in batch:
                if handle(peer, request).__class__ is not bytes:  # type: ignore[arg-type]
                    raise RuntimeError("a send was not answered at once with SUCCESS")
            await settle(counting)
            return (time.clock_gettime(clock) - began) / len(batch) * 1e6

        cluster.call(run(True, requests()))  # warm-up
        by_mode: dict[bool, list[float]] = {False: [], True: []}
        for i in range(rounds * 2):
            counting = i % 4 in (1, 2)
            batch = requests()
            cluster.wait_dispatched()
            by_mode[counting].append(cluster.call(run(counting, batch)))
    off, on = statistics.median(by_mode[False]), statistics.median(by_mode[True])
    print(
        f"SEND_MESSAGE_V2 handler alone: loop-thread CPU per send, counting off median {off:.2f} µs, "
        f"{'+'.join(parts)} "
        f"on {on:.2f} µs: {(on / off - 1) * 100:+.1f} %; {paired(by_mode)}"
    )
    return 0


def handler_opcodes(count: int) -> int:
    """``--metrics-ab --handler --opcodes``: the bytecode the broker's immediate dispatch runs per
    SEND_MESSAGE_V2 with counting off and on (``sys.settrace`` opcode events on the loop thread
    over ``count`` sends after a warm-up, the fold of the counting round's records included), in
    all and by function: a deterministic count, where the CPU time swings with the machine. Code
    compiled into ``rocketq._speedups`` runs no opcodes (its cost shows in the CPU rounds only)."""
    options: dict[str, object] = {"metrics_exporter_type": "PROM", "metrics_prom_exporter_port": 0}
    with InProcessCluster(broker_options=options) as cluster:
        cluster.create_topic(TOPIC, QUEUES)
        broker = cluster.broker(cluster.broker_names[0])
        switch, settle = counting_switch(cluster), deferred_counting(cluster)
        peer = _Peer()

        async def run(counting: bool, batch: list[RemotingCommand], traced: bool) -> Counter[str]:
            await switch(counting)
            counts: Counter[str] = Counter()

            tracer = opcode_tracer(counts)

            handle = broker._handle_now  # the bench reaches in on purpose
            if traced:
                sys.settrace(tracer)
            try:
                for request in batch:
                    if handle(peer, request).__class__ is not bytes:  # type: ignore[arg-type]
                        raise RuntimeError("a send was not answered at once with SUCCESS")
                await settle(counting)
            finally:
                sys.settrace(None)
            return counts

        def requests() -> list[RemotingCommand]:
            return FrameDecoder().feed(b"".join(frames(count)))

        by_mode: dict[bool, Counter[str]] = {}
        for counting in (False, True, False, True):
            cluster.call(run(counting, requests(), traced=False))  # warm-up: caches, specialization
            cluster.wait_dispatched()
            by_mode[counting] = cluster.call(run(counting, requests(), traced=True))
    off, on = by_mode[False], by_mode[True]
    total_off, total_on = sum(off.values()) / count, sum(on.values()) / count
    print(
        f"SEND_MESSAGE_V2 handler alone, opcodes per send over {count} sends: counting off "
        f"{total_off:,.1f}, on {total_on:,.1f} ({total_on - total_off:+.1f}, "
        f"{(total_on / total_off - 1) * 100:+.1f} %); by function, on − off:"
    )
    for name in sorted(set(off) | set(on), key=lambda n: -abs(on[n] - off[n])):
        if on[name] != off[name]:
            print(f"  {(on[name] - off[name]) / count:+8.2f}  {name}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5, help="measured rounds (after one warm-up round)")
    ap.add_argument("--count", type=int, default=20_000, help="sends per round")
    ap.add_argument(
        "--burst", type=int, default=32, help="frames written together, answers read before the next"
    )
    ap.add_argument("--trace", action="store_true", help="run the broker with brokerTraceEnable=true")
    ap.add_argument(
        "--metrics", action="store_true", help="serve /metrics (metricsExporterType=PROM, a free port)"
    )
    ap.add_argument(
        "--metrics-ab",
        action="store_true",
        help="serve /metrics and alternate rounds with counting off and on (the same broker, caches and "
        "machine load for both: the cost of counting without the noise between processes)",
    )
    ap.add_argument(
        "--handler",
        action="store_true",
        help="with --metrics-ab: call the broker's immediate dispatch (ACL check, handler, the request "
        "timing) with decoded requests on its loop thread, no sockets: the send handler alone",
    )
    ap.add_argument(
        "--opcodes",
        action="store_true",
        help="with --handler: count the bytecode per send (sys.settrace) with counting off and on",
    )
    ap.add_argument(
        "--part",
        action="append",
        choices=PARTS,
        help="with --handler: counting on turns on only this part (repeatable; default all)",
    )
    args = ap.parse_args()
    if (args.part or args.opcodes) and not args.handler:
        ap.error("--part and --opcodes go with --handler")
    if args.handler:
        if not args.metrics_ab:
            ap.error("--handler goes with --metrics-ab")
        if args.opcodes:
            given = args.count != ap.get_default("count")
            return handler_opcodes(args.count if given else 200)  # traced: 200 sends unless --count
        return handler_ab(args.rounds, args.count, args.part or PARTS)

    with_metrics = args.metrics or args.metrics_ab
    options: dict[str, object] = {"broker_trace_enable": True} if args.trace else {}
    if with_metrics:
        options.update(metrics_exporter_type="PROM", metrics_prom_exporter_port=0)
    with InProcessCluster(broker_options=options) as cluster:
        cluster.create_topic(TOPIC, QUEUES)

        async def loop_thread_ident() -> int:
            return threading.get_ident()

        clock = time.pthread_getcpuclockid(cluster.call(loop_thread_ident()))
        host, port = cluster.broker_addrs[cluster.broker_names[0]].rsplit(":", 1)
        per_msg: list[float] = []
        process: list[float] = []
        by_mode: dict[bool, list[float]] = {False: [], True: []}
        process_by_mode: dict[bool, list[float]] = {False: [], True: []}
        switch = counting_switch(cluster) if args.metrics_ab else None
        settle = deferred_counting(cluster) if args.metrics_ab else None
        rounds = args.rounds * 2 if args.metrics_ab else args.rounds
        with socket.create_connection((host, int(port))) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            send_all(sock, frames(args.count), args.burst)  # warm-up: topic caches, layouts
            for i in range(rounds):
                counting = i % 4 in (1, 2)  # off, on, on, off, ...: no side of a pair always goes first
                if switch is not None:
                    cluster.call(switch(counting))
                batch = frames(args.count)
                cluster.wait_dispatched()
                cpu0, all0 = time.clock_gettime(clock), time.process_time()
                send_all(sock, batch, args.burst)
                if settle is not None:
                    cluster.call(settle(counting))
                per_msg.append((time.clock_gettime(clock) - cpu0) / args.count * 1e6)
                by_mode[counting].append(per_msg[-1])
                cluster.wait_dispatched()
                process.append((time.process_time() - all0) / args.count * 1e6)
                process_by_mode[counting].append(process[-1])
        cluster.wait_dispatched()
        stored = sum(cluster.store().get_max_offset(TOPIC, q) for q in range(QUEUES))
        traces = cluster.store().get_max_offset("RMQ_SYS_TRACE_TOPIC", 0)
    expected = args.count * (rounds + 1)
    if stored != expected:
        raise RuntimeError(f"{stored} messages in the queues, expected {expected}")
    if args.metrics_ab:
        off, on = statistics.median(by_mode[False]), statistics.median(by_mode[True])
        print(
            f"SEND_MESSAGE_V2, bursts of {args.burst}: broker loop-thread CPU per message, counting off "
            f"{' / '.join(f'{x:.1f}' for x in by_mode[False])} µs (median {off:.1f}), on "
            f"{' / '.join(f'{x:.1f}' for x in by_mode[True])} µs (median {on:.1f}): "
            f"{(on / off - 1) * 100:+.1f} %; {paired(by_mode)}"
        )
        p_off, p_on = statistics.median(process_by_mode[False]), statistics.median(process_by_mode[True])
        print(
            f"process CPU per message, counting off median {p_off:.1f} µs, on {p_on:.1f} µs: "
            f"{(p_on / p_off - 1) * 100:+.1f} %; {paired(process_by_mode)}"
        )
        return 0
    print(
        f"SEND_MESSAGE_V2, bursts of {args.burst}: broker loop-thread CPU per message "
        f"{' / '.join(f'{x:.1f}' for x in per_msg)} µs "
        f"(median {statistics.median(per_msg):.1f}, least {min(per_msg):.1f}); "
        f"process CPU per message median {statistics.median(process):.1f} µs"
        + (f"; {traces} trace messages" if args.trace else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
