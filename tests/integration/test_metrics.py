"""``/metrics`` of real servers: a ``rocketq serve`` process with metrics on (broker.conf
``metricsExporterType=PROM``) scraped while producing and consuming, ``rocketq namesrv
--metrics-port``, the HTTP endpoint's answers, and metrics off by default.

Counts are checked exactly against what the test sent and consumed; waits are bounded polls."""

from __future__ import annotations

import asyncio
import re
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from _support.metrics import check_exposition, has, scrape, value
from _support.procs import HOST, RocketqProcess, ServeProcess, free_port, wait_until
from rocketq.client import Admin, LitePullConsumer, Producer
from rocketq.errors import ConfigError, RocketqError
from rocketq.message import Message, MessageExt
from rocketq.metrics.http import MetricsServer
from rocketq.namesrv.config import NamesrvConfig
from rocketq.namesrv.server import NameServer
from rocketq.store.put_latency import PUT_LATENCY_SAMPLE
from rocketq.testing import InProcessCluster

BROKER = "broker-a"
_METRICS_LINE = re.compile(r"^\s+metrics\s+(http://\S+)$", re.MULTILINE)


@pytest.fixture
def serve(tmp_path: object) -> Iterator[tuple[ServeProcess, str]]:
    server = ServeProcess(
        tmp_path,  # type: ignore[arg-type]
        broker_conf={"metricsExporterType": "PROM", "metricsPromExporterPort": "0"},
        broker_name=BROKER,
    )
    try:
        server.start()
        found = _METRICS_LINE.search(server.log_text(None))
        assert found is not None, server.log_text()
        yield server, found.group(1)
    finally:
        server.stop()


def _labels(topic: str, group: str) -> dict[str, str]:
    return {"topic": topic, "consumer_group": group, "node_id": BROKER}


def test_serve_counts_sends_and_pulls_exactly_and_lag_reaches_zero(serve: tuple[ServeProcess, str]) -> None:
    server, url = serve
    with Admin(server.namesrv_addr) as admin:
        admin.create_topic("MetA", 4, 4, broker_addr=server.broker_addr)
        admin.create_topic("MetB", 2, 2, broker_addr=server.broker_addr)
    producer = Producer("MetPG", namesrv_addr=server.namesrv_addr)
    producer.start()
    try:
        for i in range(37):
            producer.send(Message("MetA", f"a-{i}".encode() * 10, tags="x"))
        for i in range(23):
            producer.send(Message("MetB", b"b" * 2000, keys=[f"k{i}"]))
    finally:
        producer.shutdown()

    samples = check_exposition(scrape(url))
    normal = {"message_type": "normal", "node_type": "broker", "cluster": "DefaultCluster"}
    assert value(samples, "rocketmq_messages_in_total", topic="MetA", **normal) == 37
    assert value(samples, "rocketmq_messages_in_total", topic="MetB", **normal) == 23
    assert value(samples, "rocketmq_message_size_count", topic="MetB") == 23
    # 2000-byte bodies: every MetB record is between 1 and 4 KiB
    assert value(samples, "rocketmq_message_size_bucket", topic="MetB", le="1024.0") == 0
    assert value(samples, "rocketmq_message_size_bucket", topic="MetB", le="4096.0") == 23
    for topic in ("MetA", "MetB"):
        assert value(samples, "rocketmq_throughput_in_total", topic=topic) == value(
            samples, "rocketmq_message_size_sum", topic=topic
        )
    sends = sum(
        value(samples, "rocketmq_rpc_latency_count", request_code=code, response_code="success")
        for code in ("send_message", "send_message_v2")
    )
    assert sends == 60
    assert value(samples, "rocketmq_storage_size") > 0
    # the name server of `rocketq serve` answers on the same endpoint
    assert value(samples, "rocketq_namesrv_brokers", node_type="nameserver", cluster="DefaultCluster") == 1
    assert (
        value(samples, "rocketmq_rpc_latency_count", node_type="nameserver", request_code="register_broker")
        >= 1
    )
    assert (
        value(samples, "rocketq_store_put_latency_seconds_count", node_id=BROKER) == 60 // PUT_LATENCY_SAMPLE
    )

    consumer = LitePullConsumer(
        "MetG",
        namesrv_addr=server.namesrv_addr,
        auto_commit=False,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )
    consumer.subscribe("MetA")
    consumer.start()
    try:
        got: list[MessageExt] = []

        def received(count: int) -> bool:
            got.extend(consumer.poll(timeout_ms=200))
            return len(got) >= count

        wait_until(lambda: received(37), "37 MetA messages", watched=server)
        consumer.commit()

        def lag_is(expected: int) -> bool:
            s = check_exposition(scrape(url))
            return (
                has(s, "rocketmq_consumer_lag_messages", **_labels("MetA", "MetG"))
                and value(s, "rocketmq_consumer_lag_messages", **_labels("MetA", "MetG")) == expected
            )

        wait_until(lambda: lag_is(0), "consumer lag of MetG on MetA to reach 0", watched=server)
        samples = check_exposition(scrape(url))
        assert value(samples, "rocketmq_messages_out_total", **_labels("MetA", "MetG")) == 37
        assert value(samples, "rocketmq_throughput_out_total", **_labels("MetA", "MetG")) == sum(
            m.store_size for m in got
        )
        assert value(samples, "rocketmq_consumer_lag_latency", **_labels("MetA", "MetG")) == 0
        assert value(samples, "rocketmq_consumer_inflight_messages", **_labels("MetA", "MetG")) == 0

        # five more, not yet polled: the lag is exactly five until they are consumed and committed
        producer = Producer("MetPG2", namesrv_addr=server.namesrv_addr)
        producer.start()
        try:
            for i in range(5):
                producer.send(Message("MetA", f"late-{i}".encode()))
        finally:
            producer.shutdown()
        wait_until(lambda: lag_is(5), "consumer lag of MetG on MetA to be 5", watched=server)
        samples = check_exposition(scrape(url))
        assert value(samples, "rocketmq_messages_in_total", topic="MetA") == 42
        assert value(samples, "rocketmq_consumer_lag_latency", **_labels("MetA", "MetG")) >= 0
        got.clear()
        wait_until(lambda: received(5), "the 5 late MetA messages", watched=server)
        consumer.commit()
        wait_until(lambda: lag_is(0), "consumer lag of MetG on MetA back to 0", watched=server)
        samples = check_exposition(scrape(url))
        assert value(samples, "rocketmq_messages_out_total", **_labels("MetA", "MetG")) == 42
        assert value(samples, "rocketmq_messages_out_total", topic="MetB") == 0
    finally:
        consumer.shutdown()


