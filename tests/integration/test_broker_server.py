"""A real Broker on 127.0.0.1 spoken to with a real RemotingClient, the way Java clients do."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import pathlib
import time
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import pytest

from _support.requests import SUSPEND_MS, create_topic_request, pull_request, send_request
from _support.wait import wait_until_async
from rocketq.broker import Broker, BrokerConfig
from rocketq.config import FlushDiskType, StoreConfig
from rocketq.errors import DiskFull, ResponseCode
from rocketq.message import decode_offset_msg_id, decode_properties, encode_properties
from rocketq.protocol import fastjson
from rocketq.protocol import record as rec
from rocketq.protocol.batch import BatchEntry, encode_batch
from rocketq.remoting import Connection, RemotingClient, RemotingCommand, RequestCode, create_request
from rocketq.remoting.codec import FrameDecoder
from rocketq.remoting.codec import encode as encode_frame

T = TypeVar("T")
WAIT_S = 10.0  # bound for anything that should happen promptly


def run(coro: Coroutine[Any, Any, T]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, 90)

    return asyncio.run(bounded())


def broker_config(**kwargs: Any) -> BrokerConfig:
    base: dict[str, Any] = {
        "broker_name": "broker-a",
        "broker_ip1": "127.0.0.1",
        "bind_address": "127.0.0.1",
        "listen_port": 0,
        "namesrv_addr": None,
    }
    base.update(kwargs)
    return BrokerConfig(**base)


@asynccontextmanager
async def running_broker(
    store_config: StoreConfig, **kwargs: Any
) -> AsyncIterator[tuple[Broker, RemotingClient, str]]:
    broker = Broker(broker_config(**kwargs), store_config)
    await broker.start()
    client = RemotingClient()
    try:
        yield broker, client, f"127.0.0.1:{broker.port}"
    finally:
        await client.close()
        await broker.shutdown()


async def dispatched(broker: Broker) -> None:
    """Wait until everything stored is in its consume queue (dispatch runs on its own thread)."""
    assert broker.store is not None
    assert await asyncio.to_thread(broker.store.wait_dispatched, WAIT_S)


def decode_records(body: bytes) -> list[rec.RecordView]:
    """Sequential decode until the buffer ends, as Java's decodesBatch and ali-ons do."""
    views = []
    pos = 0
    while pos < len(body):
        view = rec.decode_record(body, pos, check_crc=True)
        assert view.kind is rec.RecordKind.MESSAGE, view.reason
        assert not view.v2 and len(view.born_host) == 8 and len(view.store_host) == 8  # V1 / IPv4
        views.append(view)
        pos += view.size
    return views


def heartbeat_body(client_id: str, group: str, subscriptions: dict[str, str]) -> bytes:
    subs = []
    for topic, expr in subscriptions.items():
        tags = [t.strip() for t in expr.split("||")] if expr != "*" else []
        subs.append({"topic": topic, "subString": expr, "tagsSet": tags, "codeSet": [], "subVersion": 1})
    return json.dumps(
        {
            "clientID": client_id,
            "producerDataSet": [],
            "consumerDataSet": [
                {
                    "groupName": group,
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                    "subscriptionDataSet": subs,
                    "unitMode": False,
                }
            ],
        }
    ).encode()


# ---------------------------------------------------------------------------------------------


def test_send_v1_and_v2_then_pull_exact_records(store_config: StoreConfig) -> None:
    async def main() -> None:
        async with running_broker(store_config) as (broker, client, addr):
            r1 = await client.invoke(
                addr, send_request("TopicTest", b"first", v2=False, properties={"TAGS": "A", "KEYS": "k1"})
            )
            r2 = await client.invoke(addr, send_request("TopicTest", b"second", properties={"TAGS": "B"}))
            for n, r in enumerate((r1, r2)):
                assert r.code == ResponseCode.SUCCESS, r.remark
                assert r.ext_fields["queueId"] == "0"
                assert r.ext_fields["queueOffset"] == str(n)
                assert r.ext_fields["MSG_REGION"] == "DefaultRegion"
                assert r.ext_fields["TRACE_ON"] == "true"
                assert len(r.ext_fields["transactionId"]) == 32
                assert decode_offset_msg_id(r.ext_fields["msgId"]).address == broker.broker_addr

            await dispatched(broker)
            pulled = await client.invoke(addr, pull_request("TopicTest", 0), 30)
            assert pulled.code == ResponseCode.SUCCESS and pulled.remark == "FOUND"
            assert pulled.ext_fields == {
                "nextBeginOffset": "2",
                "minOffset": "0",
                "maxOffset": "2",
                "suggestWhichBrokerId": "0",
            }
            views = decode_records(pulled.body)
            assert [v.body for v in views] == [b"first", b"second"]
            assert [v.queue_offset for v in views] == [0, 1]
            assert views[0].topic == "TopicTest"
            props = decode_properties(views[0].properties)
            assert props["TAGS"] == "A" and props["KEYS"] == "k1" and props["CLUSTER"] == "DefaultCluster"
            assert props["UNIQ_KEY"] == r1.ext_fields["transactionId"]
            # the body is exactly the stored records, byte for byte
            assert broker.store is not None
            raw = [
                broker.store.select_one_message_by_offset(decode_offset_msg_id(r.ext_fields["msgId"]).offset)
                for r in (r1, r2)
            ]
            assert pulled.body == b"".join(x for x in raw if x is not None)

            again = await client.invoke(addr, pull_request("TopicTest", 1, max_msgs=1))
            assert again.code == 0 and again.ext_fields["nextBeginOffset"] == "2"
            assert [v.body for v in decode_records(again.body)] == [b"second"]
            empty = await client.invoke(addr, pull_request("TopicTest", 2))
            assert empty.code == ResponseCode.PULL_NOT_FOUND and empty.remark == "OFFSET_OVERFLOW_ONE"
            assert empty.ext_fields["nextBeginOffset"] == "2" and empty.body == b""

    run(main())


