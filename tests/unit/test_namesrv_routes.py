"""RouteTable (pure name-server state) and the name-server bodies, against spec/remoting.md §2.2–§3.4."""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

import pytest

from rocketq.errors import BodyFormatError
from rocketq.namesrv import RouteTable
from rocketq.protocol import fastjson
from rocketq.protocol.fastjson import dumps_sorted as dumps
from rocketq.protocol.route import (
    MASTER_ID,
    NAMESPACE_ORDER_TOPIC_CONFIG,
    BrokerData,
    ClusterInfo,
    DataVersion,
    KVTable,
    QueueData,
    RegisterBrokerBody,
    TopicList,
    TopicRouteData,
)
from rocketq.protocol.topic import TopicConfig

CLUSTER = "DefaultCluster"
A_MASTER = "192.168.1.10:10911"
A_SLAVE = "192.168.1.11:10911"
B_MASTER = "192.168.1.20:10911"
C_MASTER = "192.168.2.30:10911"
DV1 = DataVersion(counter=1, timestamp_ms=1_700_000_000_000)
DV2 = DataVersion(counter=2, timestamp_ms=1_700_000_000_500)


def register(
    table: RouteTable,
    name: str,
    addr: str,
    *topics: TopicConfig,
    broker_id: int = MASTER_ID,
    dv: DataVersion = DV1,
    now_ms: int = 0,
    cluster: str = CLUSTER,
    ha: str | None = None,
    **kwargs: Any,
) -> Any:
    return table.register_broker(
        cluster, name, addr, broker_id, ha, {t.topic_name: t for t in topics}, dv, now_ms, **kwargs
    )


def route_json(table: RouteTable, topic: str) -> dict[str, Any]:
    route = table.pick_topic_route(topic)
    assert route is not None, topic
    data: dict[str, Any] = json.loads(route.encode())  # standard JSON: Python's json must read it
    return data


# ---------------------------------------------------------------------------------------------
# Registration and route shape


def test_route_of_one_master_matches_the_spec_example_byte_for_byte() -> None:
    table = RouteTable()
    result = register(table, "broker-a", A_MASTER, TopicConfig("TopicTest", 4, 4))
    assert result.accepted and result.first_registration and result.topic_config_applied
    assert result.master_addr is None and result.ha_server_addr is None  # masters get no master address
    route = table.pick_topic_route("TopicTest")
    assert route is not None
    assert route.encode() == (
        b'{"brokerDatas":[{"brokerAddrs":{"0":"192.168.1.10:10911"},"brokerName":"broker-a",'
        b'"cluster":"DefaultCluster","enableActingMaster":false}],"filterServerTable":{},'
        b'"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,'
        b'"writeQueueNums":4}]}'
    )


def test_route_fields_carry_perm_queue_numbers_and_sys_flag_per_topic() -> None:
    table = RouteTable()
    register(
        table,
        "broker-a",
        A_MASTER,
        TopicConfig("TBW102", 8, 8, perm=7),
        TopicConfig("ReadOnly", 8, 4, perm=4),
        TopicConfig("Unit", 2, 3, perm=6, topic_sys_flag=1),
    )
    tbw = route_json(table, "TBW102")
    assert tbw["queueDatas"] == [
        {"brokerName": "broker-a", "perm": 7, "readQueueNums": 8, "topicSysFlag": 0, "writeQueueNums": 8}
    ]
    ro = route_json(table, "ReadOnly")["queueDatas"][0]
    assert (ro["perm"], ro["readQueueNums"], ro["writeQueueNums"]) == (4, 8, 4)
    unit = route_json(table, "Unit")["queueDatas"][0]
    assert (unit["readQueueNums"], unit["writeQueueNums"], unit["topicSysFlag"]) == (2, 3, 1)
    broker = route_json(table, "Unit")["brokerDatas"][0]
    assert broker == {
        "brokerAddrs": {"0": A_MASTER},
        "brokerName": "broker-a",
        "cluster": CLUSTER,
        "enableActingMaster": False,
    }
    assert "orderTopicConf" not in route_json(table, "Unit")
    assert table.unit_topics() == ["Unit"]
    assert table.has_unit_sub_topics() == []


