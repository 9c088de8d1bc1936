"""topics.json, subscriptionGroup.json, consumerOffset.json: RocketMQ's shapes, written and read back."""

from __future__ import annotations

import json
import pathlib
import re

from rocketq.broker.config import BrokerConfig
from rocketq.broker.consumer_offset import ConsumerOffsetManager
from rocketq.broker.subscription_group import (
    SYSTEM_GROUPS,
    SubscriptionGroupConfig,
    SubscriptionGroupManager,
)
from rocketq.broker.topic_config import TopicConfigManager
from rocketq.protocol import fastjson
from rocketq.protocol.topic import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    PERM_INHERIT,
    PERM_READ,
    PERM_WRITE,
    SCHEDULE_TOPIC,
    TopicConfig,
    perm_to_string,
)


def broker_config(**kwargs: object) -> BrokerConfig:
    return BrokerConfig(broker_name="broker-a", broker_ip1="127.0.0.1", namesrv_addr=None, **kwargs)  # type: ignore[arg-type]


# -- topics ------------------------------------------------------------------------------------


def test_system_topics_and_template() -> None:
    topics = TopicConfigManager(broker_config())
    tbw = topics.select(AUTO_CREATE_TOPIC_KEY_TOPIC)
    assert tbw is not None
    assert (tbw.read_queue_nums, tbw.write_queue_nums, tbw.perm) == (8, 8, 7)
    assert perm_to_string(tbw.perm) == "RWX"
    schedule = topics.select(SCHEDULE_TOPIC)
    assert schedule is not None and schedule.read_queue_nums == 18
    assert topics.select("SELF_TEST_TOPIC") == TopicConfig("SELF_TEST_TOPIC", 1, 1)
    assert topics.select("broker-a") == TopicConfig("broker-a", 1, 1, 7)
    assert topics.select("DefaultCluster") is not None
    assert topics.select("DefaultCluster_REPLY_TOPIC") is not None
    assert topics.is_system("broker-a") and topics.is_system("rmq_sys_anything")
    no_auto = TopicConfigManager(broker_config(auto_create_topic_enable=False))
    assert no_auto.select(AUTO_CREATE_TOPIC_KEY_TOPIC) is None


def test_auto_create_from_template() -> None:
    topics = TopicConfigManager(broker_config())
    changes: list[list[TopicConfig]] = []
    topics.on_change = changes.append
    counter = topics.data_version.counter
    tc = topics.create_in_send("NewTopic", AUTO_CREATE_TOPIC_KEY_TOPIC, "10.0.0.9:5555", 4)
    assert tc == TopicConfig("NewTopic", 4, 4, PERM_READ | PERM_WRITE)
    assert changes == [[tc]]
    assert topics.data_version.counter == counter + 1
    # queues are capped by the template's write queues
    big = topics.create_in_send("Big", AUTO_CREATE_TOPIC_KEY_TOPIC, "x", 64)
    assert big is not None and big.write_queue_nums == 8
    # existing topics are returned unchanged, no change event
    assert topics.create_in_send("NewTopic", AUTO_CREATE_TOPIC_KEY_TOPIC, "x", 2) == tc
    assert len(changes) == 2
    # a template without INHERIT, or a missing one, creates nothing
    topics.update(TopicConfig("NoInherit", perm=PERM_READ | PERM_WRITE))
    assert topics.create_in_send("T2", "NoInherit", "x", 4) is None
    assert topics.create_in_send("T3", "Missing", "x", 4) is None
    # a TBW102 loaded from a file does not inherit once auto-create is off
    no_auto = TopicConfigManager(broker_config(auto_create_topic_enable=False))
    no_auto.update(TopicConfig(AUTO_CREATE_TOPIC_KEY_TOPIC, 8, 8, PERM_INHERIT | PERM_READ | PERM_WRITE))
    assert no_auto.create_in_send("T4", AUTO_CREATE_TOPIC_KEY_TOPIC, "x", 4) is None
    retry = topics.create_in_send_back("%RETRY%CG", 1, PERM_READ | PERM_WRITE)
    assert retry == TopicConfig("%RETRY%CG", 1, 1, 6)


