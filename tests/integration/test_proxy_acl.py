"""``rocketq proxy --access-key/--secret-key`` in front of a ``rocketq serve`` with
``aclEnable=true``: the proxy signs its remoting requests, so sends through it pass; a proxy
without keys gets the broker's refusal back in the gRPC status."""

from __future__ import annotations

import asyncio
import pathlib

import grpc
import pytest
from procs import RocketqProcess, ServeProcess

from _support.wait import wait_until
from rocketq.cli import main
from rocketq.client.admin import Admin
from rocketq.client.config import ClientConfig
from rocketq.proxy.v2 import definition_pb2 as pb
from rocketq.proxy.v2 import service_pb2 as spb
from rocketq.proxy.v2 import service_pb2_grpc

pytestmark = pytest.mark.slow  # rocketq serve and rocketq proxy processes

TIMEOUT_S = 10.0
START_TIMEOUT_S = 30.0
META = (("x-mq-client-id", "proxy-acl@1"),)
ADMIN = ("adminkey1", "adminsecret1")
PROXY = ("proxykey1", "proxysecret1")
ACL_FILE = f"""\
accounts:
  - accessKey: {ADMIN[0]}
    secretKey: {ADMIN[1]}
    admin: true
  - accessKey: {PROXY[0]}
    secretKey: {PROXY[1]}
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
"""


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
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL_FILE, encoding="utf-8")
    conf = {"aclEnable": "true", "aclFile": str(acl_file), "accessKey": ADMIN[0], "secretKey": ADMIN[1]}
    serve = ServeProcess(tmp_path, broker_conf=conf)
    proxies: list[RocketqProcess] = []
    try:
        serve.start(START_TIMEOUT_S)
        config = ClientConfig(namesrv_addr=serve.namesrv_addr, access_key=ADMIN[0], secret_key=ADMIN[1])
        with Admin(config=config, timeout_ms=10_000) as admin:
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
