"""``rocketq proxy`` (cluster mode) as its own process in front of ``rocketq serve`` (remoting only):
our stubs send through the proxy, the messages are read back through the remoting side."""

from __future__ import annotations

import asyncio
import json
import pathlib
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from procs import RocketqProcess, ServeProcess

from _support.wait import wait_until, wait_until_async
from rocketq.client._routes import RouteCache
from rocketq.client.admin import Admin
from rocketq.errors import ResponseCode
from rocketq.protocol.heartbeat import encode_producer_heartbeat as heartbeat_body
from rocketq.proxy.cluster_checks import OrphanChecks, check_command
from rocketq.proxy.telemetry import SessionRegistry
from rocketq.proxy.v2 import definition_pb2 as pb
from rocketq.proxy.v2 import service_pb2 as spb
from rocketq.proxy.v2 import service_pb2_grpc
from rocketq.remoting import Connection, RemotingClient, RequestCode, create_request

pytestmark = pytest.mark.slow  # rocketq serve and rocketq proxy processes

TIMEOUT_S = 10.0
START_TIMEOUT_S = 30.0
META = (("x-mq-client-id", "cluster-test@1"),)
#: ``rocketq serve`` and the ``rocketq proxy`` in front of it
Servers = tuple[ServeProcess, RocketqProcess]


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[Servers]:
    yield from _cluster(tmp_path, {})


@pytest.fixture
def checking_cluster(tmp_path: pathlib.Path) -> Iterator[Servers]:
    """A broker that checks halves older than 1 s every second."""
    yield from _cluster(tmp_path, {"transactionCheckInterval": "1000", "transactionTimeOut": "1000"})


def _cluster(tmp_path: pathlib.Path, broker_conf: dict[str, str]) -> Iterator[Servers]:
    """``rocketq serve`` (remoting only) with three typed topics, and ``rocketq proxy`` in front."""
    serve = ServeProcess(tmp_path, broker_conf=broker_conf)
    proxy: RocketqProcess | None = None
    try:
        serve.start(START_TIMEOUT_S)
        with Admin(serve.namesrv_addr, timeout_ms=10_000) as admin:
            broker = serve.broker_addr
            admin.create_topic("CNormal", 4, 4, 6, broker_addr=broker, attributes="+message.type=NORMAL")
            admin.create_topic("CFifo", 4, 4, 6, broker_addr=broker, attributes="+message.type=FIFO")
            admin.create_topic("CTx", 2, 2, 6, broker_addr=broker, attributes="+message.type=TRANSACTION")

            def routed() -> bool:  # the broker registers new topics with the name server
                try:
                    admin.topic_route("CTx")
                except Exception:
                    return False
                return True

            wait_until(routed, "the route of CTx", START_TIMEOUT_S, 0.1)
        proxy = RocketqProcess(
            "proxy", ["proxy", "--namesrv", serve.namesrv_addr, "--grpc-port", "0"], tmp_path / "logs"
        )
        proxy.wait_banner({"gRPC (v5)"}, START_TIMEOUT_S)
        yield serve, proxy
    finally:
        if proxy is not None:
            proxy.stop()
        serve.stop()


def msg(topic: str, body: bytes, msg_id: str, **sp: Any) -> pb.Message:
    return pb.Message(
        topic=pb.Resource(name=topic),
        body=body,
        system_properties=pb.SystemProperties(message_id=msg_id, **sp),
    )


