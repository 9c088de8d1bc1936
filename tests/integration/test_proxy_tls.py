"""The gRPC endpoint over TLS: a self-signed certificate made with the ``openssl`` CLI, spoken to
through our own stubs on ``grpc.aio.secure_channel``; missing or invalid certificate files are a
clear configuration error, in-process and from ``rocketq serve``."""

from __future__ import annotations

import asyncio
import pathlib
import subprocess
import sys
from typing import Any

import grpc
import pytest
from procs import small_store_config, write_broker_conf

from _support.tls import make_cert
from _support.wait import wait_until_async
from rocketq.broker import Broker, BrokerConfig
from rocketq.errors import ConfigError
from rocketq.protocol.topic import TopicConfig
from rocketq.proxy.server import GrpcConfig, GrpcEndpoint, check_key_pair
from rocketq.proxy.v2 import definition_pb2 as pb
from rocketq.proxy.v2 import service_pb2 as spb
from rocketq.proxy.v2 import service_pb2_grpc

TIMEOUT_S = 10.0
META = (("x-mq-client-id", "tls-client@1"),)


def new_broker(tmp_path: pathlib.Path, **fields: Any) -> Broker:
    """An in-process broker on a free loopback port, without name servers; ``fields`` are further
    ``BrokerConfig`` fields."""
    config = BrokerConfig(
        broker_name="broker-a",
        broker_ip1="127.0.0.1",
        bind_address="127.0.0.1",
        listen_port=0,
        namesrv_addr=None,
        **fields,
    )
    return Broker(config, small_store_config(tmp_path / "store"))


def test_query_route_and_send_over_tls(tmp_path: pathlib.Path) -> None:
    cert, key = make_cert(tmp_path)

    async def run() -> None:
        broker = new_broker(tmp_path)
        await broker.start()
        ep = GrpcEndpoint(broker, GrpcConfig("127.0.0.1", 0, tls_cert_path=str(cert), tls_key_path=str(key)))
        try:
            await ep.start()
            assert broker.ctx is not None
            broker.ctx.topics.update(TopicConfig("TTls", 2, 2))
            credentials = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
            options = [("grpc.ssl_target_name_override", "localhost")]
            async with grpc.aio.secure_channel(ep.address, credentials, options=options) as channel:
                stub = service_pb2_grpc.MessagingServiceStub(channel)
                r = await stub.QueryRoute(
                    spb.QueryRouteRequest(topic=pb.Resource(name="TTls")), timeout=TIMEOUT_S, metadata=META
                )
                assert r.status.code == pb.OK
                assert sorted(q.id for q in r.message_queues) == [0, 1]
                sent = await stub.SendMessage(
                    spb.SendMessageRequest(
                        messages=[
                            pb.Message(
                                topic=pb.Resource(name="TTls"),
                                body=b"over tls",
                                system_properties=pb.SystemProperties(
                                    message_id="TLS-1", message_type=pb.NORMAL
                                ),
                            )
                        ]
                    ),
                    timeout=TIMEOUT_S,
                    metadata=META,
                )
                assert sent.status.code == pb.OK and sent.entries[0].message_id == "TLS-1"
            # the message reaches the store's queues (dispatch runs in the background)
            store = broker.ctx.store

            def stored() -> list[bytes]:
                results = [store.get_message("G", "TTls", q, 0, 32) for q in (0, 1)]
                return [m.body for r in results for m in r.messages]

            bodies = await wait_until_async(stored, "the message in the store's queues", TIMEOUT_S, 0.05)
            assert bodies == [b"over tls"]
            # a plaintext client cannot talk to the TLS port
            async with grpc.aio.insecure_channel(ep.address) as plain:
                stub = service_pb2_grpc.MessagingServiceStub(plain)
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="TTls")), timeout=5)
                assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        finally:
            await ep.stop()
            await broker.shutdown()

    asyncio.run(run())


def test_missing_or_invalid_certificate_files_are_config_errors(tmp_path: pathlib.Path) -> None:
    cert, key = make_cert(tmp_path)
    other_cert, other_key = make_cert(tmp_path, "other")
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    check_key_pair(str(cert), str(key))  # the good pair passes
    with pytest.raises(ConfigError, match="cannot read"):
        check_key_pair(str(tmp_path / "missing.crt"), str(key))
    with pytest.raises(ConfigError, match="not a PEM certificate"):
        check_key_pair(str(garbage), str(key))
    with pytest.raises(ConfigError, match="not a PEM certificate"):
        check_key_pair(str(cert), str(garbage))
    with pytest.raises(ConfigError, match="not a PEM certificate"):
        check_key_pair(str(cert), str(other_key))  # a key that does not belong to the certificate

    async def run() -> None:
        broker = new_broker(tmp_path)
        await broker.start()
        try:
            for cfg in (
                GrpcConfig(
                    "127.0.0.1", 0, tls_cert_path=str(tmp_path / "missing.crt"), tls_key_path=str(key)
                ),
                GrpcConfig("127.0.0.1", 0, tls_cert_path=str(garbage), tls_key_path=str(key)),
                GrpcConfig("127.0.0.1", 0, tls_cert_path=str(other_cert)),
            ):
                ep = GrpcEndpoint(broker, cfg)
                with pytest.raises(ConfigError):
                    await ep.start()
                await ep.stop()
            # the broker is unharmed: a plaintext endpoint still starts
            ep = GrpcEndpoint(broker, GrpcConfig("127.0.0.1", 0))
            await ep.start()
            assert ep.port > 0
            await ep.stop()
        finally:
            await broker.shutdown()

    asyncio.run(run())


def test_serve_refuses_to_start_with_an_invalid_certificate(tmp_path: pathlib.Path) -> None:
    _cert, key = make_cert(tmp_path)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    conf = write_broker_conf(tmp_path / "broker.conf")
    done = subprocess.run(
        [
            sys.executable, "-m", "rocketq.cli", "serve", "--data-dir", str(tmp_path / "data"),
            "--namesrv-port", "0", "--broker-port", "0", "-c", str(conf),
            "--grpc-port", "0", "--grpc-tls-cert", str(garbage), "--grpc-tls-key", str(key),
        ],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert "not a PEM certificate" in done.stderr
    assert "rocketq ready" not in done.stdout
