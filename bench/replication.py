"""DLedger replication: the Raft driver, whole brokers (serve --dledger 3 vs serve), fail-over times.

    python bench/replication.py                       # everything (a few minutes)
    python bench/replication.py --quick               # a smoke run of every part (about a minute)
    python bench/replication.py --parts broker,broker-failover --baseline-src /tmp/before/src
    python bench/replication.py --parts driver --seconds 2 --policies page_cache

Driver (``--parts driver``): every member of a group runs in this process (one event loop, real
sockets on 127.0.0.1, real files in a temporary directory, ``--dir`` to choose where);
``--concurrency`` appenders each await one ``RaftGroupLog.append`` at a time of a
``--size``-byte record (the record names its own physical offset, as a CommitLog record does)
for ``--seconds``. The group of one is the same driver with one member, so the difference is the
replication: the peer transport and the followers' writes, which here share the one core. Batch
push is on (``enableBatchPush=true``, 64 KiB batches). Figures: appends/s and the p50/p99 latency
of an append, from the call to its acknowledgement.

Node fail-over (``--parts node-failover``): three ``python -m rocketq.ha.node`` processes; a
client appends in sequence to the leader; after 50 acknowledged appends the leader is killed with
SIGKILL, and the time from the kill to the first acknowledged append on the new leader is
reported (``--failovers`` rounds, each on a fresh group), with the election timeout and heartbeat.

Broker level (``--parts broker``): ``rocketq serve`` (one broker) and ``rocketq serve --dledger 3``
(``-c`` adds ``enableBatchPush=true``; the timing serve writes into the confs is printed) run at
once, for each ``--flushes`` mode; with ``--baseline-src DIR`` a second group runs from another
source tree (before/after a change in one run). ``--flush-file-intervals 10,500`` runs a group per
value of ``flushFileInterval`` (ms; the members' fsync cadence under ASYNC_FLUSH, DLedger's 10 ms by
default; 500 is the single broker's ``flushIntervalCommitLog``), all in the same run. The same
client for all: one ``AsyncProducer`` per server, N senders (``--broker-clients``) each awaiting one
send at a time, bodies of ``--broker-sizes`` (``--auto-batch``: the producers coalesce concurrent
sends, for every server alike); cases interleaved over ``--rounds`` rounds of ``--broker-seconds``,
the servers' order alternating. Figures: acknowledged sends/s, p50/p99 of a send, CPU per message
(utime + stime from ``/proc/PID/stat``) of all the server's processes, of the process that takes the
sends (the master) and of this client process, the group's rate over the single broker's (per round
too) and, for three machines, the single broker's server CPU over the leader's.

Broker fail-over (``--parts broker-failover``): a fresh ``serve --dledger 3`` per round; a
producer sends in sequence through the name server; after 50 acknowledged sends the master
broker process gets SIGKILL; the time to the first acknowledged send after it (on the new
master) is reported (``--broker-failovers`` rounds), with the timing serve wrote.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from rocketq.client import AsyncAdmin, AsyncProducer, Message, SendStatus
from rocketq.errors import RocketqError
from rocketq.free_ports import free_port
from rocketq.ha import node as ctl
from rocketq.ha.driver import RaftGroupLog
from rocketq.ha.driver_config import DLedgerConfig
from rocketq.ha.raft_types import AckPolicy, Role
from rocketq.ha.replicated_log import AppendStatus
from rocketq.remoting.client import RemotingClient
from rocketq.remoting.codes import RequestCode
from rocketq.remoting.command import RemotingCommand, create_request

OFFSET = struct.Struct(">q")
T = TypeVar("T")


async def _leader(members: list[RaftGroupLog], timeout_s: float = 10.0) -> RaftGroupLog:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        leaders = [m for m in members if m.state.role is Role.LEADER]
        if len(leaders) == 1:
            return leaders[0]
        await asyncio.sleep(0.01)
    raise SystemExit("no leader elected within the deadline")


async def appends(
    root: str, n: int, policy: AckPolicy, args: argparse.Namespace
) -> tuple[float, float, float, int]:
    ids = [f"n{i}" for i in range(n)]
    peers = tuple((i, f"127.0.0.1:{free_port()}") for i in ids)
    data = tempfile.mkdtemp(dir=root)
    members = [
        RaftGroupLog(
            DLedgerConfig(
                self_id=i,
                peers=peers,
                data_dir=data,
                seed=k,
                ack_policy=policy,
                election_timeout_ms=1000,
                heartbeat_interval_ms=100,
                enable_batch_push=True,
                max_batch_bytes=64 * 1024,
                data_file_size=256 << 20,
            )
        )
        for k, i in enumerate(ids)
    ]
    for m in members:
        await m.start()
    try:
        leader = await _leader(members)
        payload = b"x" * (args.size - OFFSET.size)
        lat: list[float] = []
        failed: list[AppendStatus] = []
        loop = asyncio.get_running_loop()
        end = loop.time() + args.seconds

        async def appender() -> None:
            while loop.time() < end:
                t0 = time.perf_counter()
                r = await leader.append(lambda off: OFFSET.pack(off) + payload)
                if r.status is not AppendStatus.OK:  # counted (a quorum timeout on a stalled disk)
                    failed.append(r.status)
                    continue
                lat.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        await asyncio.gather(*(appender() for _ in range(args.concurrency)))
        took = time.perf_counter() - t0
        lat.sort()
        return len(lat) / took, 1000 * lat[len(lat) // 2], 1000 * lat[int(len(lat) * 0.99)], len(failed)
    finally:
        for m in members:
            await m.stop()
        shutil.rmtree(data, ignore_errors=True)


async def failover(root: str, timeout_ms: int, heartbeat_ms: int) -> float:
    ids = ["n0", "n1", "n2"]
    addr = {i: f"127.0.0.1:{free_port()}" for i in ids}
    peers = ";".join(f"{i}-{a}" for i, a in addr.items())
    data = tempfile.mkdtemp(dir=root)
    procs: dict[str, subprocess.Popen[bytes]] = {}
    for k, i in enumerate(ids):
        cmd = [sys.executable, "-m", "rocketq.ha.node", "--self", i, "--peers", peers, "--data-dir", data]
        cmd += [
            "--seed",
            str(k),
            "--election-timeout-ms",
            str(timeout_ms),
            "--heartbeat-ms",
            str(heartbeat_ms),
        ]
        cmd += ["--data-file-size", str(16 << 20)]
        procs[i] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    client = RemotingClient()

    async def call(i: str, code: int, body: bytes = b"") -> dict[str, str] | None:
        try:
            r = await client.invoke(addr[i], RemotingCommand.create_request(code, None, body), 3.0)
        except (RocketqError, OSError):
            return None
        return r.ext_fields

    async def find_leader(among: list[str]) -> str:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for i in among:
                st = await call(i, ctl.CTL_STATUS)
                if st is not None and st["role"] == "LEADER":
                    return i
            await asyncio.sleep(0.01)
        raise SystemExit("no leader")

    try:
        target = await find_leader(ids)
        acked = 0
        killed_at = 0.0
        victim = ""
        while True:
            st = await call(target, ctl.CTL_APPEND, b"payload")
            if st is not None and st["status"] == "OK":
                if killed_at:
                    return time.monotonic() - killed_at
                acked += 1
                if acked == 50:
                    victim = target
                    procs[victim].kill()
                    procs[victim].wait()
                    killed_at = time.monotonic()
            elif st is not None and st.get("leader") in addr and st.get("leader") != victim:
                target = st["leader"]
            elif killed_at:
                target = await find_leader([i for i in ids if i != victim])
    finally:
        await client.close()
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs.values():
            p.wait(10)
        shutil.rmtree(data, ignore_errors=True)


# -- broker level: rocketq serve (one broker) against rocketq serve --dledger 3 ------------------

BROKER_NAME = "broker-a"
TOPIC = "ReplBench"
QUEUES = 4
SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
_BROKER_LINE = re.compile(r"^\s+broker\s+(\S+:\d+)\s+\(\S+, brokerId (\d+), (\w+), pid (\d+)\)", re.MULTILINE)
_CONF_KEYS = (
    "dLegerElectionTimeoutMs",
    "dLegerHeartbeatIntervalMs",
    "enableBatchPush",
    "flushDiskType",
    "flushFileInterval",
)


def proc_cpu_s(pid: int) -> float:
    """utime + stime of a process, all its threads (``/proc/PID/stat``); 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Serve:
    """``rocketq serve`` (one broker and the name server in one process) or ``rocketq serve
    --dledger 3`` (the name server in this process, three broker processes) in a child process."""

    def __init__(
        self,
        root: str,
        flush: str,
        members: int,
        src: str = SRC,
        tag: str = "",
        conf: dict[str, str] | None = None,
    ) -> None:
        self.members = members
        self.extra_conf = dict(conf or {})  # more broker.conf keys for a group's members
        self.src = src
        self.tag = tag
        self.flush = flush
        self.data = tempfile.mkdtemp(prefix=f"serve{members}-", dir=root)
        self.proc: subprocess.Popen[bytes] | None = None
        self.namesrv = ""
        self.brokers: dict[str, tuple[str, int]] = {}  # address -> (self id, pid)
        self.conf: dict[str, str] = {}  # what serve wrote into broker-n0.conf (group only)
        self.leader_pid = 0

    @property
    def label(self) -> str:
        return ("1 broker" if self.members == 1 else f"{self.members} brokers") + self.tag

    def pids(self) -> list[int]:
        assert self.proc is not None
        return [self.proc.pid, *(pid for _, pid in self.brokers.values())]

    def cpu_s(self) -> float:
        return sum(proc_cpu_s(pid) for pid in self.pids())

    def leader_cpu_s(self) -> float:
        """The process that takes the sends: the master broker (the serve process for one)."""
        return proc_cpu_s(self.leader_pid)

    async def start(self) -> None:
        namesrv_port = free_port()
        cmd = [sys.executable, "-m", "rocketq.cli", "serve", "--data-dir", self.data, "--flush", self.flush]
        cmd += ["--namesrv-port", str(namesrv_port), "--grpc-port", "-1", "--broker-name", BROKER_NAME]
        if self.members > 1:
            conf = os.path.join(self.data, "base.conf")
            with open(conf, "w", encoding="utf-8") as f:
                f.write("enableBatchPush=true\n")
                f.writelines(f"{k}={v}\n" for k, v in self.extra_conf.items())
            cmd += ["--dledger", str(self.members), "--broker-port", "0", "-c", conf]
        else:
            cmd += ["--broker-port", str(free_port())]
        env = dict(os.environ)
        env["PYTHONPATH"] = self.src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        out = os.path.join(self.data, "serve.log")
        with open(out, "wb") as log_file:
            self.proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 90
        text = ""
        while "rocketq ready" not in text:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"rocketq serve did not start: {text[-3000:]}")
            await asyncio.sleep(0.05)
            with open(out, encoding="utf-8", errors="replace") as f:
                text = f.read()
        await asyncio.sleep(0.1)  # the rest of the banner
        with open(out, encoding="utf-8", errors="replace") as f:
            text = f.read()
        self.namesrv = f"127.0.0.1:{namesrv_port}"
        for addr, _bid, sid, pid in _BROKER_LINE.findall(text):
            self.brokers[addr] = (sid, int(pid))
        if self.members > 1:
            if len(self.brokers) != self.members:
                raise SystemExit(f"banner without {self.members} brokers: {text}")
            with open(os.path.join(self.data, "broker-n0.conf"), encoding="utf-8") as f:
                props = dict(line.strip().split("=", 1) for line in f if "=" in line)
            self.conf = {k: props[k] for k in _CONF_KEYS if k in props}
        async with AsyncAdmin(self.namesrv) as admin:
            await admin.create_topic(TOPIC, QUEUES, QUEUES, cluster="DefaultCluster")
            await _poll(lambda: _routed(admin), "the topic's route")
        self.leader_pid = self.brokers[await self.master()][1] if self.members > 1 else self.proc.pid

    async def master(self) -> str:
        async with AsyncAdmin(self.namesrv) as admin:

            async def find() -> str | None:
                try:
                    group = (await admin.cluster_info()).broker_addr_table.get(BROKER_NAME)
                except RocketqError:
                    return None
                return None if group is None else group.broker_addrs.get(0)

            return await _poll(find, "a master")

    async def stop(self) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(proc.wait, 60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for _, pid in self.brokers.values():  # serve stops its brokers; make sure
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.data, ignore_errors=True)


