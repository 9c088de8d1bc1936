"""A broker in DLedger mode (a group of one) as a real process: sends and consumes through the
client, records inside entry store entries, SIGKILL and restart, ``admin clusterList`` roles."""

from __future__ import annotations

import json
import pathlib
import struct
import subprocess
import sys
from collections.abc import Iterator

import pytest
from procs import ProcessCluster, RocketqProcess, child_env

from _support.wait import wait_until
from rocketq.client import Admin, Message, Producer, SendStatus
from rocketq.errors import RocketqError
from rocketq.ha import entry_format as fmt
from rocketq.protocol import record as rec

TOPIC = "DLedgerT"
QUEUES = 2
DLEDGER = {
    "enableDLegerCommitLog": "true",
    "dLegerGroup": "broker-d",
    "dLegerPeers": "n0-127.0.0.1:40911",
    "dLegerSelfId": "n0",
    "mappedFileSizeCommitLog": str(64 * 1024),
}


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[ProcessCluster]:
    c = ProcessCluster(tmp_path, ("broker-d",), cluster="DLedgerCluster")
    try:
        c.start_namesrv()
        c.start_broker("broker-d", **DLEDGER)
        c.wait_ready()
        with Admin(c.namesrv_addr) as admin:  # a DLedger broker registers as a slave until it leads

            def master() -> bool:
                group = admin.cluster_info().broker_addr_table.get("broker-d")
                return group is not None and 0 in group.broker_addrs

            c.wait_until(master, "broker-d registered as master (brokerId 0)")
        c.create_topic(TOPIC, QUEUES)
        yield c
    finally:
        c.close()


def stored(admin: Admin) -> list[bytes]:
    out: list[bytes] = []
    for qid in range(QUEUES):
        offset = 0
        while batch := admin.consume_message(TOPIC, qid, offset, 256, broker_name="broker-d"):
            out.extend(m.body for m in batch)
            offset = batch[-1].queue_offset + 1
    return out


def entry_records(store_dir: pathlib.Path) -> list[tuple[int, bytes]]:
    """(PHYSICALOFFSET field, body) of every record, read from the entry store's data files with
    the entry layout: the record sits at pos + 48 and names that offset."""
    out = []
    for path in sorted((store_dir / "dledger-n0" / "data").iterdir()):
        data = path.read_bytes()
        base = int(path.name)
        pos = 0
        while pos + fmt.BODY_OFFSET <= len(data):
            h = fmt.decode_header(data, pos)
            if h.magic != fmt.MAGIC_NORMAL:
                break
            assert h.pos == base + pos
            record = data[pos + fmt.BODY_OFFSET : pos + h.size]
            view = rec.decode_record(record, 0, check_crc=True)
            (phys,) = struct.unpack_from(">q", record, 28)
            assert phys == h.pos + fmt.BODY_OFFSET
            out.append((phys, rec.view_to_message(view).body))
            pos += h.size
    return out


def admin_cli(c: ProcessCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rocketq.cli", "admin", *args, "-n", c.namesrv_addr],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=60,
        check=False,
    )