def test_a_topic_spread_over_two_brokers_of_one_cluster() -> None:
    table = RouteTable()
    register(table, "broker-b", B_MASTER, TopicConfig("Spread", 8, 8), TopicConfig("OnlyB", 1, 1))
    register(table, "broker-a", A_MASTER, TopicConfig("Spread", 4, 4))
    route = table.pick_topic_route("Spread")
    assert route is not None
    assert [q.broker_name for q in route.queue_datas] == ["broker-a", "broker-b"]
    assert [(q.read_queue_nums, q.write_queue_nums) for q in route.queue_datas] == [(4, 4), (8, 8)]
    assert [(b.broker_name, dict(b.broker_addrs)) for b in route.broker_datas] == [
        ("broker-a", {0: A_MASTER}),
        ("broker-b", {0: B_MASTER}),
    ]
    only_b = table.pick_topic_route("OnlyB")
    assert only_b is not None and [b.broker_name for b in only_b.broker_datas] == ["broker-b"]
    info = table.cluster_info()
    assert info.cluster_addr_table == {CLUSTER: ("broker-a", "broker-b")}
    assert set(info.broker_addr_table) == {"broker-a", "broker-b"}
    assert table.all_topics() == ["OnlyB", "Spread"]
    assert table.topics_by_cluster(CLUSTER) == ["OnlyB", "Spread"]


def test_clusters_are_kept_apart() -> None:
    table = RouteTable()
    register(table, "broker-a", A_MASTER, TopicConfig("Shared"), TopicConfig("A1"))
    register(table, "broker-c", C_MASTER, TopicConfig("Shared"), TopicConfig("C1"), cluster="Other")
    assert table.topics_by_cluster(CLUSTER) == ["A1", "Shared"]
    assert table.topics_by_cluster("Other") == ["C1", "Shared"]
    assert table.topics_by_cluster("Nope") == []
    assert table.cluster_info().cluster_addr_table == {CLUSTER: ("broker-a",), "Other": ("broker-c",)}
    assert table.delete_topic("Shared", "Other")
    route = table.pick_topic_route("Shared")
    assert route is not None and [q.broker_name for q in route.queue_datas] == ["broker-a"]
    assert table.delete_topic("Shared")
    assert table.pick_topic_route("Shared") is None
    assert not table.delete_topic("Shared")
    system = table.system_topic_list()
    assert system.topic_list == (CLUSTER, "broker-a", "Other", "broker-c")
    assert system.broker_addr == A_MASTER


def test_unknown_topic_has_no_route() -> None:
    table = RouteTable()
    assert table.pick_topic_route("Nope") is None
    register(table, "broker-a", A_MASTER, TopicConfig("T"))
    assert table.pick_topic_route("Nope") is None


# ---------------------------------------------------------------------------------------------
# Data version


def test_unchanged_data_version_skips_topic_config_updates() -> None:
    table = RouteTable()
    register(table, "broker-a", A_MASTER, TopicConfig("T", 4, 4), dv=DV1)
    again = register(
        table, "broker-a", A_MASTER, TopicConfig("T", 16, 16, perm=2), TopicConfig("New"), dv=DV1
    )
    assert not again.first_registration
    assert table.queue_datas("T")["broker-a"] == QueueData("broker-a", 4, 4, 6, 0)  # not re-read
    # A topic with no queue data for this broker is still picked up (RocketMQ 5.x rule).
    assert "broker-a" in table.queue_datas("New")
    changed = register(table, "broker-a", A_MASTER, TopicConfig("T", 16, 16, perm=2), dv=DV2)
    assert changed.topic_config_applied
    assert table.queue_datas("T")["broker-a"] == QueueData("broker-a", 16, 16, 2, 0)


def test_data_version_equality_covers_counter_timestamp_and_state_version() -> None:
    table = RouteTable()
    register(table, "broker-a", A_MASTER, TopicConfig("T", 4, 4), dv=DV1)
    for dv in (
        DataVersion(DV1.counter, DV1.timestamp_ms + 1),
        DataVersion(DV1.counter + 5, DV1.timestamp_ms),
        DataVersion(DV1.counter, DV1.timestamp_ms, state_version=3),
    ):
        assert table.is_broker_topic_config_changed(CLUSTER, A_MASTER, dv)
    assert not table.is_broker_topic_config_changed(CLUSTER, A_MASTER, DV1)
    assert table.is_broker_topic_config_changed(CLUSTER, B_MASTER, DV1)  # unknown broker
    assert table.broker_data_version(CLUSTER, A_MASTER) == DV1
    assert DV1.next_version(99) == DataVersion(2, 99, 0)


