"""Rolling restart of a DLedger leader: SIGTERM to a new master, with and without the hand-over.

    python bench/leader_handover.py [--runs 3] [--election-timeout-ms 1000] [--heartbeat-ms 200]
                                    [--route-refresh-ms 100] [--groups both|on|off]
                                    [--signal TERM|KILL]

Two groups of three ``rocketq broker`` processes and a name server on 127.0.0.1
(:class:`rocketq.testing.chaos.cluster.ChaosGroup`, the confs ``rocketq serve --dledger 3``
writes), one with the hand-over (``dLegerHandoverOnShutdown=true``, the default) and one
without (``--groups`` picks one or both). In each, a producer of the real client sends SYNC, one
message at a time, with its route refreshed every ``--route-refresh-ms`` (100 ms by default;
``route_refresh_interval_ms``, RocketMQ's ``pollNameServerInterval``, 30000 ms by default in
the client: give that to see what a producer left at its default gets, which since the route
re-check after a failed send no longer waits for the refresh). Each run SIGTERMs the leader and
measures, from the signal (``--signal KILL``: the leader is killed instead, which never hands
over):

* ``master``: the name server lists another member as master (brokerId 0);
* ``first ack``: the producer's first acknowledged send stored by that member;

then starts the stopped member again and waits until the group agrees on a leader. Wall-clock
times, not CPU time: what is measured is waiting (elections, round trips), not work. The
temporary directory is removed at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from rocketq.client import Admin, Message, Producer, SendStatus
from rocketq.errors import RocketqError
from rocketq.message import decode_offset_msg_id
from rocketq.testing.chaos.cluster import ChaosGroup

TOPIC = "HandoverBench"
WAIT_S = 60.0
T = TypeVar("T")


def wait(check: Callable[[], T | None], what: str, timeout_s: float = WAIT_S, interval_s: float = 0.005) -> T:
    """``check()``'s first value that is not None (a bounded poll)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not within {timeout_s:g} s")
        time.sleep(interval_s)


class Writer(threading.Thread):
    def __init__(self, namesrv: str, refresh_ms: int) -> None:
        super().__init__(name="bench-writer", daemon=True)
        self.namesrv = namesrv
        self.refresh_ms = refresh_ms
        self.acks: list[tuple[float, str]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        with Producer(
            "HandoverBenchPG",
            namesrv_addr=self.namesrv,
            send_timeout_ms=3000,
            route_refresh_interval_ms=self.refresh_ms,
        ) as producer:
            i = 0
            while not self.stopping.is_set():
                i += 1
                try:
                    result = producer.send(Message(TOPIC, b"m-%d" % i))
                except RocketqError:  # refused or indeterminate: the next message
                    continue
                if result.status is SendStatus.SEND_OK:
                    self.acks.append((time.monotonic(), decode_offset_msg_id(result.offset_msg_id).address))


def one_run(group: ChaosGroup, writer: Writer, sig: int) -> tuple[float, float]:
    """Signal the leader with ``sig``; (s to a new master listed, s to its first ack)."""
    old = group.recover(WAIT_S)
    acked = len(writer.acks)
    wait(lambda: True if len(writer.acks) >= acked + 50 else None, "50 acknowledgements")
    pid = group.pid(old)
    assert pid is not None
    began = time.monotonic()
    os.kill(pid, sig)

    def new_master() -> int | None:
        master = group.master()
        return None if master in (None, old) else master

    master = wait(new_master, "a new master")
    listed = time.monotonic() - began
    addr = group.broker_addr(master)

    def first_ack() -> float | None:
        return next((t for t, a in list(writer.acks) if a == addr and t > began), None)

    first = wait(first_ack, "an acknowledgement from the new master")
    wait(lambda: True if not group.alive(old) else None, "the old leader's exit")
    group.restart(old)
    return listed, first - began


def one_group(
    root: str, handover: bool, runs: int, election_ms: int, heartbeat_ms: int, refresh_ms: int, sig: int
) -> list[tuple[float, float]]:
    conf = {"dLegerHandoverOnShutdown": "true" if handover else "false"}
    group = ChaosGroup(
        root, election_timeout_ms=election_ms, heartbeat_interval_ms=heartbeat_ms, conf=conf, verbose=False
    )
    out: list[tuple[float, float]] = []
    label = "with" if handover else "without"
    with group:
        with Admin(group.namesrv_addr) as admin:
            for node in group.node_ids:
                admin.create_topic(TOPIC, 4, 4, broker_addr=group.broker_addr(node))
            wait(lambda: True if admin.topic_route(TOPIC).queue_datas else None, "the topic routed")
        writer = Writer(group.namesrv_addr, refresh_ms)
        writer.start()
        try:
            for _ in range(runs):
                listed, first = one_run(group, writer, sig)
                out.append((listed, first))
                print(
                    f"  {label} hand-over: master listed {listed * 1000:6.0f} ms, "
                    f"first ack {first * 1000:6.0f} ms",
                    flush=True,
                )
        finally:
            writer.stopping.set()
            writer.join(30)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--election-timeout-ms", type=int, default=1000)
    ap.add_argument("--heartbeat-ms", type=int, default=200)
    ap.add_argument("--route-refresh-ms", type=int, default=100, help="the producer's route refresh interval")
    ap.add_argument("--groups", choices=("both", "on", "off"), default="both", help="with/without hand-over")
    ap.add_argument("--signal", choices=("TERM", "KILL"), default="TERM", help="what the leader gets")
    args = ap.parse_args()
    which = {"both": (True, False), "on": (True,), "off": (False,)}[args.groups]
    root = tempfile.mkdtemp(prefix="rocketq-handover-")
    try:
        results = {}
        for handover in which:
            results[handover] = one_group(
                os.path.join(root, "on" if handover else "off"),
                handover,
                args.runs,
                args.election_timeout_ms,
                args.heartbeat_ms,
                args.route_refresh_ms,
                signal.Signals[f"SIG{args.signal}"],
            )
        for handover, rows in results.items():
            listed = statistics.median(r[0] for r in rows) * 1000
            first = statistics.median(r[1] for r in rows) * 1000
            label = "with" if handover else "without"
            print(
                f"SIG{args.signal}, {label} hand-over (election timeout {args.election_timeout_ms} ms, "
                f"route refresh {args.route_refresh_ms} ms): median master listed {listed:.0f} ms, first ack "
                f"{first:.0f} ms over {len(rows)} runs"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
