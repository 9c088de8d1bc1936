"""TLS on the remoting protocol with real sockets and certificates made by the ``openssl`` CLI:
the three ``tls.server.mode`` values on a bare RemotingServer (enforcing refuses plaintext,
permissive takes both on one port, disabled refuses TLS), client certificates, a wrong CA as a
clear error, and a name server and a broker in their own processes with TLS everywhere, used by
our producer and push consumer and by ``rocketq admin --tls``."""

from __future__ import annotations

import asyncio
import pathlib
import shutil
import subprocess
from collections.abc import Iterator

import pytest
from procs import HOST, ServeProcess, wait_until

from _support.broker_pair import BrokerPair, push_consume_until
from rocketq.cli import main
from rocketq.client import Admin, Message, Producer
from rocketq.client.config import ClientConfig
from rocketq.errors import ConfigError, RemotingConnectError, RocketqError
from rocketq.remoting import RemotingClient, RemotingServer, RequestCode, create_request
from rocketq.remoting import tls as tls_module
from rocketq.remoting.blocking import BlockingConnectionPool
from rocketq.remoting.command import RemotingCommand, create_response
from rocketq.remoting.connection import Connection
from rocketq.remoting.tls import TlsSettings, client_context, tls_settings_from_properties

TIMEOUT_S = 5.0


def _openssl(*args: str) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("the TLS tests need the `openssl` command line tool on PATH")
    subprocess.run([openssl, *args], check=True, capture_output=True, timeout=60)


class Certs:
    """A CA, a server and a client certificate it signed, and a second, unrelated CA."""

    def __init__(self, d: pathlib.Path) -> None:
        self.dir = d
        self.ca, self.ca_key = d / "ca.crt", d / "ca.key"
        self.other_ca, other_key = d / "other-ca.crt", d / "other-ca.key"
        for cert, key, cn in (
            (self.ca, self.ca_key, "rocketq test CA"),
            (self.other_ca, other_key, "other CA"),
        ):
            _openssl(
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-keyout", str(key),
                "-out", str(cert), "-subj", f"/CN={cn}",
            )  # fmt: skip
        self.server, self.server_key = self._signed("server")
        self.client, self.client_key = self._signed("client")

    def _signed(self, name: str) -> tuple[pathlib.Path, pathlib.Path]:
        key, csr, cert = self.dir / f"{name}.key", self.dir / f"{name}.csr", self.dir / f"{name}.crt"
        _openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(csr),
            "-subj",
            f"/CN={name}",
        )
        _openssl(
            "x509", "-req", "-in", str(csr), "-CA", str(self.ca), "-CAkey", str(self.ca_key),
            "-CAcreateserial", "-days", "2", "-out", str(cert),
        )  # fmt: skip
        return cert, key

    def settings(self, mode: str, **more: object) -> TlsSettings:
        return TlsSettings(
            server_mode=mode, server_cert_path=str(self.server), server_key_path=str(self.server_key), **more
        )  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return Certs(tmp_path_factory.mktemp("certs"))


async def _answer(conn: Connection, request: RemotingCommand) -> RemotingCommand:
    return create_response(request, 0, remark=f"hello over {request.code}")


async def _call(port: int, ssl_ctx: object) -> str | None:
    async with RemotingClient(ssl=ssl_ctx, connect_timeout_s=TIMEOUT_S) as client:  # type: ignore[arg-type]
        response = await client.invoke(
            f"{HOST}:{port}", create_request(RequestCode.GET_ROUTEINFO_BY_TOPIC), TIMEOUT_S
        )
        return response.remark


def _serve(settings: TlsSettings | None, calls: list[tuple[str, object]]) -> list[object]:
    """Start a RemotingServer with ``settings``; run each (name, client ssl context) call against
    it and return the remark or the exception of each."""

    async def run() -> list[object]:
        server = RemotingServer(
            HOST,
            0,
            _answer,
            ssl=settings.server_context() if settings else None,
            tls_permissive=settings is not None and settings.server_mode == "permissive",
        )
        results: list[object] = []
        async with server:
            for _, ctx in calls:
                try:
                    results.append(await _call(server.port, ctx))
                except RocketqError as exc:
                    results.append(exc)
        return results

    return asyncio.run(run())


def test_enforcing_serves_tls_and_refuses_plaintext(certs: Certs) -> None:
    tls, plain = client_context(str(certs.ca)), None
    results = _serve(certs.settings("enforcing"), [("tls", tls), ("plain", plain), ("tls again", tls)])
    assert results[0] == "hello over 105"
    assert isinstance(results[1], RocketqError)  # the server's handshake fails on a frame
    assert results[2] == "hello over 105"


