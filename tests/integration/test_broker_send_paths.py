"""Sends answered at once (ASYNC_FLUSH) and sends that wait (a new topic, SYNC_FLUSH), and pulls
of fresh data read on the event loop: same answers, same records, durability kept. Under
SYNC_FLUSH the put runs on the loop too and the answer waits for the group commit that syncs it."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import json
import pathlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from test_broker_server import WAIT_S, decode_records, dispatched, run, running_broker

from _support.requests import create_topic_request, pull_request, send_request
from rocketq.broker import Broker
from rocketq.config import StoreConfig
from rocketq.errors import ResponseCode
from rocketq.message import decode_properties
from rocketq.protocol.topic import SCHEDULE_TOPIC
from rocketq.remoting import RequestCode, create_request
from rocketq.remoting.command import RemotingCommand


class CountingExecutor(concurrent.futures.ThreadPoolExecutor):
    """The broker's worker threads, counting the calls handed to them."""

    def __init__(self) -> None:
        super().__init__(max_workers=4, thread_name_prefix="counting")
        self.submitted = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


def count_worker_calls(broker: Broker) -> CountingExecutor:
    assert broker.ctx is not None
    executor = CountingExecutor()
    broker.ctx.executor = executor
    return executor


def pull(topic: str, queue_id: int, offset: int) -> RemotingCommand:
    return pull_request(topic, offset, queue_id=queue_id, expression_type="TAG", suspend_ms=1000)


async def send_and_read_back(
    store_config: StoreConfig, topic: str, n: int
) -> tuple[list[RemotingCommand], list[Any], int]:
    """Create ``topic``, send ``n`` pipelined messages to queue 0, pull them back; also returns
    how many calls went to worker threads during the sends and the pull."""
    async with running_broker(store_config) as (broker, client, addr):
        created = await client.invoke(addr, create_topic_request(topic, queues=1))
        assert created.code == ResponseCode.SUCCESS
        executor = count_worker_calls(broker)
        answers = await asyncio.gather(
            *(
                client.invoke(addr, send_request(topic, b"body-%d" % i, properties={"KEYS": f"k{i}"}))
                for i in range(n)
            )
        )
        await dispatched(broker)
        pulled = await client.invoke(addr, pull(topic, 0, 0))
        assert pulled.code == ResponseCode.SUCCESS, pulled.remark
        return answers, decode_records(pulled.body), executor.submitted


def test_async_and_sync_flush_sends_answer_and_store_alike(
    tmp_path: pathlib.Path, store_config: StoreConfig
) -> None:
    n = 30  # one pull returns them all (max 32)
    results = {}
    for flush in ("ASYNC_FLUSH", "SYNC_FLUSH"):
        cfg = dataclasses.replace(
            store_config, store_path_root_dir=str(tmp_path / flush), flush_disk_type=flush
        )
        results[flush] = run(send_and_read_back(cfg, "PathT", n))
    (fast, fast_records, fast_workers), (slow, slow_records, slow_workers) = (
        results["ASYNC_FLUSH"],
        results["SYNC_FLUSH"],
    )
    # ASYNC_FLUSH: every send and the pull of fresh data ran on the event loop
    assert fast_workers == 0
    # SYNC_FLUSH: the puts ran on the loop as well, the answers waited for group commits
    assert slow_workers == 0
    for answers in (fast, slow):
        assert [a.code for a in answers] == [ResponseCode.SUCCESS] * n
        assert sorted(int(a.ext_fields["queueOffset"]) for a in answers) == list(range(n))
        assert {frozenset(a.ext_fields) for a in answers} == {
            frozenset({"msgId", "queueId", "queueOffset", "MSG_REGION", "TRACE_ON", "transactionId"})
        }
        assert all(a.flag & 1 and a.remark is None for a in answers)
    for records in (fast_records, slow_records):
        assert len(records) == n
        for view in records:
            props = decode_properties(view.properties)
            assert view.body == b"body-%d" % int(props["KEYS"][1:])
            assert props["CLUSTER"] and props["UNIQ_KEY"]
    # the same answers, field by field, apart from ids and offsets
    assert {a.ext_fields["MSG_REGION"] for a in fast} == {a.ext_fields["MSG_REGION"] for a in slow}


def test_send_that_creates_its_topic_is_answered_after_topics_json_has_it(store_config: StoreConfig) -> None:
    async def main() -> None:
        async with running_broker(store_config) as (_broker, client, addr):
            topics_json = pathlib.Path(store_config.store_path_root_dir) / "config" / "topics.json"
            answers = await asyncio.gather(
                *(client.invoke(addr, send_request("AutoT", b"m%d" % i, queue_id=i % 4)) for i in range(20))
            )
            # read at once, before any background write could have caught up
            table = json.loads(topics_json.read_text())["topicConfigTable"]
            assert "AutoT" in table
            assert [a.code for a in answers] == [ResponseCode.SUCCESS] * 20
            by_queue: dict[str, list[int]] = {}
            for a in answers:
                by_queue.setdefault(a.ext_fields["queueId"], []).append(int(a.ext_fields["queueOffset"]))
            for offsets in by_queue.values():
                assert sorted(offsets) == list(range(len(offsets)))

    run(main())


