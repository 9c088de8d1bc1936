"""``rocketq proxy --tls`` in front of a name server and a broker that both enforce TLS (their
own processes, certificates made by the ``openssl`` CLI): sends and receives through the proxy
reach the broker over TLS; a proxy without ``--tls``, or trusting another CA, gets no route."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import Iterator

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from procs import RocketqProcess
from test_remoting_tls import TOPIC, Certs, TlsCluster

from _support.wait import wait_until_async
from rocketq.cli import main
from rocketq.proxy.v2 import definition_pb2 as pb
from rocketq.proxy.v2 import service_pb2 as spb
from rocketq.proxy.v2 import service_pb2_grpc

pytestmark = pytest.mark.slow  # name server, broker and proxy processes

TIMEOUT_S = 10.0
START_TIMEOUT_S = 30.0
META = (("x-mq-client-id", "proxy-tls@1"),)


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsCluster]:
    c = TlsCluster(tmp_path_factory.mktemp("proxy-tls"), Certs(tmp_path_factory.mktemp("certs")), "enforcing")
    try:
        c.start()
        yield c
    finally:
        c.close()


def _proxy(cluster: TlsCluster, name: str, *extra: str) -> RocketqProcess:
    args = ["proxy", "--namesrv", cluster.namesrv_addr, "--grpc-port", "0", *extra]
    return RocketqProcess(name, args, cluster.root / "proxy-logs")


async def _route(addr: str) -> spb.QueryRouteResponse:
    async with grpc.aio.insecure_channel(addr) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        request = spb.QueryRouteRequest(topic=pb.Resource(name=TOPIC))
        response: spb.QueryRouteResponse = await stub.QueryRoute(request, timeout=TIMEOUT_S, metadata=META)
        return response


def test_proxy_sends_and_receives_over_tls(tls_cluster: TlsCluster) -> None:
    proxy = _proxy(tls_cluster, "proxy-tls", "--tls", "--tls-ca", str(tls_cluster.certs.ca))
    try:
        addr = proxy.wait_banner({"gRPC (v5)"}, START_TIMEOUT_S)["gRPC (v5)"]
        assert "TLS to the cluster" in proxy.log_text(None)
        group = pb.Resource(name="ProxyTlsGroup")
        topic = pb.Resource(name=TOPIC)

        async def run() -> list[bytes]:
            route = await _route(addr)
            assert route.status.code == pb.OK and route.message_queues, route.status
            async with grpc.aio.insecure_channel(addr) as channel:
                stub = service_pb2_grpc.MessagingServiceStub(channel)
                assignment = await stub.QueryAssignment(
                    spb.QueryAssignmentRequest(topic=topic, group=group), timeout=TIMEOUT_S, metadata=META
                )
                assert assignment.status.code == pb.OK, assignment.status
                message = pb.Message(
                    topic=topic,
                    body=b"via-proxy-over-tls",
                    system_properties=pb.SystemProperties(message_id="T-1", message_type=pb.NORMAL),
                )
                sent = await stub.SendMessage(
                    spb.SendMessageRequest(messages=[message]), timeout=TIMEOUT_S, metadata=META
                )
                assert sent.status.code == pb.OK, sent.status
                got: list[bytes] = []

                async def received() -> bool:
                    request = spb.ReceiveMessageRequest(
                        group=group,
                        message_queue=pb.MessageQueue(topic=topic),
                        batch_size=8,
                        invisible_duration=Duration(seconds=30),
                        long_polling_timeout=Duration(seconds=1),
                    )
                    async for x in stub.ReceiveMessage(request, timeout=TIMEOUT_S, metadata=META):
                        if x.WhichOneof("content") == "message":
                            got.append(x.message.body)
                    return bool(got)

                await wait_until_async(received, "the message back through the proxy", 3 * TIMEOUT_S, 0)
                return got

        assert asyncio.run(run()) == [b"via-proxy-over-tls"]
    finally:
        proxy.stop()


def test_proxy_without_tls_or_with_another_ca_gets_no_route(tls_cluster: TlsCluster) -> None:
    proxies = [
        _proxy(tls_cluster, "proxy-plain"),
        _proxy(tls_cluster, "proxy-other-ca", "--tls", "--tls-ca", str(tls_cluster.certs.other_ca)),
    ]
    try:
        for proxy in proxies:
            addr = proxy.wait_banner({"gRPC (v5)"}, START_TIMEOUT_S)["gRPC (v5)"]
            route = asyncio.run(_route(addr))
            assert route.status.code != pb.OK and not route.message_queues, (proxy.name, route.status)
        assert "TLS handshake" not in proxies[0].log_text(None)  # plaintext: the server hangs up
        assert "the server's certificate is not trusted" in proxies[1].log_text(None)
    finally:
        for proxy in proxies:
            proxy.stop()


def test_proxy_tls_flags_checked(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["proxy", "--namesrv", "127.0.0.1:1", "--grpc-port", "0"]
    assert main([*base, "--tls-ca", "ca.pem"]) == 1
    assert "--tls-ca/--tls-cert/--tls-key need --tls" in capsys.readouterr().err
    assert main([*base, "--tls", "--tls-cert", "c.pem"]) == 1
    assert "--tls-cert and --tls-key must be given together" in capsys.readouterr().err
    missing = str(tmp_path / "no-such-ca.pem")
    assert main([*base, "--tls", "--tls-ca", missing]) == 1
    err = capsys.readouterr().err
    assert err.startswith("rocketq proxy: error:") and "no-such-ca.pem" in err
