"""rocketq side by side with Redis Streams and NATS JetStream, each through its own Python client.

    python bench/peers.py                           # every workload, 128 B and 1 KiB, async and sync
    python bench/peers.py --quick --only rocketq    # smoke run: a few hundred messages, one round
    make bench-peers                                # installs the peers and their clients first

Starts ``rocketq serve`` (ASYNC_FLUSH or SYNC_FLUSH), ``redis-server`` (AOF only: ``appendonly
yes`` with ``appendfsync everysec`` or ``always``, no RDB snapshots) and ``nats-server -js`` (file
store), each in its own process with its data in a temporary directory, on free ports of
127.0.0.1, and drives all three from this process with their Python clients: rocketq's public
client API (``rocketq.client``), redis-py and nats-py.

Workloads (``--workloads``), each on a fresh topic / stream per case:

  send        one acknowledged send at a time from blocking code: ``Producer.send``; redis-py
              ``Redis.xadd``; nats-py has no blocking client, so JetStream has no figure here
  send-async  one acknowledged send at a time, awaited in sequence: ``AsyncProducer.send``;
              ``redis.asyncio`` ``xadd``; ``js.publish``
  send64      64 acknowledged sends in flight from one process: ``asyncio.gather`` over a
              semaphore of 64 around ``AsyncProducer.send``; ``redis.asyncio`` ``xadd`` (a
              connection pool, so up to 64 connections, one request in flight on each);
              ``js.publish``
  batch32     batches of 32, one batch in flight: ``Producer.send_batch``; a redis-py pipeline
              of 32 ``XADD`` (no MULTI); JetStream 2.9 has no batch publish, so 32 ``js.publish``
              gathered together, then the next 32
  consume     read N stored messages with acknowledgement, 32 per read: ``LitePullConsumer``
              (assigned every queue, ``poll()`` then ``commit()`` per poll; with
              ``--rocketq-commit pull`` auto commit instead, each queue's position riding on
              its next pull, and one ``commit()`` at the end); ``XREADGROUP COUNT
              32`` then one ``XACK`` of those ids; a durable JetStream pull consumer,
              ``fetch(32)`` then ``msg.ack()`` for each (explicit ack policy)

Durability (``--durability``): ``async`` is rocketq ASYNC_FLUSH (flush every 500 ms), Redis
``appendfsync everysec``, JetStream's own periodic sync; ``sync`` is SYNC_FLUSH, ``appendfsync
always`` and JetStream ``sync_interval: always`` where the nats-server accepts it (2.10 and
later; 2.9 rejects the key, and its JetStream sync column is then skipped with the reason).

Rounds are interleaved (case 1: rocketq, JetStream, Redis; case 2: ...; then round 2 the same)
and the best round of each system and case is kept. For each, the table gives msgs/s, the
ratios rocketq/JetStream and rocketq/Redis, and CPU microseconds per message of the client (this
process: ``time.process_time``, every thread) and of the server process (``/proc/<pid>/stat``
utime + stime), both over the timed part only (connections, topic creation, warm-up send and
the consume case's preload are outside it). A peer whose server binary or Python client is
missing is skipped with the reason printed.

Event loops: every asyncio client (``AsyncProducer``, ``redis.asyncio``, nats-py) runs on
asyncio's default loop, or with ``--client-loop uvloop`` all of them on uvloop; ``--rocketq-loop
uvloop`` starts ``rocketq serve`` with ``ROCKETQ_EVENT_LOOP=uvloop``. The blocking clients do
their socket I/O in the calling thread whatever the loop.

The floor (``--floor``): an asyncio echo server and a client that do nothing else, one request
in flight (the body plus about a send header's bytes), from a blocking socket for ``send`` and
through an ``asyncio.Protocol`` on the clients' loop for ``send-async``, run in the same
interleaved rounds. A second table gives each system's rate over the floor's and the floor's over
JetStream's and Redis's: how far an asyncio client and an asyncio server doing no work at all get
against them in the same minutes, which bounds what ``AsyncProducer.send`` against ``rocketq
serve`` can reach.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from rocketq.free_ports import free_port

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

# remoting and wakeup_floor are bench/ modules: the floor's (--floor) echo server and clients
from remoting import RawCaller
from rocketq.client import AsyncProducer, LitePullConsumer, Message, Producer, SendStatus
from wakeup_floor import ECHO, socket_round_trip

SRC = sys.path[0]
HOST = "127.0.0.1"
SYSTEMS = ("rocketq", "nats", "redis")
LABEL = {"rocketq": "rocketq", "nats": "JetStream", "redis": "Redis", "floor": "asyncio floor"}
WORKLOADS = ("send", "send-async", "send64", "batch32", "consume")
DURABILITIES = ("async", "sync")
IN_FLIGHT = 64
BATCH = 32
CLK_TCK = os.sysconf("SC_CLK_TCK")
START_TIMEOUT_S = 60.0
#: How the rocketq consume case acknowledges: "poll" (commit() per poll) or "pull" (--rocketq-commit).
ROCKETQ_COMMIT = {"mode": "poll"}
#: Whether rocketq's AsyncProducer cases auto-batch (--rocketq-auto-batch).
ROCKETQ_AUTO_BATCH = {"on": False}
#: The event loop of every asyncio client (--client-loop) and of rocketq serve (--rocketq-loop).
LOOPS = {"client": "asyncio", "rocketq": "asyncio"}
#: The loops the asyncio client cases ran on (their classes' modules: "asyncio", "uvloop").
CLIENT_LOOPS_SEEN: set[str] = set()
IDLE_LIMIT_S = 30.0  # a consume that gets nothing for this long has lost messages
#: ``--floor``: bytes the floor's request carries besides the body, about what a SEND_MESSAGE_V2
#: frame adds to its body (length fields, the JSON header of a producer's send)
FLOOR_OVERHEAD = 320


def run_client(coro: Coroutine[Any, Any, int]) -> int:
    """Run an asyncio client's case on the chosen loop (--client-loop), the same for every system."""

    async def noted() -> int:
        CLIENT_LOOPS_SEEN.add(type(asyncio.get_running_loop()).__module__.split(".")[0])
        return await coro

    if LOOPS["client"] == "uvloop":
        import uvloop  # noqa: PLC0415 - only where asked for

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(noted())
    return asyncio.run(noted())


