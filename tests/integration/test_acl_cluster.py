"""Plain ACL end to end: a name server and a broker with ``aclEnable=true`` in their own
processes, sharing one ``plain_acl.yml``; the broker signs its registrations with an admin
account. Our client and ``rocketq admin`` succeed with the right keys and are refused with wrong
or missing ones, per permission; forged registrations change no route and do not disconnect the
real broker (with ACL on, and with ACL off for a displacement). Every wait is a bounded poll.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import time
from collections.abc import Iterator

import pytest
from procs import HOST, wait_until
from test_namesrv_server import java_register_body, java_topic, namesrv, register_request, run

from _support import acl
from _support.acl import ADMIN, PUB_ONLY, SUB_ONLY, signed_config, write_acl_file
from _support.broker_pair import BrokerPair, push_consume_until
from rocketq.acl.signature import AclClientRpcHook, sign_request
from rocketq.cli import main
from rocketq.client import Admin, Message, Producer
from rocketq.client.config import ClientConfig
from rocketq.errors import NoPermission, ResponseCode, RocketqError
from rocketq.protocol import fastjson
from rocketq.remoting import RemotingClient, RequestCode, create_request

CLUSTER = "AclCluster"
TOPIC = "AclTopic"
ACL_FILE = "# rules of the ACL tests\nglobalWhiteRemoteAddresses:\n" + acl.ACL_FILE


class AclCluster(BrokerPair):
    def __init__(self, root: pathlib.Path) -> None:
        super().__init__(root)
        self.acl_file = write_acl_file(root, ACL_FILE)

    def start(self) -> None:
        acl_keys = {"aclEnable": "true", "aclFile": str(self.acl_file)}
        broker = {"brokerId": "0", **acl_keys, "accessKey": ADMIN[0], "secretKey": ADMIN[1]}
        self.start_pair(CLUSTER, TOPIC, acl_keys, broker)

    def probe_config(self) -> ClientConfig:
        return self.config(None)

    def admin_config(self) -> ClientConfig:
        return self.config(ADMIN)

    def config(self, keys: tuple[str, str] | None) -> ClientConfig:
        return signed_config(self.namesrv_addr, keys)

    def admin(self, keys: tuple[str, str] | None) -> Admin:
        return Admin(config=self.config(keys), timeout_ms=3000)

    def log_text(self) -> str:
        return "".join(p.log_text(None) for p in self.processes)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclCluster]:
    c = AclCluster(tmp_path_factory.mktemp("acl"))
    try:
        c.start()
        yield c
    finally:
        c.close()


def send(cluster: AclCluster, keys: tuple[str, str] | None, body: bytes) -> None:
    producer = Producer("AclProducer", config=cluster.config(keys), retry_times_when_send_failed=0)
    with producer:
        producer.send(Message(TOPIC, body))


def refusal(exc: pytest.ExceptionInfo[BaseException]) -> str:
    text = str(exc.value)
    cause = exc.value.__cause__
    return text + (" | " + str(cause) if cause is not None else "")


def test_send_needs_pub_and_a_valid_signature(cluster: AclCluster) -> None:
    send(cluster, PUB_ONLY, b"from-pub")
    send(cluster, ADMIN, b"from-admin")
    with pytest.raises(RocketqError) as sub_only:
        send(cluster, SUB_ONLY, b"x")
    assert "No permission to PUB topic AclTopic for accessKey subonly1" in refusal(sub_only)
    with pytest.raises(RocketqError) as no_keys:
        send(cluster, None, b"x")
    assert "No accessKey in request code 310 (SEND_MESSAGE_V2)" in refusal(no_keys)
    with pytest.raises(RocketqError) as wrong:
        send(cluster, (PUB_ONLY[0], "not-the-secret"), b"x")
    assert "signature mismatch for accessKey pubonly1" in refusal(wrong)
    wait_until(lambda: "ACL refused a request from" in cluster.log_text(), "the refusal logged", 10.0)


def test_consume_needs_sub_on_topic_and_group(cluster: AclCluster) -> None:
    send(cluster, PUB_ONLY, b"for-the-consumer")
    with (
        cluster.admin(PUB_ONLY) as admin,
        pytest.raises(NoPermission, match="No permission to SUB topic AclTopic"),
    ):
        for queue in range(2):
            admin.consume_message(TOPIC, queue, 0, 8, broker_name="broker-a")

    push_consume_until(
        cluster.config(SUB_ONLY), "AclGroup", TOPIC, b"for-the-consumer", "the SUB account consumed"
    )
    with cluster.admin(ADMIN) as admin:
        offsets = admin.consumer_progress("AclGroup", TOPIC)  # offsets were committed (SUB on the group)
        assert offsets.total_consumer_offset > 0


def test_admin_codes_need_an_admin_account(cluster: AclCluster, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["admin", "deleteTopic", "-n", cluster.namesrv_addr, "-t", TOPIC, "-c", CLUSTER]
    assert main([*base, "--access-key", SUB_ONLY[0], "--secret-key", SUB_ONLY[1]]) == 1
    err = capsys.readouterr().err
    assert "request code 215 (DELETE_TOPIC_IN_BROKER): accessKey subonly1 is not admin" in err
    reset = [
        "admin",
        "resetOffsetByTime",
        "-n",
        cluster.namesrv_addr,
        "-g",
        "AclGroup",
        "-t",
        TOPIC,
        "-s",
        "0",
    ]
    assert main([*reset, "--access-key", PUB_ONLY[0], "--secret-key", PUB_ONLY[1]]) == 1
    assert "INVOKE_BROKER_TO_RESET_OFFSET" in capsys.readouterr().err
    with cluster.admin(ADMIN) as admin:
        assert cluster.routed(admin, TOPIC)  # still there

    env_keys = {"ROCKETQ_ACCESS_KEY": ADMIN[0], "ROCKETQ_SECRET_KEY": ADMIN[1]}
    old = {k: os.environ.get(k) for k in env_keys}
    os.environ.update(env_keys)
    try:
        assert (
            main(["admin", "updateTopic", "-n", cluster.namesrv_addr, "-t", "AclScratch", "-c", CLUSTER]) == 0
        )
        assert (
            main(["admin", "deleteTopic", "-n", cluster.namesrv_addr, "-t", "AclScratch", "-c", CLUSTER]) == 0
        )
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    capsys.readouterr()


def test_forged_registration_changes_no_route_and_keeps_the_broker(cluster: AclCluster) -> None:
    fake = "127.0.0.1:1"
    body = java_register_body([java_topic(TOPIC, 1, 1, perm=0)], counter=999)

    async def forge() -> list[tuple[int, str | None]]:
        answers = []
        async with RemotingClient() as attacker:
            unsigned = register_request("broker-a", fake, body, cluster=CLUSTER)
            answers.append(await attacker.invoke(cluster.namesrv_addr, unsigned))
            same_addr = register_request("broker-a", cluster.broker_addr, body, cluster=CLUSTER)
            answers.append(await attacker.invoke(cluster.namesrv_addr, same_addr))
            non_admin = register_request("broker-a", fake, body, cluster=CLUSTER)
            sign_request(non_admin, *SUB_ONLY)
            answers.append(await attacker.invoke(cluster.namesrv_addr, non_admin))
            header = {
                "brokerAddr": cluster.broker_addr,
                "brokerId": 0,
                "brokerName": "broker-a",
                "clusterName": CLUSTER,
            }
            answers.append(
                await attacker.invoke(
                    cluster.namesrv_addr, create_request(RequestCode.UNREGISTER_BROKER, header)
                )
            )
            kv = {"namespace": "ORDER_TOPIC_CONFIG", "key": TOPIC, "value": "broker-x:1"}
            answers.append(
                await attacker.invoke(cluster.namesrv_addr, create_request(RequestCode.PUT_KV_CONFIG, kv))
            )
        return [(a.code, a.remark) for a in answers]

    answers = run(forge())
    assert [code for code, _ in answers] == [ResponseCode.NO_PERMISSION] * 5
    assert "No accessKey in request code 103 (REGISTER_BROKER)" in str(answers[0][1])
    assert "accessKey subonly1 is not admin" in str(answers[2][1])

    # the attacker's connection is closed by now: the real broker must still be registered, with
    # its own address and its own queue data (the forged body had perm 0 and one queue)
    deadline = time.monotonic() + 3.0  # two registration periods of the real broker
    while time.monotonic() < deadline:
        assert cluster.broker_addr in cluster.cluster_addrs()
        with cluster.admin(None) as admin:
            route = admin.topic_route(TOPIC)
        assert [(q.perm, q.write_queue_nums) for q in route.queue_datas] == [(6, 2)]
        assert [b.broker_addrs for b in route.broker_datas] == [{0: cluster.broker_addr}]
        time.sleep(0.5)
    send(cluster, PUB_ONLY, b"still-served")


def test_acl_file_is_reloaded_when_it_changes(cluster: AclCluster) -> None:
    with pytest.raises(RocketqError):
        send(cluster, SUB_ONLY, b"x")
    cluster.acl_file.write_text(
        ACL_FILE.replace("    defaultTopicPerm: SUB\n", "    defaultTopicPerm: PUB|SUB\n"), encoding="utf-8"
    )
    try:

        def sends() -> bool:
            try:
                send(cluster, SUB_ONLY, b"after-reload")
            except RocketqError:
                return False
            return True

        wait_until(sends, "the broker took the new rules", 15.0)
    finally:
        cluster.acl_file.write_text(ACL_FILE, encoding="utf-8")


# -- the name server without ACL: no displacement of a live broker -----------------------------


def test_without_acl_a_live_broker_cannot_be_displaced_but_fails_over_when_gone() -> None:
    async def main() -> None:
        async with namesrv() as (server, ns):
            real, attacker, successor = RemotingClient(), RemotingClient(), RemotingClient()
            try:
                body = java_register_body([java_topic("T", 4, 4)])
                assert (
                    await real.invoke(ns, register_request("broker-a", "127.0.0.1:10911", body))
                ).code == 0
                forged = await attacker.invoke(ns, register_request("broker-a", "10.6.6.6:10911", body))
                assert forged.code == ResponseCode.NO_PERMISSION
                assert "broker broker-a/0 is live at 127.0.0.1:10911" in str(forged.remark)
                info = fastjson.loads(
                    (
                        await attacker.invoke(ns, create_request(RequestCode.GET_BROKER_CLUSTER_INFO))
                    ).body.decode()
                )
                assert info["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {"0": "127.0.0.1:10911"}

                await real.close()  # the real broker goes away: its connection closes

                async def replaced() -> bool:
                    reply = await successor.invoke(ns, register_request("broker-a", "127.0.0.2:10911", body))
                    return reply.code == 0

                deadline = asyncio.get_running_loop().time() + 10
                while not await replaced():
                    assert asyncio.get_running_loop().time() < deadline, "successor never accepted"
                    await asyncio.sleep(0.02)
                assert server.routes.cluster_info().broker_addr_table["broker-a"].broker_addrs == {
                    0: "127.0.0.2:10911"
                }
            finally:
                for client in (real, attacker, successor):
                    await client.close()

    run(main())


def test_unknown_account_and_signature_remarks_reach_a_raw_client(cluster: AclCluster) -> None:
    async def call() -> list[str | None]:
        async with RemotingClient() as client:
            pull = {
                "consumerGroup": "G",
                "topic": TOPIC,
                "queueId": 0,
                "queueOffset": 0,
                "maxMsgNums": 1,
                "sysFlag": 0,
                "commitOffset": 0,
                "suspendTimeoutMillis": 0,
                "subscription": "*",
                "subVersion": 0,
            }
            unknown = create_request(RequestCode.PULL_MESSAGE, pull)
            sign_request(unknown, "nosuchkey", "whatever1")
            tampered = create_request(RequestCode.PULL_MESSAGE, pull)
            sign_request(tampered, *SUB_ONLY)
            tampered.ext_fields["queueId"] = "1"
            out = []
            for req in (unknown, tampered):
                reply = await client.invoke(cluster.broker_addr, req)
                assert reply.code == ResponseCode.NO_PERMISSION
                out.append(reply.remark)
            return out

    assert run(call()) == [
        "No acl config for accessKey nosuchkey",
        "signature mismatch for accessKey subonly1",
    ]


# -- in process: start checks and the broker's own signature ------------------------------------


def test_a_broker_with_acl_on_and_no_rules_file_does_not_start(tmp_path: pathlib.Path) -> None:
    from rocketq.broker.config import BrokerConfig  # noqa: PLC0415 - server side, this test only
    from rocketq.broker.server import Broker  # noqa: PLC0415
    from rocketq.config import StoreConfig  # noqa: PLC0415
    from rocketq.errors import ConfigError  # noqa: PLC0415

    cfg = BrokerConfig(
        broker_name="broker-a",
        broker_ip1=HOST,
        bind_address=HOST,
        listen_port=0,
        namesrv_addr=None,
        acl_enable=True,
        acl_file=str(tmp_path / "missing.yml"),
    )
    broker = Broker(cfg, StoreConfig(store_path_root_dir=str(tmp_path / "store")))
    with pytest.raises(ConfigError, match=r"cannot read ACL file .*missing\.yml"):
        run(broker.start())
    assert not broker.ready


def test_an_acl_name_server_takes_only_admin_signed_registrations(tmp_path: pathlib.Path) -> None:
    acl_file = write_acl_file(tmp_path, ACL_FILE)
    body = java_register_body([java_topic("T", 4, 4)])

    async def main() -> list[int]:
        codes = []
        async with namesrv(acl_enable=True, acl_file=str(acl_file)) as (server, ns):
            for keys in (None, SUB_ONLY, ADMIN):
                hook = None if keys is None else AclClientRpcHook(*keys)
                async with RemotingClient(rpc_hook=hook) as client:
                    reply = await client.invoke(ns, register_request("broker-a", "127.0.0.1:10911", body))
                    codes.append(reply.code)
                    registered = "broker-a" in server.routes.cluster_info().broker_addr_table
                    assert registered == (keys == ADMIN)
        return codes

    assert run(main()) == [ResponseCode.NO_PERMISSION, ResponseCode.NO_PERMISSION, ResponseCode.SUCCESS]