def test_batch_send(store_config: StoreConfig) -> None:
    async def main() -> None:
        async with running_broker(store_config) as (broker, client, addr):
            entries = [
                BatchEntry(
                    f"m{i}".encode(), encode_properties({"UNIQ_KEY": f"ID{i:030d}", "TAGS": "T"}).encode(), i
                )
                for i in range(3)
            ]
            request = send_request(
                "BatchTopic", encode_batch(entries), queue_id=1, code=RequestCode.SEND_BATCH_MESSAGE
            )
            request.ext_fields["m"] = "true"
            r = await client.invoke(addr, request)
            assert r.code == 0, r.remark
            ids = r.ext_fields["msgId"].split(",")
            assert len(ids) == 3 and r.ext_fields["queueOffset"] == "0" and r.ext_fields["queueId"] == "1"
            offsets = [decode_offset_msg_id(i).offset for i in ids]
            assert offsets == sorted(offsets)
            await dispatched(broker)
            pulled = await client.invoke(addr, pull_request("BatchTopic", 0, queue_id=1))
            views = decode_records(pulled.body)
            assert [v.body for v in views] == [b"m0", b"m1", b"m2"]
            assert [v.flag for v in views] == [0, 1, 2]
            assert [v.queue_offset for v in views] == [0, 1, 2]
            assert [v.physical_offset for v in views] == offsets
            assert [decode_properties(v.properties)["UNIQ_KEY"] for v in views] == [
                f"ID{i:030d}" for i in range(3)
            ]
            # batches to retry topics are refused
            retry = send_request("%RETRY%CG", encode_batch(entries), code=RequestCode.SEND_BATCH_MESSAGE)
            refused = await client.invoke(addr, retry)
            assert refused.code == ResponseCode.MESSAGE_ILLEGAL and "retry" in (refused.remark or "")

    run(main())


def test_an_offset_update_behind_a_held_pull_of_its_connection_keeps_its_order(
    store_config: StoreConfig,
) -> None:
    """UPDATE_CONSUMER_OFFSET is answered inside the read that brought it only while nothing
    else of its connection is being handled: one that arrives in the same read as a pull
    carrying a commit offset (the pull is held, its queue has nothing new) is stored after the
    pull's offset, as the order of the two requests says, and is answered while the pull waits."""

    async def main() -> None:
        async with running_broker(store_config) as (broker, client, addr):
            await client.invoke(addr, send_request("Ordered", b"x"))
            await dispatched(broker)
            first = await client.invoke(addr, pull_request("Ordered", 0))  # the group exists now
            assert first.code == ResponseCode.SUCCESS
            held = pull_request("Ordered", 1, suspend=True, suspend_ms=5_000, commit_offset=5)
            update = create_request(
                RequestCode.UPDATE_CONSUMER_OFFSET,
                {"consumerGroup": "CG", "topic": "Ordered", "queueId": 0, "commitOffset": 9},
            )
            host, port = addr.rsplit(":", 1)
            reader, writer = await asyncio.open_connection(host, int(port))
            try:
                writer.write(encode_frame(held) + encode_frame(update))  # one write, one read
                await writer.drain()
                decoder, answers = FrameDecoder(), []
                while not any(a.opaque == update.opaque for a in answers):
                    chunk = await asyncio.wait_for(reader.read(65536), WAIT_S)
                    assert chunk, "connection closed before the update was answered"
                    answers += decoder.feed(chunk)
                assert [a.code for a in answers if a.opaque == update.opaque] == [0]
                assert not any(a.opaque == held.opaque for a in answers)  # still held
                query = create_request(
                    RequestCode.QUERY_CONSUMER_OFFSET,
                    {"consumerGroup": "CG", "topic": "Ordered", "queueId": 0},
                )
                committed = await client.invoke(addr, query)
                assert committed.ext_fields["offset"] == "9"
            finally:
                writer.close()
                await writer.wait_closed()

    run(main())


