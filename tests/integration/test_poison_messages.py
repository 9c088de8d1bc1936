"""Poison messages: a body marked compressed that does not inflate is refused at the send, and a
store that already holds one (written past the broker's check) stalls no consumer.

The store is written directly (``MessageStore.put_message`` with sysFlag COMPRESSED on a body
that is not zlib), then a name server and broker start on it (``Cluster`` from
test_client_producer); the lite pull, push, admin and pop paths read it over real sockets.
"""

from __future__ import annotations

import logging
import pathlib
import time
import zlib
from collections.abc import Iterator

import pytest
from test_admin import run_admin
from test_broker_server import decode_records, dispatched, run, running_broker
from test_client_producer import Cluster

from _support.requests import create_topic_request, pull_request, send_request
from rocketq.client import LitePullConsumer, MessageQueue, PushConsumer
from rocketq.client.admin import Admin, MessageView
from rocketq.client.consumer_core import decode_pull_body
from rocketq.config import StoreConfig
from rocketq.errors import ResponseCode, RocketqError
from rocketq.message import BrokerMessage, MessageExt, encode_properties
from rocketq.protocol.batch import BatchEntry, encode_batch
from rocketq.remoting import RemotingClient, RequestCode, create_request
from rocketq.spark.pull import read_range
from rocketq.store import MessageStore

WAIT_S = 20.0
TOPIC = "PoisonT"
BAD_BODY = b"this body is not zlib"
#: queue 0 of TOPIC: (body as stored, sysFlag); offset 1 is a valid compressed message, 2 the poison
STORED = [
    (b"good-0", 0),
    (zlib.compress(b"good-1"), 1),
    (BAD_BODY, 1),
    (b"good-3", 0),
    (b"good-4", 0),
]
GOOD = [b"good-0", b"good-1", b"good-3", b"good-4"]
POISON_OFFSET = 2


# -- (a) the broker refuses ---------------------------------------------------------------------
def test_send_of_a_compressed_flag_on_a_body_that_does_not_inflate_is_refused(
    store_config: StoreConfig,
) -> None:
    async def go() -> None:
        async with running_broker(store_config) as (broker, client, addr):
            assert (await client.invoke(addr, create_topic_request(TOPIC, queues=1))).code == 0
            good = zlib.compress(b"fine")
            refused = {
                "not zlib": (BAD_BODY, 0x1, "does not inflate"),
                "truncated": (good[:-3], 0x1, "truncated"),
                "LZ4": (good, 0x101, "LZ4"),
                "ZSTD": (good, 0x201, "ZSTD"),
                "type 5": (good, 0x501, "unknown compression type 5"),
                "NEED_UNWRAP": (b"x", 0x40, "NEED_UNWRAP"),
                "INNER_BATCH": (b"x", 0x80, "INNER_BATCH"),
            }
            for name, (body, flag, words) in refused.items():
                for v2 in (True, False):
                    answer = await client.invoke(addr, send_request(TOPIC, body, sys_flag=flag, v2=v2))
                    assert answer.code == ResponseCode.MESSAGE_ILLEGAL, (name, answer.code, answer.remark)
                    assert words in (answer.remark or ""), (name, answer.remark)
                    assert f"0x{flag:X}" in (answer.remark or "")
            # a batch whose one entry does not inflate is refused whole
            batch = encode_batch([BatchEntry(good, b""), BatchEntry(BAD_BODY, b"")])
            answer = await client.invoke(
                addr, send_request(TOPIC, batch, sys_flag=0x1, code=RequestCode.SEND_BATCH_MESSAGE)
            )
            assert answer.code == ResponseCode.MESSAGE_ILLEGAL
            assert "batch message 1" in (answer.remark or "") and "does not inflate" in (answer.remark or "")
            # what honours the flags is stored: zlib as type 0 (old producers) and 3, trailing
            # bytes after the stream included (inflaters ignore them); plain bodies unchecked
            for body, flag in ((good, 0x1), (good, 0x301), (good + b"tail", 0x1), (BAD_BODY, 0)):
                answer = await client.invoke(addr, send_request(TOPIC, body, sys_flag=flag))
                assert answer.code == ResponseCode.SUCCESS, answer.remark
            await dispatched(broker)
            pulled = await client.invoke(addr, pull_request(TOPIC, 0, subscription="*", suspend_ms=0))
            stored = [(v.body, v.sys_flag) for v in decode_records(pulled.body)]
            assert stored == [(good, 0x1), (good, 0x301), (good + b"tail", 0x1), (BAD_BODY, 0)]

    run(go())


