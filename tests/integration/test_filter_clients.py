"""SQL92 subscriptions through the LitePullConsumer and PushConsumer against in-process servers."""

from __future__ import annotations

import pathlib
import threading
from collections.abc import Iterator

import pytest
from test_client_producer import WAIT_S, Cluster

from _support.wait import collect_until
from rocketq.client import ConsumeStatus, LitePullConsumer, Message, Producer, PushConsumer
from rocketq.errors import SubscriptionParseFailed
from rocketq.message import MessageExt

TOPIC = "SqlT"
SELECTOR = "region IN ('eu', 'us') AND price >= 50 AND TAGS <> 'skip'"
FAST = {"rebalance_interval_ms": 300, "heartbeat_interval_ms": 1_000, "auto_commit_interval_ms": 300}


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, ("broker-a",))
    c.start()
    c.create_topic(TOPIC, 4)
    try:
        yield c
    finally:
        c.close()


def produce(cluster: Cluster, count: int) -> list[bytes]:
    """Send ``count`` messages; returns the bodies :data:`SELECTOR` selects."""
    wanted = []
    regions = ("eu", "us", "apac", None)
    with Producer("SqlProducer", namesrv_addr=cluster.namesrv_addr) as p:
        for i in range(count):
            region = regions[i % 4]
            price = (i * 7) % 100
            tag = "skip" if i % 5 == 0 else "keep"
            props = {"price": str(price)}
            if region is not None:
                props["region"] = region
            body = f"m{i}".encode()
            p.send(Message(TOPIC, body, tags=tag, properties=props))
            if region in ("eu", "us") and price >= 50 and tag != "skip":
                wanted.append(body)
    assert 0 < len(wanted) < count
    return sorted(wanted)


def queues_consumed(cluster: Cluster, group: str) -> bool:
    broker = cluster.brokers["broker-a"]
    assert broker.ctx is not None and broker.store is not None
    return all(
        broker.ctx.offsets.query_offset(group, TOPIC, q) == broker.store.get_max_offset(TOPIC, q)
        for q in range(4)
    )


def test_lite_pull_consumer_receives_exactly_the_selected_messages(cluster: Cluster) -> None:
    c = LitePullConsumer(
        "SqlLite", namesrv_addr=cluster.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
    )
    c.subscribe(TOPIC, SELECTOR, expression_type="SQL92")
    with c:
        wanted = produce(cluster, 80)
        got: list[MessageExt] = collect_until(lambda: c.poll(timeout_ms=500), len(wanted), "messages", WAIT_S)
        assert c.poll(timeout_ms=300) == []
        assert sorted(m.body for m in got) == wanted
        assert all(m.properties["region"] in ("eu", "us") for m in got)
        assert all(int(m.properties["price"]) >= 50 and m.tags == "keep" for m in got)


@pytest.mark.slow
def test_push_consumer_receives_exactly_the_selected_messages(cluster: Cluster) -> None:
    lock = threading.Lock()
    got: list[bytes] = []

    def listen(msgs: list[MessageExt]) -> ConsumeStatus:
        with lock:
            got.extend(m.body for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer(
        "SqlPush", namesrv_addr=cluster.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET", **FAST
    )
    c.subscribe(TOPIC, SELECTOR, expression_type="SQL92")
    c.register_listener(listen)
    c.start()
    try:
        wanted = produce(cluster, 80)
        # every queue's committed offset reaching its end means every message was seen (and
        # filtered-out ones were counted as consumed)
        cluster.wait_for("all queues consumed", lambda: queues_consumed(cluster, "SqlPush"))
        cluster.wait_for("the selected messages", lambda: len(got) >= len(wanted))
    finally:
        c.shutdown()
    with lock:
        assert sorted(got) == wanted


def test_bad_selector_fails_at_subscribe(cluster: Cluster) -> None:
    lite = LitePullConsumer("SqlBad", namesrv_addr=cluster.namesrv_addr)
    with pytest.raises(SubscriptionParseFailed, match="column 8"):
        lite.subscribe(TOPIC, "price >", expression_type="SQL92")
    push = PushConsumer("SqlBad2", namesrv_addr=cluster.namesrv_addr)
    with pytest.raises(SubscriptionParseFailed, match="IS NULL"):
        push.subscribe(TOPIC, "region = NULL", expression_type="SQL92")
    with pytest.raises(SubscriptionParseFailed, match="unknown expression type"):
        push.subscribe(TOPIC, "a = 1", expression_type="JSONPATH")
    # tag subscriptions keep their old signature
    lite.subscribe(TOPIC, "TagA || TagB")
    push.subscribe(TOPIC, "*")
