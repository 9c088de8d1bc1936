"""Client behaviour when servers fail, with real ``rocketq namesrv`` / ``rocketq broker`` processes.

* A broker SIGKILLed while a producer sends: every send the application made returns SEND_OK
  (the producer retries a send that hit the dead broker on the other broker of the two-broker
  cluster), and every acknowledged message is really stored — on the survivor, or on the killed
  broker (SYNC_FLUSH), which is restarted and read back.
* The name server SIGKILLed: producers and push consumers go on with the routes they cached; sends
  succeed and the messages are consumed while route refreshes fail.

Every wait is on a condition with a deadline (``procs.wait_until``).
"""

from __future__ import annotations

import pathlib
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from procs import ProcessCluster

from rocketq.client import Admin, ConsumeStatus, Message, Producer, PushConsumer, SendStatus
from rocketq.client.aio import SendResult
from rocketq.message import MessageExt

pytestmark = pytest.mark.slow  # kills brokers and the name server under a running client

TOPIC = "FailoverT"
QUEUES = 4


def _cluster_with_topic(root: pathlib.Path, brokers: tuple[str, ...], name: str) -> Iterator[ProcessCluster]:
    cluster = ProcessCluster(root, brokers, cluster=name)
    try:
        cluster.start()
        cluster.create_topic(TOPIC, QUEUES)
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def two_brokers(tmp_path: pathlib.Path) -> Iterator[ProcessCluster]:
    yield from _cluster_with_topic(tmp_path, ("broker-a", "broker-b"), "FailoverCluster")


@pytest.fixture
def one_broker(tmp_path: pathlib.Path) -> Iterator[ProcessCluster]:
    yield from _cluster_with_topic(tmp_path, ("broker-a",), "NsDownCluster")


def stored_bodies(admin: Admin, broker_name: str) -> list[bytes]:
    out: list[bytes] = []
    for queue_id in range(QUEUES):
        offset = 0
        while True:
            batch = admin.consume_message(TOPIC, queue_id, offset, 256, broker_name=broker_name)
            if not batch:
                break
            out.extend(m.body for m in batch)
            offset = batch[-1].queue_offset + 1
    return out


def test_broker_killed_during_sends_producer_fails_over_without_errors(two_brokers: ProcessCluster) -> None:
    total, kill_after = 300, 60
    results: list[SendResult] = []
    errors: list[BaseException] = []
    reached = threading.Event()

    with Producer("FailoverPG", namesrv_addr=two_brokers.namesrv_addr, send_timeout_ms=5_000) as p:

        def send_all() -> None:
            for i in range(total):
                try:
                    results.append(p.send(Message(TOPIC, f"m-{i}".encode())))
                except BaseException as exc:  # recorded: the test asserts there are none
                    errors.append(exc)
                if i == kill_after:
                    reached.set()

        sender = threading.Thread(target=send_all, name="failover-sender")
        sender.start()
        try:
            two_brokers.wait_until(reached.is_set, f"{kill_after} sends")
            two_brokers.kill("broker-a")  # the sender keeps going meanwhile
        finally:
            sender.join(120)
        assert not sender.is_alive()

    assert errors == []
    assert len(results) == total and all(r.status is SendStatus.SEND_OK for r in results)
    by_broker = Counter(r.message_queue.broker_name for r in results)
    assert by_broker["broker-a"] > 0 and by_broker["broker-b"] > total // 2
    # once the producer noticed, every later send went to the survivor
    assert all(r.message_queue.broker_name == "broker-b" for r in results[-50:])

    two_brokers.start_broker("broker-a")  # recovery after the kill
    two_brokers.wait_ready()
    with Admin(two_brokers.namesrv_addr) as admin:
        stored = Counter(stored_bodies(admin, "broker-a") + stored_bodies(admin, "broker-b"))
    acked = [f"m-{i}".encode() for i in range(total)]
    missing = [b for b in acked if stored[b] == 0]
    assert missing == []  # a retried send may be stored twice, an acknowledged one never zero times


def test_name_server_down_cached_routes_keep_working(one_broker: ProcessCluster) -> None:
    got: list[bytes] = []
    lock = threading.Lock()

    def listen(msgs: list[MessageExt]) -> ConsumeStatus:
        with lock:
            got.extend(m.body for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    def received() -> Counter[bytes]:
        with lock:
            return Counter(got)

    consumer = PushConsumer(
        "NsDownCG",
        namesrv_addr=one_broker.namesrv_addr,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        rebalance_interval_ms=300,
        heartbeat_interval_ms=500,
        auto_commit_interval_ms=500,
    )
    consumer.subscribe(TOPIC, "*")
    consumer.register_listener(listen)
    with Producer("NsDownPG", namesrv_addr=one_broker.namesrv_addr, route_refresh_interval_ms=300) as p:
        consumer.start()
        try:
            first = p.send(Message(TOPIC, b"before"))
            assert first.status is SendStatus.SEND_OK
            one_broker.wait_until(lambda: received()[b"before"] == 1, "the first message consumed")

            one_broker.kill("namesrv")
            # keep sending for several refresh and rebalance periods, all failing to reach it
            sent: list[bytes] = []
            began = time.monotonic()
            while time.monotonic() - began < 2.0 or len(sent) < 50:
                body = f"after-{len(sent)}".encode()
                assert p.send(Message(TOPIC, body)).status is SendStatus.SEND_OK
                sent.append(body)
            one_broker.wait_until(
                lambda: all(received()[b] >= 1 for b in sent), "every message sent without a name server"
            )
            assert {mq.queue_id for mq in consumer.assignment() if mq.topic == TOPIC} == set(range(QUEUES))
        finally:
            consumer.shutdown()
    assert not one_broker.processes["namesrv"].running
