"""Broker benchmark over the network: a ``rocketq serve`` child process and Python clients.

    python bench/broker.py            # the full run (about two minutes)
    python bench/broker.py --quick    # shorter cases, less data (about a minute)
    python bench/broker.py --latency-only --quick --rates 5000,1000   # just the latency case
    python bench/broker.py --latency-only --quick --sends-only        # ... and each rate without pullers
    taskset -c 1 python bench/broker.py --latency-only --quick --server-cpus 0   # server on CPU 0 only

What is measured (all on 127.0.0.1, clients are rocketq's asyncio RemotingClient in this
process, the server is ``python -m rocketq.cli serve`` in a child process):

* send throughput: producers that each keep one request in flight (a Java producer's
  synchronous send), 1 and 16 of them (one connection each), 128 B and 1 KiB bodies, ASYNC_FLUSH
  and SYNC_FLUSH, single SEND_MESSAGE_V2 requests and SEND_BATCH_MESSAGE requests of 32
  messages (the batch body of spec §3.8). Every request carries the header and properties a
  Java producer sends (UNIQ_KEY per message, WAIT, TAGS); the topic has 4 queues used round
  robin. Also the request round trip (p50) and the CPU the server and the client spent;
* pull throughput: PULL_MESSAGE batches of 32 over a prefilled topic (page cache hot), one
  puller (one request in flight, queues in turn) and four (one per queue); the client counts
  messages by nextBeginOffset and does not decode the records;
* end-to-end latency under ASYNC_FLUSH at a fixed 5,000 msgs/s (and 1,000 msgs/s for
  reference; ``--rates``): a paced sender of pipelined SEND_MESSAGE_V2 requests (by default
  frames encoded before the clock starts, only the send time written into each as it goes out,
  answers read with the client's frame decoder: the load generator should take as little of the
  two CPUs from the broker as it can; ``--sender client`` builds each request and waits for it
  through ``RemotingClient``/``Connection.request`` instead) and, in a child process,
  one long-polling puller per queue; latency = receive time - send time carried in the body
  (CLOCK_MONOTONIC, the same clock in both processes); also the send → acknowledgement time, to
  tell a slow send path from a slow delivery, and the server's CPU per message in its event-loop
  (main) thread and in its other threads (dispatch, flush), from ``/proc/PID/task/*/stat``, and
  the sender's; ``--sends-only`` adds each rate without pullers (the send path alone). The
  sender reads the host's steal counter every 50 ms: the table gives the steal of the run (time
  the hypervisor kept the vCPUs from running) and the send → ack p99 of the sends made in
  steal-free time (their 50 ms window and the two around it without steal), with the share of
  sends that is (bench/host_stalls.py shows what the host does to a process doing nothing);
* start-up: from spawning ``rocketq serve`` to the "rocketq ready" line and to the first request
  answered with code 0 (interpreter start and imports included), on an empty data directory and
  on the directory the ASYNC cases filled (after a clean stop);
* memory: VmRSS and RssAnon (``/proc/PID/status``) of a freshly started server after it has been
  idle for a moment, and of the ASYNC server after the benchmarks, idle again.

The machine is small and shared (spec/perf-facts.md): the client is one Python process and on
two CPUs it competes with the server, so absolute figures vary from run to run. The floor (a bare
asyncio echo between two processes, measured before and after the run) shows what the machine
allowed at the time; the server CPU column shows how busy the broker itself was (kernel time of
its socket calls included).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import functools
import json
import math
import os
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rocketq.free_ports import free_port

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the other bench scripts

from host_stalls import steal_pct, steal_ticks  # bench/host_stalls.py
from rocketq.errors import RemotingError, ResponseCode
from rocketq.message import encode_properties
from rocketq.protocol import record as rec
from rocketq.protocol.batch import BatchEntry, encode_batch
from rocketq.remoting import RemotingClient, RemotingCommand, RequestCode, create_request
from rocketq.remoting.codec import FrameDecoder, encode
from rocketq.remoting.command import next_opaque

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
BROKER_NAME = "broker-a"
QUEUES = 4
BATCH = 32
CALL_TIMEOUT_S = 30.0
PULL_FLAG_SUSPEND = 0x2
PULL_FLAG_SUBSCRIPTION = 0x4
CLK_TCK = os.sysconf("SC_CLK_TCK")


# -- the server process ---------------------------------------------------------------------


@dataclass
class StartTimes:
    ready_s: float  # spawn → "rocketq ready" line read from its stdout
    served_s: float  # spawn → first request answered with code 0
    printed_s: float  # what the process itself printed (after its imports)


class Server:
    def __init__(self, data_dir: str, flush: str, cpus: set[int] | None = None) -> None:
        self.data_dir = data_dir
        self.flush = flush
        self.cpus = cpus  # run the server on these CPUs only (sched_setaffinity); None: any
        self.proc: subprocess.Popen[bytes] | None = None
        self.addr = ""
        self.output: list[str] = []

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def start(self) -> StartTimes:
        port = free_port()
        self.addr = f"127.0.0.1:{port}"
        cmd = [
            sys.executable,
            "-m",
            "rocketq.cli",
            "serve",
            "--data-dir",
            self.data_dir,
            "--namesrv-port",
            str(free_port()),
            "--broker-port",
            str(port),
            "--broker-name",
            BROKER_NAME,
            "--flush",
            self.flush,
        ]
        env = dict(os.environ)
        env["PYTHONPATH"] = SRC + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        ready = threading.Event()
        ready_at = [0.0]
        t0 = time.perf_counter()
        self.proc = proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        if self.cpus is not None:
            # before the interpreter is up: the threads it starts later inherit the mask
            os.sched_setaffinity(proc.pid, self.cpus)

        def drain() -> None:
            assert proc.stdout is not None
            for raw in proc.stdout:
                line = raw.decode(errors="replace")
                if not ready.is_set() and line.startswith("rocketq ready"):
                    ready_at[0] = time.perf_counter()
                    ready.set()
                self.output.append(line)
            ready.set()

        threading.Thread(target=drain, name="serve-output", daemon=True).start()
        served_at = 0.0
        async with RemotingClient(connect_timeout_s=1.0) as client:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"rocketq serve exited with {proc.returncode}: {''.join(self.output)}")
                if time.perf_counter() - t0 > 30:
                    raise RuntimeError("rocketq serve did not start within 30 s")
                try:
                    r = await client.invoke(
                        self.addr,
                        create_request(RequestCode.GET_MAX_OFFSET, {"topic": "TBW102", "queueId": 0}),
                        1.0,
                    )
                except RemotingError:
                    await asyncio.sleep(0.002)
                    continue
                if r.code == ResponseCode.SUCCESS:
                    served_at = time.perf_counter()
                    break
                await asyncio.sleep(0.002)
        await asyncio.to_thread(ready.wait, 30)
        printed = next((ln for ln in self.output if ln.startswith("rocketq ready in")), "")
        printed_s = float(printed.split()[3]) if printed else float("nan")
        return StartTimes(ready_at[0] - t0, served_at - t0, printed_s)

    async def stop(self) -> int:
        proc = self.proc
        if proc is None:
            return 0
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(proc.wait, 60)
        self.proc = None
        return code

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def cpu_s(self) -> float:
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime

    def memory_kib(self) -> dict[str, int]:
        out = {}
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
                    out[name] = int(value.split()[0])
        return out


# -- requests -------------------------------------------------------------------------------


class Ids:
    """UNIQ_KEY values as a Java producer makes them: 32 hex digits, unique per message."""

    def __init__(self) -> None:
        self.prefix = os.urandom(12).hex().upper()
        self.n = 0

    def next(self) -> str:
        self.n += 1
        return f"{self.prefix}{self.n:08X}"


def send_fields(topic: str, queue_id: int, properties: str, batch: bool = False) -> dict[str, str]:
    """SendMessageRequestHeaderV2 as DefaultMQProducer fills it."""
    return {
        "a": "BenchProducerGroup",
        "b": topic,
        "c": "TBW102",
        "d": str(QUEUES),
        "e": str(queue_id),
        "f": "0",
        "g": str(time.time_ns() // 1_000_000),
        "h": "0",
        "i": properties,
        "j": "0",
        "k": "false",
        "m": "true" if batch else "false",
        "n": BROKER_NAME,
    }


def single_request(ids: Ids, topic: str, queue_id: int, body: bytes) -> RemotingCommand:
    props = encode_properties({"TAGS": "TagA", "UNIQ_KEY": ids.next(), "WAIT": "true"})
    return RemotingCommand(
        RequestCode.SEND_MESSAGE_V2,
        opaque=next_opaque(),
        ext_fields=send_fields(topic, queue_id, props),
        body=body,
    )


def batch_request(ids: Ids, topic: str, queue_id: int, body: bytes, n: int = BATCH) -> RemotingCommand:
    entries = [
        BatchEntry(body, encode_properties({"TAGS": "TagA", "UNIQ_KEY": ids.next(), "WAIT": "true"}).encode())
        for _ in range(n)
    ]
    props = encode_properties({"UNIQ_KEY": ids.next(), "WAIT": "true"})
    return RemotingCommand(
        RequestCode.SEND_BATCH_MESSAGE,
        opaque=next_opaque(),
        ext_fields=send_fields(topic, queue_id, props, batch=True),
        body=encode_batch(entries),
    )


def pull_request(topic: str, queue_id: int, offset: int, *, suspend: bool = False) -> RemotingCommand:
    flag = PULL_FLAG_SUBSCRIPTION | (PULL_FLAG_SUSPEND if suspend else 0)
    return RemotingCommand(
        RequestCode.PULL_MESSAGE,
        opaque=next_opaque(),
        ext_fields={
            "consumerGroup": "BenchConsumerGroup",
            "topic": topic,
            "queueId": str(queue_id),
            "queueOffset": str(offset),
            "maxMsgNums": str(BATCH),
            "sysFlag": str(flag),
            "commitOffset": "0",
            "suspendTimeoutMillis": "15000",
            "subVersion": "0",
            "subscription": "*",
            "expressionType": "TAG",
        },
    )


async def call_ok(client: RemotingClient, addr: str, request: RemotingCommand) -> RemotingCommand:
    r = await client.invoke(addr, request, CALL_TIMEOUT_S)
    if r.code != ResponseCode.SUCCESS:
        raise RuntimeError(f"request {request.code} answered {r.code}: {r.remark}")
    return r


async def create_topic(client: RemotingClient, addr: str, topic: str) -> None:
    await call_ok(
        client,
        addr,
        create_request(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {"topic": topic, "readQueueNums": QUEUES, "writeQueueNums": QUEUES, "perm": 6},
        ),
    )


async def max_offsets(client: RemotingClient, addr: str, topic: str) -> list[int]:
    out = []
    for q in range(QUEUES):
        r = await call_ok(
            client, addr, create_request(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": q})
        )
        out.append(int(r.ext_fields["offset"]))
    return out


async def until_dispatched(client: RemotingClient, addr: str, topic: str, total: int) -> None:
    deadline = time.monotonic() + 60
    while sum(await max_offsets(client, addr, topic)) < total:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{topic}: not all {total} messages dispatched within 60 s")
        await asyncio.sleep(0.01)


def percentile(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, round(p / 100 * len(sorted_values)) - 1))
    return sorted_values[k]


# -- send throughput ------------------------------------------------------------------------


@dataclass
class SendResult:
    flush: str
    producers: int
    body: int
    batch: bool
    msgs: int
    seconds: float
    rtt_p50_us: float
    server_cpu_s: float
    client_cpu_s: float

    @property
    def rate(self) -> float:
        return self.msgs / self.seconds


async def send_case(
    server: Server, case_no: int, producers: int, body_size: int, batch: bool, seconds: float
) -> SendResult:
    addr = server.addr
    topic = f"SendBench{case_no}"
    body = os.urandom(body_size)
    ids = Ids()
    make: Callable[[Ids, str, int, bytes], RemotingCommand] = batch_request if batch else single_request
    per_request = BATCH if batch else 1
    clients = [RemotingClient() for _ in range(producers)]
    try:
        await create_topic(clients[0], addr, topic)
        stop_at = 0.0
        rtts: list[float] = []

        async def producer(n: int, client: RemotingClient) -> int:
            sent = 0
            queue_id = n % QUEUES
            loop = asyncio.get_running_loop()
            while loop.time() < stop_at:
                request = make(ids, topic, queue_id, body)
                began = time.perf_counter()
                r = await client.invoke(addr, request, CALL_TIMEOUT_S)
                rtts.append(time.perf_counter() - began)
                if r.code != ResponseCode.SUCCESS:
                    raise RuntimeError(f"send answered {r.code}: {r.remark}")
                sent += per_request
                queue_id = (queue_id + 1) % QUEUES
            return sent

        loop = asyncio.get_running_loop()
        result = SendResult(server.flush, producers, body_size, batch, 0, 0.0, 0.0, 0.0, 0.0)
        for measured in (False, True):
            rtts.clear()
            duration = seconds if measured else min(0.5, seconds)
            cpu0, ccpu0 = server.cpu_s(), time.process_time()
            start = loop.time()
            stop_at = start + duration
            counts = await asyncio.gather(*(producer(i, c) for i, c in enumerate(clients)))
            if measured:
                result.seconds = loop.time() - start
                result.msgs = sum(counts)
                result.server_cpu_s = server.cpu_s() - cpu0
                result.client_cpu_s = time.process_time() - ccpu0
                result.rtt_p50_us = statistics.median(rtts) * 1e6
        return result
    finally:
        for c in clients:
            await c.close()


# -- pull throughput ------------------------------------------------------------------------


@dataclass
class PullResult:
    body: int
    pullers: int
    msgs: int
    nbytes: int
    seconds: float
    server_cpu_s: float

    @property
    def rate(self) -> float:
        return self.msgs / self.seconds


async def prefill(server: Server, topic: str, body_size: int, total: int) -> None:
    body = os.urandom(body_size)
    ids = Ids()
    per_queue = total // QUEUES
    async with RemotingClient() as client:
        await create_topic(client, server.addr, topic)

        async def fill(q: int) -> None:
            left = per_queue
            while left > 0:
                n = min(BATCH, left)
                await call_ok(client, server.addr, batch_request(ids, topic, q, body, n))
                left -= n

        await asyncio.gather(*(fill(q) for q in range(QUEUES)))
        await until_dispatched(client, server.addr, topic, per_queue * QUEUES)


async def pull_case(server: Server, topic: str, body_size: int, pullers: int) -> PullResult:
    addr = server.addr
    async with RemotingClient() as client:
        ends = await max_offsets(client, addr, topic)
        nbytes = 0

        async def drain(queues: list[int]) -> int:
            nonlocal nbytes
            offsets = dict.fromkeys(queues, 0)
            got = 0
            while offsets:
                for q in list(offsets):
                    r = await client.invoke(addr, pull_request(topic, q, offsets[q]), CALL_TIMEOUT_S)
                    if r.code != ResponseCode.SUCCESS:
                        raise RuntimeError(f"pull answered {r.code}: {r.remark}")
                    nxt = int(r.ext_fields["nextBeginOffset"])
                    got += nxt - offsets[q]
                    nbytes += len(r.body)
                    offsets[q] = nxt
                    if nxt >= ends[q]:
                        del offsets[q]
            return got

        groups = [list(range(QUEUES))] if pullers == 1 else [[q] for q in range(QUEUES)]
        cpu0 = server.cpu_s()
        start = time.perf_counter()
        counts = await asyncio.gather(*(drain(g) for g in groups))
        seconds = time.perf_counter() - start
        return PullResult(body_size, pullers, sum(counts), nbytes, seconds, server.cpu_s() - cpu0)


# -- end-to-end latency ---------------------------------------------------------------------


@dataclass
class LatencyResult:
    rate: float
    achieved: float
    samples: int
    p50_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    max_lag_ms: float
    ack_p50_ms: float
    ack_p99_ms: float
    loop_cpu_us: float  # server CPU per message sent, event-loop (main) thread
    other_cpu_us: float  # ... all its other threads (dispatch, flush, workers)
    sender_cpu_us: float  # CPU of this (the sending) process per message
    pullers: bool = True  # False: sends only, no end-to-end figures
    sender: str = "frames"  # "frames": FrameSender; "client": RemotingClient
    steal_pct: float = math.nan  # host steal during the sends, % of all vCPUs' time
    clean_ack_p99_ms: float = math.nan  # send → ack p99 of sends in steal-free windows
    clean_share: float = math.nan  # ... and the share of measured sends they are


STEAL_SAMPLE_S = 0.05  # how often the sender reads the host's steal counter


def steal_figures(run: LatencyRun) -> tuple[float, float, float]:
    """(host steal during the sends as % of all vCPUs' time, send → ack p99 of the sends made in
    steal-free windows, the share of measured sends those are). A window is the time between two
    samples of the steal counter (``STEAL_SAMPLE_S``); a send counts as steal-free when its
    window, the one before (no backlog left by a stall) and the one after (its answer came in
    steal-free time too) saw no steal."""
    samples = run.steal
    if len(samples) < 2:
        return math.nan, math.nan, math.nan
    span_s = (samples[-1][0] - samples[0][0]) / 1e9
    pct = steal_pct(samples[-1][1] - samples[0][1], span_s) if span_s else math.nan
    # Window i is [samples[i], samples[i + 1]); it is clean when windows i - 1 .. i + 1 saw no steal.
    clean: list[tuple[int, int]] = []
    for i in range(1, len(samples) - 2):
        if samples[i + 2][1] == samples[i - 1][1]:
            clean.append((samples[i][0], samples[i + 1][0]))
    starts = [a for a, _ in clean]

    def in_clean(sent: int) -> bool:
        i = bisect.bisect_right(starts, sent) - 1
        return i >= 0 and sent < clean[i][1]

    picked = sorted(ms for ms, sent in zip(run.acks, run.acks_sent_ns, strict=True) if in_clean(sent))
    if not picked:
        return pct, math.nan, 0.0
    return pct, percentile(picked, 99), len(picked) / len(run.acks)


def thread_cpu_s(pid: int) -> tuple[float, float]:
    """CPU seconds (utime + stime) of a process's main thread and of all its other threads."""
    main = other = 0.0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK
        if int(tid) == pid:
            main += cpu
        else:
            other += cpu
    return main, other