def test_proxy_routes_and_sends_through_the_remoting_cluster(
    cluster: Servers,
) -> None:
    serve, proxy = cluster
    proxy_addr = proxy.endpoints["gRPC (v5)"]
    host, port = proxy_addr.rsplit(":", 1)

    async def run() -> dict[str, Any]:
        async with grpc.aio.insecure_channel(proxy_addr) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)

            async def send(m: pb.Message) -> Any:
                return await stub.SendMessage(
                    spb.SendMessageRequest(messages=[m]), timeout=TIMEOUT_S, metadata=META
                )

            out: dict[str, Any] = {}
            out["route"] = await stub.QueryRoute(
                spb.QueryRouteRequest(topic=pb.Resource(name="CFifo")), timeout=TIMEOUT_S, metadata=META
            )
            out["no_route"] = await stub.QueryRoute(
                spb.QueryRouteRequest(topic=pb.Resource(name="Missing")), timeout=TIMEOUT_S, metadata=META
            )
            out["normal"] = await send(msg("CNormal", b"via proxy", "P-1", keys=["proxy-key-1"], tag="T"))
            out["fifo"] = [
                await send(
                    msg(
                        "CFifo",
                        f"f{i}".encode(),
                        f"F-{i}",
                        message_type=pb.FIFO,
                        message_group="grp",
                        keys=[f"fk{i}"],
                    )
                )
                for i in range(3)
            ]
            out["wrong_type"] = await send(
                msg("CNormal", b"x", "W-1", message_type=pb.FIFO, message_group="g")
            )
            out["unknown"] = await send(msg("Missing", b"x", "U-1"))
            halves = {}
            for name, resolution in (("commit", pb.COMMIT), ("rollback", pb.ROLLBACK)):
                sent = await send(
                    msg("CTx", name.encode(), f"TX-{name}", message_type=pb.TRANSACTION, keys=[f"tx-{name}"])
                )
                halves[name] = sent
                out[f"end_{name}"] = await stub.EndTransaction(
                    spb.EndTransactionRequest(
                        topic=pb.Resource(name="CTx"),
                        message_id=f"TX-{name}",
                        transaction_id=sent.entries[0].transaction_id,
                        resolution=resolution,
                        source=pb.SOURCE_CLIENT,
                    ),
                    timeout=TIMEOUT_S,
                    metadata=META,
                )
            out["halves"] = halves
            out["bad_end"] = await stub.EndTransaction(
                spb.EndTransactionRequest(
                    topic=pb.Resource(name="CTx"),
                    message_id="X",
                    transaction_id="nonsense",
                    resolution=pb.COMMIT,
                ),
                timeout=TIMEOUT_S,
            )
            out["receive"] = [
                x
                async for x in stub.ReceiveMessage(
                    spb.ReceiveMessageRequest(
                        group=pb.Resource(name="G"),
                        message_queue=pb.MessageQueue(topic=pb.Resource(name="Missing")),
                        batch_size=1,
                    ),
                    timeout=TIMEOUT_S,
                )
            ]
            return out

    out = asyncio.run(run())
    route = out["route"]
    assert route.status.code == pb.OK and len(route.message_queues) == 4
    for q in route.message_queues:
        assert list(q.accept_message_types) == [pb.FIFO]
        assert q.permission == pb.READ_WRITE and q.broker.id == 0
        addr = q.broker.endpoints.addresses[0]
        assert (addr.host, addr.port) == (host, int(port))  # clients come back to the proxy
    assert out["no_route"].status.code == pb.TOPIC_NOT_FOUND
    assert out["normal"].status.code == pb.OK and out["normal"].entries[0].message_id == "P-1"
    assert [r.status.code for r in out["fifo"]] == [pb.OK] * 3
    assert out["wrong_type"].status.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert out["unknown"].status.code == pb.TOPIC_NOT_FOUND
    for name in ("commit", "rollback"):
        assert out["halves"][name].status.code == pb.OK and out["halves"][name].entries[0].transaction_id
        assert out[f"end_{name}"].status.code == pb.OK
    assert out["bad_end"].status.code == pb.INVALID_TRANSACTION_ID
    statuses = [x.status for x in out["receive"] if x.WhichOneof("content") == "status"]
    assert [s.code for s in statuses] == [pb.TOPIC_NOT_FOUND]
    assert proxy.running and serve.running

    # read back through the remoting side: one store behind both protocols
    with Admin(serve.namesrv_addr, timeout_ms=10_000) as admin:
        found = list(admin.query_msg_by_key("CNormal", "proxy-key-1"))
        assert [(bytes(m.body), m.tags, m.uniq_key) for m in found] == [(b"via proxy", "T", "P-1")]
        wait_until(
            lambda: len(list(admin.query_msg_by_key("CTx", "tx-commit"))) == 1,
            "the committed half",
            TIMEOUT_S,
            0.1,
        )
        assert list(admin.query_msg_by_key("CTx", "tx-rollback")) == []
        fifo = [m for i in range(3) for m in admin.query_msg_by_key("CFifo", f"fk{i}")]
        assert [bytes(m.body) for m in fifo] == [b"f0", b"f1", b"f2"]
        assert len({m.queue_id for m in fifo}) == 1  # one message group, one queue
        assert all(m.properties.get("__SHARDINGKEY") == "grp" for m in fifo)


