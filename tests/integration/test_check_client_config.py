"""CHECK_CLIENT_CONFIG (46) on a real in-process broker, over a real socket."""

from __future__ import annotations

import json
from typing import Any

from test_broker_server import run, running_broker

from rocketq.config import StoreConfig
from rocketq.errors import ResponseCode
from rocketq.remoting import RequestCode, create_request
from rocketq.remoting.command import RemotingCommand


def check_request(expression: str, expression_type: str | None, group: str = "CG") -> RemotingCommand:
    sub: dict[str, Any] = {
        "topic": "CheckT",
        "subString": expression,
        "tagsSet": [],
        "codeSet": [],
        "subVersion": 1_700_000_000_000,
        "classFilterMode": False,
    }
    if expression_type is not None:
        sub["expressionType"] = expression_type
    body = {"clientId": "127.0.0.1@check-test", "group": group, "subscriptionData": sub}
    return create_request(RequestCode.CHECK_CLIENT_CONFIG, body=json.dumps(body).encode())


def check(
    store_config: StoreConfig, requests: list[RemotingCommand], **broker_kwargs: Any
) -> list[RemotingCommand]:
    async def go() -> list[RemotingCommand]:
        async with running_broker(store_config, **broker_kwargs) as (_broker, client, addr):
            return [await client.invoke(addr, r, 10.0) for r in requests]

    return run(go())


def test_valid_filters_and_tags_are_accepted(store_config: StoreConfig) -> None:
    answers = check(
        store_config,
        [
            check_request("a > 5 AND b = 'x'", "SQL92"),
            check_request("a BETWEEN 1 AND 3", "sql92"),
            check_request("TagA || TagB", "TAG"),
            check_request("*", None),
            create_request(RequestCode.CHECK_CLIENT_CONFIG, body=b'{"clientId":"c","group":"CG"}'),
        ],
    )
    assert [(a.code, a.remark) for a in answers] == [(ResponseCode.SUCCESS, None)] * 5


def test_bad_sql_answers_parse_failed_naming_the_problem(store_config: StoreConfig) -> None:
    [answer] = check(store_config, [check_request("a > AND b = 1", "SQL92", group="BadGroup")])
    assert answer.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    assert answer.remark is not None
    assert "BadGroup" in answer.remark and "CheckT" in answer.remark
    assert "column" in answer.remark


def test_unknown_expression_type_is_named(store_config: StoreConfig) -> None:
    [answer] = check(store_config, [check_request("a > 1", "XPATH")])
    assert answer.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    assert answer.remark is not None and "XPATH" in answer.remark and "SQL92" in answer.remark


def test_property_filter_disabled_refuses_sql92_but_not_tags(store_config: StoreConfig) -> None:
    answers = check(
        store_config,
        [check_request("a > 1", "SQL92"), check_request("TagA", "TAG")],
        enable_property_filter=False,
    )
    assert answers[0].code == ResponseCode.SYSTEM_ERROR
    assert answers[0].remark == "The broker does not support consumer to filter message by SQL92"
    assert answers[1].code == ResponseCode.SUCCESS


def test_body_that_is_not_json_gets_a_clear_error_and_the_broker_keeps_serving(
    store_config: StoreConfig,
) -> None:
    answers = check(
        store_config,
        [
            create_request(RequestCode.CHECK_CLIENT_CONFIG, body=b"\x00not json"),
            create_request(RequestCode.CHECK_CLIENT_CONFIG, body=b"[1, 2]"),
            check_request("a = 1", "SQL92"),
        ],
    )
    assert answers[0].code == ResponseCode.SYSTEM_ERROR
    assert answers[0].remark is not None and "not JSON" in answers[0].remark
    assert answers[1].code == ResponseCode.SYSTEM_ERROR
    assert answers[1].remark is not None and "not an object" in answers[1].remark
    assert answers[2].code == ResponseCode.SUCCESS