def test_a_deleted_topic_returns_with_the_next_registration() -> None:
    table = RouteTable()
    register(table, "broker-a", A_MASTER, TopicConfig("T"), dv=DV1)
    table.delete_topic("T")
    assert table.pick_topic_route("T") is None
    register(table, "broker-a", A_MASTER, TopicConfig("T"), dv=DV1)
    assert table.pick_topic_route("T") is not None


def test_delete_missing_topics_drops_topics_the_broker_no_longer_lists() -> None:
    table = RouteTable()
    register(table, "broker-a", A_MASTER, TopicConfig("Keep"), TopicConfig("Gone"))
    register(table, "broker-b", B_MASTER, TopicConfig("Gone"))
    register(table, "broker-a", A_MASTER, TopicConfig("Keep"), dv=DV2, delete_missing_topics=True)
    assert set(table.queue_datas("Gone")) == {"broker-b"}
    assert set(table.queue_datas("Keep")) == {"broker-a"}
    # Without the option (RocketMQ's default) nothing is dropped.
    register(table, "broker-b", B_MASTER, dv=DV2)
    assert set(table.queue_datas("Gone")) == {"broker-b"}


# ---------------------------------------------------------------------------------------------
# Liveness


def test_expiry_uses_the_injected_clock_and_each_brokers_timeout() -> None:
    table = RouteTable()
    register(table, "broker-a", A_MASTER, TopicConfig("T"), now_ms=0, heartbeat_timeout_ms=1000)
    register(table, "broker-b", B_MASTER, TopicConfig("T"), now_ms=0, heartbeat_timeout_ms=5000)
    assert table.scan_expired(1000) == []  # expired only when strictly past the timeout
    removed = table.scan_expired(1001)
    assert [(r.broker_name, r.broker_addr, r.broker_id, r.broker_name_removed) for r in removed] == [
        ("broker-a", A_MASTER, 0, True)
    ]
    route = table.pick_topic_route("T")
    assert route is not None and [b.broker_name for b in route.broker_datas] == ["broker-b"]
    assert [q.broker_name for q in route.queue_datas] == ["broker-b"]
    assert table.scan_expired(4000) == []
    # A re-registration (or a heartbeat) keeps a broker alive.
    register(table, "broker-b", B_MASTER, TopicConfig("T"), now_ms=4000, heartbeat_timeout_ms=5000)
    assert table.scan_expired(8000) == []
    assert table.touch_broker(CLUSTER, B_MASTER, 8500)
    assert not table.touch_broker(CLUSTER, A_MASTER, 8500)
    assert table.scan_expired(13_000) == []
    assert [r.broker_addr for r in table.scan_expired(13_501)] == [B_MASTER]
    assert table.pick_topic_route("T") is None
    assert table.cluster_info() == ClusterInfo({}, {})
    assert table.all_topics() == []
    assert table.live_brokers() == []


def test_default_heartbeat_timeout_is_120_seconds() -> None:
    table = RouteTable()
    register(table, "broker-a", A_MASTER, TopicConfig("T"), now_ms=10)
    assert table.live_brokers()[0].heartbeat_timeout_ms == 120_000
    assert table.scan_expired(120_010) == []
    assert len(table.scan_expired(120_011)) == 1


def test_expired_master_leaves_its_slave_and_the_queue_data() -> None:
    table = RouteTable()
    register(table, "broker-a", A_MASTER, TopicConfig("T", 4, 4), now_ms=0, heartbeat_timeout_ms=100)
    register(
        table, "broker-a", A_SLAVE, TopicConfig("T", 4, 4), broker_id=1, now_ms=150, heartbeat_timeout_ms=100
    )
    removed = table.scan_expired(150)
    assert [(r.broker_addr, r.broker_name_removed) for r in removed] == [(A_MASTER, False)]
    route = table.pick_topic_route("T")
    assert route is not None
    assert dict(route.broker_datas[0].broker_addrs) == {1: A_SLAVE}  # readable from the slave
    assert route.broker_datas[0].master_addr is None
    assert route.queue_datas[0].perm == 6


def test_closing_a_channel_removes_the_brokers_registered_on_it() -> None:
    table = RouteTable()
    chan_a, chan_b = object(), object()
    register(table, "broker-a", A_MASTER, TopicConfig("T"), channel=chan_a)
    register(table, "broker-b", B_MASTER, TopicConfig("T"), channel=chan_b)
    removed = table.on_channel_closed(chan_a)
    assert [(r.broker_addr, r.channel is chan_a) for r in removed] == [(A_MASTER, True)]
    assert table.on_channel_closed(object()) == []
    route = table.pick_topic_route("T")
    assert route is not None and [b.broker_name for b in route.broker_datas] == ["broker-b"]


