"""The data source against a ``rocketq serve`` whose name server and broker both enforce TLS
(a self-signed certificate made by the ``openssl`` CLI): the options ``tls``/``tlsCaPath`` carry
the admin calls and the executors' pulls over TLS; without them the read fails."""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

import pytest

from _support.broker_pair import topic_routed
from _support.tls import make_cert
from _support.wait import wait_until
from rocketq.client import Admin, Message, Producer
from rocketq.client.config import ClientConfig
from rocketq.errors import ConfigError
from rocketq.spark.options import TlsOptions, parse_read_options, parse_write_options

TOPIC = "SparkTls"
NS = {"nameServer": "127.0.0.1:9876", "topic": "T"}


def test_tls_options_parse() -> None:
    opts = parse_read_options({**NS, "tls": "true", "tlsCaPath": "ca.pem"}, streaming=False)
    assert opts.tls == TlsOptions("ca.pem", None, None)
    assert parse_read_options(NS, streaming=False).tls is None
    w = parse_write_options(
        {**NS, "TLS": "yes", "tlsCertPath": "c.pem", "tlsKeyPath": "k.pem"}, streaming=False
    )
    assert w.tls == TlsOptions(None, "c.pem", "k.pem")
    with pytest.raises(ConfigError, match="tlsCaPath/tlsCertPath/tlsKeyPath are given but tls is not true"):
        parse_read_options({**NS, "tlsCaPath": "ca.pem"}, streaming=False)
    with pytest.raises(ConfigError, match="tlsCertPath and tlsKeyPath must be given together"):
        parse_read_options({**NS, "tls": "true", "tlsCertPath": "c.pem"}, streaming=False)
    with pytest.raises(ConfigError, match="tls='maybe' must be true or false"):
        parse_read_options({**NS, "tls": "maybe"}, streaming=False)


def test_read_over_tls(spark: Any, serve_process: Callable[..., Any], tmp_path: pathlib.Path) -> None:
    cert, key = make_cert(tmp_path)
    server = serve_process(
        {
            "tls.server.mode": "enforcing",
            "tls.server.certPath": cert,
            "tls.server.keyPath": key,
            "tls.enable": "true",
            "tls.client.trustCertPath": cert,
        }
    )
    config = ClientConfig(
        namesrv_addr=server.namesrv, tls=True, tls_ca_path=str(cert), access_key=None, secret_key=None
    )
    with Admin(config=config, timeout_ms=10_000) as admin:
        admin.create_topic(TOPIC, read_queue_nums=2, write_queue_nums=2)
        wait_until(lambda: topic_routed(admin, TOPIC), f"route of {TOPIC} over TLS", 30.0)
    expected = sorted(f"tls-{i}".encode() for i in range(10))
    with Producer("SparkTlsProducer", config=config, retry_times_when_send_failed=0) as producer:
        for body in expected:
            producer.send(Message(TOPIC, body))

    def read(**options: str) -> list[bytes]:
        r = spark.read.format("rocketq").option("nameServer", server.namesrv).option("topic", TOPIC)
        r = r.option("requestTimeoutMs", "3000")
        for name, value in options.items():
            r = r.option(name, value)
        return sorted(bytes(row.body) for row in r.load().collect())

    assert read(tls="true", tlsCaPath=str(cert)) == expected
    # plaintext: the enforcing name server hangs up
    with pytest.raises(Exception, match=rf"NameServerUnavailable: .*{server.namesrv}: connection .* closed"):
        read()
    with pytest.raises(Exception, match=r"ConfigError: TLS CA file: cannot read .*no-such-ca\.pem"):
        read(tls="true", tlsCaPath=str(tmp_path / "no-such-ca.pem"))
