"""What one request in flight costs a server that does nothing: the floor under every
one-at-a-time figure of ``bench/peers.py`` and ``bench/broker.py`` on this machine.

    python bench/wakeup_floor.py               # 5 s per server, 200-byte requests
    python bench/wakeup_floor.py --seconds 10 --size 1024

A client with one request in flight sends a request and reads the answer, again and again, to
each server in turn; a blocking socket (TCP_NODELAY) unless said otherwise:

* ``asyncio echo``: an ``asyncio.Protocol`` that writes back what it reads (the event loop and
  transport a rocketq broker runs on, with no work at all);
* ``uvloop echo``: the same on uvloop, where it is installed;
* ``asyncio echo, reads from the heap``: the same server after freeing a 4 MiB block, which
  raises glibc's mmap threshold: a fresh process's 256 KiB ``recv`` buffer (the transport's read
  size) is above the default threshold, so each read costs it an ``mmap``, an ``mremap`` and a
  ``munmap``; a rocketq broker's allocator is past that by the time it serves (no such calls
  under ``strace -c``), so this row is the floor under its sends;
* ``asyncio echo, asyncio client`` and ``asyncio echo, reads from the heap, asyncio client``:
  each echo server again, the client an asyncio ``Protocol`` on an event loop in this process
  (the least an asyncio client pays per round trip); this process's own reads come from the
  heap (a 4 MiB block freed at its start), as a ``RemotingClient``'s do from its own buffer;
* ``redis PING``: ``redis-server`` answering ``PING`` (RESP), where it is on PATH;
* ``rocketq serve``: ``rocketq.client.AsyncProducer.send`` awaited one at a time, then a
  blocking ``rocketq.client.Producer.send``, of a ``size``-byte body (ASYNC_FLUSH, no gRPC): the
  whole broker and client, for comparison.

Printed: round trips per second, the CPU the server process spent per round trip (utime +
stime of all its threads, ``/proc/PID/stat``) with its voluntary context switches per round trip,
and the client's CPU per round trip (this process). Each server sleeps in ``epoll_wait``
between requests; waking it and putting it to sleep again is most of what a do-nothing server
costs per request here.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from rocketq.free_ports import free_port

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

ECHO = """
import asyncio, os, sys
class Echo(asyncio.Protocol):
    def connection_made(self, transport): self.transport = transport
    def data_received(self, data): self.transport.write(data)
if sys.argv[3:] == ["heap"]:
    # a 4 MiB block freed whole raises glibc's mmap threshold above the transport's 256 KiB
    # recv buffer, which then comes from the heap, as in a rocketq broker process
    bytearray(4 << 20)
async def main():
    await asyncio.get_running_loop().create_server(Echo, "127.0.0.1", int(sys.argv[1]))
    print("ready", flush=True)
    await asyncio.Event().wait()
if sys.argv[2] == "uvloop":
    import uvloop
    uvloop.run(main())
else:
    asyncio.run(main())
