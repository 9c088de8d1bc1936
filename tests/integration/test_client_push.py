"""The push consumer (sync facade over the asyncio core) against in-process name server + broker.

The servers run on their own loop in a helper thread (``Cluster`` from test_client_producer),
built with one-second delay levels so that retries come back quickly. Messages are produced with
the sync ``Producer``. Every wait is on a condition with a deadline.
"""

from __future__ import annotations

import functools
import pathlib
import threading
from collections import Counter
from collections.abc import Iterator

import pytest
import test_client_producer
from test_client_producer import Cluster

from rocketq.client import ConsumeStatus, Message, Producer, PushConsumer
from rocketq.config import StoreConfig
from rocketq.errors import ConfigError
from rocketq.message import PROPERTY_RETRY_TOPIC, MessageExt
from rocketq.protocol.record import view_to_message

TOPIC = "PushT"
FAST_DELAY_LEVELS = " ".join(["1s"] * 18)
#: Short rebalance period so a freshly created %RETRY% route is picked up quickly.
FAST = {"rebalance_interval_ms": 300, "heartbeat_interval_ms": 1_000, "auto_commit_interval_ms": 500}


@pytest.fixture
def cluster(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    monkeypatch.setattr(
        test_client_producer,
        "StoreConfig",
        functools.partial(StoreConfig, message_delay_level=FAST_DELAY_LEVELS),
    )
    c = Cluster(tmp_path, ("broker-a",))
    c.start()
    c.create_topic(TOPIC, 8)
    try:
        yield c
    finally:
        c.close()


class Collector:
    """A thread-safe record of what a listener received."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.messages: list[MessageExt] = []

    def add(self, msgs: list[MessageExt]) -> None:
        with self.lock:
            self.messages.extend(msgs)

    def bodies(self) -> list[bytes]:
        with self.lock:
            return [m.body for m in self.messages]

    def __len__(self) -> int:
        with self.lock:
            return len(self.messages)


def produce(cluster: Cluster, count: int, prefix: str = "m") -> list[bytes]:
    bodies = [f"{prefix}-{i}".encode() for i in range(count)]
    with Producer("PushProducer", namesrv_addr=cluster.namesrv_addr) as p:
        for i, body in enumerate(bodies):
            p.send(Message(TOPIC, body, tags=("TagA", "TagB")[i % 2]))
    return bodies


def consumer(cluster: Cluster, group: str, collector: Collector, **options: object) -> PushConsumer:
    c = PushConsumer(
        group,
        namesrv_addr=cluster.namesrv_addr,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        **{**FAST, **options},
    )
    c.subscribe(TOPIC, "TagA || TagB")

    def listen(msgs: list[MessageExt]) -> ConsumeStatus:
        collector.add(msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    c.register_listener(listen)
    return c


def topic_queues(c: PushConsumer) -> set[int]:
    return {mq.queue_id for mq in c.assignment() if mq.topic == TOPIC}


def test_two_hundred_messages_consumed_exactly_once(cluster: Cluster) -> None:
    sent = produce(cluster, 200)
    got = Collector()
    c = consumer(cluster, "PushOnce", got)
    c.start()
    try:
        cluster.wait_for("200 messages", lambda: len(got) >= 200)
        assert all(m.topic == TOPIC and m.reconsume_times == 0 for m in got.messages)
    finally:
        c.shutdown()
    assert Counter(got.bodies()) == Counter(sent)


def test_two_consumers_share_queues_then_one_takes_over(cluster: Cluster) -> None:
    got1, got2 = Collector(), Collector()
    c1 = consumer(cluster, "PushShare", got1)
    c2 = consumer(cluster, "PushShare", got2)
    c1.start()
    c2.start()
    try:
        cluster.wait_for(
            "queues split between the consumers",
            lambda: (
                len(topic_queues(c1)) == 4
                and len(topic_queues(c2)) == 4
                and topic_queues(c1) | topic_queues(c2) == set(range(8))
            ),
        )
        sent = produce(cluster, 100, "first")
        cluster.wait_for("100 messages", lambda: len(got1) + len(got2) >= 100)
        assert Counter(got1.bodies() + got2.bodies()) == Counter(sent)
        assert len(got1) > 0 and len(got2) > 0
        c1.shutdown()
        cluster.wait_for("c2 owning every queue", lambda: topic_queues(c2) == set(range(8)))
        before = len(got2)
        more = produce(cluster, 40, "second")
        cluster.wait_for("40 new messages at c2", lambda: set(more) <= set(got2.bodies()))
        assert len(got2) - before == 40
    finally:
        c1.shutdown()
        c2.shutdown()


def test_reconsume_later_redelivers_with_reconsume_times(cluster: Cluster) -> None:
    got = Collector()
    failed: set[bytes] = set()
    lock = threading.Lock()

    def listen(msgs: list[MessageExt]) -> ConsumeStatus:
        got.add(msgs)
        with lock:
            first = [m.body for m in msgs if m.body not in failed]
            failed.update(first)
        return ConsumeStatus.RECONSUME_LATER if first else ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer(
        "PushRetry", namesrv_addr=cluster.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET", **FAST
    )
    c.subscribe(TOPIC, "*")
    c.register_listener(listen)
    c.start()
    try:
        sent = produce(cluster, 3, "retry")
        cluster.wait_for("every message twice", lambda: Counter(got.bodies()) == Counter(sent * 2))
    finally:
        c.shutdown()
    again = [m for m in got.messages if m.reconsume_times >= 1]
    assert sorted(m.body for m in again) == sorted(sent)
    assert all(m.topic == TOPIC and m.properties.get(PROPERTY_RETRY_TOPIC) == TOPIC for m in again)


@pytest.mark.slow
def test_always_failing_message_goes_to_dlq(cluster: Cluster) -> None:
    got = Collector()

    def listen(msgs: list[MessageExt]) -> ConsumeStatus:
        got.add(msgs)
        raise RuntimeError("cannot handle this one")

    c = PushConsumer(
        "PushDlq",
        namesrv_addr=cluster.namesrv_addr,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        max_reconsume_times=2,
        **FAST,
    )
    c.subscribe(TOPIC, "*")
    c.register_listener(listen)
    c.start()

    def dlq_bodies() -> list[bytes]:
        views = cluster.pull_all("broker-a", "%DLQ%PushDlq", 0)
        return [view_to_message(v).body for v in views]

    try:
        (sent,) = produce(cluster, 1, "poison")
        cluster.wait_for("the message in the DLQ", lambda: dlq_bodies() == [sent])
    finally:
        c.shutdown()
    assert [m.reconsume_times for m in got.messages] == [0, 1, 2]


def test_unknown_message_model_and_strategy_are_rejected() -> None:
    with pytest.raises(ConfigError, match="message_model='PUBSUB'"):
        PushConsumer("PushModel", namesrv_addr="127.0.0.1:9876", message_model="PUBSUB")
    with pytest.raises(ConfigError, match="'ROUND_ROBIN' is unknown"):
        PushConsumer("PushModel", namesrv_addr="127.0.0.1:9876", allocate_strategy="ROUND_ROBIN")
