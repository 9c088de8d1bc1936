"""Real ``rocketq serve`` / ``rocketq namesrv`` / ``rocketq broker`` processes for tests.

Every broker a test starts gets a small store through its ``broker.conf``
(:data:`SMALL_STORE`, RocketMQ's key names). RocketMQ's defaults reserve a whole 1 GiB CommitLog
segment (``posix_fallocate``) as soon as the first message arrives, plus the next segment ahead
of time, and 5.72 MiB per ConsumeQueue file; a test run starting a broker per test used tens of
GiB of disk. The small sizes keep a broker at a few tens of MiB; segments still hold the largest
message a client may send (4 MiB by default). Tests about the default sizes themselves set them
explicitly (``small_store=False``).

* :class:`RocketqProcess`: one ``python -m rocketq.cli -v ARGS`` process, stdout and stderr in
  ``<log_dir>/<name>.log``; ``kill`` (SIGKILL), ``terminate`` (SIGTERM, exit code), ``stop``
  (SIGTERM, SIGKILL if ignored), ``close`` (SIGKILL if running), ``wait_banner`` (the endpoints
  ``rocketq serve`` / ``rocketq proxy`` print once ready).
* :class:`ServeProcess`: ``rocketq serve`` on ports the OS picks, restartable on the same data
  directory.
* :class:`ProcessCluster`: ``rocketq namesrv`` and ``rocketq broker`` processes of one cluster,
  one ``broker.conf`` per broker, ports chosen up front.
* :func:`run_captured`: ``subprocess.run`` with its output captured and a deadline that ends
  the command's children too (npm, pip): the whole process group is killed.
* :func:`wait_until`: the bounded poll; an AssertionError with the processes' logs on timeout, or
  at once when a watched process died.

Every wait has a deadline; nothing sleeps for synchronisation.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Protocol

import rocketq
from _support import wait as _wait
from rocketq.client import Admin
from rocketq.config import StoreConfig, from_rocketmq_properties
from rocketq.errors import RocketqError
from rocketq.free_ports import free_port

HOST = "127.0.0.1"
WAIT_S = 30.0
START_TIMEOUT_S = 30.0
EXIT_DEADLINE_S = 15.0
POLL_S = 0.05

#: The store of every broker a test starts (RocketMQ ``broker.conf`` keys). 16 MiB CommitLog
#: segments (RocketMQ: 1 GiB) still hold a maximum-size message; ConsumeQueue files of 6,000 units
#: (RocketMQ: 300,000) and index files of 5,000 slots / 20,000 entries (RocketMQ: 5 M / 20 M) roll
#: in longer tests, which is behaviour worth having covered anyway.
SMALL_STORE: Mapping[str, str] = MappingProxyType(
    {
        "mappedFileSizeCommitLog": str(16 << 20),
        "mappedFileSizeConsumeQueue": str(6000 * 20),
        "maxHashSlotNum": "5000",
        "maxIndexNum": "20000",
    }
)


def small_store_config(root: str | os.PathLike[str], **fields: Any) -> StoreConfig:
    """A :class:`StoreConfig` with the :data:`SMALL_STORE` sizes, for in-process brokers;
    ``fields`` are further ``StoreConfig`` fields."""
    return from_rocketmq_properties(StoreConfig, dict(SMALL_STORE), store_path_root_dir=str(root), **fields)


def write_conf(path: pathlib.Path, props: Mapping[str, str]) -> pathlib.Path:
    """``props`` as a RocketMQ ``key=value`` properties file at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()), encoding="utf-8")
    return path


def write_broker_conf(
    path: pathlib.Path, props: Mapping[str, str] | None = None, *, small_store: bool = True
) -> pathlib.Path:
    """A ``broker.conf``: the :data:`SMALL_STORE` sizes (unless ``small_store`` is false), then
    ``props`` (which win)."""
    return write_conf(path, {**(SMALL_STORE if small_store else {}), **(props or {})})


def child_env() -> dict[str, str]:
    """The test's environment for a child: this checkout first on PYTHONPATH, no NAMESRV_ADDR."""
    env = dict(os.environ)
    env.pop("NAMESRV_ADDR", None)
    src = str(pathlib.Path(rocketq.__file__).resolve().parents[1])
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