class Skip(Exception):
    """A peer (or one of its modes) that cannot run here; the message says why. ``whole``: the
    peer cannot run at all here (server binary or Python client missing)."""

    def __init__(self, reason: str, *, whole: bool = False) -> None:
        super().__init__(reason)
        self.whole = whole


def find_exe(name: str) -> str | None:
    """``name`` on PATH, or in the sbin directories where Debian puts servers (nats-server)."""
    return shutil.which(name) or shutil.which(name, path="/usr/local/sbin:/usr/sbin:/sbin")


def proc_cpu_s(pid: int) -> float:
    """utime + stime of a process, in seconds (fields 14 and 15 of /proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        stat = f.read()
    fields = stat[stat.rindex(")") + 2 :].split()  # the command name may contain spaces
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def wait_port(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before listening on port {port}")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.settimeout(0.5)
            if s.connect_ex((HOST, port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on port {port} within {START_TIMEOUT_S:.0f} s")


@dataclass
class Meter:
    """Wall time, this process's CPU and the server's CPU over the timed part of one case."""

    server_pid: int
    wall: float = 0.0
    client_cpu: float = 0.0
    server_cpu: float = 0.0

    def start(self) -> None:
        self.server_cpu = -proc_cpu_s(self.server_pid)
        self.client_cpu = -time.process_time()
        self.wall = -time.perf_counter()

    def stop(self) -> None:
        self.wall += time.perf_counter()
        self.client_cpu += time.process_time()
        self.server_cpu += proc_cpu_s(self.server_pid)


@dataclass
class Case:
    workload: str
    size: int
    durability: str

    @property
    def key(self) -> str:
        return f"{self.workload}/{self.size}/{self.durability}"


@dataclass
class Result:
    system: str
    workload: str
    size: int
    durability: str
    round: int
    messages: int
    seconds: float
    msgs_per_s: float
    client_cpu_us_per_msg: float
    server_cpu_us_per_msg: float


async def gather_limited(n: int, limit: int, one: Callable[[int], Awaitable[None]]) -> None:
    """Run ``one(0..n-1)`` with ``limit`` in flight: ``limit`` tasks, each awaiting one call at a
    time, as an application's concurrent senders do. (A task per call over a semaphore, as
    this used to be, spent about 10 µs of the harness's CPU per call on every system alike.)"""
    calls = iter(range(n))

    async def sender() -> None:
        for i in calls:
            await one(i)

    await asyncio.gather(*(sender() for _ in range(min(limit, n))))


async def timed_sends(n: int, limit: int, one: Callable[[int], Awaitable[None]], meter: Meter) -> None:
    """Time ``one(0..n-1)``: one after the other when ``limit`` is 1, else ``limit`` in flight."""
    meter.start()
    if limit == 1:
        for i in range(n):
            await one(i)
    else:
        await gather_limited(n, limit, one)
    meter.stop()


def count_until_idle(n: int, poll: Callable[[], int]) -> int:
    """Call ``poll`` (it returns how many messages it consumed) until ``n`` are counted or none
    came for ``IDLE_LIMIT_S``; returns the count."""
    got = 0
    idle_since = time.monotonic()
    while got < n:
        k = poll()
        if k:
            got += k
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since > IDLE_LIMIT_S:
            break
    return got


