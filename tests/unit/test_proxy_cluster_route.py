"""Pure helpers of the cluster-mode proxy: transaction ids and remoting route → gRPC queues."""

from __future__ import annotations

import pytest

from rocketq.namesrv.bodies import BrokerData, QueueData, TopicRouteData
from rocketq.proxy import route
from rocketq.proxy.cluster import decode_transaction_id, encode_transaction_id, route_queues
from rocketq.proxy.status import InvalidTransactionId
from rocketq.proxy.v2 import definition_pb2 as pb


def test_transaction_id_round_trip_names_the_broker() -> None:
    text = encode_transaction_id(0x1234, 7, "broker-b")
    assert decode_transaction_id(text) == (0x1234, 7, "broker-b")


@pytest.mark.parametrize("bad", ["", "nonsense", "00@b", f"{'Z' * 32}@b", f"{'0' * 32}@", "0" * 32])
def test_foreign_transaction_ids_are_refused(bad: str) -> None:
    with pytest.raises(InvalidTransactionId):
        decode_transaction_id(bad)


def test_route_queues_cover_every_master_and_point_at_the_proxy() -> None:
    data = TopicRouteData(
        queue_datas=(
            QueueData("broker-b", 2, 2, 6),
            QueueData("broker-a", 3, 2, 6),
            QueueData("broker-c", 4, 4, 6),  # no master: left out
        ),
        broker_datas=(
            BrokerData("C", "broker-a", {0: "127.0.0.1:10911"}),
            BrokerData("C", "broker-b", {0: "127.0.0.1:10921", 1: "127.0.0.1:10922"}),
            BrokerData("C", "broker-c", {1: "127.0.0.1:10931"}),
        ),
    )
    proxy = route.endpoints("127.0.0.1", 8081)
    queues = route_queues("T", data, "TRANSACTION", endpoints=proxy)
    assert [(q.broker.name, q.id) for q in queues] == [
        ("broker-a", 0), ("broker-a", 1), ("broker-a", 2), ("broker-b", 0), ("broker-b", 1),
    ]  # fmt: skip
    assert [q.permission for q in queues[:3]] == [pb.READ_WRITE, pb.READ_WRITE, pb.READ]
    assert all(
        q.broker.endpoints == proxy and list(q.accept_message_types) == [pb.TRANSACTION] for q in queues
    )