async def pull_child_main(addr: str, topic: str, starts: list[int], total: int, measure_from: int) -> None:
    """The pullers of the latency case, in their own process (``--pull-child``): one long-polling
    pull loop per queue until ``total`` messages arrived; prints one JSON line with the
    latencies (ms) of the messages numbered ``measure_from`` and up."""
    latencies: list[float] = []
    received = 0
    done = asyncio.Event()
    async with RemotingClient() as puller:

        async def pull_loop(q: int) -> None:
            nonlocal received
            offset = starts[q]
            while True:
                r = await puller.invoke(addr, pull_request(topic, q, offset, suspend=True), CALL_TIMEOUT_S)
                now = time.monotonic_ns()
                if r.code == ResponseCode.SUCCESS:
                    pos = 0
                    body = r.body
                    while pos < len(body):
                        view = rec.decode_record(body, pos, check_crc=False)
                        assert view.body is not None
                        sent_ns, seq = struct.unpack_from(">qq", view.body)
                        if seq >= measure_from:
                            latencies.append((now - sent_ns) / 1e6)
                        received += 1
                        pos += view.size
                    if received >= total:
                        done.set()
                elif r.code not in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY):
                    raise RuntimeError(f"pull answered {r.code}: {r.remark}")
                offset = int(r.ext_fields["nextBeginOffset"])

        await puller.connection(addr)
        pullers = [asyncio.create_task(pull_loop(q)) for q in range(QUEUES)]
        print("ready", flush=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), 120)
        for pull_task in pullers:
            pull_task.cancel()
        for pull_task in pullers:
            with contextlib.suppress(asyncio.CancelledError, RemotingError):
                await pull_task
    print(json.dumps({"received": received, "latencies": latencies}), flush=True)