def test_namesrv_metrics_port_counts_requests_by_code(tmp_path: object) -> None:
    port, metrics_port = free_port(), free_port()
    process = RocketqProcess(
        "namesrv",
        ["namesrv", "--port", str(port), "--metrics-port", str(metrics_port)],
        tmp_path,  # type: ignore[arg-type]
    )
    url = f"http://0.0.0.0:{metrics_port}/metrics".replace("0.0.0.0", HOST)
    try:

        def up() -> bool:
            try:
                scrape(url, timeout_s=2)
            except OSError:
                return False
            return True

        wait_until(up, "the name server's /metrics", watched=process)
        with Admin(f"{HOST}:{port}") as admin:
            for _ in range(3):
                with pytest.raises(RocketqError):
                    admin.topic_route("NoSuchTopic")
        samples = check_exposition(scrape(url))
        assert (
            value(
                samples,
                "rocketmq_rpc_latency_count",
                node_type="nameserver",
                request_code="get_routeinfo_by_topic",
                response_code="topic_not_exist",
            )
            == 3
        )
        assert value(samples, "rocketq_namesrv_topics") == 0
        assert not has(samples, "rocketq_namesrv_brokers")
    finally:
        process.stop()


def test_metrics_are_off_by_default() -> None:
    with InProcessCluster() as cluster:
        broker = cluster.broker(cluster.broker_names[0])
        assert broker.metrics_url is None
        assert broker.ctx is not None and broker.ctx.metrics is None
        assert cluster.store().put_latency is None


def test_http_endpoint_answers_only_get_and_head_of_metrics() -> None:
    async def run() -> None:
        async def collect() -> str:
            return "# HELP demo_up Up.\n# TYPE demo_up gauge\ndemo_up 1\n"

        async with MetricsServer(HOST, 0, collect) as server:

            def ask(method: str, path: str) -> tuple[int, bytes]:
                request = urllib.request.Request(f"http://{HOST}:{server.port}{path}", method=method)
                try:
                    with urllib.request.urlopen(request, timeout=10) as response:
                        return response.status, response.read()
                except urllib.error.HTTPError as exc:
                    return exc.code, exc.read()

            assert await asyncio.to_thread(ask, "GET", "/metrics") == (200, (await collect()).encode())
            assert await asyncio.to_thread(ask, "HEAD", "/metrics") == (200, b"")
            assert (await asyncio.to_thread(ask, "GET", "/"))[0] == 404
            assert (await asyncio.to_thread(ask, "POST", "/metrics"))[0] == 405

            def garbage() -> bytes:
                with socket.create_connection((HOST, server.port), timeout=10) as sock:
                    sock.sendall(b"NONSENSE\r\n\r\n")
                    return sock.recv(100)

            assert (await asyncio.to_thread(garbage)).startswith(b"HTTP/1.1 400 ")

    asyncio.run(run())


def test_a_taken_metrics_port_is_a_clear_error() -> None:
    async def run() -> None:
        with socket.socket() as taken:
            taken.bind((HOST, 0))
            taken.listen()
            port = taken.getsockname()[1]
            config = NamesrvConfig(
                listen_port=0,
                bind_address=HOST,
                metrics_exporter_type="PROM",
                metrics_prom_exporter_port=port,
            )
            server = NameServer(config)
            with pytest.raises(
                ConfigError, match=f"cannot serve metrics on {HOST}:{port}.*metricsPromExporterPort"
            ):
                await server.start()
            await server.close()

    asyncio.run(run())
