"""The producer SDK (sync facade and asyncio core) against in-process name server + brokers.

The servers run on their own event loop in a helper thread (like separate processes would), so
the sync ``Producer`` (its own private loop thread) and ``AsyncProducer`` (``asyncio.run`` in the
test thread) talk to them over real TCP on 127.0.0.1. Messages are verified by PULL_MESSAGE over
the wire. Every wait is on a condition with a deadline.
"""

from __future__ import annotations

import asyncio
import pathlib
import threading
import zlib
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from _support.wait import wait_until
from rocketq.broker import Broker, BrokerConfig
from rocketq.client import Message, MessageQueue, Producer, SendResult, SendStatus, aio, send_answer, sync
from rocketq.client._routes import hash_queue_index
from rocketq.client.aio import AsyncProducer
from rocketq.config import StoreConfig
from rocketq.errors import (
    ClientStateError,
    ConfigError,
    MessageBodyTooLarge,
    NameServerUnavailable,
    RocketqError,
    TopicNameInvalid,
)
from rocketq.free_ports import free_port
from rocketq.message import decode_properties
from rocketq.namesrv import NameServer, NamesrvConfig
from rocketq.protocol import record as rec
from rocketq.protocol.headers import PULL_FLAG_SUBSCRIPTION, PullMessageRequestHeader
from rocketq.protocol.topic import TopicConfig
from rocketq.remoting import RemotingClient, RequestCode, create_request

T = TypeVar("T")
HOST = "127.0.0.1"
WAIT_S = 20.0


class Cluster:
    """A name server and brokers on one event loop in a helper thread."""

    def __init__(self, root: pathlib.Path, broker_names: tuple[str, ...]) -> None:
        self.root = root
        self.broker_names = broker_names
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="test-cluster", daemon=True)
        self.namesrv: NameServer | None = None
        self.brokers: dict[str, Broker] = {}
        self.client: RemotingClient | None = None

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    @property
    def namesrv_addr(self) -> str:
        assert self.namesrv is not None
        return f"{HOST}:{self.namesrv.port}"

    def start(self) -> None:
        self.thread.start()
        self.call(self._start())

    async def _start(self) -> None:
        self.namesrv = NameServer(NamesrvConfig(bind_address=HOST, listen_port=0))
        await self.namesrv.start()
        self.client = RemotingClient()
        for name in self.broker_names:
            store = StoreConfig(
                store_path_root_dir=str(self.root / name),
                mapped_file_size_commit_log=1024 * 1024,
                mapped_file_size_consume_queue=20 * 1000,
                max_hash_slot_num=64,
                max_index_num=256,
            )
            config = BrokerConfig(
                broker_name=name,
                broker_ip1=HOST,
                bind_address=HOST,
                listen_port=0,
                namesrv_addr=self.namesrv_addr,
            )
            broker = Broker(config, store)
            await broker.start()
            self.brokers[name] = broker

    def create_topic(self, topic: str, queues: int, perm: int = 6) -> None:
        async def create() -> None:
            for broker in self.brokers.values():
                assert broker.ctx is not None and broker.registrar is not None
                broker.ctx.topics.update(
                    TopicConfig(topic_name=topic, read_queue_nums=queues, write_queue_nums=queues, perm=perm)
                )
                await broker.registrar.register_all()

        self.call(create())

    def stop_broker(self, name: str) -> None:
        self.call(self.brokers.pop(name).shutdown())

    def pull_all(self, broker_name: str, topic: str, queue_id: int) -> list[rec.RecordView]:
        return self.call(self._pull_all(broker_name, topic, queue_id))

    async def _pull_all(self, broker_name: str, topic: str, queue_id: int) -> list[rec.RecordView]:
        broker = self.brokers[broker_name]
        assert broker.store is not None and self.client is not None
        assert await asyncio.to_thread(broker.store.wait_dispatched, WAIT_S)
        views: list[rec.RecordView] = []
        offset = 0
        while True:
            header = PullMessageRequestHeader(
                consumer_group="CG",
                topic=topic,
                queue_id=queue_id,
                queue_offset=offset,
                max_msg_nums=32,
                sys_flag=PULL_FLAG_SUBSCRIPTION,
                commit_offset=0,
                suspend_timeout_millis=0,
                sub_version=0,
                subscription="*",
            )
            request = create_request(RequestCode.PULL_MESSAGE, header.to_ext_fields())
            response = await self.client.invoke(f"{HOST}:{broker.port}", request, 10)
            if response.code != 0:
                return views
            pos = 0
            while pos < len(response.body):
                view = rec.decode_record(response.body, pos, check_crc=True)
                views.append(view)
                pos += view.size
            offset = int(response.ext_fields["nextBeginOffset"])

    def wait_for(self, what: str, condition: Any) -> None:
        wait_until(condition, what, WAIT_S)

    def close(self) -> None:
        async def stop() -> None:
            if self.client is not None:
                await self.client.close()
            for broker in self.brokers.values():
                await broker.shutdown()
            if self.namesrv is not None:
                await self.namesrv.close()

        try:
            self.call(stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join()
            self.loop.close()


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, ("broker-a",))
    c.start()
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def two_brokers(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, ("broker-a", "broker-b"))
    c.start()
    try:
        yield c
    finally:
        c.close()


