"""Broker fault tests with real processes: ``rocketq serve`` killed with SIGKILL under load.

What rocketq guarantees, and what these tests check:

* **Acknowledged sends survive a crash (SYNC_FLUSH).** A send answered with code 0 is on disk
  before the answer leaves, and so is the topic it went to (a send that creates its topic is
  answered only once ``topics.json`` holds it). After SIGKILL and a restart on the same data
  directory every acknowledged message can be pulled at the queue offset its answer named, with
  the same body, UNIQ_KEY and offset message id; each queue's offsets run 0, 1, 2, ... without
  a gap; no message is stored twice; a stored message that was never acknowledged is one whose
  send was in flight when the process died (at most one per sender) or was answered
  FLUSH_DISK_TIMEOUT. Four kill rounds on one data directory, then a clean stop and a last check.
  The first send to a topic creates it; SIGKILL right after that ack does not lose the topic.
* **Consumer offsets never skip.** UPDATE_CONSUMER_OFFSET changes the table in memory; the
  broker writes it every ``flush_consumer_offset_interval_ms`` (5 s) and at shutdown, as
  RocketMQ does. After SIGKILL, QUERY_CONSUMER_OFFSET answers, per queue, an offset that is at
  least the last one seen persisted on disk before the kill and at most the highest offset the
  broker acknowledged: a consumer re-reads at most what it committed since the last write,
  never skips a message, and every message from that offset on is still pullable.
* **A clean stop keeps the exact offsets.** After SIGTERM (exit code 0, no abort file left) the
  offsets answered are exactly the last ones committed.

The kill points are random; the seed is printed and ``ROCKETQ_FAULT_SEED`` replays a run. Waits
are on conditions with deadlines, never fixed sleeps.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import pathlib
import random
import time
import uuid
from collections.abc import AsyncIterator, Coroutine, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
from procs import ServeProcess, small_store_config

from _support.requests import create_topic_request, pull_request, send_request
from _support.wait import wait_until_async
from rocketq.broker import Broker, BrokerConfig
from rocketq.config import FlushDiskType
from rocketq.errors import RemotingError, ResponseCode
from rocketq.message import create_offset_msg_id, decode_properties, encode_properties
from rocketq.protocol import fastjson
from rocketq.protocol import record as rec
from rocketq.protocol.batch import BatchEntry, encode_batch
from rocketq.protocol.headers import SendMessageRequestHeader
from rocketq.remoting import RemotingClient, RemotingCommand, RequestCode, create_request

pytestmark = pytest.mark.slow  # SIGKILLs the broker process

T = TypeVar("T")

BROKER_NAME = "broker-a"
QUEUES = 4
SENDERS = 8
KILL_ROUNDS = 4
WAIT_S = 15.0  # bound for anything that should happen promptly
CALL_TIMEOUT_S = 10.0
POLL_S = 0.01


def run(coro: Coroutine[Any, Any, T], limit_s: float = 120.0) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, limit_s)

    return asyncio.run(bounded())


@pytest.fixture
def seed() -> int:
    value = int(os.environ.get("ROCKETQ_FAULT_SEED") or random.randrange(1 << 32))
    print(f"ROCKETQ_FAULT_SEED={value}")
    return value


# -- the server process ---------------------------------------------------------------------


@pytest.fixture
def serve(tmp_path: pathlib.Path) -> Iterator[ServeProcess]:
    server = ServeProcess(tmp_path, flush="SYNC_FLUSH", broker_name=BROKER_NAME)
    try:
        yield server
    finally:
        server.close()


# -- requests as a Java client sends them -----------------------------------------------------


def send_v2(topic: str, queue_id: int, body: bytes, uniq_key: str, keys: str) -> RemotingCommand:
    """SEND_MESSAGE_V2 as DefaultMQProducer sends it to a topic it knows only from TBW102."""
    return send_request(
        topic,
        body,
        queue_id=queue_id,
        group="FaultProducerGroup",
        properties={"KEYS": keys, "TAGS": "TagA", "UNIQ_KEY": uniq_key, "WAIT": "true"},
        default_topic_queue_nums=QUEUES,
        reconsume_times=0,
        broker_name=BROKER_NAME,
    )


def send_batch(topic: str, queue_id: int, bodies: list[bytes]) -> RemotingCommand:
    entries = [
        BatchEntry(b, encode_properties({"UNIQ_KEY": uuid.uuid4().hex.upper(), "WAIT": "true"}).encode())
        for b in bodies
    ]
    header = SendMessageRequestHeader(
        producer_group="FaultProducerGroup",
        topic=topic,
        default_topic="TBW102",
        default_topic_queue_nums=QUEUES,
        queue_id=queue_id,
        sys_flag=0,
        born_timestamp=time.time_ns() // 1_000_000,
        flag=0,
        properties="",
        batch=True,
    )
    return create_request(
        RequestCode.SEND_BATCH_MESSAGE, header.to_ext_fields(v2=True), encode_batch(entries)
    )


def pull(topic: str, queue_id: int, offset: int, group: str, max_msgs: int = 32) -> RemotingCommand:
    return pull_request(
        topic, offset, queue_id=queue_id, group=group, max_msgs=max_msgs, suspend_ms=0, expression_type="TAG"
    )


def decode_records(body: bytes) -> list[rec.RecordView]:
    views = []
    pos = 0
    while pos < len(body):
        view = rec.decode_record(body, pos, check_crc=True)
        assert view.kind is rec.RecordKind.MESSAGE, view.reason
        views.append(view)
        pos += view.size
    return views


async def call_ok(client: RemotingClient, addr: str, request: RemotingCommand) -> RemotingCommand:
    response = await client.invoke(addr, request, CALL_TIMEOUT_S)
    assert response.code == ResponseCode.SUCCESS, (request.code, response.code, response.remark)
    return response


async def max_offset(client: RemotingClient, addr: str, topic: str, queue_id: int) -> int:
    r = await call_ok(
        client, addr, create_request(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": queue_id})
    )
    return int(r.ext_fields["offset"])


async def read_queue(
    client: RemotingClient, addr: str, topic: str, queue_id: int, start: int = 0, group: str = "FaultVerifier"
) -> list[rec.RecordView]:
    """Every message of the queue from ``start`` to its end; asserts offsets run without a gap."""
    out: list[rec.RecordView] = []
    offset = start
    while True:
        r = await client.invoke(addr, pull(topic, queue_id, offset, group), CALL_TIMEOUT_S)
        if r.code == ResponseCode.PULL_NOT_FOUND:
            assert int(r.ext_fields["nextBeginOffset"]) == offset, r.ext_fields
            return out
        assert r.code == ResponseCode.SUCCESS, (topic, queue_id, offset, r.code, r.remark)
        views = decode_records(r.body)
        assert views, f"{topic}/{queue_id}: FOUND at {offset} with an empty body"
        for i, view in enumerate(views):
            assert (view.topic, view.queue_id) == (topic, queue_id)
            assert view.queue_offset == offset + i, (
                f"{topic}/{queue_id}: gap, offset {view.queue_offset} where {offset + i} was due"
            )
        offset += len(views)
        assert int(r.ext_fields["nextBeginOffset"]) == offset, r.ext_fields
        out.extend(views)


# -- (a) acknowledged sends survive SIGKILL ---------------------------------------------------


@dataclass(frozen=True)
class Acked:
    topic: str
    queue_id: int
    queue_offset: int
    msg_id: str
    digest: str
    uniq_key: str
    key: str


@dataclass
class Load:
    """What the senders of one kill round did."""

    round_no: int
    target: int
    acked: list[Acked]
    attempted: dict[str, str]  # key -> body digest, for every send that left the client
    unexpected: list[str]
    reached: asyncio.Event
    flush_timeouts: int = 0  # answered FLUSH_DISK_TIMEOUT: stored, but not acknowledged


def digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def key_of(properties: str) -> str:
    return decode_properties(properties).get("KEYS", "")


async def sender(addr: str, topic: str, load: Load, sender_no: int, rng: random.Random) -> None:
    """Send until the connection dies; record every send the broker answered with code 0."""
    async with RemotingClient() as client:
        seq = 0
        while True:
            key = f"r{load.round_no}-s{sender_no}-{seq}"
            body = key.encode() + b":" + rng.randbytes(rng.randint(8, 700))
            uniq_key = uuid.uuid4().hex.upper()
            queue_id = rng.randrange(QUEUES)
            load.attempted[key] = digest(body)
            try:
                r = await client.invoke(addr, send_v2(topic, queue_id, body, uniq_key, key), CALL_TIMEOUT_S)
            except RemotingError:
                return  # the server is gone
            seq += 1
            if r.code != ResponseCode.SUCCESS:
                # FLUSH_DISK_TIMEOUT (10) is allowed (stored, not confirmed on disk); nothing else
                if r.code == ResponseCode.FLUSH_DISK_TIMEOUT:
                    load.flush_timeouts += 1
                else:
                    load.unexpected.append(f"{key}: code {r.code} {r.remark}")
                continue
            ext = r.ext_fields
            assert ext["queueId"] == str(queue_id) and ext["transactionId"] == uniq_key, ext
            load.acked.append(
                Acked(topic, queue_id, int(ext["queueOffset"]), ext["msgId"], digest(body), uniq_key, key)
            )
            if len(load.acked) >= load.target:
                load.reached.set()


async def verify_topic(
    client: RemotingClient,
    addr: str,
    topic: str,
    acked: list[Acked],
    attempted: dict[str, str],
    what: str,
) -> dict[int, list[rec.RecordView]]:
    """Every acknowledged message is at its offset, unchanged; queues have no gaps; nothing is
    stored twice; anything else stored is a send that was attempted."""
    need = [0] * QUEUES
    for a in acked:
        need[a.queue_id] = max(need[a.queue_id], a.queue_offset + 1)

    # Recovery rebuilds the consume queues up to the checkpoint; the rest is dispatched
    # right after start. Wait until the queues cover what was acknowledged.
    for q in range(QUEUES):
        await until_max_offset(client, addr, topic, q, need[q])

    queues = {q: await read_queue(client, addr, topic, q) for q in range(QUEUES)}
    for q, views in queues.items():
        assert len(views) >= need[q], f"{what}: queue {q} holds {len(views)} messages, {need[q]} acknowledged"

    for a in acked:
        view = queues[a.queue_id][a.queue_offset]
        got = (
            view.topic,
            view.queue_id,
            view.queue_offset,
            create_offset_msg_id(view.store_host, view.physical_offset),
            digest(view.body or b""),
            decode_properties(view.properties).get("UNIQ_KEY", ""),
            key_of(view.properties),
        )
        want = (a.topic, a.queue_id, a.queue_offset, a.msg_id, a.digest, a.uniq_key, a.key)
        assert got == want, f"{what}: acknowledged message differs after restart"

    seen: set[str] = set()
    for q, views in queues.items():
        for view in views:
            key = key_of(view.properties)
            assert key not in seen, f"{what}: message {key} stored twice (second at {q}/{view.queue_offset})"
            seen.add(key)
            assert attempted.get(key) == digest(view.body or b""), (
                f"{what}: {q}/{view.queue_offset} holds {key!r}, which no sender sent with that body"
            )
    return queues


def test_acknowledged_sends_survive_sigkill_under_load(serve: ServeProcess, seed: int) -> None:
    """(a) Several SYNC_FLUSH producers; SIGKILL after a random number of acks, restart, check;
    repeated on the same data directory, then a clean stop and one more check."""
    rng = random.Random(seed)
    topic = "FaultTopic"

    async def main() -> None:
        all_acked: list[Acked] = []
        attempted: dict[str, str] = {}
        stored_before = 0
        addr = serve.start()
        for round_no in range(KILL_ROUNDS):
            load = Load(round_no, rng.randint(50, 1500), [], attempted, [], asyncio.Event())
            senders = [
                asyncio.create_task(sender(addr, topic, load, n, random.Random(rng.random())))
                for n in range(SENDERS)
            ]
            waiter = asyncio.create_task(load.reached.wait())
            done, _ = await asyncio.wait([waiter, *senders], timeout=60, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task is not waiter and task.exception() is not None:
                    raise AssertionError(f"round {round_no}: a sender failed") from task.exception()
            assert waiter in done, (
                f"round {round_no}: {len(load.acked)} of {load.target} acks; "
                f"unexpected: {load.unexpected[:5]}\n{serve.log_text()}"
            )
            serve.kill()  # in the middle of the load: every sender has a send in flight or about to
            await asyncio.wait_for(asyncio.gather(*senders), WAIT_S)
            assert not load.unexpected, f"round {round_no}: {load.unexpected[:5]}"
            all_acked.extend(load.acked)

            addr = serve.start()
            async with RemotingClient() as client:
                queues = await verify_topic(
                    client, addr, topic, all_acked, attempted, f"round {round_no} (seed {seed})"
                )
            stored = sum(len(v) for v in queues.values())
            # Stored but never acknowledged: only sends in flight at the kill (one per sender)
            # and sends answered FLUSH_DISK_TIMEOUT.
            extra = stored - stored_before - len(load.acked)
            assert 0 <= extra <= SENDERS + load.flush_timeouts, (
                f"round {round_no}: {extra} unacknowledged messages stored"
            )
            stored_before = stored
            print(f"round {round_no}: killed after {len(load.acked)} acks; {extra} in flight stored")

        assert serve.terminate() == 0, serve.log_text()
        assert not (serve.store_dir / "abort").exists(), "clean shutdown left the abort file"
        addr = serve.start()
        async with RemotingClient() as client:
            queues = await verify_topic(client, addr, topic, all_acked, attempted, "after a clean stop")
        assert sum(len(v) for v in queues.values()) == stored_before
        assert len({a.key for a in all_acked}) == len(all_acked)

    run(main())


def test_send_that_creates_its_topic_survives_sigkill(serve: ServeProcess) -> None:
    """The first send to a new topic auto-creates it; SIGKILL right after its ack must not
    lose the topic (and with it the message) on restart."""

    async def main() -> None:
        addr = serve.start()
        sent: list[tuple[str, bytes, int]] = []
        for round_no in range(3):
            topic = f"NewTopic{round_no}"
            body = f"first message of {topic}".encode()
            async with RemotingClient() as client:
                r = await call_ok(client, addr, send_v2(topic, 2, body, uuid.uuid4().hex.upper(), topic))
                serve.kill()  # right after the ack
            sent.append((topic, body, int(r.ext_fields["queueOffset"])))
            addr = serve.start()
            async with RemotingClient() as client:
                for t, b, offset in sent:
                    await until_max_offset(client, addr, t, 2, offset + 1)
                    views = await read_queue(client, addr, t, 2)
                    assert [v.body for v in views] == [b], (t, views)

    run(main())


async def until_max_offset(client: RemotingClient, addr: str, topic: str, queue_id: int, want: int) -> None:
    async def reached() -> bool:
        return await max_offset(client, addr, topic, queue_id) >= want

    await wait_until_async(reached, f"{topic}/{queue_id} to reach offset {want}", WAIT_S, POLL_S)


def test_new_topic_is_on_disk_before_the_send_is_answered(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In process, with a slow disk for metadata files: the answer to a send that created its
    topic, and to UPDATE_AND_CREATE_TOPIC, comes only once topics.json holds the topic."""
    real_persist = fastjson.persist

    def slow_persist(path: str, text: str) -> None:
        if path.endswith("topics.json"):
            time.sleep(0.3)  # a slow disk, not a synchronisation
        real_persist(path, text)

    monkeypatch.setattr(fastjson, "persist", slow_persist)
    store_config = small_store_config(tmp_path / "store", flush_disk_type=FlushDiskType.SYNC_FLUSH)
    broker_config = BrokerConfig(
        broker_name=BROKER_NAME,
        broker_ip1="127.0.0.1",
        bind_address="127.0.0.1",
        listen_port=0,
        namesrv_addr=None,
    )
    topics_json = tmp_path / "store" / "config" / "topics.json"

    def on_disk() -> set[str]:
        obj = fastjson.load_file(str(topics_json))
        return set(obj["topicConfigTable"]) if isinstance(obj, dict) else set()

    @asynccontextmanager
    async def running() -> AsyncIterator[tuple[RemotingClient, str]]:
        broker = Broker(broker_config, store_config)
        await broker.start()
        try:
            async with RemotingClient() as client:
                yield client, f"127.0.0.1:{broker.port}"
        finally:
            await broker.shutdown()

    async def main() -> None:
        async with running() as (client, addr):
            await call_ok(client, addr, send_v2("AutoCreated", 0, b"x", uuid.uuid4().hex.upper(), "k"))
            assert "AutoCreated" in on_disk()
            await call_ok(client, addr, create_topic_request("AdminCreated", queues=4))
            assert "AdminCreated" in on_disk()
            await call_ok(client, addr, send_batch("BatchCreated", 1, [b"a", b"b"]))
            assert "BatchCreated" in on_disk()

    run(main())


