"""Pure conversions of the gRPC endpoint: messages, types, routes, settings, status codes."""

from __future__ import annotations

import hashlib
import zlib

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from rocketq.errors import InvalidReceiptHandle, MessageBodyTooLarge, TopicNotExist
from rocketq.message import MessageExt
from rocketq.protocol.topic import PERM_READ, PERM_WRITE, TopicConfig
from rocketq.proxy import convert, route, settings, status
from rocketq.proxy.servicer import decode_transaction_id, encode_transaction_id, fifo_queue
from rocketq.proxy.status import InvalidTransactionId
from rocketq.proxy.v2 import definition_pb2 as pb


def _msg(**sp: object) -> pb.Message:
    return pb.Message(
        topic=pb.Resource(name="T"),
        body=b"hello",
        user_properties={"color": "red"},
        system_properties=pb.SystemProperties(message_id="ID1", **sp),  # type: ignore[arg-type]
    )


def test_digest_is_upper_case_eight_hex_digits() -> None:
    body = b"\x00" * 3
    digest = convert.body_digest_crc32(body)
    assert digest == format(zlib.crc32(body), "08X")
    assert len(digest) == 8 and digest == digest.upper()


def test_md5_digest_is_upper_case_hex() -> None:
    assert convert.body_digest_md5(b"") == "D41D8CD98F00B204E9800998ECF8427E"
    assert convert.body_digest_md5(b"payload") == hashlib.md5(b"payload").hexdigest().upper()


def test_delivery_timestamp_in_seconds_or_ms() -> None:
    assert convert.timestamp_ms(Timestamp(seconds=1_700_000_000, nanos=5_000_000)) == 1_700_000_000_005
    assert convert.timestamp_ms(Timestamp(seconds=1_700_000_000_123)) == 1_700_000_000_123


def test_store_properties_per_type() -> None:
    fifo = convert.store_properties(_msg(message_group="g", tag="A", keys=["k1", "k2"]), pb.FIFO, topic="T")
    assert fifo["__SHARDINGKEY"] == "g" and fifo["TAGS"] == "A" and fifo["KEYS"] == "k1 k2"
    assert fifo["UNIQ_KEY"] == "ID1" and fifo["color"] == "red"
    m = _msg()
    m.system_properties.delivery_timestamp.seconds = 2_000_000_000
    delay = convert.store_properties(m, pb.DELAY, topic="T")
    assert delay["TIMER_DELIVER_MS"] == "2000000000000"
    tx = convert.store_properties(_msg(), pb.TRANSACTION, topic="T")
    assert tx["TRAN_MSG"] == "true" and tx["PGROUP"] == "T"


def test_store_properties_refuses_contradictions_and_reserved_keys() -> None:
    with pytest.raises(convert.MessageTypeError):
        convert.store_properties(_msg(), pb.FIFO, topic="T")
    with pytest.raises(convert.MessageTypeError):
        convert.store_properties(_msg(message_group="g"), pb.NORMAL, topic="T")
    bad = _msg()
    bad.user_properties["UNIQ_KEY"] = "x"
    with pytest.raises(convert.ReservedPropertyError):
        convert.store_properties(bad, pb.NORMAL, topic="T")
    with pytest.raises(convert.IllegalTagError):
        convert.store_properties(_msg(tag="a|b"), pb.NORMAL, topic="T")
    assert status.code_of(convert.ReservedPropertyError("x")) == pb.ILLEGAL_MESSAGE_PROPERTY_KEY


def test_gzip_body_is_inflated() -> None:
    m = _msg(body_encoding=pb.GZIP)
    m.body = convert.gzip_body(b"abc" * 100)
    assert convert.decoded_body(m, 1 << 20) == b"abc" * 100
    m.body = b"not gzip"
    with pytest.raises(ValueError, match="GZIP"):
        convert.decoded_body(m, 1 << 20)


def test_outgoing_message_has_what_the_sdks_need() -> None:
    ext = MessageExt(
        topic="T",
        body=b"payload",
        properties={"UNIQ_KEY": "ID9", "TAGS": "A", "KEYS": "k1 k2", "__SHARDINGKEY": "g", "x": "1"},
        queue_id=2,
        queue_offset=7,
        born_timestamp=1_000,
        born_host="10.0.0.1:555",
        store_timestamp=2_000,
    )
    out = convert.to_grpc_message(ext, receipt_handle="RH", delivery_attempt=3, invisible_ms=1_500)
    sp = out.system_properties
    assert sp.message_id == "ID9" and sp.tag == "A" and list(sp.keys) == ["k1", "k2"]
    assert sp.body_encoding == pb.IDENTITY
    assert sp.body_digest.type == pb.MD5 and sp.body_digest.checksum == convert.body_digest_md5(b"payload")
    assert sp.receipt_handle == "RH" and sp.delivery_attempt == 3
    assert sp.message_type == pb.FIFO and sp.message_group == "g"
    assert dict(out.user_properties) == {"x": "1"}
    assert sp.born_host == "10.0.0.1" and sp.queue_offset == 7


