"""The Python client against a real `rocketq serve` process: per-key order across 10,000 messages."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest
from procs import ServeProcess

from _support.wait import wait_until
from rocketq.client import Admin, LitePullConsumer, Message, Producer
from rocketq.protocol.queue import MessageQueue

pytestmark = pytest.mark.slow  # 10 000 messages through a rocketq serve process


@pytest.fixture
def serve(tmp_path: pathlib.Path) -> Iterator[tuple[str, str]]:
    server = ServeProcess(tmp_path)
    try:
        server.start()
        yield server.namesrv_addr, server.broker_addr
        assert server.terminate() == 0  # clean shutdown on SIGTERM
    finally:
        server.close()


def test_sharding_key_order_across_10000_messages_and_4_queues(serve: tuple[str, str]) -> None:
    namesrv, _broker = serve
    topic = "OrderTopic"
    with Admin(namesrv) as admin:
        admin.create_topic(topic, read_queue_nums=4, write_queue_nums=4)

        def routed() -> bool:
            try:
                return len(admin.topic_route(topic).queue_datas) == 1
            except Exception:
                return False

        wait_until(routed, f"the route of {topic}", 15, 0.05)
    keys = [f"order-{i}" for i in range(100)]
    total = 10_000
    queue_of_key: dict[str, int] = {}
    with Producer("PG-order", namesrv_addr=namesrv) as producer:
        for seq in range(total):
            key = keys[seq % len(keys)]
            r = producer.send(Message(topic, f"{key}:{seq}".encode(), tags="O"), sharding_key=key)
            assert queue_of_key.setdefault(key, r.message_queue.queue_id) == r.message_queue.queue_id
    assert len(set(queue_of_key.values())) == 4  # the keys spread over all four queues

    last_seq: dict[str, int] = {}
    seen = 0
    with LitePullConsumer("CG-order", namesrv_addr=namesrv, auto_commit=False) as consumer:
        queues = list(consumer.fetch_message_queues(topic))
        assert len(queues) == 4
        consumer.assign(queues)
        for mq in queues:
            consumer.seek_to_begin(mq)

        def consumed_all() -> bool:
            nonlocal seen
            for m in consumer.poll(timeout_ms=1000):
                key, seq = m.body.decode().split(":")
                assert queue_of_key[key] == m.queue_id, "a key's messages must stay in one queue"
                assert int(seq) > last_seq.get(key, -1), f"{key} out of order at {seq}"
                last_seq[key] = int(seq)
                seen += 1
            return seen >= total

        wait_until(consumed_all, lambda: f"{total} messages (got {seen})", 60, 0)
    assert seen == total
    assert all(last_seq[k] >= total - len(keys) for k in keys)
    assert isinstance(queues[0], MessageQueue)
