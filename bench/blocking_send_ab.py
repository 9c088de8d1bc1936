"""The blocking producer's send, one in flight, from several trees' clients side by side.

    git worktree add /tmp/before <commit>        # a tree to compare against (build its _speedups)
    python bench/blocking_send_ab.py --tree before=/tmp/before/src --tree new=src
    python bench/blocking_send_ab.py --tree before=/tmp/before/src --tree new=src --canned
    python bench/blocking_send_ab.py --tree before=/tmp/before/src --tree new=src --async

Starts one ``rocketq serve`` (ASYNC_FLUSH, no gRPC, data in a temporary directory removed at the
end) from ``--server`` (default: the first tree's ``src``) and, for each of ``--runs`` runs, one
client process per tree in turn (the order alternating from run to run), each with its own tree
on ``PYTHONPATH``. A client sends 2,000 messages of 128 B with a blocking ``Producer.send`` to warm
up, then ``--rounds`` rounds of ``--count``, and prints each round's round trips a second and its
CPU per send: the process's (``time.process_time``) and the sending thread's
(``time.thread_time``).

``--canned``: the client's Python alone. After the warm-up the producer's connections are
replaced by ones on a socket stand-in that takes each frame and answers it at once with the
SUCCESS answer a broker would write (its opaque and queue id), so a send makes no system call;
each round prints the sending thread's CPU per send less the stand-in's own cost (its send and
receive called alone on a frame of the same size, in the same process).

``--async``: the client is an :class:`~rocketq.client.AsyncProducer` on ``asyncio.run``, each
``await producer.send(msg)`` made after the one before it was answered (the same warm-up,
rounds and figures; the sending thread is the event loop's). With ``--canned`` its connection's
transport is replaced by a stand-in whose ``write`` puts the SUCCESS answer into the
connection's read buffer and has the loop call ``buffer_updated`` at its next iteration, as a
read would (no system call; the stand-in's own cost, its writes and their callbacks run alone
in the same process, is subtracted).

On a shared machine the rates swing with the neighbours and with where the scheduler puts the
two processes; the CPU per send moves much less, and rotating the trees in the same minutes
cancels most of the drift. The summary is each tree's median over all its rounds, with the range,
the 1-minute load average at the end, and each later tree against the first, round by round (in
how many paired rounds its CPU per send was lower, and the median of the differences).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

BODY = b"x" * 128
TOPIC = "BlockingSendAB"
WARM_UP = 2_000


def _report_round(count: int, c0: float, t0: float, w0: float, fake_us: float) -> None:
    """Print one round's sends/s, process CPU µs per send and thread CPU µs per send less the
    stand-in's (``fake_us``), from the round's start readings."""
    wall = time.monotonic() - w0
    process_us = (time.process_time() - c0) / count * 1e6
    thread_us = (time.thread_time() - t0) / count * 1e6
    print(f"{count / wall:.1f} {process_us:.3f} {thread_us - fake_us:.3f}", flush=True)


def child(src: str, namesrv: str, rounds: int, count: int, canned: bool) -> None:
    """One client process: prints one line per round (see the module)."""
    sys.path.insert(0, src)
    # the tree's own rocketq, imported once its src is on the path
    from rocketq.client import Message, Producer, SendStatus  # noqa: PLC0415
    from rocketq.remoting.blocking import BlockingConnection  # noqa: PLC0415
    from rocketq.remoting.codec import encode  # noqa: PLC0415
    from rocketq.remoting.codes import FLAG_RESPONSE  # noqa: PLC0415
    from rocketq.remoting.command import RemotingCommand  # noqa: PLC0415

    opaque_re, queue_re = re.compile(rb'"opaque":(\d+)'), re.compile(rb'"e":"(\d+)"')

    class Answering:
        """A socket stand-in: answers each frame written to it with a SUCCESS send answer."""

        def __init__(self) -> None:
            self.last = b""

        def settimeout(self, timeout: float | None) -> None:
            pass

        def setsockopt(self, *args: object) -> None:
            pass

        def close(self) -> None:
            pass

        def send(self, data: bytes, flags: int = 0) -> int:
            self.last = bytes(data)
            return len(data)

        def recv_into(self, buf: bytearray) -> int:
            opaque = re.search(opaque_re, self.last)
            queue = re.search(queue_re, self.last)
            assert opaque is not None and queue is not None
            fields = {"msgId": "7F00000100002A9F0000000000000000", "queueId": queue.group(1).decode()}
            fields["queueOffset"] = "5"
            frame = encode(
                RemotingCommand(0, opaque=int(opaque.group(1)), flag=FLAG_RESPONSE, ext_fields=fields)
            )
            buf[: len(frame)] = frame
            return len(frame)

    producer = Producer("BlockingSendAB", namesrv_addr=namesrv)
    producer.start()
    try:
        for _ in range(WARM_UP):
            if producer.send(Message(TOPIC, BODY)).status is not SendStatus.SEND_OK:
                raise RuntimeError("a send was not SEND_OK")
        fake_us = 0.0
        if canned:
            pool = producer._pool
            assert pool is not None
            answering = Answering()
            for addr, conns in pool._idle.items():
                for conn in conns:
                    conn.close()
                conns[:] = [BlockingConnection(addr, answering)]  # type: ignore[arg-type]
            for _ in range(WARM_UP):
                producer.send(Message(TOPIC, BODY))
            stand_in, buf = Answering(), bytearray(4096)
            sample = answering.last  # a request as the tree writes it
            t0 = time.thread_time()
            for _ in range(count):
                stand_in.send(sample)
                stand_in.recv_into(buf)
            fake_us = (time.thread_time() - t0) / count * 1e6
        for _ in range(rounds):
            c0, t0, w0 = time.process_time(), time.thread_time(), time.monotonic()
            for _ in range(count):
                if producer.send(Message(TOPIC, BODY)).status is not SendStatus.SEND_OK:
                    raise RuntimeError("a send was not SEND_OK")
            _report_round(count, c0, t0, w0, fake_us)
    finally:
        producer.shutdown()


def async_child(src: str, namesrv: str, rounds: int, count: int, canned: bool) -> None:
    """One client process with an AsyncProducer: prints one line per round (see the module)."""
    sys.path.insert(0, src)
    import asyncio  # noqa: PLC0415

    from rocketq.client import AsyncProducer, Message, SendStatus  # noqa: PLC0415
    from rocketq.remoting.codec import encode  # noqa: PLC0415
    from rocketq.remoting.codes import FLAG_RESPONSE  # noqa: PLC0415
    from rocketq.remoting.command import RemotingCommand  # noqa: PLC0415

    opaque_re, queue_re = re.compile(rb'"opaque":(\d+)'), re.compile(rb'"e":"(\d+)"')

    def answer(request: bytes) -> bytes:
        opaque = re.search(opaque_re, request)
        queue = re.search(queue_re, request)
        assert opaque is not None and queue is not None
        fields = {"msgId": "7F00000100002A9F0000000000000000", "queueId": queue.group(1).decode()}
        fields["queueOffset"] = "5"
        return encode(RemotingCommand(0, opaque=int(opaque.group(1)), flag=FLAG_RESPONSE, ext_fields=fields))

    class Answering:
        """A transport stand-in: each frame written is answered by a read at the next iteration."""

        def __init__(self, conn: Any, loop: asyncio.AbstractEventLoop) -> None:
            self.conn, self.loop, self.last = conn, loop, b""

        def write(self, data: bytes) -> None:
            self.last = bytes(data)
            frame = answer(self.last)
            buf = self.conn.get_buffer(len(frame))
            buf[: len(frame)] = frame
            self.loop.call_soon(self.conn.buffer_updated, len(frame))

        def is_closing(self) -> bool:
            return False

        def close(self) -> None:
            pass

        def abort(self) -> None:
            pass

    class Reading:
        """A connection stand-in for timing :class:`Answering` alone."""

        def __init__(self) -> None:
            self.buf = bytearray(4096)

        def get_buffer(self, sizehint: int) -> bytearray:
            return self.buf

        def buffer_updated(self, nbytes: int) -> None:
            pass

    async def run() -> None:
        producer = AsyncProducer("BlockingSendAB", namesrv_addr=namesrv)
        await producer.start()
        try:
            for _ in range(WARM_UP):
                if (await producer.send(Message(TOPIC, BODY))).status is not SendStatus.SEND_OK:
                    raise RuntimeError("a send was not SEND_OK")
            fake_us = 0.0
            real: dict[Any, Any] = {}
            if canned:
                remoting = producer._remoting
                assert remoting is not None
                for conn in remoting._connections.values():
                    real[conn] = conn._transport
                    conn._transport = Answering(conn, asyncio.get_running_loop())
                for _ in range(WARM_UP):
                    await producer.send(Message(TOPIC, BODY))
                sample = max((conn._transport.last for conn in remoting._connections.values()), key=len)
                stand_in = Answering(Reading(), asyncio.get_running_loop())
                t0 = time.thread_time()
                for _ in range(count):
                    stand_in.write(sample)
                await asyncio.sleep(0)
                fake_us = (time.thread_time() - t0) / count * 1e6
            for _ in range(rounds):
                c0, t0, w0 = time.process_time(), time.thread_time(), time.monotonic()
                for _ in range(count):
                    if (await producer.send(Message(TOPIC, BODY))).status is not SendStatus.SEND_OK:
                        raise RuntimeError("a send was not SEND_OK")
                _report_round(count, c0, t0, w0, fake_us)
        finally:
            for conn, transport in real.items():
                conn._transport = transport
            await producer.shutdown()

    asyncio.run(run())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", default=[], help="NAME=SRC, a tree's src directory (repeat)")
    ap.add_argument("--server", help="src directory of the rocketq serve (default: the first tree's)")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--count", type=int, default=5_000, help="sends per round")
    ap.add_argument("--canned", action="store_true", help="the client's Python alone (see above)")
    ap.add_argument("--async", dest="use_async", action="store_true", help="an AsyncProducer (see above)")
    ap.add_argument("--child", nargs=2, metavar=("SRC", "NAMESRV"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child and args.use_async:
        async_child(args.child[0], args.child[1], args.rounds, args.count, args.canned)
        return 0
    if args.child:
        child(args.child[0], args.child[1], args.rounds, args.count, args.canned)
        return 0
    # imported here, not at the top: serve_ab loads rocketq from this checkout, and a child must
    # load the tree it measures
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from serve_ab import free_port, wait_ready  # noqa: PLC0415

    trees = dict(t.split("=", 1) for t in args.tree)
    if not trees:
        ap.error("give at least one --tree NAME=SRC")
    server_src = os.path.abspath(args.server or next(iter(trees.values())))
    data_dir = tempfile.mkdtemp(prefix="blocking-send-ab-")
    namesrv_port, broker_port = free_port(), free_port()
    log_path = os.path.join(data_dir, "serve.log")
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [
                *(sys.executable, "-m", "rocketq.cli", "serve", "--data-dir", data_dir),
                *("--flush", "ASYNC_FLUSH", "--grpc-port", "-1"),
                *("--namesrv-port", str(namesrv_port), "--broker-port", str(broker_port)),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONPATH=server_src),
        )
    rows: dict[str, list[tuple[float, ...]]] = {name: [] for name in trees}
    try:
        wait_ready(server, log_path, server_src)
        names = list(trees)
        for run in range(args.runs):
            for name in names if run % 2 == 0 else names[::-1]:
                src = os.path.abspath(trees[name])
                command = [sys.executable, os.path.abspath(__file__), "--child", src]
                command += [
                    f"127.0.0.1:{namesrv_port}",
                    "--rounds",
                    str(args.rounds),
                    "--count",
                    str(args.count),
                ]
                command += ["--canned"] if args.canned else []
                command += ["--async"] if args.use_async else []
                env = dict(os.environ, PYTHONPATH=src)
                out = subprocess.run(command, check=False, capture_output=True, text=True, env=env)
                if out.returncode:
                    raise RuntimeError(f"the client of {name} failed:\n{out.stderr}")
                rows[name] += [tuple(map(float, line.split())) for line in out.stdout.splitlines() if line]
            now = time.strftime("%H:%M:%S", time.gmtime())
            print(f"run {run + 1}/{args.runs} done, {now} UTC, load {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        server.terminate()
        server.wait(30)
        shutil.rmtree(data_dir, ignore_errors=True)
    print(f"load average {os.getloadavg()[0]:.2f}")
    for name, got in rows.items():
        rate, process, thread = ([row[i] for row in got] for i in range(3))
        if args.canned:
            print(
                f"{name}: {len(got)} rounds, the client's Python per send {statistics.median(thread):.2f} µs "
                f"({min(thread):.2f}-{max(thread):.2f})"
            )
        else:
            print(
                f"{name}: {len(got)} rounds, {statistics.median(rate):,.0f} round trips/s "
                f"({min(rate):,.0f}-{max(rate):,.0f}), client CPU {statistics.median(process):.1f} µs/send "
                f"({min(process):.1f}-{max(process):.1f}), sending thread {statistics.median(thread):.1f}"
            )
    # each later tree against the first round by round (round i of run r of both): the drift of
    # the machine between runs cancels in the pairs
    first, *later = rows
    column = 2 if args.canned else 1
    for name in later:
        pairs = list(zip(rows[first], rows[name], strict=False))
        lower = sum(mine[column] < theirs[column] for theirs, mine in pairs)
        diff = statistics.median(mine[column] - theirs[column] for theirs, mine in pairs) if pairs else 0.0
        print(
            f"{name} against {first}: lower in {lower} of {len(pairs)} paired rounds, "
            f"median difference {diff:+.2f} µs"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