def test_unregister() -> None:
    table = RouteTable()
    register(table, "broker-a", A_MASTER, TopicConfig("T"), TopicConfig("OnlyA"))
    register(table, "broker-a", A_SLAVE, broker_id=1)
    register(table, "broker-b", B_MASTER, TopicConfig("T"))
    assert table.unregister_broker(CLUSTER, A_SLAVE, "broker-a", 1)
    assert dict(table.cluster_info().broker_addr_table["broker-a"].broker_addrs) == {0: A_MASTER}
    assert table.unregister_broker(CLUSTER, A_MASTER, "broker-a", 0)
    assert not table.unregister_broker(CLUSTER, A_MASTER, "broker-a", 0)  # already gone
    assert table.pick_topic_route("OnlyA") is None
    route = table.pick_topic_route("T")
    assert route is not None and [q.broker_name for q in route.queue_datas] == ["broker-b"]
    assert table.cluster_info().cluster_addr_table == {CLUSTER: ("broker-b",)}
    assert table.unregister_broker(CLUSTER, B_MASTER, "broker-b", 0)
    assert table.cluster_info().cluster_addr_table == {}


def test_query_data_version_reports_changes_and_refreshes_liveness() -> None:
    table = RouteTable()
    register(table, "broker-a", A_MASTER, TopicConfig("T"), now_ms=0, heartbeat_timeout_ms=100)
    assert table.query_data_version(CLUSTER, A_MASTER, DV1, 90) == (False, DV1)
    assert table.query_data_version(CLUSTER, A_MASTER, DV2, 180) == (True, DV1)
    assert table.query_data_version(CLUSTER, A_MASTER, None, 180) == (True, DV1)
    assert table.scan_expired(250) == []  # refreshed at 180
    assert table.query_data_version(CLUSTER, B_MASTER, DV1, 250) == (True, None)


# ---------------------------------------------------------------------------------------------
# Masters and slaves


def test_slave_learns_master_and_ha_address_once_the_master_is_registered() -> None:
    table = RouteTable()
    early = register(table, "broker-a", A_SLAVE, TopicConfig("T"), broker_id=1, ha="192.168.1.11:10912")
    assert (early.master_addr, early.ha_server_addr) == (None, None)
    assert table.pick_topic_route("T") is None  # a pre-5.x slave's topic configs are ignored
    register(table, "broker-a", A_MASTER, TopicConfig("T", 4, 4), ha="192.168.1.10:10912")
    later = register(table, "broker-a", A_SLAVE, TopicConfig("T", 9, 9), broker_id=1)
    assert (later.master_addr, later.ha_server_addr) == (A_MASTER, "192.168.1.10:10912")
    route = table.pick_topic_route("T")
    assert route is not None
    assert dict(route.broker_datas[0].broker_addrs) == {0: A_MASTER, 1: A_SLAVE}
    assert route.queue_datas == (QueueData("broker-a", 4, 4, 6, 0),)  # from the master only
    assert route_json(table, "T")["brokerDatas"][0]["brokerAddrs"] == {"0": A_MASTER, "1": A_SLAVE}


def test_slave_promoted_to_master_keeps_one_record_per_address() -> None:
    table = RouteTable()
    register(table, "broker-a", A_SLAVE, broker_id=1)
    register(table, "broker-a", A_SLAVE, TopicConfig("T"), broker_id=0)
    data = table.broker_data("broker-a")
    assert data is not None and dict(data.broker_addrs) == {0: A_SLAVE}
    assert table.pick_topic_route("T") is not None


def test_acting_master_slave_serves_read_only_queue_data() -> None:
    table = RouteTable()
    register(table, "broker-a", A_SLAVE, TopicConfig("T", 4, 4), broker_id=1, enable_acting_master=True)
    route = table.pick_topic_route("T")
    assert route is not None and route.queue_datas[0].perm == 4  # write wiped
    data = table.broker_data("broker-a")
    assert data is not None and data.enable_acting_master
    # The master comes back: its configs rule again; when it leaves, the topics turn read-only.
    register(table, "broker-a", A_MASTER, TopicConfig("T", 4, 4), enable_acting_master=True)
    assert table.queue_datas("T")["broker-a"].perm == 6
    table.unregister_broker(CLUSTER, A_MASTER, "broker-a", 0)
    assert table.queue_datas("T")["broker-a"].perm == 4


