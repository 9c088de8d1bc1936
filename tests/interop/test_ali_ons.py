"""The npm package ali-ons 3.12.0 (a pure Node.js RocketMQ client) against ``rocketq serve``.

Each test runs a fresh ``rocketq serve`` process and drives ``ali_ons_producer.js`` /
``ali_ons_consumer.js`` as separate node processes (see ``ali_ons_harness.py``). Consumers
rebalance every second (ali-ons' ``rebalanceInterval`` option) instead of every 10 s.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ali_ons_harness import Consumer, Event, Interop

DELIVERY_TIMEOUT_S = 30.0
REBALANCE_TIMEOUT_S = 30.0
# first retry: delay level 3 (10 s) in the schedule topic, then a pull of %RETRY%<group>
RETRY_TIMEOUT_S = 60.0


def received_bodies(*consumers: Consumer) -> Counter[str]:
    return Counter(m["body"] for c in consumers for m in c.messages())


def has_all(bodies: set[str], *consumers: Consumer) -> bool:
    return bodies <= set(received_bodies(*consumers))


def message_list(prefix: str, count: int, tags: tuple[str, ...] = ("TagA", "TagB")) -> list[dict[str, Any]]:
    return [
        {"body": f"{prefix}-{i}", "tags": tags[i % len(tags)], "keys": [f"{prefix}-key-{i}", f"order-{i}"]}
        for i in range(count)
    ]


def test_producer_and_consumer_tags_keys_exactly_once(interop: Interop) -> None:
    topic, group = "InteropBasic", "interop_basic_group"
    interop.create_topic(topic)
    consumer = interop.start_consumer("consumer", topic, group, "TagA || TagB")
    consumer.wait_ready()

    wanted = message_list("basic", 20)
    # a body over ali-ons' 4 KiB threshold is sent zlib-compressed (sysFlag bit 0)
    wanted.append({"body": "big-" + "x" * 5000, "tags": "TagA", "keys": ["big-key"]})
    unwanted = [{"body": f"other-{i}", "tags": "TagC", "keys": [f"other-key-{i}"]} for i in range(4)]
    to_send = wanted[:5] + unwanted[:1] + wanted[5:10] + unwanted[1:2] + wanted[10:15]
    to_send += unwanted[2:3] + wanted[15:] + unwanted[3:]
    sent = interop.produce(topic, to_send)
    sent_by_body = {s["body"]: s for s in sent}
    assert len({s["msgId"] for s in sent}) == len(sent)

    wanted_bodies = {m["body"] for m in wanted}
    consumer.wait_until(
        lambda _: has_all(wanted_bodies, consumer),
        DELIVERY_TIMEOUT_S,
        "it received every TagA/TagB message",
        interop.server_log(),
    )
    consumer.close()

    messages = consumer.messages()
    counts = Counter(m["body"] for m in messages)
    assert counts == Counter(wanted_bodies), "each TagA/TagB message exactly once, no TagC message"
    specs = {m["body"]: m for m in wanted}
    for m in messages:
        spec, result = specs[m["body"]], sent_by_body[m["body"]]
        assert m["tags"] == spec["tags"]
        assert m["keys"].split(" ") == spec["keys"]
        assert m["topic"] == topic
        assert m["reconsumeTimes"] == 0
        assert (m["msgId"], m["queueId"], m["queueOffset"]) == (
            result["msgId"],
            result["queueId"],
            result["queueOffset"],
        ), "the pulled record matches the send result"
    assert consumer.unexpected_errors() == []

    # the consumer committed its progress (UPDATE_CONSUMER_OFFSET) before it closed
    last_offset: dict[int, int] = {}
    for m in messages:
        last_offset[m["queueId"]] = max(last_offset.get(m["queueId"], -1), m["queueOffset"])
    assert len(last_offset) == 4
    for queue_id, last in last_offset.items():
        committed = interop.committed_offset(group, topic, queue_id)
        assert committed is not None
        assert last + 1 <= committed <= interop.max_offset(topic, queue_id)


def allocation_settled(a: Consumer, b: Consumer, queues: set[int]) -> bool:
    qa, qb = a.queue_ids(), b.queue_ids()
    return bool(qa) and bool(qb) and qa is not None and qb is not None and not qa & qb and qa | qb == queues


def test_consumer_group_shares_queues_and_takes_over(interop: Interop) -> None:
    topic, group = "InteropGroup", "interop_shared_group"
    all_queues = {0, 1, 2, 3}
    interop.create_topic(topic)
    first = interop.start_consumer("consumer-a", topic, group, "TagA || TagB")
    second = interop.start_consumer("consumer-b", topic, group, "TagA || TagB")
    first.wait_ready()
    second.wait_ready()
    first.wait_until(
        lambda _: allocation_settled(first, second, all_queues),
        REBALANCE_TIMEOUT_S,
        "the two consumers split the four queues",
        second.diagnostics(),
    )

    phase1 = message_list("shared", 40)
    interop.produce(topic, phase1)
    phase1_bodies = {m["body"] for m in phase1}
    first.wait_until(
        lambda _: has_all(phase1_bodies, first, second),
        DELIVERY_TIMEOUT_S,
        "the group received every message",
        second.diagnostics() + interop.server_log(),
    )
    assert received_bodies(first, second) == Counter(phase1_bodies), "no duplicates between the two"
    assert first.messages() and second.messages(), "both consumers got a share"
    assert {m["queueId"] for m in first.messages()} == first.queue_ids()
    assert {m["queueId"] for m in second.messages()} == second.queue_ids()

    second.close()
    first.wait_until(
        lambda _: first.queue_ids() == all_queues,
        REBALANCE_TIMEOUT_S,
        "the remaining consumer took over every queue",
        interop.server_log(),
    )

    phase2 = message_list("after", 20)
    interop.produce(topic, phase2)
    phase2_bodies = {m["body"] for m in phase2}
    first.wait_until(
        lambda _: has_all(phase2_bodies, first),
        DELIVERY_TIMEOUT_S,
        "the remaining consumer received the new messages",
        interop.server_log(),
    )
    first.close()

    assert received_bodies(first, second) == Counter(phase1_bodies | phase2_bodies)
    assert {m["queueId"] for m in first.messages() if m["body"] in phase2_bodies} == all_queues
    assert first.unexpected_errors() == [] and second.unexpected_errors() == []


def test_failed_message_is_redelivered_through_the_retry_topic(interop: Interop) -> None:
    topic, group = "InteropRetry", "interop_retry_group"
    marker = "FAIL-ONCE"
    retry_topic = f"%RETRY%{group}"
    interop.create_topic(topic)
    consumer = interop.start_consumer("consumer", topic, group, "TagA || TagB", fail_once_marker=marker)
    consumer.wait_ready()

    failing = f"{marker}-retry-me"
    sent = interop.produce(
        topic,
        [
            {"body": "retry-ok-1", "tags": "TagA", "keys": ["ok-1"]},
            {"body": failing, "tags": "TagB", "keys": ["retry-key", "second-key"]},
            {"body": "retry-ok-2", "tags": "TagA", "keys": ["ok-2"]},
        ],
    )
    original = next(s for s in sent if s["body"] == failing)

    def redelivered(events: list[Event]) -> bool:
        return any(
            e["event"] == "message" and e["body"] == failing and e["reconsumeTimes"] >= 1 for e in events
        )

    consumer.wait_until(redelivered, RETRY_TIMEOUT_S, "the failed message came back", interop.server_log())
    consumer.wait_until(
        lambda _: has_all({"retry-ok-1", "retry-ok-2"}, consumer),
        DELIVERY_TIMEOUT_S,
        "the other messages arrived",
    )
    consumer.close()

    deliveries = [m for m in consumer.messages() if m["body"] == failing]
    assert len(deliveries) == 2, deliveries
    first, again = deliveries
    assert first["failed"] and first["reconsumeTimes"] == 0 and first["msgId"] == original["msgId"]
    assert not again["failed"] and again["reconsumeTimes"] >= 1
    assert again["msgId"] != original["msgId"], "the retry is a new record in the retry topic"
    assert again["topic"] == topic, "ali-ons restores the original topic from RETRY_TOPIC"
    assert again["properties"]["RETRY_TOPIC"] == topic
    assert again["properties"]["ORIGIN_MESSAGE_ID"] == original["msgId"]
    assert (again["tags"], again["keys"]) == ("TagB", "retry-key second-key")
    assert interop.max_offset(retry_topic, 0) >= 1, "the retry went through %RETRY%<group>"
    assert received_bodies(consumer) == Counter({"retry-ok-1": 1, "retry-ok-2": 1, failing: 2})
    # the handler's own failure is the only error: CONSUMER_SEND_MSG_BACK succeeded, so ali-ons
    # did not fall back to re-sending the message with its inner producer
    assert consumer.unexpected_errors() == []
    assert len([e for e in consumer.of("error") if e["intentional"]]) == 1