def test_held_pull_answers_as_soon_as_a_message_arrives(store_config: StoreConfig) -> None:
    async def main() -> None:
        async with running_broker(store_config) as (broker, client, addr):
            assert broker.ctx is not None
            create = await client.invoke(addr, create_topic_request("Held", queues=2))
            assert create.code == 0, create.remark
            loop = asyncio.get_running_loop()
            began = loop.time()
            pull = asyncio.ensure_future(client.invoke(addr, pull_request("Held", 0, suspend=True), 30))
            await wait_until_async(
                lambda: broker.ctx is not None and broker.ctx.hold.held_count == 1,
                "the pull to be held",
                WAIT_S,
                0.005,
            )
            # a message on the other queue does not end the hold
            await client.invoke(addr, send_request("Held", b"other", queue_id=1))
            sent = await client.invoke(addr, send_request("Held", b"wake up"))
            assert sent.code == 0
            response = await pull
            elapsed = loop.time() - began
            assert response.code == 0, response.remark
            assert [v.body for v in decode_records(response.body)] == [b"wake up"]
            assert response.ext_fields["nextBeginOffset"] == "1"
            assert elapsed < SUSPEND_MS / 1000 / 3, elapsed
            assert broker.ctx.hold.wakeups["arrived"] + broker.ctx.hold.wakeups["checked"] >= 1

            # a tag filter: a non-matching arrival keeps the pull held, a matching one ends it
            pull = asyncio.ensure_future(
                client.invoke(addr, pull_request("Held", 1, suspend=True, subscription="TagA"), 30)
            )
            await wait_until_async(
                lambda: broker.ctx is not None and broker.ctx.hold.held_count == 1,
                "the tag pull",
                WAIT_S,
                0.005,
            )
            await client.invoke(addr, send_request("Held", b"b", properties={"TAGS": "TagB"}))
            assert broker.store is not None
            await asyncio.to_thread(broker.store.wait_dispatched, WAIT_S)
            assert not pull.done() and broker.ctx.hold.held_count == 1
            await client.invoke(addr, send_request("Held", b"a", properties={"TAGS": "TagA"}))
            response = await pull
            assert response.code == 0
            assert [v.body for v in decode_records(response.body)] == [b"a"]
            assert response.ext_fields["nextBeginOffset"] == "3"

    run(main())


def test_held_pull_times_out_with_pull_not_found(store_config: StoreConfig) -> None:
    async def main() -> None:
        async with running_broker(store_config) as (broker, client, addr):
            await client.invoke(addr, send_request("Quiet", b"x"))
            await dispatched(broker)
            loop = asyncio.get_running_loop()
            began = loop.time()
            response = await client.invoke(addr, pull_request("Quiet", 1, suspend=True, suspend_ms=300), 30)
            elapsed = loop.time() - began
            assert response.code == ResponseCode.PULL_NOT_FOUND
            assert response.ext_fields == {
                "nextBeginOffset": "1",
                "minOffset": "0",
                "maxOffset": "1",
                "suggestWhichBrokerId": "0",
            }
            assert 0.25 <= elapsed < 5, elapsed
            # without the SUSPEND flag the answer is immediate
            began = loop.time()
            response = await client.invoke(addr, pull_request("Quiet", 1))
            assert response.code == ResponseCode.PULL_NOT_FOUND and loop.time() - began < 0.25

    run(main())


def test_long_polling_disabled_holds_for_short_polling_time(store_config: StoreConfig) -> None:
    async def main() -> None:
        async with running_broker(store_config, long_polling_enable=False, short_polling_time_mills=200) as (
            broker,
            client,
            addr,
        ):
            await client.invoke(addr, send_request("Short", b"x"))
            await dispatched(broker)
            loop = asyncio.get_running_loop()
            began = loop.time()
            response = await client.invoke(addr, pull_request("Short", 1, suspend=True), 30)
            assert response.code == ResponseCode.PULL_NOT_FOUND
            assert 0.15 <= loop.time() - began < 5

    run(main())


def test_offset_moved_and_illegal(store_config: StoreConfig) -> None:
    async def main() -> None:
        async with running_broker(store_config) as (broker, client, addr):
            for i in range(3):
                await client.invoke(addr, send_request("Moves", f"m{i}".encode()))
            await dispatched(broker)
            too_far = await client.invoke(addr, pull_request("Moves", 10))
            assert (
                too_far.code == ResponseCode.PULL_OFFSET_MOVED and too_far.remark == "OFFSET_OVERFLOW_BADLY"
            )
            # RocketMQ: with min offset 0 the correction is to the min offset
            assert too_far.ext_fields["nextBeginOffset"] == "0"
            assert too_far.ext_fields["maxOffset"] == "3"
            empty_queue = await client.invoke(addr, pull_request("Moves", 5, queue_id=2))
            assert empty_queue.code == ResponseCode.PULL_OFFSET_MOVED
            assert empty_queue.ext_fields["nextBeginOffset"] == "0"
            empty_at_zero = await client.invoke(addr, pull_request("Moves", 0, queue_id=2))
            assert empty_at_zero.code == ResponseCode.PULL_NOT_FOUND
            bad_queue = await client.invoke(addr, pull_request("Moves", 0, queue_id=99))
            assert bad_queue.code == ResponseCode.INVALID_PARAMETER and "queueId[99]" in (
                bad_queue.remark or ""
            )
            unknown = await client.invoke(addr, pull_request("NoSuchTopic", 0))
            assert unknown.code == ResponseCode.TOPIC_NOT_EXIST
            # no SUBSCRIPTION flag and no heartbeat: the group's subscription is unknown
            no_sub = await client.invoke(addr, pull_request("Moves", 0, subscription=None))
            assert no_sub.code == ResponseCode.SUBSCRIPTION_NOT_EXIST
            filtered = await client.invoke(addr, pull_request("Moves", 0, subscription="NoSuchTag"))
            assert filtered.code == ResponseCode.PULL_RETRY_IMMEDIATELY
            assert filtered.ext_fields["nextBeginOffset"] == "3"

    run(main())