def test_registration_with_an_older_state_version_is_refused() -> None:
    table = RouteTable()
    register(table, "broker-a", A_MASTER, TopicConfig("T"), dv=DataVersion(1, 1, state_version=5))
    other = "192.168.1.99:10911"
    refused = register(table, "broker-a", other, TopicConfig("T"), dv=DataVersion(1, 1, state_version=4))
    assert not refused.accepted
    data = table.broker_data("broker-a")
    assert data is not None and dict(data.broker_addrs) == {0: A_MASTER}
    taken = register(table, "broker-a", other, TopicConfig("T"), dv=DataVersion(1, 1, state_version=6))
    assert taken.accepted
    data = table.broker_data("broker-a")
    assert data is not None and dict(data.broker_addrs) == {0: other}


def test_write_perm_wipe_and_add() -> None:
    table = RouteTable()
    register(table, "broker-a", A_MASTER, TopicConfig("T1"), TopicConfig("T2", perm=7))
    register(table, "broker-b", B_MASTER, TopicConfig("T1"))
    assert table.wipe_write_perm("broker-a") == 2
    assert [table.queue_datas(t)["broker-a"].perm for t in ("T1", "T2")] == [4, 5]
    assert table.queue_datas("T1")["broker-b"].perm == 6
    assert table.add_write_perm("broker-a") == 2
    assert [table.queue_datas(t)["broker-a"].perm for t in ("T1", "T2")] == [6, 6]
    assert table.wipe_write_perm("nobody") == 0


def test_register_topic_needs_known_brokers() -> None:
    table = RouteTable()
    register(table, "broker-a", A_MASTER)
    assert not table.register_topic("X", [])
    assert not table.register_topic("X", [QueueData("broker-z", 1, 1, 6)])
    assert table.pick_topic_route("X") is None
    assert table.register_topic("X", [QueueData("broker-a", 2, 2, 6)])
    route = table.pick_topic_route("X")
    assert route is not None and route.queue_datas == (QueueData("broker-a", 2, 2, 6),)


def test_filter_servers_show_up_in_the_route() -> None:
    table = RouteTable()
    register(table, "broker-a", A_MASTER, TopicConfig("T"), filter_servers=["10.0.0.9:3000"])
    route = table.pick_topic_route("T")
    assert route is not None and dict(route.filter_server_table) == {A_MASTER: ("10.0.0.9:3000",)}
    register(table, "broker-a", A_MASTER, TopicConfig("T"), filter_servers=[])
    route = table.pick_topic_route("T")
    assert route is not None and dict(route.filter_server_table) == {}


# ---------------------------------------------------------------------------------------------
# KV config


def test_kv_config_put_get_delete_per_namespace() -> None:
    table = RouteTable()
    assert table.get_kv("ns", "k") is None
    assert table.kv_namespace("ns") is None
    table.put_kv("ns", "k", "v1")
    table.put_kv("ns", "k", "v2")
    table.put_kv("other", "k", "x")
    assert table.get_kv("ns", "k") == "v2"
    assert table.get_kv("other", "k") == "x"
    assert table.kv_namespace("ns") == {"k": "v2"}
    assert table.delete_kv("ns", "k")
    assert not table.delete_kv("ns", "k")
    assert table.get_kv("ns", "k") is None
    assert table.kv_namespace("ns") == {}  # the namespace stays, as in Java
    assert table.kv_config_table() == {"ns": {}, "other": {"k": "x"}}
    fresh = RouteTable()
    fresh.load_kv_config(table.kv_config_table())
    assert fresh.get_kv("other", "k") == "x"


def test_order_topic_conf_comes_from_the_kv_namespace() -> None:
    table = RouteTable()
    register(table, "broker-a", A_MASTER, TopicConfig("Orders", 4, 4))
    register(table, "broker-b", B_MASTER, TopicConfig("Orders", 4, 4))
    assert table.pick_topic_route("Orders") == table.pick_topic_route("Orders", with_order_topic_conf=False)
    table.put_kv(NAMESPACE_ORDER_TOPIC_CONFIG, "Orders", "broker-a:4;broker-b:4")
    route = table.pick_topic_route("Orders")
    assert route is not None and route.order_topic_conf == "broker-a:4;broker-b:4"
    body = json.loads(route.encode())
    assert body["orderTopicConf"] == "broker-a:4;broker-b:4"
    assert list(body) == ["brokerDatas", "filterServerTable", "orderTopicConf", "queueDatas"]
    plain = table.pick_topic_route("Orders", with_order_topic_conf=False)
    assert plain is not None and plain.order_topic_conf is None