def cluster_list_json(c: ProcessCluster) -> list[dict[str, object]]:
    done = admin_cli(c, "clusterList", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert isinstance(doc, list)
    return doc


@pytest.mark.slow  # a DLedger group of broker processes (about 15 s here)
def test_send_consume_and_records_inside_entries(cluster: ProcessCluster) -> None:
    with Producer("DLedgerPG", namesrv_addr=cluster.namesrv_addr) as p:
        results = [p.send(Message(TOPIC, f"m-{i}".encode())) for i in range(300)]
    assert all(r.status is SendStatus.SEND_OK for r in results)
    with Admin(cluster.namesrv_addr) as admin:
        cluster.wait_until(lambda: len(stored(admin)) >= 300, "300 messages dispatched")
        assert sorted(stored(admin)) == sorted(f"m-{i}".encode() for i in range(300))
    records = entry_records(cluster.store_dir("broker-d"))
    assert [b for _, b in records] == [f"m-{i}".encode() for i in range(300)]
    # the offset message ids name the entries' body offsets
    assert [int(r.offset_msg_id[-16:], 16) for r in results] == [phys for phys, _ in records]

    def rows_of_d() -> list[dict[str, object]]:
        return [r for r in cluster_list_json(cluster) if r.get("broker_name") == "broker-d"]

    # registered as slave first, then as master: the master entry replaces the slave one
    cluster.wait_until(
        lambda: [r["broker_id"] for r in rows_of_d()] == [0], "broker-d listed once, as master"
    )
    rows = rows_of_d()
    assert (rows[0]["dledger_role"], rows[0]["dledger_term"]) == ("LEADER", "1")
    table = admin_cli(cluster, "clusterList").stdout
    assert "#DLedger Role" in table and "LEADER" in table
    # a group of one can only hand leadership to itself
    assert admin_cli(cluster, "dledgerLeadershipTransfer", "-b", "broker-d", "-t", "n0").returncode == 0
    refused = admin_cli(cluster, "dledgerLeadershipTransfer", "-b", "broker-d", "-t", "n1")
    assert refused.returncode == 1 and "leadership transfer to n1 refused or failed" in refused.stderr


@pytest.mark.slow  # kills a broker process
@pytest.mark.parametrize("flush", ["SYNC_FLUSH", "ASYNC_FLUSH"])
def test_sigkill_then_restart_keeps_every_acknowledged_message(cluster: ProcessCluster, flush: str) -> None:
    if flush == "ASYNC_FLUSH":  # acknowledged once written (page cache): kill -9 keeps it too
        cluster.kill("broker-d")
        cluster.start_broker("broker-d", **DLEDGER, flushDiskType=flush)
        cluster.wait_ready()
    with Producer("DLedgerKillPG", namesrv_addr=cluster.namesrv_addr) as p:
        sent = [(f"k-{i}".encode(), p.send(Message(TOPIC, f"k-{i}".encode()))) for i in range(120)]
    acked = [body for body, r in sent if r.status is SendStatus.SEND_OK]
    assert len(acked) == 120
    cluster.kill("broker-d")
    cluster.start_broker("broker-d", **DLEDGER, flushDiskType=flush)
    cluster.wait_ready()
    with Admin(cluster.namesrv_addr) as admin:
        cluster.wait_until(lambda: len(stored(admin)) >= len(acked), "messages readable after restart")
        assert sorted(stored(admin)) == sorted(acked)
    with Producer("DLedgerKillPG2", namesrv_addr=cluster.namesrv_addr) as p:
        assert p.send(Message(TOPIC, b"after")).status is SendStatus.SEND_OK


@pytest.mark.slow  # rocketq serve --dledger processes (about 13 s here)
def test_serve_dledger_one_writes_the_confs_and_serves(tmp_path: pathlib.Path) -> None:
    data = tmp_path / "data"
    base = tmp_path / "base.conf"
    base.write_text("mappedFileSizeCommitLog=65536\nbrokerName=ignored\n")
    args = ["serve", "--dledger", "1", "--data-dir", str(data), "--namesrv-port", "0", "--broker-port", "0"]
    args += ["-c", str(base)]
    proc = RocketqProcess("serve-dledger", args, tmp_path / "logs")
    try:
        endpoints = proc.wait_banner(["name server", "broker"])
        conf = (data / "broker-n0.conf").read_text()
        assert "enableDLegerCommitLog=true" in conf and "dLegerSelfId=n0" in conf
        assert "mappedFileSizeCommitLog=65536" in conf and "brokerName=broker-a" in conf
        namesrv = endpoints["name server"]
        with Admin(namesrv) as admin:
            admin.create_topic(TOPIC, QUEUES, QUEUES, cluster="DefaultCluster")
            wait_until(lambda: _routed(admin), "the topic's route")
        with Producer("ServeDLedgerPG", namesrv_addr=namesrv) as p:
            assert p.send(Message(TOPIC, b"hello")).status is SendStatus.SEND_OK
        assert (data / "broker-a-n0" / "dledger-n0" / "data").is_dir()
    finally:
        assert proc.terminate() == 0, proc.log_text()


def _routed(admin: Admin) -> bool:
    try:
        admin.topic_route(TOPIC)
    except RocketqError:
        return False
    return True


def routed_to_master(admin: Admin) -> bool:
    """The topic's route names a master (brokerId 0): sends have somewhere to go."""
    try:
        route = admin.topic_route(TOPIC)
    except RocketqError:  # TopicNotExist until a member registers the topic
        return False
    return any(0 in b.broker_addrs for b in route.broker_datas)


def test_a_plain_broker_switched_to_dledger_keeps_its_messages(tmp_path: pathlib.Path) -> None:
    c = ProcessCluster(tmp_path, ("broker-d",), cluster="AdoptCluster")
    try:
        c.start_namesrv()
        c.start_broker("broker-d", mappedFileSizeCommitLog=str(64 * 1024))  # plain CommitLog
        c.wait_ready()
        c.create_topic(TOPIC, QUEUES)
        with Producer("AdoptPG", namesrv_addr=c.namesrv_addr) as p:
            old = [p.send(Message(TOPIC, f"old-{i}".encode())) for i in range(50)]
        assert c.processes["broker-d"].terminate() == 0
        c.start_broker("broker-d", **DLEDGER)
        c.wait_ready()
        with Admin(c.namesrv_addr) as admin:  # the member is master once elected, then registers so
            c.wait_until(lambda: routed_to_master(admin), "the DLedger member registered as master")
        with Producer("AdoptPG2", namesrv_addr=c.namesrv_addr) as p:
            new = [p.send(Message(TOPIC, f"new-{i}".encode())) for i in range(30)]
        old_offsets = [int(r.offset_msg_id[-16:], 16) for r in old]
        new_offsets = [int(r.offset_msg_id[-16:], 16) for r in new]
        assert min(new_offsets) > max(old_offsets) and min(new_offsets) % (64 * 1024) == fmt.BODY_OFFSET
        want = sorted([f"old-{i}".encode() for i in range(50)] + [f"new-{i}".encode() for i in range(30)])
        with Admin(c.namesrv_addr) as admin:
            c.wait_until(lambda: len(stored(admin)) >= 80, "old and new messages consumable")
            assert sorted(stored(admin)) == want
            msg = admin.query_msg_by_id(old[0].offset_msg_id)
            assert msg.body == b"old-0"
    finally:
        c.close()