def test_topics_json_written_in_rocketmq_shape_and_read_back(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "config" / "topics.json")
    topics = TopicConfigManager(broker_config(), path)
    topics.update(TopicConfig("TopicTest", 4, 4, 6, order=True, attributes={"message.type": "NORMAL"}))
    topics.persist()
    text = pathlib.Path(path).read_text()
    assert text.startswith('{\n\t"dataVersion":{')
    obj = json.loads(text)
    assert set(obj) == {"dataVersion", "topicConfigTable"}
    assert set(obj["dataVersion"]) == {"counter", "stateVersion", "timestamp"}
    entry = obj["topicConfigTable"]["TopicTest"]
    assert list(entry) == sorted(entry)  # fastjson writes bean properties alphabetically
    assert entry == {
        "attributes": {"message.type": "NORMAL"},
        "order": True,
        "perm": 6,
        "readQueueNums": 4,
        "topicFilterType": "SINGLE_TAG",
        "topicName": "TopicTest",
        "topicSysFlag": 0,
        "writeQueueNums": 4,
    }
    again = TopicConfigManager(broker_config(), path)
    assert again.load()
    assert again.select("TopicTest") == topics.select("TopicTest")
    assert again.data_version.counter == topics.data_version.counter


def test_topics_json_loading_is_tolerant(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "topics.json"
    # a 4.x file: no attributes, no stateVersion, a string number, an unknown field, an entry
    # that is not an object
    path.write_text(
        '{"dataVersion":{"counter":5,"timestamp":1700000000000},"topicConfigTable":{'
        '"Old":{"order":false,"perm":6,"readQueueNums":"2","topicFilterType":"SINGLE_TAG",'
        '"topicName":"Old","topicSysFlag":0,"writeQueueNums":2,"futureField":{"x":1}},'
        '"Broken":7}}'
    )
    topics = TopicConfigManager(broker_config(), str(path))
    assert topics.load()
    old = topics.select("Old")
    assert old == TopicConfig("Old", 2, 2, 6)
    assert old is not None and old.extra == {"futureField": {"x": 1}}
    assert topics.select("Broken") is None
    assert topics.data_version.counter == 5
    assert '"futureField"' in topics.encode()
    # an unparsable main file falls back to the .bak
    pathlib.Path(str(path) + ".bak").write_text(path.read_text())
    path.write_text('{"topicConfigTable":{"Old":')
    fallback = TopicConfigManager(broker_config(), str(path))
    assert fallback.load() and fallback.select("Old") is not None
    missing = TopicConfigManager(broker_config(), str(tmp_path / "nope.json"))
    assert not missing.load()


# -- consumer offsets ----------------------------------------------------------------------------

ROCKETMQ_OFFSETS = """{
\t"offsetTable":{
\t\t"TopicTest@please_rename_unique_group_name_4":{0:250,1:250,2:250,3:250
\t\t}
\t}
}"""


def test_consumer_offsets_written_with_unquoted_queue_ids(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "consumerOffset.json")
    offsets = ConsumerOffsetManager(path)
    offsets.commit_offset("10.0.0.1:1", "CG", "TopicTest", 1, 250)
    offsets.commit_offset("10.0.0.1:1", "CG", "TopicTest", 0, 125)
    assert offsets.dirty
    offsets.persist()
    assert not offsets.dirty
    text = pathlib.Path(path).read_text()
    assert re.search(r'"TopicTest@CG":\{\n\t+0:125,\n\t+1:250\n', text), text
    assert '"0"' not in text
    with_json = fastjson.loads(text)
    assert with_json["offsetTable"] == {"TopicTest@CG": {"0": 125, "1": 250}}
    assert set(with_json["dataVersion"]) == {"counter", "stateVersion", "timestamp"}
    again = ConsumerOffsetManager(path)
    assert again.load()
    assert again.query_offset("CG", "TopicTest", 0) == 125
    assert again.query_offset("CG", "TopicTest", 1) == 250
    assert again.query_offset("CG", "TopicTest", 2) == -1
    assert again.query_offset("other", "TopicTest", 0) == -1


def test_consumer_offsets_read_fastjson_and_standard_json(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "consumerOffset.json"
    path.write_text(ROCKETMQ_OFFSETS)
    offsets = ConsumerOffsetManager(str(path))
    assert offsets.load()
    assert offsets.query_offsets("please_rename_unique_group_name_4", "TopicTest") == {
        0: 250,
        1: 250,
        2: 250,
        3: 250,
    }
    path.write_text('{"offsetTable":{"T@G":{"0":7,"3":-1}},"groupTopicMap":{"G":["T"]}}')
    quoted = ConsumerOffsetManager(str(path))
    assert quoted.load()
    assert quoted.query_offset("G", "T", 0) == 7
    # a stored negative offset (ali-ons commits -1 for 0) reads as "none" but is kept
    assert quoted.query_offset("G", "T", 3) == -1
    assert quoted.offset_table["T@G"][3] == -1
    assert quoted.groups_of_topic("T") == {"G"} and quoted.topics_of_group("G") == {"T"}


def test_consumer_offsets_dirty_tracking() -> None:
    offsets = ConsumerOffsetManager()
    assert not offsets.begin_persist()
    offsets.commit_offset("c", "G", "T", 0, 5)
    version = offsets.data_version.counter
    assert offsets.begin_persist()
    assert offsets.data_version.counter == version + 1
    offsets.commit_offset("c", "G", "T", 0, 5)  # unchanged value: nothing to write
    assert not offsets.begin_persist()
    offsets.commit_offset("c", "G", "T", 0, 3)  # moving back is stored as sent
    assert offsets.query_offset("G", "T", 0) == 3 and offsets.dirty


# -- subscription groups -------------------------------------------------------------------------


def test_subscription_groups_auto_create_and_shape(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "subscriptionGroup.json")
    groups = SubscriptionGroupManager(path)
    for name in SYSTEM_GROUPS:
        assert groups.get(name) is not None
    calls: list[int] = []
    groups.on_change = lambda: calls.append(1)
    cg = groups.find("CG")
    assert cg == SubscriptionGroupConfig("CG")
    assert groups.find("CG") is cg and calls == [1]
    assert groups.find("bad group!") is None
    groups.persist()
    obj = json.loads(pathlib.Path(path).read_text())
    entry = obj["subscriptionGroupTable"]["CG"]
    assert list(entry) == sorted(entry)
    assert entry == {
        "attributes": {},
        "brokerId": 0,
        "consumeBroadcastEnable": True,
        "consumeEnable": True,
        "consumeFromMinEnable": True,
        "consumeMessageOrderly": False,
        "consumeTimeoutMinute": 15,
        "groupName": "CG",
        "groupSysFlag": 0,
        "notifyConsumerIdsChangedEnable": True,
        "retryMaxTimes": 16,
        "retryQueueNums": 1,
        "whichBrokerWhenConsumeSlowly": 1,
    }
    no_auto = SubscriptionGroupManager(auto_create=False)
    assert no_auto.find("CG") is None


def test_subscription_groups_keep_5x_fields(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "subscriptionGroup.json"
    path.write_text(
        '{"dataVersion":{"counter":2,"stateVersion":0,"timestamp":1},"forbiddenTable":{},'
        '"subscriptionGroupTable":{"G":{"brokerId":0,"consumeBroadcastEnable":true,'
        '"consumeEnable":false,"groupName":"G","groupRetryPolicy":{"type":"CUSTOMIZED"},'
        '"retryMaxTimes":3,"retryQueueNums":2}}}'
    )
    groups = SubscriptionGroupManager(str(path))
    assert groups.load()
    g = groups.get("G")
    assert g is not None
    assert (g.consume_enable, g.retry_max_times, g.retry_queue_nums) == (False, 3, 2)
    out = json.loads(groups.encode())
    assert out["forbiddenTable"] == {}
    assert out["subscriptionGroupTable"]["G"]["groupRetryPolicy"] == {"type": "CUSTOMIZED"}
    assert out["dataVersion"]["counter"] == 2
