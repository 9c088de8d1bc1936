"""The ``rocketq`` data source against a DLedger group of three broker processes
(``rocketq serve --dledger 3``): a batch read finds every message sent, on the master; after a
SIGKILL of the master the same messages at the same offsets on the new master (and a partition
planned on the dead master reads on from another member); and after a
SIGKILL of that one too (no quorum, no master left) the same again from the last follower, which
serves what was committed.

Election timeout 1000 ms, heartbeats every 200 ms (what ``serve`` writes into the confs). The test
kills nothing but the broker processes whose pids the serve banner prints.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pathlib
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from _support.serve_group import ServeGroup, running
from _support.wait import wait_until
from rocketq.client import Admin, Message, Producer, SendStatus
from rocketq.errors import ResponseCode, RocketqError
from rocketq.remoting import RemotingClient, RequestCode, create_request
from rocketq.spark.batch import QueuePartition, read_partition
from rocketq.spark.offsets import QueueRef

TOPIC = "SparkGroupT"
BROKER = "broker-a"
QUEUES = 4
COUNT = 400
WAIT_S = 45.0


@pytest.fixture
def group(tmp_path: pathlib.Path) -> Iterator[ServeGroup]:
    with running(ServeGroup(tmp_path)) as g:
        yield g


def _max_offsets(addr: str) -> int:
    """The sum of the topic's queue max offsets on the broker at ``addr`` (-1 if it cannot say)."""

    async def ask() -> int:
        client = RemotingClient()
        try:
            total = 0
            for qid in range(QUEUES):
                request = create_request(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": qid})
                response = await client.invoke(addr, request, 5)
                if response.code != ResponseCode.SUCCESS:
                    return -1
                total += int(response.ext_fields.get("offset", 0))
            return total
        except RocketqError:
            return -1
        finally:
            await client.close()

    return asyncio.run(ask())


def _topics_on(addr: str) -> set[str]:
    """The topics the broker at ``addr`` has a config for (empty if it cannot say)."""

    async def ask() -> set[str]:
        client = RemotingClient()
        try:
            response = await client.invoke(addr, create_request(RequestCode.GET_ALL_TOPIC_CONFIG), 5)
        except RocketqError:
            return set()
        finally:
            await client.close()
        if response.code != ResponseCode.SUCCESS or not response.body:
            return set()
        table = json.loads(response.body).get("topicConfigTable", {})
        return set(table) if isinstance(table, dict) else set()

    return asyncio.run(ask())


def _read(spark: Any, namesrv: str) -> list[tuple[int, int, bytes]]:
    rows = (
        spark.read.format("rocketq")
        .option("nameServer", namesrv)
        .option("topic", TOPIC)
        .load()
        .select("queueId", "queueOffset", "body")
        .collect()
    )
    return sorted((r["queueId"], r["queueOffset"], bytes(r["body"])) for r in rows)


def _gone(pid: int) -> bool:
    """The process has exited (a zombie until ``serve`` reaps it counts as gone)."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


def test_a_batch_read_sees_the_same_committed_messages_on_every_member(
    spark: Any, group: ServeGroup, caplog: pytest.LogCaptureFixture
) -> None:
    with Admin(group.namesrv) as admin:
        wait_until(lambda: 0 in group.members(admin), "a master", WAIT_S)
        admin.create_topic(TOPIC, QUEUES, QUEUES, cluster="DefaultCluster")
        wait_until(lambda: len(admin.topic_route(TOPIC).queue_datas) > 0, "the topic's route", WAIT_S, 0.2)
        with Producer("SparkGroupPG", namesrv_addr=group.namesrv) as producer:
            sent = [producer.send(Message(TOPIC, f"s-{i}".encode())) for i in range(COUNT)]
        assert all(r.status is SendStatus.SEND_OK for r in sent)
        # every member has dispatched all of them (followers learn the commit from heartbeats),
        # and knows the topic (followers copy topic configs from the master periodically, as
        # RocketMQ's slaves do; a member promoted before its copy answers TOPIC_NOT_EXIST)
        for addr in group.pids:
            wait_until(lambda a=addr: _max_offsets(a) == COUNT, f"{addr} holding {COUNT} messages", WAIT_S)
            wait_until(lambda a=addr: TOPIC in _topics_on(a), f"{addr} knowing {TOPIC}", WAIT_S)

        on_master = _read(spark, group.namesrv)
        assert len(on_master) == COUNT
        assert sorted(body for _, _, body in on_master) == sorted(f"s-{i}".encode() for i in range(COUNT))
        assert {(r.message_queue.queue_id, r.queue_offset) for r in sent} == {(q, o) for q, o, _ in on_master}

        # the master dies: the group elects another, and the read goes there
        first = group.members(admin)[0]
        os.kill(group.pids[first], signal.SIGKILL)
        wait_until(lambda: _gone(group.pids[first]), "the killed master gone", WAIT_S)
        # a partition planned on the old master finds another member and reads on there
        queue0 = [(o, body) for q, o, body in on_master if q == 0]
        part = QueuePartition(
            ref=QueueRef(TOPIC, BROKER, 0),
            addr=first,
            start=0,
            end=len(queue0),
            tags=None,
            offsets=None,
            fail_on_data_loss=True,
            pull_batch_size=32,
            request_timeout_ms=5000,
            name_server=group.namesrv,
        )
        caplog.set_level(logging.WARNING, logger="rocketq.spark.batch")
        rerouted = [(r["queueOffset"], r["body"]) for b in read_partition(part) for r in b.to_pylist()]
        assert rerouted == queue0
        assert f"{first} stopped answering" in caplog.text
        second = wait_until(
            lambda: (m := group.members(admin).get(0)) not in (None, first) and m, "a new master", WAIT_S
        )
        assert _read(spark, group.namesrv) == on_master

        # the new master dies too: one member left, no quorum, no master; the route lists the
        # last follower only, and the read is served by it
        os.kill(group.pids[second], signal.SIGKILL)
        wait_until(
            lambda: (m := group.members(admin)) and 0 not in m and second not in m.values(),
            "the route without a master",
            WAIT_S,
        )
        (last,) = group.members(admin).values()
        assert last not in (first, second)
        assert _read(spark, group.namesrv) == on_master