def bodies(views: list[rec.RecordView]) -> list[bytes]:
    return [v.body or b"" for v in views]


def test_sync_send_properties_and_result(cluster: Cluster) -> None:
    cluster.create_topic("SyncT", 4)
    with Producer("PG", namesrv_addr=cluster.namesrv_addr) as p:
        msg = Message("SyncT", b"hello", tags="TagA", keys=["k1", "k2"], properties={"color": "red"})
        r = p.send(msg)
        assert isinstance(r, SendResult) and r.status is SendStatus.SEND_OK
        assert r.message_queue.topic == "SyncT" and r.message_queue.broker_name == "broker-a"
        assert len(r.msg_id) == 32 and r.offset_msg_id and r.queue_offset == 0
        views = cluster.pull_all("broker-a", "SyncT", r.message_queue.queue_id)
        assert bodies(views) == [b"hello"]
        props = decode_properties(views[0].properties)
        assert props["UNIQ_KEY"] == r.msg_id
        assert props["TAGS"] == "TagA" and props["KEYS"] == "k1 k2" and props["color"] == "red"
        # round-robin: the next sends go to the other queues
        queues = {p.send(Message("SyncT", b"x")).message_queue.queue_id for _ in range(4)}
        assert queues == {0, 1, 2, 3}
        # an unknown topic is auto-created through the TBW102 route
        auto = p.send(Message("AutoCreatedT", b"auto"))
        assert auto.status is SendStatus.SEND_OK
        assert bodies(cluster.pull_all("broker-a", "AutoCreatedT", auto.message_queue.queue_id)) == [b"auto"]
    with pytest.raises(ClientStateError):
        p.send(Message("SyncT", b"after shutdown"))


