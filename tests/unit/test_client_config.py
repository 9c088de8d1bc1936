"""ClientConfig, the client id, and the consumer enums, without a broker (constructors do no I/O)."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib

import pytest

from rocketq.client import (
    Admin,
    AsyncLitePullConsumer,
    AsyncProducer,
    AsyncPushConsumer,
    AsyncTransactionProducer,
    ClientConfig,
    ConsumeFromWhere,
    LitePullConsumer,
    LocalTransactionState,
    MessageModel,
    Producer,
    PushConsumer,
)
from rocketq.client.config import local_ip
from rocketq.errors import ConfigError

NS = "127.0.0.1:9876"


def test_defaults_are_rocketmqs() -> None:
    cfg = ClientConfig(namesrv_addr=NS)
    assert (cfg.instance_name, cfg.client_ip) == ("DEFAULT", None)
    assert cfg.request_timeout_ms == 3_000
    assert cfg.heartbeat_interval_ms == 30_000
    assert cfg.poll_name_server_interval_ms == 30_000
    assert cfg.persist_consumer_offset_interval_ms == 5_000
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.instance_name = "x"  # type: ignore[misc]


def test_name_servers_in_every_spelling() -> None:
    assert ClientConfig(namesrv_addr="a:1;b:2").namesrv_addrs() == ["a:1", "b:2"]
    listed = ClientConfig(namesrv_addr=["a:1", "b:2"])  # type: ignore[arg-type]
    assert listed.namesrv_addr == ("a:1", "b:2") and listed.namesrv_addrs() == ["a:1", "b:2"]
    with pytest.raises(ConfigError, match="namesrv_addr is empty"):
        ClientConfig().namesrv_addrs()
    with pytest.raises(ConfigError, match="namesrv_addr is empty"):
        PushConsumer("G")
    with pytest.raises(ConfigError, match="not host:port"):
        Producer("G", config=ClientConfig(namesrv_addr="nohost"))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("request_timeout_ms", 0),
        ("heartbeat_interval_ms", -1),
        ("poll_name_server_interval_ms", 1.5),
        ("persist_consumer_offset_interval_ms", True),
        ("instance_name", ""),
        ("instance_name", "a@b"),
        ("client_ip", ""),
    ],
)
def test_bad_fields_are_config_errors(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=field):
        ClientConfig(namesrv_addr=NS, **{field: value})  # type: ignore[arg-type]


def test_client_id_is_ip_at_instance_name() -> None:
    cfg = ClientConfig(namesrv_addr=NS, client_ip="10.1.2.3", instance_name="billing")
    assert PushConsumer("G", config=cfg).client_id == "10.1.2.3@billing"
    assert LitePullConsumer("G", config=cfg).client_id == "10.1.2.3@billing"
    tx = AsyncTransactionProducer("G", config=cfg, check_listener=lambda m: LocalTransactionState.UNKNOW)
    assert tx.client_id == "10.1.2.3@billing"
    # keywords override the config
    assert PushConsumer("G", config=cfg, instance_name="shop").client_id == "10.1.2.3@shop"


def test_default_instance_name_becomes_pid_and_a_count() -> None:
    a = AsyncPushConsumer("G", namesrv_addr=NS, client_ip="10.1.2.3")
    b = AsyncLitePullConsumer("G", namesrv_addr=NS, client_ip="10.1.2.3")
    prefix = f"10.1.2.3@{os.getpid()}#"
    assert a.client_id.startswith(prefix) and b.client_id.startswith(prefix)
    assert a.client_id != b.client_id
    assert AsyncPushConsumer("G", namesrv_addr=NS).client_id.startswith(f"{local_ip()}@{os.getpid()}#")


def test_broadcasting_keeps_default_and_offsets_go_under_the_client_id(tmp_path: pathlib.Path) -> None:
    c = AsyncPushConsumer(
        "BG",
        namesrv_addr=NS,
        client_ip="10.1.2.3",
        message_model="BROADCASTING",
        offset_store_dir=str(tmp_path),
    )
    assert c.client_id == "10.1.2.3@DEFAULT"
    assert c.core.offset_store is not None
    assert c.core.offset_store.path == str(tmp_path / "10.1.2.3@DEFAULT" / "BG" / "offsets.json")
    named = AsyncPushConsumer(
        "BG",
        namesrv_addr=NS,
        client_ip="10.1.2.3",
        instance_name="node7",
        message_model=MessageModel.BROADCASTING,
        offset_store_dir=str(tmp_path),
    )
    assert named.core.offset_store is not None
    assert named.core.offset_store.path == str(tmp_path / "10.1.2.3@node7" / "BG" / "offsets.json")


def test_keywords_override_config_fields() -> None:
    cfg = ClientConfig(namesrv_addr=NS, heartbeat_interval_ms=10_000, persist_consumer_offset_interval_ms=700)
    c = AsyncPushConsumer("G", config=cfg, heartbeat_interval_ms=2_000, request_timeout_ms=900)
    assert c.core.heartbeat_interval_ms == 2_000
    assert c.core.request_timeout_ms == 900
    assert c.core.auto_commit_interval_ms == 700
    assert c.config.namesrv_addr == NS
    lite = AsyncLitePullConsumer("G", config=cfg, namesrv_addr="10.0.0.9:9876", auto_commit_interval_ms=300)
    assert lite.core.namesrv_addrs == ["10.0.0.9:9876"]
    assert lite.core.auto_commit_interval_ms == 300
    assert cfg.heartbeat_interval_ms == 10_000  # the caller's config is not changed
    p = AsyncProducer("P", config=ClientConfig(namesrv_addr=NS, poll_name_server_interval_ms=1_000))
    assert p.route_refresh_interval_ms == 1_000
    assert AsyncProducer("P", namesrv_addr=NS).route_refresh_interval_ms == 30_000


def test_admin_timeout_from_keyword_config_or_default() -> None:
    assert Admin(NS).core.timeout_s == 5.0
    assert Admin(config=ClientConfig(namesrv_addr=NS, request_timeout_ms=1_500)).core.timeout_s == 1.5
    assert Admin(NS, config=ClientConfig(request_timeout_ms=1_500), timeout_ms=700).core.timeout_s == 0.7
    with pytest.raises(ConfigError, match="timeout_ms=0"):
        Admin(NS, timeout_ms=0)


def test_config_must_be_a_client_config() -> None:
    with pytest.raises(TypeError, match="ClientConfig"):
        PushConsumer("G", config={"namesrv_addr": NS})  # type: ignore[arg-type]


def test_enums_are_rocketmqs_strings() -> None:
    assert MessageModel("BROADCASTING") is MessageModel.BROADCASTING
    assert ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET == "CONSUME_FROM_FIRST_OFFSET"
    c = AsyncPushConsumer("G", namesrv_addr=NS, consume_from_where="CONSUME_FROM_TIMESTAMP")
    assert c.consume_from_where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP
    assert c.message_model is MessageModel.CLUSTERING
    first = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    lite = LitePullConsumer("G", namesrv_addr=NS, consume_from_where=first)
    assert lite.consume_from_where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    assert json.dumps({"m": MessageModel.CLUSTERING}) == '{"m": "CLUSTERING"}'


def test_unknown_enum_strings_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="message_model='PUBSUB' must be one of CLUSTERING, BROADCASTING"):
        PushConsumer("G", namesrv_addr=NS, message_model="PUBSUB")
    with pytest.raises(ConfigError, match="consume_from_where='NOWHERE'"):
        LitePullConsumer("G", namesrv_addr=NS, consume_from_where="NOWHERE")
