"""fastjson's object-keyed maps: the writer and the tolerant parser."""

from __future__ import annotations

import json

import pytest

from rocketq.protocol.fastjson import OBJECT_KEYS as objkey_json
from rocketq.protocol.fastjson import ObjectKey
from rocketq.protocol.queue import MessageQueue, message_queue_table


def test_message_queue_keys_are_written_as_objects_with_sorted_fields() -> None:
    table = {MessageQueue("t", "b", 0): {"maxOffset": 5}, MessageQueue("t", "b", 1): {"maxOffset": 0}}
    text = objkey_json.dumps({"offsetTable": table, "topicPutTps": 0.0})
    assert text == (
        '{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"t"}:{"maxOffset":5},'
        '{"brokerName":"b","queueId":1,"topic":"t"}:{"maxOffset":0}},"topicPutTps":0.0}'
    )


def test_plain_values_match_compact_json() -> None:
    obj = {"a": [1, 2.5, None, True, 'x\u00e9"q'], "b": {"c": {}}, 3: []}
    text = objkey_json.dumps(obj)
    assert text.startswith('{"a":[1,2.5,null,true,"x\u00e9\\"q"],"b":{"c":{}},3:[]')
    assert objkey_json.loads(text) == {"a": [1, 2.5, None, True, 'x\u00e9"q'], "b": {"c": {}}, 3: []}


def test_round_trip_to_message_queues() -> None:
    mq0, mq1 = MessageQueue("TopicA", "broker-a", 0), MessageQueue("TopicA", "broker-a", 1)
    body = {
        "consumeTps": 0.0,
        "offsetTable": {
            mq0: {"brokerOffset": 4, "consumerOffset": 1, "lastTimestamp": 0, "pullOffset": 1},
            mq1: {"brokerOffset": 2, "consumerOffset": 2, "lastTimestamp": 17, "pullOffset": 2},
        },
    }
    parsed = objkey_json.loads(objkey_json.dumps(body).encode())
    assert parsed["consumeTps"] == 0.0
    table = message_queue_table(parsed["offsetTable"])
    assert table == body["offsetTable"]


def test_parser_tolerates_whitespace_key_order_and_bare_int_keys() -> None:
    text = """{
        "offsetTable":{
            {"topic" : "t", "queueId":3 ,"brokerName":"b"}:{"minOffset":0,"maxOffset":9},
            {"brokerName":"b","queueId":-1,"topic":"t"} : 1
        },
        "brokerAddrs":{0:"10.0.0.1:10911"}
    }"""
    parsed = objkey_json.loads(text)
    keys = list(parsed["offsetTable"])
    assert all(isinstance(k, ObjectKey) for k in keys)
    assert keys[0].as_dict() == {"brokerName": "b", "queueId": 3, "topic": "t"}
    assert message_queue_table(parsed["offsetTable"]) == {
        MessageQueue("t", "b", 3): {"minOffset": 0, "maxOffset": 9},
        MessageQueue("t", "b", -1): 1,
    }
    assert parsed["brokerAddrs"] == {0: "10.0.0.1:10911"}


def test_parser_reads_standard_json_like_json_module() -> None:
    text = json.dumps({"x": [1, -2, 3e2, 0.5, "s", False, None], "y": {"z": "w"}})
    assert objkey_json.loads(text) == json.loads(text)


def test_nested_object_keys_are_hashable() -> None:
    parsed = objkey_json.loads('{{"a":{"b":1},"c":[1,2]}:true}')
    (key,) = parsed
    assert key.as_dict() == {"a": ObjectKey((("b", 1),)), "c": (1, 2)}
    assert objkey_json.dumps(parsed) == '{{"a":{"b":1},"c":[1,2]}:true}'


@pytest.mark.parametrize("bad", ["", "{", '{"a":1', '{"a" 1}', "[1,]x", '{"a":1} extra', "{nope:1}"])
def test_malformed_text_raises_value_error(bad: str) -> None:
    with pytest.raises(ValueError):
        objkey_json.loads(bad)


def test_unsupported_key_type_is_refused() -> None:
    with pytest.raises(TypeError):
        objkey_json.dumps({1.5: 1})