def test_regression_a_broker_that_is_not_master_never_moves_a_consumer_s_offset(
    store_config: StoreConfig,
) -> None:
    """Chaos campaign seed 128: consumers pulled from a DLedger member restarted after a kill,
    before it had rebuilt its queues; it answered PULL_OFFSET_MOVED to offset 0 and the consumers
    read every queue again. A slave, a follower or a leader not caught up yet answers
    PULL_RETRY_IMMEDIATELY at the requested offset instead (RocketMQ's nextOffsetCorrection with
    offsetCheckInSlave off); the master still moves it."""

    async def main() -> None:
        async with running_broker(store_config) as (broker, client, addr):
            for i in range(3):
                await client.invoke(addr, send_request("Moves", f"m{i}".encode()))
            await dispatched(broker)
            broker.ctx.is_master = False  # what the DLedger role handler sets on a follower
            for offset, queue_id in ((10, 0), (5, 2)):  # past the end; a queue with nothing yet
                kept = await client.invoke(addr, pull_request("Moves", offset, queue_id=queue_id))
                assert kept.code == ResponseCode.PULL_RETRY_IMMEDIATELY, kept
                assert kept.ext_fields["nextBeginOffset"] == str(offset)
            found = await client.invoke(addr, pull_request("Moves", 0))
            assert found.code == ResponseCode.SUCCESS
            broker.ctx.is_master = True
            moved = await client.invoke(addr, pull_request("Moves", 10))
            assert moved.code == ResponseCode.PULL_OFFSET_MOVED and moved.ext_fields["nextBeginOffset"] == "0"

    run(main())


def test_consumer_offsets_update_query_and_persist(store_config: StoreConfig) -> None:
    def query(topic: str, queue_id: int, **extra: str) -> RemotingCommand:
        return create_request(
            RequestCode.QUERY_CONSUMER_OFFSET,
            {"consumerGroup": "CG", "topic": topic, "queueId": queue_id, **extra},
        )

    async def main() -> None:
        async with running_broker(store_config) as (broker, client, addr):
            await client.invoke(addr, send_request("Offsets", b"x"))
            await dispatched(broker)
            # nothing committed: a queue that starts at 0 and is in memory answers 0 ...
            fresh = await client.invoke(addr, query("Offsets", 0))
            assert fresh.code == 0 and fresh.ext_fields["offset"] == "0"
            # ... unless the client asks not to
            not_found = await client.invoke(addr, query("Offsets", 0, setZeroIfNotFound="false"))
            assert not_found.code == ResponseCode.QUERY_NOT_FOUND
            update = create_request(
                RequestCode.UPDATE_CONSUMER_OFFSET,
                {"consumerGroup": "CG", "topic": "Offsets", "queueId": 0, "commitOffset": 1},
            )
            assert (await client.invoke(addr, update)).code == 0
            committed = await client.invoke(addr, query("Offsets", 0))
            assert committed.code == 0 and committed.ext_fields["offset"] == "1"
            unknown_topic = create_request(
                RequestCode.UPDATE_CONSUMER_OFFSET,
                {"consumerGroup": "CG", "topic": "Nope", "queueId": 0, "commitOffset": 1},
            )
            assert (await client.invoke(addr, unknown_topic)).code == ResponseCode.TOPIC_NOT_EXIST
            # a pull with the COMMIT_OFFSET flag commits the piggybacked offset
            await client.invoke(addr, pull_request("Offsets", 1, queue_id=1, commit_offset=7))
            piggy = await client.invoke(addr, query("Offsets", 1))
            assert piggy.ext_fields["offset"] == "7"

        path = pathlib.Path(store_config.store_path_root_dir) / "config" / "consumerOffset.json"
        text = path.read_text()
        assert "0:1" in text.replace("\t", "").replace("\n", "")  # fastjson style, unquoted queue ids
        assert fastjson.loads(text)["offsetTable"]["Offsets@CG"] == {"0": 1, "1": 7}
        async with running_broker(store_config) as (_broker, client, addr):
            after_restart = await client.invoke(addr, query("Offsets", 0))
            assert after_restart.ext_fields["offset"] == "1"

    run(main())


