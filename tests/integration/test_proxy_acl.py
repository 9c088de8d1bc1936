"""``rocketq proxy --access-key/--secret-key`` in front of a ``rocketq serve`` with
``aclEnable=true``: the proxy signs its remoting requests, so sends through it pass; a proxy
without keys gets the broker's refusal back in the gRPC status; a proxy with keys but no
``--acl-file`` warns that its callers are not authenticated. With ``--acl-file`` the proxy
checks its gRPC callers' signatures and permissions before forwarding anything: right keys
pass, missing or wrong ones are refused, a PUB-only account cannot consume."""

from __future__ import annotations

import asyncio
import pathlib

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from procs import RocketqProcess, ServeProcess
from test_grpc_acl import TOPIC, meta, send_request

from _support.acl import ACL_FILE as CALLERS_ACL_FILE
from _support.acl import ADMIN, PUB_ONLY, SUB_ONLY, account, acl_broker_conf, acl_yaml, signed_config
from _support.wait import wait_until, wait_until_async
from rocketq.cli import main
from rocketq.client.admin import Admin
from rocketq.proxy.v2 import definition_pb2 as pb
from rocketq.proxy.v2 import service_pb2 as spb
from rocketq.proxy.v2 import service_pb2_grpc

pytestmark = pytest.mark.slow  # rocketq serve and rocketq proxy processes

TIMEOUT_S = 10.0
START_TIMEOUT_S = 30.0
META = (("x-mq-client-id", "proxy-acl@1"),)
PROXY = ("proxykey1", "proxysecret1")
ACL_FILE = acl_yaml(account(ADMIN), account(PROXY, "PUB|SUB", "SUB"))


async def send(addr: str, body: bytes) -> pb.Status:
    async with grpc.aio.insecure_channel(addr) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        m = pb.Message(
            topic=pb.Resource(name="PNormal"),
            body=body,
            system_properties=pb.SystemProperties(message_id=body.decode(), message_type=pb.NORMAL),
        )
        r = await stub.SendMessage(spb.SendMessageRequest(messages=[m]), timeout=TIMEOUT_S, metadata=META)
        return r.entries[0].status if r.entries else r.status


def test_proxy_signs_with_its_keys(tmp_path: pathlib.Path) -> None:
    serve = ServeProcess(tmp_path, broker_conf=acl_broker_conf(tmp_path, ACL_FILE))
    proxies: list[RocketqProcess] = []
    try:
        serve.start(START_TIMEOUT_S)
        with Admin(config=signed_config(serve.namesrv_addr), timeout_ms=10_000) as admin:
            admin.create_topic(
                "PNormal", 2, 2, 6, broker_addr=serve.broker_addr, attributes="+message.type=NORMAL"
            )

            def routed() -> bool:
                try:
                    return bool(admin.topic_route("PNormal").queue_datas)
                except Exception:
                    return False

            wait_until(routed, "the route of PNormal", START_TIMEOUT_S, 0.1)
        base = ["proxy", "--namesrv", serve.namesrv_addr, "--grpc-port", "0"]
        signed = RocketqProcess(
            "proxy-signed", [*base, "--access-key", PROXY[0], "--secret-key", PROXY[1]], tmp_path / "l1"
        )
        proxies.append(signed)
        unsigned = RocketqProcess("proxy-unsigned", base, tmp_path / "l2")
        proxies.append(unsigned)
        signed_addr = signed.wait_banner({"gRPC (v5)"}, START_TIMEOUT_S)["gRPC (v5)"]
        unsigned_addr = unsigned.wait_banner({"gRPC (v5)"}, START_TIMEOUT_S)["gRPC (v5)"]

        warning = "WARNING: gRPC callers are not authenticated"
        assert f"{warning}: every call is forwarded with the rights of accessKey {PROXY[0]}" in (
            signed.log_text(None)
        )
        assert warning not in unsigned.log_text(None)
        ok = asyncio.run(send(signed_addr, b"via-signed-proxy"))
        assert ok.code == pb.OK, ok
        refused = asyncio.run(send(unsigned_addr, b"via-unsigned-proxy"))
        assert refused.code != pb.OK
        assert "No accessKey in request code 310" in refused.message, refused
    finally:
        for p in proxies:
            p.stop()
        serve.stop()


def test_proxy_keys_given_together(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["proxy", "--namesrv", "127.0.0.1:1", "--grpc-port", "0", "--access-key", "onlyone1"]) == 1
    assert "--access-key and --secret-key must be given together" in capsys.readouterr().err


def _acl_serve(tmp_path: pathlib.Path, topic: str) -> ServeProcess:
    """``rocketq serve`` with ``aclEnable=true`` and ``topic`` created and routed."""
    serve = ServeProcess(tmp_path, broker_conf=acl_broker_conf(tmp_path, ACL_FILE))
    serve.start(START_TIMEOUT_S)
    with Admin(config=signed_config(serve.namesrv_addr), timeout_ms=10_000) as admin:
        admin.create_topic(topic, 1, 1, 6, broker_addr=serve.broker_addr, attributes="+message.type=NORMAL")

        def routed() -> bool:
            try:
                return bool(admin.topic_route(topic).queue_datas)
            except Exception:
                return False

        wait_until(routed, f"the route of {topic}", START_TIMEOUT_S, 0.1)
    return serve


