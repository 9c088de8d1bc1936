"""Producer/consumer registries: membership changes, ids-changed notifications, expiry; queue locks."""

from __future__ import annotations

import json

from rocketq.broker.client_manager import (
    Channel,
    ClientChannelInfo,
    ConsumerManager,
    ProducerManager,
)
from rocketq.broker.rebalance_lock import (
    LockBatchRequest,
    RebalanceLockManager,
    encode_lock_response,
    parse_lock_body,
)
from rocketq.protocol.heartbeat import build_subscription
from rocketq.protocol.queue import MessageQueue
from rocketq.remoting.command import RemotingCommand


class FakeChannel:
    def __init__(self, name: str) -> None:
        self.remote_address = name
        self._closed = False
        self.sent: list[RemotingCommand] = []

    @property
    def closed(self) -> bool:
        return self._closed

    def send_oneway(self, cmd: RemotingCommand) -> None:
        self.sent.append(cmd)

    def close(self) -> None:
        self._closed = True

    def __repr__(self) -> str:
        return f"FakeChannel({self.remote_address})"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def make_manager() -> tuple[ConsumerManager, list[tuple[str, list[Channel]]], Clock]:
    events: list[tuple[str, list[Channel]]] = []
    clock = Clock()
    manager = ConsumerManager(
        channel_expired_timeout_ms=120_000,
        on_ids_changed=lambda group, channels: events.append((group, channels)),
        clock_ms=clock,
    )
    return manager, events, clock


def register(manager: ConsumerManager, channel: FakeChannel, client_id: str, *topics: str) -> bool:
    subs = [build_subscription(t, "*", sub_version=1) for t in topics]
    return manager.register_consumer(
        "CG",
        ClientChannelInfo(channel, client_id, "JAVA", 475),
        "CONSUME_PASSIVELY",
        "CLUSTERING",
        "CONSUME_FROM_LAST_OFFSET",
        subs,
    )


def test_members_joining_and_leaving_notify_the_group() -> None:
    manager, events, _ = make_manager()
    c1, c2 = FakeChannel("10.0.0.1:1"), FakeChannel("10.0.0.2:2")
    assert register(manager, c1, "10.0.0.1@1", "T")
    assert events == [("CG", [c1])]
    # the periodic heartbeat of a known member changes nothing
    assert not register(manager, c1, "10.0.0.1@1", "T")
    assert len(events) == 1
    # a second member: everyone (both) is told to rebalance
    assert register(manager, c2, "10.0.0.2@2", "T")
    assert events[-1] == ("CG", [c1, c2])
    info = manager.get("CG")
    assert info is not None and info.client_ids() == ["10.0.0.1@1", "10.0.0.2@2"]
    # unregister
    assert manager.unregister_consumer("CG", c2)
    assert events[-1] == ("CG", [c1])
    assert not manager.unregister_consumer("CG", c2)
    # the last member's connection closes: the group disappears
    assert manager.do_channel_close_event(c1) == ["CG"]
    assert events[-1] == ("CG", [])
    assert manager.get("CG") is None


def test_subscription_changes() -> None:
    manager, events, _ = make_manager()
    c1 = FakeChannel("a:1")
    register(manager, c1, "a@1", "T")
    # a new topic counts as a change
    assert register(manager, c1, "a@1", "T", "%RETRY%CG")
    assert len(events) == 2
    # a newer subVersion replaces the subscription without a notification
    newer = build_subscription("T", "TagA", sub_version=2)
    retry = build_subscription("%RETRY%CG", "*", sub_version=1)
    info = ClientChannelInfo(c1, "a@1")
    assert not manager.register_consumer("CG", info, "CONSUME_PASSIVELY", "CLUSTERING", "X", [newer, retry])
    assert manager.find_subscription("CG", "T") == newer
    # an older subVersion does not overwrite
    older = build_subscription("T", "TagB", sub_version=1)
    manager.register_consumer("CG", info, "CONSUME_PASSIVELY", "CLUSTERING", "X", [older, retry])
    assert manager.find_subscription("CG", "T") == newer
    # a heartbeat without subscriptions keeps them
    manager.register_consumer("CG", info, "CONSUME_PASSIVELY", "CLUSTERING", "X", None)
    assert manager.find_subscription("CG", "T") == newer
    # dropping a topic is a change
    assert manager.register_consumer("CG", info, "CONSUME_PASSIVELY", "CLUSTERING", "X", [retry])
    assert manager.find_subscription("CG", "T") is None
    assert manager.groups_of_topic("%RETRY%CG") == ["CG"]


