"""Pure protocol pieces of the broker: headers, pull status mapping, batch body, subscriptions,
heartbeat bodies, registration body, born hosts, rates."""

from __future__ import annotations

import datetime as dt
import json
import struct
import zlib

import pytest

from rocketq.broker.admin import parse_attributes
from rocketq.broker.config import BrokerConfig
from rocketq.broker.pull import pull_response_fields, pull_status_to_code
from rocketq.broker.registration import body_crc32, register_broker_body, register_broker_fields
from rocketq.broker.send import born_host_of
from rocketq.broker.stats import TpsSampler
from rocketq.errors import InvalidParameter, MessageIllegal, ResponseCode, SubscriptionParseFailed
from rocketq.message import java_string_hash, pack_socket_addr
from rocketq.protocol.batch import (
    BatchEntry,
    decode_batch,
    decode_batch_entries,
    encode_batch,
    encode_batch_entries,
)
from rocketq.protocol.headers import (
    SEND_V2_TO_V1,
    PullMessageRequestHeader,
    SendMessageRequestHeader,
    decode_pull_header,
    decode_send_header,
    v2_to_v1,
)
from rocketq.protocol.heartbeat import SUB_ALL, build_subscription, parse_heartbeat
from rocketq.remoting.command import decode_json_header
from rocketq.store.store_queries import GetMessageResult, GetMessageStatus

# -- SEND_MESSAGE / SEND_MESSAGE_V2 headers ----------------------------------------------------------


def test_send_v2_letters_map_to_v1_names() -> None:
    assert SEND_V2_TO_V1 == {
        "a": "producerGroup",
        "b": "topic",
        "c": "defaultTopic",
        "d": "defaultTopicQueueNums",
        "e": "queueId",
        "f": "sysFlag",
        "g": "bornTimestamp",
        "h": "flag",
        "i": "properties",
        "j": "reconsumeTimes",
        "k": "unitMode",
        "l": "maxReconsumeTimes",
        "m": "batch",
        "n": "brokerName",
    }
    header = SendMessageRequestHeader(
        producer_group="PG",
        topic="TopicTest",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=3,
        sys_flag=1,
        born_timestamp=1700000000123,
        flag=7,
        properties="TAGS\x01A\x02KEYS\x01k1\x02",
        reconsume_times=2,
        max_reconsume_times=16,
        broker_name="broker-a",
    )
    v2 = header.to_ext_fields(v2=True)
    assert set(v2) == set("abcdefghijklmn")
    assert v2["b"] == "TopicTest" and v2["e"] == "3" and v2["g"] == "1700000000123" and v2["k"] == "false"
    assert decode_send_header(v2, v2=True) == header
    assert decode_send_header(header.to_ext_fields(), v2=False) == header
    assert v2_to_v1({"b": "T", "zz": "ignored"}) == {"topic": "T"}


def test_send_v2_header_as_ali_ons_sends_it() -> None:
    # ali-ons: JSON numbers and booleans in extFields, no l/m/n
    raw = (
        b'{"code":310,"language":"JAVA","opaque":3,"flag":0,"version":121,"extFields":'
        b'{"a":"PG","b":"T","c":"TBW102","d":4,"e":0,"f":0,"g":1700000000000,"h":0,'
        b'"i":"TAGS\\u0001null\\u0002","j":0,"k":false}}'
    )
    cmd = decode_json_header(raw)
    header = decode_send_header(cmd.ext_fields, v2=True)
    assert header.topic == "T" and header.queue_id == 0 and header.born_timestamp == 1700000000000
    assert header.unit_mode is False and header.max_reconsume_times is None and not header.batch
    assert header.properties == "TAGS\x01null\x02"


def test_send_header_errors_name_the_field() -> None:
    with pytest.raises(InvalidParameter, match="'topic'"):
        decode_send_header({"a": "PG", "e": "0"}, v2=True)
    with pytest.raises(InvalidParameter, match="queueId"):
        decode_send_header({"topic": "T", "queueId": "1_0"}, v2=False)
    with pytest.raises(InvalidParameter, match=r"queueId=4294967296 is outside"):
        decode_send_header({"topic": "T", "queueId": str(1 << 32)}, v2=False)
    # optional fields default as a Java producer would fill them
    h = decode_send_header({"b": "T", "e": "-1"}, v2=True)
    assert (h.default_topic, h.default_topic_queue_nums, h.sys_flag, h.flag) == ("TBW102", 4, 0, 0)
    assert h.born_timestamp > 0


def test_pull_header_flags_and_round_trip() -> None:
    header = PullMessageRequestHeader(
        consumer_group="CG",
        topic="T",
        queue_id=1,
        queue_offset=42,
        max_msg_nums=32,
        sys_flag=0b111,
        commit_offset=40,
        suspend_timeout_millis=15000,
        sub_version=1700000000000,
        subscription="TagA || TagB",
    )
    assert decode_pull_header(header.to_ext_fields()) == header
    assert header.has_commit_offset_flag and header.has_suspend_flag and header.has_subscription_flag
    assert not header.has_class_filter_flag
    with pytest.raises(InvalidParameter, match="queueOffset"):
        decode_pull_header({"consumerGroup": "CG", "topic": "T", "queueId": "0"})