def test_proxy_receives_acks_and_changes_invisible_through_the_brokers(
    cluster: Servers,
) -> None:
    serve, proxy = cluster
    proxy_addr = proxy.endpoints["gRPC (v5)"]
    group = pb.Resource(name="CGroup")
    topic = pb.Resource(name="CNormal")
    count = 6

    async def run() -> dict[str, Any]:
        async with grpc.aio.insecure_channel(proxy_addr) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)

            async def receive(
                long_poll_s: int, invisible_s: int = 30
            ) -> tuple[list[pb.Status], list[pb.Message]]:
                statuses: list[pb.Status] = []
                messages: list[pb.Message] = []
                request = spb.ReceiveMessageRequest(
                    group=group,
                    message_queue=pb.MessageQueue(topic=topic),
                    batch_size=32,
                    invisible_duration=Duration(seconds=invisible_s),
                    long_polling_timeout=Duration(seconds=long_poll_s),
                )
                async for x in stub.ReceiveMessage(request, timeout=long_poll_s + TIMEOUT_S, metadata=META):
                    if x.WhichOneof("content") == "status":
                        statuses.append(x.status)
                    elif x.WhichOneof("content") == "message":
                        messages.append(x.message)
                return statuses, messages

            async def ack(m: pb.Message, handle: str | None = None) -> Any:
                entry = spb.AckMessageEntry(
                    message_id=m.system_properties.message_id,
                    receipt_handle=m.system_properties.receipt_handle if handle is None else handle,
                )
                return await stub.AckMessage(
                    spb.AckMessageRequest(group=group, topic=topic, entries=[entry]),
                    timeout=TIMEOUT_S,
                    metadata=META,
                )

            out: dict[str, Any] = {}
            out["assignment"] = await stub.QueryAssignment(
                spb.QueryAssignmentRequest(topic=topic, group=group), timeout=TIMEOUT_S, metadata=META
            )
            for i in range(count):
                sent = await stub.SendMessage(
                    spb.SendMessageRequest(messages=[msg("CNormal", f"r{i}".encode(), f"R-{i}")]),
                    timeout=TIMEOUT_S,
                    metadata=META,
                )
                assert sent.status.code == pb.OK, sent.status
            got: list[pb.Message] = []

            async def received() -> bool:
                got.extend((await receive(2))[1])
                return len(got) >= count

            await wait_until_async(received, lambda: f"{count} messages (got {len(got)})", 3 * TIMEOUT_S, 0)
            out["got"] = got
            by_id = {m.system_properties.message_id: m for m in got}
            keep = by_id.pop("R-0")
            out["acks"] = [await ack(m) for m in by_id.values()]
            out["ack_again"] = await ack(next(iter(by_id.values())))
            out["ack_forged"] = await ack(keep, "1.0.0.1.0.0.0@no-such-broker@0")
            out["change"] = await stub.ChangeInvisibleDuration(
                spb.ChangeInvisibleDurationRequest(
                    group=group,
                    topic=topic,
                    receipt_handle=keep.system_properties.receipt_handle,
                    invisible_duration=Duration(seconds=1),
                    message_id="R-0",
                ),
                timeout=TIMEOUT_S,
                metadata=META,
            )
            out["again"] = await receive(8)
            again = out["again"][1]
            # the consumer gives up on it: forwarded to %DLQ%CGroup and acked at the broker
            out["dlq"] = (
                await stub.ForwardMessageToDeadLetterQueue(
                    spb.ForwardMessageToDeadLetterQueueRequest(
                        group=group,
                        topic=topic,
                        receipt_handle=again[0].system_properties.receipt_handle,
                        message_id="R-0",
                        delivery_attempt=2,
                        max_delivery_attempts=2,
                    ),
                    timeout=TIMEOUT_S,
                    metadata=META,
                )
                if again
                else None
            )
            out["after"] = await receive(1)
            return out

    out = asyncio.run(run())
    assignment = out["assignment"]
    assert assignment.status.code == pb.OK and len(assignment.assignments) == 4
    got = out["got"]
    assert sorted(m.body for m in got) == [f"r{i}".encode() for i in range(count)]
    assert all(m.system_properties.delivery_attempt == 1 for m in got)
    assert all("@broker-a@" in m.system_properties.receipt_handle for m in got)
    assert "POP_CK" not in got[0].user_properties
    assert [a.status.code for a in out["acks"]] == [pb.OK] * (count - 1)
    assert out["ack_again"].status.code == pb.INVALID_RECEIPT_HANDLE
    assert out["ack_forged"].status.code == pb.INVALID_RECEIPT_HANDLE
    change = out["change"]
    assert change.status.code == pb.OK and "@broker-a@" in change.receipt_handle
    statuses, again = out["again"]
    assert [s.code for s in statuses] == [pb.OK]
    # only the message whose invisible time was shortened comes back, with attempt 2
    assert [(m.body, m.system_properties.delivery_attempt) for m in again] == [(b"r0", 2)]
    assert out["dlq"].status.code == pb.OK, out["dlq"].status
    assert [s.code for s in out["after"][0]] == [pb.MESSAGE_NOT_FOUND] and out["after"][1] == []
    with Admin(serve.namesrv_addr, timeout_ms=10_000) as admin:
        wait_until(
            lambda: len(list(admin.query_msg_by_key("%DLQ%CGroup", "R-0"))) == 1,
            "the DLQ copy",
            TIMEOUT_S,
            0.1,
        )
        (dead,) = admin.query_msg_by_key("%DLQ%CGroup", "R-0")
        assert dead.body == b"r0"
    assert proxy.running and serve.running


