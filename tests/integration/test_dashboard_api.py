"""The console's JSON API against an in-process name server and broker: every answer is checked
against what the admin client reads from the same cluster, and every change the API makes is seen
by the admin client. Waits are bounded polls on conditions."""

from __future__ import annotations

import json
import pathlib
import re
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from _support.procs import RocketqProcess
from _support.procs import wait_until as procs_wait
from _support.wait import wait_until
from rocketq.client import Admin, ConsumeStatus, Message, Producer, PushConsumer
from rocketq.dashboard import DashboardApp
from rocketq.message import MessageExt
from rocketq.testing import InProcessCluster

TOPIC = "DashT"
QUEUES = 4
FAST = {"rebalance_interval_ms": 300, "heartbeat_interval_ms": 1_000, "auto_commit_interval_ms": 300}


class Api:
    def __init__(self, cluster: InProcessCluster, app: DashboardApp) -> None:
        self.cluster = cluster
        self.app = app

    def __call__(
        self, method: str, path: str, query: dict[str, Any] | None = None, body: Any = None, status: int = 200
    ) -> Any:
        q = {k: str(v) for k, v in (query or {}).items()}
        response = self.cluster.call(self.app.dispatch(method, path, q, body))
        doc = json.loads(response.body)
        assert response.status == status, doc
        return doc


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[InProcessCluster, Api, Admin]]:
    cluster = InProcessCluster(data_dir=tmp_path_factory.mktemp("dash")).start()
    app = DashboardApp(cluster.namesrv_addr, port=0, sample_interval_s=0.2)
    cluster.call(app.start())
    admin = Admin(cluster.namesrv_addr)
    admin.start()
    try:
        cluster.create_topic(TOPIC, QUEUES)
        yield cluster, Api(cluster, app), admin
    finally:
        admin.shutdown()
        cluster.call(app.close())
        cluster.stop()


def test_cluster_lists_the_brokers_with_their_runtime_figures(
    env: tuple[InProcessCluster, Api, Admin],
) -> None:
    _cluster, api, admin = env
    doc = api("GET", "/api/cluster")
    assert {b["addr"] for b in doc["brokers"]} == {e.addr for e in admin.cluster_list()}
    b = doc["brokers"][0]
    assert b["role"] == "MASTER" and b["version"].startswith("V") and b["error"] == ""
    assert 0.0 <= float(b["diskRatio"]) <= 1.0


def test_create_update_and_delete_a_topic(env: tuple[InProcessCluster, Api, Admin]) -> None:
    _, api, admin = env
    api("POST", "/api/topics", body={"topic": "DashNew", "readQueueNums": 3, "writeQueueNums": 3}, status=201)
    wait_until(lambda: "DashNew" in admin.topic_list(), "DashNew in the topic list")
    found = api("GET", "/api/topics", {"q": "dashn"})
    assert [r["topic"] for r in found["items"]] == ["DashNew"]
    queues = api("GET", "/api/topics/DashNew/queues")
    assert queues["total"] == 3
    api("POST", "/api/topics", body={"topic": "DashNew", "readQueueNums": 5, "writeQueueNums": 5}, status=201)
    wait_until(lambda: len(admin.topic_status("DashNew")) == 5, "5 queues after the update")
    api("DELETE", "/api/topics/DashNew")
    wait_until(lambda: "DashNew" not in admin.topic_list(), "DashNew gone from the topic list")


def test_bad_input_is_a_clear_400(env: tuple[InProcessCluster, Api, Admin]) -> None:
    _, api, _ = env
    assert "topic is required" in api("POST", "/api/topics", body={}, status=400)["error"]
    assert "perm" in api("POST", "/api/topics", body={"topic": "X", "perm": 5}, status=400)["error"]
    assert "not an integer" in api("GET", "/api/topics", {"page": "x"}, status=400)["error"]
    assert api("GET", "/api/topics/NoSuchTopic", status=404)["error"]
    assert api("GET", "/api/nothing", status=404)["error"]
    assert api("PUT", "/api/topics", status=405)["error"]


def test_topics_paginate(env: tuple[InProcessCluster, Api, Admin]) -> None:
    _, api, admin = env
    normal = [t for t in admin.topic_list() if not t.startswith("%")]
    doc = api("GET", "/api/topics", {"kind": "all", "size": 2, "page": 2})
    assert doc["size"] == 2 and doc["page"] == 2 and len(doc["items"]) <= 2
    assert doc["total"] >= len([t for t in normal if t == TOPIC])


