"""Real ``rocketq namesrv`` / ``rocketq broker`` / ``rocketq serve`` processes for tests.

:class:`ProcessCluster` writes a ``namesrv.conf`` and one ``broker.conf`` per broker (RocketMQ's
key=value format, free ports on 127.0.0.1) and starts each as its own ``python -m rocketq.cli``
process with output in ``<root>/logs/<name>.log``. :meth:`ProcessCluster.wait_ready` waits, with
a deadline, until every broker is listed by the name server; :func:`wait_until` is the generic
bounded poll that also fails fast, with the logs, when a process died. ``kill`` sends SIGKILL,
``terminate`` SIGTERM; ``close`` kills whatever still runs.
"""

from __future__ import annotations

import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

import rocketq
from rocketq.client import Admin
from rocketq.errors import RocketqError

HOST = "127.0.0.1"
WAIT_S = 30.0
EXIT_DEADLINE_S = 15.0
POLL_S = 0.05


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def child_env() -> dict[str, str]:
    """The test's environment for a child: this checkout first on PYTHONPATH, no NAMESRV_ADDR."""
    env = dict(os.environ)
    env.pop("NAMESRV_ADDR", None)
    src = str(pathlib.Path(rocketq.__file__).resolve().parents[1])
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


class RocketqProcess:
    """One ``rocketq`` command-line process, its output in a log file."""

    def __init__(self, name: str, args: Sequence[str], log_dir: pathlib.Path) -> None:
        self.name = name
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"{name}.log"
        with open(self.log_path, "ab") as log:
            self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                [sys.executable, "-m", "rocketq.cli", "-v", *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=child_env(),
            )

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self, tail_chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-tail_chars:]
        except FileNotFoundError:
            return ""

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_text()}")

    def kill(self) -> None:
        """SIGKILL, and wait for the process to be gone."""
        proc = self.proc
        assert proc is not None, f"{self.name} is not running"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(EXIT_DEADLINE_S)
        self.proc = None
        assert proc.returncode == -signal.SIGKILL, f"{self.name} exited on its own:\n{self.log_text()}"

    def terminate(self) -> int:
        """SIGTERM; the exit code (the process is killed if it ignores the signal)."""
        proc = self.proc
        assert proc is not None, f"{self.name} is not running"
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(EXIT_DEADLINE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError(f"{self.name} ignored SIGTERM:\n{self.log_text()}") from None
        self.proc = None
        return code

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


class ProcessCluster:
    """A name server and brokers of one cluster, each in its own process."""

    def __init__(
        self, root: pathlib.Path, broker_names: Sequence[str] = ("broker-a",), cluster: str = "TestCluster"
    ) -> None:
        self.root = root
        self.cluster = cluster
        self.log_dir = root / "logs"
        self.namesrv_port = free_port()
        self.namesrv_addr = f"{HOST}:{self.namesrv_port}"
        self.broker_names = tuple(broker_names)
        self.broker_ports = {name: free_port() for name in self.broker_names}
        self.processes: dict[str, RocketqProcess] = {}

    def broker_addr(self, name: str) -> str:
        return f"{HOST}:{self.broker_ports[name]}"

    def store_dir(self, name: str) -> pathlib.Path:
        return self.root / "store" / name

    def start_namesrv(self) -> None:
        conf = self.root / "namesrv.conf"
        conf.write_text(
            f"listenPort={self.namesrv_port}\nbindAddress={HOST}\n"
            "scanNotActiveBrokerInterval=1000\nbrokerHeartbeatTimeout=10000\n"
        )
        self.processes["namesrv"] = RocketqProcess(
            "namesrv", ["namesrv", "-c", str(conf), "--port", str(self.namesrv_port)], self.log_dir
        )

    def start_broker(self, name: str, **extra: str) -> None:
        """Start (or restart, on the same store) broker ``name``; ``extra`` adds broker.conf keys."""
        conf = self.root / f"{name}.conf"
        lines = {
            "brokerClusterName": self.cluster,
            "brokerName": name,
            "brokerId": "0",
            "namesrvAddr": self.namesrv_addr,
            "brokerIP1": HOST,
            "bindAddress": HOST,
            "listenPort": str(self.broker_ports[name]),
            "fastListenPortEnable": "false",
            "registerNameServerPeriod": "1000",
            "storePathRootDir": str(self.store_dir(name)),
            "flushDiskType": "SYNC_FLUSH",
            "mappedFileSizeCommitLog": str(4 << 20),
            "mappedFileSizeConsumeQueue": "60000",
            "maxHashSlotNum": "1000",
            "maxIndexNum": "4000",
            **extra,
        }
        conf.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
        self.processes[name] = RocketqProcess(name, ["broker", "-c", str(conf)], self.log_dir)

    def start(self) -> None:
        """The name server and every broker, then :meth:`wait_ready`."""
        self.start_namesrv()
        for name in self.broker_names:
            self.start_broker(name)
        self.wait_ready()

    def wait_ready(self, names: Sequence[str] | None = None) -> None:
        """Wait until the name server lists every broker in ``names`` (default: all)."""
        wanted = set(self.broker_names if names is None else names)

        def listed() -> bool:
            try:
                with Admin(self.namesrv_addr, timeout_ms=2000) as admin:
                    info = admin.cluster_info()
            except RocketqError:
                return False
            return wanted <= set(info.broker_addr_table)

        self.wait_until(listed, f"brokers {sorted(wanted)} registered")

    def wait_until(self, condition: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
        wait_until(condition, what, timeout_s, self)

    def create_topic(self, topic: str, queues: int) -> None:
        """Create ``topic`` on every broker of the cluster and wait until its route lists them all."""
        with Admin(self.namesrv_addr) as admin:
            admin.create_topic(topic, queues, queues, cluster=self.cluster)

            def routed() -> bool:
                try:
                    route = admin.topic_route(topic)
                except RocketqError:
                    return False
                return {q.broker_name for q in route.queue_datas} >= set(self.running_brokers())

            self.wait_until(routed, f"route of {topic} on every broker")

    def running_brokers(self) -> list[str]:
        return [n for n in self.broker_names if n in self.processes and self.processes[n].running]

    def kill(self, name: str) -> None:
        self.processes[name].kill()

    def check_alive(self) -> None:
        for process in self.processes.values():
            if process.proc is not None:
                process.check_alive()

    def diagnostics(self) -> str:
        return "\n".join(f"--- {n} ---\n{p.log_text()}" for n, p in self.processes.items())

    def close(self) -> None:
        for process in self.processes.values():
            process.close()


def wait_until(
    condition: Callable[[], bool], what: str, timeout_s: float = WAIT_S, cluster: ProcessCluster | None = None
) -> None:
    """Poll ``condition`` until true; AssertionError (with process logs) after ``timeout_s`` or as
    soon as a process of ``cluster`` died."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if cluster is not None:
            cluster.check_alive()
        if time.monotonic() > deadline:
            logs = f"\n{cluster.diagnostics()}" if cluster is not None else ""
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}{logs}")
        time.sleep(POLL_S)


__all__ = ["HOST", "ProcessCluster", "RocketqProcess", "child_env", "free_port", "wait_until"]