def test_async_send_oneway_and_batch(cluster: Cluster) -> None:
    cluster.create_topic("AsyncT", 2)

    async def main() -> tuple[list[SendResult], SendResult]:
        async with AsyncProducer("PG", namesrv_addr=cluster.namesrv_addr) as p:
            results = [await p.send(Message("AsyncT", f"a{i}".encode())) for i in range(4)]
            await p.send_oneway(Message("AsyncT", b"oneway", tags="OW"), sharding_key="one")
            batch = await p.send_batch([Message("AsyncT", f"b{i}".encode(), tags="B") for i in range(5)])
            return results, batch

    results, batch = asyncio.run(main())
    assert [r.queue_offset for r in results] == [0, 0, 1, 1]
    one_q = hash_queue_index("one", 2)
    cluster.wait_for(
        "the oneway message", lambda: b"oneway" in bodies(cluster.pull_all("broker-a", "AsyncT", one_q))
    )
    assert batch.status is SendStatus.SEND_OK
    ids = batch.msg_id.split(",")
    assert len(ids) == 5 and len(batch.offset_msg_id.split(",")) == 5
    views = cluster.pull_all("broker-a", "AsyncT", batch.message_queue.queue_id)
    batch_views = [v for v in views if (v.body or b"").startswith(b"b")]
    assert bodies(batch_views) == [f"b{i}".encode() for i in range(5)]
    assert [v.queue_offset for v in batch_views] == list(range(batch.queue_offset, batch.queue_offset + 5))
    assert [decode_properties(v.properties)["UNIQ_KEY"] for v in batch_views] == ids


def test_sharding_key_keeps_each_key_in_one_queue_in_order(cluster: Cluster) -> None:
    cluster.create_topic("OrderT", 8)
    keys = [f"order-{k}" for k in range(10)]
    with Producer("PG", namesrv_addr=cluster.namesrv_addr) as p:
        for seq in range(20):
            for key in keys:
                r = p.send(Message("OrderT", f"{key}:{seq}".encode()), sharding_key=key)
                assert r.message_queue.queue_id == hash_queue_index(key, 8)
    seen: dict[str, list[tuple[int, int]]] = {}
    for q in range(8):
        for v in cluster.pull_all("broker-a", "OrderT", q):
            key, seq = (v.body or b"").decode().split(":")
            seen.setdefault(key, []).append((q, int(seq)))
    assert sorted(seen) == sorted(keys)
    for key, entries in seen.items():
        assert {q for q, _ in entries} == {hash_queue_index(key, 8)}, key
        assert [s for _, s in entries] == list(range(20)), key
    assert len({hash_queue_index(k, 8) for k in keys}) > 1  # keys spread over queues


def test_selector_and_explicit_queue(cluster: Cluster) -> None:
    cluster.create_topic("SelT", 4)
    with Producer("PG", namesrv_addr=cluster.namesrv_addr) as p:
        r = p.send(Message("SelT", b"s"), selector=lambda qs, m: qs[-1])
        assert r.message_queue.queue_id == 3
        r = p.send(Message("SelT", b"q"), queue=MessageQueue("SelT", "broker-a", 2))
        assert r.message_queue.queue_id == 2
    assert bodies(cluster.pull_all("broker-a", "SelT", 2)) == [b"q"]


def test_large_body_is_compressed_transparently(cluster: Cluster) -> None:
    cluster.create_topic("ZipT", 1)
    body = b"".join(f"line {i} of a compressible body\n".encode() for i in range(400))
    assert len(body) > 4096
    with Producer("PG", namesrv_addr=cluster.namesrv_addr) as p:
        p.send(Message("ZipT", body))
        p.send(Message("ZipT", b"small"))
    big, small = cluster.pull_all("broker-a", "ZipT", 0)
    assert big.sys_flag & 0x1 and len(big.body or b"") < len(body)
    assert zlib.decompress(big.body or b"") == body
    assert not small.sys_flag & 0x1 and small.body == b"small"


def test_delay_level_goes_to_schedule_topic(cluster: Cluster) -> None:
    cluster.create_topic("DelayT", 1)
    with Producer("PG", namesrv_addr=cluster.namesrv_addr) as p:
        p.send(Message("DelayT", b"later", delay_level=3))
    views = cluster.pull_all("broker-a", "SCHEDULE_TOPIC_XXXX", 2)
    assert bodies(views) == [b"later"]
    props = decode_properties(views[0].properties)
    assert props["REAL_TOPIC"] == "DelayT" and props["DELAY"] == "3"
    assert cluster.pull_all("broker-a", "DelayT", 0) == []