async def _poll(probe: Callable[[], Awaitable[T | None]], what: str, timeout_s: float = 60.0) -> T:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = await probe()
        if got:
            return got
        await asyncio.sleep(0.05)
    raise SystemExit(f"no {what} within {timeout_s:.0f} s")


async def _routed(admin: AsyncAdmin) -> bool:
    try:
        return len((await admin.topic_route(TOPIC)).queue_datas) > 0
    except RocketqError:
        return False


@dataclass
class Sample:
    """The sends of one case against one server, summed over rounds."""

    sends: int = 0
    seconds: float = 0.0
    server_cpu_s: float = 0.0
    leader_cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    latencies: list[float] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)  # per round
    errors: list[str] = field(default_factory=list)  # failed sends (after the producer's retries)

    @property
    def rate(self) -> float:
        return self.sends / self.seconds if self.seconds else 0.0

    def pct_ms(self, p: float) -> float:
        lat = sorted(self.latencies)
        return 1000 * lat[min(len(lat) - 1, int(len(lat) * p))] if lat else float("nan")

    def us_per_msg(self, cpu_s: float) -> float:
        return 1e6 * cpu_s / self.sends if self.sends else float("nan")


async def send_round(
    serve: Serve, producer: AsyncProducer, body: bytes, concurrency: int, seconds: float, into: Sample
) -> None:
    """``concurrency`` senders, each awaiting one ``AsyncProducer.send`` at a time, for ``seconds``."""
    loop = asyncio.get_running_loop()
    lat: list[float] = []
    end = loop.time() + seconds

    async def sender() -> None:
        while loop.time() < end:
            t0 = time.perf_counter()
            try:
                r = await producer.send(Message(TOPIC, body))
            except RocketqError as exc:  # counted, and shown with the figures
                into.errors.append(f"{serve.label}: {exc}")
                continue
            if r.status is not SendStatus.SEND_OK:
                raise SystemExit(f"send not OK: {r}")
            lat.append(time.perf_counter() - t0)

    cpu0, lcpu0, ccpu0, t0 = serve.cpu_s(), serve.leader_cpu_s(), time.process_time(), time.perf_counter()
    await asyncio.gather(*(sender() for _ in range(concurrency)))
    took = time.perf_counter() - t0
    into.server_cpu_s += serve.cpu_s() - cpu0
    into.leader_cpu_s += serve.leader_cpu_s() - lcpu0
    into.client_cpu_s += time.process_time() - ccpu0
    into.sends += len(lat)
    into.seconds += took
    into.latencies.extend(lat)
    into.rates.append(len(lat) / took)


