"""The lite pull consumer (sync facade over the asyncio core) against in-process name server + broker.

The servers run on their own loop in a helper thread (``Cluster`` from test_client_producer);
messages are produced with the sync ``Producer``. Every wait is on a condition with a deadline.
"""

from __future__ import annotations

import asyncio
import pathlib
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
from test_client_producer import Cluster

from _support.wait import collect_until, wait_until
from rocketq.client import Admin, LitePullConsumer, Message, MessageQueue, Producer, SendResult
from rocketq.client.lite_pull import AsyncLitePullConsumer, allocate_averagely
from rocketq.errors import ClientStateError, ConfigError, TopicNotExist
from rocketq.message import MessageExt

WAIT_S = 20.0
TAGS = ("TagA", "TagB", "TagC")


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, ("broker-a",))
    c.start()
    try:
        yield c
    finally:
        c.close()


def produce(cluster: Cluster, topic: str, count: int, prefix: str = "m") -> list[tuple[Message, SendResult]]:
    out = []
    with Producer("LPProducer", namesrv_addr=cluster.namesrv_addr) as p:
        for i in range(count):
            msg = Message(topic, f"{prefix}-{i}".encode(), tags=TAGS[i % len(TAGS)])
            out.append((msg, p.send(msg)))
    return out


def by_queue(msgs: list[MessageExt]) -> dict[int, list[MessageExt]]:
    out: dict[int, list[MessageExt]] = defaultdict(list)
    for m in msgs:
        out[m.queue_id].append(m)
    return out


def test_allocate_averagely_gives_contiguous_disjoint_shares() -> None:
    queues = [MessageQueue("T", b, q) for b in ("b", "a") for q in range(4)]
    ids = ["c3", "c1", "c2"]
    shares = [allocate_averagely(queues, ids, me) for me in ("c1", "c2", "c3")]
    assert [len(s) for s in shares] == [3, 3, 2]
    assert [mq for share in shares for mq in share] == sorted(queues)
    assert allocate_averagely(queues, ids, "other") == []
    assert allocate_averagely(queues[:2], ids, "c3") == []


def test_config_and_state_errors(cluster: Cluster) -> None:
    with pytest.raises(ConfigError, match="consume_from_where"):
        LitePullConsumer("G", namesrv_addr=cluster.namesrv_addr, consume_from_where="NOWHERE")
    with pytest.raises(ConfigError, match="pull_batch_size"):
        LitePullConsumer("G", namesrv_addr=cluster.namesrv_addr, pull_batch_size=0)
    c = LitePullConsumer("G", namesrv_addr=cluster.namesrv_addr)
    with pytest.raises(ClientStateError):
        c.poll()
    c.assign([MessageQueue("T", "broker-a", 0)])
    with pytest.raises(ClientStateError):
        c.subscribe("T")


