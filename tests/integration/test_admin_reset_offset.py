"""Resetting a group's offsets to a time: admin API, ``rocketq admin resetOffsetByTime``, the
broker's INVOKE_BROKER_TO_RESET_OFFSET (222) and running push consumers (220), against an
in-process name server + broker. Every wait is on a condition with a deadline.
"""

from __future__ import annotations

import datetime
import json
import pathlib
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from test_client_producer import Cluster

from rocketq.broker.reset_offset import choose_offset
from rocketq.cli import main
from rocketq.client import (
    Admin,
    ConsumeStatus,
    LitePullConsumer,
    Message,
    MessageQueue,
    Producer,
    PushConsumer,
)
from rocketq.client.admin import parse_reset_timestamp
from rocketq.errors import InvalidParameter, RocketqError, SubscriptionGroupNotExist, TopicNotExist
from rocketq.message import MessageExt

TOPIC = "ResetT"
QUEUES = 4
FAST = {"rebalance_interval_ms": 300, "heartbeat_interval_ms": 1_000, "auto_commit_interval_ms": 300}


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, ("broker-a",))
    c.start()
    c.create_topic(TOPIC, QUEUES)
    try:
        yield c
    finally:
        c.close()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def produce(cluster: Cluster, count: int, prefix: str) -> list[bytes]:
    bodies = [f"{prefix}-{i}".encode() for i in range(count)]
    with Producer("ResetProducer", namesrv_addr=cluster.namesrv_addr) as p:
        for body in bodies:
            p.send(Message(TOPIC, body))
    return bodies


def produce_two_eras(cluster: Cluster) -> tuple[list[bytes], int, list[bytes]]:
    """20 messages, then a timestamp strictly later than all of them, then 20 more."""
    old = produce(cluster, 20, "old")
    boundary = now_ms() + 1
    while now_ms() < boundary:  # the next store timestamps are >= boundary
        pass
    new = produce(cluster, 20, "new")
    return old, boundary, new


def committed(cluster: Cluster, group: str) -> dict[int, int]:
    broker = cluster.brokers["broker-a"]

    async def read() -> dict[int, int]:
        assert broker.ctx is not None
        return {q: broker.ctx.offsets.query_offset(group, TOPIC, q) for q in range(QUEUES)}

    return cluster.call(read())