# -- (b) consumer offsets ---------------------------------------------------------------------


OFFSET_TOPIC = "OffsetTopic"
GROUP = "FaultConsumerGroup"


def commit(topic: str, queue_id: int, offset: int) -> RemotingCommand:
    return create_request(
        RequestCode.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": GROUP, "topic": topic, "queueId": queue_id, "commitOffset": offset},
    )


async def query_offsets(client: RemotingClient, addr: str) -> list[int]:
    out = []
    for q in range(QUEUES):
        r = await call_ok(
            client,
            addr,
            create_request(
                RequestCode.QUERY_CONSUMER_OFFSET,
                {"consumerGroup": GROUP, "topic": OFFSET_TOPIC, "queueId": q, "setZeroIfNotFound": "true"},
            ),
        )
        out.append(int(r.ext_fields["offset"]))
    return out


def persisted_offsets(serve: ServeProcess) -> dict[int, int]:
    """The group's offsets in consumerOffset.json as the broker last wrote it."""
    obj = fastjson.load_file(str(serve.store_dir / "config" / "consumerOffset.json"))
    if not isinstance(obj, dict):
        return {}
    table = obj.get("offsetTable") or {}
    queues = table.get(f"{OFFSET_TOPIC}@{GROUP}") or {}
    return {int(q): int(o) for q, o in queues.items()}