def test_proxy_checks_grpc_callers_against_its_acl_file(tmp_path: pathlib.Path) -> None:
    callers_acl = tmp_path / "proxy_acl.yml"
    callers_acl.write_text(CALLERS_ACL_FILE, encoding="utf-8")
    serve = _acl_serve(tmp_path, TOPIC)
    proxy: RocketqProcess | None = None
    try:
        args = [
            "proxy", "--namesrv", serve.namesrv_addr, "--grpc-port", "0",
            "--access-key", PROXY[0], "--secret-key", PROXY[1], "--acl-file", str(callers_acl),
        ]  # fmt: skip
        proxy = RocketqProcess("proxy-acl", args, tmp_path / "lp")
        addr = proxy.wait_banner({"gRPC (v5)"}, START_TIMEOUT_S)["gRPC (v5)"]
        assert "not authenticated" not in proxy.log_text(None)
        group = pb.Resource(name="ProxyAclGroup")
        topic = pb.Resource(name=TOPIC)

        async def run() -> None:
            async with grpc.aio.insecure_channel(addr) as channel:
                stub = service_pb2_grpc.MessagingServiceStub(channel)
                route = spb.QueryRouteRequest(topic=topic)
                r = await stub.QueryRoute(route, timeout=TIMEOUT_S, metadata=meta(SUB_ONLY))
                assert r.status.code == pb.OK and r.message_queues, r.status
                r = await stub.QueryRoute(route, timeout=TIMEOUT_S, metadata=meta(None))
                assert r.status.code == pb.UNAUTHORIZED
                assert "No authorization in gRPC call QueryRoute" in r.status.message
                r = await stub.QueryRoute(route, timeout=TIMEOUT_S, metadata=meta(SUB_ONLY, secret="wrong1"))
                assert (r.status.code, r.status.message) == (
                    pb.UNAUTHORIZED,
                    f"signature mismatch for accessKey {SUB_ONLY[0]}",
                )
                # the proxy's own account is not a caller's account here
                r = await stub.QueryRoute(route, timeout=TIMEOUT_S, metadata=meta(PROXY))
                assert r.status.code == pb.UNAUTHORIZED
                assert f"No acl config for accessKey {PROXY[0]}" in r.status.message

                assignment = await stub.QueryAssignment(
                    spb.QueryAssignmentRequest(topic=topic, group=group),
                    timeout=TIMEOUT_S,
                    metadata=meta(SUB_ONLY),
                )
                assert assignment.status.code == pb.OK, assignment.status

                sent = await stub.SendMessage(
                    send_request(b"P-1"), timeout=TIMEOUT_S, metadata=meta(PUB_ONLY)
                )
                assert sent.status.code == pb.OK, sent.status
                for keys in (None, (PUB_ONLY[0], "wrong-secret")):
                    refused = await stub.SendMessage(
                        send_request(b"P-x"), timeout=TIMEOUT_S, metadata=meta(keys)
                    )
                    assert refused.status.code == pb.UNAUTHORIZED, refused.status
                refused = await stub.SendMessage(
                    send_request(b"P-2"), timeout=TIMEOUT_S, metadata=meta(SUB_ONLY)
                )
                assert refused.status.code == pb.FORBIDDEN
                assert (
                    refused.status.message
                    == f"No permission to PUB topic {TOPIC} for accessKey {SUB_ONLY[0]}"
                )

                async def receive(keys: tuple[str, str]) -> tuple[list[pb.Status], list[pb.Message]]:
                    request = spb.ReceiveMessageRequest(
                        group=group,
                        message_queue=pb.MessageQueue(topic=topic),
                        batch_size=8,
                        invisible_duration=Duration(seconds=30),
                        long_polling_timeout=Duration(seconds=1),
                    )
                    statuses: list[pb.Status] = []
                    messages: list[pb.Message] = []
                    async for x in stub.ReceiveMessage(request, timeout=TIMEOUT_S, metadata=meta(keys)):
                        if x.WhichOneof("content") == "status":
                            statuses.append(x.status)
                        elif x.WhichOneof("content") == "message":
                            messages.append(x.message)
                    return statuses, messages

                statuses, messages = await receive(PUB_ONLY)  # a PUB-only account cannot consume
                assert [s.code for s in statuses] == [pb.FORBIDDEN] and not messages
                assert (
                    f"No permission to SUB topic {TOPIC} for accessKey {PUB_ONLY[0]}" in statuses[0].message
                )
                got: list[pb.Message] = []

                async def received() -> bool:
                    got.extend((await receive(SUB_ONLY))[1])
                    return bool(got)

                await wait_until_async(received, "P-1 through the proxy", 3 * TIMEOUT_S, 0)
                assert [m.body for m in got] == [b"P-1"]
                ack = spb.AckMessageRequest(
                    group=group,
                    topic=topic,
                    entries=[
                        spb.AckMessageEntry(
                            message_id=got[0].system_properties.message_id,
                            receipt_handle=got[0].system_properties.receipt_handle,
                        )
                    ],
                )
                acked = await stub.AckMessage(ack, timeout=TIMEOUT_S, metadata=meta(PUB_ONLY))
                assert acked.status.code == pb.FORBIDDEN
                acked = await stub.AckMessage(ack, timeout=TIMEOUT_S, metadata=meta(SUB_ONLY))
                assert acked.status.code == pb.OK, acked.status

                telemetry = stub.Telemetry(metadata=meta(None), timeout=TIMEOUT_S)
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await telemetry.read()
                assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED

        asyncio.run(run())
    finally:
        if proxy is not None:
            proxy.stop()
        serve.stop()


def test_proxy_acl_file_must_be_readable(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = str(tmp_path / "no-such-acl.yml")
    args = ["proxy", "--namesrv", "127.0.0.1:1", "--grpc-port", "0", "--acl-file", missing]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert err.startswith("rocketq proxy: error:") and "no-such-acl.yml" in err