# ---------------------------------------------------------------------------------------------
# Bodies: encode, parse back, and read what Java writes


def sample_route() -> TopicRouteData:
    return TopicRouteData(
        queue_datas=(QueueData("broker-a", 4, 4, 6, 0), QueueData("broker-b", 8, 8, 7, 2)),
        broker_datas=(
            BrokerData(CLUSTER, "broker-a", {0: A_MASTER, 1: A_SLAVE}),
            BrokerData(CLUSTER, "broker-b", {0: B_MASTER}, zone_name="z1", enable_acting_master=True),
        ),
        filter_server_table={A_MASTER: ("f:1",)},
        order_topic_conf="broker-a:4",
    )


def test_route_data_both_forms_parse_back() -> None:
    route = sample_route()
    standard = route.encode()
    fast = route.encode(standard_json=False)
    assert b'"brokerAddrs":{"0":"192.168.1.10:10911","1":"192.168.1.11:10911"}' in standard
    assert b'"brokerAddrs":{0:"192.168.1.10:10911",1:"192.168.1.11:10911"}' in fast
    assert TopicRouteData.decode(standard) == route
    assert TopicRouteData.decode(fast) == route
    with pytest.raises(ValueError):
        json.loads(fast)  # the fastjson form is not JSON: why routes go out quoted
    assert json.loads(standard)["brokerDatas"][1]["zoneName"] == "z1"


def test_route_written_by_an_old_java_name_server_parses() -> None:
    text = (
        '{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},"brokerName":"b",'
        '"cluster":"c"}],"filterServerTable":{},"queueDatas":[{"brokerName":"b","perm":6,'
        '"readQueueNums":4,"topicSynFlag":1,"writeQueueNums":4}]}'
    )
    route = TopicRouteData.decode(text.encode())
    assert dict(route.broker_datas[0].broker_addrs) == {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}
    assert route.broker_datas[0].master_addr == "10.0.0.1:10911"
    assert route.queue_datas == (QueueData("b", 4, 4, 6, 1),)
    assert route.order_topic_conf is None and not route.broker_datas[0].enable_acting_master


def test_cluster_info_is_written_with_bare_keys_as_java_does_and_parses_back() -> None:
    table = RouteTable()
    register(table, "broker-a", A_MASTER, TopicConfig("T"))
    register(table, "broker-a", A_SLAVE, broker_id=1)
    info = table.cluster_info()
    body = info.encode()
    assert body == (
        b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"192.168.1.10:10911",1:"192.168.1.11:10911"},'
        b'"brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false}},'
        b'"clusterAddrTable":{"DefaultCluster":["broker-a"]}}'
    )
    assert ClusterInfo.decode(body) == info
    assert ClusterInfo.decode(info.encode(standard_json=True)) == info
    assert (
        json.loads(info.encode(standard_json=True))["brokerAddrTable"]["broker-a"]["brokerAddrs"]["1"]
        == A_SLAVE
    )


def test_topic_list_kv_table_and_data_version_bodies() -> None:
    assert TopicList(("a", "b")).encode() == b'{"topicList":["a","b"]}'
    assert TopicList(("a",), "1.2.3.4:10911").encode() == b'{"brokerAddr":"1.2.3.4:10911","topicList":["a"]}'
    assert TopicList.decode(b'{"topicList":["x"],"brokerAddr":"h:1"}') == TopicList(("x",), "h:1")
    assert TopicList.decode(b"{}") == TopicList()
    assert KVTable({"b": "2", "a": "1"}).encode() == b'{"table":{"a":"1","b":"2"}}'
    assert KVTable.decode(b'{"table":{"k":"v"}}') == KVTable({"k": "v"})
    assert DV1.encode() == b'{"counter":1,"stateVersion":0,"timestamp":1700000000000}'
    assert DataVersion.decode(b'{"counter":7,"timestamp":9}') == DataVersion(
        7, 9, 0
    )  # 4.9.x: no stateVersion


def test_browser_compatible_output_escapes_non_ascii_and_big_longs() -> None:
    assert dumps({"t": "é"}, browser_compatible=True) == '{"t":"\\u00e9"}'
    assert dumps({"t": "é"}) == '{"t":"é"}'
    assert dumps({"n": 1 << 60}, browser_compatible=True) == '{"n":"1152921504606846976"}'
    assert dumps({1: [True, None]}, quote_int_keys=False) == "{1:[true,null]}"


