"""Orderly push consumers against an in-process name server + broker (``Cluster``).

Messages carry ``<key>:<seq>`` bodies and are sent with the key as sharding key, so each key's
messages sit in one queue in sequence order. The listeners record what they saw and check that no
two calls of one queue overlap. Every wait is on a condition with a deadline.
"""

from __future__ import annotations

import pathlib
import threading
from collections import Counter, defaultdict
from collections.abc import Iterator

import pytest
from test_client_producer import Cluster

from rocketq.client import Admin, ConsumeStatus, Message, Producer, PushConsumer
from rocketq.client.orderly import ConsumeOrderlyStatus
from rocketq.message import MessageExt
from rocketq.protocol.queue import MessageQueue as WireQueue

TOPIC = "OrderT"
QUEUES = 8
FAST = {"rebalance_interval_ms": 300, "heartbeat_interval_ms": 1_000, "auto_commit_interval_ms": 500}


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, ("broker-a",))
    c.start()
    c.create_topic(TOPIC, QUEUES)
    try:
        yield c
    finally:
        c.close()


def produce(cluster: Cluster, keys: int, per_key: int, start: int = 0) -> list[bytes]:
    sent = []
    with Producer("OrderProducer", namesrv_addr=cluster.namesrv_addr) as p:
        for seq in range(start, start + per_key):
            for k in range(keys):
                body = f"k{k}:{seq}".encode()
                p.send(Message(TOPIC, body), sharding_key=f"k{k}")
                sent.append(body)
    return sent