# -- the servers ---------------------------------------------------------------------------------
class Peer:
    """One server process and the workloads run against it through its Python client."""

    name = ""

    def __init__(self, durability: str, base_dir: str) -> None:
        self.durability = durability
        self.data_dir = tempfile.mkdtemp(prefix=f"{self.name}-{durability}-", dir=base_dir)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = os.path.join(self.data_dir, "server.log")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def version(self) -> str:
        return ""

    def run(self, case: Case, n: int, tag: str, meter: Meter) -> int:
        """Run one case of ``n`` messages on fresh names derived from ``tag``; returns the number
        of messages acknowledged (sent) or consumed and acknowledged."""
        body = b"x" * case.size
        fn = getattr(self, "run_" + case.workload.replace("-", "_"))
        return int(fn(body, n, tag, meter))

    def _run_async(self, body: bytes, n: int, tag: str, meter: Meter, limit: int) -> int:
        raise NotImplementedError

    def run_send_async(self, body: bytes, n: int, tag: str, meter: Meter) -> int:
        return self._run_async(body, n, tag, meter, 1)

    def run_send64(self, body: bytes, n: int, tag: str, meter: Meter) -> int:
        return self._run_async(body, n, tag, meter, IN_FLIGHT)


class RocketqPeer(Peer):
    name = "rocketq"

    def start(self) -> None:
        self.namesrv_port, self.broker_port = free_port(), free_port()
        env = dict(os.environ)
        env["PYTHONPATH"] = SRC + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env["ROCKETQ_EVENT_LOOP"] = LOOPS["rocketq"]
        flush = "SYNC_FLUSH" if self.durability == "sync" else "ASYNC_FLUSH"
        log = open(self.log_path, "wb")  # noqa: SIM115 - the child keeps it
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "rocketq.cli", "serve"),
                *("--data-dir", self.data_dir, "--flush", flush, "--grpc-port", "-1"),
                *("--namesrv-port", str(self.namesrv_port), "--broker-port", str(self.broker_port)),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            with open(self.log_path, "rb") as f:
                if b"rocketq ready" in f.read():
                    break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                with open(self.log_path, "rb") as f:
                    tail = f.read()[-2000:].decode(errors="replace")
                raise RuntimeError(f"rocketq serve did not start ({flush}):\n{tail}")
            time.sleep(0.05)
        self.namesrv = f"{HOST}:{self.namesrv_port}"

    def version(self) -> str:
        from importlib.metadata import version  # noqa: PLC0415

        return (
            f"rocketq {version('rocketq')} ({'SYNC_FLUSH' if self.durability == 'sync' else 'ASYNC_FLUSH'})"
        )

    def _producer(self) -> Producer:
        p = Producer("PeersPG", namesrv_addr=self.namesrv)
        p.start()
        return p

    def run_send(self, body: bytes, n: int, tag: str, meter: Meter) -> int:
        p = self._producer()
        try:
            p.send(Message(tag, body))  # route lookup and topic creation, untimed
            ok = 0
            meter.start()
            for _ in range(n):
                ok += p.send(Message(tag, body)).status is SendStatus.SEND_OK
            meter.stop()
            return ok
        finally:
            p.shutdown()

    def run_batch32(self, body: bytes, n: int, tag: str, meter: Meter) -> int:
        p = self._producer()
        try:
            p.send(Message(tag, body))
            ok = 0
            meter.start()
            for i in range(0, n, BATCH):
                k = min(BATCH, n - i)
                if p.send_batch([Message(tag, body) for _ in range(k)]).status is SendStatus.SEND_OK:
                    ok += k
            meter.stop()
            return ok
        finally:
            p.shutdown()

    def _run_async(self, body: bytes, n: int, tag: str, meter: Meter, limit: int) -> int:
        async def main() -> int:
            async with AsyncProducer(
                "PeersPG", namesrv_addr=self.namesrv, auto_batch=ROCKETQ_AUTO_BATCH["on"]
            ) as p:
                await p.send(Message(tag, body))
                ok = 0

                async def one(_: int) -> None:
                    nonlocal ok
                    result = await p.send(Message(tag, body))
                    ok += result.status is SendStatus.SEND_OK

                await timed_sends(n, limit, one, meter)
                return ok

        return run_client(main())

    def run_consume(self, body: bytes, n: int, tag: str, meter: Meter) -> int:
        p = self._producer()
        try:
            for i in range(0, n, BATCH):
                p.send_batch([Message(tag, body) for _ in range(min(BATCH, n - i))])
        finally:
            p.shutdown()
        on_pull = ROCKETQ_COMMIT["mode"] == "pull"
        c = LitePullConsumer("PeersCG", namesrv_addr=self.namesrv, auto_commit=on_pull, pull_batch_size=BATCH)
        c.start()
        try:
            queues = c.fetch_message_queues(tag)
            c.assign(queues)
            for mq in queues:
                c.seek_to_begin(mq)

            def poll() -> int:
                msgs = c.poll(timeout_ms=1000)
                if msgs and not on_pull:
                    c.commit()
                return len(msgs)

            meter.start()
            got = count_until_idle(n, poll)
            if on_pull:
                c.commit()  # the positions the last pulls did not carry yet
            meter.stop()
            return got
        finally:
            c.shutdown()