def test_heartbeat_membership_and_notify(store_config: StoreConfig) -> None:
    async def main() -> None:
        notified: asyncio.Queue[RemotingCommand] = asyncio.Queue()

        async def on_request(conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
            await notified.put(request)
            return None

        async with running_broker(store_config) as (broker, _client, addr):
            c1 = RemotingClient(on_request)
            c2 = RemotingClient()
            try:
                body1 = heartbeat_body("10.0.0.1@1", "CG", {"Members": "TagA", "%RETRY%CG": "*"})
                hb = await c1.invoke(addr, create_request(RequestCode.HEART_BEAT, body=body1))
                assert hb.code == 0 and hb.ext_fields["IS_SUPPORT_HEART_BEAT_V2"] == "false"
                first = await asyncio.wait_for(notified.get(), WAIT_S)  # its own join
                assert first.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED and first.is_oneway
                listing = await c1.invoke(
                    addr, create_request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "CG"})
                )
                assert listing.code == 0 and json.loads(listing.body) == {"consumerIdList": ["10.0.0.1@1"]}
                # the heartbeat created the group and its retry topic
                assert broker.ctx is not None
                retry = broker.ctx.topics.select("%RETRY%CG")
                assert retry is not None and (retry.read_queue_nums, retry.perm) == (1, 6)

                body2 = heartbeat_body("10.0.0.2@2", "CG", {"Members": "TagA", "%RETRY%CG": "*"})
                assert (await c2.invoke(addr, create_request(RequestCode.HEART_BEAT, body=body2))).code == 0
                change = await asyncio.wait_for(notified.get(), WAIT_S)
                assert change.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED
                assert change.ext_fields == {"consumerGroup": "CG"}
                listing = await c1.invoke(
                    addr, create_request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "CG"})
                )
                assert sorted(json.loads(listing.body)["consumerIdList"]) == ["10.0.0.1@1", "10.0.0.2@2"]

                # a pull without the SUBSCRIPTION flag filters by the heartbeat's subscription
                await c1.invoke(addr, send_request("Members", b"b", properties={"TAGS": "TagB"}))
                await c1.invoke(addr, send_request("Members", b"a", properties={"TAGS": "TagA"}))
                await dispatched(broker)
                pulled = await c1.invoke(addr, pull_request("Members", 0, subscription=None))
                assert pulled.code == 0
                assert [v.body for v in decode_records(pulled.body)] == [b"a"]

                # the second consumer goes away: the first is told again
                await c2.close()
                gone = await asyncio.wait_for(notified.get(), WAIT_S)
                assert gone.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED
                listing = await c1.invoke(
                    addr, create_request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "CG"})
                )
                assert json.loads(listing.body) == {"consumerIdList": ["10.0.0.1@1"]}
                unregister = create_request(
                    RequestCode.UNREGISTER_CLIENT, {"clientID": "10.0.0.1@1", "consumerGroup": "CG"}
                )
                assert (await c1.invoke(addr, unregister)).code == 0
                none = await c1.invoke(
                    addr, create_request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "CG"})
                )
                assert (
                    none.code == ResponseCode.SYSTEM_ERROR and none.remark == "no consumer for this group, CG"
                )
            finally:
                await c1.close()
                await c2.close()

    run(main())


def test_query_by_key_and_view_by_id(store_config: StoreConfig) -> None:
    async def main() -> None:
        async with running_broker(store_config) as (broker, client, addr):
            sent = []
            for i in range(3):
                r = await client.invoke(
                    addr, send_request("Keys", f"body{i}".encode(), properties={"KEYS": f"order-{i % 2} all"})
                )
                sent.append(r)
            assert broker.store is not None
            assert await asyncio.to_thread(broker.store.wait_dispatched, WAIT_S)
            now = time.time_ns() // 1_000_000
            query = create_request(
                RequestCode.QUERY_MESSAGE,
                {
                    "topic": "Keys",
                    "key": "order-0",
                    "maxNum": 32,
                    "beginTimestamp": 0,
                    "endTimestamp": now + 1000,
                },
            )
            found = await client.invoke(addr, query)
            assert found.code == 0, found.remark
            assert [v.body for v in decode_records(found.body)] == [b"body0", b"body2"]
            assert int(found.ext_fields["indexLastUpdateTimestamp"]) >= 0
            assert "indexLastUpdatePhyoffset" in found.ext_fields
            by_uniq = create_request(
                RequestCode.QUERY_MESSAGE,
                {
                    "topic": "Keys",
                    "key": sent[1].ext_fields["transactionId"],
                    "maxNum": 1,
                    "beginTimestamp": 0,
                    "endTimestamp": now + 1000,
                    "_UNIQUE_KEY_QUERY": "true",
                },
            )
            unique = await client.invoke(addr, by_uniq)
            assert [v.body for v in decode_records(unique.body)] == [b"body1"]
            missing = create_request(
                RequestCode.QUERY_MESSAGE,
                {
                    "topic": "Keys",
                    "key": "nope",
                    "maxNum": 32,
                    "beginTimestamp": 0,
                    "endTimestamp": now + 1000,
                },
            )
            not_found = await client.invoke(addr, missing)
            assert not_found.code == ResponseCode.QUERY_NOT_FOUND
            assert "indexLastUpdateTimestamp" in not_found.ext_fields

            offset = decode_offset_msg_id(sent[2].ext_fields["msgId"]).offset
            view = await client.invoke(
                addr, create_request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset})
            )
            assert view.code == 0
            (record,) = decode_records(view.body)
            assert record.body == b"body2" and record.physical_offset == offset
            bad = await client.invoke(
                addr, create_request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset + 1})
            )
            assert bad.code == ResponseCode.SYSTEM_ERROR and str(offset + 1) in (bad.remark or "")

    run(main())


