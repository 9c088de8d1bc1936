"""Two ``rocketq serve`` trees side by side: server CPU per message of one send path, interleaved.

    git worktree add /tmp/before <commit>      # the tree to compare against
    python bench/serve_ab.py --base /tmp/before/src --flush SYNC_FLUSH --mode send
    python bench/serve_ab.py --base /tmp/before/src --flush SYNC_FLUSH --mode async64 --count 4000
    python bench/serve_ab.py --flush ASYNC_FLUSH --mode send --only new   # one tree, by thread

Starts a ``rocketq serve`` (name server and broker, ``--flush`` as given, no gRPC, data in a
temporary directory, removed at the end) from each tree (``--base``, ``--new``: the ``src``
directories; ``--new`` defaults to this checkout's), both running the whole time, and sends
``--count`` 128 B messages to each per round with rocketq's client from this checkout: ``send`` one blocking
``Producer.send`` at a time, ``async`` one ``AsyncProducer.send`` at a time, ``async64`` 64 in
flight. Rounds alternate which tree goes first. For each round it prints the server process's
CPU per message (utime + stime from ``/proc/<pid>/task/*/stat``, over the timed sends only),
the event loop's (the main thread) and the three busiest other threads' shares (``py-spy dump``
names them: dispatch, group commit, ...), the rate, the event loop's sleeps per message (its
voluntary context switches: each a wait in ``epoll_wait`` that a read or a timer ended) and the
1-minute load average; at the end the median of each tree.

On a shared machine the rates swing with the neighbours; the CPU a process spent per message
moves much less, and running both trees in the same minutes cancels most of the drift.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from rocketq.free_ports import free_port

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from rocketq.client import AsyncProducer, Message, Producer, SendStatus

SRC = sys.path[0]

CLK_TCK = os.sysconf("SC_CLK_TCK")
BODY = b"x" * 128
TOPIC = "ServeAB"


def cpu_by_thread(pid: int) -> dict[str, float]:
    """Seconds of utime + stime per thread id of process ``pid``."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", encoding="ascii") as f:
                stat = f.read()
        except FileNotFoundError:  # the thread ended
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        out[tid] = (int(fields[11]) + int(fields[12])) / CLK_TCK
    return out


def loop_wakeups(pid: int) -> int:
    """Voluntary context switches of the process's main thread (its event loop): each is a
    sleep in ``epoll_wait`` that something ended, a read or a timer."""
    with open(f"/proc/{pid}/task/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    return 0


def wait_ready(proc: subprocess.Popen[bytes], log_path: str, src: str) -> None:
    """Return once the ``rocketq serve`` process ``proc`` says it is ready in ``log_path``."""
    deadline = time.monotonic() + 60
    while True:
        with open(log_path, "rb") as f:
            if b"rocketq ready" in f.read():
                return
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"rocketq serve from {src} did not start; see {log_path}")
        time.sleep(0.05)  # polling the log of a process that is starting