# -- pull status → response code -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "offset", "code"),
    [
        (GetMessageStatus.FOUND, 5, ResponseCode.SUCCESS),
        (GetMessageStatus.NO_MATCHED_MESSAGE, 5, ResponseCode.PULL_RETRY_IMMEDIATELY),
        (GetMessageStatus.MESSAGE_WAS_REMOVING, 5, ResponseCode.PULL_RETRY_IMMEDIATELY),
        (GetMessageStatus.OFFSET_OVERFLOW_ONE, 5, ResponseCode.PULL_NOT_FOUND),
        (GetMessageStatus.OFFSET_FOUND_NULL, 5, ResponseCode.PULL_NOT_FOUND),
        (GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, ResponseCode.PULL_NOT_FOUND),
        (GetMessageStatus.NO_MESSAGE_IN_QUEUE, 3, ResponseCode.PULL_OFFSET_MOVED),
        (GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0, ResponseCode.PULL_NOT_FOUND),
        (GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 1, ResponseCode.PULL_OFFSET_MOVED),
        (GetMessageStatus.OFFSET_TOO_SMALL, 0, ResponseCode.PULL_OFFSET_MOVED),
        (GetMessageStatus.OFFSET_OVERFLOW_BADLY, 99, ResponseCode.PULL_OFFSET_MOVED),
    ],
)
def test_pull_status_to_code(status: GetMessageStatus, offset: int, code: int) -> None:
    assert pull_status_to_code(status, offset) == code


def test_pull_response_header_always_has_four_fields() -> None:
    result = GetMessageResult(GetMessageStatus.OFFSET_TOO_SMALL, 10, 10, 20)
    assert pull_response_fields(result) == {
        "nextBeginOffset": "10",
        "minOffset": "10",
        "maxOffset": "20",
        "suggestWhichBrokerId": "0",
    }


# -- SEND_BATCH_MESSAGE body -----------------------------------------------------------------------


def test_batch_body_round_trip_and_layout() -> None:
    entries = [
        BatchEntry(b"one", b"UNIQ_KEY\x01A\x02", 1),
        BatchEntry(b"", b"", 0),
        BatchEntry(b"three" * 100, b"TAGS\x01t\x02KEYS\x01k\x02", 9),
    ]
    data = encode_batch(entries)
    total, magic, crc, flag, body_len = struct.unpack_from(">iiiii", data, 0)
    assert (total, magic, crc, flag, body_len) == (22 + 3 + 11, 0, 0, 1, 3)
    assert decode_batch(data) == entries
    as_tuples = [(e.body, e.properties, e.flag) for e in entries]
    assert encode_batch_entries(as_tuples) == data
    assert decode_batch_entries(data) == as_tuples
    assert decode_batch_entries(bytearray(data)) == as_tuples


def test_malformed_batch_bodies_are_message_illegal() -> None:
    good = encode_batch([BatchEntry(b"abc", b"K\x01V\x02")])
    with pytest.raises(MessageIllegal, match="empty"):
        decode_batch(b"")
    with pytest.raises(MessageIllegal, match="entry 0"):
        decode_batch(good[:-1])
    with pytest.raises(MessageIllegal, match="total size"):
        decode_batch(struct.pack(">i", 99) + good[4:])
    with pytest.raises(MessageIllegal, match="entry 1"):
        decode_batch(good + b"\x00\x00")


# -- subscriptions and heartbeats ------------------------------------------------------------------


def test_build_subscription() -> None:
    for text in (None, "", "*", "  *  "):
        sub = build_subscription("T", text)
        assert sub.sub_string == SUB_ALL and sub.tags_codes() is None
    sub = build_subscription("T", "TagA || TagB ||", sub_version=5)
    assert sub.tags_set == {"TagA", "TagB"}
    assert sub.tags_codes() == {java_string_hash("TagA"), java_string_hash("TagB")}
    assert sub.is_tag_matched(java_string_hash("TagB")) and not sub.is_tag_matched(0)
    assert sub.sub_version == 5
    with pytest.raises(SubscriptionParseFailed):
        build_subscription("T", " || ")
    sql = build_subscription("T", "a > 1", "sql92")
    assert sql.expression_type == "SQL92" and sql.tags_codes() is None


