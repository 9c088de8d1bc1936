"""The official RocketMQ 5 SDKs with credentials against ``rocketq serve`` with ``aclEnable=true``:
the Python SDK (``rocketmq-python-client``, its ``Credentials(ak, sk)``) and the Node.js SDK
(``rocketmq-client-nodejs``, its ``sessionCredentials``) send and receive with the right keys and
are refused with wrong ones; a PUB-only account cannot consume. Every SDK run is bounded."""

from __future__ import annotations

import asyncio
import json
import pathlib
import shutil
from collections.abc import Iterator

import pytest
from grpc_harness import GrpcInterop, install_node_client, install_python_client, of

from _support.acl import ADMIN, PUB_ONLY, SUB_ONLY, acl_broker_conf, signed_config
from rocketq.acl.signature import AclClientRpcHook
from rocketq.client.admin import Admin
from rocketq.remoting import RemotingClient, RequestCode, create_request


def start_acl_serve(
    tmp_path: pathlib.Path, client_python: str | None, node: tuple[str, str] | None
) -> GrpcInterop:
    return GrpcInterop(client_python, tmp_path, broker_conf=acl_broker_conf(tmp_path), node=node)


def create_topic_and_group(env: GrpcInterop, topic: str, group: str) -> None:
    """As the admin account (the harness's helpers do not sign)."""
    with Admin(config=signed_config(env.namesrv_addr), timeout_ms=10_000) as admin:
        admin.create_topic(topic, 2, 2, 6, broker_addr=env.broker_addr, attributes="+message.type=NORMAL")
    body = json.dumps({"groupName": group, "retryMaxTimes": 16}).encode()

    async def call() -> int:
        async with RemotingClient(rpc_hook=AclClientRpcHook(*ADMIN)) as client:
            request = create_request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body)
            return (await client.invoke(env.broker_addr, request, 10.0)).code

    assert asyncio.run(call()) == 0


@pytest.fixture(scope="module")
def client_python() -> str:
    return install_python_client()


@pytest.fixture
def py_env(client_python: str, tmp_path: pathlib.Path) -> Iterator[GrpcInterop]:
    env = start_acl_serve(tmp_path, client_python, None)
    try:
        yield env
    finally:
        env.close()


def test_python_sdk_with_credentials(py_env: GrpcInterop, monkeypatch: pytest.MonkeyPatch) -> None:
    env = py_env
    create_topic_and_group(env, "TAcl", "GAcl")

    def use(keys: tuple[str, str]) -> None:
        monkeypatch.setenv("ROCKETQ_INTEROP_AK", keys[0])
        monkeypatch.setenv("ROCKETQ_INTEROP_SK", keys[1])

    use(PUB_ONLY)
    events = env.produce([{"topic": "TAcl", "body": "signed-1"}], timeout_s=60)
    assert [e["i"] for e in of(events, "sent")] == [0], events

    use((PUB_ONLY[0], "not-the-secret"))
    events = env.produce([{"topic": "TAcl", "body": "x"}], timeout_s=60)
    assert not of(events, "sent"), events
    assert of(events, "error"), events
    # the SDK reports "failed to fetch topic route"; its log has the status it was answered
    sdk_log = (env.home / "logs" / "rocketmq_python" / "rocketmq_client.log").read_text(encoding="utf-8")
    assert "40100, signature mismatch for accessKey pubonly1" in sdk_log

    use(SUB_ONLY)
    events = env.produce([{"topic": "TAcl", "body": "x"}], timeout_s=60)
    assert not of(events, "sent"), events
    assert any("No permission to PUB topic TAcl" in e["error"] for e in of(events, "error")), events

    use(PUB_ONLY)  # a PUB-only account cannot consume
    events = env.simple("GAcl", "TAcl", 1, seconds=5)
    assert not of(events, "message"), events
    assert any(
        "ForbiddenException" in e["error"] or "No permission to SUB" in e["error"]
        for e in of(events, "error")
    )

    use(SUB_ONLY)
    events = env.simple("GAcl", "TAcl", 1, seconds=30)
    assert [e["body"] for e in of(events, "message")] == ["signed-1"], events
    assert of(events, "done")[0]["acked"] == 1
    assert "signature mismatch for accessKey pubonly1" in env.serve.log_text(None)


@pytest.fixture(scope="module")
def node_client() -> tuple[str, str]:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail("the Node.js SDK test needs `node` and `npm` on PATH")
    return node, install_node_client(npm)


def test_node_sdk_with_credentials(
    node_client: tuple[str, str], tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = start_acl_serve(tmp_path, None, node_client)
    try:
        create_topic_and_group(env, "TAclNode", "GAclNode")

        def use(keys: tuple[str, str]) -> None:
            monkeypatch.setenv("ROCKETQ_INTEROP_AK", keys[0])
            monkeypatch.setenv("ROCKETQ_INTEROP_SK", keys[1])

        monkeypatch.setenv("ROCKETQ_INTEROP_STARTUP_MS", "10000")  # bounds the refused runs
        use(PUB_ONLY)
        events = env.node_produce([{"topic": "TAclNode", "body": "node-signed"}], timeout_s=60)
        assert [e["i"] for e in of(events, "sent")] == [0], events

        use((PUB_ONLY[0], "not-the-secret"))
        events = env.node_produce([{"topic": "TAclNode", "body": "x"}], timeout_s=60)
        assert not of(events, "sent"), events
        errors = " | ".join(e["error"] for e in of(events, "error"))
        assert "Failed to fetch topic routes" in errors, events  # the SDK does not say why: the server does
        assert "ACL refused a request from" in env.serve.log_text(None)
        assert "signature mismatch for accessKey pubonly1" in env.serve.log_text(None)

        use(PUB_ONLY)
        events = env.node_simple("GAclNode", "TAclNode", 1, seconds=5)
        assert not of(events, "message"), events
        errors = " | ".join(e["error"] for e in of(events, "error"))
        assert "No permission to SUB" in errors, events

        use(SUB_ONLY)
        events = env.node_simple("GAclNode", "TAclNode", 1, seconds=30)
        assert [e["body"] for e in of(events, "message")] == ["node-signed"], events
    finally:
        env.close()