def test_blocking_connections_speak_tls(certs: Certs) -> None:
    """The sync producer's own sockets (remoting/blocking.py) use the client's TLS context."""

    def call(ctx: object) -> object:
        pool = BlockingConnectionPool(connect_timeout_s=TIMEOUT_S, ssl_context=ctx)  # type: ignore[arg-type]
        try:
            request = create_request(RequestCode.GET_ROUTEINFO_BY_TOPIC)
            return pool.invoke(f"{HOST}:{port}", request, TIMEOUT_S).remark
        except RocketqError as exc:
            return exc
        finally:
            pool.close()

    async def run() -> list[object]:
        nonlocal port
        server = RemotingServer(HOST, 0, _answer, ssl=certs.settings("enforcing").server_context())
        async with server:
            port = server.port
            tls = client_context(str(certs.ca))
            return [
                await asyncio.to_thread(call, ctx) for ctx in (tls, None, client_context(str(certs.other_ca)))
            ]

    port = 0
    with_tls, plain, wrong_ca = asyncio.run(run())
    assert with_tls == "hello over 105"
    assert isinstance(plain, RocketqError)  # an enforcing server does not answer plaintext
    assert isinstance(wrong_ca, RemotingConnectError) and "TLS handshake" in str(wrong_ca)


def test_permissive_serves_both_on_one_port(certs: Certs) -> None:
    tls = client_context(str(certs.ca))
    results = _serve(
        certs.settings("permissive"), [("plain", None), ("tls", tls), ("plain", None), ("tls", tls)]
    )
    assert results == ["hello over 105"] * 4


def test_permissive_server_closes_with_idle_and_half_open_connections(certs: Certs) -> None:
    async def run() -> None:
        settings = certs.settings("permissive")
        server = RemotingServer(HOST, 0, _answer, ssl=settings.server_context(), tls_permissive=True)
        await server.start()
        # a connection that never says anything, one that closes at once, then a real call
        _, silent = await asyncio.open_connection(HOST, server.port)
        _, closing = await asyncio.open_connection(HOST, server.port)
        closing.close()
        assert await _call(server.port, None) == "hello over 105"
        await asyncio.wait_for(server.close(), TIMEOUT_S)
        silent.close()
        with pytest.raises(RemotingConnectError):
            await _call(server.port, None)

    asyncio.run(run())


def test_permissive_drops_a_connection_that_never_speaks(
    certs: Certs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tls_module, "SNIFF_TIMEOUT_S", 0.3)

    async def run() -> None:
        settings = certs.settings("permissive")
        async with RemotingServer(
            HOST, 0, _answer, ssl=settings.server_context(), tls_permissive=True
        ) as server:
            reader, writer = await asyncio.open_connection(HOST, server.port)
            assert await asyncio.wait_for(reader.read(), TIMEOUT_S) == b""  # closed by the server
            writer.close()
            assert await _call(server.port, None) == "hello over 105"  # still serving

    asyncio.run(run())


def test_disabled_refuses_tls(certs: Certs) -> None:
    results = _serve(None, [("tls", client_context(str(certs.ca))), ("plain", None)])
    assert isinstance(results[0], RemotingConnectError)
    assert "does the server speak TLS?" in str(results[0]) or "tls.server.mode=disabled" in str(results[0])
    assert results[1] == "hello over 105"


def test_wrong_ca_is_a_clear_error(certs: Certs) -> None:
    results = _serve(certs.settings("enforcing"), [("other CA", client_context(str(certs.other_ca)))])
    assert isinstance(results[0], RemotingConnectError)
    text = str(results[0])
    assert "TLS handshake with 127.0.0.1:" in text
    assert "certificate is not trusted" in text and "trustCertPath" in text


def test_client_certificate_required(certs: Certs) -> None:
    settings = certs.settings(
        "enforcing", server_need_client_auth="require", server_trust_cert_path=str(certs.ca)
    )
    with_cert = client_context(str(certs.ca), cert_path=str(certs.client), key_path=str(certs.client_key))
    results = _serve(
        settings, [("no client cert", client_context(str(certs.ca))), ("client cert", with_cert)]
    )
    assert isinstance(results[0], RocketqError)
    assert results[1] == "hello over 105"


def test_settings_from_properties_and_bad_files(certs: Certs, tmp_path: pathlib.Path) -> None:
    assert tls_settings_from_properties({"listenPort": "1"}) is None
    extra = tmp_path / "tls.properties"
    extra.write_text(
        f"tls.server.certPath={certs.server}\ntls.server.keyPath={certs.server_key}\n", encoding="utf-8"
    )
    s = tls_settings_from_properties(
        {"tls.server.mode": "permissive", "tls.config.file": str(extra), "tls.enable": "true"}
    )
    assert (
        s is not None
        and s.server_mode == "permissive"
        and s.client_enable
        and s.server_cert_path == str(certs.server)
    )
    with pytest.raises(
        ConfigError, match=r"tls.server.mode='strict': expected one of disabled, permissive, enforcing"
    ):
        TlsSettings(server_mode="strict")
    with pytest.raises(ConfigError, match=r"needs tls\.server\.certPath and tls\.server\.keyPath"):
        TlsSettings(server_mode="enforcing")
    with pytest.raises(ConfigError, match="not a PEM certificate and its private key"):
        TlsSettings(
            server_mode="enforcing", server_cert_path=str(certs.server), server_key_path=str(certs.client_key)
        ).server_context()
    with pytest.raises(ConfigError, match="is not a PEM certificate bundle"):
        client_context(str(extra))
    with pytest.raises(ConfigError, match="tls_ca_path/tls_cert_path are given but tls is False"):
        ClientConfig(tls_ca_path=str(certs.ca))