def test_auto_create_topic_and_topic_admin(store_config: StoreConfig) -> None:
    async def main() -> None:
        async with running_broker(store_config) as (broker, client, addr):
            r = await client.invoke(addr, send_request("Fresh", b"x", queue_id=3, default_topic_queue_nums=4))
            assert r.code == 0, r.remark
            assert broker.ctx is not None
            fresh = broker.ctx.topics.select("Fresh")
            assert fresh is not None and (fresh.read_queue_nums, fresh.write_queue_nums, fresh.perm) == (
                4,
                4,
                6,
            )
            beyond = await client.invoke(addr, send_request("Fresh", b"x", queue_id=4))
            assert beyond.code == ResponseCode.INVALID_PARAMETER
            any_queue = await client.invoke(addr, send_request("Fresh", b"x", queue_id=-1))
            assert any_queue.code == 0 and 0 <= int(any_queue.ext_fields["queueId"]) < 4
            forbidden = await client.invoke(addr, send_request("SCHEDULE_TOPIC_XXXX", b"x"))
            assert forbidden.code == ResponseCode.NO_PERMISSION
            invalid = await client.invoke(addr, send_request("bad topic!", b"x"))
            assert invalid.code == ResponseCode.INVALID_PARAMETER

            all_topics = await client.invoke(addr, create_request(RequestCode.GET_ALL_TOPIC_CONFIG))
            body = json.loads(all_topics.body)
            assert body["topicConfigTable"]["Fresh"]["writeQueueNums"] == 4
            assert "TBW102" in body["topicConfigTable"] and "dataVersion" in body
            assert all_topics.ext_fields["totalTopicNum"] == str(len(body["topicConfigTable"]))

            await dispatched(broker)
            max_off = await client.invoke(
                addr, create_request(RequestCode.GET_MAX_OFFSET, {"topic": "Fresh", "queueId": 3})
            )
            assert max_off.ext_fields["offset"] == ("2" if any_queue.ext_fields["queueId"] == "3" else "1")
            min_off = await client.invoke(
                addr, create_request(RequestCode.GET_MIN_OFFSET, {"topic": "Unknown", "queueId": 0})
            )
            assert min_off.code == 0 and min_off.ext_fields["offset"] == "0"
            earliest = await client.invoke(
                addr, create_request(RequestCode.GET_EARLIEST_MSG_STORETIME, {"topic": "Fresh", "queueId": 3})
            )
            assert abs(int(earliest.ext_fields["timestamp"]) - time.time() * 1000) < 60_000
            by_time = await client.invoke(
                addr,
                create_request(
                    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": "Fresh", "queueId": 3, "timestamp": 0}
                ),
            )
            assert by_time.code == 0 and by_time.ext_fields["offset"] == "0"
            info = await client.invoke(addr, create_request(RequestCode.GET_BROKER_RUNTIME_INFO))
            table = json.loads(info.body)["table"]
            assert table["brokerVersionDesc"] == "V5_3_3"
            assert int(table["msgPutTotalTodayNow"]) >= 2
            assert len(table["putTps"].split()) == 3

        topics_json = pathlib.Path(store_config.store_path_root_dir) / "config" / "topics.json"
        assert "Fresh" in json.loads(topics_json.read_text())["topicConfigTable"]

    run(main())


def test_auto_create_disabled(store_config: StoreConfig) -> None:
    async def main() -> None:
        async with running_broker(store_config, auto_create_topic_enable=False) as (_broker, client, addr):
            r = await client.invoke(addr, send_request("NotThere", b"x"))
            assert r.code == ResponseCode.TOPIC_NOT_EXIST and "NotThere" in (r.remark or "")

    run(main())


