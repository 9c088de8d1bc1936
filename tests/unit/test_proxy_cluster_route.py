"""Pure helpers of the cluster-mode proxy: transaction ids and remoting route → gRPC queues."""

from __future__ import annotations

import pytest

from rocketq.broker.pop.service import PoppedMessage
from rocketq.broker.pop_processor import encode_popped
from rocketq.errors import InvalidReceiptHandle, RemoteProtocolError
from rocketq.message import PROPERTY_POP_CK, MessageExt
from rocketq.protocol.route import BrokerData, QueueData, TopicRouteData
from rocketq.proxy import route
from rocketq.proxy.cluster import (
    decode_popped,
    decode_receipt_handle,
    decode_transaction_id,
    encode_receipt_handle,
    encode_transaction_id,
    route_queues,
)
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


def test_receipt_handle_names_the_broker() -> None:
    text = encode_receipt_handle("1.2.a.1.18f.ff.0badcafe", "broker-b", 0x1F00)
    assert text == "1.2.a.1.18f.ff.0badcafe@broker-b@1f00"
    assert decode_receipt_handle(text) == ("1.2.a.1.18f.ff.0badcafe", "broker-b", 0x1F00)


@pytest.mark.parametrize(
    "bad", ["", "1.2.3", "@broker-a", "1.2.3@", "1.2.3@broker-a", "1.2.3@broker-a@xyz", "1.2@b@1@2"]
)
def test_foreign_receipt_handles_are_refused(bad: str) -> None:
    with pytest.raises(InvalidReceiptHandle):
        decode_receipt_handle(bad)


def _popped(body: bytes, offset: int, attempt: int, handle: str) -> PoppedMessage:
    ext = MessageExt(
        topic="T",
        body=body,
        properties={"UNIQ_KEY": f"U{offset}", "TAGS": "t"},
        queue_id=3,
        queue_offset=offset,
        born_host="127.0.0.1:5000",
        store_host="127.0.0.1:10911",
        born_timestamp=1_000,
        store_timestamp=2_000,
    )
    return PoppedMessage(ext, 3, offset, handle, attempt, 99_000)


def test_pop_body_round_trip_carries_handle_and_attempt() -> None:
    body = encode_popped([_popped(b"a", 5, 1, "h-five"), _popped(b"bb", 9, 3, "h-nine")])
    got = decode_popped(body)
    assert [(h, m.body, m.queue_id, m.queue_offset, m.reconsume_times) for h, m in got] == [
        ("h-five", b"a", 3, 5, 0),
        ("h-nine", b"bb", 3, 9, 2),
    ]
    assert all(PROPERTY_POP_CK not in m.properties and m.properties["TAGS"] == "t" for _, m in got)
    assert got[1][1].born_host == "127.0.0.1:5000" and got[1][1].store_timestamp == 2_000


def test_pop_body_without_handle_or_damaged_is_refused() -> None:
    good = encode_popped([_popped(b"a", 5, 1, "h")])
    with pytest.raises(RemoteProtocolError, match="no POP_CK"):
        decode_popped(good.replace(PROPERTY_POP_CK.encode(), b"XXX_XX"))
    with pytest.raises(RemoteProtocolError):
        decode_popped(good[:-3])