def test_messages_by_key_id_offset_and_time(env: tuple[InProcessCluster, Api, Admin]) -> None:
    _, api, admin = env
    began = int(time.time() * 1000) - 1
    with Producer("DashP", namesrv_addr=env[0].namesrv_addr) as p:
        sent = [p.send(Message(TOPIC, json.dumps({"i": i}).encode(), keys=[f"dk{i}"])) for i in range(8)]
    by_key = wait_until(
        lambda: api("GET", "/api/messages/by-key", {"topic": TOPIC, "key": "dk3"})["messages"], "dk3"
    )
    assert [m["body"] for m in by_key] == ['{"i": 3}']
    by_id = api("GET", "/api/messages/by-id", {"id": sent[5].offset_msg_id})["messages"]
    assert by_id[0]["keys"] == ["dk5"]
    uniq = api("GET", "/api/messages/by-id", {"id": sent[6].msg_id, "topic": TOPIC})["messages"]
    assert uniq[0]["keys"] == ["dk6"]
    q = sent[2].message_queue
    at = api(
        "GET",
        "/api/messages/by-offset",
        {"topic": TOPIC, "broker": q.broker_name, "queue": q.queue_id, "offset": sent[2].queue_offset},
    )["messages"]
    assert at[0]["keys"] == ["dk2"]

    def all_by_time() -> list[dict[str, Any]] | None:
        # dk3 is indexed (the wait above); the later sends may not be dispatched yet
        found: list[dict[str, Any]] = api("GET", "/api/messages/by-time", {"topic": TOPIC, "begin": began})[
            "messages"
        ]
        return found if len(found) >= 8 else None

    timed = wait_until(all_by_time, "all eight messages found by time")
    assert sorted(m["keys"][0] for m in timed) == sorted(f"dk{i}" for i in range(8))
    empty = api("GET", "/api/messages/by-time", {"topic": TOPIC, "begin": began, "end": began - 1})[
        "messages"
    ]
    assert empty == []
    assert admin.query_msg_by_id(sent[5].offset_msg_id).keys == ["dk5"]


def test_resend_sends_a_copy_to_the_topic(env: tuple[InProcessCluster, Api, Admin]) -> None:
    _, api, admin = env
    with Producer("DashP2", namesrv_addr=env[0].namesrv_addr) as p:
        r = p.send(Message(TOPIC, b"again", keys=["resend-me"]))
    doc = api("POST", "/api/messages/resend", body={"msgId": r.offset_msg_id})
    assert doc["how"] == "send" and doc["topic"] == TOPIC
    wait_until(lambda: len(admin.query_msg_by_key(TOPIC, "resend-me")) == 2, "two copies of the message")


class Inbox:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0

    def listen(self, msgs: list[MessageExt]) -> ConsumeStatus:
        with self.lock:
            self.count += len(msgs)
        return ConsumeStatus.CONSUME_SUCCESS


def test_group_members_lag_and_reset(
    env: tuple[InProcessCluster, Api, Admin], tmp_path: pathlib.Path
) -> None:
    cluster, api, admin = env
    topic, group = "DashLag", "DashGroup"
    cluster.create_topic(topic, 2)
    with Producer("DashP3", namesrv_addr=cluster.namesrv_addr) as p:
        for i in range(6):
            p.send(Message(topic, f"m{i}".encode()))
    inbox = Inbox()
    c = PushConsumer(
        group, namesrv_addr=cluster.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET", **FAST
    )
    c.subscribe(topic, "*")
    c.register_listener(inbox.listen)
    c.start()
    try:
        wait_until(lambda: inbox.count >= 6, "6 consumed")
        members = wait_until(lambda: api("GET", f"/api/groups/{group}")["members"], "a member online")
        assert members[0]["language"] == "PYTHON" or members[0]["language"]
        assert members[0]["versionDesc"].startswith("V")
        wait_until(lambda: admin.consumer_progress(group, topic).total_consumer_offset == 6, "6 committed")
        # the broker does not relay CONSUME_MESSAGE_DIRECTLY to the member: the copy is sent instead
        first = admin.consume_message(topic, 0, 0, 1)[0]
        resent = api("POST", "/api/messages/resend", body={"msgId": first.msg_id, "group": group})
        assert resent["how"] == "send" and resent["topic"] == topic
        wait_until(lambda: inbox.count >= 7, "the resent copy consumed")
    finally:
        c.shutdown()
    wait_until(lambda: admin.consumer_progress(group, topic).total_consumer_offset == 7, "7 committed")
    with Producer("DashP3", namesrv_addr=cluster.namesrv_addr) as p:
        for i in range(3):
            p.send(Message(topic, f"late{i}".encode()))
    prog = api("GET", f"/api/groups/{group}/progress", {"topic": topic})
    expected = admin.consumer_progress(group, topic)
    assert prog["totalLag"] == expected.total_lag == 3
    assert {(r["queueId"], r["lag"]) for r in prog["items"]} == {(q.queue_id, q.lag) for q in expected.queues}
    groups = api("GET", "/api/groups", {"q": "dashgroup"})["items"]
    assert [g["group"] for g in groups] == [group]
    doc = api("POST", f"/api/groups/{group}/reset", body={"topic": topic, "timestamp": 0})
    assert sum(r["offset"] for r in doc["offsets"]) == 0
    assert admin.consumer_progress(group, topic).total_lag == 10
    assert (
        "timestamp" in api("POST", f"/api/groups/{group}/reset", body={"topic": topic}, status=400)["error"]
    )


