"""Run the official RocketMQ 5 Python SDK (``rocketmq-python-client``) against ``rocketq serve``.

* :func:`install_python_client`: a venv with ``rocketmq-python-client`` once per machine in
  ``<tempdir>/rocketq-interop-venv`` (or ``$ROCKETQ_INTEROP_VENV``), shared by later runs (a lock
  file serialises concurrent runs). The SDK must live in its own process: its generated stubs
  and ours cannot share one protobuf descriptor pool.
* :func:`install_node_client`: ``npm install rocketmq-client-nodejs`` once per machine into
  ``<tempdir>/rocketq-interop-npm/rocketmq-client-nodejs-<version>`` (or
  ``$ROCKETQ_INTEROP_NODE_DIR``), under a lock file as well.
* :class:`GrpcInterop`: a ``rocketq serve`` process (name server, broker and gRPC endpoint on
  OS-assigned ports, data in a tmp dir, optional ``broker.conf`` properties) that can be
  restarted on the same data; helpers to create typed topics and groups and to run
  ``grpc_py_client.py`` / ``grpc_node_client.js`` to completion (JSON lines, every wait
  bounded, HOME set to the work dir).
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from typing import Any

import pytest
from npm_install import npm_install

from _support.procs import ServeProcess, run_captured
from rocketq.client.admin import Admin
from rocketq.remoting import RemotingClient, RequestCode, create_request

PY_CLIENT_VERSION = "5.1.2"
NODE_CLIENT_VERSION = "1.0.8"
NODE_CLIENT_PACKAGE = "rocketmq-client-nodejs"
HERE = pathlib.Path(__file__).resolve().parent
CLIENT_SCRIPT = HERE / "grpc_py_client.py"
NODE_CLIENT_SCRIPT = HERE / "grpc_node_client.js"
INSTALL_TIMEOUT_S = 600.0
SERVER_START_TIMEOUT_S = 30.0

Event = dict[str, Any]


def _venv_dir() -> pathlib.Path:
    override = os.environ.get("ROCKETQ_INTEROP_VENV")
    if override:
        return pathlib.Path(override)
    return pathlib.Path(tempfile.gettempdir()) / "rocketq-interop-venv"


def install_python_client() -> str:
    """The python of a venv holding ``rocketmq-python-client``; skips the test if it cannot be
    installed (no package index reachable)."""
    target = _venv_dir()
    python = target / "bin" / "python"
    marker = target / f".installed-{PY_CLIENT_VERSION}"
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists() and python.exists():
            return str(python)
        probe = (
            run_captured(
                [str(python), "-c", "import rocketmq.v5.util.version as v; print(v.SDK_VERSION)"], 60.0
            )
            if python.exists()
            else None
        )
        if probe is not None and probe.returncode == 0 and probe.stdout.strip() == PY_CLIENT_VERSION:
            marker.touch()
            return str(python)
        steps = [
            [sys.executable, "-m", "venv", str(target)],
            [str(python), "-m", "pip", "install", "-q", f"rocketmq-python-client=={PY_CLIENT_VERSION}"],
        ]
        for cmd in steps:
            try:
                done = run_captured(cmd, INSTALL_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pytest.fail(f"`{' '.join(cmd)}` took longer than {INSTALL_TIMEOUT_S:g} s")
            if done.returncode != 0:
                pytest.fail(f"cannot install rocketmq-python-client: {done.stderr[-2000:]}")
        marker.touch()
        return str(python)


def _node_dir() -> pathlib.Path:
    override = os.environ.get("ROCKETQ_INTEROP_NODE_DIR")
    if override:
        return pathlib.Path(override)
    base = pathlib.Path(tempfile.gettempdir()) / "rocketq-interop-npm"
    return base / f"{NODE_CLIENT_PACKAGE}-{NODE_CLIENT_VERSION}"


def install_node_client(npm: str) -> str:
    """``npm install rocketmq-client-nodejs`` unless a complete install is there; the directory
    of the installed package (what the Node script ``require``s)."""
    return npm_install(npm, NODE_CLIENT_PACKAGE, NODE_CLIENT_VERSION, _node_dir(), INSTALL_TIMEOUT_S)


class GrpcInterop:
    """One ``rocketq serve`` (restartable on the same data) and the SDK runs of one test."""

    def __init__(
        self,
        client_python: str | None,
        workdir: pathlib.Path,
        *,
        broker_conf: dict[str, str] | None = None,
        node: tuple[str, str] | None = None,
    ) -> None:
        """``client_python``: the SDK venv's python (None: Node runs only); ``broker_conf``:
        broker.conf properties for ``rocketq serve -c``; ``node``: (node binary, package dir)."""
        self.client_python = client_python
        self.node = node
        self.workdir = workdir
        self.home = workdir / "home"
        self.home.mkdir(exist_ok=True)
        self.serve = ServeProcess(workdir, broker_conf=broker_conf, grpc=True)
        self.start()

    # -- the server ---------------------------------------------------------------------------
    def start(self) -> None:
        self.serve.start(SERVER_START_TIMEOUT_S)
        self.namesrv_addr = self.serve.namesrv_addr
        self.broker_addr = self.serve.broker_addr
        self.grpc_addr = self.serve.grpc_addr

    def stop(self) -> None:
        self.serve.stop()

    def restart(self) -> None:
        self.stop()
        self.start()

    def alive(self) -> bool:
        return self.serve.running

    # -- metadata -----------------------------------------------------------------------------
    def create_topic(self, topic: str, message_type: str | None = None, queues: int = 4) -> None:
        attrs = f"+message.type={message_type}" if message_type else None
        with Admin(self.namesrv_addr, timeout_ms=10_000) as admin:
            admin.create_topic(topic, queues, queues, 6, broker_addr=self.broker_addr, attributes=attrs)

    def create_group(self, group: str, *, retry_max_times: int = 16, orderly: bool = False) -> None:
        body = json.dumps(
            {"groupName": group, "retryMaxTimes": retry_max_times, "consumeMessageOrderly": orderly}
        ).encode()

        async def call() -> int:
            async with RemotingClient() as client:
                request = create_request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body)
                return (await client.invoke(self.broker_addr, request, 10.0)).code

        assert asyncio.run(call()) == 0

    def query_by_key(self, topic: str, key: str) -> list[Any]:
        with Admin(self.namesrv_addr, timeout_ms=10_000) as admin:
            return list(admin.query_msg_by_key(topic, key))

    # -- SDK runs -----------------------------------------------------------------------------
    def run_client(self, args: list[str], timeout_s: float = 120.0) -> list[Event]:
        """Run ``grpc_py_client.py ARGS`` to completion; its JSON events."""
        assert self.client_python is not None, "this environment has no Python SDK"
        env = {**os.environ, "HOME": str(self.home), "PYTHONPATH": ""}
        return self._run([self.client_python, str(CLIENT_SCRIPT), *args], env, timeout_s)

    def run_node(self, args: list[str], timeout_s: float = 120.0) -> list[Event]:
        """Run ``grpc_node_client.js ARGS`` to completion; its JSON events."""
        assert self.node is not None, "this environment has no Node SDK"
        node, package_dir = self.node
        env = {**os.environ, "HOME": str(self.home), "ROCKETQ_NODE_CLIENT_DIR": package_dir}
        return self._run([node, str(NODE_CLIENT_SCRIPT), *args], env, timeout_s)

    def _run(self, cmd: list[str], env: dict[str, str], timeout_s: float) -> list[Event]:
        args = cmd[2:]
        try:
            done = run_captured(cmd, timeout_s, env=env, cwd=self.workdir)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"{args[0]} did not finish in {timeout_s:g} s: {exc.stdout!r}") from None
        events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        assert done.returncode == 0, (
            f"{args} failed ({done.returncode}): {done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
        return events

    def produce(
        self, spec: list[dict[str, Any]], timeout_s: float = 120.0, check_wait_s: float = 60.0
    ) -> list[Event]:
        path = self.workdir / f"spec-{time.monotonic_ns()}.json"
        path.write_text(json.dumps(spec), encoding="utf-8")
        return self.run_client(["produce", self.grpc_addr, str(path), str(check_wait_s)], timeout_s)

    def simple(self, group: str, topic: str, count: int, mode: str = "ack", seconds: float = 60.0,
               expression: str = "TAG:*") -> list[Event]:  # fmt: skip
        args = ["simple", self.grpc_addr, group, topic, str(count), mode, str(seconds), expression]
        return self.run_client(args, seconds + 60)

    def push(
        self, group: str, topic: str, count: int, mode: str = "ok", seconds: float = 60.0
    ) -> list[Event]:
        return self.run_client(
            ["push", self.grpc_addr, group, topic, str(count), mode, str(seconds)], seconds + 60
        )

    def node_produce(
        self, spec: list[dict[str, Any]], timeout_s: float = 120.0, check_wait_s: float = 60.0
    ) -> list[Event]:
        path = self.workdir / f"spec-{time.monotonic_ns()}.json"
        path.write_text(json.dumps(spec), encoding="utf-8")
        return self.run_node(["produce", self.grpc_addr, str(path), str(check_wait_s)], timeout_s)

    def node_simple(
        self, group: str, topic: str, count: int, mode: str = "ack", seconds: float = 60.0
    ) -> list[Event]:
        args = ["simple", self.grpc_addr, group, topic, str(count), mode, str(seconds)]
        return self.run_node(args, seconds + 60)

    def close(self) -> None:
        self.stop()


def of(events: list[Event], kind: str) -> list[Event]:
    return [e for e in events if e["event"] == kind]
