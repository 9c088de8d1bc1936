"""A DLedger group of broker processes with one topic on every member, for the process tests.

:func:`topic_group` starts a :class:`~rocketq.testing.chaos.cluster.ChaosGroup` (the test is
skipped where the machine cannot run one), creates the topic on every member (so any member
that becomes master routes it), waits until every member holds it and the name server routes
it, yields the group, and stops it at the end (printing every member's log when the test
failed, removing the data when it passed). :func:`stored_bodies` reads back what a topic holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import pathlib
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from _support.wait import wait_until
from rocketq.client import Admin
from rocketq.errors import ResponseCode, RocketqError
from rocketq.remoting import RemotingClient, RemotingCommand
from rocketq.remoting.codes import RequestCode
from rocketq.remoting.command import create_request
from rocketq.testing.chaos.cluster import ChaosGroup, ChaosUnsupported

WAIT_S = 60.0


def _topics_on(addr: str) -> set[str]:
    """The topics the broker at ``addr`` holds (its GET_ALL_TOPIC_CONFIG), empty when it does not
    answer."""

    async def ask() -> RemotingCommand:
        client = RemotingClient()
        try:
            return await client.invoke(addr, create_request(RequestCode.GET_ALL_TOPIC_CONFIG), 3)
        finally:
            await client.close()

    try:
        response = asyncio.run(asyncio.wait_for(ask(), 5))
    except (RocketqError, OSError, TimeoutError):
        return set()
    if response.code != ResponseCode.SUCCESS or not response.body:
        return set()
    table = json.loads(response.body).get("topicConfigTable", {})
    return set(table) if isinstance(table, dict) else set()


def _routed(admin: Admin, topic: str) -> bool:
    try:
        return len(admin.topic_route(topic).queue_datas) > 0
    except RocketqError:
        return False


@contextlib.contextmanager
def topic_group(root: pathlib.Path, topic: str, queues: int, **group_options: Any) -> Iterator[ChaosGroup]:
    """``group_options`` go to :class:`ChaosGroup` (timeouts, ``conf``, ...)."""
    group = ChaosGroup(root, **{"verbose": False, **group_options})
    try:
        try:
            group.start()
        except ChaosUnsupported as exc:
            pytest.skip(str(exc))
        with Admin(group.namesrv_addr) as admin:
            for node in group.node_ids:
                admin.create_topic(topic, queues, queues, broker_addr=group.broker_addr(node))
        for node in group.node_ids:
            addr = group.broker_addr(node)
            wait_until(lambda a=addr: topic in _topics_on(a), f"node {node} holding {topic}", WAIT_S)
        with Admin(group.namesrv_addr) as admin:
            wait_until(lambda: _routed(admin, topic), f"the name server routing {topic}", WAIT_S)
        yield group
    except BaseException:
        print(group.logs())
        raise
    else:
        group.stop()
        shutil.rmtree(group.root, ignore_errors=True)
    finally:
        group.stop()


def stored_bodies(namesrv: str, topic: str, queues: int, broker: str) -> list[bytes]:
    """Every body ``topic`` holds on ``broker`` (its master), queue by queue, in queue order."""
    out: list[bytes] = []
    with Admin(namesrv) as admin:
        for qid in range(queues):
            offset = 0
            while batch := admin.consume_message(topic, qid, offset, 256, broker_name=broker):
                out.extend(m.body for m in batch)
                offset = batch[-1].queue_offset + 1
    return out
