"""The official RocketMQ 5 Python SDK (``rocketmq-python-client``) against ``rocketq serve``'s gRPC endpoint.

Each SDK run is a separate process (``grpc_py_client.py``); the server is a real ``rocketq serve``.
"""

from __future__ import annotations

import pathlib
import time
from collections.abc import Iterator

import pytest
from grpc_harness import GrpcInterop, install_python_client, of


@pytest.fixture(scope="session")
def client_python() -> str:
    return install_python_client()


@pytest.fixture
def grpc_interop(client_python: str, tmp_path: pathlib.Path) -> Iterator[GrpcInterop]:
    env = GrpcInterop(client_python, tmp_path)
    try:
        yield env
    finally:
        env.close()


def test_sends_of_every_type_and_one_store_for_both_protocols(grpc_interop: GrpcInterop) -> None:
    env = grpc_interop
    env.create_topic("TNormal", "NORMAL")
    env.create_topic("TFifo", "FIFO")
    env.create_topic("TDelay", "DELAY")
    env.create_topic("TTx", "TRANSACTION")
    sent_at = time.time()
    events = env.produce(
        [
            {"topic": "TNormal", "body": "n1", "tag": "A", "keys": ["key-n1"]},
            {"topic": "TFifo", "body": "f1", "group": "order-1"},
            {"topic": "TDelay", "body": "d1", "delay_ms": 3000},
            {"topic": "TTx", "body": "t-commit", "tx": "commit"},
            {"topic": "TTx", "body": "t-rollback", "tx": "rollback"},
            {"topic": "TNormal", "body": "wrong-type", "group": "g"},
            {"topic": "NoSuchTopic", "body": "x"},
        ]
    )
    sent = {e["i"]: e for e in of(events, "sent")}
    errors = {e["i"]: e["error"] for e in of(events, "error")}
    assert set(sent) == {0, 1, 2, 3, 4}, events
    assert "message type not match" in errors[5]
    assert "route" in errors[6]
    assert env.alive()

    # the remoting side sees the gRPC message (queryMsgByKey)
    found = env.query_by_key("TNormal", "key-n1")
    assert [bytes(m.body) for m in found] == [b"n1"]

    env.create_group("GTx")
    got = env.simple("GTx", "TTx", 1, seconds=20)
    assert [m["body"] for m in of(got, "message")] == ["t-commit"]

    env.create_group("GNormal")
    got = env.simple("GNormal", "TNormal", 1, seconds=20)
    (msg,) = of(got, "message")
    assert msg["id"] == sent[0]["id"] and msg["tag"] == "A" and msg["keys"] == ["key-n1"]
    assert msg["attempt"] == 1 and not msg["corrupted"]

    env.create_group("GDelay")
    got = env.simple("GDelay", "TDelay", 1, seconds=30)
    assert [m["body"] for m in of(got, "message")] == ["d1"]
    assert time.time() - sent_at >= 3.0


def test_simple_consumer_change_invisible_redelivers(grpc_interop: GrpcInterop) -> None:
    env = grpc_interop
    env.create_topic("TRedeliver", "NORMAL")
    env.create_group("GRedeliver")
    events = env.produce([{"topic": "TRedeliver", "body": f"m{i}"} for i in range(3)])
    assert len(of(events, "sent")) == 3
    got = env.simple("GRedeliver", "TRedeliver", 3, mode="redeliver", seconds=40)
    attempts: dict[str, list[int]] = {}
    for m in of(got, "message"):
        attempts.setdefault(m["body"], []).append(m["attempt"])
    assert attempts == {"m0": [1, 2], "m1": [1, 2], "m2": [1, 2]}
    assert of(got, "done")[0]["acked"] == 3


