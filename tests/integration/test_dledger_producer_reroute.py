"""Producers with the default route refresh interval follow a DLedger leader change at once.

A group of three ``rocketq broker`` processes (:class:`rocketq.testing.chaos.cluster.ChaosGroup`)
with a long election timeout (5000 ms), so the new master comes from the hand-over a stopping
leader makes (about 0.12 s, then it registers within about 0.1 s). Two producers of the real
client, the blocking :class:`Producer` and the :class:`AsyncProducer`, each send SYNC, one
message at a time, with the DEFAULT route refresh interval (30 s): before the route re-check
they kept sending to the old leader's address until that refresh. The leader gets SIGTERM; each
producer's first acknowledgement from the new leader must come within ``FIRST_ACK_WITHIN_S``
of the signal (a tenth of the refresh interval), and nothing acknowledged may be lost.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import shutil
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from _support.wait import wait_until
from rocketq.client import Admin, Message, Producer, SendStatus
from rocketq.client.aio import DEFAULT_ROUTE_REFRESH_INTERVAL_MS, AsyncProducer, SendResult
from rocketq.errors import RocketqError
from rocketq.message import decode_offset_msg_id
from rocketq.testing.chaos.cluster import ChaosGroup, ChaosUnsupported

# a group of broker processes and a restart: not in make fast
pytestmark = pytest.mark.slow

TOPIC = "RerouteT"
QUEUES = 4
BROKER = "broker-a"
ELECTION_TIMEOUT_MS = 5000
HEARTBEAT_MS = 200
#: the first acknowledgement from the new leader comes this soon after the SIGTERM
FIRST_ACK_WITHIN_S = 3.0
WAIT_S = 60.0


class Writer:
    """SYNC sends from a thread, one at a time, a new body each, by a producer with the default
    route refresh interval (blocking or asyncio): what was acknowledged (body, when, the
    broker that stored it) and what failed."""

    def __init__(self, namesrv: str, prefix: str, kind: str) -> None:
        self.namesrv = namesrv
        self.prefix = prefix
        self.kind = kind
        self.acked: list[tuple[bytes, float, str]] = []
        self.failed: set[bytes] = set()
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"writer-{prefix}")

    def __enter__(self) -> Writer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), "the writer did not stop"
        assert self.error is None, self.error

    def _note(self, body: bytes, result: SendResult) -> None:
        if result.status is SendStatus.SEND_OK:
            addr = decode_offset_msg_id(result.offset_msg_id).address
            self.acked.append((body, time.monotonic(), addr))
        else:
            self.failed.add(body)

    def _bodies(self) -> Iterator[bytes]:
        i = 0
        while not self._stop.is_set():
            yield f"{self.prefix}-{i}".encode()
            i += 1

    def _run(self) -> None:
        try:
            if self.kind == "blocking":
                self._run_blocking()
            else:
                asyncio.run(self._run_async())
        except BaseException as exc:  # shown by __exit__
            self.error = exc

    def _run_blocking(self) -> None:
        with Producer(f"{self.prefix}PG", namesrv_addr=self.namesrv) as producer:
            assert producer._core.route_refresh_interval_ms == DEFAULT_ROUTE_REFRESH_INTERVAL_MS
            for body in self._bodies():
                try:
                    self._note(body, producer.send(Message(TOPIC, body)))
                except RocketqError:
                    self.failed.add(body)

    async def _run_async(self) -> None:
        async with AsyncProducer(f"{self.prefix}PG", namesrv_addr=self.namesrv) as producer:
            assert producer.route_refresh_interval_ms == DEFAULT_ROUTE_REFRESH_INTERVAL_MS
            for body in self._bodies():
                try:
                    self._note(body, await producer.send(Message(TOPIC, body)))
                except RocketqError:
                    self.failed.add(body)

    def first_ack_on(self, addr: str, after: float) -> float | None:
        return next((t for _, t, a in list(self.acked) if a == addr and t > after), None)

    def wait_acked(self, more: int, what: str) -> None:
        target = len(self.acked) + more
        wait_until(lambda: len(self.acked) >= target, f"{more} more acknowledgements {what}", WAIT_S)


def _stored(namesrv: str) -> set[bytes]:
    out: set[bytes] = set()
    with Admin(namesrv) as admin:
        for qid in range(QUEUES):
            offset = 0
            while batch := admin.consume_message(TOPIC, qid, offset, 256, broker_name=BROKER):
                out.update(m.body for m in batch)
                offset = batch[-1].queue_offset + 1
    return out


@pytest.fixture
def group(tmp_path: pathlib.Path) -> Iterator[ChaosGroup]:
    group = ChaosGroup(
        tmp_path / "group",
        election_timeout_ms=ELECTION_TIMEOUT_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
        verbose=False,
    )
    try:
        try:
            group.start()
        except ChaosUnsupported as exc:
            pytest.skip(str(exc))
        with Admin(group.namesrv_addr) as admin:
            for node in group.node_ids:  # every member holds the topic: any new master routes it
                admin.create_topic(TOPIC, QUEUES, QUEUES, broker_addr=group.broker_addr(node))
            wait_until(lambda: admin.topic_route(TOPIC).queue_datas, "the topic routed", WAIT_S)
        yield group
    except BaseException:
        print(group.logs())
        raise
    else:
        group.stop()
        shutil.rmtree(group.root, ignore_errors=True)
    finally:
        group.stop()


def test_producers_with_the_default_refresh_follow_a_hand_over_at_once(group: ChaosGroup) -> None:
    with (
        Writer(group.namesrv_addr, "rb", "blocking") as blocking,
        Writer(group.namesrv_addr, "ra", "async") as aio,
    ):
        old = group.wait_leader(WAIT_S)
        blocking.wait_acked(20, "before the SIGTERM")
        aio.wait_acked(20, "before the SIGTERM")
        pid = group.pid(old)
        assert pid is not None
        sigterm_at = time.monotonic()
        os.kill(pid, signal.SIGTERM)

        def new_master() -> tuple[int] | None:  # a tuple: node 0 is a value too
            master = group.master()
            return (master,) if master is not None and master != old else None

        (master,) = wait_until(new_master, "a new master listed by the name server", WAIT_S, 0.005)
        addr = group.broker_addr(master)
        took = {}
        for writer in (blocking, aio):
            first = wait_until(
                lambda w=writer: w.first_ack_on(addr, sigterm_at),
                f"an ack on the new leader ({writer.kind})",
                WAIT_S,
            )
            took[writer.kind] = first - sigterm_at
        print(
            "SIGTERM to the first ack on the new leader: "
            + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in took.items())
        )
        for kind, seconds in took.items():
            assert seconds < FIRST_ACK_WITHIN_S, (
                f"{kind} producer: first ack on the new leader after {seconds:.2f} s"
            )
        blocking.wait_acked(20, "after the hand-over")
        aio.wait_acked(20, "after the hand-over")
    # nothing acknowledged is lost (read back from the group, the old member started again)
    wait_until(lambda: not group.alive(old), f"node {old} to exit", WAIT_S)
    group.restart(old)
    group.recover(WAIT_S)
    acked = {b for w in (blocking, aio) for b, _, _ in w.acked}
    stored = wait_until(
        lambda: s if acked <= (s := _stored(group.namesrv_addr)) else None,
        "every acknowledged message read back",
        WAIT_S,
    )
    assert {b for b in stored if b[:3] in (b"rb-", b"ra-")} <= acked | blocking.failed | aio.failed
