"""``rocketq serve --dledger 3``: a name server and a Raft group of three broker processes.

Election timeout 1000 ms (randomized to [1000, 2000) ms), heartbeats every 200 ms: what
``serve`` writes into the confs. One group per test; each test kills nothing but the processes it
started (the serve process and the broker whose pid its banner prints).
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from procs import RocketqProcess, child_env, free_port, write_broker_conf

from _support.serve_group import ServeGroup, running
from _support.wait import collect_until, wait_until
from rocketq.client import Admin, LitePullConsumer, Message, MessageQueue, Producer, SendStatus
from rocketq.errors import ResponseCode, RocketqError
from rocketq.remoting import RemotingClient
from rocketq.remoting.codes import RequestCode
from rocketq.remoting.command import create_request

TOPIC = "GroupT"
QUEUES = 4
GROUP = "GroupCG"
BROKER = "broker-a"
WAIT_S = 45.0


class Group(ServeGroup):
    """``serve --dledger 3`` (:class:`ServeGroup`) and its clusterList."""

    def cluster_list(self) -> list[dict[str, object]]:
        done = subprocess.run(
            [sys.executable, "-m", "rocketq.cli", "admin", "clusterList", "--json", "-n", self.namesrv],
            capture_output=True,
            text=True,
            env=child_env(),
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        rows = json.loads(done.stdout)
        assert isinstance(rows, list)
        return [r for r in rows if r.get("broker_name") == BROKER]


@pytest.fixture
def group(tmp_path: pathlib.Path) -> Iterator[Group]:
    with running(Group(tmp_path)) as g:
        with Admin(g.namesrv) as admin:
            wait_until(lambda: g.master(admin), "a master", WAIT_S)
            admin.create_topic(TOPIC, QUEUES, QUEUES, cluster="DefaultCluster")
            wait_until(lambda: _routed(admin), "the topic's route", WAIT_S)
        yield g


def _routed(admin: Admin) -> bool:
    try:
        return len(admin.topic_route(TOPIC).queue_datas) > 0
    except RocketqError:
        return False


def _consumer(namesrv: str) -> LitePullConsumer:
    return LitePullConsumer(
        GROUP, namesrv_addr=namesrv, auto_commit=False, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
    )


def _queues() -> list[MessageQueue]:
    return [MessageQueue(TOPIC, BROKER, q) for q in range(QUEUES)]


def _stored(admin: Admin) -> list[bytes]:
    out: list[bytes] = []
    for qid in range(QUEUES):
        offset = 0
        while batch := admin.consume_message(TOPIC, qid, offset, 256, broker_name=BROKER):
            out.extend(m.body for m in batch)
            offset = batch[-1].queue_offset + 1
    return out


def _offset_on(addr: str, queue_id: int) -> int:
    """The group's committed offset of one queue as the broker at ``addr`` holds it (-1: none)."""

    async def query() -> int:
        client = RemotingClient()
        try:
            fields = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": queue_id}
            response = await client.invoke(addr, create_request(RequestCode.QUERY_CONSUMER_OFFSET, fields), 5)
        finally:
            await client.close()
        if response.code != ResponseCode.SUCCESS:
            return -1
        return int((response.ext_fields or {}).get("offset", -1))

    return asyncio.run(query())


def _send_all(namesrv: str, count: int, prefix: str) -> list[bytes]:
    with Producer(f"{prefix}PG", namesrv_addr=namesrv) as p:
        results = [p.send(Message(TOPIC, f"{prefix}-{i}".encode())) for i in range(count)]
    assert all(r.status is SendStatus.SEND_OK for r in results)
    return [f"{prefix}-{i}".encode() for i in range(count)]


