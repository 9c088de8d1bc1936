"""Run the npm package ``ali-ons`` against a real ``rocketq serve`` process.

* :func:`install_ali_ons`: installs ``ali-ons@3.12.0`` with npm once per machine into
  ``<tempdir>/rocketq-interop-npm/ali-ons-3.12.0`` (or ``$ROCKETQ_INTEROP_NPM_DIR``) and reuses it
  afterwards (a lock file serialises concurrent test runs).
* :class:`Interop`: a fresh ``rocketq serve`` (name server + broker on OS-assigned free ports,
  data in a tmp dir), plus helpers to create topics, run the Node producer script to completion
  and start consumer scripts. :meth:`Interop.close` terminates every process it started.

The Node scripts talk JSON lines on stdout (see the header of each script); stderr goes to files
in the work dir and its tail is shown when a wait times out.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pathlib
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from npm_install import npm_install

from _support.procs import ServeProcess
from _support.requests import create_topic_fields
from _support.wait import wait_until
from rocketq.acl.signature import AclClientRpcHook
from rocketq.remoting import RemotingClient, RequestCode, create_request

ALI_ONS_VERSION = "3.12.0"
HERE = pathlib.Path(__file__).resolve().parent
PRODUCER_JS = HERE / "ali_ons_producer.js"
CONSUMER_JS = HERE / "ali_ons_consumer.js"

NPM_INSTALL_TIMEOUT_S = 300.0
SERVER_START_TIMEOUT_S = 30.0
PRODUCER_TIMEOUT_S = 60.0
CLOSE_TIMEOUT_S = 30.0
ROUTE_TIMEOUT_S = 15.0

Event = dict[str, Any]


# -- ali-ons installation ---------------------------------------------------------------------
def _npm_dir() -> pathlib.Path:
    override = os.environ.get("ROCKETQ_INTEROP_NPM_DIR")
    if override:
        return pathlib.Path(override)
    return pathlib.Path(tempfile.gettempdir()) / "rocketq-interop-npm" / f"ali-ons-{ALI_ONS_VERSION}"


def install_ali_ons(npm: str) -> str:
    """``npm install`` ali-ons unless a complete install is already there; returns the path of
    the ``node_modules/ali-ons`` directory."""
    return npm_install(npm, "ali-ons", ALI_ONS_VERSION, _npm_dir(), NPM_INSTALL_TIMEOUT_S)


# -- processes --------------------------------------------------------------------------------
def _stop(proc: subprocess.Popen[str], timeout_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if the process has not exited within ``timeout_s``."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout_s)


def _tail(path: pathlib.Path, limit: int = 4000) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return text[-limit:]


class NodeScript:
    """A running Node script whose stdout JSON lines are collected by a reader thread."""

    def __init__(self, name: str, cmd: list[str], env: dict[str, str], log_dir: pathlib.Path) -> None:
        self.name = name
        self.stderr_path = log_dir / f"{name}.stderr.log"
        self._stderr = open(self.stderr_path, "w", encoding="utf-8")  # noqa: SIM115
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env=env,
            cwd=str(log_dir),
        )
        self.events: list[Event] = []
        self.other_lines: list[str] = []
        self._cond = threading.Condition()
        self._eof = False
        self._reader = threading.Thread(target=self._read, name=f"{name}-stdout", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.strip()
            if not line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                event = None
            with self._cond:
                if isinstance(event, dict):
                    self.events.append(event)
                else:
                    self.other_lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def snapshot(self) -> list[Event]:
        with self._cond:
            return list(self.events)

    def of(self, kind: str) -> list[Event]:
        return [e for e in self.snapshot() if e.get("event") == kind]

    def diagnostics(self) -> str:
        events = self.snapshot()
        shown = "\n".join(json.dumps(e)[:400] for e in events[-25:])
        return (
            f"--- {self.name}: exit={self.proc.poll()} events={len(events)} (last 25):\n{shown}\n"
            f"--- {self.name} stderr (tail):\n{_tail(self.stderr_path)}"
        )

    def wait_until(
        self, condition: Callable[[list[Event]], bool], timeout_s: float, what: str, extra: str = ""
    ) -> list[Event]:
        """Block until ``condition(events)`` holds; fail after ``timeout_s`` or if the script ends
        first. Returns the events seen so far."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                events = list(self.events)
                if condition(events):
                    return events
                remaining = deadline - time.monotonic()
                if self._eof or remaining <= 0:
                    break
                # conditions may also look at other scripts, so re-check now and then
                self._cond.wait(min(remaining, 0.25))
        reason = "the script ended" if self._eof else f"{timeout_s:g} s passed"
        raise AssertionError(f"{self.name}: {reason} before {what}\n{self.diagnostics()}\n{extra}")

    def wait_exit(self, timeout_s: float) -> int:
        try:
            rc = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.name} did not exit within {timeout_s:g} s\n{self.diagnostics()}"
            ) from None
        self._reader.join(timeout_s)
        return rc

    def stop(self) -> None:
        _stop(self.proc, 5.0)
        self._reader.join(5.0)
        for stream in (self.proc.stdin, self.proc.stdout, self._stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


class Consumer(NodeScript):
    """``ali_ons_consumer.js``: one clustering-mode ali-ons push consumer."""

    def messages(self) -> list[Event]:
        return self.of("message")

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        self.wait_until(lambda evs: any(e["event"] == "ready" for e in evs), timeout_s, "it was ready")

    def queue_ids(self) -> set[int] | None:
        """The queues of the subscribed topic it holds now (None before its first allocation)."""
        allocations = self.of("queues")
        return set(allocations[-1]["queueIds"]) if allocations else None

    def unexpected_errors(self) -> list[Event]:
        return [e for e in self.of("error") if not e.get("intentional")]

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Ask the consumer to close (commit offsets, unregister) and wait for the process to end."""
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError):
            self.proc.stdin.write("close\n")
            self.proc.stdin.flush()
        rc = self.wait_exit(timeout_s)
        assert rc == 0 and self.of("closed"), f"{self.name} did not close cleanly\n{self.diagnostics()}"


class Interop:
    """One ``rocketq serve`` process and the Node scripts of one test."""

    def __init__(
        self,
        node: str,
        ali_ons_module: str,
        workdir: pathlib.Path,
        *,
        broker_conf: dict[str, str] | None = None,
        acl_keys: tuple[str, str] | None = None,
    ) -> None:
        """``broker_conf``: extra broker.conf keys; ``acl_keys``: the (accessKey, secretKey) the
        harness's own admin requests are signed with, and the default of the Node scripts."""
        self.node = node
        self.acl_keys = acl_keys
        self.ali_ons_module = ali_ons_module
        self.workdir = workdir
        self.scripts: list[NodeScript] = []
        self.serve = ServeProcess(workdir, broker_conf=broker_conf)
        self.serve.start(SERVER_START_TIMEOUT_S)
        self.namesrv_addr, self.broker_addr = self.serve.namesrv_addr, self.serve.broker_addr

    # -- admin through rocketq's own remoting client (what `mqadmin updateTopic` does) -------
    def _call(self, addr: str, code: int, fields: dict[str, object]) -> tuple[int, dict[str, str], bytes]:
        async def call() -> tuple[int, dict[str, str], bytes]:
            hook = AclClientRpcHook(*self.acl_keys) if self.acl_keys else None
            async with RemotingClient(rpc_hook=hook) as client:
                r = await client.invoke(addr, create_request(code, fields), 10.0)
                return r.code, r.ext_fields, r.body

        return asyncio.run(call())

    def create_topic(self, topic: str, queues: int = 4) -> None:
        """UPDATE_AND_CREATE_TOPIC on the broker, then wait for the name server to route it."""
        code, _, _ = self._call(
            self.broker_addr, RequestCode.UPDATE_AND_CREATE_TOPIC, create_topic_fields(topic, queues=queues)
        )
        assert code == 0, f"creating topic {topic} failed with code {code}"

        def routed() -> bool:
            code, _, body = self._call(
                self.namesrv_addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}
            )
            return code == 0 and any(q.get("readQueueNums") == queues for q in json.loads(body)["queueDatas"])

        wait_until(routed, f"the name server to route {topic} with {queues} queues", ROUTE_TIMEOUT_S, 0.05)

    def max_offset(self, topic: str, queue_id: int) -> int:
        code, ext, _ = self._call(
            self.broker_addr, RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": queue_id}
        )
        assert code == 0
        return int(ext["offset"])

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        code, ext, _ = self._call(
            self.broker_addr,
            RequestCode.QUERY_CONSUMER_OFFSET,
            {"consumerGroup": group, "topic": topic, "queueId": queue_id, "setZeroIfNotFound": False},
        )
        return int(ext["offset"]) if code == 0 else None

    # -- Node scripts -------------------------------------------------------------------------
    def _env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env["ALI_ONS_MODULE"] = self.ali_ons_module
        env.update(extra or {})
        return env

    def _spawn(
        self,
        cls: type[NodeScript],
        name: str,
        script: pathlib.Path,
        config: dict[str, Any],
        env: dict[str, str] | None = None,
    ) -> Any:
        script_obj = cls(name, [self.node, str(script), json.dumps(config)], self._env(env), self.workdir)
        self.scripts.append(script_obj)
        return script_obj

    def _keys(self, acl_keys: tuple[str, str] | None) -> dict[str, str]:
        keys = acl_keys or self.acl_keys
        return {"accessKeyId": keys[0], "accessKeySecret": keys[1]} if keys else {}

    def run_producer(
        self,
        topic: str,
        messages: list[dict[str, Any]],
        group: str = "interop_producer",
        acl_keys: tuple[str, str] | None = None,
    ) -> NodeScript:
        """Run the producer script to its end (signing with ``acl_keys``, default the harness's)."""
        name = f"producer-{sum(1 for s in self.scripts if s.name.startswith('producer')) + 1}"
        config = {"nameSrv": self.namesrv_addr, "group": group, "topic": topic, "messages": messages}
        producer: NodeScript = self._spawn(NodeScript, name, PRODUCER_JS, {**config, **self._keys(acl_keys)})
        producer.wait_exit(PRODUCER_TIMEOUT_S)
        return producer

    def produce(
        self,
        topic: str,
        messages: list[dict[str, Any]],
        group: str = "interop_producer",
        acl_keys: tuple[str, str] | None = None,
    ) -> list[Event]:
        """Run the producer script to completion; returns its ``sent`` events, in order."""
        producer = self.run_producer(topic, messages, group, acl_keys)
        rc = producer.proc.returncode
        sent = producer.of("sent")
        assert rc == 0 and producer.of("done"), f"the producer failed\n{producer.diagnostics()}"
        assert len(sent) == len(messages)
        assert all(s["sendStatus"] == "SEND_OK" for s in sent), sent
        return sent

    def start_consumer(
        self,
        name: str,
        topic: str,
        group: str,
        expression: str,
        *,
        fail_once_marker: str | None = None,
        env: dict[str, str] | None = None,
        acl_keys: tuple[str, str] | None = None,
    ) -> Consumer:
        """Start ``ali_ons_consumer.js``. ali-ons' timers run faster than their defaults (rebalance
        10 s, offset commit 5 s, heartbeat and route refresh 30 s) so that a test sees several
        rounds of each."""
        config: dict[str, Any] = {
            "nameSrv": self.namesrv_addr,
            "group": group,
            "topic": topic,
            "expression": expression,
            "rebalanceInterval": 1000,
            "persistConsumerOffsetInterval": 1000,
            "heartbeatBrokerInterval": 2000,
            "pollNameServerInteval": 2000,
            **self._keys(acl_keys),
        }
        if fail_once_marker is not None:
            config["failOnceMarker"] = fail_once_marker
        consumer: Consumer = self._spawn(Consumer, name, CONSUMER_JS, config, env)
        return consumer

    def server_log(self) -> str:
        return f"--- rocketq serve log (tail):\n{self.serve.log_text()}"

    def close(self) -> None:
        for script in self.scripts:
            script.stop()
        self.serve.stop()