"""


def cpu_and_switches(pid: int) -> tuple[float, int]:
    """CPU seconds (utime + stime, every thread) and voluntary context switches of ``pid``."""
    ticks = os.sysconf("SC_CLK_TCK")
    cpu, switches = 0.0, 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                status = f.read()
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        cpu += (int(fields[11]) + int(fields[12])) / ticks
        switches += int(status.split("voluntary_ctxt_switches:")[1].split()[0])
    return cpu, switches


def wait_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)  # polling a port that is not open yet
    raise SystemExit(f"port {port} did not open")


def measure(label: str, pid: int, one: Callable[[], None], seconds: float) -> None:
    for _ in range(500):  # warm-up
        one()
    cpu0, sw0 = cpu_and_switches(pid)
    mine0 = time.process_time()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        one()
        n += 1
    took = time.perf_counter() - t0
    cpu1, sw1 = cpu_and_switches(pid)
    report(label, n, took, cpu1 - cpu0, sw1 - sw0, time.process_time() - mine0)


def report(label: str, n: int, took: float, server_cpu: float, sleeps: int, client_cpu: float) -> None:
    print(
        f"| {label} | {n / took:,.0f} | {1e6 * server_cpu / n:.1f} | {sleeps / n:.2f}"
        f" | {1e6 * client_cpu / n:.1f} |",
        flush=True,
    )


def asyncio_client(port: int, pid: int, size: int, seconds: float, label: str) -> None:
    from remoting import RawCaller  # noqa: PLC0415 (bench/remoting.py: the same echo client)

    async def run() -> None:
        loop = asyncio.get_running_loop()
        transport, caller = await loop.create_connection(lambda: RawCaller(size), "127.0.0.1", port)
        request = b"x" * size

        async def ask() -> None:
            caller.waiter = loop.create_future()
            transport.write(request)
            await caller.waiter

        for _ in range(500):
            await ask()
        cpu0, sw0 = cpu_and_switches(pid)
        mine0 = time.process_time()
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            await ask()
            n += 1
        took = time.perf_counter() - t0
        cpu1, sw1 = cpu_and_switches(pid)
        report(label, n, took, cpu1 - cpu0, sw1 - sw0, time.process_time() - mine0)
        transport.close()

    asyncio.run(run())


def socket_round_trip(port: int, request: bytes, answer_len: int) -> tuple[socket.socket, Callable[[], None]]:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def one() -> None:
        sock.sendall(request)
        got = 0
        while got < answer_len:
            chunk = sock.recv(65536)
            if not chunk:
                raise SystemExit("the server closed the connection")
            got += len(chunk)

    return sock, one


def echo(loop_name: str, size: int, seconds: float, heap: bool = False) -> None:
    port = free_port()
    args = [sys.executable, "-c", ECHO, str(port), loop_name] + (["heap"] if heap else [])
    proc = subprocess.Popen(args, stdout=subprocess.PIPE)
    label = f"{loop_name} echo" + (", reads from the heap" if heap else "")
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != b"ready":
            print(f"| {label} | skipped: the server did not start | | | |")
            return
        sock, one = socket_round_trip(port, b"x" * size, size)
        with sock:
            measure(label, proc.pid, one, seconds)
        if loop_name == "asyncio":
            asyncio_client(port, proc.pid, size, seconds, f"{label}, asyncio client")
    finally:
        proc.kill()
        proc.wait()


def redis_ping(seconds: float) -> None:
    exe = shutil.which("redis-server")
    if exe is None:
        print("| redis PING | skipped: redis-server not on PATH | | | |")
        return
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="wakeup-floor-") as data:
        proc = subprocess.Popen(
            [exe, "--port", str(port), "--save", "", "--appendonly", "no", "--dir", data],
            stdout=subprocess.DEVNULL,
        )
        try:
            wait_port(port, proc)
            sock, one = socket_round_trip(port, b"*1\r\n$4\r\nPING\r\n", len(b"+PONG\r\n"))
            with sock:
                measure("redis PING", proc.pid, one, seconds)
        finally:
            proc.kill()
            proc.wait()


def rocketq_async_send(namesrv: int, pid: int, size: int, seconds: float) -> None:
    """``AsyncProducer.send`` awaited one at a time on this process's asyncio loop."""
    from rocketq.client import AsyncProducer, Message  # noqa: PLC0415

    async def run() -> None:
        body = b"x" * size
        async with AsyncProducer("WakeupFloorAsyncPG", namesrv_addr=f"127.0.0.1:{namesrv}") as producer:
            for _ in range(500):  # warm-up: the route, the connection
                await producer.send(Message("WakeupFloorT", body))
            cpu0, sw0 = cpu_and_switches(pid)
            mine0 = time.process_time()
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                await producer.send(Message("WakeupFloorT", body))
                n += 1
            took = time.perf_counter() - t0
            cpu1, sw1 = cpu_and_switches(pid)
            mine = time.process_time() - mine0
        report("rocketq serve, AsyncProducer.send", n, took, cpu1 - cpu0, sw1 - sw0, mine)

    asyncio.run(run())


def rocketq_send(size: int, seconds: float) -> None:
    from rocketq.client import Message, Producer  # noqa: PLC0415

    namesrv, broker = free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="wakeup-floor-") as data:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "rocketq.cli", "serve", "--data-dir", data),
                *("--namesrv-port", str(namesrv), "--broker-port", str(broker), "--grpc-port", "-1"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if b"ready" in line:
                    break
            rocketq_async_send(namesrv, proc.pid, size, seconds)
            producer = Producer("WakeupFloorPG", namesrv_addr=f"127.0.0.1:{namesrv}")
            producer.start()
            body = b"x" * size
            try:
                measure(
                    "rocketq serve, Producer.send",
                    proc.pid,
                    lambda: producer.send(Message("WakeupFloorT", body)) and None,
                    seconds,
                )
            finally:
                producer.shutdown()
        finally:
            proc.terminate()
            proc.wait()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=5.0, help="seconds per server")
    p.add_argument("--size", type=int, default=200, help="request bytes (echo) and body bytes (rocketq)")
    a = p.parse_args()
    bytearray(4 << 20)  # this process's reads from the heap (see the docstring)
    load = os.getloadavg()[0]
    print(f"one request in flight from a blocking client, {a.seconds:g} s each; load average {load:.1f}\n")
    print(
        "| server | round trips/s | server CPU µs per round trip | server sleeps per round trip"
        " | client CPU µs per round trip |"
    )
    print("|---|---:|---:|---:|---:|")
    echo("asyncio", a.size, a.seconds)
    echo("asyncio", a.size, a.seconds, heap=True)
    try:
        import uvloop  # noqa: F401, PLC0415
    except ImportError:
        print("| uvloop echo | skipped: uvloop is not installed | | | |")
    else:
        echo("uvloop", a.size, a.seconds)
    redis_ping(a.seconds)
    rocketq_send(a.size, a.seconds)


if __name__ == "__main__":
    main()