def test_refused_send_on_the_immediate_path_keeps_the_connection(store_config: StoreConfig) -> None:
    async def main() -> None:
        async with running_broker(store_config, auto_create_topic_enable=False) as (_broker, client, addr):
            bad = await client.invoke(addr, send_request("NoSuchTopic", b"x"))
            assert bad.code == ResponseCode.TOPIC_NOT_EXIST and "NoSuchTopic" in (bad.remark or "")
            bad_header = await client.invoke(
                addr, create_request(RequestCode.SEND_MESSAGE_V2, {"b": "T", "e": "1_0"}, body=b"x")
            )
            assert bad_header.code == ResponseCode.INVALID_PARAMETER and "queueId" in (
                bad_header.remark or ""
            )
            ok = await asyncio.wait_for(
                client.invoke(
                    addr, create_request(RequestCode.GET_MAX_OFFSET, {"topic": "TBW102", "queueId": 0})
                ),
                WAIT_S,
            )
            assert ok.code == ResponseCode.SUCCESS

    run(main())


class HeldFlush:
    """The CommitLog's flush held at a gate: the group commit cannot make anything durable until
    :meth:`release` (bounded: a forgotten gate opens after ``WAIT_S``)."""

    def __init__(self, broker: Broker) -> None:
        assert broker.store is not None
        self.queue = broker.store.commitlog.queue  # type: ignore[attr-defined]
        self.gate = threading.Event()
        self.entered = threading.Event()
        self._flush = self.queue.flush

        def held(least_pages: int) -> bool:
            self.entered.set()
            self.gate.wait(WAIT_S)
            return bool(self._flush(least_pages))

        self.queue.flush = held

    def release(self) -> None:
        self.gate.set()

    @contextlib.contextmanager
    def holding(self) -> Iterator[HeldFlush]:
        try:
            yield self
        finally:
            self.release()


def sync_config(tmp_path: pathlib.Path, store_config: StoreConfig, **kwargs: Any) -> StoreConfig:
    return dataclasses.replace(
        store_config, store_path_root_dir=str(tmp_path / "sync"), flush_disk_type="SYNC_FLUSH", **kwargs
    )


def test_sync_flush_send_is_answered_only_once_its_record_is_durable(
    tmp_path: pathlib.Path, store_config: StoreConfig
) -> None:
    async def main() -> None:
        async with running_broker(sync_config(tmp_path, store_config)) as (broker, client, addr):
            created = await client.invoke(addr, create_topic_request("DurT", queues=1))
            assert created.code == ResponseCode.SUCCESS
            with HeldFlush(broker).holding() as held:
                sends = [
                    asyncio.ensure_future(client.invoke(addr, send_request("DurT", b"m%d" % i)))
                    for i in range(8)
                ]
                assert await asyncio.to_thread(held.entered.wait, WAIT_S)
                # stored, the sync under way but not finished: nothing may be answered yet
                await asyncio.wait(sends, timeout=0.3)
                assert not any(s.done() for s in sends)
                assert held.queue.flushed_where < held.queue.max_offset
                held.release()
                answers = await asyncio.gather(*sends)
            assert [a.code for a in answers] == [ResponseCode.SUCCESS] * 8
            assert held.queue.flushed_where >= held.queue.max_offset
            assert sorted(int(a.ext_fields["queueOffset"]) for a in answers) == list(range(8))

    run(main())


def test_sync_flush_send_not_synced_in_time_answers_flush_disk_timeout_and_stays_stored(
    tmp_path: pathlib.Path, store_config: StoreConfig
) -> None:
    async def main() -> None:
        cfg = sync_config(tmp_path, store_config, sync_flush_timeout_ms=200)
        async with running_broker(cfg) as (broker, client, addr):
            created = await client.invoke(addr, create_topic_request("SlowT", queues=1))
            assert created.code == ResponseCode.SUCCESS
            with HeldFlush(broker).holding() as held:
                answer = await client.invoke(addr, send_request("SlowT", b"late"))
            # dispatch under SYNC_FLUSH follows the flush: let the released sync finish first
            group_commit = broker.store.commitlog.group_commit  # type: ignore[union-attr]
            assert await asyncio.to_thread(group_commit.wait, held.queue.max_offset, WAIT_S)
            assert answer.code == ResponseCode.FLUSH_DISK_TIMEOUT
            assert "not flushed to disk within 200 ms" in (answer.remark or "")
            assert {"msgId", "queueId", "queueOffset", "MSG_REGION", "TRACE_ON"} <= set(answer.ext_fields)
            await dispatched(broker)
            pulled = await client.invoke(addr, pull("SlowT", 0, 0))
            assert pulled.code == ResponseCode.SUCCESS, pulled.remark
            assert [view.body for view in decode_records(pulled.body)] == [b"late"]

    run(main())