class Server:
    def __init__(self, src: str, flush: str, tag: str, workdir: str) -> None:
        self.data_dir = tempfile.mkdtemp(prefix=f"{tag}-", dir=workdir)
        namesrv_port, broker_port = free_port(), free_port()
        self.log_path = os.path.join(self.data_dir, "serve.log")
        env = dict(os.environ, PYTHONPATH=os.path.abspath(src))
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [
                    *(sys.executable, "-m", "rocketq.cli", "serve", "--data-dir", self.data_dir),
                    *("--flush", flush, "--grpc-port", "-1"),
                    *("--namesrv-port", str(namesrv_port), "--broker-port", str(broker_port)),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        wait_ready(self.proc, self.log_path, src)
        self.namesrv = f"127.0.0.1:{namesrv_port}"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def timed_sends(server: Server, mode: str, count: int, producer: Producer) -> tuple[float, dict[str, float]]:
    """Wall seconds and server CPU seconds by thread id of ``count`` acknowledged sends."""
    pid = server.proc.pid
    if mode == "send":
        before, began = cpu_by_thread(pid), time.monotonic()
        for _ in range(count):
            if producer.send(Message(TOPIC, BODY)).status is not SendStatus.SEND_OK:
                raise RuntimeError("a send was not SEND_OK")
        wall = time.monotonic() - began
    else:
        limit = 1 if mode == "async" else 64

        async def run() -> tuple[float, dict[str, float]]:
            p = AsyncProducer("ServeABAsync", namesrv_addr=server.namesrv)
            await p.start()
            try:
                await p.send(Message(TOPIC, BODY))  # route lookup, untimed
                gate = asyncio.Semaphore(limit)

                async def one() -> None:
                    async with gate:
                        if (await p.send(Message(TOPIC, BODY))).status is not SendStatus.SEND_OK:
                            raise RuntimeError("a send was not SEND_OK")

                cpu0, t0 = cpu_by_thread(pid), time.monotonic()
                await asyncio.gather(*(one() for _ in range(count)))
                return time.monotonic() - t0, cpu0
            finally:
                await p.shutdown()

        wall, before = asyncio.run(run())
    after = cpu_by_thread(pid)
    return wall, {tid: after[tid] - before.get(tid, 0.0) for tid in after}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", help="src directory of the tree to compare against")
    ap.add_argument("--new", default=SRC, help="src directory of the tree under test (default: this one)")
    ap.add_argument("--only", choices=("base", "new"), help="run one tree only")
    ap.add_argument("--flush", choices=("ASYNC_FLUSH", "SYNC_FLUSH"), default="SYNC_FLUSH")
    ap.add_argument("--mode", choices=("send", "async", "async64"), default="send")
    ap.add_argument("--count", type=int, default=2000, help="messages per tree and round")
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    trees = {"base": args.base, "new": args.new}
    if args.only:
        trees = {args.only: trees[args.only]}
    missing = [name for name, src in trees.items() if not src]
    if missing:
        ap.error("--base is needed unless --only new")
    workdir = tempfile.mkdtemp(prefix="serve-ab-")
    servers: dict[str, Server] = {}
    producers: dict[str, Producer] = {}
    per_msg: dict[str, list[float]] = {name: [] for name in trees}
    rates: dict[str, list[float]] = {name: [] for name in trees}
    sleeps: dict[str, list[float]] = {name: [] for name in trees}
    try:
        for name, src in trees.items():
            servers[name] = Server(src, args.flush, name, workdir)
            producers[name] = Producer("ServeAB", namesrv_addr=servers[name].namesrv)
            producers[name].start()
            producers[name].send(Message(TOPIC, BODY))  # creates the topic, untimed
        for r in range(args.rounds):
            order = list(trees) if r % 2 == 0 else list(trees)[::-1]
            for name in order:
                pid = servers[name].proc.pid
                switches = loop_wakeups(pid)
                wall, by_thread = timed_sends(servers[name], args.mode, args.count, producers[name])
                sleeps[name].append((loop_wakeups(pid) - switches) / args.count)
                rates[name].append(args.count / wall)
                loop_tid = str(pid)  # the event loop runs in the main thread
                us = {tid: v / args.count * 1e6 for tid, v in by_thread.items()}
                total = sum(us.values())
                per_msg[name].append(total)
                others = sorted((v for tid, v in us.items() if tid != loop_tid), reverse=True)
                print(
                    f"round {r + 1} {name}: {total:.0f} µs/msg server CPU (event loop "
                    f"{us.get(loop_tid, 0.0):.0f}, busiest other threads "
                    f"{' / '.join(f'{v:.0f}' for v in others[:3])}), {args.count / wall:,.0f} msgs/s, "
                    f"loop sleeps {sleeps[name][-1]:.2f}/msg, load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
    finally:
        for p in producers.values():
            p.shutdown()
        for s in servers.values():
            s.stop()
        shutil.rmtree(workdir, ignore_errors=True)  # the servers' data
    for name, values in per_msg.items():
        print(
            f"{name}: median {statistics.median(values):.0f} µs/msg server CPU "
            f"({' / '.join(f'{v:.0f}' for v in values)}), {statistics.median(rates[name]):,.0f} msgs/s, "
            f"loop sleeps {statistics.median(sleeps[name]):.2f}/msg, {args.flush} {args.mode}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