def test_validation_happens_before_any_io() -> None:
    dead = f"{HOST}:{free_port()}"
    with Producer("PG", namesrv_addr=dead) as p:
        with pytest.raises(TopicNameInvalid, match="characters outside"):
            p.send(Message("bad topic!", b"x"))
        with pytest.raises(TopicNameInvalid, match="system topic"):
            p.send(Message("SCHEDULE_TOPIC_XXXX", b"x"))
        with pytest.raises(MessageBodyTooLarge, match="4194305 B exceeds max 4194304 B"):
            p.send(Message("T", b"x" * (4 * 1024 * 1024 + 1)))
        with pytest.raises(TopicNameInvalid):
            p.send_batch([Message("", b"x")])
        # a valid message reaches the (unreachable) name server
        with pytest.raises(NameServerUnavailable, match=dead):
            p.send(Message("T", b"x"))
    with pytest.raises(ConfigError, match="producer group"):
        Producer("bad group", namesrv_addr=dead)
    with pytest.raises(ConfigError, match="not host:port"):
        Producer("PG", namesrv_addr="nowhere")


def test_cached_route_survives_name_server_outage(cluster: Cluster) -> None:
    cluster.create_topic("CacheT", 2)

    async def main() -> None:
        async with AsyncProducer("PG", namesrv_addr=cluster.namesrv_addr) as p:
            await p.send(Message("CacheT", b"before"))
            assert cluster.namesrv is not None
            cluster.call(cluster.namesrv.close())
            assert p._routes is not None
            await p._routes.refresh_all()  # fails, keeps the route
            r = await p.send(Message("CacheT", b"after"))
            assert r.status is SendStatus.SEND_OK

    asyncio.run(main())


def test_two_brokers_one_stopped_sends_keep_succeeding(two_brokers: Cluster) -> None:
    two_brokers.create_topic("HaT", 2)
    with Producer("PG", namesrv_addr=two_brokers.namesrv_addr) as p:
        first = [p.send(Message("HaT", f"m{i}".encode())) for i in range(4)]
        assert {r.message_queue.broker_name for r in first} == {"broker-a", "broker-b"}
        two_brokers.stop_broker("broker-b")
        after = [p.send(Message("HaT", f"n{i}".encode())) for i in range(20)]
        assert all(r.status is SendStatus.SEND_OK for r in after)
        assert {r.message_queue.broker_name for r in after} == {"broker-a"}
        faults = p.core.faults
        assert faults is not None and not faults.is_available("broker-b")
    stored = [
        v.body for q in range(2) for v in two_brokers.pull_all("broker-a", "HaT", q) if v.body is not None
    ]
    assert sorted(b for b in stored if b.startswith(b"n")) == sorted(f"n{i}".encode() for i in range(20))


def test_sync_send_from_threads_uses_blocking_connections(cluster: Cluster) -> None:
    """The sync facade sends on blocking sockets in the calling threads: several threads at
    once each get a pooled connection, every send gets its own offset, and the broker is never
    called through the loop's connections (only the name server is, for the route)."""
    cluster.create_topic("ThreadT", 2)
    results: list[SendResult] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    with Producer("PG", namesrv_addr=cluster.namesrv_addr) as p:

        def worker(t: int) -> None:
            try:
                for i in range(25):
                    r = p.send(Message("ThreadT", f"{t}-{i}".encode()))
                    with lock:
                        results.append(r)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert errors == []
        pool = p._pool
        assert pool is not None and 1 <= pool.idle_connections <= 4
        remoting = p.core._remoting
        assert remoting is not None and set(remoting.connections) == {cluster.namesrv_addr}
    assert len(results) == 100
    by_queue: dict[int, list[int]] = {}
    for r in results:
        by_queue.setdefault(r.message_queue.queue_id, []).append(r.queue_offset)
    for offsets in by_queue.values():
        assert sorted(offsets) == list(range(len(offsets)))
    stored = sum(len(cluster.pull_all("broker-a", "ThreadT", q)) for q in (0, 1))
    assert stored == 100
    assert len({r.msg_id for r in results}) == 100


