"""The process harness itself (``tests/_support/procs.py``): the brokers it starts have small
stores, a server that dies is reported with its log instead of a timeout, and ``ProcessCluster``
brokers get the same small store through their ``broker.conf``."""

from __future__ import annotations

import pathlib
import subprocess
import time

import pytest
from procs import EXIT_DEADLINE_S, SMALL_STORE, ProcessCluster, ServeProcess, run_captured, wait_until

from rocketq.client.admin import Admin, wait_for_route

pytestmark = pytest.mark.slow  # starts and kills rocketq processes


def segment_sizes(store_dir: pathlib.Path) -> set[int]:
    return {p.stat().st_size for p in (store_dir / "commitlog").iterdir() if p.name.isdigit()}


def test_serve_process_gives_the_broker_small_segments(tmp_path: pathlib.Path) -> None:
    serve = ServeProcess(tmp_path)
    try:
        serve.start()
        with Admin(serve.namesrv_addr, timeout_ms=10_000) as admin:
            admin.create_topic("SmallT", 1, 1, broker_addr=serve.broker_addr)
            wait_for_route(admin, "SmallT", 20.0)
            sent = admin.send_message("SmallT", "x" * 1000)
        assert sent.queue_offset == 0
        assert segment_sizes(serve.store_dir) == {int(SMALL_STORE["mappedFileSizeCommitLog"])}
        assert serve.terminate() == 0
        # a restart on the same data reads the conf again and finds the message
        serve.start()
        with Admin(serve.namesrv_addr, timeout_ms=10_000) as admin:
            [msg] = admin.consume_message("SmallT", 0, 0, 8)
        assert msg.body == b"x" * 1000
    finally:
        serve.close()


def test_serve_process_reports_a_server_that_died_with_its_log(tmp_path: pathlib.Path) -> None:
    serve = ServeProcess(tmp_path, broker_conf={"flushDiskType": "SOMETIMES"})
    began = time.monotonic()
    with pytest.raises(AssertionError, match=r"(?s)exited with [1-9].*flushDiskType"):
        serve.start(timeout_s=60.0)
    assert time.monotonic() - began < 30.0, "the dead server was noticed only at the deadline"
    assert not serve.running


def test_process_cluster_brokers_get_the_small_store(tmp_path: pathlib.Path) -> None:
    cluster = ProcessCluster(tmp_path, ("broker-a",), cluster="ProcsCluster")
    try:
        cluster.start()
        cluster.create_topic("ClusterT", 2)
        with Admin(cluster.namesrv_addr, timeout_ms=10_000) as admin:
            admin.send_message("ClusterT", b"y")
        assert segment_sizes(cluster.store_dir("broker-a")) == {int(SMALL_STORE["mappedFileSizeCommitLog"])}
    finally:
        cluster.close()


def _gone(pid: int) -> bool:
    """No such process, or a zombie left for init to reap."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_run_captured_kills_a_grandchild_that_holds_the_pipes() -> None:
    """On the deadline the command's own children are killed too (``subprocess.run`` kills only
    the command), and the grandchild's open end of stdout does not hold the caller up."""
    script = "sleep 300 & echo $!; wait"
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as caught:
        run_captured(["sh", "-c", script], 1.0)
    assert time.monotonic() - started < EXIT_DEADLINE_S
    out = caught.value.stdout
    assert isinstance(out, str)
    grandchild = int(out.split()[0])
    wait_until(lambda: _gone(grandchild), f"the grandchild {grandchild} ends", 10.0)


def test_run_captured_returns_the_output_and_exit_code() -> None:
    done = run_captured(["sh", "-c", "echo out; echo err >&2; exit 3"], 30.0)
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")
