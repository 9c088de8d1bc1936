"""Aggregate send rate of ``rocketq serve --brokers N``: one broker process against two.

    python bench/serve_brokers.py             # 1 and 2 brokers, twice each, interleaved
    python bench/serve_brokers.py --seconds 3 --rounds 1

Each round starts ``rocketq serve --brokers N --topic T --queues 4`` (a name server and N broker
processes, each its own store), then runs producers in this process for ``--seconds``: four per
broker, each one connection keeping one SEND_BATCH_MESSAGE request of 32 messages of 128 B in
flight (the requests of bench/broker.py: UNIQ_KEY, WAIT and TAGS per message), spread over the
broker's queues. A Python broker runs on one core at most; the question is what a second
process on a 2-core host adds, and what each message costs the brokers (their CPU time, every
thread, per message: utime + stime from ``/proc/PID/stat``) and this client. The client shares
the machine with the brokers, which is why the batched send (the least client CPU per message)
is what is measured.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(BENCH, "..", "src"))
sys.path.insert(0, BENCH)

from broker import BATCH, Ids, batch_request, create_topic, free_port  # noqa: E402
from rocketq.errors import ResponseCode  # noqa: E402
from rocketq.remoting import RemotingClient  # noqa: E402

TOPIC = "ScaleBench"
QUEUES = 4
PRODUCERS_PER_BROKER = 4
CLK_TCK = os.sysconf("SC_CLK_TCK")
_BROKER_LINE = re.compile(r"^\s+broker\s+(\S+:\d+)\s+\((\S+), pid (\d+),", re.MULTILINE)


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


@dataclass
class Round:
    brokers: int
    msgs: int
    seconds: float
    broker_cpu_s: float
    client_cpu_s: float

    @property
    def rate(self) -> float:
        return self.msgs / self.seconds


async def run_round(count: int, seconds: float, base: str) -> Round:
    data = tempfile.mkdtemp(prefix=f"scale{count}-", dir=base)
    cmd = [sys.executable, "-m", "rocketq.cli", "serve", "--brokers", str(count), "--data-dir", data]
    cmd += ["--namesrv-port", str(free_port()), "--broker-port", "0", "--topic", TOPIC]
    cmd += ["--queues", str(QUEUES)]
    env = dict(os.environ)
    src = os.path.join(BENCH, "..", "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
    try:
        assert proc.stdout is not None
        banner = ""
        deadline = time.monotonic() + 60
        while "  confs " not in banner:
            line = await asyncio.to_thread(proc.stdout.readline)
            if not line or time.monotonic() > deadline:
                raise RuntimeError(f"rocketq serve --brokers {count} did not start: {banner}")
            banner += line
        brokers = [(addr, name, int(pid)) for addr, name, pid in _BROKER_LINE.findall(banner)]
        assert len(brokers) == count, banner
        clients = [RemotingClient() for _ in range(PRODUCERS_PER_BROKER * count)]
        ids = Ids()
        body = os.urandom(128)
        stop_at = 0.0

        async def producer(n: int, client: RemotingClient) -> int:
            addr, name, _ = brokers[n % count]
            queue_id = n // count % QUEUES
            sent = 0
            loop = asyncio.get_running_loop()
            while loop.time() < stop_at:
                request = batch_request(ids, TOPIC, queue_id, body)
                request.ext_fields["n"] = name
                r = await client.invoke(addr, request, 30)
                if r.code != ResponseCode.SUCCESS:
                    raise RuntimeError(f"send to {name} answered {r.code}: {r.remark}")
                sent += BATCH
                queue_id = (queue_id + 1) % QUEUES
            return sent

        try:
            await create_topic(clients[0], brokers[0][0], "ScaleWarm")
            loop = asyncio.get_running_loop()
            result = Round(count, 0, 0.0, 0.0, 0.0)
            for measured in (False, True):
                duration = seconds if measured else 0.5
                cpu0 = sum(cpu_s(pid) for _, _, pid in brokers)
                ccpu0 = time.process_time()
                start = loop.time()
                stop_at = start + duration
                counts = await asyncio.gather(*(producer(i, c) for i, c in enumerate(clients)))
                if measured:
                    result.seconds = loop.time() - start
                    result.msgs = sum(counts)
                    result.broker_cpu_s = sum(cpu_s(pid) for _, _, pid in brokers) - cpu0
                    result.client_cpu_s = time.process_time() - ccpu0
            return result
        finally:
            for c in clients:
                await c.close()
    finally:
        proc.terminate()
        await asyncio.to_thread(proc.wait, 60)
        shutil.rmtree(data, ignore_errors=True)


async def main_async(args: argparse.Namespace) -> None:
    base = tempfile.mkdtemp(prefix="rocketq-bench-scale-")
    rounds: list[Round] = []
    try:
        for _ in range(args.rounds):
            for count in (1, 2):
                r = await run_round(count, args.seconds, base)
                print(f"  {count} broker(s): {r.rate:,.0f} msgs/s", file=sys.stderr, flush=True)
                rounds.append(r)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"# rocketq serve --brokers N, aggregate batched send rate ({os.cpu_count()} CPUs)")
    print()
    print("| brokers | msgs/s (best) | msgs/s (each round) | broker CPU µs/msg | client CPU µs/msg |")
    print("|---:|---:|---|---:|---:|")
    best = {}
    for count in (1, 2):
        mine = [r for r in rounds if r.brokers == count]
        best[count] = max(r.rate for r in mine)
        each = ", ".join(f"{r.rate:,.0f}" for r in mine)
        broker_us = min(r.broker_cpu_s / r.msgs * 1e6 for r in mine)
        client_us = min(r.client_cpu_s / r.msgs * 1e6 for r in mine)
        print(f"| {count} | {best[count]:,.0f} | {each} | {broker_us:.2f} | {client_us:.2f} |")
    print()
    print(f"2 brokers / 1 broker (best rates): {best[2] / best[1]:.2f}x")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=4.0, help="measured seconds per round")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of (1 broker, 2 brokers)")
    asyncio.run(main_async(ap.parse_args()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