def test_tps_series_follows_the_max_offsets(env: tuple[InProcessCluster, Api, Admin]) -> None:
    cluster, api, _ = env
    rounds = cluster.call(_rounds(api.app))
    wait_until(lambda: cluster.call(_rounds(api.app)) >= rounds + 1, "a sampling round")
    with Producer("DashP4", namesrv_addr=cluster.namesrv_addr) as p:
        for i in range(5):
            p.send(Message(TOPIC, f"tps{i}".encode()))

    def moved() -> bool:
        pts = api("GET", f"/api/topics/{TOPIC}/tps")["points"]
        return any(pt["tps"] > 0 for pt in pts)

    wait_until(moved, "a TPS sample above 0")


async def _rounds(app: DashboardApp) -> int:
    return app.sampler.rounds


def test_dlq_and_trace_answer(env: tuple[InProcessCluster, Api, Admin]) -> None:
    _, api, _ = env
    assert api("GET", "/api/dlq")["items"] == []
    assert api("GET", "/api/trace", {"id": "0A0000000000000000000000"})["events"] == []


def test_static_pages_are_served(env: tuple[InProcessCluster, Api, Admin]) -> None:
    cluster, api, _ = env
    index = cluster.call(api.app.dispatch("GET", "/"))
    assert index.status == 200 and b"<main" in index.body and index.content_type.startswith("text/html")
    js = cluster.call(api.app.dispatch("GET", "/static/app.js"))
    assert js.status == 200 and "javascript" in js.content_type
    assert cluster.call(api.app.dispatch("GET", "/static/../api.py")).status == 404


def test_pages_answer_quickly_with_100_topics_of_100_queues(env: tuple[InProcessCluster, Api, Admin]) -> None:
    cluster, api, _ = env
    for i in range(100):
        cluster.create_topic(f"Bulk{i:03d}", 100)
    timings: dict[str, float] = {}
    for path, query in [
        ("/api/cluster", {}),
        ("/api/topics", {"page": 2}),
        ("/api/topics/Bulk050", {}),
        ("/api/topics/Bulk050/queues", {"page": 2}),
        ("/api/groups", {}),
        ("/api/dlq", {}),
    ]:
        began = time.perf_counter()
        doc = api("GET", path, query)
        timings[path] = time.perf_counter() - began
        if path == "/api/topics/Bulk050/queues":
            assert doc["total"] == 100 and len(doc["items"]) == 50
    assert max(timings.values()) < 1.0, timings


def test_the_dashboard_command_serves_and_stops_on_sigterm(
    env: tuple[InProcessCluster, Api, Admin], tmp_path: pathlib.Path
) -> None:
    cluster, _, admin = env
    proc = RocketqProcess(
        "dashboard", ["dashboard", "--namesrv", cluster.namesrv_addr, "--port", "0"], tmp_path
    )
    try:
        found: dict[str, str] = {}

        def ready() -> bool:
            m = re.search(r"rocketq dashboard on (http://\S+/)", proc.log_text(None))
            if m:
                found["url"] = m.group(1)
            return bool(found)

        procs_wait(ready, "the dashboard's address", 20.0, proc)
        with urllib.request.urlopen(found["url"] + "api/cluster", timeout=5) as r:
            doc = json.loads(r.read())
        assert {b["addr"] for b in doc["brokers"]} == {e.addr for e in admin.cluster_list()}
        port = int(found["url"].rsplit(":", 1)[1].rstrip("/"))
        taken = RocketqProcess(
            "dashboard-taken", ["dashboard", "--namesrv", cluster.namesrv_addr, "--port", str(port)], tmp_path
        )
        assert taken.proc is not None and taken.proc.wait(20) == 1
        assert f"port {port} is already in use" in taken.log_text()
        assert proc.terminate() == 0
    finally:
        proc.close()
