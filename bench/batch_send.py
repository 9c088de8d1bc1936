"""The broker's CPU per message of batch sends: ``Producer.send_batch`` of 32 messages, one
batch in flight, against a broker in this process.

    python bench/batch_send.py                       # 3 rounds of 1,500 batches of 32 x 128 B
    python bench/batch_send.py --rounds 5 --batches 3000 --size 1024

A broker runs in this process (``rocketq.testing.InProcessCluster``: ``rocketq serve``'s broker on
an event loop of its own thread, ASYNC_FLUSH); the public blocking ``Producer`` sends the batches
from the main thread. What is printed per round is the CPU time of the broker's loop thread
(``pthread_getcpuclockid``) per message: the request's decoding, the checks, the records put,
the answer. The dispatch thread is not counted. CPU time moves much less with the machine's
neighbours than wall time (docs/benchmarks.md); compare trees in one sitting, interleaved.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from rocketq.client import Producer
from rocketq.message import Message
from rocketq.testing import InProcessCluster

TOPIC = "BatchSendBench"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batches", type=int, default=1500, help="batches per round")
    ap.add_argument("--batch", type=int, default=32, help="messages per batch")
    ap.add_argument("--size", type=int, default=128, help="body bytes")
    args = ap.parse_args()
    with InProcessCluster() as cluster:
        cluster.create_topic(TOPIC, 4)

        async def loop_thread_ident() -> int:
            return threading.get_ident()

        clock = time.pthread_getcpuclockid(cluster.call(loop_thread_ident()))
        msgs = [Message(TOPIC, os.urandom(args.size), tags="t") for _ in range(args.batch)]
        per_msg: list[float] = []
        with Producer("BatchSendBenchPG", namesrv_addr=cluster.namesrv_addr) as producer:
            for _ in range(50):  # warm-up: routes, the topic's record layout
                producer.send_batch(msgs)
            for _ in range(args.rounds):
                began = time.clock_gettime(clock)
                for _ in range(args.batches):
                    producer.send_batch(msgs)
                per_msg.append((time.clock_gettime(clock) - began) / (args.batches * args.batch) * 1e6)
    print(
        f"send_batch of {args.batch} x {args.size} B: broker loop-thread CPU per message "
        f"{' / '.join(f'{x:.2f}' for x in per_msg)} µs (median {statistics.median(per_msg):.2f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
