"""Requests a broker sends to a consumer, answered by the consumer core over a real connection:
codes the core does not handle are REQUEST_CODE_NOT_SUPPORTED unless a handler was registered."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest
from test_client_producer import Cluster

from rocketq.client import LitePullConsumer, PushConsumer
from rocketq.errors import ResponseCode
from rocketq.remoting import Connection, RemotingCommand, RequestCode, create_request, create_response

TOPIC = "CoreT"


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, ("broker-a",))
    c.start()
    c.create_topic(TOPIC, 2)
    try:
        yield c
    finally:
        c.close()


def ask_member(cluster: Cluster, group: str, client_id: str, request: RemotingCommand) -> RemotingCommand:
    """Send ``request`` from the broker on the channel of ``client_id`` and return the answer."""
    broker = cluster.brokers["broker-a"]

    async def ask() -> RemotingCommand:
        assert broker.ctx is not None
        info = broker.ctx.consumers.get(group)
        assert info is not None
        member = info.find_channel(client_id)
        assert member is not None
        conn = member.channel
        assert isinstance(conn, Connection)
        return await conn.invoke(request, 5.0)

    return cluster.call(ask())


def test_unhandled_codes_are_not_supported_and_registered_handlers_answer(cluster: Cluster) -> None:
    calls: list[int] = []

    async def running_info(request: RemotingCommand) -> RemotingCommand:
        calls.append(request.code)
        return create_response(request, ResponseCode.SUCCESS, body=b'{"properties":{}}')

    plain = LitePullConsumer("CoreLite", namesrv_addr=cluster.namesrv_addr, instance_name="lite1")
    plain.subscribe(TOPIC, "*")
    push = PushConsumer("CorePush", namesrv_addr=cluster.namesrv_addr, instance_name="push1")
    push.subscribe(TOPIC, "*")
    push.register_listener(lambda msgs: None)
    push.core.core.register_request_handler(RequestCode.GET_CONSUMER_RUNNING_INFO, running_info)
    with plain, push:
        direct = create_request(RequestCode.CONSUME_MESSAGE_DIRECTLY, {"consumerGroup": "CoreLite"})
        answer = ask_member(cluster, "CoreLite", plain.client_id, direct)
        assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert plain.client_id.endswith("@lite1")

        info = create_request(RequestCode.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "CorePush"})
        answer = ask_member(cluster, "CorePush", push.client_id, info)
        assert (answer.code, answer.body) == (ResponseCode.SUCCESS, b'{"properties":{}}')
        assert calls == [RequestCode.GET_CONSUMER_RUNNING_INFO]

        # the push consumer still refuses what it has no handler for
        direct = create_request(RequestCode.CONSUME_MESSAGE_DIRECTLY, {"consumerGroup": "CorePush"})
        assert (
            ask_member(cluster, "CorePush", push.client_id, direct).code
            == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        )
