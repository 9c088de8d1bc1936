"""BrokerConfig and RocketMQ broker.conf loading."""

from __future__ import annotations

import pathlib

import pytest

from rocketq.broker.config import (
    BrokerConfig,
    broker_config_from_properties,
    load_broker_conf,
    parse_properties,
)
from rocketq.config import BrokerRole, FlushDiskType
from rocketq.errors import ConfigError

BROKER_CONF = """\
# RocketMQ's sample 2m-noslave/broker-a.properties, plus a few extras
brokerClusterName=DefaultCluster
brokerName = broker-a
brokerId=0
deleteWhen=04
fileReservedTime=48
brokerRole=ASYNC_MASTER
flushDiskType=SYNC_FLUSH
! another comment style
namesrvAddr=10.0.0.1:9876;10.0.0.2:9876
brokerIP1=10.0.0.5
listenPort: 10921
autoCreateTopicEnable=false
defaultTopicQueueNums 4
storePathRootDir=/data/rocketmq/store
longPollingEnable=false
shortPollingTimeMills=500
registerNameServerPeriod=10000
flushConsumerOffsetInterval=3000
channelExpiredTimeout=60000
mappedFileSizeCommitLog=1073741824
someKeyRocketqDoesNotKnow=whatever
"""


def test_defaults_are_rocketmqs() -> None:
    cfg = BrokerConfig(broker_name="b", broker_ip1="127.0.0.1", namesrv_addr=None)
    assert cfg.broker_cluster_name == "DefaultCluster"
    assert cfg.broker_id == 0
    assert cfg.listen_port == 10911
    assert cfg.auto_create_topic_enable is True
    assert cfg.default_topic_queue_nums == 8
    assert cfg.long_polling_enable is True
    assert cfg.short_polling_time_mills == 1000
    assert cfg.register_broker_interval_ms == 30_000
    assert cfg.channel_expired_timeout_ms == 120_000
    assert cfg.flush_consumer_offset_interval_ms == 5000
    assert cfg.broker_permission == 6
    assert cfg.broker_addr == "127.0.0.1:10911"
    assert cfg.ha_server_addr == "127.0.0.1:10912"
    assert cfg.namesrv_addrs == []


def test_namesrv_addr_defaults_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NAMESRV_ADDR", "1.2.3.4:9876")
    assert BrokerConfig(broker_name="b").namesrv_addrs == ["1.2.3.4:9876"]
    monkeypatch.delenv("NAMESRV_ADDR")
    assert BrokerConfig(broker_name="b").namesrv_addr is None


def test_load_broker_conf_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "broker.conf"
    path.write_text(BROKER_CONF)
    broker, store = load_broker_conf(path)
    assert broker.broker_cluster_name == "DefaultCluster"
    assert broker.broker_name == "broker-a"
    assert broker.broker_id == 0
    assert broker.namesrv_addrs == ["10.0.0.1:9876", "10.0.0.2:9876"]
    assert broker.broker_ip1 == "10.0.0.5"
    assert broker.listen_port == 10921
    assert broker.broker_addr == "10.0.0.5:10921"
    assert broker.auto_create_topic_enable is False
    assert broker.default_topic_queue_nums == 4
    assert broker.long_polling_enable is False
    assert broker.short_polling_time_mills == 500
    assert broker.register_broker_interval_ms == 10_000
    assert broker.flush_consumer_offset_interval_ms == 3000
    assert broker.channel_expired_timeout_ms == 60_000
    assert store.store_path_root_dir == "/data/rocketmq/store"
    assert store.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert store.broker_role is BrokerRole.ASYNC_MASTER
    assert store.file_reserved_time_hours == 48
    assert store.delete_when == "04"
    assert store.mapped_file_size_commit_log == 1 << 30


def test_bad_values_are_reported_with_their_keys(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "broker.conf"
    path.write_text("listenPort=abc\nlongPollingEnable=maybe\nregisterNameServerPeriod=soon\n")
    with pytest.raises(ConfigError) as info:
        load_broker_conf(path)
    for key in ("listenPort", "longPollingEnable", "registerNameServerPeriod"):
        assert key in str(info.value)
    with pytest.raises(ConfigError) as info2:
        broker_config_from_properties({"listenPort": "abc", "longPollingEnable": "maybe"})
    assert "listenPort" in str(info2.value) and "longPollingEnable" in str(info2.value)
    with pytest.raises(ConfigError) as info3:
        BrokerConfig(broker_name="", broker_id=-1, listen_port=70000, default_topic_queue_nums=0)
    text = str(info3.value)
    for expected in (
        "broker_name is empty",
        "broker_id=-1",
        "listen_port=70000",
        "default_topic_queue_nums=0",
    ):
        assert expected in text


def test_java_properties_syntax() -> None:
    text = (
        "# comment\n"
        "   ! indented comment\n"
        "a=1\n"
        "b : 2\n"
        "c 3\n"
        "d==4\n"
        "e = first \\\n"
        "    second\n"
        "f=tab\\there\\u0041\n"
        "g\\ key=spaced key\n"
        "h=\n"
        "\n"
        "i=C:\\\\path\n"
    )
    props = parse_properties(text)
    assert props == {
        "a": "1",
        "b": "2",
        "c": "3",
        "d": "=4",
        "e": "first second",
        "f": "tab\thereA",
        "g key": "spaced key",
        "h": "",
        "i": "C:\\path",
    }
