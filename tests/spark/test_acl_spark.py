"""The data source and the sink against a broker with ``aclEnable=true``: the options
``accessKey``/``secretKey`` sign every request (admin calls, pulls, transactional sends and their
END_TRANSACTION); without them, or with a wrong secret, the job fails naming the refusal."""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

import pytest

from _support.acl import ADMIN, SUB_ONLY, acl_broker_conf, signed_config
from _support.broker_pair import topic_routed
from _support.wait import wait_until
from rocketq.client import Admin
from rocketq.errors import ConfigError
from rocketq.spark.options import parse_read_options

TOPIC = "SparkAcl"


def test_keys_options_parse_and_stay_out_of_repr() -> None:
    opts = parse_read_options(
        {"nameServer": "127.0.0.1:9876", "topic": "T", "accessKey": "ak123456", "secretKey": "sk123456"},
        streaming=False,
    )
    assert opts.keys == ("ak123456", "sk123456")
    assert "sk123456" not in repr(opts)
    with pytest.raises(ConfigError, match="accessKey and secretKey must be given together"):
        parse_read_options({"nameServer": "127.0.0.1:9876", "topic": "T", "accessKey": "ak"}, streaming=False)


def test_read_and_write_sign_with_the_keys(
    spark: Any, serve_process: Callable[..., Any], tmp_path: pathlib.Path
) -> None:
    server = serve_process(acl_broker_conf(tmp_path))
    with Admin(config=signed_config(server.namesrv), timeout_ms=10_000) as admin:
        admin.create_topic(TOPIC, read_queue_nums=2, write_queue_nums=2)
        wait_until(lambda: topic_routed(admin, TOPIC), f"route of {TOPIC}", 30.0)

    def write(keys: tuple[str, str]) -> None:
        df = spark.createDataFrame([(f"row-{i}",) for i in range(20)], "text STRING").selectExpr(
            "CAST(text AS BINARY) AS body"
        )
        (
            df.write.format("rocketq")
            .option("nameServer", server.namesrv)
            .option("topic", TOPIC)
            .option("accessKey", keys[0])
            .option("secretKey", keys[1])
            .mode("append")
            .save()
        )

    def read(keys: tuple[str, str] | None) -> list[bytes]:
        r = spark.read.format("rocketq").option("nameServer", server.namesrv).option("topic", TOPIC)
        if keys is not None:
            r = r.option("accessKey", keys[0]).option("secretKey", keys[1])
        return sorted(bytes(row.body) for row in r.load().collect())

    write(ADMIN)
    expected = sorted(f"row-{i}".encode() for i in range(20))
    wait_until(lambda: read(SUB_ONLY) == expected, "the signed read sees the signed write", 30.0)
    with pytest.raises(Exception, match="No accessKey in request code"):
        read(None)
    with pytest.raises(Exception, match="signature mismatch for accessKey subonly1"):
        read((SUB_ONLY[0], "wrong-secret"))
    with pytest.raises(Exception, match="No permission to PUB topic SparkAcl for accessKey subonly1"):
        write(SUB_ONLY)
