"""The merged wire values of rocketq.protocol: one TopicConfig with two readers, one MessageQueue
for clients and brokers, one producer heartbeat body."""

from __future__ import annotations

import pytest

from rocketq.errors import BodyFormatError
from rocketq.protocol.fastjson import OBJECT_KEYS, dumps_sorted
from rocketq.protocol.heartbeat import encode_producer_heartbeat, parse_heartbeat
from rocketq.protocol.queue import MessageQueue, message_queue_table
from rocketq.protocol.topic import PERM_INHERIT, PERM_READ, TopicConfig, perm_to_string

DOC = {
    "attributes": {"+message.type": "FIFO"},
    "order": True,
    "perm": 4,
    "readQueueNums": 2,
    "topicFilterType": "MULTI_TAG",
    "topicName": "T",
    "topicSysFlag": 1,
    "writeQueueNums": 3,
}


def test_both_topic_config_readers_agree_on_a_well_formed_document() -> None:
    tolerant = TopicConfig.from_json("T", dict(DOC))
    strict = TopicConfig.from_json_obj(dict(DOC))
    assert (
        tolerant
        == strict
        == TopicConfig("T", 2, 3, PERM_READ, "MULTI_TAG", 1, True, {"+message.type": "FIFO"})
    )
    assert tolerant.to_json() == DOC
    assert hash(tolerant) == hash(strict)
    assert (tolerant.readable, tolerant.writeable) == (True, False)


def test_tolerant_reader_defaults_and_keeps_unknown_fields_strict_reader_refuses() -> None:
    doc = dict(DOC, readQueueNums="many", futureField=[1, 2])
    tolerant = TopicConfig.from_json("T", doc)
    assert tolerant.read_queue_nums == 16
    assert tolerant.extra == {"futureField": [1, 2]}
    assert list(tolerant.to_json()) == sorted(tolerant.to_json())
    assert tolerant.to_json()["futureField"] == [1, 2]
    with pytest.raises(BodyFormatError, match="'readQueueNums' is not an integer"):
        TopicConfig.from_json_obj(doc)
    assert "futureField" not in TopicConfig.from_json_obj(dict(DOC, futureField=1)).to_json()


def test_compact_form_and_sorted_json_of_a_topic_config() -> None:
    tc = TopicConfig("T", 4, 4, PERM_READ | PERM_INHERIT, attributes={"b": "2", "a": "1"})
    assert tc.encode_compact() == 'T 4 4 5 SINGLE_TAG {"a":"1","b":"2"}'
    assert TopicConfig.decode_compact(tc.encode_compact()) == tc
    assert perm_to_string(tc.perm) == "R-X"
    assert dumps_sorted(tc.to_json()) == (
        '{"attributes":{"a":"1","b":"2"},"order":false,"perm":5,"readQueueNums":4,'
        '"topicFilterType":"SINGLE_TAG","topicName":"T","topicSysFlag":0,"writeQueueNums":4}'
    )


def test_message_queues_order_as_java_and_key_object_keyed_tables() -> None:
    queues = [MessageQueue("T", "b", 1), MessageQueue("T", "a", 2), MessageQueue("S", "z", 0)]
    assert sorted(queues) == [MessageQueue("S", "z", 0), MessageQueue("T", "a", 2), MessageQueue("T", "b", 1)]
    text = OBJECT_KEYS.dumps({"offsetTable": {mq: mq.queue_id * 10 for mq in queues}})
    assert text.startswith('{"offsetTable":{{"brokerName":"b","queueId":1,"topic":"T"}:10,')
    table = message_queue_table(OBJECT_KEYS.loads(text)["offsetTable"])
    assert table == {mq: mq.queue_id * 10 for mq in queues}
    assert MessageQueue.from_json({"topic": "T"}) == MessageQueue("T", "", -1)


def test_producer_heartbeat_body_reads_back_on_the_broker_side() -> None:
    body = encode_producer_heartbeat("10.0.0.1@7", ["PG1", "PG2"])
    assert body == (
        b'{"clientID":"10.0.0.1@7","producerDataSet":[{"groupName":"PG1"},{"groupName":"PG2"}],'
        b'"consumerDataSet":[]}'
    )
    hb = parse_heartbeat(body)
    assert (hb.client_id, hb.producer_groups, hb.consumers) == ("10.0.0.1@7", ("PG1", "PG2"), ())
