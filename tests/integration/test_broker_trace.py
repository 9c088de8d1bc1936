"""Message traces written by the broker (``brokerTraceEnable``) and read back with
``Admin.query_msg_trace_by_id``, against an in-process name server + broker and the Python
client. One-second delay levels make retries come back quickly; every wait is a bounded poll."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import pathlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import test_client_producer
from test_client_producer import Cluster

from _support.pop import broker_config, run
from _support.pop import send as pop_send
from _support.wait import wait_until
from rocketq.broker import Broker, BrokerConfig
from rocketq.cli import main
from rocketq.client import (
    ConsumeStatus,
    LocalTransactionState,
    Message,
    Producer,
    PushConsumer,
    TransactionProducer,
)
from rocketq.client.admin import Admin, decode_messages
from rocketq.client.trace import TraceEvent, format_trace, trace_events
from rocketq.config import StoreConfig
from rocketq.message import MessageExt, encode_properties
from rocketq.protocol import trace as tr
from rocketq.protocol.headers import SendMessageRequestHeader
from rocketq.remoting import RemotingClient, RequestCode, create_request

TOPIC = "TraceT"
FAST = {"rebalance_interval_ms": 300, "heartbeat_interval_ms": 1_000, "auto_commit_interval_ms": 300}
WAIT_S = 30.0


@pytest.fixture
def make_cluster(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Cluster]]:
    started: list[Cluster] = []

    def make(**broker: object) -> Cluster:
        monkeypatch.setattr(
            test_client_producer,
            "StoreConfig",
            functools.partial(StoreConfig, message_delay_level=" ".join(["1s"] * 18)),
        )
        monkeypatch.setattr(test_client_producer, "BrokerConfig", functools.partial(BrokerConfig, **broker))
        c = Cluster(tmp_path, ("broker-a",))
        c.start()
        started.append(c)
        c.create_topic(TOPIC, 2)
        return c

    yield make
    for c in started:
        c.close()


def traced(**extra: object) -> dict[str, object]:
    return {"broker_trace_enable": True, "broker_trace_flush_interval_ms": 50, **extra}


def send_one(cluster: Cluster, body: bytes, keys: str = "order-1") -> str:
    with Producer("TracePG", namesrv_addr=cluster.namesrv_addr) as p:
        result = p.send(Message(TOPIC, body, tags="TagA", keys=[keys]))
    return result.msg_id


def consume(
    cluster: Cluster, group: str, listen: Callable[[list[MessageExt]], ConsumeStatus], **opts: object
) -> PushConsumer:
    c = PushConsumer(
        group,
        namesrv_addr=cluster.namesrv_addr,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        **{**FAST, **opts},
    )
    c.subscribe(TOPIC, "*")
    c.register_listener(listen)
    c.start()
    return c


def wait_trace(cluster: Cluster, msg_id: str, done: Callable[[list[TraceEvent]], bool]) -> list[TraceEvent]:
    found: list[TraceEvent] = []

    with Admin(namesrv_addr=cluster.namesrv_addr) as admin:

        def ready() -> bool:
            try:
                found[:] = admin.query_msg_trace_by_id(msg_id)
            except Exception:  # the trace topic not routed yet
                return False
            return done(found)

        wait_until(ready, f"the trace of {msg_id}", WAIT_S)
    return found


def test_a_retried_message_shows_send_delivery_retry_redelivery_and_success(
    make_cluster: Callable[..., Cluster], capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = make_cluster(**traced())
    calls: list[int] = []
    lock = threading.Lock()

    def listen(msgs: list[MessageExt]) -> ConsumeStatus:
        with lock:
            calls.extend(m.reconsume_times for m in msgs)
            return ConsumeStatus.RECONSUME_LATER if len(calls) == 1 else ConsumeStatus.CONSUME_SUCCESS

    msg_id = send_one(cluster, b"retry-me")
    c = consume(cluster, "TraceG", listen)
    try:
        events = wait_trace(cluster, msg_id, lambda ev: [e.event for e in ev][-1:] == ["consumed"])
    finally:
        c.shutdown()
    assert calls == [0, 1]
    assert [(e.type, e.event, e.group, e.attempt) for e in events] == [
        ("Pub", "send", "TracePG", None),
        ("SubBefore", "deliver", "TraceG", 0),
        ("SubAfter", "consume_failed", "TraceG", 0),
        ("Pub", "retry", "TraceG", 1),
        ("SubBefore", "deliver", "TraceG", 1),
        ("SubAfter", "consumed", "TraceG", 1),
    ], format_trace(events)
    pub, deliver0, failed, retry, deliver1, consumed = events
    assert pub.topic == TOPIC and pub.keys == "order-1" and pub.tags == "TagA" and pub.offset_msg_id
    assert retry.topic == "%RETRY%TraceG" and not failed.success and consumed.success
    assert failed.request_id == deliver0.request_id and consumed.request_id == deliver1.request_id
    # the producer's and the consumer's connections are different clients
    assert pub.client_host.startswith("127.0.0.1:") and deliver0.client_host.startswith("127.0.0.1:")
    assert pub.client_host != deliver0.client_host
    assert deliver0.client_host == failed.client_host == deliver1.client_host
    assert all(e.msg_id == msg_id for e in events)
    times = [e.timestamp for e in events]
    assert times == sorted(times)
    # the command line prints the same timeline, one row per event
    assert main(["admin", "queryMsgTraceById", "-n", cluster.namesrv_addr, "-i", msg_id]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].split()[:6] == ["#Type", "#Group", "#ClientHost", "#Time", "#CostTimes", "#Status"]
    assert [r.split()[0] for r in rows[1:]] == [
        "Pub",
        "SubBefore",
        "SubAfter",
        "Pub",
        "SubBefore",
        "SubAfter",
    ]
    assert "%RETRY%TraceG" in rows[4] and "failed" in rows[3]
    assert main(["admin", "queryMsgTraceById", "-n", cluster.namesrv_addr, "-i", msg_id, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(d["event"], d["attempt"]) for d in doc][-2:] == [("deliver", 1), ("consumed", 1)]


def test_a_message_past_its_retries_shows_the_dead_letter_queue(make_cluster: Callable[..., Cluster]) -> None:
    cluster = make_cluster(**traced())
    msg_id = send_one(cluster, b"poison")
    c = consume(cluster, "TraceDlqG", lambda msgs: ConsumeStatus.RECONSUME_LATER, max_reconsume_times=1)
    try:
        events = wait_trace(cluster, msg_id, lambda ev: any(e.event == "dlq" for e in ev))
    finally:
        c.shutdown()
    assert [(e.event, e.attempt) for e in events] == [
        ("send", None),
        ("deliver", 0),
        ("consume_failed", 0),
        ("retry", 1),
        ("deliver", 1),
        ("consume_failed", 1),
        ("dlq", 2),
    ], format_trace(events)
    assert events[-1].topic == "%DLQ%TraceDlqG"


def test_a_committed_transaction_shows_its_half_and_the_commit(make_cluster: Callable[..., Cluster]) -> None:
    cluster = make_cluster(**traced(transaction_timeout_ms=600_000))
    with TransactionProducer(
        "TraceTxPG", namesrv_addr=cluster.namesrv_addr, check_listener=lambda m: LocalTransactionState.UNKNOW
    ) as p:
        result = p.send_message_in_transaction(
            Message(TOPIC, b"paid", tags="TagT", keys=["tx-1"]),
            lambda m, a: LocalTransactionState.COMMIT_MESSAGE,
        )
    events = wait_trace(cluster, result.msg_id, lambda ev: any(e.type == tr.END_TRANSACTION for e in ev))
    assert [(e.type, e.event, e.group) for e in events] == [
        ("Pub", "send", "TraceTxPG"),
        ("EndTransaction", "commit", "TraceTxPG"),
    ]
    pub, end = events
    assert pub.topic == TOPIC and end.topic == TOPIC and end.keys == "tx-1" and end.tags == "TagT"
    assert end.transaction_state == tr.COMMIT_MESSAGE and not end.from_transaction_check


def test_only_the_listed_topics_are_traced_and_client_written_records_are_read(
    make_cluster: Callable[..., Cluster],
) -> None:
    cluster = make_cluster(**traced(broker_trace_topics="OtherT", trace_topic_enable=True))
    msg_id = send_one(cluster, b"not traced")
    client_id = "0A0000010000000000000000000000AB"
    records = tr.encode_records(
        [
            tr.TraceRecord(
                tr.PUB, 1, "R", "JavaPG", TOPIC, client_id, "TagA", "k", "h:1", 3, 2, 0, "OFF", True
            ),
            tr.TraceRecord(
                tr.SUB_BEFORE, 2, "R", "JavaG", request_id="RQ", msg_id=client_id, retry_times=0, keys="k"
            ),
            tr.TraceRecord(
                tr.SUB_AFTER, 3, group="JavaG", request_id="RQ", msg_id=client_id, keys="k", cost_ms=4
            ),
        ]
    )
    # what a Java client with enableMsgTrace sends: the records, keyed by the msgId and its keys
    header = SendMessageRequestHeader(
        producer_group="_INNER_TRACE_PRODUCER-DEFAULT",
        topic=tr.TRACE_TOPIC,
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=0,
        sys_flag=0,
        born_timestamp=int(time.time() * 1000),
        flag=0,
        properties=encode_properties({"KEYS": f"{client_id} k", "WAIT": "true"}),
    )
    broker = cluster.brokers["broker-a"]
    assert cluster.client is not None
    request = create_request(RequestCode.SEND_MESSAGE, header.to_ext_fields(), body=records.encode())
    response = cluster.call(cluster.client.invoke(f"127.0.0.1:{broker.port}", request, 10))
    assert response.code == 0, response.remark
    events = wait_trace(cluster, client_id, lambda ev: len(ev) == 3)
    assert [(e.event, e.group, e.attempt, e.cost_ms) for e in events] == [
        ("send", "JavaPG", None, 2),
        ("deliver", "JavaG", 0, 0),
        ("consumed", "JavaG", 0, 4),
    ]
    with Admin(namesrv_addr=cluster.namesrv_addr) as admin:
        assert admin.query_msg_trace_by_id(msg_id) == []  # TraceT is not in brokerTraceTopics


def test_tracing_off_writes_nothing(make_cluster: Callable[..., Cluster]) -> None:
    cluster = make_cluster()
    consumed: list[bytes] = []

    def listen(msgs: list[MessageExt]) -> ConsumeStatus:
        consumed.extend(m.body for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    send_one(cluster, b"quiet")
    c = consume(cluster, "QuietG", listen)
    try:
        cluster.wait_for("the message consumed", lambda: consumed == [b"quiet"])
    finally:
        c.shutdown()
    broker = cluster.brokers["broker-a"]
    assert broker.ctx is not None and broker.ctx.trace is None
    assert broker.ctx.topics.select(tr.TRACE_TOPIC) is None
    assert broker.store is not None and broker.store.get_max_offset(tr.TRACE_TOPIC, 0) == 0


def test_pop_deliveries_nacks_and_acks_are_traced(store_config: StoreConfig) -> None:
    async def go() -> list[TraceEvent]:
        client = RemotingClient()
        broker = Broker(dataclasses.replace(broker_config(), **traced()), store_config)
        await broker.start()
        try:
            await pop_send(client, f"127.0.0.1:{broker.port}", "PopTraceT", b"popped", 0)
            assert broker.ctx is not None and broker.ctx.pop is not None and broker.ctx.trace is not None
            pop = broker.ctx.pop
            args: dict[str, Any] = {"group": "PopG", "topic": "PopTraceT", "queue_id": 0, "max_messages": 1}
            (first,) = await pop.receive(**args, invisible_ms=60_000, long_poll_ms=5_000)
            await pop.change_invisible(**args_of(args), receipt_handle=first.receipt_handle, invisible_ms=50)
            (second,) = await pop.receive(**args, invisible_ms=60_000, long_poll_ms=5_000)
            assert second.delivery_attempt == 2
            await pop.ack(**args_of(args), receipt_handle=second.receipt_handle)
            await broker.ctx.trace.flush()
            store = broker.store
            assert store is not None
            await asyncio.to_thread(store.wait_dispatched, WAIT_S)
            got = store.get_message("reader", tr.TRACE_TOPIC, 0, 0, 64)
            views = decode_messages(b"".join(got.buffers), "trace topic")
            return trace_events(first.message.client_msg_id, views)
        finally:
            await broker.shutdown()
            await client.close()

    events = run(go())
    assert [(e.event, e.group, e.attempt) for e in events] == [
        ("send", "PG", None),
        ("deliver", "PopG", 0),
        ("consume_failed", "PopG", 0),
        ("deliver", "PopG", 1),
        ("consumed", "PopG", 1),
    ], format_trace(events)


def args_of(args: dict[str, Any]) -> dict[str, Any]:
    return {"group": args["group"], "topic": args["topic"]}


def test_a_transaction_rolled_back_on_the_brokers_check_is_marked_from_check(
    make_cluster: Callable[..., Cluster],
) -> None:
    cluster = make_cluster(**traced(transaction_timeout_ms=100, transaction_check_interval_ms=50))
    with TransactionProducer(
        "TraceTxPG",
        namesrv_addr=cluster.namesrv_addr,
        check_listener=lambda m: LocalTransactionState.ROLLBACK_MESSAGE,
    ) as p:
        result = p.send_message_in_transaction(
            Message(TOPIC, b"undecided", keys=["tx-2"]), lambda m, a: LocalTransactionState.UNKNOW
        )
        events = wait_trace(cluster, result.msg_id, lambda ev: any(e.type == tr.END_TRANSACTION for e in ev))
    assert [(e.type, e.event) for e in events] == [("Pub", "send"), ("EndTransaction", "rollback")]
    assert events[1].transaction_state == tr.ROLLBACK_MESSAGE and events[1].from_transaction_check