# The banner ``rocketq serve`` / ``rocketq proxy`` print, in one write, once everything listens:
# "rocketq ready in 0.52 s" or "rocketq proxy ready (...)", then one indented line per endpoint.
_BANNER = re.compile(r"^rocketq (?:proxy )?ready[^\n]*\n((?:[ \t]+[^\n]*\n?)*)", re.MULTILINE)
_ENDPOINT = re.compile(r"^\s+(name server|broker|gRPC \(v5\))\s+(\S+:\d+)(?=\s)", re.MULTILINE)


class Watched(Protocol):
    """What :func:`wait_until` watches while it waits."""

    def check_alive(self) -> None: ...

    def diagnostics(self) -> str: ...


class RocketqProcess:
    """One ``rocketq`` command-line process, its output in a log file."""

    def __init__(self, name: str, args: Sequence[str], log_dir: pathlib.Path) -> None:
        self.name = name
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"{name}.log"
        self.endpoints: dict[str, str] = {}
        with open(self.log_path, "ab") as log:
            self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                [sys.executable, "-m", "rocketq.cli", "-v", *args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=child_env(),
            )

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self, tail_chars: int | None = 4000) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return text if tail_chars is None else text[-tail_chars:]

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_text()}")

    def diagnostics(self) -> str:
        return f"--- {self.name} ---\n{self.log_text()}"

    def wait_banner(self, names: Collection[str], timeout_s: float = START_TIMEOUT_S) -> dict[str, str]:
        """Wait for the ``rocketq ... ready`` banner (``serve``, ``proxy``) to list the endpoints
        ``names`` (``name server``, ``broker``, ``gRPC (v5)``); all it lists, also kept in
        :attr:`endpoints`."""

        def ready() -> bool:
            banner = _BANNER.search(self.log_text(None))
            if banner is not None:
                self.endpoints = dict(_ENDPOINT.findall(banner.group(1)))
            return set(names) <= set(self.endpoints)

        wait_until(ready, f"{self.name} to print its endpoints {sorted(names)}", timeout_s, self)
        return self.endpoints

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

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if the process has not exited by the deadline (for teardown)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(EXIT_DEADLINE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


class ServeProcess:
    """``rocketq serve`` on 127.0.0.1, ports chosen by the OS, over ``<root>/data``.

    ``broker_conf`` adds ``broker.conf`` keys to :data:`SMALL_STORE`; ``grpc`` starts the gRPC
    endpoint (on a free port) as well; ``flush`` is ``--flush`` (None: serve's default). Each
    start logs to ``<root>/logs/serve-<n>.log``; :meth:`start` returns once the banner is there
    and sets :attr:`namesrv_addr`, :attr:`broker_addr` and (with ``grpc``) :attr:`grpc_addr`.
    """

    def __init__(
        self,
        root: pathlib.Path,
        *,
        broker_conf: Mapping[str, str] | None = None,
        grpc: bool = False,
        flush: str | None = None,
        broker_name: str = "broker-a",
        small_store: bool = True,
    ) -> None:
        self.root = root
        self.data_dir = root / "data"
        self.log_dir = root / "logs"
        self.grpc = grpc
        self.flush = flush
        self.broker_name = broker_name
        self.conf = write_broker_conf(root / "broker.conf", broker_conf, small_store=small_store)
        self.process: RocketqProcess | None = None
        self.starts = 0
        self.namesrv_addr = self.broker_addr = self.grpc_addr = ""

    @property
    def store_dir(self) -> pathlib.Path:
        return self.data_dir / self.broker_name

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.running

    def start(self, timeout_s: float = START_TIMEOUT_S) -> str:
        """Start (or restart, on the same data) and wait for the banner; the broker's address."""
        assert not self.running, "rocketq serve is already running"
        args = [
            "serve", "--data-dir", str(self.data_dir), "--broker-name", self.broker_name,
            "--namesrv-port", "0", "--broker-port", "0", "--grpc-port", "0" if self.grpc else "-1",
            "-c", str(self.conf), *(["--flush", self.flush] if self.flush else []),
        ]  # fmt: skip
        process = self.process = RocketqProcess(f"serve-{self.starts}", args, self.log_dir)
        self.starts += 1
        try:
            found = process.wait_banner(
                {"name server", "broker", *(["gRPC (v5)"] if self.grpc else [])}, timeout_s
            )
        except BaseException:
            process.close()  # a server that never became ready is not left behind
            raise
        self.namesrv_addr = found["name server"]
        self.broker_addr = found["broker"]
        self.grpc_addr = found.get("gRPC (v5)", "")
        return self.broker_addr

    def _current(self) -> RocketqProcess:
        assert self.process is not None, "rocketq serve was not started"
        return self.process

    def log_text(self, tail_chars: int | None = 4000) -> str:
        return self.process.log_text(tail_chars) if self.process is not None else ""

    def check_alive(self) -> None:
        if self.process is not None:
            self.process.check_alive()

    def diagnostics(self) -> str:
        return self.process.diagnostics() if self.process is not None else "(rocketq serve not started)"

    def kill(self) -> None:
        """SIGKILL: nothing of the shutdown path runs."""
        self._current().kill()

    def terminate(self) -> int:
        """SIGTERM; the exit code (AssertionError if the process ignores it)."""
        return self._current().terminate()

    def stop(self) -> None:
        """SIGTERM, SIGKILL if it is ignored; no-op when not running."""
        if self.process is not None:
            self.process.stop()

    def close(self) -> None:
        if self.process is not None:
            self.process.close()


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
        conf = write_conf(
            self.root / "namesrv.conf",
            {
                "listenPort": str(self.namesrv_port),
                "bindAddress": HOST,
                "scanNotActiveBrokerInterval": "1000",
                "brokerHeartbeatTimeout": "10000",
            },
        )
        self.processes["namesrv"] = RocketqProcess(
            "namesrv", ["namesrv", "-c", str(conf), "--port", str(self.namesrv_port)], self.log_dir
        )

    def start_broker(self, name: str, **extra: str) -> None:
        """Start (or restart, on the same store) broker ``name``; ``extra`` adds broker.conf keys."""
        conf = write_broker_conf(
            self.root / f"{name}.conf",
            {
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
                **extra,
            },
        )
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
            process.check_alive()

    def diagnostics(self) -> str:
        return "\n".join(p.diagnostics() for p in self.processes.values())

    def close(self) -> None:
        for process in self.processes.values():
            process.close()


def run_captured(
    cmd: Sequence[str],
    timeout_s: float,
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` in a session of its own with stdout and stderr captured; on the deadline kill
    the session's whole process group and raise ``subprocess.TimeoutExpired`` (with the output
    so far). ``subprocess.run(timeout=...)`` kills only the command itself: the processes it
    started (npm's and pip's workers) run on, writing into a directory the next attempt wipes."""
    proc = subprocess.Popen(
        list(cmd),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=None if env is None else dict(env),
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=EXIT_DEADLINE_S)
        raise subprocess.TimeoutExpired(list(cmd), timeout_s, output=out, stderr=err) from None
    return subprocess.CompletedProcess(list(cmd), proc.returncode, out, err)


def wait_until(
    condition: Callable[[], bool],
    what: str,
    timeout_s: float = WAIT_S,
    watched: Watched | Iterable[Watched] | None = None,
) -> None:
    """Poll ``condition`` until true; AssertionError (with the logs of ``watched``) after
    ``timeout_s``, or as soon as a watched process died."""
    if watched is None:
        targets: list[Watched] = []
    elif isinstance(watched, Iterable):
        targets = list(watched)
    else:
        targets = [watched]

    def check() -> None:
        for target in targets:
            target.check_alive()

    _wait.wait_until(
        condition,
        lambda: what + "".join(f"\n{t.diagnostics()}" for t in targets),
        timeout_s,
        POLL_S,
        check=check,
    )


__all__ = [
    "EXIT_DEADLINE_S",
    "HOST",
    "SMALL_STORE",
    "ProcessCluster",
    "RocketqProcess",
    "ServeProcess",
    "child_env",
    "free_port",
    "run_captured",
    "small_store_config",
    "wait_until",
    "write_broker_conf",
    "write_conf",
]
