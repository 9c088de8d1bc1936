"""The official RocketMQ 5 Node.js SDK (npm ``rocketmq-client-nodejs``) against ``rocketq serve``.

Each SDK run is a separate ``node`` process (``grpc_node_client.js``); the server is a real
``rocketq serve``. The Node SDK differs from the Python one in what it insists on: its startup
waits for the first settings reply, its producer asserts an exponential back-off policy, and its
headers differ (``x-mq-protocol: v2``, no ``authorization`` without credentials).
"""

from __future__ import annotations

import pathlib
import shutil
import time
from collections.abc import Iterator

import pytest
from grpc_harness import GrpcInterop, install_node_client, of


@pytest.fixture(scope="session")
def node_client(node_bin: str) -> tuple[str, str]:
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail("the Node.js SDK interop tests need npm on PATH (it ships with Node.js)")
    return node_bin, install_node_client(npm)


@pytest.fixture
def node_interop(node_client: tuple[str, str], tmp_path: pathlib.Path) -> Iterator[GrpcInterop]:
    env = GrpcInterop(None, tmp_path, node=node_client)
    try:
        yield env
    finally:
        env.close()


def test_node_producer_sends_every_type_and_simple_consumer_reads_them(node_interop: GrpcInterop) -> None:
    env = node_interop
    env.create_topic("NNormal", "NORMAL")
    env.create_topic("NFifo", "FIFO")
    env.create_topic("NDelay", "DELAY")
    env.create_topic("NTx", "TRANSACTION")
    sent_at = time.time()
    events = env.node_produce(
        [
            {"topic": "NNormal", "body": "n1", "tag": "A", "keys": ["node-key-1"], "props": {"k": "v"}},
            {"topic": "NFifo", "body": "f0", "group": "grp-1"},
            {"topic": "NFifo", "body": "f1", "group": "grp-1"},
            {"topic": "NDelay", "body": "d1", "delay_ms": 3000},
            {"topic": "NTx", "body": "t-commit", "tx": "commit"},
            {"topic": "NTx", "body": "t-rollback", "tx": "rollback"},
            {"topic": "NNormal", "body": "wrong-type", "group": "g"},
        ]
    )
    assert of(events, "ready") and of(events, "done"), events
    sent = {e["i"]: e for e in of(events, "sent")}
    errors = {e["i"]: e["error"] for e in of(events, "error")}
    assert set(sent) == {0, 1, 2, 3, 4, 5}, events
    assert set(errors) == {6}, events  # the route says NNormal does not accept FIFO
    assert env.alive()

    # one store: the remoting side finds the Node SDK's message by key
    found = env.query_by_key("NNormal", "node-key-1")
    assert [bytes(m.body) for m in found] == [b"n1"]

    env.create_group("NGNormal")
    got = env.node_simple("NGNormal", "NNormal", 1, seconds=20)
    (msg,) = of(got, "message")
    assert msg["id"] == sent[0]["id"] and msg["tag"] == "A" and msg["keys"] == ["node-key-1"]
    assert msg["props"].get("k") == "v"
    assert msg["attempt"] == 1 and not msg["corrupted"]

    env.create_group("NGFifo", orderly=True)
    got = env.node_simple("NGFifo", "NFifo", 2, seconds=20)
    assert [(m["body"], m["group"]) for m in of(got, "message")] == [("f0", "grp-1"), ("f1", "grp-1")]

    env.create_group("NGTx")
    got = env.node_simple("NGTx", "NTx", 1, seconds=20)
    assert [m["body"] for m in of(got, "message")] == ["t-commit"]

    env.create_group("NGDelay")
    got = env.node_simple("NGDelay", "NDelay", 1, seconds=30)
    assert [m["body"] for m in of(got, "message")] == ["d1"]
    assert time.time() - sent_at >= 3.0


def test_node_simple_consumer_change_invisible_redelivers(node_interop: GrpcInterop) -> None:
    env = node_interop
    env.create_topic("NRedeliver", "NORMAL")
    env.create_group("NGRedeliver")
    events = env.node_produce([{"topic": "NRedeliver", "body": f"m{i}"} for i in range(3)])
    assert len(of(events, "sent")) == 3, events
    got = env.node_simple("NGRedeliver", "NRedeliver", 3, mode="redeliver", seconds=40)
    attempts: dict[str, list[int]] = {}
    for m in of(got, "message"):
        attempts.setdefault(m["body"], []).append(m["attempt"])
    assert attempts == {"m0": [1, 2], "m1": [1, 2], "m2": [1, 2]}
    assert of(got, "done")[0]["acked"] == 3


def test_node_checker_resolves_checked_orphans(node_client: tuple[str, str], tmp_path: pathlib.Path) -> None:
    conf = {"transactionCheckInterval": "1000", "transactionTimeOut": "1000"}
    env = GrpcInterop(None, tmp_path, broker_conf=conf, node=node_client)
    try:
        env.create_topic("NOrphan", "TRANSACTION")
        events = env.node_produce(
            [
                {"topic": "NOrphan", "body": "commit-me", "tx": "orphan"},
                {"topic": "NOrphan", "body": "roll-me-back", "tx": "orphan"},
            ],
            check_wait_s=40,
        )
        assert len(of(events, "sent")) == 2 and not of(events, "error"), events
        checked = {e["body"]: e["resolution"] for e in of(events, "checked")}
        assert checked == {"commit-me": "commit", "roll-me-back": "rollback"}
        env.create_group("NGOrphan")
        got = env.node_simple("NGOrphan", "NOrphan", 2, seconds=8)
        assert [m["body"] for m in of(got, "message")] == ["commit-me"]
    finally:
        env.close()