class RedisPeer(Peer):
    name = "redis"

    def start(self) -> None:
        exe = find_exe("redis-server")
        if exe is None:
            raise Skip("redis-server not found on PATH (apt-get install -y redis-server)", whole=True)
        try:
            import redis  # noqa: F401, PLC0415
        except ImportError:
            raise Skip("Python client redis-py missing (pip install '.[bench]')", whole=True) from None
        self.port = free_port()
        fsync = "always" if self.durability == "sync" else "everysec"
        log = open(self.log_path, "wb")  # noqa: SIM115 - the child keeps it
        self.proc = subprocess.Popen(
            [
                *(exe, "--port", str(self.port), "--bind", HOST, "--dir", self.data_dir),
                *("--save", "", "--appendonly", "yes", "--appendfsync", fsync),
                *("--daemonize", "no", "--protected-mode", "no", "--logfile", ""),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        wait_port(self.port, self.proc, "redis-server")
        r = self._client()
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:  # the port opens before the AOF is loaded
            try:
                if r.ping():
                    break
            except Exception:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.05)
        r.close()

    def version(self) -> str:
        import redis  # noqa: PLC0415

        r = self._client()
        try:
            info = r.info("server")
        finally:
            r.close()
        fsync = "always" if self.durability == "sync" else "everysec"
        return f"redis-server {info['redis_version']} (appendfsync {fsync}), redis-py {redis.__version__}"

    def _client(self) -> Any:
        import redis  # noqa: PLC0415

        return redis.Redis(host=HOST, port=self.port)

    def run_send(self, body: bytes, n: int, tag: str, meter: Meter) -> int:
        r = self._client()
        try:
            r.xadd(tag, {"b": body})
            ok = 0
            meter.start()
            for _ in range(n):
                ok += bool(r.xadd(tag, {"b": body}))
            meter.stop()
            return ok
        finally:
            r.close()

    def run_batch32(self, body: bytes, n: int, tag: str, meter: Meter) -> int:
        r = self._client()
        try:
            r.xadd(tag, {"b": body})
            ok = 0
            meter.start()
            for i in range(0, n, BATCH):
                pipe = r.pipeline(transaction=False)
                for _ in range(min(BATCH, n - i)):
                    pipe.xadd(tag, {"b": body})
                ok += sum(bool(x) for x in pipe.execute())
            meter.stop()
            return ok
        finally:
            r.close()

    def _run_async(self, body: bytes, n: int, tag: str, meter: Meter, limit: int) -> int:
        import redis.asyncio  # noqa: PLC0415

        async def main() -> int:
            r = redis.asyncio.Redis(host=HOST, port=self.port, max_connections=limit)
            try:
                await r.xadd(tag, {"b": body})
                ok = 0

                async def one(_: int) -> None:
                    nonlocal ok
                    entry_id = await r.xadd(tag, {"b": body})
                    ok += bool(entry_id)

                await timed_sends(n, limit, one, meter)
                return ok
            finally:
                await r.aclose()

        return run_client(main())

    def run_consume(self, body: bytes, n: int, tag: str, meter: Meter) -> int:
        r = self._client()
        try:
            for i in range(0, n, BATCH):
                pipe = r.pipeline(transaction=False)
                for _ in range(min(BATCH, n - i)):
                    pipe.xadd(tag, {"b": body})
                pipe.execute()
            r.xgroup_create(tag, "PeersCG", id="0")

            def poll() -> int:
                reply = r.xreadgroup("PeersCG", "c1", {tag: ">"}, count=BATCH, block=1000)
                entries = reply[0][1] if reply else []
                if entries:
                    r.xack(tag, "PeersCG", *(entry_id for entry_id, _ in entries))
                return len(entries)

            meter.start()
            got = count_until_idle(n, poll)
            meter.stop()
            return got
        finally:
            r.close()


def nats_sync_supported(exe: str, work_dir: str) -> tuple[bool, str]:
    """Whether this nats-server accepts ``jetstream { sync_interval: always }`` (2.10 and later)."""
    conf = os.path.join(work_dir, "probe.conf")
    with open(conf, "w", encoding="utf-8") as f:
        f.write(
            f'jetstream {{\n  store_dir: "{os.path.join(work_dir, "probe")}"\n  sync_interval: always\n}}\n'
        )
    done = subprocess.run([exe, "-c", conf, "-t"], capture_output=True, text=True, check=False)
    return done.returncode == 0, (done.stdout + done.stderr).strip()


class NatsPeer(Peer):
    name = "nats"

    def start(self) -> None:
        exe = find_exe("nats-server")
        if exe is None:
            raise Skip("nats-server not found on PATH (apt-get install -y nats-server)", whole=True)
        try:
            import nats  # noqa: F401, PLC0415
        except ImportError:
            raise Skip("Python client nats-py missing (pip install '.[bench]')", whole=True) from None
        self.exe = exe
        lines = [f'jetstream {{\n  store_dir: "{os.path.join(self.data_dir, "js")}"']
        if self.durability == "sync":
            ok, why = nats_sync_supported(exe, self.data_dir)
            if not ok:
                refusal = why.splitlines()[-1].rpartition(": ")[2] if why else "refused"
                raise Skip(
                    f"{self._server_version()} has no JetStream sync-always setting "
                    f"(its config test says of `sync_interval: always`: {refusal})"
                )
            lines.append("  sync_interval: always")
        conf = os.path.join(self.data_dir, "nats.conf")
        with open(conf, "w", encoding="utf-8") as f:
            f.write("\n".join([*lines, "}\n"]))
        self.port = free_port()
        log = open(self.log_path, "wb")  # noqa: SIM115 - the child keeps it
        self.proc = subprocess.Popen(
            [exe, "-c", conf, "-a", HOST, "-p", str(self.port)], stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        wait_port(self.port, self.proc, "nats-server")
        self.url = f"nats://{HOST}:{self.port}"

    def _server_version(self) -> str:
        out = subprocess.run([self.exe, "--version"], capture_output=True, text=True, check=False).stdout
        return out.strip() or "nats-server"

    def version(self) -> str:
        from importlib.metadata import version  # noqa: PLC0415

        sync = "sync_interval: always" if self.durability == "sync" else "default periodic sync"
        return f"{self._server_version()} (JetStream file store, {sync}), nats-py {version('nats-py')}"

    def run(self, case: Case, n: int, tag: str, meter: Meter) -> int:
        if case.workload == "send":
            raise Skip("nats-py is asyncio only: no blocking send (see send-async)")
        body = b"x" * case.size
        stream = tag.replace("-", "_")
        subject = "peers." + stream

        async def main() -> int:
            import nats  # noqa: PLC0415

            nc = await nats.connect(self.url)
            try:
                js = nc.jetstream()
                await js.add_stream(name=stream, subjects=[subject])
                if case.workload == "consume":
                    await gather_limited(n, IN_FLIGHT, lambda _: js.publish(subject, body))  # preload
                    return await self._consume(js, subject, n, meter)
                await js.publish(subject, body)  # warm-up, untimed
                ok = 0

                async def one(_: int) -> None:
                    nonlocal ok
                    ack = await js.publish(subject, body)
                    ok += ack.seq > 0

                meter.start()
                if case.workload == "send-async":
                    for i in range(n):
                        await one(i)
                elif case.workload == "send64":
                    await gather_limited(n, IN_FLIGHT, one)
                else:  # batch32
                    for i in range(0, n, BATCH):
                        await asyncio.gather(*(one(j) for j in range(min(BATCH, n - i))))
                meter.stop()
                return ok
            finally:
                await nc.close()

        return run_client(main())

    @staticmethod
    async def _consume(js: Any, subject: str, n: int, meter: Meter) -> int:
        import nats.errors  # noqa: PLC0415

        sub = await js.pull_subscribe(subject, durable="PeersCG")
        got = 0
        meter.start()
        idle_since = time.monotonic()
        while got < n:
            try:
                msgs = await sub.fetch(BATCH, timeout=1.0)
            except nats.errors.TimeoutError:
                msgs = []
            if msgs:
                for m in msgs:
                    await m.ack()
                got += len(msgs)
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > IDLE_LIMIT_S:
                break
        meter.stop()
        return got


class FloorPeer(Peer):
    """``--floor``: what one request in flight costs when neither side does any work. The server is
    an asyncio echo (asyncio's loop and transport, as ``rocketq serve`` runs on), the client
    sends a request of the body plus :data:`FLOOR_OVERHEAD` bytes and waits for it to come back:
    from blocking code on a blocking socket (``send``), or awaited on the clients' event loop
    through an ``asyncio.Protocol`` (``send-async``). No broker can answer one request at a time
    faster than this pair, on these loops, in the same minutes; the table under the main one
    puts each system's rate against it."""

    name = "floor"

    def start(self) -> None:
        self.port = free_port()
        log = open(self.log_path, "wb")  # noqa: SIM115 - the child keeps it
        # bench/wakeup_floor.py's echo server, on asyncio's loop, its reads from the heap
        self.proc = subprocess.Popen(
            [sys.executable, "-c", ECHO, str(self.port), "asyncio", "heap"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        wait_port(self.port, self.proc, "the asyncio echo server")

    def version(self) -> str:
        return f"asyncio echo, Python {platform.python_version()}"

    def run_send(self, body: bytes, n: int, tag: str, meter: Meter) -> int:
        request = b"r" * (len(body) + FLOOR_OVERHEAD)
        sock, one = socket_round_trip(self.port, request, len(request))
        with sock:
            one()  # warm-up, untimed
            meter.start()
            for _ in range(n):
                one()
            meter.stop()
        return n

    def _run_async(self, body: bytes, n: int, tag: str, meter: Meter, limit: int) -> int:
        if limit != 1:
            raise Skip("the floor has one request in flight only (send, send-async)")
        request = b"r" * (len(body) + FLOOR_OVERHEAD)

        async def main() -> int:
            loop = asyncio.get_running_loop()
            transport, caller = await loop.create_connection(lambda: RawCaller(len(request)), HOST, self.port)
            try:

                async def one() -> None:
                    caller.waiter = loop.create_future()
                    transport.write(request)
                    await caller.waiter

                await one()  # warm-up, untimed
                meter.start()
                for _ in range(n):
                    await one()
                meter.stop()
                return n
            finally:
                transport.close()

        return run_client(main())

    def run_batch32(self, body: bytes, n: int, tag: str, meter: Meter) -> int:
        raise Skip("the floor has one request in flight only (send, send-async)")

    def run_consume(self, body: bytes, n: int, tag: str, meter: Meter) -> int:
        raise Skip("the floor has one request in flight only (send, send-async)")


PEERS: dict[str, type[Peer]] = {
    "rocketq": RocketqPeer,
    "nats": NatsPeer,
    "redis": RedisPeer,
    "floor": FloorPeer,
}


# -- the run -------------------------------------------------------------------------------------
@dataclass
class Run:
    args: argparse.Namespace
    results: list[Result] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # "system" or "system/case key" -> reason
    versions: dict[str, str] = field(default_factory=dict)


def parse_list(text: str, allowed: tuple[str, ...], what: str) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in items if x not in allowed]
    if bad or not items:
        raise argparse.ArgumentTypeError(
            f"{what}: {', '.join(bad) or 'nothing given'} not among {', '.join(allowed)}"
        )
    return items


def parse_sizes(text: str) -> list[int]:
    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"sizes: {text!r} is not a comma-separated list of bytes") from None
    if not sizes or any(s <= 0 or s > 4095 for s in sizes):
        raise argparse.ArgumentTypeError(
            f"sizes: {text!r}: each body size must be in 1..4095 bytes (rocketq compresses from 4096)"
        )
    return sizes


@contextlib.contextmanager
def servers(run: Run, durability: str, base_dir: str) -> Iterator[dict[str, Peer]]:
    started: dict[str, Peer] = {}
    try:
        for system in run.args.only:
            if system in run.skipped:
                continue
            peer = PEERS[system](durability, base_dir)
            try:
                peer.start()
            except Skip as exc:
                peer.stop()
                run.skipped[system if exc.whole else f"{system}/{durability}"] = str(exc)
                print(f"  skip {LABEL[system]} ({durability}): {exc}", flush=True)
                continue
            except BaseException:
                peer.stop()  # a server that started but never got ready is not left behind
                raise
            started[system] = peer
            run.versions[f"{system}/{durability}"] = peer.version()
        yield started
    finally:
        for peer in started.values():
            peer.stop()


def execute(run: Run) -> None:
    args = run.args
    base_dir = tempfile.mkdtemp(prefix="rocketq-bench-peers-")
    try:
        for durability in args.durability:
            with servers(run, durability, base_dir) as peers:
                if not peers:
                    continue
                cases = [Case(w, s, durability) for s in args.sizes for w in args.workloads]
                for rnd in range(1, args.rounds + 1):
                    for case in cases:
                        for system, peer in peers.items():
                            if f"{system}/{case.key}" in run.skipped:
                                continue
                            tag = f"P{case.workload.replace('-', '')}{case.size}{durability}R{rnd}"
                            meter = Meter(peer.pid)
                            try:
                                done = peer.run(case, args.messages, tag, meter)
                            except Skip as exc:
                                run.skipped[f"{system}/{case.key}"] = str(exc)
                                continue
                            if done != args.messages:
                                raise SystemExit(
                                    f"{LABEL[system]} {case.key} round {rnd}: {done} of "
                                    f"{args.messages} messages acknowledged"
                                )
                            res = Result(
                                system=system,
                                workload=case.workload,
                                size=case.size,
                                durability=durability,
                                round=rnd,
                                messages=done,
                                seconds=meter.wall,
                                msgs_per_s=done / meter.wall,
                                client_cpu_us_per_msg=meter.client_cpu / done * 1e6,
                                server_cpu_us_per_msg=meter.server_cpu / done * 1e6,
                            )
                            run.results.append(res)
                            print(
                                f"  round {rnd} {case.key:<22} {LABEL[system]:<10}"
                                f" {res.msgs_per_s:>9,.0f} msgs/s"
                                f"  client {res.client_cpu_us_per_msg:>6,.0f} µs/msg"
                                f"  server {res.server_cpu_us_per_msg:>6,.0f} µs/msg",
                                flush=True,
                            )
    finally:
        shutil.rmtree(base_dir, ignore_errors=True)


def best_of(results: list[Result]) -> dict[tuple[str, str], Result]:
    """The best round (highest msgs/s) of each (system, case key)."""
    best: dict[tuple[str, str], Result] = {}
    for r in results:
        k = (r.system, f"{r.workload}/{r.size}/{r.durability}")
        if k not in best or r.msgs_per_s > best[k].msgs_per_s:
            best[k] = r
    return best


def skip_lines(skipped: dict[str, str]) -> list[str]:
    """One line per system and reason, naming what was skipped (the whole system, a durability
    mode, or the cases of one workload)."""
    by_reason: dict[tuple[str, str], list[str]] = {}
    for what, why in skipped.items():
        system, _, scope = what.partition("/")
        if scope.count("/") == 2:
            scope = scope.split("/")[0]  # workload/size/durability -> workload
        by_reason.setdefault((system, why), [])
        if scope and scope not in by_reason[(system, why)]:
            by_reason[(system, why)].append(scope)
    return [
        f"skipped {LABEL[system]}{' ' + ', '.join(scopes) if scopes else ''}: {why}"
        for (system, why), scopes in sorted(by_reason.items())
    ]


def table(run: Run) -> str:
    best = best_of(run.results)
    head = (
        "| workload | body | durability | rocketq msgs/s | JetStream msgs/s | Redis msgs/s "
        "| rocketq/JetStream | rocketq/Redis "
        "| client µs/msg rq / JS / Redis | server µs/msg rq / JS / Redis |"
    )
    lines = [head, "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]

    def rate(r: Result | None) -> str:
        return f"{r.msgs_per_s:,.0f}" if r else "—"

    def ratio(a: Result | None, b: Result | None) -> str:
        return f"{a.msgs_per_s / b.msgs_per_s:.2f}" if a and b else "—"

    def cpu(rs: list[Result | None], attr: str) -> str:
        return " / ".join(f"{getattr(r, attr):,.0f}" if r else "—" for r in rs)

    args = run.args
    for durability in args.durability:
        for size in args.sizes:
            for workload in args.workloads:
                key = f"{workload}/{size}/{durability}"
                rq, js, rd = (best.get((s, key)) for s in ("rocketq", "nats", "redis"))
                if not (rq or js or rd):
                    continue
                body = f"{size} B" if size < 1024 or size % 1024 else f"{size // 1024} KiB"
                lines.append(
                    f"| {workload} | {body} | {durability} | {rate(rq)} | {rate(js)} | {rate(rd)} "
                    f"| {ratio(rq, js)} | {ratio(rq, rd)} | {cpu([rq, js, rd], 'client_cpu_us_per_msg')} "
                    f"| {cpu([rq, js, rd], 'server_cpu_us_per_msg')} |"
                )
    return "\n".join(lines)


def floor_table(run: Run) -> str:
    """With ``--floor``: each system's rate over the asyncio floor's for the one-in-flight cases,
    and the floor's over JetStream's and Redis's (how far any asyncio client and server could
    get against them in these minutes)."""
    best = best_of(run.results)
    lines = [
        "| workload | body | durability | floor msgs/s | rocketq / floor | floor / JetStream | floor / Redis "
        "| floor client µs/msg | floor server µs/msg |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for durability in run.args.durability:
        for size in run.args.sizes:
            for workload in ("send", "send-async"):
                key = f"{workload}/{size}/{durability}"
                fl = best.get(("floor", key))
                if fl is None:
                    continue
                rq, js, rd = (best.get((s, key)) for s in ("rocketq", "nats", "redis"))

                def over(a: Result | None, b: Result | None) -> str:
                    return f"{a.msgs_per_s / b.msgs_per_s:.2f}" if a and b else "—"

                body = f"{size} B" if size < 1024 or size % 1024 else f"{size // 1024} KiB"
                lines.append(
                    f"| {workload} | {body} | {durability} | {fl.msgs_per_s:,.0f} | {over(rq, fl)} "
                    f"| {over(fl, js)} | {over(fl, rd)} | {fl.client_cpu_us_per_msg:,.0f} "
                    f"| {fl.server_cpu_us_per_msg:,.0f} |"
                )
    return "\n".join(lines) if len(lines) > 2 else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bench/peers.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=None, help="messages per case (default 20,000)")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds, best kept (default 2)")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 300 messages and 1 round unless given"
    )
    parser.add_argument(
        "--only",
        type=lambda t: parse_list(t, SYSTEMS, "--only"),
        default=list(SYSTEMS),
        help="systems, comma-separated, of rocketq nats redis (default: all)",
    )
    parser.add_argument(
        "--workloads",
        type=lambda t: parse_list(t, WORKLOADS, "--workloads"),
        default=list(WORKLOADS),
        help=f"comma-separated, of {' '.join(WORKLOADS)} (default: all)",
    )
    parser.add_argument(
        "--sizes", type=parse_sizes, default=[128, 1024], help="body sizes in bytes (default 128,1024)"
    )
    parser.add_argument(
        "--durability",
        type=lambda t: parse_list(t, DURABILITIES, "--durability"),
        default=list(DURABILITIES),
        help="comma-separated, of async sync (default: both)",
    )
    parser.add_argument(
        "--rocketq-commit",
        choices=("poll", "pull"),
        default="poll",
        help="rocketq consume: commit() after every poll (default), or auto commit riding on the next pull",
    )
    parser.add_argument(
        "--rocketq-auto-batch",
        action="store_true",
        help="rocketq send-async/send64: AsyncProducer(auto_batch=True), concurrent sends coalesce",
    )
    parser.add_argument(
        "--client-loop",
        choices=("asyncio", "uvloop"),
        default="asyncio",
        help="the event loop of every system's asyncio client (send-async, send64; default asyncio)",
    )
    parser.add_argument(
        "--rocketq-loop",
        choices=("asyncio", "uvloop"),
        default="asyncio",
        help="the event loop of rocketq serve (ROCKETQ_EVENT_LOOP; default asyncio)",
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also run the asyncio floor (an echo server and client doing nothing) for send and send-async",
    )
    parser.add_argument("--json", metavar="PATH", help="also write every round and the best to this file")
    args = parser.parse_args(argv)
    LOOPS["client"], LOOPS["rocketq"] = args.client_loop, args.rocketq_loop
    ROCKETQ_COMMIT["mode"] = args.rocketq_commit
    ROCKETQ_AUTO_BATCH["on"] = args.rocketq_auto_batch
    if args.messages is None:
        args.messages = 300 if args.quick else 20_000
    if args.rounds is None:
        args.rounds = 1 if args.quick else 2
    if args.messages <= 0 or args.rounds <= 0:
        parser.error(f"--messages {args.messages} and --rounds {args.rounds} must be > 0")
    args.only = [s for s in SYSTEMS if s in args.only]  # column order
    if args.floor:
        args.only.append("floor")
    run = Run(args)
    load_before = os.getloadavg()
    began = time.time()
    print(
        f"bench/peers.py: {args.messages:,} messages per case, {args.rounds} round(s), systems "
        f"{', '.join(LABEL[s] for s in args.only)}; {os.cpu_count()} CPUs, "
        f"load average {load_before[0]:.1f}; asyncio clients on {args.client_loop}, "
        f"rocketq serve on {args.rocketq_loop}",
        flush=True,
    )
    execute(run)
    load_after = os.getloadavg()
    print()
    for line in skip_lines(run.skipped):
        print(line)
    for what, ver in sorted(run.versions.items()):
        print(f"{what}: {ver}")
    print(
        f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after; "
        f"{time.time() - began:.0f} s in all"
    )
    print()
    print(table(run))
    floor = floor_table(run)
    if floor:
        print()
        print(floor)
    if args.json:
        doc = {
            "command": " ".join(["python", "bench/peers.py", *(sys.argv[1:] if argv is None else argv)]),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(began)),
            "machine": {
                "cpus": os.cpu_count(),
                "platform": platform.platform(),
                "python": platform.python_version(),
                "load_average_before": load_before[0],
                "load_average_after": load_after[0],
            },
            "messages": args.messages,
            "rounds": args.rounds,
            "loops": {"clients": sorted(CLIENT_LOOPS_SEEN), "rocketq": args.rocketq_loop},
            "versions": run.versions,
            "skipped": run.skipped,
            "results": [asdict(r) for r in run.results],
            "best": [asdict(r) for r in best_of(run.results).values()],
        }
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
    return 0


def _exit_on_sigterm(signum: int, frame: object) -> None:
    # SystemExit runs the finally blocks that stop the servers (the default SIGTERM action
    # would leave a server process and its temporary directory behind)
    sys.exit(128 + signum)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    sys.exit(main())