def test_malformed_bodies_raise_body_format_error() -> None:
    for bad in (b"not json", b"[1,2]", b'{"queueDatas":{}}', b'{"queueDatas":[{"perm":6}]}'):
        with pytest.raises(BodyFormatError):
            TopicRouteData.decode(bad)
    with pytest.raises(BodyFormatError):
        ClusterInfo.decode(b'{"brokerAddrTable":{"b":{"brokerAddrs":{"x":"h:1"}}}}')
    with pytest.raises(BodyFormatError):
        RegisterBrokerBody.decode(b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"perm":"rw"}}}}')
    with pytest.raises(BodyFormatError):
        RegisterBrokerBody.decode(b"x\x9c broken zlib")
    with pytest.raises(BodyFormatError):
        DataVersion.decode(b'"text"')


# A RegisterBrokerBody as a 5.x Java broker sends it: fastjson bean order, AtomicLong counter as a
# number, enums by name, and (static topics) a TopicQueueMappingInfo whose Map<Integer,Integer>
# currIdMap is written with bare keys.
JAVA_5_REGISTER_BODY = (
    '{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":3,"stateVersion":0,'
    '"timestamp":1700000000123},"mappingDataVersion":{"counter":0,"stateVersion":0,"timestamp":1700000000001},'
    '"topicConfigTable":{"TBW102":{"attributes":{},"order":false,"perm":7,"readQueueNums":8,'
    '"topicFilterType":"SINGLE_TAG","topicName":"TBW102","topicSysFlag":0,"writeQueueNums":8},'
    '"%RETRY%please_rename_unique_group_name_4":{"attributes":{},"order":false,"perm":6,"readQueueNums":1,'
    '"topicFilterType":"SINGLE_TAG","topicName":"%RETRY%please_rename_unique_group_name_4","topicSysFlag":0,'
    '"writeQueueNums":1},"TopicTest":{"attributes":{"+message.type":"NORMAL"},"order":true,"perm":6,'
    '"readQueueNums":4,"topicFilterType":"MULTI_TAG","topicName":"TopicTest","topicSysFlag":0,'
    '"writeQueueNums":4}},"topicQueueMappingDetailMap":{},"topicQueueMappingInfoMap":{"StaticTopic":'
    '{"bname":"broker-a","currIdMap":{0:0,1:1},"dirty":false,"epoch":1700000000000,"scope":"__global__",'
    '"topic":"StaticTopic","totalQueues":2}}}}'
)

# 4.9.x: no stateVersion, no mapping fields, no attributes.
JAVA_49_REGISTER_BODY = (
    '{"filterServerList":["10.0.0.5:30000"],"topicConfigSerializeWrapper":{"dataVersion":{"counter":12,'
    '"timestamp":1650000000000},"topicConfigTable":{"TopicTest":{"order":false,"perm":6,"readQueueNums":4,'
    '"topicFilterType":"SINGLE_TAG","topicName":"TopicTest","topicSysFlag":0,"writeQueueNums":4}}}}'
)


def test_parse_a_java_5_register_broker_body() -> None:
    body = RegisterBrokerBody.decode(JAVA_5_REGISTER_BODY.encode())
    assert body.data_version == DataVersion(3, 1_700_000_000_123, 0)
    assert body.filter_server_list == ()
    assert set(body.topic_config_table) == {"TBW102", "%RETRY%please_rename_unique_group_name_4", "TopicTest"}
    assert body.topic_config_table["TBW102"] == TopicConfig("TBW102", 8, 8, 7)
    test = body.topic_config_table["TopicTest"]
    assert (test.topic_filter_type, test.order, dict(test.attributes)) == (
        "MULTI_TAG",
        True,
        {"+message.type": "NORMAL"},
    )
    mapping = body.topic_queue_mapping_info_map["StaticTopic"]
    assert mapping["currIdMap"] == {"0": 0, "1": 1} and mapping["bname"] == "broker-a"
    table = RouteTable()
    table.register_broker(
        CLUSTER,
        "broker-a",
        A_MASTER,
        0,
        None,
        body.topic_config_table,
        body.data_version,
        0,
        topic_queue_mapping_info=body.topic_queue_mapping_info_map,
    )
    route = table.pick_topic_route("TBW102")
    assert route is not None and route.queue_datas[0].perm == 7
    assert table.all_topics() == ["%RETRY%please_rename_unique_group_name_4", "TBW102", "TopicTest"]


