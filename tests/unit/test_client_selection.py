"""Fault-tolerance table and queue selection of the producer (pure, no I/O)."""

from __future__ import annotations

import pytest

from rocketq.client._fault import (
    LATENCY_MAX_MS,
    NOT_AVAILABLE_DURATION_MS,
    LatencyFaultTolerance,
    not_available_duration_ms,
)
from rocketq.client._routes import TopicPublishInfo, hash_queue_index
from rocketq.client.aio import encode_batch_body, parse_namesrv_addrs
from rocketq.client.send_values import validate_message, validate_send_topic
from rocketq.errors import (
    ConfigError,
    MessageIllegal,
    RemotingConnectError,
    RemotingTimeout,
    SystemBusy,
    TopicNameInvalid,
    TopicNotExist,
    error_for_code,
)
from rocketq.message import Message, java_string_hash
from rocketq.protocol.queue import MessageQueue
from rocketq.protocol.route import BrokerData, QueueData, TopicRouteData


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("latency", "back_off"),
    [
        (0, 0),
        (49, 0),
        (50, 0),
        (100, 0),
        (549, 0),
        (550, 30_000),
        (999, 30_000),
        (1000, 60_000),
        (2000, 120_000),
        (3000, 180_000),
        (14_999, 180_000),
        (15_000, 600_000),
        (60_000, 600_000),
    ],
)
def test_not_available_duration_table(latency: int, back_off: int) -> None:
    assert not_available_duration_ms(latency) == back_off


def test_tables_are_rocketmqs() -> None:
    assert LATENCY_MAX_MS == (50, 100, 550, 1000, 2000, 3000, 15000)
    assert NOT_AVAILABLE_DURATION_MS == (0, 0, 30000, 60000, 120000, 180000, 600000)


def test_fault_tolerance_back_off_and_recovery() -> None:
    clock = Clock()
    faults = LatencyFaultTolerance(clock)
    faults.update("a", 10)
    assert faults.is_available("a")
    faults.update("a", 1200)  # slow send: 60 s back-off
    assert not faults.is_available("a")
    clock.now += 59.9
    assert not faults.is_available("a")
    clock.now += 0.2
    assert faults.is_available("a")
    faults.update("b", 5, failed=True)  # failure: 600 s
    clock.now += 599
    assert not faults.is_available("b")
    faults.update("b", 3)  # a fast success clears it
    assert faults.is_available("b")
    faults.update("c", 0, failed=True)
    clock.now += 1
    faults.update("d", 0, failed=True)
    assert faults.least_bad(["c", "d"]) == "c"
    assert faults.least_bad(["c", "d", "e"]) == "e"
    assert faults.least_bad([]) is None


def route(**writes: int) -> TopicRouteData:
    return TopicRouteData(
        queue_datas=tuple(
            QueueData(broker_name=name, read_queue_nums=n, write_queue_nums=n, perm=6)
            for name, n in writes.items()
        ),
        broker_datas=tuple(
            BrokerData(cluster="C", broker_name=name, broker_addrs={0: f"10.0.0.{i}:10911"})
            for i, name in enumerate(writes)
        ),
    )


def test_publish_info_writable_master_queues_sorted() -> None:
    r = TopicRouteData(
        queue_datas=(
            QueueData(broker_name="b", read_queue_nums=2, write_queue_nums=2, perm=6),
            QueueData(broker_name="a", read_queue_nums=2, write_queue_nums=1, perm=6),
            QueueData(broker_name="ro", read_queue_nums=2, write_queue_nums=2, perm=4),
            QueueData(broker_name="slave-only", read_queue_nums=2, write_queue_nums=2, perm=6),
        ),
        broker_datas=(
            BrokerData(cluster="C", broker_name="a", broker_addrs={0: "h:1"}),
            BrokerData(cluster="C", broker_name="b", broker_addrs={0: "h:2", 1: "h:3"}),
            BrokerData(cluster="C", broker_name="ro", broker_addrs={0: "h:4"}),
            BrokerData(cluster="C", broker_name="slave-only", broker_addrs={1: "h:5"}),
        ),
    )
    info = TopicPublishInfo.from_route("T", r)
    assert info.queues == (MessageQueue("T", "a", 0), MessageQueue("T", "b", 0), MessageQueue("T", "b", 1))
    assert dict(info.broker_addrs) == {"a": "h:1", "b": "h:2", "ro": "h:4"}
    template = TopicPublishInfo.from_route("T", route(a=8), from_template=True)
    assert len(template.queues) == 4 and template.from_template


def test_round_robin_and_fault_avoidance() -> None:
    info = TopicPublishInfo.from_route("T", route(a=2, b=2))
    picks = [info.select() for _ in range(8)]
    assert [(q.broker_name, q.queue_id) for q in picks[:4]] == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    assert picks[4:] == picks[:4]

    clock = Clock()
    faults = LatencyFaultTolerance(clock)
    faults.update("b", 0, failed=True)
    assert {info.select(faults).broker_name for _ in range(10)} == {"a"}
    # a retry avoids the broker that just failed even when the fault table has no entry for it
    assert {info.select(None, avoid_broker="a").broker_name for _ in range(10)} == {"b"}
    # every broker in back-off: the one that recovers first is used
    clock.now += 1
    faults.update("a", 0, failed=True)
    assert {info.select(faults).broker_name for _ in range(6)} == {"b"}
    # a single broker that just failed is still used for the retry
    single = TopicPublishInfo.from_route("T", route(a=2))
    assert single.select(faults, avoid_broker="a").broker_name == "a"