def test_proxy_relays_orphaned_transaction_checks_to_the_grpc_producer(
    checking_cluster: Servers,
) -> None:
    serve, proxy = checking_cluster
    proxy_addr = proxy.endpoints["gRPC (v5)"]
    meta = (("x-mq-client-id", "cluster-tx-producer@1"),)

    async def run() -> dict[str, Any]:
        async with grpc.aio.insecure_channel(proxy_addr) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            outbound: asyncio.Queue[spb.TelemetryCommand | None] = asyncio.Queue()

            async def commands() -> Any:
                while (command := await outbound.get()) is not None:
                    yield command

            stream = stub.Telemetry(commands(), metadata=meta, timeout=4 * TIMEOUT_S)
            settings = pb.Settings(
                client_type=pb.PRODUCER,
                publishing=pb.Publishing(topics=[pb.Resource(name="CTx")]),
            )
            await outbound.put(spb.TelemetryCommand(settings=settings))
            out: dict[str, Any] = {}
            out["settings_reply"] = await asyncio.wait_for(stream.read(), TIMEOUT_S)
            sent = await stub.SendMessage(
                spb.SendMessageRequest(
                    messages=[
                        msg("CTx", b"orphan", "TX-orphan", message_type=pb.TRANSACTION, keys=["tx-orphan"])
                    ]
                ),
                timeout=TIMEOUT_S,
                metadata=meta,
            )
            out["sent"] = sent
            # no EndTransaction: the broker's check reaches us through the proxy
            check = await asyncio.wait_for(stream.read(), 3 * TIMEOUT_S)
            out["check"] = check
            recover = check.recover_orphaned_transaction_command
            out["end"] = await stub.EndTransaction(
                spb.EndTransactionRequest(
                    topic=pb.Resource(name="CTx"),
                    message_id=recover.message.system_properties.message_id,
                    transaction_id=recover.transaction_id,
                    resolution=pb.COMMIT,
                    source=pb.SOURCE_SERVER_CHECK,
                ),
                timeout=TIMEOUT_S,
                metadata=meta,
            )
            await outbound.put(None)
            stream.cancel()
            return out

    with Admin(serve.namesrv_addr, timeout_ms=10_000) as admin:
        out = asyncio.run(run())
        assert out["settings_reply"].status.code == pb.OK
        assert out["sent"].status.code == pb.OK
        sent_tx = out["sent"].entries[0].transaction_id
        check = out["check"]
        assert check.WhichOneof("command") == "recover_orphaned_transaction_command"
        recover = check.recover_orphaned_transaction_command
        assert recover.message.topic.name == "CTx"
        assert bytes(recover.message.body) == b"orphan"
        assert recover.message.system_properties.message_id == "TX-orphan"
        # the check is about the broker's renewed copy of the half, on the same broker
        assert recover.transaction_id.endswith("@" + sent_tx.split("@", 1)[1])
        assert out["end"].status.code == pb.OK
        wait_until(
            lambda: len(list(admin.query_msg_by_key("CTx", "tx-orphan"))) == 1,
            "the half committed on check",
            TIMEOUT_S,
            0.1,
        )
        [found] = admin.query_msg_by_key("CTx", "tx-orphan")
        assert bytes(found.body) == b"orphan" and found.uniq_key == "TX-orphan"
    assert proxy.running and serve.running


