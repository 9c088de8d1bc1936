"""What one read of one SEND_MESSAGE_V2 costs the broker's ``Connection.data_received``, hot.

    python bench/send_read.py                      # 5 rounds of 20,000 reads
    python bench/send_read.py --opcodes            # Python opcodes per read, by function
    python bench/send_read.py --src OTHER/src      # another tree's code, for an A/B

A broker runs in this process (``rocketq.testing.InProcessCluster``, ASYNC_FLUSH). On its loop,
a connection made by its remoting server (``RemotingServer._make_connection``) over a transport
that does nothing (its ``write`` is a list's ``append``) is given one SEND_MESSAGE_V2 frame per
``data_received`` call, as a producer with one request in flight sends them (the frames of
``bench/send_path.py``): the decoding, checks, put and answer of a lone send, without the
socket calls, the selector and the wake-ups around them. Printed: the loop thread's CPU per read
in each round. With ``--opcodes`` the Python bytecode run per read instead (``sys.settrace``
opcode events; compiled code runs none), a count that does not swing with the machine's load.
The dispatch thread is not counted; rounds wait for it to catch up before they start.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from collections import Counter
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))


class QuietTransport:
    """The transport of the measured connection: takes the answers, sends nothing."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.write = self.frames.append  # C: no opcode per answer

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000)

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5, help="measured rounds (after one warm-up round)")
    ap.add_argument("--count", type=int, default=20_000, help="reads per round")
    ap.add_argument("--opcodes", action="store_true", help="count the Python opcodes per read instead")
    ap.add_argument("--src", default=os.path.join(HERE, "..", "src"), help="the rocketq source tree to run")
    args = ap.parse_args()
    sys.path.insert(0, HERE)
    sys.path.insert(0, os.path.abspath(args.src))

    # rocketq first: send_path puts this tree's src first on the path, rocketq is bound by then
    from rocketq.testing import InProcessCluster  # noqa: PLC0415 - after the source tree is chosen
    from send_path import QUEUES, TOPIC, frames, opcode_tracer  # noqa: PLC0415

    counts: Counter[str] = Counter()

    tracer = opcode_tracer(counts)

    with InProcessCluster() as cluster:
        cluster.create_topic(TOPIC, QUEUES)
        broker = cluster.broker(cluster.broker_names[0])
        print(f"rocketq from {os.path.dirname(sys.modules['rocketq'].__file__ or '')}")
        server = broker._server  # the bench reaches in on purpose: a connection as the server makes it
        assert server is not None

        async def run(batch: list[bytes], traced: bool) -> float:
            conn = server._make_connection()
            transport = QuietTransport()
            conn.connection_made(transport)  # type: ignore[arg-type]
            receive = conn.data_received
            clock = time.pthread_getcpuclockid(threading.get_ident())
            began = time.clock_gettime(clock)
            if traced:
                sys.settrace(tracer)
            try:
                for frame in batch:
                    receive(frame)
            finally:
                sys.settrace(None)
            took = time.clock_gettime(clock) - began
            conn.abort()
            if len(transport.frames) != len(batch):
                raise RuntimeError(f"{len(transport.frames)} answers to {len(batch)} sends")
            return took / len(batch) * 1e6

        cluster.call(run(frames(2_000), False))  # warm-up: the topic's name checked, caches filled
        if args.opcodes:
            batch = frames(args.count)
            cluster.wait_dispatched()
            cluster.call(run(batch, True))
            total = sum(counts.values()) / args.count
            print(f"SEND_MESSAGE_V2, one frame per read: {total:,.1f} Python opcodes per read; by function:")
            for name, n in counts.most_common(25):
                print(f"  {n / args.count:8.2f}  {name}")
            return 0
        rounds = []
        for _ in range(args.rounds):
            batch = frames(args.count)
            cluster.wait_dispatched()
            rounds.append(cluster.call(run(batch, False)))
    print(
        "SEND_MESSAGE_V2, one frame per read: loop-thread CPU per read "
        + " / ".join(f"{r:.2f}" for r in rounds)
        + f" µs (median {statistics.median(rounds):.2f}, least {min(rounds):.2f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
