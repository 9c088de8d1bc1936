"""A consumer of a fresh group starts without a WARNING: ``%RETRY%<group>`` has no route until
the group's first heartbeat makes the broker create it (as RocketMQ's broker does) and the broker
registers it with the name server; the consumer takes that as expected, not as a problem."""

from __future__ import annotations

import logging
import pathlib
import time
from collections.abc import Iterator

import pytest
from test_client_producer import Cluster

from rocketq.client import ConsumeStatus, LitePullConsumer, PushConsumer
from rocketq.client.admin import Admin
from rocketq.errors import TopicNotExist
from rocketq.message import MessageExt

TOPIC = "QuietT"
WAIT_S = 20.0


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, ("broker-a",))
    c.start()
    c.create_topic(TOPIC, 4)
    try:
        yield c
    finally:
        c.close()


def _has_route(admin: Admin, topic: str) -> bool:
    try:
        return bool(admin.topic_route(topic).queue_datas)
    except TopicNotExist:
        return False


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        f"{r.name}: {r.getMessage()}"
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name.startswith("rocketq")
    ]


def _listener(msgs: list[MessageExt]) -> ConsumeStatus:
    return ConsumeStatus.CONSUME_SUCCESS


def test_push_consumer_of_a_fresh_group_starts_quietly(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="rocketq")
    group = "FreshQuietGroup"
    retry = f"%RETRY%{group}"
    broker = cluster.brokers["broker-a"]
    assert broker.ctx is not None
    with Admin(cluster.namesrv_addr) as admin:
        assert not _has_route(admin, retry) and retry not in broker.ctx.topics
        c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, rebalance_interval_ms=200)
        c.subscribe(TOPIC, "*")
        c.register_listener(_listener)
        c.start()
        try:
            # the heartbeat created the retry topic on the broker, which registered it
            assert retry in broker.ctx.topics
            deadline = time.monotonic() + WAIT_S
            while not _has_route(admin, retry):
                assert time.monotonic() < deadline, f"{retry} never reached the name server"
                time.sleep(0.05)
            # and the consumer's next rebalances take its queue
            while not any(mq.topic == retry for mq in c.assignment()):
                assert time.monotonic() < deadline, f"the consumer never owned a queue of {retry}"
                time.sleep(0.05)
        finally:
            c.shutdown()
    assert any(retry in r.getMessage() for r in caplog.records), "the missing route was not even logged"
    assert _warnings(caplog) == []


def test_lite_pull_consumer_of_a_fresh_group_starts_quietly(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="rocketq")
    c = LitePullConsumer("FreshLiteGroup", namesrv_addr=cluster.namesrv_addr)
    c.subscribe(TOPIC, "*")
    c.start()
    try:
        assert {mq.queue_id for mq in c.assignment()} == {0, 1, 2, 3}
    finally:
        c.shutdown()
    assert _warnings(caplog) == []