# ---------------------------------------------------------------------------------------------
# a name server and a broker with TLS, in their own processes

TOPIC = "TlsTopic"


class TlsCluster(BrokerPair):
    def __init__(self, root: pathlib.Path, certs: Certs, broker_mode: str = "permissive") -> None:
        super().__init__(root)
        self.certs = certs
        self.broker_mode = broker_mode

    def start(self) -> None:
        c = self.certs
        tls = {
            "tls.server.certPath": str(c.server),
            "tls.server.keyPath": str(c.server_key),
            "tls.client.trustCertPath": str(c.ca),
        }
        broker = {
            "tls.server.mode": self.broker_mode,
            "tls.enable": "true",  # registrations with the name server
            **tls,
        }
        namesrv = {"tls.server.mode": "enforcing", **tls}
        self.start_pair("TlsCluster", TOPIC, namesrv, broker, "the broker registered over TLS")

    def config(self, ca: pathlib.Path | None = None) -> ClientConfig:
        return ClientConfig(
            namesrv_addr=self.namesrv_addr,
            tls=True,
            tls_ca_path=str(ca or self.certs.ca),
            access_key=None,
            secret_key=None,
        )

    def probe_config(self) -> ClientConfig:
        return self.config()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[TlsCluster]:
    c = TlsCluster(tmp_path_factory.mktemp("tls"), certs)
    try:
        c.start()
        yield c
    finally:
        c.close()


def test_client_with_tls_sends_and_consumes(cluster: TlsCluster) -> None:
    with Producer("TlsProducer", config=cluster.config(), retry_times_when_send_failed=0) as producer:
        producer.send(Message(TOPIC, b"over-tls"))
    push_consume_until(cluster.config(), "TlsGroup", TOPIC, b"over-tls", "the consumer received over TLS")


def test_plaintext_and_wrong_ca_refused_by_enforcing_name_server(cluster: TlsCluster) -> None:
    plain = ClientConfig(namesrv_addr=cluster.namesrv_addr, access_key=None, secret_key=None)
    with Admin(config=plain, timeout_ms=2000) as admin, pytest.raises(RocketqError):
        admin.cluster_info()
    with (
        Admin(config=cluster.config(cluster.certs.other_ca), timeout_ms=2000) as admin,
        pytest.raises(RocketqError) as wrong,
    ):
        admin.cluster_info()
    text = str(wrong.value) + " | " + str(wrong.value.__cause__)
    assert "certificate is not trusted" in text


def test_admin_cli_tls(cluster: TlsCluster, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["admin", "clusterList", "-n", cluster.namesrv_addr]
    assert main([*args, "--tls", "--tls-ca", str(cluster.certs.ca)]) == 0
    assert cluster.broker_addr in capsys.readouterr().out
    assert main(args) != 0  # plaintext against an enforcing name server


def test_serve_applies_the_broker_conf_tls_to_both_ports(certs: Certs, tmp_path: pathlib.Path) -> None:
    conf = {
        "tls.server.mode": "enforcing",
        "tls.server.certPath": str(certs.server),
        "tls.server.keyPath": str(certs.server_key),
        "tls.enable": "true",
        "tls.client.trustCertPath": str(certs.ca),
    }
    serve = ServeProcess(tmp_path, broker_conf=conf)
    try:
        serve.start(30.0)
        config = ClientConfig(
            namesrv_addr=serve.namesrv_addr,
            tls=True,
            tls_ca_path=str(certs.ca),
            access_key=None,
            secret_key=None,
        )
        with Admin(config=config, timeout_ms=5000) as admin:
            admin.create_topic("ServeTls", 1, 1, broker_addr=serve.broker_addr)

            def routed() -> bool:
                try:
                    return bool(admin.topic_route("ServeTls").queue_datas)
                except RocketqError:
                    return False

            wait_until(routed, "the route of ServeTls over TLS", 30.0, [serve])
        with Producer("ServeTlsProducer", config=config, retry_times_when_send_failed=0) as producer:
            producer.send(Message("ServeTls", b"through serve"))
        plain = ClientConfig(namesrv_addr=serve.namesrv_addr, access_key=None, secret_key=None)
        with Admin(config=plain, timeout_ms=2000) as admin, pytest.raises(RocketqError):
            admin.cluster_info()
    finally:
        serve.stop()
