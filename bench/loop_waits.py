"""How a ``rocketq serve`` process's event loop waits while one blocking send is in flight.

    python bench/loop_waits.py --base /tmp/before/src          # this checkout against another tree
    python bench/loop_waits.py --plain                          # this checkout, timerfd selector on and off

Starts a ``rocketq serve`` (ASYNC_FLUSH, no gRPC, data in a temporary directory, removed at the
end) per variant, each through a launcher that wraps its event loop's selector, and sends
``--count`` blocking ``Producer.send`` of 128 B to each per round, rounds interleaved (the order
alternates). Per send, over the timed sends only:

* the loop's ``select`` calls: timed (the loop had a timer pending and passed its distance; on
  the plain selector that is ``epoll_wait``'s timeout, on the timerfd selector a wait without
  one, the timerfd set instead), untimed (no timer pending), polls (timeout 0: a callback was
  ready), the timed ones that returned no event (a timer, not a read, ended the wait), and the
  timerfd selector's ``timerfd_settime`` calls;
* the server process's CPU (utime + stime, every thread), the loop's voluntary context switches
  (its sleeps), the rate and the 1-minute load average.

Each server runs with ``ROCKETQ_LOOP_TIMERFD=1`` (the timerfd selector, where the tree has one)
except the ``--plain`` variant (``0``: asyncio's plain epoll selector).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from rocketq.client import Message, Producer, SendStatus
from serve_ab import BODY, SRC, TOPIC, cpu_by_thread, free_port, loop_wakeups, wait_ready

#: the launcher: the counters are written to argv[1] on SIGUSR1 and zeroed on SIGUSR2; the rest
#: is ``rocketq``'s command line
LAUNCHER = r"""
import asyncio, json, signal, sys
counts = dict.fromkeys(("timed", "untimed", "polls", "timer_ended"), 0)
made = []
init = asyncio.SelectorEventLoop.__init__

def counted_init(self, selector=None):
    init(self, selector)
    sel = self._selector
    made.append(sel)
    plain = sel.select

    def select(timeout=None):
        ready = plain(timeout)
        if timeout is None:
            counts["untimed"] += 1
        elif timeout <= 0:
            counts["polls"] += 1
        else:
            counts["timed"] += 1
            if not ready:
                counts["timer_ended"] += 1
        return ready

    sel.select = select

asyncio.SelectorEventLoop.__init__ = counted_init

def dump(*_):
    out = dict(counts, timerfd_sets=sum(getattr(s, "sets", 0) for s in made))
    with open(sys.argv[1], "w") as f:
        json.dump(out, f)

def zero(*_):
    for k in counts:
        counts[k] = 0
    for s in made:
        if hasattr(s, "sets"):
            s.sets = 0

signal.signal(signal.SIGUSR1, dump)
signal.signal(signal.SIGUSR2, zero)
from rocketq.cli import main
sys.exit(main(sys.argv[2:]))
"""


class Server:
    def __init__(self, src: str, timerfd: bool, workdir: str, tag: str) -> None:
        self.dir = tempfile.mkdtemp(prefix=f"{tag}-", dir=workdir)
        self.counts_path = os.path.join(self.dir, "counts.json")
        self.log_path = os.path.join(self.dir, "serve.log")
        namesrv_port, broker_port = free_port(), free_port()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [
                    *(sys.executable, "-c", LAUNCHER, self.counts_path, "serve"),
                    *("--data-dir", os.path.join(self.dir, "data"), "--flush", "ASYNC_FLUSH"),
                    *("--grpc-port", "-1", "--namesrv-port", str(namesrv_port)),
                    *("--broker-port", str(broker_port)),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(
                    os.environ, PYTHONPATH=os.path.abspath(src), ROCKETQ_LOOP_TIMERFD="1" if timerfd else "0"
                ),
            )
        wait_ready(self.proc, self.log_path, src)
        self.producer = Producer("LoopWaits", namesrv_addr=f"127.0.0.1:{namesrv_port}")
        self.producer.start()
        self.producer.send(Message(TOPIC, BODY))  # creates the topic, untimed

    def counts(self) -> dict[str, int]:
        """The launcher's counters, asked for with SIGUSR1 and read once written."""
        with open(self.counts_path, "w", encoding="ascii"):
            pass
        self.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with open(self.counts_path, encoding="ascii") as f:
                text = f.read()
            if text.endswith("}"):
                return dict(json.loads(text))
            time.sleep(0.01)  # the handler runs on the server's next loop iteration
        raise RuntimeError("the server did not write its counters")

    def round(self, count: int) -> dict[str, float]:
        pid = self.proc.pid
        self.proc.send_signal(signal.SIGUSR2)  # zeroed before the server handles the sends
        cpu0, sleeps0, t0 = cpu_by_thread(pid), loop_wakeups(pid), time.monotonic()
        for _ in range(count):
            if self.producer.send(Message(TOPIC, BODY)).status is not SendStatus.SEND_OK:
                raise RuntimeError("a send was not SEND_OK")
        wall = time.monotonic() - t0
        cpu1, sleeps1 = cpu_by_thread(pid), loop_wakeups(pid)
        row: dict[str, float] = {k: v / count for k, v in self.counts().items()}
        row["us"] = sum(cpu1[t] - cpu0.get(t, 0.0) for t in cpu1) / count * 1e6
        row["rate"] = count / wall
        row["sleeps"] = (sleeps1 - sleeps0) / count
        row["load"] = os.getloadavg()[0]
        return row

    def stop(self) -> None:
        self.producer.shutdown()
        self.proc.terminate()
        self.proc.wait(30)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", help="src directory of a tree to compare against")
    ap.add_argument("--new", default=SRC, help="src directory of the tree under test (default: this one)")
    ap.add_argument(
        "--plain",
        action="store_true",
        help="the new tree again with ROCKETQ_LOOP_TIMERFD=0 (the plain selector)",
    )
    ap.add_argument("--count", type=int, default=10_000, help="sends per server and round")
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    variants = {"new": (args.new, True)}
    if args.base:
        variants = {"base": (args.base, True), **variants}
    if args.plain:
        variants["new, plain selector"] = (args.new, False)
    workdir = tempfile.mkdtemp(prefix="loop-waits-")
    servers: dict[str, Server] = {}
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    keys = ("timed", "untimed", "polls", "timer_ended", "timerfd_sets", "sleeps")
    try:
        for name, (src, timerfd) in variants.items():
            servers[name] = Server(src, timerfd, workdir, name.split(",")[0] + ("" if timerfd else "-plain"))
        for r in range(args.rounds):
            order = list(variants) if r % 2 == 0 else list(variants)[::-1]
            for name in order:
                row = servers[name].round(args.count)
                rows[name].append(row)
                print(
                    f"round {r + 1} {name}: {row['us']:.1f} µs/send server CPU, {row['rate']:,.0f} sends/s, "
                    + ", ".join(f"{k} {row[k]:.3f}" for k in keys)
                    + f" per send, load {row['load']:.1f}",
                    flush=True,
                )
    finally:
        for server in servers.values():
            server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    for name, got in rows.items():
        med = {k: statistics.median(row[k] for row in got) for k in (*keys, "us", "rate")}
        each = " / ".join(f"{row['us']:.0f}" for row in got)
        print(
            f"{name}: median {med['us']:.1f} µs/send server CPU ({each}), {med['rate']:,.0f} sends/s, "
            + ", ".join(f"{k} {med[k]:.3f}" for k in keys)
            + " per send"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
