"""Broadcasting push consumers and their local offset files, against an in-process cluster.

In broadcasting mode every member of a group receives every message, and each member's progress
is kept in its own ``offsets.json`` rather than on the broker. Every wait is on a condition with
a deadline.
"""

from __future__ import annotations

import os
import pathlib
import threading
from collections import Counter
from collections.abc import Iterator

import pytest
from test_client_producer import Cluster

from rocketq.client import Admin, ConsumeStatus, Message, MessageQueue, Producer, PushConsumer
from rocketq.client.config import local_ip
from rocketq.client.offset_store import LocalOffsetStore, decode_offsets, default_offset_path
from rocketq.errors import BodyFormatError
from rocketq.message import MessageExt

TOPIC = "BcastT"
QUEUES = 4
FAST = {"rebalance_interval_ms": 300, "heartbeat_interval_ms": 1_000, "auto_commit_interval_ms": 300}


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, ("broker-a",))
    c.start()
    c.create_topic(TOPIC, QUEUES)
    try:
        yield c
    finally:
        c.close()


def produce(cluster: Cluster, count: int, prefix: str) -> list[bytes]:
    bodies = [f"{prefix}-{i}".encode() for i in range(count)]
    with Producer("BcastProducer", namesrv_addr=cluster.namesrv_addr) as p:
        for body in bodies:
            p.send(Message(TOPIC, body))
    return bodies