def test_silent_channels_expire_and_are_closed() -> None:
    manager, events, clock = make_manager()
    c1, c2 = FakeChannel("a:1"), FakeChannel("b:2")
    register(manager, c1, "a@1", "T")
    register(manager, c2, "b@2", "T")
    clock.now += 60_000
    register(manager, c2, "b@2", "T")  # c2 heartbeats, c1 does not
    clock.now += 60_001
    expired = manager.scan_not_active_channels()
    assert [e.channel for e in expired] == [c1]
    assert c1.closed and not c2.closed
    assert events[-1] == ("CG", [c2])
    clock.now += 120_001
    manager.scan_not_active_channels()
    assert c2.closed and manager.get("CG") is None


def test_producer_registry() -> None:
    clock = Clock()
    producers = ProducerManager(channel_expired_timeout_ms=120_000, clock_ms=clock)
    p1, p2 = FakeChannel("a:1"), FakeChannel("b:2")
    assert producers.register_producer("PG", ClientChannelInfo(p1, "a@1"))
    assert not producers.register_producer("PG", ClientChannelInfo(p1, "a@1"))
    assert producers.register_producer("PG", ClientChannelInfo(p2, "b@2"))
    assert [c.client_id for c in producers.group_channels("PG")] == ["a@1", "b@2"]
    assert producers.unregister_producer("PG", p1)
    assert producers.do_channel_close_event(p2) == ["PG"]
    assert producers.group_channels("PG") == []
    producers.register_producer("PG", ClientChannelInfo(p1, "a@1"))
    clock.now += 120_001
    assert [e.channel for e in producers.scan_not_active_channels()] == [p1]
    assert p1.closed and "PG" not in producers.table


def test_rebalance_locks() -> None:
    clock = Clock()
    locks = RebalanceLockManager(lock_max_live_time_ms=60_000, clock_ms=clock)
    q0, q1 = MessageQueue("T", "broker-a", 0), MessageQueue("T", "broker-a", 1)
    assert locks.try_lock_batch("G", [q0, q1], "a@1") == [q0, q1]
    # another client cannot take a live lock; the holder renews it
    assert locks.try_lock_batch("G", [q0], "b@2") == []
    clock.now += 40_000
    assert locks.try_lock_batch("G", [q0], "a@1") == [q0]
    clock.now += 30_000  # q1 was not renewed for 70 s: free
    assert locks.try_lock_batch("G", [q0, q1], "b@2") == [q1]
    assert locks.is_locked("G", q0, "a@1") and locks.is_locked("G", q1, "b@2")
    # other groups are independent; unlocking releases only one's own locks
    assert locks.try_lock_batch("H", [q0], "b@2") == [q0]
    locks.unlock_batch("G", [q0, q1], "a@1")
    assert locks.is_locked("G", q1, "b@2") and not locks.is_locked("G", q0, "a@1")
    assert locks.try_lock_batch("G", [q0], "b@2") == [q0]


def test_lock_bodies() -> None:
    body = (
        b'{"consumerGroup":"G","clientId":"ip@1","onlyThisBroker":true,'
        b'"mqSet":[{"topic":"T","brokerName":"broker-a","queueId":3}]}'
    )
    request = parse_lock_body(body)
    assert request == LockBatchRequest("G", "ip@1", (MessageQueue("T", "broker-a", 3),), True)
    assert json.loads(encode_lock_response(request.mq_set)) == {
        "lockOKMQSet": [{"brokerName": "broker-a", "queueId": 3, "topic": "T"}]
    }