async def broker_sends(root: str, args: argparse.Namespace) -> None:
    sizes = [int(s) for s in args.broker_sizes.split(",")]
    clients = [int(c) for c in args.broker_clients.split(",")]
    print(
        f"\nbroker level: rocketq serve (1 broker) against rocketq serve --dledger 3 (enableBatchPush=true),"
        f" both running, cases interleaved; {args.rounds} round(s) of {args.broker_seconds:g} s per case;"
        " client: one AsyncProducer per server, N senders each awaiting one send at a time"
        + (", producer auto-batching on" if args.auto_batch else "")
    )
    for flush in args.flushes.split(","):
        servers = [Serve(root, flush, 1)]
        intervals = [i.strip() for i in args.flush_file_intervals.split(",") if i.strip()]
        for ms in intervals or [""]:
            extra = {"flushFileInterval": ms} if ms else {}
            tag = f", fsync {ms} ms" if len(intervals) > 1 else ""
            servers.append(Serve(root, flush, 3, tag=tag, conf=extra))
        if args.baseline_src:  # the same group on another source tree, e.g. before a change
            # with one --flush-file-intervals value, at that cadence too
            base_conf = {"flushFileInterval": intervals[0]} if len(intervals) == 1 else {}
            base_src = os.path.abspath(args.baseline_src)
            servers.append(Serve(root, flush, 3, base_src, " (base)", conf=base_conf))
        producers: list[AsyncProducer] = []
        try:
            for s in servers:
                await s.start()
            for s in servers[1:]:
                print(f"{flush}: {s.label}: conf " + ", ".join(f"{k}={v}" for k, v in s.conf.items()))
            for s in servers:
                p = AsyncProducer(
                    f"ReplBench{len(producers)}PG", namesrv_addr=s.namesrv, auto_batch=args.auto_batch
                )
                await p.start()
                producers.append(p)
                for _ in range(50):  # routes, connections, the first files
                    try:
                        await p.send(Message(TOPIC, b"w" * 128))
                    except RocketqError as exc:
                        print(f"  warm-up send to {s.label} failed: {exc}")
            cpu0 = [s.cpu_s() for s in servers]
            await asyncio.sleep(1.0)
            idle = ", ".join(
                f"{s.label} {1000 * (s.cpu_s() - c):.0f} ms" for s, c in zip(servers, cpu0, strict=True)
            )
            print(f"server CPU while idle, per second (ticks, heartbeats, dispatch polls): {idle}")
            cases = [(c, size) for c in clients for size in sizes]
            samples = {(case, s.label): Sample() for case in cases for s in servers}
            for rnd in range(args.rounds):
                for case in cases:
                    order = list(zip(servers, producers, strict=True))
                    if (rnd + cases.index(case)) % 2:
                        order.reverse()
                    for s, p in order:
                        body = b"b" * case[1]
                        await send_round(s, p, body, case[0], args.broker_seconds, samples[(case, s.label)])
            head = f"{'flush':<11} {'senders':>7} {'body':>5} {'servers':<24} {'acks/s':>7} {'p50 ms':>7}"
            print(
                head
                + f" {'p99 ms':>7} {'srv µs/msg':>10} {'ldr µs/msg':>10} {'cli µs/msg':>10}"
                + "  group/1: rate (rounds), srv CPU; 1 broker's srv µs / ldr µs"
            )
            for case in cases:
                one = samples[(case, servers[0].label)]
                for s in servers:
                    x = samples[(case, s.label)]
                    line = f"{flush:<11} {case[0]:>7} {case[1]:>5} {s.label:<24} {x.rate:>7.0f}"
                    line += (
                        f" {x.pct_ms(0.5):>7.2f} {x.pct_ms(0.99):>7.2f} {x.us_per_msg(x.server_cpu_s):>10.0f}"
                    )
                    line += f" {x.us_per_msg(x.leader_cpu_s):>10.0f} {x.us_per_msg(x.client_cpu_s):>10.0f}"
                    if s.members > 1:
                        per_round = "/".join(f"{g / o:.2f}" for g, o in zip(x.rates, one.rates, strict=True))
                        cpu = x.us_per_msg(x.server_cpu_s) / one.us_per_msg(one.server_cpu_s)
                        hosts = one.us_per_msg(one.server_cpu_s) / x.us_per_msg(x.leader_cpu_s)
                        line += f"  {x.rate / one.rate:.2f} ({per_round}), {cpu:.2f}x; {hosts:.2f}"
                    print(line, flush=True)
                    if x.errors:
                        print(f"    {len(x.errors)} failed sends, the first: {x.errors[0]}")
        finally:
            for p in producers:
                await p.shutdown()
            for s in servers:
                await s.stop()


