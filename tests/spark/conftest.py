"""One local Spark session for every test in this directory.

PySpark's Python workers (the data-source planner and the executors) run the interpreter named
by ``PYSPARK_PYTHON``; it must be this one (the venv with pyarrow and rocketq), and it has to be
in the environment before the JVM starts. ``SPARK_LOCAL_IP`` keeps Spark on the loopback
interface. Tests that need a Spark session are marked ``spark`` (``pytest -m "not spark"`` runs
everything else without a JVM).

``serve_process`` starts ``rocketq serve`` processes on fixed ports (optionally with a
broker.conf), which a test can SIGKILL and start again on the same addresses and data.
"""

from __future__ import annotations

import os
import pathlib
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from pyspark.sql import SparkSession

from _support.spark_log import LOG4J2
from rocketq.free_ports import free_port

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = pathlib.Path(__file__).resolve().parent
    for item in items:
        if here in pathlib.Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    conf_dir = tmp_path_factory.mktemp("spark-conf")
    (conf_dir / "log4j2.properties").write_text(LOG4J2)
    os.environ["SPARK_CONF_DIR"] = str(conf_dir)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("rocketq-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


@dataclass
class ServeProcess:
    """A ``rocketq serve`` process on fixed ports, so it can be killed and started again on the
    same addresses and data directory."""

    data_dir: pathlib.Path
    config: pathlib.Path | None = None
    namesrv_port: int = field(default_factory=free_port)
    broker_port: int = field(default_factory=free_port)
    proc: subprocess.Popen[str] | None = None
    reader: threading.Thread = field(default_factory=threading.Thread)

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def broker(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    def start(self) -> None:
        args = [sys.executable, "-m", "rocketq.cli", "serve", "--data-dir", str(self.data_dir)]
        args += ["--namesrv-port", str(self.namesrv_port), "--broker-port", str(self.broker_port)]
        if self.config is not None:
            args += ["-c", str(self.config)]
        proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        self.proc = proc
        ready = threading.Event()

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                if re.match(r"\s*broker\s+\S+:\d+", line):
                    ready.set()
            ready.set()

        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()
        assert ready.wait(60) and proc.poll() is None, "rocketq serve did not start"

    def _reap(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        self.reader.join(10)
        self.proc.stdout.close()

    def kill(self) -> None:
        """SIGKILL: no shutdown hooks, as a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)
            self._reap()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)
        self._reap()


@pytest.fixture
def serve_process(tmp_path: pathlib.Path) -> Iterator[Callable[..., ServeProcess]]:
    """Starts ``rocketq serve`` processes (optionally with a broker.conf); stops them after."""
    started: list[ServeProcess] = []

    def start(config: dict[str, object] | None = None) -> ServeProcess:
        conf = None
        if config is not None:
            conf = tmp_path / f"broker-{len(started)}.conf"
            conf.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
        server = ServeProcess(tmp_path / f"data-{len(started)}", conf)
        started.append(server)
        server.start()
        return server

    try:
        yield start
    finally:
        for server in started:
            server.stop()