def test_assign_poll_seek_commit_and_resume(cluster: Cluster) -> None:
    cluster.create_topic("LPT", 4)
    sent = produce(cluster, "LPT", 100)
    expected: dict[int, list[tuple[int, bytes, str | None]]] = defaultdict(list)
    for msg, r in sent:
        expected[r.message_queue.queue_id].append((r.queue_offset, msg.body, msg.tags))
    assert len(expected) == 4

    c = LitePullConsumer(
        "LPG",
        namesrv_addr=cluster.namesrv_addr,
        auto_commit=False,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )
    c.start()
    try:
        queues = c.fetch_message_queues("LPT")
        assert queues == [MessageQueue("LPT", "broker-a", q) for q in range(4)]
        c.assign(queues)
        assert c.assignment() == queues
        got = collect_until(lambda: c.poll(timeout_ms=1000), 100, "messages", WAIT_S)
        assert len(got) == 100
        for qid, msgs in by_queue(got).items():
            assert [(m.queue_offset, m.body, m.tags) for m in msgs] == sorted(expected[qid])
            assert all(m.topic == "LPT" and m.msg_id for m in msgs)
        assert c.poll(timeout_ms=200) == []

        q0 = queues[0]
        c.seek(q0, 10)
        again = collect_until(lambda: c.poll(timeout_ms=1000), len(expected[0]) - 10, "messages", WAIT_S)
        assert [m.queue_offset for m in again] == list(range(10, len(expected[0])))
        assert [m.body for m in again] == [b for _, b, _ in sorted(expected[0])[10:]]
        with pytest.raises(ValueError, match="outside"):
            c.seek(q0, 10_000)

        c.seek(q0, 20)
        c.commit()
        assert c.committed(q0) == 20
        assert [c.committed(mq) for mq in queues[1:]] == [len(expected[q]) for q in (1, 2, 3)]
    finally:
        c.shutdown()

    resumed = LitePullConsumer(
        "LPG", namesrv_addr=cluster.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
    )
    with resumed:
        resumed.assign(queues)
        rest = collect_until(lambda: resumed.poll(timeout_ms=1000), len(expected[0]) - 20, "messages", WAIT_S)
        assert [(m.queue_id, m.queue_offset) for m in rest] == [(0, o) for o in range(20, len(expected[0]))]
        assert resumed.poll(timeout_ms=200) == []


def test_commit_stores_every_queue_it_can_and_raises_the_first_failure(cluster: Cluster) -> None:
    """commit() sends all the queues' offsets together: a queue whose commit fails (its topic
    was deleted on the broker) does not keep the others from being stored, and its error is
    raised once every queue has been tried."""
    cluster.create_topic("CommitKept", 2)
    cluster.create_topic("CommitGone", 2)
    produce(cluster, "CommitKept", 10)
    produce(cluster, "CommitGone", 10)
    c = LitePullConsumer(
        "CommitG",
        namesrv_addr=cluster.namesrv_addr,
        auto_commit=False,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )
    with c, Admin(cluster.namesrv_addr) as admin:
        gone = c.fetch_message_queues("CommitGone")
        kept = c.fetch_message_queues("CommitKept")
        c.assign(gone + kept)
        for i, mq in enumerate(gone + kept):
            c.seek(mq, 1 + i % 2)
        c.commit()
        assert [c.committed(mq) for mq in gone + kept] == [1, 2, 1, 2]
        for i, mq in enumerate(gone + kept):
            c.seek(mq, 3 + i % 2)
        admin.delete_topic("CommitGone", "DefaultCluster")
        with pytest.raises(TopicNotExist):
            c.commit()
        assert [c.committed(mq) for mq in kept] == [3, 4]


def test_seek_to_end_then_new_messages_and_offset_for_timestamp(cluster: Cluster) -> None:
    cluster.create_topic("LPEnd", 4)
    produce(cluster, "LPEnd", 20, prefix="old")
    with LitePullConsumer("LPEndG", namesrv_addr=cluster.namesrv_addr, auto_commit=False) as c:
        queues = c.fetch_message_queues("LPEnd")
        c.assign(queues)
        for mq in queues:
            c.seek_to_end(mq)
        assert c.poll(timeout_ms=200) == []
        produce(cluster, "LPEnd", 8, prefix="new")
        got = collect_until(lambda: c.poll(timeout_ms=1000), 8, "messages", WAIT_S)
        assert sorted(m.body for m in got) == sorted(f"new-{i}".encode() for i in range(8))

        m = got[-1]
        mq = MessageQueue("LPEnd", "broker-a", m.queue_id)
        assert c.offset_for_timestamp(mq, 0) == 0
        assert c.offset_for_timestamp(mq, m.store_timestamp + 3_600_000) == m.queue_offset + 1
        found = c.offset_for_timestamp(mq, m.store_timestamp)
        assert found <= m.queue_offset
        c.seek(mq, found)
        first = collect_until(lambda: c.poll(timeout_ms=1000), 1, "messages", WAIT_S)[0]
        assert first.queue_offset == found and first.store_timestamp >= m.store_timestamp
        c.seek_to_begin(mq)
        assert collect_until(lambda: c.poll(timeout_ms=1000), 1, "messages", WAIT_S)[0].queue_offset == 0


