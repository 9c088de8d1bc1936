"""The admin API (``rocketq.client.admin``) and ``rocketq admin`` CLI against real servers.

The API tests use the in-process name server + broker of ``test_client_producer``; the CLI
tests run ``python -m rocketq.cli admin ...`` against a ``rocketq serve`` subprocess.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from collections.abc import Iterator

import pytest
from procs import ServeProcess, child_env
from test_client_producer import HOST, Cluster, free_port

from _support.wait import wait_until
from rocketq.client import Message, Producer
from rocketq.client.admin import Admin, MessageNotFound, wait_for_route
from rocketq.errors import ConfigError, InvalidParameter, NameServerUnavailable, TopicNotExist
from rocketq.remoting import RequestCode, create_request

WAIT_S = 20.0


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, ("broker-a",))
    c.start()
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def admin(cluster: Cluster) -> Iterator[Admin]:
    with Admin(cluster.namesrv_addr) as a:
        yield a


def broker_addr(cluster: Cluster) -> str:
    return f"{HOST}:{cluster.brokers['broker-a'].port}"


def test_create_topic_shows_in_list_route_and_cluster(cluster: Cluster, admin: Admin) -> None:
    brokers = admin.cluster_list()
    assert [(b.broker_name, b.broker_id, b.addr) for b in brokers] == [("broker-a", 0, broker_addr(cluster))]
    addrs = admin.create_topic("AdmT", 4, 4, cluster=brokers[0].cluster)
    assert addrs == [broker_addr(cluster)]
    route = wait_for_route(admin, "AdmT")
    assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas] == [
        ("broker-a", 4, 4, 6)
    ]
    assert "AdmT" in admin.topic_list()
    # a broker address works too, and updates the queue counts
    admin.create_topic("AdmT", 2, 2, broker_addr=broker_addr(cluster))
    wait_until(
        lambda: admin.topic_route("AdmT").queue_datas[0].read_queue_nums == 2,
        "the updated route",
        WAIT_S,
        0.05,
    )
    with pytest.raises(ConfigError, match="cluster 'nope' is unknown"):
        admin.create_topic("AdmT", cluster="nope")
    admin.delete_topic("AdmT", brokers[0].cluster)
    with pytest.raises(TopicNotExist, match="AdmT"):
        admin.topic_route("AdmT")
    assert "AdmT" not in admin.topic_list()


def test_unknown_topic_and_unreachable_name_server(admin: Admin) -> None:
    with pytest.raises(TopicNotExist, match="NoSuchTopic"):
        admin.topic_route("NoSuchTopic")
    with pytest.raises(TopicNotExist):
        admin.topic_status("NoSuchTopic")
    with (
        Admin(f"{HOST}:{free_port()}", timeout_ms=2000) as dead,
        pytest.raises(NameServerUnavailable, match="no name server answered"),
    ):
        dead.topic_list()


def test_status_progress_and_queries(cluster: Cluster, admin: Admin) -> None:
    cluster.create_topic("StatT", 2)
    with Producer("PG", namesrv_addr=cluster.namesrv_addr) as p:
        results = [
            p.send(Message("StatT", f"m{i}".encode(), tags="TA", keys=[f"key-{i}", "shared"]))
            for i in range(6)
        ]
    store = cluster.brokers["broker-a"].store
    assert store is not None
    assert store.wait_dispatched(WAIT_S)

    status = admin.topic_status("StatT")
    assert [(q.broker_name, q.queue_id, q.min_offset, q.max_offset) for q in status] == [
        ("broker-a", 0, 0, 3),
        ("broker-a", 1, 0, 3),
    ]
    assert all(q.last_update_timestamp > 0 for q in status)

    # commit an offset for group CG on queue 0, then read the lag
    async def commit() -> None:
        assert cluster.client is not None
        request = create_request(
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": "CG", "topic": "StatT", "queueId": 0, "commitOffset": 1},
        )
        response = await cluster.client.invoke(broker_addr(cluster), request, 10)
        assert response.code == 0, response.remark

    cluster.call(commit())
    progress = admin.consumer_progress("CG", "StatT")
    rows = [(q.topic, q.queue_id, q.broker_offset, q.consumer_offset, q.lag) for q in progress.queues]
    assert rows == [("StatT", 0, 3, 1, 2), ("StatT", 1, 3, 0, 3)]
    assert (progress.total_broker_offset, progress.total_consumer_offset, progress.total_lag) == (6, 1, 5)
    assert admin.consumer_progress("CG").total_lag == 5

    # by offset message id
    first = results[0]
    m = admin.query_msg_by_id(first.offset_msg_id)
    assert m.body == b"m0" and m.uniq_key == first.msg_id and m.tags == "TA"
    assert m.keys == ["key-0", "shared"] and m.msg_id == first.offset_msg_id
    with pytest.raises(InvalidParameter):
        admin.query_msg_by_id("not-an-id")

    # by key
    found = admin.query_msg_by_key("StatT", "key-3")
    assert [x.body for x in found] == [b"m3"]
    assert sorted(x.body for x in admin.query_msg_by_key("StatT", "shared")) == [
        f"m{i}".encode() for i in range(6)
    ]
    assert len(admin.query_msg_by_key("StatT", "shared", max_num=2)) == 2
    assert admin.query_msg_by_key("StatT", "missing-key") == []

    # by queue offset
    r = results[4]
    q = r.message_queue
    m = admin.query_msg_by_offset("StatT", q.broker_name, q.queue_id, r.queue_offset)
    assert m.body == b"m4" and m.queue_offset == r.queue_offset
    with pytest.raises(MessageNotFound):
        admin.query_msg_by_offset("StatT", "broker-a", 0, 99)
    with pytest.raises(TopicNotExist, match="broker-x"):
        admin.query_msg_by_offset("StatT", "broker-x", 0, 0)

    # consume from a queue, and send through the admin
    msgs = admin.consume_message("StatT", 1, 0, 10)
    assert [x.queue_offset for x in msgs] == [0, 1, 2]
    assert admin.consume_message("StatT", 1, 1, 1)[0].queue_offset == 1
    sent = admin.send_message("StatT", "via admin", tags="TB", keys="adm-key")
    assert store.wait_dispatched(WAIT_S)
    got = admin.query_msg_by_offset("StatT", "broker-a", sent.message_queue.queue_id, sent.queue_offset)
    assert got.body == b"via admin" and got.tags == "TB" and got.keys == ["adm-key"]


# -- CLI ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = ServeProcess(tmp_path_factory.mktemp("serve"))
    try:
        server.start()
        yield server.namesrv_addr
    finally:
        server.stop()


def run_admin(namesrv: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rocketq.cli", "admin", *args, "-n", namesrv],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env=child_env(),
    )


@pytest.mark.slow
def test_cli_topics_send_and_query(served: str) -> None:
    r = run_admin(served, "clusterList", "--json")
    assert r.returncode == 0, r.stderr
    cluster = json.loads(r.stdout)[0]["cluster"]
    r = run_admin(served, "updateTopic", "-t", "CliT", "-c", cluster, "-r", "4", "-w", "4")
    assert r.returncode == 0, r.stderr
    assert "create topic CliT" in r.stdout

    def listed() -> bool:
        out = run_admin(served, "topicList")
        return out.returncode == 0 and "CliT" in out.stdout.split()

    wait_until(listed, "CliT in topicList", WAIT_S, 0.05)
    r = run_admin(served, "topicRoute", "-t", "CliT", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["queueDatas"][0]["writeQueueNums"] == 4

    r = run_admin(served, "sendMessage", "-t", "CliT", "-p", "hello cli", "--tags", "T1", "--keys", "cli-key")
    assert r.returncode == 0, r.stderr
    assert "SEND_OK" in r.stdout

    def queried() -> list[dict[str, object]] | None:
        out = run_admin(served, "queryMsgByKey", "-t", "CliT", "-k", "cli-key", "--json")
        assert out.returncode == 0, out.stderr
        docs: list[dict[str, object]] = json.loads(out.stdout)
        return docs or None

    docs = wait_until(queried, "the message by key", WAIT_S, 0.05)
    assert [d["body"] for d in docs] == ["hello cli"]
    assert docs[0]["tags"] == "T1" and docs[0]["keys"] == ["cli-key"]

    r = run_admin(served, "queryMsgById", "-i", str(docs[0]["msgId"]))
    assert r.returncode == 0, r.stderr
    assert "hello cli" in r.stdout
    r = run_admin(served, "topicStatus", "-t", "CliT")
    assert r.returncode == 0 and "#Max Offset" in r.stdout, r.stderr


@pytest.mark.slow
def test_cli_errors(served: str) -> None:
    r = run_admin(served, "topicRoute", "-t", "NoSuchCliTopic")
    assert r.returncode == 1
    assert "NoSuchCliTopic" in r.stderr and "error" in r.stderr
    r = run_admin(f"{HOST}:{free_port()}", "topicList")
    assert r.returncode == 1 and "no name server answered" in r.stderr
    r = run_admin(served, "topicRoute")
    assert r.returncode == 2
