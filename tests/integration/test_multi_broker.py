"""Two brokers of one cluster behind one name server, each in its own process.

``rocketq namesrv -c namesrv.conf --port P`` and two ``rocketq broker -c broker-X.conf`` processes
run on 127.0.0.1, configured the way a RocketMQ deployment is: one ``broker.conf`` per broker
with the same ``brokerClusterName``, a different ``brokerName`` and ``listenPort``, and
``namesrvAddr`` pointing at the name server. The test checks what a client relies on:

* both brokers are listed in GET_BROKER_CLUSTER_INFO;
* a topic created on both brokers (4 queues each) is routed to both: GET_ROUTEINFO_BY_TOPIC
  answers a queueData and a brokerData per broker, 8 queues in all;
* messages sent to every queue of each broker are pulled back from that broker, intact;
* after SIGKILL of one broker the name server drops it from the cluster and from the route (its
  connection closes; if that went unnoticed it would expire) and the other broker keeps serving;
* SIGTERM stops the survivor cleanly (exit code 0, no ``abort`` file) and the name server.

Every wait is on a condition with a deadline.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import socket
import struct
import uuid
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import pytest
from procs import ProcessCluster

from _support.requests import create_topic_request, pull_request, send_request
from _support.wait import wait_until_async
from rocketq.errors import RemotingError, ResponseCode
from rocketq.message import decode_properties
from rocketq.protocol import fastjson
from rocketq.protocol import record as rec
from rocketq.remoting import RemotingClient, RemotingCommand, RequestCode, create_request

pytestmark = pytest.mark.slow  # broker processes, one killed

T = TypeVar("T")

CLUSTER = "MultiCluster"
BROKERS = ("broker-a", "broker-b")
TOPIC = "MultiBrokerTopic"
QUEUES = 4
PER_QUEUE = 5
WAIT_S = 20.0
CALL_TIMEOUT_S = 5.0
POLL_S = 0.02


def run(coro: Coroutine[Any, Any, T], limit_s: float = 50.0) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, limit_s)

    return asyncio.run(bounded())


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[ProcessCluster]:
    c = ProcessCluster(tmp_path, BROKERS, cluster=CLUSTER)
    try:
        yield c
    finally:
        c.close()


# -- requests ---------------------------------------------------------------------------------


async def call_ok(client: RemotingClient, addr: str, request: RemotingCommand) -> RemotingCommand:
    response = await client.invoke(addr, request, CALL_TIMEOUT_S)
    assert response.code == ResponseCode.SUCCESS, (addr, request.code, response.code, response.remark)
    return response


async def cluster_info(client: RemotingClient, namesrv: str) -> dict[str, Any]:
    r = await call_ok(client, namesrv, create_request(RequestCode.GET_BROKER_CLUSTER_INFO))
    info: dict[str, Any] = fastjson.loads(r.body.decode())
    return info


async def route(client: RemotingClient, namesrv: str, topic: str) -> dict[str, Any] | None:
    """The topic's route, or None while the name server has none (TOPIC_NOT_EXIST)."""
    r = await client.invoke(namesrv, create_request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
    if r.code == ResponseCode.TOPIC_NOT_EXIST:
        return None
    assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
    data: dict[str, Any] = json.loads(r.body)
    return data


def send(broker_name: str, queue_id: int, body: bytes, key: str) -> RemotingCommand:
    return send_request(
        TOPIC,
        body,
        queue_id=queue_id,
        group="MultiBrokerProducer",
        properties={"KEYS": key, "TAGS": "TagA", "UNIQ_KEY": uuid.uuid4().hex.upper(), "WAIT": "true"},
        default_topic_queue_nums=QUEUES,
        reconsume_times=0,
        broker_name=broker_name,
    )


def pull(queue_id: int, offset: int) -> RemotingCommand:
    return pull_request(
        TOPIC, offset, queue_id=queue_id, group="MultiBrokerConsumer", suspend_ms=0, expression_type="TAG"
    )


async def send_round(client: RemotingClient, broker: str, addr: str, tag: str) -> dict[int, list[bytes]]:
    """PER_QUEUE messages to every queue of one broker; returns the bodies per queue, in order."""
    sent: dict[int, list[bytes]] = {}
    for q in range(QUEUES):
        for i in range(PER_QUEUE):
            body = f"{tag}:{broker}:{q}:{i}".encode()
            r = await call_ok(client, addr, send(broker, q, body, f"{tag}-{broker}-{q}-{i}"))
            assert r.ext_fields["queueId"] == str(q), r.ext_fields
            sent.setdefault(q, []).append(body)
    return sent


async def read_queue(client: RemotingClient, addr: str, queue_id: int) -> list[rec.RecordView]:
    """Every message of one queue, offsets checked to run 0, 1, 2, ... without a gap."""
    out: list[rec.RecordView] = []
    offset = 0
    while True:
        r = await client.invoke(addr, pull(queue_id, offset), CALL_TIMEOUT_S)
        if r.code == ResponseCode.PULL_NOT_FOUND:
            return out
        assert r.code == ResponseCode.SUCCESS, (addr, queue_id, offset, r.code, r.remark)
        pos = 0
        while pos < len(r.body):
            view = rec.decode_record(r.body, pos, check_crc=True)
            assert view.kind is rec.RecordKind.MESSAGE, view.reason
            assert (view.topic, view.queue_id, view.queue_offset) == (TOPIC, queue_id, offset)
            out.append(view)
            offset += 1
            pos += view.size
        assert int(r.ext_fields["nextBeginOffset"]) == offset, r.ext_fields


def store_host_bytes(addr: str) -> bytes:
    """A record's STOREHOST field for ``ip:port`` (IPv4, then the port as a 4-byte int)."""
    ip, port = addr.rsplit(":", 1)
    return socket.inet_aton(ip) + struct.pack(">i", int(port))


async def check_queues(
    client: RemotingClient, broker: str, addr: str, expected: dict[int, list[bytes]]
) -> None:
    for q in range(QUEUES):
        # an acknowledged message reaches its ConsumeQueue when dispatch gets to it, a moment
        # after the ack: read until the queue holds what was sent (bounded), then compare
        views: list[rec.RecordView] = []

        async def filled(q: int = q, views: list[rec.RecordView] = views) -> bool:
            views[:] = await read_queue(client, addr, q)
            return len(views) >= len(expected[q])

        await wait_until_async(filled, f"{broker} queue {q} to hold {len(expected[q])} messages", WAIT_S)
        assert [v.body for v in views] == expected[q], f"{broker} queue {q}"
        for view in views:
            assert view.store_host == store_host_bytes(addr), (broker, view.store_host)
            tag = (view.body or b"").split(b":")[0].decode()
            props = decode_properties(view.properties)
            assert props["KEYS"].startswith(f"{tag}-{broker}-"), props
            assert props["CLUSTER"] == CLUSTER, props


# -- the test ---------------------------------------------------------------------------------


def test_two_brokers_one_cluster_route_send_pull_and_survive_a_killed_broker(cluster: ProcessCluster) -> None:
    async def scenario() -> None:
        cluster.start_namesrv()
        ns = cluster.namesrv_addr
        async with RemotingClient() as client:

            async def namesrv_up() -> bool:
                try:
                    await client.invoke(ns, create_request(RequestCode.GET_BROKER_CLUSTER_INFO), 1.0)
                except (RemotingError, OSError):
                    return False
                return True

            await wait_until_async(
                namesrv_up,
                lambda: f"the name server to listen\n{cluster.diagnostics()}",
                WAIT_S,
                POLL_S,
                check=cluster.check_alive,
            )
            for name in BROKERS:
                cluster.start_broker(name, autoCreateTopicEnable="false")

            async def both_registered() -> bool:
                info = await cluster_info(client, ns)
                addrs = {name: data["brokerAddrs"] for name, data in info.get("brokerAddrTable", {}).items()}
                return sorted(info.get("clusterAddrTable", {}).get(CLUSTER, [])) == list(BROKERS) and all(
                    addrs.get(n) == {"0": cluster.broker_addr(n)} for n in BROKERS
                )

            await wait_until_async(
                both_registered,
                lambda: f"both brokers in GET_BROKER_CLUSTER_INFO\n{cluster.diagnostics()}",
                WAIT_S,
                POLL_S,
                check=cluster.check_alive,
            )
            info = await cluster_info(client, ns)
            for name in BROKERS:
                assert info["brokerAddrTable"][name]["cluster"] == CLUSTER

            # the same topic on both brokers, as `mqadmin updateTopic -c` does broker by broker
            for name in BROKERS:
                await call_ok(client, cluster.broker_addr(name), create_topic_request(TOPIC, queues=QUEUES))

            async def routed_to(names: tuple[str, ...]) -> bool:
                data = await route(client, ns, TOPIC)
                if data is None:
                    return False
                queues = {q["brokerName"]: q for q in data["queueDatas"]}
                brokers = {b["brokerName"] for b in data["brokerDatas"]}
                return (
                    set(queues) == set(names)
                    and brokers == set(names)
                    and all(q["readQueueNums"] == q["writeQueueNums"] == QUEUES for q in queues.values())
                )

            await wait_until_async(
                lambda: routed_to(BROKERS),
                lambda: f"the topic routed to both brokers\n{cluster.diagnostics()}",
                WAIT_S,
                POLL_S,
                check=cluster.check_alive,
            )
            data = await route(client, ns, TOPIC)
            assert data is not None
            assert sum(q["writeQueueNums"] for q in data["queueDatas"]) == 2 * QUEUES
            addrs = {b["brokerName"]: b["brokerAddrs"] for b in data["brokerDatas"]}
            assert addrs == {n: {"0": cluster.broker_addr(n)} for n in BROKERS}

            # send to every queue of the route (4 per broker), pull back from each broker
            sent: dict[str, dict[int, list[bytes]]] = {}
            for name in BROKERS:
                sent[name] = await send_round(client, name, cluster.broker_addr(name), "r1")
            for name in BROKERS:
                await check_queues(client, name, cluster.broker_addr(name), sent[name])

            # SIGKILL broker-b: no unregistration, the name server notices the closed connection
            dead, alive = BROKERS[1], BROKERS[0]
            cluster.processes.pop(dead).kill()

            async def dead_dropped() -> bool:
                info = await cluster_info(client, ns)
                return (
                    info.get("clusterAddrTable", {}).get(CLUSTER) == [alive]
                    and dead not in info.get("brokerAddrTable", {})
                    and await routed_to((alive,))
                )

            await wait_until_async(
                dead_dropped,
                lambda: f"the name server to drop {dead}\n{cluster.diagnostics()}",
                WAIT_S,
                POLL_S,
                check=cluster.check_alive,
            )

            # the survivor keeps serving: its earlier messages and new ones
            more = await send_round(client, alive, cluster.broker_addr(alive), "r2")
            for q, bodies in more.items():
                sent[alive][q].extend(bodies)
            await check_queues(client, alive, cluster.broker_addr(alive), sent[alive])
            data = await route(client, ns, TOPIC)
            assert data is not None and [q["brokerName"] for q in data["queueDatas"]] == [alive]

        # clean stop of the survivor, then of the name server
        assert cluster.processes[alive].terminate() == 0, cluster.diagnostics()
        assert not (cluster.store_dir(alive) / "abort").exists()
        assert (cluster.store_dir(dead) / "abort").exists()  # a crash leaves it for recovery
        assert cluster.processes["namesrv"].terminate() == 0, cluster.diagnostics()

    run(scenario())
