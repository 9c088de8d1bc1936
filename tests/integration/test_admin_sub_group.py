"""Subscription groups through the admin API (``create_subscription_group``,
``delete_subscription_group``) and ``rocketq admin updateSubGroup`` / ``deleteSubGroup``, against
a real broker: what the broker then holds, in memory and in ``subscriptionGroup.json``."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
from procs import ServeProcess
from test_admin import run_admin
from test_client_producer import HOST, Cluster

from rocketq.client.admin import Admin
from rocketq.errors import ConfigError, InvalidParameter


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, ("broker-a",))
    c.start()
    try:
        yield c
    finally:
        c.close()


def _file_groups(cluster: Cluster) -> dict[str, Any]:
    store = cluster.brokers["broker-a"].store
    assert store is not None
    text = (pathlib.Path(store.config_dir) / "subscriptionGroup.json").read_text(encoding="utf-8")
    table: dict[str, Any] = json.loads(text)["subscriptionGroupTable"]
    return table


def test_create_update_and_delete_a_group(cluster: Cluster) -> None:
    broker = cluster.brokers["broker-a"]
    addr = f"{HOST}:{broker.port}"
    assert broker.ctx is not None
    groups = broker.ctx.groups
    with Admin(cluster.namesrv_addr) as admin:
        assert "FifoG" not in admin.subscription_groups(addr)
        assert admin.create_subscription_group("FifoG", consume_message_orderly=True, retry_max_times=3) == [
            addr
        ]
        seen = admin.subscription_groups(addr)["FifoG"]
        assert seen["consumeMessageOrderly"] is True and seen["retryMaxTimes"] == 3
        assert seen["consumeEnable"] is True and seen["consumeBroadcastEnable"] is False
        config = groups.get("FifoG")
        assert config is not None and config.consume_message_orderly and config.retry_max_times == 3
        on_disk = _file_groups(cluster)["FifoG"]  # persisted before the answer
        assert on_disk["consumeMessageOrderly"] is True and on_disk["retryMaxTimes"] == 3

        # an update replaces the settings (mqadmin's semantics: what is left out takes its default)
        admin.create_subscription_group("FifoG", broker_addr=addr, consume_enable=False, retry_queue_nums=2)
        config = groups.get("FifoG")
        assert config is not None
        assert (config.consume_enable, config.consume_message_orderly, config.retry_queue_nums) == (
            False,
            False,
            2,
        )

        # the group's committed offsets stay unless clean_offset is asked for
        broker.ctx.offsets.commit_offset("127.0.0.1", "FifoG", "SomeTopic", 0, 42)
        assert admin.delete_subscription_group("FifoG", cluster=admin.cluster_list()[0].cluster) == [addr]
        assert "FifoG" not in admin.subscription_groups(addr) and groups.get("FifoG") is None
        assert "FifoG" not in _file_groups(cluster)
        assert broker.ctx.offsets.query_offset("FifoG", "SomeTopic", 0) == 42
        admin.create_subscription_group("FifoG")
        admin.delete_subscription_group("FifoG", clean_offset=True)
        assert broker.ctx.offsets.topics_of_group("FifoG") == set()
        # deleting a group that does not exist is no error (as RocketMQ)
        admin.delete_subscription_group("NeverCreated", broker_addr=addr)

        with pytest.raises(InvalidParameter, match="characters"):
            admin.create_subscription_group("bad group!", broker_addr=addr)
        with pytest.raises(ConfigError, match="cluster 'nope' is unknown"):
            admin.create_subscription_group("G", cluster="nope")
        with pytest.raises(ConfigError, match="not both"):
            admin.delete_subscription_group("G", cluster="c", broker_addr=addr)


# -- CLI ---------------------------------------------------------------------------------------
@pytest.fixture
def served(tmp_path: pathlib.Path) -> Iterator[ServeProcess]:
    server = ServeProcess(tmp_path / "serve")
    try:
        server.start()
        yield server
    finally:
        server.stop()


def test_cli_update_and_delete_sub_group(served: ServeProcess) -> None:
    namesrv = served.namesrv_addr
    r = run_admin(namesrv, "updateSubGroup", "-g", "CliFifoG", "-o", "true", "-r", "5")
    assert r.returncode == 0, r.stderr
    with Admin(namesrv) as admin:
        addr = admin.cluster_list()[0].addr
        assert f"create subscription group to {addr} success." in r.stdout
        seen = admin.subscription_groups(addr)["CliFifoG"]
        assert seen["consumeMessageOrderly"] is True and seen["retryMaxTimes"] == 5
        assert seen["consumeFromMinEnable"] is False  # mqadmin's updateSubGroup default

        r = run_admin(namesrv, "updateSubGroup", "-b", addr, "-g", "CliFifoG", "-s", "FALSE", "--json")
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert doc["brokers"] == [addr] and doc["consumeEnable"] is False
        assert doc["consumeMessageOrderly"] is False
        assert admin.subscription_groups(addr)["CliFifoG"]["consumeEnable"] is False

        r = run_admin(namesrv, "deleteSubGroup", "-g", "CliFifoG", "-r", "true")
        assert r.returncode == 0, r.stderr
        assert f"delete subscription group CliFifoG from {addr} success." in r.stdout
        assert "CliFifoG" not in admin.subscription_groups(addr)

    r = run_admin(namesrv, "updateSubGroup", "-g", "G", "-o", "yes")
    assert r.returncode == 2 and "'yes' is not true or false" in r.stderr
    r = run_admin(namesrv, "updateSubGroup", "-g", "bad group!")
    assert r.returncode == 1 and "characters" in r.stderr