def test_auto_batch_coalesces_concurrent_sends_with_results_of_their_own(cluster: Cluster) -> None:
    cluster.create_topic("AutoBatchT", 4)

    async def main() -> tuple[list[SendResult], list[SendResult], list[SendResult], SendResult]:
        async with AsyncProducer(
            "PG", namesrv_addr=cluster.namesrv_addr, auto_batch=True, batch_max_delay_ms=60_000
        ) as p:
            # nothing in flight: each send goes out at once, alone (a minute's linger never waited)
            alone = [
                await asyncio.wait_for(p.send(Message("AutoBatchT", f"a{i}".encode())), 10) for i in range(4)
            ]
            # the first goes alone, the 19 made while it is in flight go as one batch when it is answered
            together = await asyncio.wait_for(
                asyncio.gather(*(p.send(Message("AutoBatchT", f"c{i}".encode())) for i in range(20))), 10
            )
        async with AsyncProducer(
            "PG", namesrv_addr=cluster.namesrv_addr, auto_batch=True, batch_max_bytes=1
        ) as p:
            apart = await asyncio.gather(*(p.send(Message("AutoBatchT", f"s{i}".encode())) for i in range(4)))
        p = AsyncProducer("PG", namesrv_addr=cluster.namesrv_addr, auto_batch=True, batch_max_delay_ms=60_000)
        await p.start()
        first = asyncio.ensure_future(p.send(Message("AutoBatchT", b"in flight at shutdown")))
        waiting = asyncio.ensure_future(p.send(Message("AutoBatchT", b"flushed at shutdown")))
        await asyncio.sleep(0)  # one loop iteration: both sends take their first step, no I/O yet
        assert p._batches, "the second send waits behind the first"
        await p.shutdown()
        assert (await asyncio.wait_for(first, 10)).status is SendStatus.SEND_OK
        return alone, together, apart, await asyncio.wait_for(waiting, 10)

    alone, together, apart, last = asyncio.run(main())
    # sent alone: round-robin over the queues, as without auto-batching
    assert len({r.message_queue.queue_id for r in alone}) == 4
    # one SEND_BATCH_MESSAGE: one queue, consecutive offsets, each caller its own ids
    batch = together[1:]
    assert len({r.message_queue for r in batch}) == 1
    first = batch[0].queue_offset
    assert [r.queue_offset for r in batch] == list(range(first, first + 19))
    assert len({r.msg_id for r in together}) == 20 and len({r.offset_msg_id for r in together}) == 20
    qid = batch[0].message_queue.queue_id
    views = {v.queue_offset: v for v in cluster.pull_all("broker-a", "AutoBatchT", qid)}
    for i, r in enumerate(batch, start=1):
        v = views[r.queue_offset]
        assert v.body == f"c{i}".encode()
        assert decode_properties(v.properties)["UNIQ_KEY"] == r.msg_id
    # batch_max_bytes reached by every message: each goes out alone, round-robin over the queues
    assert len({r.message_queue.queue_id for r in apart}) == 4
    assert last.status is SendStatus.SEND_OK
    stored = bodies(cluster.pull_all("broker-a", "AutoBatchT", last.message_queue.queue_id))
    assert b"flushed at shutdown" in stored


def test_auto_batch_sends_waiting_behind_a_failed_request_are_not_stranded(cluster: Cluster) -> None:
    """The request in flight fails (the topic is read-only): the sends that waited behind it go
    out at once and get their own errors, not the minute's linger."""
    cluster.create_topic("ReadOnlyAB", 4, perm=4)

    async def main() -> list[SendResult | BaseException]:
        async with AsyncProducer(
            "PG",
            namesrv_addr=cluster.namesrv_addr,
            auto_batch=True,
            batch_max_delay_ms=60_000,
            retry_times_when_send_failed=0,
        ) as p:
            sends = (p.send(Message("ReadOnlyAB", f"m{i}".encode())) for i in range(5))
            return await asyncio.wait_for(asyncio.gather(*sends, return_exceptions=True), 10)

    outcomes = asyncio.run(main())
    assert len(outcomes) == 5
    assert all(isinstance(o, RocketqError) for o in outcomes), outcomes