@pytest.mark.slow  # three broker processes (about 15 s here)
def test_three_brokers_one_master_two_slaves_same_term(group: Group) -> None:
    def listed() -> list[dict[str, object]] | None:
        rows = group.cluster_list()
        return rows if sorted(int(str(r["broker_id"])) for r in rows) == [0, 2, 3] else None

    rows = wait_until(listed, "one master (brokerId 0) and two slaves listed", WAIT_S)
    roles = sorted(str(r["dledger_role"]) for r in rows)
    assert roles == ["FOLLOWER", "FOLLOWER", "LEADER"]
    assert len({r["dledger_term"] for r in rows}) == 1
    master = next(r for r in rows if r["broker_id"] == 0)
    assert master["dledger_role"] == "LEADER"
    # preferredLeaderId=n0: the leader hands over to n0 once it is caught up
    assert group.brokers[str(master["addr"])][0] == "n0"

    sent = _send_all(group.namesrv, 200, "a")
    consumer = _consumer(group.namesrv)
    with consumer:
        consumer.assign(_queues())
        got = collect_until(lambda: consumer.poll(timeout_ms=1000), len(sent), "messages", WAIT_S)
    assert sorted(m.body for m in got) == sorted(sent)
    # every broker dispatched the same committed messages: a follower serves them too
    with Admin(group.namesrv) as admin:
        assert sorted(_stored(admin)) == sorted(sent)


@pytest.mark.slow  # kills a broker process (about 8 s here; the README's rule for make fast)
def test_sigkill_of_the_master_while_sending_loses_no_acknowledged_message(group: Group) -> None:
    admin = Admin(group.namesrv)
    admin.start()
    try:
        first_master = wait_until(lambda: group.master(admin), "a master", WAIT_S)
        first = _send_all(group.namesrv, 100, "a")
        consumer = _consumer(group.namesrv)
        with consumer:
            consumer.assign(_queues())
            collect_until(lambda: consumer.poll(timeout_ms=1000), len(first), "messages", WAIT_S)
            consumer.commit()
            committed = {mq.queue_id: consumer.committed(mq) for mq in _queues()}
        assert sum(committed.values()) == len(first)
        # the slaves copy the master's consumer offsets (and topics) every 3 s
        slaves = [a for a in group.brokers if a != first_master]
        for addr in slaves:
            wait_until(
                lambda a=addr: all(_offset_on(a, q) == committed[q] for q in range(QUEUES)),
                f"the slave {addr} holding the committed offsets",
                WAIT_S,
            )

        # a producer sends one message at a time; a send that fails is retried with the same body
        acked: list[bytes] = []
        errored: set[bytes] = set()
        first_ok_after_kill: list[float] = []
        killed_at: list[float] = []
        stop = threading.Event()

        def produce() -> None:
            with Producer("KillPG", namesrv_addr=group.namesrv, route_refresh_interval_ms=500) as p:
                i = 0
                while not stop.is_set():
                    body = f"b-{i}".encode()
                    try:
                        ok = p.send(Message(TOPIC, body)).status is SendStatus.SEND_OK
                    except RocketqError:
                        ok = False
                    if not ok:
                        errored.add(body)
                        continue
                    acked.append(body)
                    if killed_at and not first_ok_after_kill:
                        first_ok_after_kill.append(time.monotonic())
                    i += 1

        sender = threading.Thread(target=produce, name="kill-producer")
        sender.start()
        try:
            wait_until(lambda: len(acked) >= 50, "50 messages acknowledged before the kill", WAIT_S)
            os.kill(group.brokers[first_master][1], signal.SIGKILL)
            killed_at.append(time.monotonic())
            at_kill = len(acked)
            wait_until(lambda: len(acked) >= at_kill + 50, "50 messages acknowledged after the kill", WAIT_S)
        finally:
            stop.set()
            sender.join(60)
        assert not sender.is_alive()
        failover_s = first_ok_after_kill[0] - killed_at[0]
        print(
            f"fail-over: first acknowledged send {failover_s:.2f} s after SIGKILL of the master; "
            f"{len(acked)} acknowledged, {len(errored)} failed sends retried"
        )

        new_master = wait_until(
            lambda: (m := group.master(admin)) is not None and m != first_master and m,
            "a new master registered",
            WAIT_S,
        )
        assert new_master in slaves
        # every acknowledged message is stored; only a send that failed may be stored twice
        wait_until(lambda: set(acked) <= set(_stored(admin)), "every acknowledged message readable", WAIT_S)
        counts = Counter(_stored(admin))
        assert all(counts[b] == 1 for b in first)
        twice = {b for b, n in counts.items() if n > 1}
        assert twice <= errored, sorted(twice - errored)
        print(f"stored twice: {len(twice)}")
        assert set(counts) <= set(first) | set(acked) | errored

        # the consumer goes on from its committed offsets on the new master: nothing skipped
        resumed = _consumer(group.namesrv)
        with resumed:
            resumed.assign(_queues())
            # everything stored after the committed offsets: the acknowledged messages and a
            # failed send stored once or twice (waiting for len(acked) could stop short of an
            # acknowledged message when a duplicate came first)
            stored_after = sum(n for b, n in counts.items() if b not in set(first))
            got = collect_until(lambda: resumed.poll(timeout_ms=1000), stored_after, "messages", WAIT_S)
        starts: dict[int, int] = {}
        for m in got:
            starts.setdefault(m.queue_id, m.queue_offset)
        assert starts == {q: committed[q] for q in range(QUEUES) if q in starts}
        assert set(acked) <= {m.body for m in got}
        assert not {m.body for m in got} & set(first)
    finally:
        admin.shutdown()