class OrderRecorder:
    """Records consumption order; flags overlapping calls on one queue."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        #: (consumer name, body, reconsume times at the call) in call order
        self.seen: list[tuple[str, bytes, int]] = []
        self.busy: set[int] = set()
        self.overlaps = 0

    def listener(self, name: str, fail_once: set[bytes] | None = None):  # type: ignore[no-untyped-def]
        failed: set[bytes] = set()

        def listen(msgs: list[MessageExt]) -> ConsumeOrderlyStatus:
            qid = msgs[0].queue_id
            with self.lock:
                if qid in self.busy:
                    self.overlaps += 1
                self.busy.add(qid)
            try:
                with self.lock:
                    if fail_once and any(m.body in fail_once and m.body not in failed for m in msgs):
                        failed.update(m.body for m in msgs)
                        self.seen.extend((name, m.body, m.reconsume_times) for m in msgs)
                        return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
                    self.seen.extend((name, m.body, m.reconsume_times) for m in msgs)
                return ConsumeOrderlyStatus.SUCCESS
            finally:
                with self.lock:
                    self.busy.discard(qid)

        return listen

    def bodies(self) -> list[bytes]:
        with self.lock:
            return [body for _, body, _ in self.seen]

    def per_key(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = defaultdict(list)
        for body in self.bodies():
            key, seq = body.decode().split(":")
            out[key].append(int(seq))
        return out


def orderly_consumer(cluster: Cluster, group: str, listener: object, **options: object) -> PushConsumer:
    c = PushConsumer(
        group,
        namesrv_addr=cluster.namesrv_addr,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        **{**FAST, **options},
    )
    c.subscribe(TOPIC, "*")
    c.register_listener(listener, orderly=True)  # type: ignore[arg-type]
    return c


def locked_queues(cluster: Cluster, group: str, client_id: str) -> set[int]:
    broker = cluster.brokers["broker-a"]

    async def read() -> set[int]:
        assert broker.ctx is not None
        return {
            q
            for q in range(QUEUES)
            if broker.ctx.locks.is_locked(group, WireQueue(TOPIC, "broker-a", q), client_id)
        }

    return cluster.call(read())


def test_each_key_in_order_one_call_per_queue_and_locks_held(cluster: Cluster) -> None:
    sent = produce(cluster, keys=6, per_key=25)
    rec = OrderRecorder()
    c = orderly_consumer(cluster, "OrderOne", rec.listener("c"), consume_thread_nums=4)
    c.start()
    try:
        cluster.wait_for("every message", lambda: len(rec.bodies()) >= len(sent))
        assert locked_queues(cluster, "OrderOne", c.client_id) == set(range(QUEUES))
    finally:
        c.shutdown()
    assert Counter(rec.bodies()) == Counter(sent)
    assert all(seqs == list(range(25)) for seqs in rec.per_key().values())
    assert rec.overlaps == 0
    # shutdown unlocked every queue so another member can take them at once
    assert locked_queues(cluster, "OrderOne", c.client_id) == set()


def test_failure_suspends_the_queue_and_retries_the_same_message(cluster: Cluster) -> None:
    sent = produce(cluster, keys=2, per_key=10)
    rec = OrderRecorder()
    c = orderly_consumer(
        cluster, "OrderRetry", rec.listener("c", fail_once={b"k0:3"}), suspend_current_queue_time_ms=200
    )
    c.start()
    try:
        cluster.wait_for("every message", lambda: set(rec.bodies()) == set(sent))
    finally:
        c.shutdown()
    # k0:3 was offered twice in a row; nothing of k0 overtook it
    k0 = [(body, times) for _, body, times in rec.seen if body.startswith(b"k0:")]
    assert k0 == [(f"k0:{i}".encode(), 0) for i in range(4)] + [(b"k0:3", 1)] + [
        (f"k0:{i}".encode(), 0) for i in range(4, 10)
    ]
    assert rec.per_key()["k1"] == list(range(10))
    # the retry was local: nothing went back to the broker's retry topic
    assert cluster.pull_all("broker-a", "%RETRY%OrderRetry", 0) == []


def test_second_member_takes_half_the_queues_without_breaking_order(cluster: Cluster) -> None:
    rec = OrderRecorder()
    c1 = orderly_consumer(cluster, "OrderShare", rec.listener("c1"))
    c2 = orderly_consumer(cluster, "OrderShare", rec.listener("c2"))
    c1.start()
    try:
        first = produce(cluster, keys=8, per_key=10)
        cluster.wait_for("first batch", lambda: len(rec.bodies()) >= len(first))
        c2.start()
        stop = threading.Event()
        more: list[bytes] = []

        def keep_sending() -> None:
            seq = 10
            while not stop.is_set() and seq < 40:
                more.extend(produce(cluster, keys=8, per_key=1, start=seq))
                seq += 1

        sender = threading.Thread(target=keep_sending)
        sender.start()
        cluster.wait_for(
            "queues split and locked",
            lambda: (
                len(locked_queues(cluster, "OrderShare", c1.client_id)) == 4
                and len(locked_queues(cluster, "OrderShare", c2.client_id)) == 4
            ),
        )
        stop.set()
        sender.join()
        total = first + more
        cluster.wait_for("every message", lambda: set(rec.bodies()) >= set(total))
    finally:
        c1.shutdown()
        c2.shutdown()
    names = {name for name, _, _ in rec.seen}
    assert names == {"c1", "c2"}
    # order per key holds across the hand-over, and nothing was consumed twice
    for key, seqs in rec.per_key().items():
        assert seqs == sorted(seqs), key
    assert Counter(rec.bodies()) == Counter(total)
    assert rec.overlaps == 0


def test_concurrent_status_names_are_accepted_by_orderly_listeners(cluster: Cluster) -> None:
    sent = produce(cluster, keys=1, per_key=3)
    got: list[bytes] = []

    def listen(msgs: list[MessageExt]) -> ConsumeStatus:
        got.extend(m.body for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    c = orderly_consumer(cluster, "OrderCompat", listen)
    c.start()
    try:
        cluster.wait_for("three messages", lambda: len(got) >= 3)
    finally:
        c.shutdown()
    assert got == sent


def test_offset_reset_replays_each_queue_in_order(cluster: Cluster) -> None:
    sent = produce(cluster, keys=3, per_key=8)
    rec = OrderRecorder()
    c = orderly_consumer(cluster, "OrderReset", rec.listener("c"))
    c.start()
    try:
        cluster.wait_for("every message", lambda: len(rec.bodies()) >= len(sent))
        with Admin(cluster.namesrv_addr) as admin:
            admin.reset_offset_by_time("OrderReset", TOPIC, 0)
        cluster.wait_for("every message again", lambda: len(rec.bodies()) >= 2 * len(sent))
    finally:
        c.shutdown()
    assert Counter(rec.bodies()) == Counter(sent * 2)
    assert all(seqs == list(range(8)) * 2 for seqs in rec.per_key().values())
    assert rec.overlaps == 0