class FrameSender(asyncio.Protocol):
    """The latency case's load generator at its cheapest: requests encoded before the clock
    starts (only the send time is written into each body as it goes out), responses parsed by
    the client's own frame decoder. On this two-vCPU machine every microsecond the sender spends
    is taken from the broker; a producer on another host would cost the broker nothing."""

    def __init__(self, on_response: Callable[[RemotingCommand], None]) -> None:
        self.decoder = FrameDecoder()
        self.on_response = on_response

    def data_received(self, data: bytes) -> None:
        for cmd in self.decoder.feed(data):
            self.on_response(cmd)


def encode_latency_frames(
    ids: Ids, topic: str, pad: bytes, total: int
) -> tuple[list[bytearray], int, dict[int, int]]:
    """SEND_MESSAGE_V2 frames for the latency case, the body's first 8 bytes left for the send
    time: (frames, offset of the body from a frame's end, opaque → sequence number)."""
    frames: list[bytearray] = []
    seq_of: dict[int, int] = {}
    body_len = 16 + len(pad)
    for seq in range(total):
        request = single_request(ids, topic, seq % QUEUES, struct.pack(">qq", 0, seq) + pad)
        frames.append(bytearray(encode(request)))
        seq_of[request.opaque] = seq
    return frames, body_len, seq_of