class Consumer:
    """Pulls a queue in small batches and commits with UPDATE_CONSUMER_OFFSET after each."""

    def __init__(self, client: RemotingClient, addr: str, start: list[int]) -> None:
        self.client = client
        self.addr = addr
        self.pulled = list(start)  # next offset to pull
        self.committed = list(start)  # highest offset the broker acknowledged a commit of

    async def step(self, queue_id: int, rng: random.Random) -> None:
        offset = self.pulled[queue_id]
        r = await self.client.invoke(
            self.addr, pull(OFFSET_TOPIC, queue_id, offset, GROUP, rng.randint(1, 6)), CALL_TIMEOUT_S
        )
        if r.code == ResponseCode.PULL_NOT_FOUND:
            return
        assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
        views = decode_records(r.body)
        assert [v.queue_offset for v in views] == list(range(offset, offset + len(views)))
        assert [v.body for v in views] == [
            offset_body(queue_id, o) for o in range(offset, offset + len(views))
        ]
        self.pulled[queue_id] = offset + len(views)
        await call_ok(self.client, self.addr, commit(OFFSET_TOPIC, queue_id, self.pulled[queue_id]))
        self.committed[queue_id] = self.pulled[queue_id]


def offset_body(queue_id: int, offset: int) -> bytes:
    return f"queue {queue_id} message {offset}".encode()