def test_topic_name_checks_refuse_every_time_and_pass_known_names(store_config: StoreConfig) -> None:
    """msg_check remembers names that passed; a refused name is checked (and refused) again."""

    async def main() -> None:
        async with running_broker(store_config) as (_broker, client, addr):
            for _ in range(2):
                bad = await client.invoke(addr, send_request("bad topic!", b"x"))
                assert bad.code == ResponseCode.INVALID_PARAMETER and "invalid" in (bad.remark or "")
                system = await client.invoke(addr, send_request(SCHEDULE_TOPIC, b"x"))
                assert system.code == ResponseCode.NO_PERMISSION and "forbidden" in (system.remark or "")
            answers = [await client.invoke(addr, send_request("KnownT", b"m%d" % i)) for i in range(3)]
            assert [a.code for a in answers] == [ResponseCode.SUCCESS] * 3

    run(main())


def test_read_only_broker_refuses_sends(store_config: StoreConfig) -> None:
    """brokerPermission without the write bit: every send is refused with NO_PERMISSION on the
    immediate path (the check written out in msg_check), before any record is stored."""

    async def main() -> None:
        async with running_broker(store_config, broker_permission=4) as (broker, client, addr):
            for _ in range(2):
                refused = await client.invoke(addr, send_request("TBW102", b"x"))
                assert refused.code == ResponseCode.NO_PERMISSION
                assert "sending message is forbidden" in (refused.remark or "")
            assert broker.store is not None and broker.store.commitlog.max_offset == 0

    run(main())


def test_a_read_only_topic_refuses_sends_and_a_writable_one_stores_them(store_config: StoreConfig) -> None:
    """A topic whose perm lacks the write bit answers NO_PERMISSION naming it, every time, and
    stores nothing; the same broker stores a send to a writable topic."""

    async def main() -> None:
        async with running_broker(store_config) as (broker, client, addr):
            made = await client.invoke(addr, create_topic_request("ReadOnlyT", queues=1, perm=4))
            assert made.code == ResponseCode.SUCCESS
            for _ in range(2):
                refused = await client.invoke(addr, send_request("ReadOnlyT", b"x"))
                assert refused.code == ResponseCode.NO_PERMISSION
                assert "the topic[ReadOnlyT] sending message is forbidden" in (refused.remark or "")
            assert broker.store is not None and broker.store.commitlog.max_offset == 0
            made = await client.invoke(addr, create_topic_request("WritableT", queues=1))
            assert made.code == ResponseCode.SUCCESS
            stored = await client.invoke(addr, send_request("WritableT", b"y"))
            assert stored.code == ResponseCode.SUCCESS, stored.remark
            assert broker.store.commitlog.max_offset > 0

    run(main())


def test_a_known_topic_is_checked_again_on_every_send_after_its_state_changes(
    store_config: StoreConfig,
) -> None:
    """A topic whose name passed the checks takes the usual target at once (``usual_topic``,
    shared by ``msg_check`` and the lone send); what can change after that is read on every
    send: the broker's permission, the topic's, its queue count and the producer group's length
    each refuse the next send with the general path's code and remark, and nothing is stored."""

    async def main() -> None:
        async with running_broker(store_config) as (broker, client, addr):
            assert broker.ctx is not None and broker.store is not None
            ctx, commitlog = broker.ctx, broker.store.commitlog
            made = await client.invoke(addr, create_topic_request("UsualT", queues=2))
            assert made.code == ResponseCode.SUCCESS
            ok = await client.invoke(addr, send_request("UsualT", b"a", queue_id=1))
            assert ok.code == ResponseCode.SUCCESS, ok.remark
            stored = commitlog.max_offset

            async def refused(request: RemotingCommand, code: int, remark: str) -> None:
                answer = await client.invoke(addr, request)
                assert answer.code == code, answer.remark
                assert remark in (answer.remark or "")
                assert commitlog.max_offset == stored

            illegal = ResponseCode.INVALID_PARAMETER
            await refused(send_request("UsualT", b"b", queue_id=2), illegal, "queueId[2] is illegal")
            await refused(
                send_request("UsualT", b"c", group="G" * 256), ResponseCode.INVALID_PARAMETER, "producer"
            )
            config = ctx.config
            ctx.config = dataclasses.replace(config, broker_permission=4)
            forbidden = "sending message is forbidden"
            await refused(send_request("UsualT", b"d"), ResponseCode.NO_PERMISSION, forbidden)
            ctx.config = config
            made = await client.invoke(addr, create_topic_request("UsualT", queues=2, perm=4))
            assert made.code == ResponseCode.SUCCESS
            await refused(
                send_request("UsualT", b"e"), ResponseCode.NO_PERMISSION, "the topic[UsualT] sending message"
            )
            made = await client.invoke(addr, create_topic_request("UsualT", queues=1))
            assert made.code == ResponseCode.SUCCESS
            await refused(send_request("UsualT", b"f", queue_id=1), illegal, "queueId[1] is illegal")
            ok = await client.invoke(addr, send_request("UsualT", b"g", queue_id=0))
            assert ok.code == ResponseCode.SUCCESS, ok.remark
            assert commitlog.max_offset > stored

    run(main())