async def latency_case(
    server: Server,
    rate: float,
    seconds: float,
    warmup_s: float = 0.5,
    *,
    pullers: bool = True,
    sender_kind: str = "frames",
) -> LatencyResult:
    """Sender here, pullers in a child process (so decoding what arrives does not delay the
    sender's loop); both stamp CLOCK_MONOTONIC (``time.monotonic_ns``), one clock for the
    machine, so latency = receive time in the child - send time in the body. Without
    ``pullers``: the sends alone (send → ack latency, nothing consumed meanwhile)."""
    addr = server.addr
    topic = "LatencyBench"
    total = int(rate * (seconds + warmup_s))
    measure_from = int(rate * warmup_s)
    async with RemotingClient() as sender:
        await create_topic(sender, addr, topic)
        starts = await max_offsets(sender, addr, topic)
        child = None
        if pullers:
            child = await asyncio.create_subprocess_exec(
                sys.executable,
                os.path.abspath(__file__),
                "--pull-child",
                json.dumps([addr, topic, starts, total, measure_from]),
                stdout=asyncio.subprocess.PIPE,
            )
        try:
            if child is not None:
                assert child.stdout is not None
                if (await child.stdout.readline()).strip() != b"ready":
                    raise RuntimeError("the pulling child process did not start")
            run = LatencyRun(server, topic, rate, total, measure_from)
            failures, acks = run.failures, run.acks
            if sender_kind == "frames":
                elapsed, max_lag, sender_cpu, cpu0 = await _send_frames(run)
            else:
                elapsed, max_lag, sender_cpu, cpu0 = await _send_with_client(run, sender)
            if failures:
                raise RuntimeError(f"{len(failures)} sends failed, e.g. {failures[0]}")
            if child is not None:
                assert child.stdout is not None
                report = json.loads(await asyncio.wait_for(child.stdout.read(), 60))
            else:
                await wait_dispatched(sender, addr, topic, starts, total)
                report = {"received": total, "latencies": [math.nan]}
            cpu1 = thread_cpu_s(server.pid)  # everything sent has arrived: all its work is done
        finally:
            if child is not None:
                try:  # it exits by itself once everything arrived
                    await asyncio.wait_for(child.wait(), 5)
                except TimeoutError:
                    child.kill()
                    await child.wait()
    received = int(report["received"])
    if received < total:
        raise RuntimeError(f"only {received} of {total} messages arrived")
    lat = sorted(float(x) for x in report["latencies"])
    steal_pct, clean_p99, clean_share = steal_figures(run)
    acks.sort()
    return LatencyResult(
        rate,
        total / elapsed,
        len(lat),
        percentile(lat, 50),
        percentile(lat, 99),
        percentile(lat, 99.9),
        lat[-1],
        max_lag * 1000,
        percentile(acks, 50),
        percentile(acks, 99),
        (cpu1[0] - cpu0[0]) / total * 1e6,
        (cpu1[1] - cpu0[1]) / total * 1e6,
        sender_cpu / total * 1e6,
        pullers,
        sender_kind,
        steal_pct,
        clean_p99,
        clean_share,
    )


