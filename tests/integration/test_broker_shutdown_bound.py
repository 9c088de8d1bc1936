"""A broker process stops within a bounded time of SIGTERM, whatever it waits for.

Real ``rocketq namesrv`` and ``rocketq broker`` processes. A name server that stopped answering
(SIGSTOP: the kernel still accepts its connections) used to hold a broker's shutdown for the
whole ``registerBrokerTimeoutMills`` of its unregistration; the shutdown now gives it at most
``SHUTDOWN_UNREGISTER_TIMEOUT_S`` and exits cleanly (code 0, abort file removed).
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest
from procs import ProcessCluster

from rocketq.broker.server import SHUTDOWN_UNREGISTER_TIMEOUT_S

#: What a shutdown with nothing else to wait for may take beyond the unregistration's bound.
SLACK_S = 10.0


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[ProcessCluster]:
    c = ProcessCluster(tmp_path, ("broker-a",), cluster="ShutdownCluster")
    try:
        yield c
    finally:
        namesrv = c.processes.get("namesrv")
        if namesrv is not None and namesrv.proc is not None and namesrv.proc.poll() is None:
            os.kill(namesrv.proc.pid, signal.SIGCONT)
        c.close()


def test_sigterm_does_not_wait_out_a_long_unregistration_from_a_stopped_name_server(
    cluster: ProcessCluster,
) -> None:
    cluster.start_namesrv()
    cluster.start_broker("broker-a", registerBrokerTimeoutMills="60000")
    cluster.wait_ready()
    namesrv, broker = cluster.processes["namesrv"].proc, cluster.processes["broker-a"].proc
    assert namesrv is not None and broker is not None
    os.kill(namesrv.pid, signal.SIGSTOP)
    began = time.monotonic()
    broker.send_signal(signal.SIGTERM)
    bound = SHUTDOWN_UNREGISTER_TIMEOUT_S + SLACK_S
    try:
        code = broker.wait(bound)
    except subprocess.TimeoutExpired:  # before: the unregistration's whole 60 s
        pytest.fail(f"the broker did not exit within {bound:g} s of SIGTERM:\n{cluster.diagnostics()}")
    took = time.monotonic() - began
    log = cluster.processes["broker-a"].log_text(None)
    assert code == 0, log
    assert took >= SHUTDOWN_UNREGISTER_TIMEOUT_S - 0.5, f"{took:.2f} s: the name server was not waited for"
    assert "unregistering from name server" in log and "failed" in log, log
    assert not (cluster.store_dir("broker-a") / "abort").exists()  # a clean shutdown all the same