def test_parse_a_java_4_9_register_broker_body_and_a_bare_wrapper() -> None:
    body = RegisterBrokerBody.decode(JAVA_49_REGISTER_BODY.encode())
    assert body.data_version == DataVersion(12, 1_650_000_000_000)
    assert body.filter_server_list == ("10.0.0.5:30000",)
    assert body.topic_config_table["TopicTest"] == TopicConfig("TopicTest", 4, 4)
    # Brokers before V3_0_11 send the TopicConfigSerializeWrapper itself.
    bare = (
        '{"dataVersion":{"counter":1,"timestamp":5},'
        '"topicConfigTable":{"T":{"topicName":"T","readQueueNums":2}}}'
    )
    old = RegisterBrokerBody.decode(bare.encode())
    assert old.data_version == DataVersion(1, 5)
    assert old.topic_config_table["T"] == TopicConfig("T", 2, 16)  # Java defaults fill the rest
    assert RegisterBrokerBody.decode(b"") == RegisterBrokerBody()


def java_compressed_register_body(with_mapping: bool) -> bytes:
    """Built here from the layout in spec §3.2 (not with the code under test)."""

    def chunk(data: bytes) -> bytes:
        return struct.pack(">i", len(data)) + data

    raw = chunk(b'{"counter":4,"stateVersion":0,"timestamp":1700000000999}')
    raw += struct.pack(">i", 2)
    raw += chunk(b"TopicTest 4 4 6 SINGLE_TAG {}")
    raw += chunk(b'TBW102 8 8 7 SINGLE_TAG {"+queue.type":"BatchCQ"}')
    raw += chunk(b'["10.0.0.5:30000"]')
    if with_mapping:
        raw += struct.pack(">i", 1)
        raw += chunk(
            b'{"bname":"broker-a","currIdMap":{0:0},"epoch":1,"topic":"StaticTopic","totalQueues":1}'
        )
    return zlib.compress(raw, 9)


@pytest.mark.parametrize("with_mapping", [False, True])
def test_parse_a_compressed_register_broker_body(with_mapping: bool) -> None:
    body = RegisterBrokerBody.decode(java_compressed_register_body(with_mapping))
    assert body.data_version == DataVersion(4, 1_700_000_000_999)
    assert body.topic_config_table["TopicTest"] == TopicConfig("TopicTest", 4, 4, 6)
    assert body.topic_config_table["TBW102"] == TopicConfig(
        "TBW102", 8, 8, 7, attributes={"+queue.type": "BatchCQ"}
    )
    assert body.filter_server_list == ("10.0.0.5:30000",)
    assert ("StaticTopic" in body.topic_queue_mapping_info_map) is with_mapping


def test_register_broker_body_round_trips_in_both_forms() -> None:
    body = RegisterBrokerBody.of(
        [TopicConfig("A", 4, 4, order=True, attributes={"k": "v"}), TopicConfig("B", 1, 2, perm=4)],
        DataVersion(9, 99, 1),
        ["f:1"],
    )
    encoded = body.encode()
    assert json.loads(encoded)["topicConfigSerializeWrapper"]["topicConfigTable"]["A"] == {
        "attributes": {"k": "v"},
        "order": True,
        "perm": 6,
        "readQueueNums": 4,
        "topicFilterType": "SINGLE_TAG",
        "topicName": "A",
        "topicSysFlag": 0,
        "writeQueueNums": 4,
    }
    assert RegisterBrokerBody.decode(encoded) == body
    compressed = RegisterBrokerBody.decode(body.encode(compressed=True))
    assert compressed.data_version == body.data_version
    assert compressed.filter_server_list == ("f:1",)
    # The compact form carries no topicSysFlag/order.
    assert compressed.topic_config_table["A"] == TopicConfig("A", 4, 4, attributes={"k": "v"})


def test_topic_config_tolerates_fastjson_variants() -> None:
    tc = TopicConfig.from_json_obj(
        fastjson.loads('{"perm":"7","readQueueNums":8.0,"topicFilterType":1,"order":"true"}'), "T"
    )
    assert tc == TopicConfig("T", 8, 16, 7, "MULTI_TAG", order=True)
    with pytest.raises(BodyFormatError):
        TopicConfig.from_json_obj({"topicFilterType": "SQL"}, "T")
    with pytest.raises(BodyFormatError):
        TopicConfig.decode_compact("T 4 4")