async def broker_failover(root: str, args: argparse.Namespace) -> None:
    """SIGKILL of the master broker while a producer sends in sequence through the name server:
    the time to the first acknowledged send after it (on the new master), each round a fresh group."""
    took: list[float] = []
    failed: list[int] = []
    for rnd in range(args.broker_failovers):
        serve = Serve(root, "ASYNC_FLUSH", 3)
        producer: AsyncProducer | None = None
        try:
            await serve.start()
            if rnd == 0:
                c = serve.conf
                t, hb = int(c["dLegerElectionTimeoutMs"]), int(c["dLegerHeartbeatIntervalMs"])
                print(
                    f"\nbroker fail-over: rocketq serve --dledger 3, election timeout {t} ms (randomized to"
                    f" [{t}, {2 * t}) ms), heartbeat {hb} ms (as serve writes them into broker-n*.conf);"
                    f" target <= 3 x {t} = {3 * t} ms"
                )
            master = await serve.master()
            # the followers copy topics from the master every few seconds: wait until both have it,
            # so the new master serves the topic at once
            followers = [a for a in serve.brokers if a != master]
            async with RemotingClient() as client:
                for addr in followers:

                    async def has_topic(a: str = addr) -> bool:
                        r = await client.invoke(
                            a, create_request(RequestCode.GET_ALL_TOPIC_CONFIG, None), 3.0
                        )
                        return TOPIC.encode() in (r.body or b"")

                    await _poll(has_topic, f"the topic on the follower {addr}")
            producer = AsyncProducer(
                "ReplBenchKillPG", namesrv_addr=serve.namesrv, route_refresh_interval_ms=500
            )
            await producer.start()
            acked = errors = 0
            killed_at = 0.0
            while True:
                try:
                    r = await producer.send(Message(TOPIC, b"k" * 128))
                    ok = r.status is SendStatus.SEND_OK
                except RocketqError:
                    ok = False
                if not ok:
                    errors += 1
                    continue
                if killed_at:
                    took.append(time.monotonic() - killed_at)
                    failed.append(errors)
                    break
                acked += 1
                if acked == 50:
                    os.kill(serve.brokers[master][1], signal.SIGKILL)
                    killed_at = time.monotonic()
                    errors = 0
        finally:
            if producer is not None:
                await producer.shutdown()
            await serve.stop()
    shown = ", ".join(f"{1000 * x:.0f}" for x in took)
    print(f"  SIGKILL of the master broker -> first acknowledged send (new master): {shown} ms")
    print(f"  median {1000 * statistics.median(took):.0f} ms; failed sends in between: {failed}")