def test_oversize_body_is_refused_and_the_broker_keeps_serving(store_config: StoreConfig) -> None:
    small = dataclasses.replace(store_config, max_message_size=1024)

    async def main() -> None:
        async with running_broker(small) as (_broker, client, addr):
            big = await client.invoke(addr, send_request("Sizes", b"x" * 2000))
            assert big.code == ResponseCode.MESSAGE_ILLEGAL
            assert "2000" in (big.remark or "") and "1024" in (big.remark or "")
            ok = await client.invoke(addr, send_request("Sizes", b"x" * 1000))
            assert ok.code == 0 and ok.ext_fields["queueOffset"] == "0"

    run(main())


def test_unknown_request_code(store_config: StoreConfig) -> None:
    async def main() -> None:
        async with running_broker(store_config) as (_broker, client, addr):
            r = await client.invoke(addr, create_request(9999, {}))
            assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            assert r.remark == " request type 9999 not supported"

    run(main())


def test_send_back_to_retry_and_dead_letter(store_config: StoreConfig) -> None:
    async def main() -> None:
        async with running_broker(store_config) as (broker, client, addr):
            sent = await client.invoke(addr, send_request("Orders", b"payload", properties={"TAGS": "A"}))
            offset = decode_offset_msg_id(sent.ext_fields["msgId"]).offset
            back = create_request(
                RequestCode.CONSUMER_SEND_MSG_BACK,
                {"offset": offset, "group": "CG", "delayLevel": 0, "originMsgId": sent.ext_fields["msgId"]},
            )
            r = await client.invoke(addr, back)
            assert r.code == 0, r.remark
            assert broker.store is not None
            # first retry: delay level 3 (queue 2 of SCHEDULE_TOPIC_XXXX), 10 s later to %RETRY%CG
            await wait_until_async(
                lambda: (
                    broker.store is not None and broker.store.get_max_offset("SCHEDULE_TOPIC_XXXX", 2) == 1
                ),
                "the retry to reach the schedule queue",
                WAIT_S,
                0.005,
            )
            # reconsumed too often: straight to the dead-letter queue
            dead = create_request(
                RequestCode.CONSUMER_SEND_MSG_BACK,
                {"offset": offset, "group": "CG", "delayLevel": 0, "maxReconsumeTimes": 0},
            )
            assert (await client.invoke(addr, dead)).code == 0
            await wait_until_async(
                lambda: broker.store is not None and broker.store.get_max_offset("%DLQ%CG", 0) == 1,
                "the DLQ",
                WAIT_S,
                0.005,
            )
            pulled = await client.invoke(addr, pull_request("%DLQ%CG", 0))
            (view,) = decode_records(pulled.body)
            props = decode_properties(view.properties)
            assert view.body == b"payload" and view.reconsume_times == 1
            assert props["RETRY_TOPIC"] == "Orders" and props["ORIGIN_MESSAGE_ID"] == sent.ext_fields["msgId"]
            assert "DELAY" not in props
            missing = create_request(
                RequestCode.CONSUMER_SEND_MSG_BACK, {"offset": offset + 3, "group": "CG", "delayLevel": 0}
            )
            failed = await client.invoke(addr, missing)
            assert failed.code == ResponseCode.SYSTEM_ERROR and "look message by offset failed" in (
                failed.remark or ""
            )

    run(main())


def test_retry_topic_send_moves_to_dlq_after_max_reconsume(store_config: StoreConfig) -> None:
    async def main() -> None:
        async with running_broker(store_config) as (broker, client, addr):
            ok = await client.invoke(
                addr, send_request("%RETRY%G1", b"again", reconsume_times=1, max_reconsume_times=16)
            )
            assert ok.code == 0
            dead = await client.invoke(
                addr, send_request("%RETRY%G1", b"dead", reconsume_times=17, max_reconsume_times=16)
            )
            assert dead.code == 0
            assert broker.ctx is not None and broker.ctx.topics.select("%DLQ%G1") is not None
            await dispatched(broker)
            pulled = await client.invoke(addr, pull_request("%DLQ%G1", 0, group="G1"))
            assert [v.body for v in decode_records(pulled.body)] == [b"dead"]

    run(main())


def test_shutdown_answers_held_pulls_and_removes_the_abort_file(store_config: StoreConfig) -> None:
    async def main() -> None:
        broker = Broker(broker_config(), store_config)
        await broker.start()
        client = RemotingClient()
        try:
            addr = f"127.0.0.1:{broker.port}"
            await client.invoke(addr, send_request("Down", b"x"))
            await dispatched(broker)
            pull = asyncio.ensure_future(client.invoke(addr, pull_request("Down", 1, suspend=True), 30))
            await wait_until_async(
                lambda: broker.ctx is not None and broker.ctx.hold.held_count == 1,
                "the held pull",
                WAIT_S,
                0.005,
            )
            await broker.shutdown()
            response = await pull
            assert response.code == ResponseCode.PULL_NOT_FOUND
        finally:
            await client.close()
            await broker.shutdown()
        assert not (pathlib.Path(store_config.store_path_root_dir) / "abort").exists()

    run(main())