def test_topic_types_and_accepted_message_types() -> None:
    plain = TopicConfig("T", 4, 4)
    assert route.topic_message_type(plain) == "NORMAL"
    fifo = TopicConfig("F", 4, 4, attributes={"message.type": "FIFO"})
    mixed = TopicConfig("M", 4, 4, attributes={"message.type": "mixed"})
    assert route.accept_message_types(route.topic_message_type(fifo)) == (pb.FIFO,)
    assert set(route.accept_message_types(route.topic_message_type(mixed))) == {
        pb.NORMAL,
        pb.FIFO,
        pb.DELAY,
        pb.TRANSACTION,
    }
    route.check_message_type("M", "MIXED", pb.DELAY)
    with pytest.raises(convert.MessageTypeError, match="FIFO topic"):
        route.check_message_type("F", "FIFO", pb.NORMAL)


def test_queue_permissions_follow_read_and_write_counts() -> None:
    assert route.queue_permissions(TopicConfig("T", 2, 4)) == [pb.READ_WRITE] * 2 + [pb.WRITE] * 2
    assert route.queue_permissions(TopicConfig("T", 3, 1)) == [pb.READ_WRITE] + [pb.READ] * 2
    assert route.queue_permissions(TopicConfig("T", 2, 2, perm=PERM_READ)) == [pb.READ] * 2
    assert route.queue_permissions(TopicConfig("T", 1, 1, perm=PERM_WRITE)) == [pb.WRITE]
    queues = route.message_queues(
        TopicConfig("T", 2, 2), broker_name="b", broker_endpoints=route.endpoints("127.0.0.1", 8081)
    )
    assert [q.id for q in queues] == [0, 1]
    assert queues[0].broker.endpoints.scheme == pb.IPv4 and queues[0].broker.id == 0
    assert route.endpoints("localhost", 1).scheme == pb.DOMAIN_NAME
    assert route.endpoints("::1", 1).scheme == pb.IPv6


def test_settings_reply_for_producer_and_consumer() -> None:
    server = settings.ServerSettings(max_body_size_bytes=1234)
    prod = settings.reply_settings(
        pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="T")])), server
    )
    assert prod.publishing.max_body_size == 1234 and prod.publishing.validate_message_type
    assert prod.backoff_policy.HasField("exponential_backoff") and prod.backoff_policy.max_attempts == 3
    assert not prod.metric.on and [t.name for t in prod.publishing.topics] == ["T"]
    cons = settings.reply_settings(
        pb.Settings(client_type=pb.PUSH_CONSUMER, subscription=pb.Subscription(group=pb.Resource(name="G"))),
        server,
        fifo=True,
        max_delivery_attempts=4,
    )
    assert cons.subscription.fifo and cons.subscription.receive_batch_size == 32
    assert cons.subscription.long_polling_timeout.seconds == 20
    assert cons.backoff_policy.max_attempts == 4
    assert cons.backoff_policy.customized_backoff.next[0].seconds == 1


def test_status_codes_of_errors() -> None:
    assert status.code_of(TopicNotExist("x")) == pb.TOPIC_NOT_FOUND
    assert status.code_of(MessageBodyTooLarge("x")) == pb.MESSAGE_BODY_TOO_LARGE
    assert status.code_of(InvalidReceiptHandle("x")) == pb.INVALID_RECEIPT_HANDLE
    assert status.code_of(RuntimeError("x")) == pb.INTERNAL_SERVER_ERROR
    assert status.of_error(TopicNotExist("no T")).message == "no T"


def test_transaction_ids_round_trip_and_reject_garbage() -> None:
    assert decode_transaction_id(encode_transaction_id(123456, 7)) == (123456, 7)
    for bad in ("", "xyz", "Z" * 32):
        with pytest.raises(InvalidTransactionId):
            decode_transaction_id(bad)


def test_fifo_queue_is_stable_per_group() -> None:
    assert fifo_queue("order-1", 8) == fifo_queue("order-1", 8)
    assert {fifo_queue(f"g{i}", 8) for i in range(100)} == set(range(8))