def test_push_consumer_success_and_retry_then_dead_letter(grpc_interop: GrpcInterop) -> None:
    env = grpc_interop
    env.create_topic("TPush", "NORMAL")
    env.create_group("GPushOk")
    env.create_group("GPushFail", retry_max_times=1)  # 2 delivery attempts, then the DLQ
    events = env.produce([{"topic": "TPush", "body": "p0"}, {"topic": "TPush", "body": "p1"}])
    assert len(of(events, "sent")) == 2
    ok = env.push("GPushOk", "TPush", 2, seconds=40)
    assert sorted(m["body"] for m in of(ok, "message")) == ["p0", "p1"]
    failed = env.push("GPushFail", "TPush", 4, mode="fail", seconds=60)
    attempts: dict[str, list[int]] = {}
    for m in of(failed, "message"):
        attempts.setdefault(m["body"], []).append(m["attempt"])
    assert attempts == {"p0": [1, 2], "p1": [1, 2]}
    # no third delivery: once invisible again, both move to the group's DLQ (in the background)
    again = env.simple("GPushFail", "TPush", 1, seconds=10)
    assert of(again, "message") == []
    env.create_group("GDlqReader")
    dlq = env.simple("GDlqReader", "%DLQ%GPushFail", 2, seconds=30)
    assert sorted(m["body"] for m in of(dlq, "message")) == ["p0", "p1"]


def test_fifo_order_per_message_group_across_1000_messages(grpc_interop: GrpcInterop) -> None:
    env = grpc_interop
    env.create_topic("TFifoOrder", "FIFO")
    env.create_group("GFifo", orderly=True)
    spec = [
        {"topic": "TFifoOrder", "body": f"g{i % 10}:{i // 10}", "group": f"g{i % 10}"} for i in range(1000)
    ]
    events = env.produce(spec, timeout_s=300)
    assert len(of(events, "sent")) == 1000
    got = env.simple("GFifo", "TFifoOrder", 1000, seconds=180)
    seen: dict[str, list[int]] = {}
    for m in of(got, "message"):
        group, seq = m["body"].split(":")
        seen.setdefault(group, []).append(int(seq))
    assert sorted(seen) == [f"g{i}" for i in range(10)]
    for group, seqs in seen.items():
        assert seqs == list(range(100)), group


def test_restart_in_the_middle_of_consumption_loses_and_duplicates_nothing_acked(
    grpc_interop: GrpcInterop,
) -> None:
    env = grpc_interop
    env.create_topic("TRestart", "NORMAL", queues=2)
    env.create_group("GRestart")
    events = env.produce([{"topic": "TRestart", "body": f"r{i}"} for i in range(40)])
    assert len(of(events, "sent")) == 40
    first = env.simple("GRestart", "TRestart", 15, seconds=40)
    acked_first = {m["body"] for m in of(first, "message")}
    assert len(acked_first) >= 15
    env.restart()
    rest = 40 - len(acked_first)
    second = env.simple("GRestart", "TRestart", rest, seconds=60)
    acked_second = [m["body"] for m in of(second, "message")]
    assert not acked_first & set(acked_second), "an acked message was delivered again after the restart"
    assert acked_first | set(acked_second) == {f"r{i}" for i in range(40)}


#: The broker checks unresolved halves every second, once they are a second old.
FAST_TRANSACTION_CHECK = {"transactionCheckInterval": "1000", "transactionTimeOut": "1000"}


def test_checked_orphans_are_committed_or_rolled_back_by_the_sdk_checker(
    client_python: str, tmp_path: pathlib.Path
) -> None:
    env = GrpcInterop(client_python, tmp_path, broker_conf=FAST_TRANSACTION_CHECK)
    try:
        env.create_topic("TOrphan", "TRANSACTION")
        events = env.produce(
            [
                {"topic": "TOrphan", "body": "commit-me", "tx": "orphan"},
                {"topic": "TOrphan", "body": "roll-me-back", "tx": "orphan"},
            ],
            check_wait_s=40,
        )
        assert len(of(events, "sent")) == 2, events
        assert not of(events, "error"), events
        checked = {e["body"]: e["resolution"] for e in of(events, "checked")}
        assert checked == {"commit-me": "commit", "roll-me-back": "rollback"}
        env.create_group("GOrphan")
        got = env.simple("GOrphan", "TOrphan", 2, seconds=8)
        # only the committed one is delivered; the rolled-back one never is
        assert [m["body"] for m in of(got, "message")] == ["commit-me"]
        assert env.alive()
    finally:
        env.close()
