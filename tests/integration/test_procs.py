"""The process harness itself (``tests/_support/procs.py``): the brokers it starts have small
stores, a server that dies is reported with its log instead of a timeout, and ``ProcessCluster``
brokers get the same small store through their ``broker.conf``."""

from __future__ import annotations

import pathlib
import time

import pytest
from procs import SMALL_STORE, ProcessCluster, ServeProcess

from rocketq.client.admin import Admin, wait_for_route


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