@dataclass
class LatencyRun:
    """One latency case's sends: what to send, and what the answers said."""

    server: Server
    topic: str
    rate: float
    total: int
    measure_from: int  # sequence numbers below this are warm-up, not measured
    ids: Ids = field(default_factory=Ids)
    pad: bytes = field(default_factory=lambda: os.urandom(120))
    acks: list[float] = field(default_factory=list)  # send → ack, ms
    acks_sent_ns: list[int] = field(default_factory=list)  # send time of each of ``acks``
    steal: list[tuple[int, int]] = field(default_factory=list)  # (monotonic ns, steal ticks)
    failures: list[str] = field(default_factory=list)


async def _send_frames(run: LatencyRun) -> tuple[float, float, float, tuple[float, float]]:
    """Paced sends of pre-encoded frames on a connection of their own: (elapsed s, max lag s,
    sender CPU s, server thread CPU at the start)."""
    total, measure_from, acks, failures = run.total, run.measure_from, run.acks, run.failures
    acks_sent = run.acks_sent_ns
    frames, body_from_end, seq_of = encode_latency_frames(run.ids, run.topic, run.pad, total)
    sent_at = [0] * total
    outstanding = [total]

    def on_response(cmd: RemotingCommand) -> None:
        seq = seq_of.pop(cmd.opaque, None)
        if seq is None:
            return
        outstanding[0] -= 1
        if cmd.code != ResponseCode.SUCCESS:
            failures.append(f"code {cmd.code}: {cmd.remark}")
        elif seq >= measure_from:
            acks.append((time.monotonic_ns() - sent_at[seq]) / 1e6)
            acks_sent.append(sent_at[seq])

    loop = asyncio.get_running_loop()
    host, port = run.server.addr.rsplit(":", 1)
    transport, _ = await loop.create_connection(lambda: FrameSender(on_response), host, int(port))
    pack_ns = struct.Struct(">q").pack_into
    write = transport.write

    def send_one(seq: int) -> None:
        frame = frames[seq]
        sent_at[seq] = sent_ns = time.monotonic_ns()
        pack_ns(frame, len(frame) - body_from_end, sent_ns)
        write(frame)

    try:
        return await paced_sends(run, send_one, lambda: outstanding[0])
    finally:
        transport.close()