PARTS = ("driver", "node-failover", "broker", "broker-failover")


async def main(args: argparse.Namespace) -> None:
    parts = args.parts.split(",")
    if unknown := set(parts) - set(PARTS):
        raise SystemExit(f"--parts: unknown {sorted(unknown)}; choose from {','.join(PARTS)}")
    root = args.dir or tempfile.mkdtemp(prefix="rocketq-bench-repl-")
    os.makedirs(root, exist_ok=True)
    try:
        if "driver" in parts:
            print(
                f"appends: {args.size} B records, {args.concurrency} appenders, {args.seconds:g} s per case"
            )
            print(f"{'ack policy':<12} {'members':>7} {'appends/s':>10} {'p50 ms':>8} {'p99 ms':>8}")
            for name in args.policies.split(","):
                policy = AckPolicy(name)
                for n in (1, 3):
                    rate, p50, p99, failed = await appends(root, n, policy, args)
                    row = f"{policy.value:<12} {n:>7} {rate:>10.0f} {p50:>8.2f} {p99:>8.2f}"
                    print(row + (f"  ({failed} appends not acknowledged)" if failed else ""), flush=True)
        if "node-failover" in parts and args.failovers:
            t, hb = args.election_timeout_ms, args.heartbeat_ms
            print(f"fail-over: election timeout {t} ms (randomized to [{t}, {2 * t}) ms), heartbeat {hb} ms")
            took = [await failover(root, t, hb) for _ in range(args.failovers)]
            shown = ", ".join(f"{1000 * x:.0f}" for x in took)
            print(f"  SIGKILL of the leader -> first acknowledged append on the new leader: {shown} ms")
            print(f"  median {1000 * statistics.median(took):.0f} ms")
        if "broker" in parts:
            await broker_sends(root, args)
        if "broker-failover" in parts and args.broker_failovers:
            await broker_failover(root, args)
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--quick", action="store_true", help="a smoke run: short cases, one round, one fail-over each"
    )
    p.add_argument("--parts", default=",".join(PARTS), help="what to run (default %(default)s)")
    p.add_argument("--seconds", type=float, default=3.0, help="driver: seconds per case")
    p.add_argument("--size", type=int, default=256, help="driver: record size")
    p.add_argument("--concurrency", type=int, default=32, help="driver: appenders")
    p.add_argument("--policies", default="page_cache,fsync", help="driver: ack policies")
    p.add_argument("--failovers", type=int, default=3, help="node fail-over rounds")
    p.add_argument("--election-timeout-ms", type=int, default=500, help="node fail-over")
    p.add_argument("--heartbeat-ms", type=int, default=100, help="node fail-over")
    p.add_argument("--flushes", default="ASYNC_FLUSH,SYNC_FLUSH", help="broker: flushDiskType cases")
    p.add_argument("--broker-sizes", default="128,1024", help="broker: body sizes")
    p.add_argument("--broker-clients", default="32,1", help="broker: concurrent senders per case")
    p.add_argument("--broker-seconds", type=float, default=2.0, help="broker: seconds per case and round")
    p.add_argument("--rounds", type=int, default=2, help="broker: interleaved rounds")
    p.add_argument(
        "--baseline-src",
        default=None,
        help="broker: also run the group from this source tree (a src/ directory), e.g. before a change",
    )
    p.add_argument(
        "--auto-batch",
        action="store_true",
        help="broker: the producers auto-batch (AsyncProducer(auto_batch=True)) for every server alike",
    )
    p.add_argument(
        "--flush-file-intervals",
        default="",
        help="broker: a group per flushFileInterval in ms (e.g. 10,500; default one group, DLedger's 10 ms)",
    )
    p.add_argument("--broker-failovers", type=int, default=3, help="broker fail-over rounds")
    p.add_argument("--dir", default=None, help="where the data goes (default: a temporary directory)")
    a = p.parse_args()
    if a.quick:
        a.seconds, a.failovers, a.policies = 1.0, 1, "page_cache"
        a.broker_seconds, a.rounds, a.broker_failovers, a.broker_sizes = 1.0, 1, 1, "128"
    asyncio.run(main(a))
