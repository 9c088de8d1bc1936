"""The chaos workload and checker (rocketq.testing.chaos) against ``rocketq serve --dledger 3``:
about 10 s of producers and consumers, a SIGKILL of the leader in the middle, then the final
drain through the new master and from every replica's files, the brokers' Raft event logs and
the replicas compared, and no anomaly allowed.

Two workloads share the group: ``a`` sends to each queue through a selector with no SDK retries
(the workload resends a failed payload itself, each attempt recorded), half its producers
blocking; ``b`` sends with sharding keys and SDK retries. Election timeout 1000 ms, heartbeats
200 ms (what ``serve`` writes); the event logs are switched on by the ``-c`` conf. The brokers
log their PULL_OFFSET_MOVED answers and role changes at INFO (``ROCKETQ_LOG_INFO``), and a check
that fails prints those lines of every broker's log.
"""

from __future__ import annotations

import os
import pathlib
import re
import signal
import time

import pytest
from procs import RocketqProcess

from _support.wait import wait_until
from rocketq.cli import LOG_INFO_ENV
from rocketq.client import Admin
from rocketq.errors import RocketqError
from rocketq.ha.event_log import read_events
from rocketq.testing.chaos.check import check
from rocketq.testing.chaos.cluster import DIAGNOSTIC_LOGGERS
from rocketq.testing.chaos.history import Recorder, load_history
from rocketq.testing.chaos.replicas import read_replica, replica_drain
from rocketq.testing.chaos.workload import Workload, WorkloadConfig

BROKER = "broker-a"
QUEUES = 4
WAIT_S = 60.0
_BROKER_LINE = re.compile(r"^\s+broker\s+(\S+:\d+)\s+\(\S+, brokerId (\d+), (\w+), pid (\d+)\)", re.MULTILINE)


def _master(admin: Admin) -> str | None:
    try:
        group = admin.cluster_info().broker_addr_table.get(BROKER)
    except RocketqError:
        return None
    return None if group is None else group.broker_addrs.get(0)


def _routed(admin: Admin, topic: str) -> bool:
    try:
        return len(admin.topic_route(topic).queue_datas) > 0
    except RocketqError:
        return False


@pytest.mark.slow  # three broker processes, one killed: 30 to 45 s here
def test_workload_through_a_leader_kill_has_no_anomaly(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    # the brokers (children of serve) log their offset moves and role changes at INFO
    monkeypatch.setenv(LOG_INFO_ENV, ",".join(DIAGNOSTIC_LOGGERS))
    events_dir = tmp_path / "events"
    base = tmp_path / "base.conf"
    base.write_text(
        f"dLegerEventLogPath={events_dir}/raft-{{selfId}}.jsonl\nmappedFileSizeCommitLog={16 << 20}\n"
    )
    args = ["serve", "--dledger", "3", "--data-dir", str(data), "--namesrv-port", "0", "--broker-port", "0"]
    proc = RocketqProcess("serve-chaos", [*args, "--grpc-port", "-1", "-c", str(base)], tmp_path / "logs")
    recorder = Recorder(str(tmp_path / "history.jsonl"))
    try:
        namesrv = proc.wait_banner(["name server", "broker"], WAIT_S)["name server"]
        brokers = {a: (sid, int(pid)) for a, _b, sid, pid in _BROKER_LINE.findall(proc.log_text(None))}
        assert len(brokers) == 3, proc.log_text()
        with Admin(namesrv) as admin:
            wait_until(lambda: _master(admin), "a master", WAIT_S)
            for topic in ("ChaosA", "ChaosB"):
                admin.create_topic(topic, QUEUES, QUEUES, cluster="DefaultCluster")
                wait_until(lambda t=topic: _routed(admin, t), f"the route of {topic}", WAIT_S)
            first_master = _master(admin)
            assert first_master is not None
            a = Workload(
                WorkloadConfig(
                    namesrv, "ChaosA", producers=2, sync_producers=1, queues=QUEUES, resends=3,
                    group_prefix="ChaosA", prefix="a",
                ),
                recorder,
            )  # fmt: skip
            b = Workload(
                WorkloadConfig(
                    namesrv, "ChaosB", producers=2, sharding_keys=True, client_retries=2,
                    lite_pull_consumers=2, push_consumers=0, group_prefix="ChaosB", prefix="b",
                ),
                recorder,
            )  # fmt: skip
            a.start()
            b.start()
            try:

                def acked() -> int:
                    return sum(1 for op in recorder.ops() if op.type == "send" and op.phase == "ok")

                began = time.monotonic()
                wait_until(lambda: acked() >= 200, "200 sends acknowledged before the kill", WAIT_S)
                time.sleep(max(0.0, 4.0 - (time.monotonic() - began)))  # a few seconds of load
                os.kill(brokers[first_master][1], signal.SIGKILL)
                at_kill = acked()
                killed = time.monotonic()
                wait_until(lambda: acked() >= at_kill + 200, "200 sends acknowledged after the kill", WAIT_S)
                time.sleep(max(0.0, 6.0 - (time.monotonic() - killed)))
            finally:
                a.stop()
                b.stop()
            new_master = wait_until(
                lambda: (m := _master(admin)) is not None and m != first_master and m, "a new master", WAIT_S
            )
            assert new_master in brokers
        drained = a.drain() + b.drain()
        assert drained
    except BaseException:
        print(proc.diagnostics())
        for path in sorted(data.glob("broker-n*.log")):
            print(f"--- {path.name} ---\n{path.read_text(errors='replace')[-4000:]}")
        raise
    finally:
        recorder.close()
        proc.stop()  # the two survivors stop cleanly: their checkpoints hold their commit index

    ops = load_history(str(tmp_path / "history.jsonl"))
    assert ops == recorder.ops()
    stores = {sid: str(data / f"{BROKER}-{sid}") for sid, _pid in brokers.values()}
    for sid, root in stores.items():
        for topic in ("ChaosA", "ChaosB"):
            ops += replica_drain(root, sid, topic)
    dumps = [read_replica(root, sid, topics=("ChaosA", "ChaosB")) for sid, root in stores.items()]
    events = [e for path in sorted(events_dir.glob("raft-*.jsonl")) for e in read_events(str(path))]
    result = check(ops, events, dumps)
    print(result)
    told = {
        path.name: [
            line
            for line in path.read_text(errors="replace").splitlines()
            if "PULL_OFFSET_MOVED" in line or "DLedger" in line
        ]
        for path in sorted(data.glob("broker-n*.log"))
    }
    if not result.valid:
        for name, lines in told.items():
            print(f"--- {name}: offset moves and role changes ---\n" + "\n".join(lines[-300:]))
    # the brokers logged their role changes at INFO without -v (ROCKETQ_LOG_INFO)
    assert sum("DLedger leader of term" in line for lines in told.values() for line in lines) >= 2, told
    assert result.valid, str(result)
    assert result.stats["acked"] >= 400
    assert result.stats["leader_terms"] >= 2  # the kill made a new leader
    assert {e["node"] for e in events if e["ev"] == "start"} == set(stores)
    survivors = [d for d in dumps if d.node != brokers[first_master][0]]
    assert all(d.committed_index >= 0 for d in survivors)
    drains = {op.node for op in ops if op.type == "drain"}
    assert drains == {"leader", *stores}
    kinds = {(op.type, op.phase) for op in ops}
    assert {("send", "ok"), ("poll", "ok"), ("ack", "ok"), ("assign", "ok")} <= kinds