@pytest.mark.slow  # three broker processes (about 10 s here)
def test_three_broker_processes_without_broker_addresses_find_the_master(tmp_path: pathlib.Path) -> None:
    """Three ``rocketq broker -c`` processes whose confs name only the peers: the slaves learn
    the master's address from the name server and copy its topics."""
    ns_port = free_port()
    namesrv = f"127.0.0.1:{ns_port}"
    ports = [free_port() for _ in range(3)]
    peers = ";".join(f"n{i}-127.0.0.1:{free_port()}" for i in range(3))
    procs = [RocketqProcess("namesrv", ["namesrv", "--port", str(ns_port)], tmp_path / "logs")]
    try:
        for i, port in enumerate(ports):
            conf = write_broker_conf(
                tmp_path / f"broker-n{i}.conf",
                {
                    "brokerName": BROKER,
                    "namesrvAddr": namesrv,
                    "brokerIP1": "127.0.0.1",
                    "listenPort": str(port),
                    "storePathRootDir": str(tmp_path / f"store-n{i}"),
                    "enableDLegerCommitLog": "true",
                    "dLegerPeers": peers,
                    "dLegerSelfId": f"n{i}",
                    "dLegerElectionTimeoutMs": "1000",
                    "dLegerHeartbeatIntervalMs": "200",
                },
            )
            procs.append(RocketqProcess(f"broker-n{i}", ["broker", "-c", str(conf)], tmp_path / "logs"))
        with Admin(namesrv) as admin:

            def master() -> str | None:
                for p in procs:
                    p.check_alive()
                try:
                    group = admin.cluster_info().broker_addr_table.get(BROKER)
                except RocketqError:
                    return None
                return None if group is None or len(group.broker_addrs) < 3 else group.broker_addrs.get(0)

            leader = wait_until(master, "three brokers registered, one as master", WAIT_S)
            admin.create_topic(TOPIC, QUEUES, QUEUES, cluster="DefaultCluster")  # on the master only
        slaves = [f"127.0.0.1:{p}" for p in ports if f"127.0.0.1:{p}" != leader]
        for addr in slaves:
            wait_until(lambda a=addr: TOPIC in _topics_on(a), f"the slave {addr} holding the topic", WAIT_S)
    except BaseException:
        for p in procs:
            print(p.diagnostics())
        raise
    finally:
        for p in reversed(procs):
            p.stop()


def _topics_on(addr: str) -> set[str]:
    async def query() -> set[str]:
        client = RemotingClient()
        try:
            response = await client.invoke(addr, create_request(RequestCode.GET_ALL_TOPIC_CONFIG), 5)
        finally:
            await client.close()
        if response.code != ResponseCode.SUCCESS or not response.body:
            return set()
        table = json.loads(response.body).get("topicConfigTable", {})
        return set(table) if isinstance(table, dict) else set()

    return asyncio.run(query())