async def _send_with_client(
    run: LatencyRun, sender: RemotingClient
) -> tuple[float, float, float, tuple[float, float]]:
    """Paced sends through rocketq's RemotingClient, a request built per message."""
    acks, failures, measure_from = run.acks, run.failures, run.measure_from
    in_flight: set[asyncio.Future[RemotingCommand]] = set()
    # A future per send and a done callback (Connection.request), no task: the cheapest way the
    # client has.
    conn = await sender.connection(run.server.addr)

    def sent_done(fut: asyncio.Future[RemotingCommand], sent_ns: int, seq: int) -> None:
        in_flight.discard(fut)
        if fut.exception() is not None:
            failures.append(repr(fut.exception()))
        elif fut.result().code != ResponseCode.SUCCESS:
            failures.append(f"code {fut.result().code}")
        elif seq >= measure_from:
            acks.append((time.monotonic_ns() - sent_ns) / 1e6)
            run.acks_sent_ns.append(sent_ns)

    def send_one(seq: int) -> None:
        sent_ns = time.monotonic_ns()
        body = struct.pack(">qq", sent_ns, seq) + run.pad
        fut = conn.request(single_request(run.ids, run.topic, seq % QUEUES, body))
        in_flight.add(fut)
        fut.add_done_callback(functools.partial(sent_done, sent_ns=sent_ns, seq=seq))

    return await paced_sends(run, send_one, lambda: len(in_flight))


async def paced_sends(
    run: LatencyRun, send_one: Callable[[int], None], unanswered: Callable[[], int]
) -> tuple[float, float, float, tuple[float, float]]:
    """Call ``send_one(seq)`` for seq 0 .. total-1 at ``run.rate`` per second (those fallen due are
    sent together when the loop wakes late), then wait up to 30 s until ``unanswered()`` is 0.
    Returns (elapsed s, max lag behind the schedule s, this process's CPU s, the server's
    thread CPU at the start)."""
    rate, total = run.rate, run.total
    loop = asyncio.get_running_loop()
    cpu0 = thread_cpu_s(run.server.pid)
    sender_cpu0 = time.process_time()
    t0 = loop.time()
    sent = 0
    max_lag = 0.0
    steal = run.steal
    steal.append((time.monotonic_ns(), steal_ticks()))
    next_sample = t0 + STEAL_SAMPLE_S
    while sent < total:
        now = loop.time()
        if now >= next_sample:
            steal.append((time.monotonic_ns(), steal_ticks()))
            next_sample = now + STEAL_SAMPLE_S
        due = min(total, int((now - t0) * rate) + 1)
        if due - sent > 1:
            max_lag = max(max_lag, (due - sent - 1) / rate)
        while sent < due:
            send_one(sent)
            sent += 1
        await asyncio.sleep(max(0.0, t0 + sent / rate - loop.time()))
    elapsed = loop.time() - t0
    deadline = time.monotonic() + 30
    while unanswered() > 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.005)
    steal.append((time.monotonic_ns(), steal_ticks()))
    sender_cpu = time.process_time() - sender_cpu0
    if unanswered() > 0:
        run.failures.append(f"{unanswered()} sends unanswered")
    return elapsed, max_lag, sender_cpu, cpu0


async def wait_dispatched(
    client: RemotingClient, addr: str, topic: str, starts: list[int], total: int
) -> None:
    """Until the ConsumeQueues hold the ``total`` messages sent (so the server's CPU figures
    include dispatching them)."""
    deadline = time.monotonic() + 60
    while True:
        ends = await max_offsets(client, addr, topic)
        if sum(ends) - sum(starts) >= total or time.monotonic() > deadline:
            return
        await asyncio.sleep(0.01)


# -- the floor ------------------------------------------------------------------------------

ECHO_SERVER = """
import asyncio, sys

class Echo(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.transport.write(data)

async def main():
    server = await asyncio.get_running_loop().create_server(Echo, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

asyncio.run(main())
"""


class _EchoCaller(asyncio.Protocol):
    def __init__(self, size: int) -> None:
        self.size = size
        self.got = 0
        self.waiter: asyncio.Future[None] | None = None

    def data_received(self, data: bytes) -> None:
        self.got += len(data)
        if self.got >= self.size and self.waiter is not None and not self.waiter.done():
            self.got -= self.size
            self.waiter.set_result(None)


async def echo_floor(seconds: float) -> float:
    """Round trips/s of a bare asyncio.Protocol echo in another process, one frame in flight,
    the size of a SEND_MESSAGE_V2 request with a 128 B body: what this machine's loopback and
    event loops allow at best right now."""
    frame = b"x" * 420
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", ECHO_SERVER, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        port = int((await proc.stdout.readline()).decode())
        loop = asyncio.get_running_loop()
        transport, caller = await loop.create_connection(lambda: _EchoCaller(len(frame)), "127.0.0.1", port)
        count = 0
        start = loop.time()
        while loop.time() - start < seconds:
            caller.waiter = loop.create_future()
            transport.write(frame)
            await caller.waiter
            count += 1
        rate = count / (loop.time() - start)
        transport.close()
        return rate
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        await proc.wait()


# -- the run --------------------------------------------------------------------------------


def dir_mib(path: str) -> float:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(root, name)).st_blocks * 512
    return total / (1 << 20)


