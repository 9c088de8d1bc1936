"""Timer messages through the broker: a remoting Producer sets ``TIMER_DELIVER_MS`` or Aliyun's
``__STARTDELIVERTIME``; a LitePullConsumer gets the message only after that time.

In-process name server + broker on their own loop (``Cluster`` from test_client_producer), real
TCP on 127.0.0.1. Every wait is on a condition with a deadline.
"""

from __future__ import annotations

import pathlib
import time
from collections.abc import Iterator

import pytest
from test_client_producer import Cluster

from _support.wait import collect_until
from rocketq.client import LitePullConsumer, Message, MessageQueue, Producer
from rocketq.errors import ResponseCode, RocketqError
from rocketq.store.timer import TIMER_TOPIC

WAIT_S = 20.0


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, ("broker-a",))
    c.start()
    try:
        yield c
    finally:
        c.close()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@pytest.mark.slow
@pytest.mark.parametrize("prop", ["TIMER_DELIVER_MS", "__STARTDELIVERTIME"])
def test_timer_message_is_consumed_after_its_time(cluster: Cluster, prop: str) -> None:
    topic = "TimerT"
    cluster.create_topic(topic, 1)
    queue = MessageQueue(topic, "broker-a", 0)
    with (
        Producer("TimerPG", namesrv_addr=cluster.namesrv_addr) as producer,
        LitePullConsumer("TimerCG", namesrv_addr=cluster.namesrv_addr) as consumer,
    ):
        consumer.assign([queue])
        consumer.seek(queue, 0)
        deliver = now_ms() + 1500
        sent = producer.send(Message(topic, b"later", tags="T1", properties={prop: str(deliver)}))
        now = producer.send(Message(topic, b"now", tags="T1"))
        # Held in the timer topic: the consumer sees the plain message only, before the time.
        first = collect_until(lambda: consumer.poll(timeout_ms=500), 1, "messages", WAIT_S)
        assert [m.body for m in first] == [b"now"]
        broker = cluster.brokers["broker-a"]
        assert broker.store is not None and broker.store.get_max_offset(TIMER_TOPIC, 0) == 1
        (late,) = collect_until(lambda: consumer.poll(timeout_ms=500), 1, "messages", WAIT_S)
        assert late.body == b"later" and late.tags == "T1"
        assert late.store_timestamp >= deliver
        assert late.properties[prop] == str(deliver)
        assert late.client_msg_id == sent.msg_id  # same message id as the send result
        assert now.msg_id != sent.msg_id


def test_delay_beyond_the_maximum_is_refused_with_message_illegal(cluster: Cluster) -> None:
    cluster.create_topic("TimerFar", 1)
    addr = cluster.namesrv_addr
    with Producer("TimerFarPG", namesrv_addr=addr, retry_times_when_send_failed=0) as producer:
        far = now_ms() + 4 * 24 * 3600 * 1000
        with pytest.raises(RocketqError, match="max delay") as info:
            producer.send(Message("TimerFar", b"x", properties={"TIMER_DELIVER_MS": str(far)}))
        assert info.value.code == ResponseCode.MESSAGE_ILLEGAL