# -- (b) a store that already holds one -----------------------------------------------------------
def write_store(root: pathlib.Path) -> None:
    """Queue 0 of TOPIC as :data:`STORED`, written by the store itself (no broker check)."""
    cfg = StoreConfig(
        store_path_root_dir=str(root / "broker-a"),
        mapped_file_size_commit_log=1024 * 1024,
        mapped_file_size_consume_queue=20 * 1000,
        max_hash_slot_num=64,
        max_index_num=256,
    )
    with MessageStore(cfg) as store:
        for i, (body, flag) in enumerate(STORED):
            props = encode_properties({"TAGS": "A", "KEYS": f"k{i}", "UNIQ_KEY": f"U{i:030d}"})
            msg = BrokerMessage(
                TOPIC, body, props.encode(), queue_id=0, sys_flag=flag, born_timestamp=time.time_ns() // 10**6
            )
            result = store.put_message(msg)
            assert result.queue_offset == i
        assert store.wait_dispatched(WAIT_S)


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    write_store(tmp_path)
    c = Cluster(tmp_path, ("broker-a",))
    c.start()
    try:
        c.create_topic(TOPIC, 1)
        yield c
    finally:
        c.close()


def poison_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR and "poison" in r.getMessage()
    ]


def test_lite_pull_delivers_the_good_messages_and_moves_past_the_poison(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    mq = MessageQueue(TOPIC, "broker-a", 0)
    with LitePullConsumer(
        "PoisonLite", namesrv_addr=cluster.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
    ) as consumer:
        consumer.assign([mq])
        got: list[MessageExt] = []
        deadline = time.monotonic() + WAIT_S
        while len(got) < len(GOOD):
            assert time.monotonic() < deadline, f"polled {[m.body for m in got]}"
            got.extend(consumer.poll(timeout_ms=500))
        assert [m.body for m in got] == GOOD
        assert [m.queue_offset for m in got] == [0, 1, 3, 4]
        assert consumer.poll(timeout_ms=200) == []
        consumer.commit()
        assert consumer.committed(mq) == len(STORED)
    lines = poison_lines(caplog)
    assert lines, "the poison message was not logged at ERROR"
    assert f"topic {TOPIC} queue 0 offset {POISON_OFFSET}" in lines[0]
    assert "does not inflate" in lines[0] and "skipped" in lines[0]


def dlq_messages(admin: Admin, group: str) -> list[MessageView]:
    try:
        return admin.consume_message(f"%DLQ%{group}", 0, 0, 32)
    except RocketqError:  # the DLQ topic does not exist yet
        return []


def test_push_consumer_delivers_the_good_messages_and_sends_the_poison_to_the_dlq(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    group = "PoisonPush"
    got: list[bytes] = []
    consumer = PushConsumer(
        group,
        namesrv_addr=cluster.namesrv_addr,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        auto_commit_interval_ms=100,
    )
    consumer.subscribe(TOPIC, "*")
    consumer.register_listener(lambda msgs: got.extend(m.body for m in msgs))
    with consumer, Admin(cluster.namesrv_addr) as admin:
        deadline = time.monotonic() + WAIT_S
        while sorted(got) != GOOD or not (dlq := dlq_messages(admin, group)):
            assert time.monotonic() < deadline, f"consumed {got}, DLQ {dlq_messages(admin, group)}"
            time.sleep(0.05)
        assert len(dlq) == 1
        dead = dlq[0]
        assert dead.body == BAD_BODY and dead.undecodable and dead.sys_flag & 1
        assert dead.properties["RETRY_TOPIC"] == TOPIC
        assert dead.uniq_key == f"U{POISON_OFFSET:030d}"
        # the group's offset moves past the poison once it is in the DLQ
        while admin.consumer_progress(group, TOPIC).queues[0].consumer_offset != len(STORED):
            assert time.monotonic() < deadline, "the committed offset did not pass the poison message"
            time.sleep(0.05)
    assert sorted(got) == GOOD
    assert any(f"offset {POISON_OFFSET}" in line and f"%DLQ%{group}" in line for line in poison_lines(caplog))


def test_admin_reads_the_poison_message_as_stored(cluster: Cluster) -> None:
    with Admin(cluster.namesrv_addr) as admin:
        messages = admin.consume_message(TOPIC, 0, 0, 32)
        assert [m.body for m in messages] == [GOOD[0], GOOD[1], BAD_BODY, GOOD[2], GOOD[3]]
        assert [bool(m.undecodable) for m in messages] == [False, False, True, False, False]
        poison = admin.query_msg_by_offset(TOPIC, "broker-a", 0, POISON_OFFSET)
        assert poison.body == BAD_BODY and "does not inflate" in poison.undecodable
        assert poison.to_json()["undecodable"] == poison.undecodable
        assert "undecodable" not in messages[0].to_json()
        by_key = admin.query_msg_by_key(TOPIC, f"k{POISON_OFFSET}")
        assert [(m.body, bool(m.undecodable)) for m in by_key] == [(BAD_BODY, True)]


def test_pop_delivers_the_good_messages_and_the_poison_as_stored(cluster: Cluster) -> None:
    async def go() -> tuple[list[MessageExt], list[int]]:
        client = RemotingClient()
        broker = cluster.brokers["broker-a"]
        await dispatched(broker)
        fields = {
            "consumerGroup": "PoisonPop",
            "topic": TOPIC,
            "queueId": -1,
            "maxMsgNums": 32,
            "invisibleTime": 60_000,
            "pollTime": 1_000,
            "bornTime": time.time_ns() // 1_000_000,
            "initMode": 0,
            "expType": "TAG",
            "exp": "*",
            "order": "false",
        }
        try:
            good: list[MessageExt] = []
            poison: list[int] = []
            deadline = time.monotonic() + WAIT_S
            while len(good) + len(poison) < len(STORED):
                assert time.monotonic() < deadline, f"popped {len(good)} good, {len(poison)} poison"
                response = await client.invoke(
                    f"127.0.0.1:{broker.port}", create_request(RequestCode.POP_MESSAGE, fields), 30.0
                )
                if response.code == ResponseCode.SUCCESS:
                    decoded = decode_pull_body(response.body or b"")
                    good.extend(decoded.messages)
                    poison.extend(p.queue_offset for p in decoded.poison)
            return good, poison
        finally:
            await client.close()

    good, poison = cluster.call(go())
    assert [m.body for m in sorted(good, key=lambda m: m.queue_offset)] == GOOD
    assert poison == [POISON_OFFSET]


def test_spark_reader_reads_the_poison_message_with_its_body_as_stored(cluster: Cluster) -> None:
    lost: list[tuple[int, int]] = []

    async def go() -> list[MessageExt]:
        client = RemotingClient()
        broker = cluster.brokers["broker-a"]
        await dispatched(broker)
        try:
            out: list[MessageExt] = []
            async for chunk in read_range(
                client,
                f"127.0.0.1:{broker.port}",
                TOPIC,
                0,
                0,
                len(STORED),
                batch_size=2,
                timeout_s=10.0,
                on_loss=lambda a, b: lost.append((a, b)),
            ):
                out.extend(chunk)
            return out
        finally:
            await client.close()

    rows = cluster.call(go())
    assert [m.queue_offset for m in rows] == list(range(len(STORED)))
    assert [m.body for m in rows] == [GOOD[0], GOOD[1], BAD_BODY, GOOD[2], GOOD[3]]
    assert lost == []


def test_rocketq_admin_shows_the_poison_message_and_why(cluster: Cluster) -> None:
    shown = run_admin(
        cluster.namesrv_addr, "queryMsgByOffset", "-t", TOPIC, "-b", "broker-a", "-i", "0", "-o", "2"
    )
    assert shown.returncode == 0, shown.stderr
    assert "Body:             this body is not zlib" in shown.stdout
    assert "Undecodable:      body marked compressed (sysFlag 0x1) does not inflate" in shown.stdout
    good = run_admin(
        cluster.namesrv_addr, "queryMsgByOffset", "-t", TOPIC, "-b", "broker-a", "-i", "0", "-o", "1"
    )
    assert "Body:             good-1" in good.stdout and "Undecodable" not in good.stdout