def test_subscribe_with_tag_expression(cluster: Cluster) -> None:
    cluster.create_topic("LPTag", 4)
    c = LitePullConsumer(
        "LPTagG", namesrv_addr=cluster.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
    )
    c.subscribe("LPTag", "TagA || TagC")
    with c:
        assert len(c.assignment()) == 4
        sent = produce(cluster, "LPTag", 30)
        wanted = sorted(msg.body for msg, _ in sent if msg.tags in ("TagA", "TagC"))
        got = collect_until(lambda: c.poll(timeout_ms=1000), len(wanted), "messages", WAIT_S)
        assert sorted(m.body for m in got) == wanted
        assert {m.tags for m in got} == {"TagA", "TagC"}
        assert c.poll(timeout_ms=300) == []


def test_two_subscribers_split_the_queues(cluster: Cluster) -> None:
    cluster.create_topic("LPSplit", 4)
    kw = {"namesrv_addr": cluster.namesrv_addr, "consume_from_where": "CONSUME_FROM_FIRST_OFFSET"}
    c1 = LitePullConsumer("LPSplitG", **kw)  # type: ignore[arg-type]
    c2 = LitePullConsumer("LPSplitG", **kw)  # type: ignore[arg-type]
    c1.subscribe("LPSplit")
    c2.subscribe("LPSplit")
    c1.start()
    try:
        assert len(c1.assignment()) == 4
        c2.start()
        cluster.wait_for(
            "the queues to be split",
            lambda: (
                len(c1.assignment()) == 2
                and len(c2.assignment()) == 2
                and not set(c1.assignment()) & set(c2.assignment())
            ),
        )
        sent = produce(cluster, "LPSplit", 40)
        got: dict[str, list[MessageExt]] = {"c1": [], "c2": []}

        def polled_all() -> bool:
            got["c1"].extend(c1.poll(timeout_ms=200))
            got["c2"].extend(c2.poll(timeout_ms=200))
            return len(got["c1"]) + len(got["c2"]) >= 40

        wait_until(polled_all, "40 messages from the split queues", WAIT_S, 0)
        bodies = [m.body for m in got["c1"] + got["c2"]]
        assert sorted(bodies) == sorted(msg.body for msg, _ in sent)
        for name, consumer in (("c1", c1), ("c2", c2)):
            owned = {mq.queue_id for mq in consumer.assignment()}
            assert {m.queue_id for m in got[name]} <= owned
    finally:
        c2.shutdown()
        c1.shutdown()
    assert len(set(bodies)) == 40


def test_async_core_assign_and_poll(cluster: Cluster) -> None:
    cluster.create_topic("LPAsync", 2)
    produce(cluster, "LPAsync", 6)

    async def run() -> list[MessageExt]:
        async with AsyncLitePullConsumer(
            "LPAsyncG", namesrv_addr=cluster.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
        ) as c:
            c.assign(await c.fetch_message_queues("LPAsync"))
            got: list[MessageExt] = []
            async with asyncio.timeout(WAIT_S):
                while len(got) < 6:
                    got.extend(await c.poll(timeout_ms=1000))
            return got

    got = asyncio.run(run())
    assert sorted(m.body for m in got) == sorted(f"m-{i}".encode() for i in range(6))