def test_consumer_offsets_resume_without_skipping(serve: ServeProcess, seed: int) -> None:
    """(b) Commit while pulling; SIGKILL: the offset answered after restart lies between the
    last persisted and the highest committed one, and everything after it is pullable. Then a
    SIGTERM restart keeps the exact committed offsets."""
    rng = random.Random(seed)
    per_queue = 600

    async def main() -> None:
        addr = serve.start()
        async with RemotingClient() as client:
            await call_ok(client, addr, create_topic_request(OFFSET_TOPIC, queues=QUEUES))
            for q in range(QUEUES):
                for begin in range(0, per_queue, 32):
                    bodies = [offset_body(q, o) for o in range(begin, min(per_queue, begin + 32))]
                    r = await call_ok(client, addr, send_batch(OFFSET_TOPIC, q, bodies))
                    assert int(r.ext_fields["queueOffset"]) == begin
            for q in range(QUEUES):
                await until_max_offset(client, addr, OFFSET_TOPIC, q, per_queue)

            consumer = Consumer(client, addr, await query_offsets(client, addr))
            assert consumer.pulled == [0] * QUEUES

            # Part 1: consume some of every queue, then wait for the periodic write to hold
            # exactly that.
            for q in [*range(QUEUES), *(rng.randrange(QUEUES) for _ in range(rng.randint(20, 80)))]:
                await consumer.step(q, rng)
            first = list(consumer.committed)
            await wait_until_async(
                lambda: persisted_offsets(serve) == dict(enumerate(first)),
                "the periodic consumer offset write",
                3 * 5.0,
                POLL_S,
            )
            # Part 2: commit more while pulling, and kill at a random moment.
            for _ in range(rng.randint(1, 60)):
                await consumer.step(rng.randrange(QUEUES), rng)
            on_disk = persisted_offsets(serve)
            serve.kill()
            highest = list(consumer.committed)
        assert all(h >= f for h, f in zip(highest, first, strict=True))

        addr = serve.start()
        async with RemotingClient() as client:
            resumed = await query_offsets(client, addr)
            print(
                f"persisted {first} (on disk at the kill {on_disk}), committed {highest}, resumed {resumed}"
            )
            for q in range(QUEUES):
                assert on_disk.get(q, 0) <= resumed[q] <= highest[q], (q, on_disk, resumed, highest)
                await until_max_offset(client, addr, OFFSET_TOPIC, q, per_queue)
                rest = await read_queue(client, addr, OFFSET_TOPIC, q, start=resumed[q], group=GROUP)
                assert [v.body for v in rest] == [offset_body(q, o) for o in range(resumed[q], per_queue)]

            # Consume on from there, then stop cleanly: the exact offsets come back.
            consumer = Consumer(client, addr, resumed)
            for _ in range(rng.randint(10, 60)):
                await consumer.step(rng.randrange(QUEUES), rng)
            final = list(consumer.committed)
        assert serve.terminate() == 0, serve.log_text()
        assert not (serve.store_dir / "abort").exists(), "clean shutdown left the abort file"
        assert persisted_offsets(serve) == dict(enumerate(final))

        addr = serve.start()
        async with RemotingClient() as client:
            assert await query_offsets(client, addr) == final
        assert serve.terminate() == 0

    run(main())
