"""rocketq.testing.InProcessCluster: a real name server and brokers inside the test process,
used through the project's own client SDK over real sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
import os
import pathlib
import shutil
import socket
import threading

import pytest

from _support.wait import collect_until, wait_until
from rocketq.client import LitePullConsumer, Message, Producer, SendStatus
from rocketq.client.aio import AsyncProducer
from rocketq.errors import RocketqError, TopicNameInvalid
from rocketq.message import MessageExt
from rocketq.testing import ClusterStartError, InProcessCluster
from rocketq.testing import rocketq_cluster as rocketq_cluster  # noqa: PLC0414 - the fixture, used below

WAIT_S = 30.0


def consume(namesrv_addr: str, topic: str, count: int, group: str = "CG") -> list[MessageExt]:
    """Every message of ``topic`` from the start, through a LitePullConsumer, until ``count``."""
    with LitePullConsumer(
        group, namesrv_addr=namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
    ) as consumer:
        consumer.subscribe(topic, "*")
        return collect_until(lambda: consumer.poll(timeout_ms=500), count, f"messages of {topic}", WAIT_S)


def total_messages(cluster: InProcessCluster, topic: str, queues: int) -> int:
    cluster.wait_dispatched()
    return sum(
        cluster.store(name).get_max_offset(topic, q) for name in cluster.broker_names for q in range(queues)
    )


def thread_names_since(before: set[threading.Thread]) -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t not in before and t.is_alive())


def test_produce_and_consume_through_the_client_sdk() -> None:
    with InProcessCluster() as cluster:
        host, port = cluster.namesrv_addr.split(":")
        assert host == "127.0.0.1" and int(port) > 0
        assert list(cluster.broker_addrs) == ["broker-a"]
        assert cluster.grpc_endpoint is None
        cluster.create_topic("Orders", queues=4)
        bodies = {f"order-{i}".encode() for i in range(12)}
        with Producer("PG", namesrv_addr=cluster.namesrv_addr) as producer:
            for body in sorted(bodies):
                assert producer.send(Message("Orders", body, tags="new")).status is SendStatus.SEND_OK
        got = consume(cluster.namesrv_addr, "Orders", len(bodies))
        assert {m.body for m in got} == bodies
        assert {m.queue_id for m in got} == {0, 1, 2, 3}  # the topic really has the 4 queues asked for
        assert total_messages(cluster, "Orders", 4) == len(bodies)


def test_topic_is_routable_as_soon_as_create_topic_returns() -> None:
    with InProcessCluster(auto_create_topic=False) as cluster:
        cluster.create_topic("Routed", queues=2)
        with Producer("PG", namesrv_addr=cluster.namesrv_addr) as producer:
            result = producer.send(Message("Routed", b"x"))
        assert result.message_queue.queue_id in (0, 1)
        with pytest.raises(TopicNameInvalid):
            cluster.create_topic("bad topic name", queues=2)
        with pytest.raises(ValueError, match="queues=0"):
            cluster.create_topic("Fine", queues=0)


def test_several_brokers_form_one_cluster() -> None:
    with InProcessCluster(brokers=2, cluster_name="C2") as cluster:
        assert list(cluster.broker_addrs) == ["broker-a", "broker-b"]
        assert len(set(cluster.broker_addrs.values())) == 2
        assert {cluster.broker(n).config.broker_cluster_name for n in cluster.broker_names} == {"C2"}
        cluster.create_topic("Spread", queues=2)
        with Producer("PG", namesrv_addr=cluster.namesrv_addr) as producer:
            brokers = {producer.send(Message("Spread", b"m")).message_queue.broker_name for _ in range(8)}
        assert brokers == {"broker-a", "broker-b"}  # round-robin over both brokers' queues
        assert all(total_messages_of(cluster, name, "Spread", 2) > 0 for name in cluster.broker_names)


def total_messages_of(cluster: InProcessCluster, broker: str, topic: str, queues: int) -> int:
    cluster.wait_dispatched()
    return sum(cluster.store(broker).get_max_offset(topic, q) for q in range(queues))


def test_two_clusters_run_side_by_side() -> None:
    with InProcessCluster() as one, InProcessCluster() as two:
        assert one.namesrv_addr != two.namesrv_addr
        assert one.broker_addrs["broker-a"] != two.broker_addrs["broker-a"]
        assert one.data_dir != two.data_dir
        for cluster, count in ((one, 3), (two, 5)):
            cluster.create_topic("T", queues=1)
            with Producer("PG", namesrv_addr=cluster.namesrv_addr) as producer:
                for i in range(count):
                    producer.send(Message("T", f"{count}-{i}".encode()))
        one.wait_dispatched()
        two.wait_dispatched()
        assert one.store().get_max_offset("T", 0) == 3
        assert two.store().get_max_offset("T", 0) == 5
        assert {m.body for m in consume(two.namesrv_addr, "T", 5)} == {f"5-{i}".encode() for i in range(5)}


def test_restart_broker_keeps_ports_and_data() -> None:
    with InProcessCluster() as cluster:
        cluster.create_topic("Kept", queues=2)
        with Producer("PG", namesrv_addr=cluster.namesrv_addr) as producer:
            for i in range(6):
                producer.send(Message("Kept", f"before-{i}".encode()))
        addrs_before, store_before = dict(cluster.broker_addrs), cluster.store("broker-a")
        cluster.restart_broker("broker-a")
        assert cluster.broker_addrs == addrs_before
        assert cluster.store("broker-a") is not store_before  # a new store, recovered from the files
        assert total_messages(cluster, "Kept", 2) == 6
        with Producer("PG2", namesrv_addr=cluster.namesrv_addr) as producer:
            producer.send(Message("Kept", b"after"))
        bodies = {m.body for m in consume(cluster.namesrv_addr, "Kept", 7)}
        assert bodies == {f"before-{i}".encode() for i in range(6)} | {b"after"}
        with pytest.raises(RocketqError, match="no running broker 'broker-z'"):
            cluster.restart_broker("broker-z")


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else set()


def test_stop_is_idempotent_ends_threads_and_removes_temporary_data() -> None:
    before = set(threading.enumerate())
    fds_before = open_fds()
    cluster = InProcessCluster().start()
    data_dir = cluster.data_dir
    assert data_dir is not None and os.path.isdir(os.path.join(data_dir, "broker-a"))
    assert cluster.running
    with Producer("PG", namesrv_addr=cluster.namesrv_addr) as producer:
        producer.send(Message("Auto", b"auto-created topic"))
    cluster.stop()
    cluster.stop()
    assert not cluster.running
    assert not os.path.exists(data_dir)
    wait_until(lambda: not thread_names_since(before), "the cluster's threads to end", 15.0, 0.02)
    wait_until(lambda: open_fds() <= fds_before, "the cluster's files and sockets to close", 15.0, 0.02)
    with pytest.raises(RocketqError, match="not started"):
        _ = cluster.namesrv_addr


def test_keep_data_and_a_given_data_dir_are_left_in_place(tmp_path: pathlib.Path) -> None:
    with InProcessCluster(keep_data=True) as kept:
        kept_dir = kept.data_dir
    assert kept_dir is not None and os.path.isdir(os.path.join(kept_dir, "broker-a"))
    shutil.rmtree(kept_dir)
    given = tmp_path / "rq"
    with InProcessCluster(data_dir=given) as cluster:
        assert cluster.data_dir == str(given)
    assert (given / "broker-a").is_dir()


def test_start_fails_with_a_clear_error_when_the_data_dir_is_a_file(tmp_path: pathlib.Path) -> None:
    not_a_dir = tmp_path / "data"
    not_a_dir.write_bytes(b"precious")
    before = set(threading.enumerate())
    cluster = InProcessCluster(data_dir=not_a_dir)
    with pytest.raises(ClusterStartError, match="is not a directory"):
        cluster.start()
    assert not cluster.running
    assert not_a_dir.read_bytes() == b"precious"
    wait_until(lambda: not thread_names_since(before), "the failed cluster's threads to end", 15.0, 0.02)
    cluster.stop()  # still harmless


def test_start_fails_with_a_clear_error_when_a_broker_store_cannot_open(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "data"
    root.mkdir()
    (root / "broker-a").write_bytes(b"in the way")  # the broker's store directory is a file
    with pytest.raises(ClusterStartError, match=r"broker broker-a .* did not start"):
        InProcessCluster(data_dir=root).start()


@pytest.mark.parametrize("start_timeout_s", [1e-6, 0.005, 0.02])
def test_start_is_bounded_by_start_timeout(start_timeout_s: float) -> None:
    """Given up on at any point of its start (even while a broker opens its store), the
    cluster leaves nothing running."""
    before = set(threading.enumerate())
    cluster = InProcessCluster(start_timeout_s=start_timeout_s)
    try:
        cluster.start()
    except ClusterStartError as exc:
        assert "did not finish within" in str(exc)
        assert not cluster.running
    else:  # a fast machine finished in time
        cluster.stop()
    wait_until(lambda: not thread_names_since(before), "the abandoned cluster's threads to end", 15.0, 0.02)


def test_invalid_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="brokers=0"):
        InProcessCluster(brokers=0)
    with pytest.raises(ValueError, match="grpc=True"):
        InProcessCluster(brokers=2, grpc=True)


def test_grpc_endpoint_listens_when_asked_for() -> None:
    with InProcessCluster(grpc=True) as cluster:
        endpoint = cluster.grpc_endpoint
        assert endpoint is not None
        host, port = endpoint.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=5):
            pass
        cluster.restart_broker("broker-a")
        assert cluster.grpc_endpoint == endpoint


def test_asyncio_code_uses_the_cluster_with_async_with() -> None:
    async def main() -> list[str]:
        async with InProcessCluster() as cluster:
            await asyncio.to_thread(cluster.create_topic, "Async", 2)
            async with AsyncProducer("PG", namesrv_addr=cluster.namesrv_addr) as producer:
                results = [await producer.send(Message("Async", f"a{i}".encode())) for i in range(4)]
            assert total_messages(cluster, "Async", 2) == 4
            return [r.status.name for r in results]

    assert asyncio.run(asyncio.wait_for(main(), 60)) == ["SEND_OK"] * 4


def test_the_pytest_fixture_gives_a_started_cluster(rocketq_cluster: InProcessCluster) -> None:
    assert rocketq_cluster.running
    with Producer("PG", namesrv_addr=rocketq_cluster.namesrv_addr) as producer:
        result = producer.send(Message("FixtureTopic", b"via fixture"))
    assert result.status is SendStatus.SEND_OK
    rocketq_cluster.wait_dispatched()
    assert rocketq_cluster.store().get_max_offset("FixtureTopic", result.message_queue.queue_id) == 1