def test_registers_with_the_name_server(store_config: StoreConfig) -> None:
    namesrv_server = pytest.importorskip(
        "rocketq.namesrv.server", reason="rocketq.namesrv.server.NameServer is not available"
    )
    if not hasattr(namesrv_server, "NameServer"):
        pytest.skip("rocketq.namesrv.server has no NameServer yet")
    NameServer = namesrv_server.NameServer
    NamesrvConfig = namesrv_server.NamesrvConfig

    async def main() -> None:
        namesrv = NameServer(NamesrvConfig(listen_port=0, bind_address="127.0.0.1"))
        await namesrv.start()
        try:
            ns_addr = f"127.0.0.1:{namesrv.port}"
            async with running_broker(store_config, namesrv_addr=ns_addr) as (broker, client, addr):
                created = await client.invoke(addr, create_topic_request("Routed", queues=3))
                assert created.code == 0

                async def route() -> RemotingCommand:
                    return await client.invoke(
                        ns_addr, create_request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Routed"})
                    )

                async def routed() -> RemotingCommand | None:
                    answer = await route()
                    return answer if answer.code == 0 else None

                answer = await wait_until_async(routed, "the route of Routed", WAIT_S)
                data = json.loads(answer.body)
                (queue,) = data["queueDatas"]
                assert queue["brokerName"] == "broker-a"
                assert (queue["readQueueNums"], queue["writeQueueNums"], queue["perm"]) == (3, 3, 6)
                (broker_data,) = data["brokerDatas"]
                assert broker_data["brokerAddrs"] == {"0": broker.broker_addr}
                assert broker_data["cluster"] == "DefaultCluster"
                tbw = await client.invoke(
                    ns_addr, create_request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})
                )
                assert tbw.code == 0 and json.loads(tbw.body)["queueDatas"][0]["perm"] == 7
            # shutdown unregistered the broker
            async with RemotingClient() as client:

                async def unrouted() -> bool:
                    request = create_request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Routed"})
                    return (await client.invoke(ns_addr, request)).code == ResponseCode.TOPIC_NOT_EXIST

                await wait_until_async(unrouted, "Routed to lose its route", WAIT_S)
        finally:
            await namesrv.close()

    run(main())


def test_sync_flush_and_disk_full(store_config: StoreConfig) -> None:
    sync = dataclasses.replace(store_config, flush_disk_type=FlushDiskType.SYNC_FLUSH)

    async def main() -> None:
        async with running_broker(sync) as (broker, client, addr):
            sends = [client.invoke(addr, send_request("Durable", f"m{i}".encode())) for i in range(20)]
            responses = await asyncio.gather(*sends)
            assert all(r.code == 0 for r in responses), [r.remark for r in responses]
            assert sorted(int(r.ext_fields["queueOffset"]) for r in responses) == list(range(20))
            await dispatched(broker)
            pulled = await client.invoke(addr, pull_request("Durable", 0))
            assert len(decode_records(pulled.body)) == 20
            assert broker.store is not None
            broker.store.commitlog.set_writable(False, "disk 96% full (limit 85%)", error=DiskFull)
            full = await client.invoke(addr, send_request("Durable", b"y"))
            assert full.code == ResponseCode.SERVICE_NOT_AVAILABLE
            assert "85%" in (full.remark or "")
            # reads and the rest of the protocol keep working
            still = await client.invoke(addr, pull_request("Durable", 19))
            assert still.code == 0
            broker.store.commitlog.set_writable(True)
            again = await client.invoke(addr, send_request("Durable", b"z"))
            assert again.code == 0 and again.ext_fields["queueOffset"] == "20"

    run(main())


def test_orderly_consumer_locks(store_config: StoreConfig) -> None:
    def lock(code: int, client_id: str, *queues: int) -> RemotingCommand:
        body = {
            "consumerGroup": "CG",
            "clientId": client_id,
            "onlyThisBroker": False,
            "mqSet": [{"topic": "T", "brokerName": "broker-a", "queueId": q} for q in queues],
        }
        return create_request(code, body=json.dumps(body).encode())

    async def main() -> None:
        async with running_broker(store_config) as (_broker, client, addr):
            first = await client.invoke(addr, lock(RequestCode.LOCK_BATCH_MQ, "a@1", 0, 1))
            assert first.code == 0
            assert sorted(m["queueId"] for m in json.loads(first.body)["lockOKMQSet"]) == [0, 1]
            second = await client.invoke(addr, lock(RequestCode.LOCK_BATCH_MQ, "b@2", 1, 2))
            assert [m["queueId"] for m in json.loads(second.body)["lockOKMQSet"]] == [2]
            assert (await client.invoke(addr, lock(RequestCode.UNLOCK_BATCH_MQ, "a@1", 1))).code == 0
            third = await client.invoke(addr, lock(RequestCode.LOCK_BATCH_MQ, "b@2", 1))
            assert [m["queueId"] for m in json.loads(third.body)["lockOKMQSet"]] == [1]
            bad = await client.invoke(addr, create_request(RequestCode.LOCK_BATCH_MQ, body=b"not json"))
            assert bad.code == ResponseCode.SYSTEM_ERROR

    run(main())