def test_blocking_sends_make_their_results_from_the_answer_read(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the compiled module the blocking producer's usual send makes its SendResult straight
    from the answer it read (``send_answer.send_result``); the results are the broker's: each
    queue's offsets in order, each offset message id the stored message's."""
    made = spy_on_send_result(monkeypatch, sync)
    cluster.create_topic("AnswerT", 2)
    with Producer("PG", namesrv_addr=cluster.namesrv_addr) as p:
        results = [p.send(Message("AnswerT", b"m%d" % i)) for i in range(20)]
    assert len(made) >= 19 and all(r in made for r in results[1:])  # the first may fetch the route
    assert_results_are_the_stored_messages(cluster, "AnswerT", results)


def spy_on_send_result(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[SendResult]:
    """The SendResults ``module``'s compiled ``_send_result`` makes from now on (the test is
    skipped on the pure path, which has none)."""
    compiled = send_answer.send_result
    if compiled is None:
        pytest.skip("compiled codecs not in use")
    made: list[SendResult] = []

    def spy(*args: Any) -> SendResult | None:
        result = compiled(*args)
        if result is not None:
            made.append(result)
        return result

    monkeypatch.setattr(module, "_send_result", spy)
    return made


def assert_results_are_the_stored_messages(cluster: Cluster, topic: str, results: list[SendResult]) -> None:
    """Each queue's offsets in order; each offset message id ends with the stored record's
    CommitLog offset, and each message id is the stored record's UNIQ_KEY."""
    by_queue: dict[int, list[int]] = {}
    for r in results:
        assert r.status is SendStatus.SEND_OK and r.message_queue.topic == topic
        by_queue.setdefault(r.message_queue.queue_id, []).append(r.queue_offset)
    assert all(offsets == list(range(len(offsets))) for offsets in by_queue.values())
    for r in results:
        stored = cluster.pull_all("broker-a", topic, r.message_queue.queue_id)
        (record,) = [m for m in stored if m.queue_offset == r.queue_offset]
        assert int(r.offset_msg_id[-16:], 16) == record.physical_offset
        assert decode_properties(record.properties or "")["UNIQ_KEY"] == r.msg_id


