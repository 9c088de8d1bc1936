"""A real NameServer on loopback, driven by a real RemotingClient with requests built the way a Java
broker and Java/ali-ons clients build them (headers as strings, bodies as fastjson writes them)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import pathlib
import re
import signal
import sys
import zlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

import pytest

from _support.wait import wait_until_async
from rocketq.errors import ConfigError
from rocketq.namesrv import NameServer, NamesrvConfig
from rocketq.namesrv.server import parse_properties
from rocketq.protocol import fastjson
from rocketq.remoting import Connection, RemotingClient, RemotingCommand, RequestCode, create_request

T = TypeVar("T")
WAIT_S = 10.0  # deadline for anything that should happen promptly
CLUSTER = "DefaultCluster"


def run(coro: Coroutine[Any, Any, T]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, 60)

    return asyncio.run(bounded())


@contextlib.asynccontextmanager
async def namesrv(**overrides: Any) -> AsyncIterator[tuple[NameServer, str]]:
    config = NamesrvConfig(bind_address="127.0.0.1", listen_port=0, **overrides)
    server = NameServer(config)
    await server.start()
    try:
        yield server, f"127.0.0.1:{server.port}"
    finally:
        await server.close()


# -- requests as a Java broker builds them ---------------------------------------------------


def java_topic(name: str, read: int = 4, write: int = 4, perm: int = 6) -> dict[str, Any]:
    return {
        "attributes": {},
        "order": False,
        "perm": perm,
        "readQueueNums": read,
        "topicFilterType": "SINGLE_TAG",
        "topicName": name,
        "topicSysFlag": 0,
        "writeQueueNums": write,
    }


def java_register_body(
    topics: list[dict[str, Any]], counter: int = 1, timestamp: int = 1_700_000_000_000
) -> bytes:
    dv = {"counter": counter, "stateVersion": 0, "timestamp": timestamp}
    doc = {
        "filterServerList": [],
        "topicConfigSerializeWrapper": {
            "dataVersion": dv,
            "mappingDataVersion": {"counter": 0, "stateVersion": 0, "timestamp": timestamp},
            "topicConfigTable": {t["topicName"]: t for t in topics},
            "topicQueueMappingDetailMap": {},
            "topicQueueMappingInfoMap": {},
        },
    }
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def register_request(
    name: str,
    addr: str,
    body: bytes,
    *,
    broker_id: int = 0,
    cluster: str = CLUSTER,
    timeout_ms: int | None = None,
    crc: int | None = None,
) -> RemotingCommand:
    host, port = addr.rsplit(":", 1)
    header: dict[str, object] = {
        "brokerAddr": addr,
        "brokerId": broker_id,
        "brokerName": name,
        "clusterName": cluster,
        "compressed": False,
        "enableActingMaster": False,
        "haServerAddr": f"{host}:{int(port) + 1}",
        "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF if crc is None else crc,
    }
    if timeout_ms is not None:
        header["heartbeatTimeoutMillis"] = timeout_ms
    return create_request(RequestCode.REGISTER_BROKER, header, body)


async def get_route(client: RemotingClient, ns: str, topic: str) -> RemotingCommand:
    return await client.invoke(ns, create_request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))


async def has_route(client: RemotingClient, ns: str, topic: str) -> bool:
    return (await get_route(client, ns, topic)).code == 0


# ---------------------------------------------------------------------------------------------


def test_two_brokers_register_and_clients_read_routes_cluster_info_and_topic_lists() -> None:
    async def main() -> None:
        async with (
            namesrv() as (_, ns),
            RemotingClient() as broker_a,
            RemotingClient() as broker_b,
            RemotingClient() as client,
        ):
            body_a = java_register_body([java_topic("TopicTest"), java_topic("TBW102", 8, 8, perm=7)])
            reply = await broker_a.invoke(ns, register_request("broker-a", "127.0.0.1:10911", body_a))
            assert (reply.code, reply.ext_fields, reply.body) == (
                0,
                {},
                b"",
            )  # a master gets no master address
            body_b = java_register_body([java_topic("TopicTest", 8, 8), java_topic("OnlyB", 2, 2)])
            reply = await broker_b.invoke(ns, register_request("broker-b", "127.0.0.1:20911", body_b))
            assert reply.code == 0

            route = await get_route(client, ns, "TopicTest")
            assert route.code == 0 and route.is_response
            data = json.loads(route.body)  # standard JSON: quoted brokerAddrs keys
            assert data == {
                "brokerDatas": [
                    {
                        "brokerAddrs": {"0": "127.0.0.1:10911"},
                        "brokerName": "broker-a",
                        "cluster": CLUSTER,
                        "enableActingMaster": False,
                    },
                    {
                        "brokerAddrs": {"0": "127.0.0.1:20911"},
                        "brokerName": "broker-b",
                        "cluster": CLUSTER,
                        "enableActingMaster": False,
                    },
                ],
                "filterServerTable": {},
                "queueDatas": [
                    {
                        "brokerName": "broker-a",
                        "perm": 6,
                        "readQueueNums": 4,
                        "topicSysFlag": 0,
                        "writeQueueNums": 4,
                    },
                    {
                        "brokerName": "broker-b",
                        "perm": 6,
                        "readQueueNums": 8,
                        "topicSysFlag": 0,
                        "writeQueueNums": 8,
                    },
                ],
            }
            tbw = json.loads((await get_route(client, ns, "TBW102")).body)
            assert tbw["queueDatas"] == [
                {
                    "brokerName": "broker-a",
                    "perm": 7,
                    "readQueueNums": 8,
                    "topicSysFlag": 0,
                    "writeQueueNums": 8,
                }
            ]

            info = await client.invoke(ns, create_request(RequestCode.GET_BROKER_CLUSTER_INFO))
            assert info.code == 0
            assert b'"brokerAddrs":{0:"127.0.0.1:10911"}' in info.body  # fastjson's bare keys, as Java
            cluster_info = fastjson.loads(info.body.decode())
            assert cluster_info["clusterAddrTable"] == {CLUSTER: ["broker-a", "broker-b"]}
            assert cluster_info["brokerAddrTable"]["broker-b"]["brokerAddrs"] == {"0": "127.0.0.1:20911"}

            topics = await client.invoke(ns, create_request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
            assert json.loads(topics.body) == {"topicList": ["OnlyB", "TBW102", "TopicTest"]}
            by_cluster = await client.invoke(
                ns, create_request(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": CLUSTER})
            )
            assert json.loads(by_cluster.body) == {"topicList": ["OnlyB", "TBW102", "TopicTest"]}
            other = await client.invoke(
                ns, create_request(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "Nope"})
            )
            assert json.loads(other.body) == {"topicList": []}

    run(main())


def test_slave_registration_is_answered_with_the_master_and_ha_addresses() -> None:
    async def main() -> None:
        async with namesrv() as (_, ns), RemotingClient() as master, RemotingClient() as slave:
            body = java_register_body([java_topic("T")])
            await master.invoke(ns, register_request("broker-a", "127.0.0.1:10911", body))
            reply = await slave.invoke(ns, register_request("broker-a", "127.0.0.1:10921", body, broker_id=1))
            assert reply.code == 0
            assert reply.ext_fields == {"haServerAddr": "127.0.0.1:10912", "masterAddr": "127.0.0.1:10911"}
            route = json.loads((await get_route(slave, ns, "T")).body)
            assert route["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:10911", "1": "127.0.0.1:10921"}

    run(main())


def test_unknown_topic_answers_17_naming_the_topic() -> None:
    async def main() -> None:
        async with namesrv() as (_, ns), RemotingClient() as client:
            reply = await get_route(client, ns, "NoSuchTopic")
            assert reply.code == 17 and reply.body == b""
            assert reply.remark is not None
            assert reply.remark.startswith("No topic route info in name server for the topic: NoSuchTopic")

    run(main())


def test_unknown_request_code_answers_3() -> None:
    async def main() -> None:
        async with namesrv() as (_, ns), RemotingClient() as client:
            for code in (RequestCode.PULL_MESSAGE, 9999):
                reply = await client.invoke(ns, create_request(code, {"topic": "T"}))
                assert (reply.code, reply.remark) == (3, f" request type {code} not supported")

    run(main())


def test_bad_body_crc_answers_1_and_registers_nothing() -> None:
    async def main() -> None:
        async with namesrv() as (server, ns), RemotingClient() as broker:
            body = java_register_body([java_topic("T")])
            bad = (zlib.crc32(body) & 0x7FFFFFFF) ^ 1
            reply = await broker.invoke(ns, register_request("broker-a", "127.0.0.1:10911", body, crc=bad))
            assert (reply.code, reply.remark) == (1, "crc32 not match")
            assert server.routes.cluster_info().broker_addr_table == {}
            assert (await get_route(broker, ns, "T")).code == 17
            # bodyCrc32 0 (or absent) means "not checked".
            reply = await broker.invoke(ns, register_request("broker-a", "127.0.0.1:10911", body, crc=0))
            assert reply.code == 0 and await has_route(broker, ns, "T")

    run(main())


def test_missing_required_header_field_answers_1_naming_it() -> None:
    async def main() -> None:
        async with namesrv() as (_, ns), RemotingClient() as client:
            reply = await client.invoke(ns, create_request(RequestCode.GET_ROUTEINFO_BY_TOPIC))
            assert reply.code == 1 and reply.remark is not None and "'topic'" in reply.remark
            request = register_request("broker-a", "127.0.0.1:10911", b"")
            del request.ext_fields["clusterName"]
            reply = await client.invoke(ns, request)
            assert reply.code == 1 and reply.remark is not None and "'clusterName'" in reply.remark
            reply = await client.invoke(ns, register_request("broker-a", "127.0.0.1:10911", b"{not json"))
            assert reply.code == 1 and reply.remark is not None and "not JSON" in reply.remark

    run(main())


def test_a_broker_that_stops_registering_expires() -> None:
    async def main() -> None:
        async with (
            namesrv(scan_not_active_broker_interval_ms=50) as (server, ns),
            RemotingClient() as quiet,
            RemotingClient() as chatty,
            RemotingClient() as client,
        ):
            quiet_body = java_register_body([java_topic("Shared"), java_topic("OnlyQuiet")])
            chatty_body = java_register_body([java_topic("Shared")])
            reply = await quiet.invoke(
                ns, register_request("broker-q", "127.0.0.1:10911", quiet_body, timeout_ms=300)
            )
            assert reply.code == 0
            quiet_conn = await quiet.connection(ns)

            async def keep_registering() -> None:
                while True:
                    request = register_request("broker-c", "127.0.0.1:20911", chatty_body, timeout_ms=3000)
                    assert (await chatty.invoke(ns, request)).code == 0
                    await asyncio.sleep(0.05)

            keeper = asyncio.create_task(keep_registering())
            try:
                assert await has_route(client, ns, "OnlyQuiet")

                async def quiet_gone() -> bool:
                    return not await has_route(client, ns, "OnlyQuiet")

                await wait_until_async(quiet_gone, "the silent broker to expire", WAIT_S, 0.02)

                async def quiet_conn_closed() -> bool:
                    return quiet_conn.closed

                await wait_until_async(
                    quiet_conn_closed, "the expired broker's connection to be closed", WAIT_S, 0.02
                )
                route = json.loads((await get_route(client, ns, "Shared")).body)
                assert [b["brokerName"] for b in route["brokerDatas"]] == ["broker-c"]
                assert [(b.cluster, b.broker_addr) for b in server.routes.live_brokers()] == [
                    (CLUSTER, "127.0.0.1:20911")
                ]
            finally:
                keeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await keeper

    run(main())


def test_a_broker_whose_connection_closes_is_removed_at_once() -> None:
    async def main() -> None:
        async with namesrv() as (_, ns), RemotingClient() as client:
            broker = RemotingClient()
            body = java_register_body([java_topic("T")])
            assert (await broker.invoke(ns, register_request("broker-a", "127.0.0.1:10911", body))).code == 0
            assert await has_route(client, ns, "T")
            await broker.close()

            async def gone() -> bool:
                return not await has_route(client, ns, "T")

            await wait_until_async(gone, "the broker to be removed after its connection closed", WAIT_S, 0.02)

    run(main())


def test_unregister_broker() -> None:
    async def main() -> None:
        async with namesrv() as (_, ns), RemotingClient() as broker:
            body = java_register_body([java_topic("T")])
            await broker.invoke(ns, register_request("broker-a", "127.0.0.1:10911", body))
            header = {
                "brokerAddr": "127.0.0.1:10911",
                "brokerId": 0,
                "brokerName": "broker-a",
                "clusterName": CLUSTER,
            }
            reply = await broker.invoke(ns, create_request(RequestCode.UNREGISTER_BROKER, header))
            assert reply.code == 0
            assert (await get_route(broker, ns, "T")).code == 17
            info = fastjson.loads(
                (await broker.invoke(ns, create_request(RequestCode.GET_BROKER_CLUSTER_INFO))).body.decode()
            )
            assert info == {"brokerAddrTable": {}, "clusterAddrTable": {}}

    run(main())


def test_data_version_query_and_skip_on_reregistration() -> None:
    async def main() -> None:
        async with namesrv() as (_, ns), RemotingClient() as broker:
            addr = "127.0.0.1:10911"
            await broker.invoke(
                ns, register_request("broker-a", addr, java_register_body([java_topic("T", 4, 4)], 1))
            )
            # Same DataVersion, other queue numbers: the name server does not re-read the topics.
            same = java_register_body([java_topic("T", 16, 16)], 1)
            await broker.invoke(ns, register_request("broker-a", addr, same))
            assert json.loads((await get_route(broker, ns, "T")).body)["queueDatas"][0]["readQueueNums"] == 4
            dv1 = b'{"counter":1,"stateVersion":0,"timestamp":1700000000000}'
            header = {"brokerAddr": addr, "brokerId": 0, "brokerName": "broker-a", "clusterName": CLUSTER}
            reply = await broker.invoke(ns, create_request(RequestCode.QUERY_DATA_VERSION, header, dv1))
            assert reply.code == 0 and reply.ext_fields == {"changed": "false"}
            assert json.loads(reply.body) == json.loads(dv1)
            dv2 = b'{"counter":2,"stateVersion":0,"timestamp":1700000000001}'
            reply = await broker.invoke(ns, create_request(RequestCode.QUERY_DATA_VERSION, header, dv2))
            assert reply.ext_fields == {"changed": "true"}
            await broker.invoke(
                ns, register_request("broker-a", addr, java_register_body([java_topic("T", 16, 16)], 2))
            )
            assert json.loads((await get_route(broker, ns, "T")).body)["queueDatas"][0]["readQueueNums"] == 16
            beat = {"clusterName": CLUSTER, "brokerAddr": addr, "brokerName": "broker-a", "brokerId": 0}
            assert (await broker.invoke(ns, create_request(RequestCode.BROKER_HEARTBEAT, beat))).code == 0

    run(main())


def test_kv_config_round_trip() -> None:
    async def main() -> None:
        async with namesrv() as (_, ns), RemotingClient() as client:
            put = {"namespace": "ns1", "key": "k", "value": "v1"}
            assert (await client.invoke(ns, create_request(RequestCode.PUT_KV_CONFIG, put))).code == 0
            get = {"namespace": "ns1", "key": "k"}
            reply = await client.invoke(ns, create_request(RequestCode.GET_KV_CONFIG, get))
            assert (reply.code, reply.ext_fields) == (0, {"value": "v1"})
            listing = await client.invoke(
                ns, create_request(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "ns1"})
            )
            assert (listing.code, json.loads(listing.body)) == (0, {"table": {"k": "v1"}})
            assert (await client.invoke(ns, create_request(RequestCode.DELETE_KV_CONFIG, get))).code == 0
            reply = await client.invoke(ns, create_request(RequestCode.GET_KV_CONFIG, get))
            assert (reply.code, reply.remark) == (22, "No config item, Namespace: ns1 Key: k")
            missing = await client.invoke(
                ns, create_request(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "x"})
            )
            assert (missing.code, missing.remark) == (22, "No config item, Namespace: x")
            reply = await client.invoke(
                ns, create_request(RequestCode.PUT_KV_CONFIG, {"key": "k", "value": "v"})
            )
            assert (reply.code, reply.remark) == (1, "namespace or key is null")

    run(main())


def test_order_topic_config_reaches_brokers_and_routes() -> None:
    async def main() -> None:
        async with namesrv(order_message_enable=True) as (_, ns), RemotingClient() as broker:
            put = {"namespace": "ORDER_TOPIC_CONFIG", "key": "Orders", "value": "broker-a:4"}
            assert (await broker.invoke(ns, create_request(RequestCode.PUT_KV_CONFIG, put))).code == 0
            reply = await broker.invoke(
                ns,
                register_request("broker-a", "127.0.0.1:10911", java_register_body([java_topic("Orders")])),
            )
            assert json.loads(reply.body) == {"table": {"Orders": "broker-a:4"}}
            route = json.loads((await get_route(broker, ns, "Orders")).body)
            assert route["orderTopicConf"] == "broker-a:4"

    run(main())


def test_kv_config_survives_a_restart(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "namesrv" / "kvConfig.json")

    async def main() -> None:
        async with namesrv(kv_config_path=path) as (_, ns), RemotingClient() as client:
            put = {"namespace": "ns", "key": "k", "value": "kept"}
            assert (await client.invoke(ns, create_request(RequestCode.PUT_KV_CONFIG, put))).code == 0
        assert json.loads(pathlib.Path(path).read_text()) == {"configTable": {"ns": {"k": "kept"}}}
        async with namesrv(kv_config_path=path) as (_, ns), RemotingClient() as client:
            reply = await client.invoke(
                ns, create_request(RequestCode.GET_KV_CONFIG, {"namespace": "ns", "key": "k"})
            )
            assert reply.ext_fields == {"value": "kept"}

    run(main())


def test_a_malformed_frame_closes_only_that_connection() -> None:
    async def main() -> None:
        async with namesrv() as (server, ns), RemotingClient() as broker, RemotingClient() as client:
            body = java_register_body([java_topic("T")])
            assert (await broker.invoke(ns, register_request("broker-a", "127.0.0.1:10911", body))).code == 0
            assert await has_route(client, ns, "T")
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            header = b"{{{ not a header"
            # A well-delimited frame whose JSON header does not parse.
            writer.write((4 + len(header)).to_bytes(4, "big") + len(header).to_bytes(4, "big") + header)
            await writer.drain()
            try:
                assert await asyncio.wait_for(reader.read(), WAIT_S) == b""  # closed by the server
            except ConnectionResetError:
                pass
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            # Everybody else is unaffected: the client's connection and the broker registration.
            assert await has_route(client, ns, "T")
            conn: Connection = await broker.connection(ns)
            assert not conn.closed
            assert [b.broker_addr for b in server.routes.live_brokers()] == ["127.0.0.1:10911"]

    run(main())


def test_compressed_registration_from_a_5x_broker() -> None:
    async def main() -> None:
        async with namesrv() as (_, ns), RemotingClient() as broker:

            def chunk(data: bytes) -> bytes:
                return len(data).to_bytes(4, "big") + data

            raw = chunk(b'{"counter":1,"stateVersion":0,"timestamp":5}') + (1).to_bytes(4, "big")
            raw += chunk(b"Zipped 4 2 6 SINGLE_TAG {}") + chunk(b"[]") + (0).to_bytes(4, "big")
            body = zlib.compress(raw, 9)  # 5.x sends it with the header flag compressed=false
            assert (await broker.invoke(ns, register_request("broker-a", "127.0.0.1:10911", body))).code == 0
            queue = json.loads((await get_route(broker, ns, "Zipped")).body)["queueDatas"][0]
            assert (queue["readQueueNums"], queue["writeQueueNums"]) == (4, 2)

    run(main())


def test_admin_requests_write_perm_delete_topic_and_config() -> None:
    async def main() -> None:
        async with namesrv() as (server, ns), RemotingClient() as client:
            body = java_register_body([java_topic("T1"), java_topic("T2")])
            await client.invoke(ns, register_request("broker-a", "127.0.0.1:10911", body))
            wipe = await client.invoke(
                ns, create_request(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
            )
            assert (wipe.code, wipe.ext_fields) == (0, {"wipeTopicCount": "2"})
            assert json.loads((await get_route(client, ns, "T1")).body)["queueDatas"][0]["perm"] == 4
            add = await client.invoke(
                ns, create_request(RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
            )
            assert add.ext_fields == {"addTopicCount": "2"}
            deleted = await client.invoke(
                ns, create_request(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "T2"})
            )
            assert deleted.code == 0 and (await get_route(client, ns, "T2")).code == 17
            system = await client.invoke(ns, create_request(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS))
            assert json.loads(system.body) == {
                "brokerAddr": "127.0.0.1:10911",
                "topicList": [CLUSTER, "broker-a"],
            }

            config = await client.invoke(ns, create_request(RequestCode.GET_NAMESRV_CONFIG))
            assert "orderMessageEnable=false\n" in config.body.decode()
            assert f"listenPort={server.config.listen_port}\n" in config.body.decode()
            # the rocketq limits keep the unit their documented keys carry
            assert "serverReadMaxBytes=32768\n" in config.body.decode()
            assert "serverBufferedFramesMaxBytes=268435456\n" in config.body.decode()
            assert "serverPartialFrameTimeout=30000\n" in config.body.decode()
            update = create_request(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=true\n")
            assert (await client.invoke(ns, update)).code == 0
            assert server.config.order_message_enable
            refused = create_request(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"kvConfigPath=/tmp/x\n")
            reply = await client.invoke(ns, refused)
            assert (reply.code, reply.remark) == (16, "Can not update config in black list.")
            bad = create_request(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"scanNotActiveBrokerInterval=-5\n")
            reply = await client.invoke(ns, bad)
            assert (
                reply.code == 1
                and reply.remark is not None
                and "scan_not_active_broker_interval_ms" in reply.remark
            )
            disabled = create_request(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"enableAllTopicList=false\n")
            await client.invoke(ns, disabled)
            reply = await client.invoke(ns, create_request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
            assert (reply.code, reply.remark) == (1, "disable")

    run(main())


def test_namesrv_config_defaults_properties_and_validation() -> None:
    cfg = NamesrvConfig()
    assert (cfg.listen_port, cfg.scan_not_active_broker_interval_ms, cfg.broker_heartbeat_timeout_ms) == (
        9876,
        5000,
        120_000,
    )
    assert (
        not cfg.order_message_enable
        and cfg.return_order_topic_config_to_broker
        and cfg.kv_config_path is None
    )
    props = parse_properties(
        "# namesrv.conf\nlistenPort = 9877\nscanNotActiveBrokerInterval=1000\n"
        "orderMessageEnable=true\nkvConfigPath=/tmp/kv.json\nunknownKey=1\n"
    )
    loaded = NamesrvConfig.from_rocketmq_properties(props)
    assert (loaded.listen_port, loaded.scan_not_active_broker_interval_ms) == (9877, 1000)
    assert loaded.order_message_enable and loaded.kv_config_path == "/tmp/kv.json"
    assert loaded.to_rocketmq_properties()["scanNotActiveBrokerInterval"] == "1000"
    assert NamesrvConfig.from_rocketmq_properties(loaded.to_rocketmq_properties()) == loaded
    with pytest.raises(ConfigError, match="listen_port=70000"):
        NamesrvConfig(listen_port=70000)
    with pytest.raises(ConfigError, match="scan_not_active_broker_interval_ms=0"):
        NamesrvConfig(scan_not_active_broker_interval_ms=0)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_run_namesrv_serves_until_sigterm() -> None:
    script = (
        "import logging, sys\n"
        "logging.basicConfig(level=logging.INFO, stream=sys.stderr)\n"
        "from rocketq.namesrv import NamesrvConfig, run_namesrv\n"
        "sys.exit(run_namesrv(NamesrvConfig(bind_address='127.0.0.1', listen_port=0)))\n"
    )

    async def main() -> None:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", script, stderr=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL
        )
        assert proc.stderr is not None
        try:
            port = None
            while port is None:
                line = await asyncio.wait_for(proc.stderr.readline(), WAIT_S)
                assert line, "name server process exited before listening"
                match = re.search(rb"name server listening on 127\.0\.0\.1:(\d+)", line)
                if match:
                    port = int(match.group(1))
            async with RemotingClient() as client:
                reply = await client.invoke(
                    f"127.0.0.1:{port}", create_request(RequestCode.GET_BROKER_CLUSTER_INFO)
                )
                assert reply.code == 0
            proc.send_signal(signal.SIGTERM)
            rest = await asyncio.wait_for(proc.stderr.read(), WAIT_S)
            assert await asyncio.wait_for(proc.wait(), WAIT_S) == 0
            assert b"shutting down" in rest
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()

    run(main())