class Inbox:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.bodies: list[bytes] = []

    def listen(self, msgs: list[MessageExt]) -> ConsumeStatus:
        with self.lock:
            self.bodies.extend(m.body for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    def snapshot(self) -> list[bytes]:
        with self.lock:
            return list(self.bodies)


def test_parse_reset_timestamp_forms() -> None:
    assert parse_reset_timestamp("now", now_ms=42) == 42
    assert parse_reset_timestamp("1700000000123") == 1700000000123
    local = datetime.datetime(2024, 3, 5, 6, 7, 8, 9000)
    assert parse_reset_timestamp("2024-03-05#06:07:08:009") == int(local.timestamp() * 1000)
    with pytest.raises(InvalidParameter, match="'yesterday' is not"):
        parse_reset_timestamp("yesterday")


def test_choose_offset_without_force_only_rewinds() -> None:
    assert choose_offset(10, 4, force=False) == 4
    assert choose_offset(10, 15, force=False) == 10
    assert choose_offset(10, 15, force=True) == 15
    assert choose_offset(-1, 15, force=False) == 15


def test_running_push_consumer_rewinds_to_the_time(cluster: Cluster) -> None:
    old, boundary, new = produce_two_eras(cluster)
    inbox = Inbox()
    c = PushConsumer(
        "ResetLive", namesrv_addr=cluster.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET", **FAST
    )
    c.subscribe(TOPIC, "*")
    c.register_listener(inbox.listen)
    c.start()
    try:
        cluster.wait_for("all 40", lambda: len(inbox.snapshot()) >= 40)
        cluster.wait_for("40 committed", lambda: sum(committed(cluster, "ResetLive").values()) == 40)
        with Admin(cluster.namesrv_addr) as admin:
            table = admin.reset_offset_by_time("ResetLive", TOPIC, boundary)
        assert set(table) == {MessageQueue(TOPIC, "broker-a", q) for q in range(QUEUES)}
        assert sum(table.values()) == 20  # each queue's offset of its first "new" message
        cluster.wait_for("the new era again", lambda: len(inbox.snapshot()) >= 60)
        cluster.wait_for("40 committed again", lambda: sum(committed(cluster, "ResetLive").values()) == 40)
    finally:
        c.shutdown()
    got = inbox.snapshot()
    assert Counter(got[:40]) == Counter(old + new)
    assert Counter(got[40:]) == Counter(new)  # exactly the messages stored since the timestamp


def test_offline_group_is_reset_and_force_false_only_rewinds(cluster: Cluster) -> None:
    _old, boundary, _new = produce_two_eras(cluster)
    inbox = Inbox()
    c = PushConsumer(
        "ResetOff", namesrv_addr=cluster.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET", **FAST
    )
    c.subscribe(TOPIC, "*")
    c.register_listener(inbox.listen)
    c.start()
    try:
        cluster.wait_for("all 40", lambda: len(inbox.snapshot()) >= 40)
    finally:
        c.shutdown()
    assert sum(committed(cluster, "ResetOff").values()) == 40
    with Admin(cluster.namesrv_addr) as admin:
        admin.reset_offset_by_time("ResetOff", TOPIC, boundary)
        after_rewind = committed(cluster, "ResetOff")
        assert sum(after_rewind.values()) == 20
        # a later time without force does not move the group forward ...
        admin.reset_offset_by_time("ResetOff", TOPIC, -1, force=False)
        assert committed(cluster, "ResetOff") == after_rewind
        # ... with force it does: -1 is the end of every queue
        admin.reset_offset_by_time("ResetOff", TOPIC, -1, force=True)
        assert sum(committed(cluster, "ResetOff").values()) == 40
        with pytest.raises(TopicNotExist, match="NoSuchTopic"):
            admin.reset_offset_by_time("ResetOff", "NoSuchTopic", 0)
        with pytest.raises(SubscriptionGroupNotExist, match="NoSuchGroup"):
            admin.reset_offset_by_time("NoSuchGroup", TOPIC, 0)
    assert sum(committed(cluster, "ResetOff").values()) == 40  # failed requests changed nothing


def test_cli_reset_offset_by_time(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    produce_two_eras(cluster)
    inbox = Inbox()
    c = PushConsumer(
        "ResetCli", namesrv_addr=cluster.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET", **FAST
    )
    c.subscribe(TOPIC, "*")
    c.register_listener(inbox.listen)
    c.start()
    try:
        cluster.wait_for("all 40", lambda: len(inbox.snapshot()) >= 40)
    finally:
        c.shutdown()
    base = ["admin", "resetOffsetByTime", "-n", cluster.namesrv_addr, "-g", "ResetCli", "-t", TOPIC]
    assert main([*base, "-s", "0", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["force"] is True and [o["offset"] for o in doc["offsets"]] == [0] * QUEUES
    assert sum(committed(cluster, "ResetCli").values()) == 0
    assert main([*base, "-s", "now"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["#brokerName", "#queueId", "#offset"]
    assert sum(committed(cluster, "ResetCli").values()) == 40
    assert main([*base, "-s", "2024-13-45#99:00:00:000"]) == 1
    err = capsys.readouterr().err
    assert "resetOffsetByTime: error: timestamp '2024-13-45#99:00:00:000' is not" in err
    assert sum(committed(cluster, "ResetCli").values()) == 40


def test_lite_pull_consumer_in_a_group_moves_to_the_reset_offsets(cluster: Cluster) -> None:
    old, boundary, new = produce_two_eras(cluster)
    c = LitePullConsumer(
        "ResetLite", namesrv_addr=cluster.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET", **FAST
    )
    c.subscribe(TOPIC, "*")
    got: list[bytes] = []
    with c:
        cluster.wait_for(
            "all 40 polled", lambda: len(got) >= 40 or bool(got.extend(m.body for m in c.poll(200)))
        )
        assert Counter(got) == Counter(old + new)
        with Admin(cluster.namesrv_addr) as admin:
            admin.reset_offset_by_time("ResetLite", TOPIC, boundary)
        again: list[bytes] = []
        cluster.wait_for(
            "the new era again", lambda: len(again) >= 20 or bool(again.extend(m.body for m in c.poll(200)))
        )
    assert Counter(again) == Counter(new)


def test_consumer_status_asks_every_online_member(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    produce(cluster, 20, "s")
    inbox = Inbox()
    members = []
    for _ in range(2):
        c = PushConsumer(
            "StatusCG",
            namesrv_addr=cluster.namesrv_addr,
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            **FAST,
        )
        c.subscribe(TOPIC, "*")
        c.register_listener(inbox.listen)
        members.append(c)
    for c in members:
        c.start()
    try:
        cluster.wait_for(
            "queues split",
            lambda: all(
                len([mq for mq in c.assignment() if mq.topic == TOPIC]) == QUEUES // 2 for c in members
            ),
        )
        cluster.wait_for("all 20", lambda: len(inbox.snapshot()) >= 20)
        with Admin(cluster.namesrv_addr) as admin:

            def settled() -> bool:
                status = admin.consumer_status("StatusCG", TOPIC)
                return sum(sum(q.values()) for q in status.values()) == 20

            cluster.wait_for("positions at the end", settled)
            status = admin.consumer_status("StatusCG", TOPIC)
            assert set(status) == {c.client_id for c in members}
            for c in members:
                assert set(status[c.client_id]) == {mq for mq in c.assignment() if mq.topic == TOPIC}
            one = admin.consumer_status("StatusCG", TOPIC, members[0].client_id)
            assert list(one) == [members[0].client_id]
            with pytest.raises(RocketqError, match="no consumer online"):
                admin.consumer_status("NobodyHere", TOPIC)
        cmd = [
            "admin",
            "getConsumerStatus",
            "-n",
            cluster.namesrv_addr,
            "-g",
            "StatusCG",
            "-t",
            TOPIC,
            "--json",
        ]
        assert main(cmd) == 0
        rows = json.loads(capsys.readouterr().out)
        assert len(rows) == QUEUES and sum(r["offset"] for r in rows) == 20
    finally:
        for c in members:
            c.shutdown()