def test_auto_commit_rides_on_pulls_and_survives_a_restart(cluster: Cluster) -> None:
    """With auto_commit the positions are stored by the next pulls (COMMIT_OFFSET flag): the
    periodic commit is an hour away and commit() is never called, yet consumerProgress shows
    every queue consumed before the consumer shuts down; a new member of the group then gets
    exactly the messages sent afterwards (none lost, none delivered again)."""
    cluster.create_topic("RideT", 2)
    sent = produce(cluster, "RideT", 60)
    queues = [MessageQueue("RideT", "broker-a", q) for q in range(2)]
    c = LitePullConsumer(
        "RideG",
        namesrv_addr=cluster.namesrv_addr,
        auto_commit=True,
        auto_commit_interval_ms=3_600_000,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        pull_batch_size=8,
    )
    with c, Admin(cluster.namesrv_addr) as admin:
        c.assign(queues)
        got = collect_until(lambda: c.poll(timeout_ms=1000), 60, "messages", WAIT_S)
        assert sorted(m.body for m in got) == sorted(m.body for m, _ in sent)
        ends = {q: max(r.queue_offset for _, r in sent if r.message_queue.queue_id == q) + 1 for q in (0, 1)}

        def progress() -> dict[int, int]:
            c.poll(timeout_ms=50)  # the next pulls carry the positions
            p = admin.consumer_progress("RideG", "RideT")
            return {q.queue_id: q.consumer_offset for q in p.queues}

        wait_until(lambda: progress() == ends, "offsets stored by the pulls", WAIT_S)
        assert [c.committed(mq) for mq in queues] == [ends[0], ends[1]]
    more = produce(cluster, "RideT", 10, prefix="late")
    resumed = LitePullConsumer(
        "RideG", namesrv_addr=cluster.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
    )
    with resumed:
        resumed.assign(queues)
        rest = collect_until(lambda: resumed.poll(timeout_ms=1000), 10, "messages", WAIT_S)
        assert sorted(m.body for m in rest) == sorted(m.body for m, _ in more)
        assert resumed.poll(timeout_ms=300) == []


def test_two_long_polls_answering_together_lose_neither_answer(cluster: Cluster) -> None:
    """Both queues' suspended pulls answer in the same loop iteration: the poll returns one
    queue's messages and the next poll the other's (the second answer's offset move is given
    back instead of skipping its messages)."""
    cluster.create_topic("LPTogether", 2)
    queues = [MessageQueue("LPTogether", "broker-a", q) for q in range(2)]

    async def run() -> tuple[list[MessageExt], list[MessageExt]]:
        async with AsyncLitePullConsumer(
            "LPTogetherG", namesrv_addr=cluster.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
        ) as c:
            c.assign(queues)
            real_pull = c.core.pull
            entered: list[MessageQueue] = []
            gate, together = asyncio.Event(), asyncio.Event()
            answered: list[MessageQueue] = []

            async def pull(mq: MessageQueue, offset: int, suspend_ms: int, **kw: Any) -> Any:
                if suspend_ms == 0:
                    return await real_pull(mq, offset, suspend_ms, **kw)
                entered.append(mq)
                await gate.wait()
                got = await real_pull(mq, offset, 0, **kw)
                answered.append(mq)
                if len(answered) == len(queues):
                    together.set()
                await together.wait()  # both answers complete in one loop iteration
                return got

            c.core.pull = pull  # type: ignore[method-assign]
            first_poll = asyncio.create_task(c.poll(timeout_ms=10_000))
            async with asyncio.timeout(WAIT_S):
                while len(entered) < len(queues):
                    await asyncio.sleep(0.01)  # bounded poll for both suspended pulls
            with Producer("LPTogetherP", namesrv_addr=cluster.namesrv_addr) as p:
                for q in queues:
                    await asyncio.to_thread(p.send, Message("LPTogether", f"q{q.queue_id}".encode()), queue=q)
            gate.set()
            first = await first_poll
            c.core.pull = real_pull  # type: ignore[method-assign]
            second = await c.poll(timeout_ms=5_000)
            return first, second

    first, second = asyncio.run(run())
    assert len(first) == 1 and len(second) == 1
    assert sorted(m.body for m in first + second) == [b"q0", b"q1"]