def test_parse_java_heartbeat() -> None:
    body = json.dumps(
        {
            "clientID": "10.0.0.5@12345",
            "producerDataSet": [{"groupName": "PG"}, {"groupName": "CLIENT_INNER_PRODUCER"}],
            "consumerDataSet": [
                {
                    "groupName": "CG",
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                    "unitMode": False,
                    "subscriptionDataSet": [
                        {
                            "topic": "T",
                            "subString": "TagA || TagB",
                            "tagsSet": ["TagA", "TagB"],
                            "codeSet": [java_string_hash("TagA"), java_string_hash("TagB")],
                            "subVersion": 1700000000000,
                            "expressionType": "TAG",
                            "classFilterMode": False,
                        },
                        {
                            "topic": "%RETRY%CG",
                            "subString": "*",
                            "tagsSet": [],
                            "codeSet": [],
                            "subVersion": 1,
                        },
                    ],
                }
            ],
            "heartbeatFingerprint": 0,
            "withoutSub": False,
        }
    ).encode()
    hb = parse_heartbeat(body)
    assert hb.client_id == "10.0.0.5@12345"
    assert hb.producer_groups == ("PG", "CLIENT_INNER_PRODUCER")
    (cg,) = hb.consumers
    assert (cg.group_name, cg.consume_type, cg.message_model, cg.consume_from_where) == (
        "CG",
        "CONSUME_PASSIVELY",
        "CLUSTERING",
        "CONSUME_FROM_FIRST_OFFSET",
    )
    tags, retry = cg.subscriptions
    assert tags.tags_codes() == {java_string_hash("TagA"), java_string_hash("TagB")}
    assert retry.topic == "%RETRY%CG" and retry.tags_codes() is None


def test_parse_heartbeat_tolerates_ordinals_and_fastjson() -> None:
    # enum ordinals (fastjson accepts them), no expressionType (ali-ons), unquoted keys elsewhere
    body = (
        b'{"clientID":"ip@1","consumerDataSet":[{"groupName":"G","consumeType":1,"messageModel":0,'
        b'"consumeFromWhere":5,"subscriptionDataSet":[{"topic":"T","subString":"a","tagsSet":["a"],'
        b'"codeSet":[97],"subVersion":1}]}],"extra":{0:1}}'
    )
    hb = parse_heartbeat(body)
    (g,) = hb.consumers
    assert (g.consume_type, g.message_model, g.consume_from_where) == (
        "CONSUME_PASSIVELY",
        "BROADCASTING",
        "CONSUME_FROM_TIMESTAMP",
    )
    assert g.subscriptions[0].expression_type == "TAG" and g.subscriptions[0].code_set == {97}
    with pytest.raises(ValueError):
        parse_heartbeat(b"[1,2]")


# -- misc ----------------------------------------------------------------------------------------


def test_born_host_is_always_ipv4() -> None:
    assert born_host_of("10.1.2.3:4567") == pack_socket_addr("10.1.2.3:4567")
    assert born_host_of("[::ffff:10.1.2.3]:4567") == pack_socket_addr("10.1.2.3:4567")
    assert born_host_of("[::1]:80") == pack_socket_addr("127.0.0.1:80")
    assert born_host_of("[2001:db8::1]:80") == pack_socket_addr("0.0.0.0:80")
    assert len(born_host_of("not an address")) == 8


def test_register_broker_body_and_header() -> None:
    cfg = BrokerConfig(broker_name="broker-a", broker_ip1="10.0.0.5", namesrv_addr=None)
    wrapper = {
        "dataVersion": {"counter": 1, "stateVersion": 0, "timestamp": 5},
        "topicConfigTable": {"T": {"topicName": "T", "perm": 6}},
    }
    body = register_broker_body(wrapper)
    obj = json.loads(body)
    assert obj["filterServerList"] == []
    tcw = obj["topicConfigSerializeWrapper"]
    assert tcw["topicConfigTable"] == wrapper["topicConfigTable"]
    assert tcw["dataVersion"] == wrapper["dataVersion"]
    fields = register_broker_fields(cfg, "10.0.0.5:10911", body)
    assert fields["bodyCrc32"] == str(zlib.crc32(body) & 0x7FFFFFFF) == str(body_crc32(body))
    assert fields["brokerAddr"] == "10.0.0.5:10911" and fields["brokerId"] == "0"
    assert fields["clusterName"] == "DefaultCluster" and fields["haServerAddr"] == "10.0.0.5:10912"


def test_topic_attributes_syntax() -> None:
    assert parse_attributes("+message.type=FIFO,-old.key") == ({"message.type": "FIFO"}, {"old.key"})
    assert parse_attributes(None) == ({}, set())
    with pytest.raises(InvalidParameter):
        parse_attributes("message.type=FIFO")


def test_tps_sampler() -> None:
    tps = TpsSampler()
    day = dt.date(2026, 1, 1)
    for second in range(21):
        tps.sample(float(second), second * 100, second * 10, day)
    assert tps.put_tps().split()[0] == "100.00"
    assert tps.get_tps().split()[0] == "10.00"
    tps.sample(21.0, 2100, 210, dt.date(2026, 1, 2))
    assert (tps.put_yesterday_morning, tps.put_today_morning) == (0, 2100)