def test_select_with_no_queue_raises() -> None:
    with pytest.raises(TopicNotExist, match="no writable queue"):
        TopicPublishInfo("T", (), {}).select()


def test_hash_selection_is_java_string_hashcode_modulo() -> None:
    # well-known Java String.hashCode values: "hello" and "polygenelubricants" (Integer.MIN_VALUE)
    assert java_string_hash("hello") == 99162322
    assert hash_queue_index("hello", 7) == 99162322 % 7
    assert java_string_hash("polygenelubricants") == -(2**31)
    # Java: value = hashCode % size; if (value < 0) value = Math.abs(value)
    assert hash_queue_index("polygenelubricants", 10) == 8  # -2147483648 % 10 == -8 in Java
    assert all(hash_queue_index(f"k{i}", 5) == hash_queue_index(f"k{i}", 5) for i in range(50))
    assert {hash_queue_index(f"k{i}", 5) for i in range(50)} == set(range(5))
    with pytest.raises(ValueError):
        hash_queue_index("k", 0)


def test_retriable_classification() -> None:
    assert RemotingTimeout("t").retriable
    assert RemotingConnectError("c").retriable
    assert SystemBusy("b").retriable
    assert error_for_code(1, "e").retriable
    assert error_for_code(205, "e").retriable  # NOT_IN_CURRENT_UNIT, one of RocketMQ's retryResponseCodes
    assert not error_for_code(3, "e").retriable
    assert not MessageIllegal("m").retriable
    assert not TopicNameInvalid("t").retriable


def test_namesrv_addrs_and_batch_body() -> None:
    assert parse_namesrv_addrs("a:1;b:2") == ["a:1", "b:2"]
    assert parse_namesrv_addrs(["a:1", " b:2 "]) == ["a:1", "b:2"]
    with pytest.raises(ConfigError):
        parse_namesrv_addrs(" ; ")
    body = encode_batch_body([(b"ab", b"k\x01v\x02", 7)])
    assert body == (28).to_bytes(4, "big") + bytes(8) + (7).to_bytes(4, "big") + (2).to_bytes(4, "big") + (
        b"ab" + (4).to_bytes(2, "big") + b"k\x01v\x02"
    )


def test_send_checks_remember_good_topics_and_reject_bad_ones_every_time() -> None:
    validate_send_topic.cache_clear()
    for _ in range(3):  # a failure is not remembered: each send raises again
        with pytest.raises(TopicNameInvalid, match="characters outside"):
            validate_message(Message("bad topic!", b"x"), 10)
        with pytest.raises(TopicNameInvalid, match="system topic"):
            validate_message(Message("SCHEDULE_TOPIC_XXXX", b"x"), 10)
        with pytest.raises(TopicNameInvalid, match="exceeds max 127"):
            validate_message(Message("t" * 128, b"x"), 10)
        validate_message(Message("GoodT", b"x"), 10)
        # the body is checked on every send, whatever the topic
        with pytest.raises(MessageIllegal, match="empty"):
            validate_message(Message("GoodT", b""), 10)
    info = validate_send_topic.cache_info()
    assert info.currsize == 1 and info.hits >= 5  # only the good topic is kept


def test_fault_entry_dropped_by_a_fast_send_and_kept_by_a_slow_one() -> None:
    clock = [0.0]
    faults = LatencyFaultTolerance(clock=lambda: clock[0])
    faults.update("a", 0, failed=True)
    assert not faults.is_available("a")
    faults.update("a", 549.9)  # below the first back-off row: the entry goes
    assert faults.is_available("a")
    faults.update("a", 550)  # 30 s back-off
    assert not faults.is_available("a")
    clock[0] = 30.0
    assert faults.is_available("a")
    faults.update("b", 10)  # no entry, none made
    assert faults.is_available("b") and faults.least_bad(["b"]) == "b"


def test_select_without_entries_is_plain_round_robin_and_sees_a_new_entry_at_once() -> None:
    """With no broker in the fault table (its ``items`` empty) select takes the next queue
    without looking at each broker; the first entry made is seen by the very next select."""
    info = TopicPublishInfo.from_route("T", route(a=2, b=2))
    plain = TopicPublishInfo.from_route("T", route(a=2, b=2))
    clock = Clock()
    faults = LatencyFaultTolerance(clock)
    assert [info.select(faults) for _ in range(6)] == [plain.select() for _ in range(6)]
    faults.update("b", 0, failed=True)
    assert faults.items and {info.select(faults).broker_name for _ in range(8)} == {"a"}
    faults.update("b", 1)  # a fast answer: the entry goes, and b is taken again
    assert not faults.items and {info.select(faults).broker_name for _ in range(4)} == {"a", "b"}