def test_async_sends_make_their_results_from_the_answer_read(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The asyncio producer's first attempt on an open connection frames the request at once
    and, with the compiled module, makes its SendResult straight from the answer read
    (``Connection.request_frame`` with ``send_answer.send_result``); the results are the
    broker's: each queue's offsets in order, each offset message id the stored message's."""
    made = spy_on_send_result(monkeypatch, aio)
    cluster.create_topic("AsyncAnswerT", 2)

    async def main() -> list[SendResult]:
        async with AsyncProducer("PG", namesrv_addr=cluster.namesrv_addr) as p:
            return [await p.send(Message("AsyncAnswerT", b"m%d" % i)) for i in range(20)]

    results = asyncio.run(main())
    assert len(made) >= 18 and all(r in made for r in results[2:])  # route and connection first
    assert_results_are_the_stored_messages(cluster, "AsyncAnswerT", results)


def test_async_first_attempt_refused_is_retried_on_the_other_broker(
    two_brokers: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first attempt made on a broker's open connection that the broker refuses (its topic
    made read-only behind the route the producer cached) goes on through the retry steps: each
    such send lands on the other broker, and the refusals were counted as failed attempts."""
    two_brokers.create_topic("AsyncHaT", 2)
    failed: list[str] = []
    real = AsyncProducer._attempt_failed

    def counting(self: AsyncProducer, exc: RocketqError, *args: Any) -> None:
        failed.append(type(exc).__name__)
        real(self, exc, *args)

    monkeypatch.setattr(AsyncProducer, "_attempt_failed", counting)

    async def read_only() -> None:
        broker = two_brokers.brokers["broker-b"]
        assert broker.ctx is not None
        read_only = TopicConfig(topic_name="AsyncHaT", read_queue_nums=2, write_queue_nums=2, perm=4)
        broker.ctx.topics.update(read_only)

    async def main() -> tuple[list[SendResult], list[SendResult]]:
        async with AsyncProducer("PG", namesrv_addr=two_brokers.namesrv_addr) as p:
            first = [await p.send(Message("AsyncHaT", f"m{i}".encode())) for i in range(4)]
            two_brokers.call(read_only())
            after = [await p.send(Message("AsyncHaT", f"n{i}".encode())) for i in range(12)]
            return first, after

    first, after = asyncio.run(main())
    assert {r.message_queue.broker_name for r in first} == {"broker-a", "broker-b"}
    assert failed and set(failed) == {"NoPermission"}, failed
    assert all(r.status is SendStatus.SEND_OK for r in after)
    assert {r.message_queue.broker_name for r in after} == {"broker-a"}
    stored = [v.body for q in range(2) for v in two_brokers.pull_all("broker-a", "AsyncHaT", q)]
    assert sorted(b for b in stored if b and b[:1] == b"n") == sorted(f"n{i}".encode() for i in range(12))


def test_blocking_plain_sends_are_framed_at_once_and_keep_the_queue_order(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the compiled module a plain message's id, opaque and frame are made in one call
    (``send_plain.plain_send_frame``); a message with tags never gets there, and one whose
    body is to be compressed is declined and made the general way for the queue picked for it.
    All go round-robin in one order, each stored with its own UNIQ_KEY, the message id of its
    result, and ids never repeat."""
    compiled = aio._plain_send_frame
    if compiled is None:
        pytest.skip("compiled codecs not in use")
    made: list[str] = []
    declined: list[Message] = []

    def spy(msg: Message, *args: Any) -> tuple[bytes, int, str] | None:
        out = compiled(msg, *args)
        if out is None:
            declined.append(msg)
        else:
            made.append(out[2])
        return out

    monkeypatch.setattr(aio, "_plain_send_frame", spy)
    cluster.create_topic("PlainT", 4)
    big = 5000  # over the compress threshold (4 KiB)
    with Producer("PG", namesrv_addr=cluster.namesrv_addr) as p:
        p.send(Message("PlainT", b"warm"))  # the route is cached from here on
        msgs = [
            Message("PlainT", b"m%d" % i * (big if i % 4 == 1 else 1), tags="TagA" if i % 4 == 2 else None)
            for i in range(12)
        ]
        results = [p.send(m) for m in msgs]
    assert declined == [m for m in msgs if len(m.body) > big]
    plain = [r.msg_id for m, r in zip(msgs, results, strict=True) if not m.tags and len(m.body) < big]
    assert made[-len(plain) :] == plain
    first = results[0].message_queue.queue_id
    assert [r.message_queue.queue_id for r in results] == [(first + i) % 4 for i in range(12)]
    assert len({r.msg_id for r in results}) == 12
    for m, r in zip(msgs, results, strict=True):
        (view,) = [
            v
            for v in cluster.pull_all("broker-a", "PlainT", r.message_queue.queue_id)
            if v.queue_offset == r.queue_offset
        ]
        props = decode_properties(view.properties)
        assert props["UNIQ_KEY"] == r.msg_id and props["WAIT"] == "true"
        assert props.get("TAGS") == m.tags
        assert (zlib.decompress(view.body) if len(m.body) > big else view.body) == m.body
