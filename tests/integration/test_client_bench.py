"""``rocketq bench produce|consume`` and the stderr progress line, against an in-process cluster.

Functional checks only (counts, output shape, exit codes); speed is measured by bench/client.py.
"""

from __future__ import annotations

import io
import json
import pathlib
from collections.abc import Iterator

import pytest
from test_client_producer import Cluster

from rocketq.cli import main
from rocketq.client.bench import BenchConfig, percentile
from rocketq.client.progress import Progress
from rocketq.errors import ConfigError


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, ("broker-a",))
    c.start()
    try:
        yield c
    finally:
        c.close()


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_draws_only_on_a_terminal_and_when_enabled() -> None:
    tty = Tty()
    with Progress(4, "read", stream=tty, min_interval_s=0) as p:
        for n in range(1, 5):
            p.update(n)
    text = tty.getvalue()
    assert "\rread: 4/4 (100%)" in text and text.endswith("\n")
    for stream, enabled in ((io.StringIO(), True), (Tty(), False)):
        with Progress(4, "read", stream=stream, enabled=enabled, min_interval_s=0) as p:
            p.update(4)
        assert stream.getvalue() == ""


def test_percentile_and_config_checks() -> None:
    values = [float(v) for v in range(1, 101)]
    assert (percentile(values, 50), percentile(values, 99), percentile(values, 100)) == (50.0, 99.0, 100.0)
    assert percentile([], 99) == 0.0
    with pytest.raises(ConfigError, match=r"mode 'fast'.*count=0"):
        BenchConfig(mode="fast", count=0).check()


def test_bench_produce_then_consume_counts_every_message(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ["--namesrv-addr", cluster.namesrv_addr, "-t", "BenchT", "-s", "64", "-w", "4", "--json"]
    for mode in ("sync", "async", "batch"):
        assert main(["bench", "produce", *common, "-n", "200", "--mode", mode, "-b", "16"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["messages"] == 200 and doc["errors"] == 0 and doc["what"] == f"produce/{mode}"
        assert 0 < doc["latency_p50_ms"] <= doc["latency_p99_ms"] <= doc["latency_max_ms"]
    # 600 measured + one route warm-up send per producer run
    assert main(["bench", "consume", *common, "-n", "603", "-g", "BenchCG", "-d", "60"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["messages"] == 603 and doc["errors"] == 0