class Inbox:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.bodies: list[bytes] = []

    def listen(self, msgs: list[MessageExt]) -> ConsumeStatus:
        with self.lock:
            self.bodies.extend(m.body for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    def snapshot(self) -> list[bytes]:
        with self.lock:
            return list(self.bodies)


def broadcaster(cluster: Cluster, group: str, inbox: Inbox, offsets_dir: pathlib.Path) -> PushConsumer:
    c = PushConsumer(
        group,
        namesrv_addr=cluster.namesrv_addr,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        message_model="BROADCASTING",
        offset_store_dir=str(offsets_dir),
        **FAST,
    )
    c.subscribe(TOPIC, "*")
    c.register_listener(inbox.listen)
    return c


def offsets_file(root: pathlib.Path, group: str) -> pathlib.Path:
    return pathlib.Path(default_offset_path(str(root), f"{local_ip()}@DEFAULT", group))


def broker_offset(cluster: Cluster, group: str, queue_id: int) -> int:
    broker = cluster.brokers["broker-a"]

    async def read() -> int:
        assert broker.ctx is not None
        return broker.ctx.offsets.query_offset(group, TOPIC, queue_id)

    return cluster.call(read())


def registered(cluster: Cluster, group: str) -> tuple[str, list[str]]:
    """The message model and subscribed topics the broker holds for ``group``."""
    broker = cluster.brokers["broker-a"]

    async def read() -> tuple[str, list[str]]:
        assert broker.ctx is not None
        info = broker.ctx.consumers.get(group)
        assert info is not None
        return info.message_model, sorted(info.subscriptions)

    return cluster.call(read())


def test_every_member_gets_every_message_and_keeps_its_own_offsets(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    a, b = Inbox(), Inbox()
    ca = broadcaster(cluster, "Bcast", a, tmp_path / "a")
    cb = broadcaster(cluster, "Bcast", b, tmp_path / "b")
    ca.start()
    cb.start()
    try:
        all_queues = {MessageQueue(TOPIC, "broker-a", q) for q in range(QUEUES)}
        cluster.wait_for(
            "both owning every queue",
            lambda: set(ca.assignment()) == all_queues and set(cb.assignment()) == all_queues,
        )
        sent = produce(cluster, 40, "one")
        cluster.wait_for("40 at each", lambda: len(a.snapshot()) >= 40 and len(b.snapshot()) >= 40)
    finally:
        ca.shutdown()
        cb.shutdown()
    assert Counter(a.snapshot()) == Counter(sent) == Counter(b.snapshot())
    for member in ("a", "b"):
        table = decode_offsets(offsets_file(tmp_path / member, "Bcast").read_bytes(), member)
        assert sum(table.values()) == 40 and set(table) == all_queues
    # the broker keeps nothing for a broadcasting group, and no retry topic was subscribed
    assert all(broker_offset(cluster, "Bcast", q) == -1 for q in range(QUEUES))

    # a member restarted with its file resumes where it stopped
    again = Inbox()
    cr = broadcaster(cluster, "Bcast", again, tmp_path / "a")
    cr.start()
    try:
        more = produce(cluster, 10, "two")
        cluster.wait_for("the 10 new ones", lambda: set(again.snapshot()) >= set(more))
    finally:
        cr.shutdown()
    assert Counter(again.snapshot()) == Counter(more)


def test_failed_broadcast_message_is_not_retried(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    seen: list[bytes] = []
    lock = threading.Lock()

    def listen(msgs: list[MessageExt]) -> ConsumeStatus:
        with lock:
            seen.extend(m.body for m in msgs)
        return ConsumeStatus.RECONSUME_LATER

    c = PushConsumer(
        "BcastFail",
        namesrv_addr=cluster.namesrv_addr,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        message_model="BROADCASTING",
        offset_store_dir=str(tmp_path),
        **FAST,
    )
    c.subscribe(TOPIC, "*")
    c.register_listener(listen)
    c.start()
    try:
        model, topics = registered(cluster, "BcastFail")
        assert model == "BROADCASTING" and topics == [TOPIC]  # no %RETRY% subscription
        sent = produce(cluster, 3, "bad")
        cluster.wait_for("three deliveries", lambda: len(seen) >= 3)
        path = offsets_file(tmp_path, "BcastFail")
        cluster.wait_for(
            "offsets past the failed messages",
            lambda: path.exists() and sum(decode_offsets(path.read_bytes(), "f").values()) == 3,
        )
    finally:
        c.shutdown()
    assert sorted(seen) == sorted(sent)  # each once: not sent back, not consumed again


def test_offset_file_writes_are_atomic_and_damaged_files_fall_back_to_bak(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "g" / "offsets.json"
    store = LocalOffsetStore(str(path))
    store.load()
    mq0, mq1 = MessageQueue("T", "b", 0), MessageQueue("T", "b", 1)
    store.update(mq0, 5)
    store.persist()
    store.update(mq0, 3)  # offsets only move forward by default
    store.update(mq1, 7)
    store.persist()
    assert path.read_bytes() == (
        b'{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:5,'
        b'{"brokerName":"b","queueId":1,"topic":"T"}:7}}'
    )
    assert not (tmp_path / "g" / "offsets.json.tmp").exists()
    assert decode_offsets((tmp_path / "g" / "offsets.json.bak").read_bytes(), "bak") == {mq0: 5}

    path.write_bytes(b'{"offsetTable":{{"brokerName":"b"')  # torn by something outside
    reread = LocalOffsetStore(str(path))
    reread.load()
    assert reread.table() == {mq0: 5}

    os.remove(str(path) + ".bak")
    with pytest.raises(BodyFormatError, match=r"offsets\.json is not valid"):
        LocalOffsetStore(str(path)).load()
    assert path.read_bytes() == b'{"offsetTable":{{"brokerName":"b"'  # left for the operator


def test_consumer_with_a_damaged_offset_file_refuses_to_start(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    path = offsets_file(tmp_path, "BcastBad")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"[1, 2")
    c = broadcaster(cluster, "BcastBad", Inbox(), tmp_path)
    with pytest.raises(BodyFormatError, match="BcastBad"):
        c.start()
    assert path.read_bytes() == b"[1, 2"


def test_offset_reset_reaches_online_broadcast_members_only_locally(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    inbox = Inbox()
    c = broadcaster(cluster, "BcastReset", inbox, tmp_path)
    c.start()
    try:
        sent = produce(cluster, 12, "r")
        cluster.wait_for("12 messages", lambda: len(inbox.snapshot()) >= 12)
        with Admin(cluster.namesrv_addr) as admin:
            table = admin.reset_offset_by_time("BcastReset", TOPIC, 0)
        assert sum(table.values()) == 0
        cluster.wait_for("the 12 again", lambda: len(inbox.snapshot()) >= 24)
        path = offsets_file(tmp_path, "BcastReset")
        cluster.wait_for(
            "local offsets at the end again",
            lambda: path.exists() and sum(decode_offsets(path.read_bytes(), "f").values()) == 12,
        )
    finally:
        c.shutdown()
    assert Counter(inbox.snapshot()) == Counter(sent * 2)
    assert all(broker_offset(cluster, "BcastReset", q) == -1 for q in range(QUEUES))