async def idle_memory(server: Server, idle_s: float) -> dict[str, int]:
    await asyncio.sleep(idle_s)  # "idle for a moment": periodic tasks have run, nothing else
    return server.memory_kib()


async def run(args: argparse.Namespace, root: str) -> None:
    quick = args.quick
    seconds = 1.0 if quick else 3.0
    pull_total = 40_000 if quick else 160_000
    latency_s = 3.0 if quick else 10.0
    starts = 3 if quick else 7
    rates = [float(r) for r in args.rates.split(",") if r]
    began = time.perf_counter()
    floors = [await echo_floor(1.0)]

    # start-up and memory of a fresh server
    fresh: list[StartTimes] = []
    fresh_mem: dict[str, int] = {}
    for i in range(starts):
        server = Server(os.path.join(root, f"start-{i}"), "ASYNC_FLUSH")
        try:
            fresh.append(await server.start())
            if i == 0:
                fresh_mem = await idle_memory(server, args.idle)
        finally:
            await server.stop()

    results: list[SendResult] = []
    pulls: list[PullResult] = []
    latencies: list[LatencyResult] = []
    loaded_mem: dict[str, int] = {}
    case_no = 0
    async_dir = os.path.join(root, "async")
    for flush in ("ASYNC_FLUSH", "SYNC_FLUSH"):
        server = Server(os.path.join(root, "async" if flush == "ASYNC_FLUSH" else "sync"), flush)
        await server.start()
        try:
            for batch in (False, True):
                for body in (128, 1024):
                    for producers in (1, 16):
                        case_no += 1
                        r = await send_case(server, case_no, producers, body, batch, seconds)
                        results.append(r)
                        kind = "batch" if batch else "single"
                        print(
                            f"  send {flush} {producers} producers {body} B {kind}: {r.rate:,.0f} msgs/s",
                            file=sys.stderr,
                        )
            if flush == "ASYNC_FLUSH":
                for body in (128, 1024):
                    topic = f"PullBench{body}"
                    await prefill(server, topic, body, pull_total)
                    for pullers in (1, 4):
                        p = await pull_case(server, topic, body, pullers)
                        pulls.append(p)
                        print(f"  pull {body} B {pullers} pullers: {p.rate:,.0f} msgs/s", file=sys.stderr)
                for rate in rates:
                    lr = await latency_case(server, rate, latency_s, sender_kind=args.sender)
                    latencies.append(lr)
                    print(
                        f"  latency at {rate:,.0f}/s: p50 {lr.p50_ms:.2f} ms p99 {lr.p99_ms:.2f} ms",
                        file=sys.stderr,
                    )
                loaded_mem = await idle_memory(server, args.idle)
        finally:
            code = await server.stop()
            if code != 0:
                print(f"rocketq serve ({flush}) exited with {code}", file=sys.stderr)

    # start-up on the directory the ASYNC cases filled
    data_mib = dir_mib(async_dir)
    restart: list[StartTimes] = []
    for _ in range(max(1, starts // 2)):
        server = Server(async_dir, "ASYNC_FLUSH")
        try:
            restart.append(await server.start())
        finally:
            await server.stop()

    floors.append(await echo_floor(1.0))
    print(f"# rocketq broker benchmark{' (--quick)' if quick else ''}")
    print()
    print(
        f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}; client and `rocketq serve` on "
        f"127.0.0.1; {seconds:g} s per send case after a 0.5 s warm-up; one request in flight per "
        "producer"
    )
    print()
    print(
        "Floor (bare asyncio echo between two processes, one 420 B frame in flight), before / after "
        f"the run: {floors[0]:,.0f} / {floors[1]:,.0f} round trips/s"
    )
    print()
    print("## Send throughput")
    print()
    print(
        "| flush | producers | body | request | msgs/s | MB/s (bodies) | request p50 µs "
        "| server CPU | server CPU µs/msg | client CPU |"
    )
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(
            f"| {r.flush} | {r.producers} | {r.body} B | {'batch of 32' if r.batch else 'single'} "
            f"| {r.rate:,.0f} | {r.rate * r.body / 1e6:.1f} | {r.rtt_p50_us:,.0f} "
            f"| {r.server_cpu_s / r.seconds:.0%} | {r.server_cpu_s / r.msgs * 1e6:.1f} "
            f"| {r.client_cpu_s / r.seconds:.0%} |"
        )
    print()
    print(f"## Pull throughput (batches of {BATCH}, {pull_total:,} messages prefilled, page cache hot)")
    print()
    print("| body | pullers | msgs/s | MB/s (records) | server CPU µs/msg |")
    print("|---:|---:|---:|---:|---:|")
    for p in pulls:
        print(
            f"| {p.body} B | {p.pullers} | {p.rate:,.0f} | {p.nbytes / p.seconds / 1e6:.1f} "
            f"| {p.server_cpu_s / p.msgs * 1e6:.1f} |"
        )
    print()
    if latencies:
        print_latency_table(latencies, latency_s)
    print("## Start-up of `rocketq serve` (medians)")
    print()
    print("| data directory | runs | spawn → ready printed | spawn → first request served | as printed |")
    print("|---|---:|---:|---:|---:|")
    for name, times in (
        ("empty", fresh),
        (f"{data_mib:,.0f} MiB (after the ASYNC cases, clean stop)", restart),
    ):
        print(
            f"| {name} | {len(times)} | {statistics.median(t.ready_s for t in times) * 1000:.0f} ms "
            f"| {statistics.median(t.served_s for t in times) * 1000:.0f} ms "
            f"| {statistics.median(t.printed_s for t in times) * 1000:.0f} ms |"
        )
    print()
    print(f"## Memory of `rocketq serve` (idle {args.idle:g} s)")
    print()
    print("| state | VmRSS | RssAnon | RssFile | VmHWM |")
    print("|---|---:|---:|---:|---:|")
    for name, mem in (("fresh, empty data directory", fresh_mem), ("after the ASYNC benchmarks", loaded_mem)):
        if mem:
            print(
                f"| {name} | {mem['VmRSS'] / 1024:.1f} MiB | {mem['RssAnon'] / 1024:.1f} MiB "
                f"| {mem['RssFile'] / 1024:.1f} MiB | {mem['VmHWM'] / 1024:.1f} MiB |"
            )
    print()
    print(f"total run time {time.perf_counter() - began:.0f} s")


def print_latency_table(latencies: list[LatencyResult], latency_s: float) -> None:
    sender = latencies[0].sender if latencies else "frames"
    how = "pre-encoded frames" if sender == "frames" else "rocketq's RemotingClient"
    print(
        f"## End-to-end latency (ASYNC_FLUSH, 136 B bodies, {latency_s:g} s per rate after a 0.5 s "
        f"warm-up, one pipelining sender ({how}), {QUEUES} long-polling pullers in a second "
        "process; 'sends only': no pullers)"
    )
    print()
    print(
        "| rate | samples | p50 | p99 | p99.9 | max | send → ack p50 | send → ack p99 "
        "| sender behind schedule (max) | server CPU µs/msg: loop thread / other threads "
        "| sender CPU µs/msg | host steal | send → ack p99, steal-free windows (share of sends) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")

    def ms(value: float) -> str:
        return "—" if math.isnan(value) else f"{value:.2f} ms"

    for lr in latencies:
        rate = f"{lr.rate:,.0f}/s" + ("" if lr.pullers else ", sends only")
        samples = f"{lr.samples:,}" if lr.pullers else "—"
        print(
            f"| {rate} | {samples} | {ms(lr.p50_ms)} | {ms(lr.p99_ms)} "
            f"| {ms(lr.p999_ms)} | {ms(lr.max_ms)} | {lr.ack_p50_ms:.2f} ms "
            f"| {lr.ack_p99_ms:.2f} ms | {lr.max_lag_ms:.1f} ms "
            f"| {lr.loop_cpu_us:.0f} / {lr.other_cpu_us:.0f} | {lr.sender_cpu_us:.0f} "
            f"| {lr.steal_pct:.1f} % | {ms(lr.clean_ack_p99_ms)} ({lr.clean_share:.0%}) |"
        )
    print()


async def run_latency_only(args: argparse.Namespace, root: str) -> None:
    """``--latency-only``: the floor, the latency case at each rate, the floor again."""
    latency_s = 3.0 if args.quick else 10.0
    rates = [float(r) for r in args.rates.split(",") if r]
    floors = [await echo_floor(1.0)]
    latencies: list[LatencyResult] = []
    server = Server(os.path.join(root, "latency"), "ASYNC_FLUSH", cpus=args.server_cpus)
    await server.start()
    try:
        for rate in rates:
            latencies.append(await latency_case(server, rate, latency_s, sender_kind=args.sender))
            if args.sends_only:
                latencies.append(
                    await latency_case(server, rate, latency_s, pullers=False, sender_kind=args.sender)
                )
    finally:
        await server.stop()
    floors.append(await echo_floor(1.0))
    print(f"# rocketq broker benchmark, latency case only{' (--quick)' if args.quick else ''}")
    print()
    print(
        "Floor (bare asyncio echo between two processes, one 420 B frame in flight), before / after "
        f"the run: {floors[0]:,.0f} / {floors[1]:,.0f} round trips/s"
    )
    print()
    print_latency_table(latencies, latency_s)


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--pull-child":
        addr, topic, starts, total, measure_from = json.loads(sys.argv[2])
        asyncio.run(pull_child_main(addr, topic, starts, total, measure_from))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="shorter cases and less data")
    ap.add_argument(
        "--rates",
        default="5000,1000",
        help="end-to-end latency send rates, msgs/s (the first is the headline)",
    )
    ap.add_argument(
        "--latency-only",
        action="store_true",
        help="only the end-to-end latency case (and the floor), on one fresh ASYNC_FLUSH server",
    )
    ap.add_argument(
        "--sends-only",
        action="store_true",
        help="with --latency-only: also run each rate with no pullers (send → ack alone)",
    )
    ap.add_argument(
        "--sender",
        choices=("frames", "client"),
        default="frames",
        help="latency case load generator: pre-encoded frames (cheapest) or rocketq's RemotingClient",
    )
    ap.add_argument(
        "--server-cpus",
        type=lambda text: {int(c) for c in text.split(",")},
        default=None,
        help="with --latency-only: run the server on these CPUs only, e.g. 0 (comma-separated); "
        "run the benchmark itself under taskset to keep it off them",
    )
    ap.add_argument("--idle", type=float, default=2.0, help="seconds idle before reading memory")
    ap.add_argument("--dir", default=None, help="directory for the data directories (default: a temp dir)")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="rocketq-bench-broker-", dir=args.dir)
    try:
        asyncio.run(run_latency_only(args, root) if args.latency_only else run(args, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