def test_malformed_transaction_checks_are_dropped_without_a_push() -> None:
    async def run() -> tuple[Any, ...]:
        sessions = SessionRegistry()
        session = sessions.open("p@1")
        sessions.update_settings(
            session,
            pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="T")])),
        )
        checks = OrphanChecks(RouteCache(RemotingClient(), ["127.0.0.1:1"], 1.0), sessions)
        try:
            conn = Connection(None)  # never connected: the handler only reads its address
            no_fields = create_request(RequestCode.CHECK_TRANSACTION_STATE, {}, b"", oneway=True)
            no_body = create_request(
                RequestCode.CHECK_TRANSACTION_STATE,
                {"tranStateTableOffset": "1", "commitLogOffset": "2", "brokerName": "b", "topic": "T"},
                b"",
                oneway=True,
            )
            garbage = create_request(
                RequestCode.CHECK_TRANSACTION_STATE,
                {"tranStateTableOffset": "x", "commitLogOffset": "2", "brokerName": "b"},
                b"\x00" * 40,
                oneway=True,
            )
            answers = [await checks.on_request(conn, r) for r in (no_fields, no_body, garbage)]
            other = await checks.on_request(conn, create_request(RequestCode.HEART_BEAT, {}))
            return answers, other, session.outbound.qsize(), sessions.pushed
        finally:
            await checks.close()

    answers, other, queued, pushed = asyncio.run(run())
    assert answers == [None, None, None]
    assert other is not None and other.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert (queued, pushed) == (0, 0)
    with pytest.raises(KeyError):
        check_command(create_request(RequestCode.CHECK_TRANSACTION_STATE, {}, b""), "b")
    body = json.loads(heartbeat_body("proxy@1", ["A", "B"]))
    assert body == {
        "clientID": "proxy@1",
        "producerDataSet": [{"groupName": "A"}, {"groupName": "B"}],
        "consumerDataSet": [],
    }
