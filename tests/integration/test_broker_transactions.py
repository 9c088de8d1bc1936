"""Transactional messages against a real Broker: half sends, END_TRANSACTION, state checks."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from _support.requests import pulled_records, send_request
from _support.wait import wait_until_async
from rocketq.broker import Broker, BrokerConfig
from rocketq.broker.transaction import TransactionService
from rocketq.config import StoreConfig
from rocketq.errors import ResponseCode
from rocketq.message import decode_offset_msg_id, decode_properties
from rocketq.protocol import record as rec
from rocketq.protocol.headers import PULL_FLAG_SUBSCRIPTION, PullMessageRequestHeader
from rocketq.protocol.topic import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from rocketq.remoting import Connection, RemotingClient, RemotingCommand, RequestCode, create_request

T = TypeVar("T")
WAIT_S = 10.0
TOPIC = "TxTopic"
GROUP = "PG"


def run(coro: Coroutine[Any, Any, T]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, 60)

    return asyncio.run(bounded())


class Producer:
    """A transactional producer: a RemotingClient that records the broker's check requests."""

    def __init__(self) -> None:
        self.checks: list[RemotingCommand] = []
        self.client = RemotingClient(self._on_request)

    async def _on_request(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        if request.code == RequestCode.CHECK_TRANSACTION_STATE:
            self.checks.append(request)
        return None


@asynccontextmanager
async def running(
    store_config: StoreConfig, **kwargs: Any
) -> AsyncIterator[tuple[Broker, TransactionService, Producer, str]]:
    base: dict[str, Any] = {
        "broker_name": "broker-a",
        "broker_ip1": "127.0.0.1",
        "bind_address": "127.0.0.1",
        "listen_port": 0,
        "namesrv_addr": None,
        "transaction_check_interval_ms": 50,
        "transaction_timeout_ms": 60_000,
    }
    base.update(kwargs)
    broker = Broker(BrokerConfig(**base), store_config)
    await broker.start()
    producer = Producer()
    addr = f"127.0.0.1:{broker.port}"
    try:
        body = json.dumps(
            {"clientID": "127.0.0.1@tx", "producerDataSet": [{"groupName": GROUP}], "consumerDataSet": []}
        )
        hb = await producer.client.invoke(addr, create_request(RequestCode.HEART_BEAT, body=body.encode()))
        assert hb.code == ResponseCode.SUCCESS
        assert broker.transactions is not None
        yield broker, broker.transactions, producer, addr
    finally:
        await producer.client.close()
        await broker.shutdown()


async def send_half(producer: Producer, addr: str, body: bytes) -> tuple[int, int, str]:
    """Send a half message; returns (commit-log offset, half queue offset, UNIQ_KEY)."""
    request = send_request(
        TOPIC,
        body,
        queue_id=1,
        group=GROUP,
        sys_flag=rec.TRANSACTION_PREPARED_TYPE,
        properties={"TRAN_MSG": "true", "PGROUP": GROUP, "TAGS": "t"},
    )
    response = await producer.client.invoke(addr, request)
    assert response.code == ResponseCode.SUCCESS, response.remark
    ext = response.ext_fields
    assert ext["queueId"] == "1"
    return decode_offset_msg_id(ext["msgId"]).offset, int(ext["queueOffset"]), ext["transactionId"]


async def end_transaction(
    producer: Producer,
    addr: str,
    commit_log_offset: int,
    queue_offset: int,
    kind: int,
    *,
    from_check: bool = False,
) -> None:
    fields = {
        "producerGroup": GROUP,
        "tranStateTableOffset": str(queue_offset),
        "commitLogOffset": str(commit_log_offset),
        "commitOrRollback": str(kind),
        "fromTransactionCheck": "true" if from_check else "false",
        "msgId": "m",
    }
    await producer.client.invoke_oneway(
        addr, create_request(RequestCode.END_TRANSACTION, fields, oneway=True)
    )


async def pull(producer: Producer, addr: str, topic: str, queue_id: int) -> list[rec.RecordView]:
    header = PullMessageRequestHeader(
        consumer_group="CG",
        topic=topic,
        queue_id=queue_id,
        queue_offset=0,
        max_msg_nums=32,
        sys_flag=PULL_FLAG_SUBSCRIPTION,
        commit_offset=0,
        suspend_timeout_millis=1000,
        sub_version=0,
        subscription="*",
    )
    response = await producer.client.invoke(
        addr, create_request(RequestCode.PULL_MESSAGE, header.to_ext_fields())
    )
    if response.code != ResponseCode.SUCCESS:
        return []
    return pulled_records(response.body)


async def passes(broker: Broker, service: TransactionService, count: int) -> None:
    """Wait until everything is dispatched and ``count`` more check passes have completed."""
    assert broker.store is not None
    assert await asyncio.to_thread(broker.store.wait_dispatched, WAIT_S)
    target = service.check_passes + count
    await wait_until_async(lambda: service.check_passes >= target, f"{count} check passes", WAIT_S, 0.005)


def test_commit_makes_the_message_visible_exactly_once(store_config: StoreConfig) -> None:
    async def main() -> None:
        async with running(store_config) as (broker, service, producer, addr):
            offset, queue_offset, uniq = await send_half(producer, addr, b"committed")
            await passes(broker, service, 1)
            assert await pull(producer, addr, TOPIC, 1) == []  # the half is not consumable
            halves = await pull(producer, addr, TRANS_HALF_TOPIC, 0)
            assert len(halves) == 1
            half_props = decode_properties(halves[0].properties)
            assert half_props["REAL_TOPIC"] == TOPIC and half_props["REAL_QID"] == "1"
            assert halves[0].sys_flag & rec.TRANSACTION_MASK == rec.TRANSACTION_NOT_TYPE

            await end_transaction(producer, addr, offset, queue_offset, rec.TRANSACTION_COMMIT_TYPE)
            await wait_until_async(
                lambda: broker.store is not None and broker.store.get_max_offset(TOPIC, 1) == 1,
                "commit",
                WAIT_S,
                0.005,
            )
            # a repeated commit of the same half changes nothing
            await end_transaction(producer, addr, offset, queue_offset, rec.TRANSACTION_COMMIT_TYPE)
            await passes(broker, service, 2)
            views = await pull(producer, addr, TOPIC, 1)
            assert len(views) == 1
            view = views[0]
            assert view.body == b"committed" and view.queue_offset == 0
            assert view.sys_flag & rec.TRANSACTION_MASK == rec.TRANSACTION_COMMIT_TYPE
            assert view.prepared_transaction_offset == offset
            props = decode_properties(view.properties)
            assert "TRAN_MSG" not in props and "REAL_TOPIC" not in props and "REAL_QID" not in props
            assert props["UNIQ_KEY"] == uniq and props["PGROUP"] == GROUP and props["TAGS"] == "t"
            ops = await pull(producer, addr, TRANS_OP_HALF_TOPIC, 0)
            assert [(o.body, decode_properties(o.properties)["TAGS"]) for o in ops] == [
                (str(queue_offset).encode(), "d")
            ]
            assert producer.checks == []

    run(main())


def test_commit_appends_the_message_and_its_op_record_together(store_config: StoreConfig) -> None:
    """One append, one commit point: a broker killed mid-commit keeps both records or neither
    (the batch append's all-or-nothing recovery is tested by tests/crash/test_sigkill_batch.py),
    so a commit retried after the restart can tell from the op queue whether it happened."""

    async def main() -> None:
        async with running(store_config) as (broker, _service, producer, addr):
            offset, queue_offset, _ = await send_half(producer, addr, b"paired")
            store = broker.store
            assert store is not None
            appends: list[list[str]] = []
            put_messages = store.commitlog.put_messages

            def recording(msgs: Any) -> Any:
                appends.append([m.topic for m in msgs])
                return put_messages(msgs)

            store.commitlog.put_messages = recording  # type: ignore[method-assign]
            await end_transaction(producer, addr, offset, queue_offset, rec.TRANSACTION_COMMIT_TYPE)
            await wait_until_async(
                lambda: store.get_max_offset(TRANS_OP_HALF_TOPIC, 0) == 1, "the op record", WAIT_S, 0.005
            )
            assert appends == [[TOPIC, TRANS_OP_HALF_TOPIC]]
            (committed,) = await pull(producer, addr, TOPIC, 1)
            (op,) = await pull(producer, addr, TRANS_OP_HALF_TOPIC, 0)
            assert committed.physical_offset + committed.size == op.physical_offset

    run(main())


def test_rollback_never_makes_the_message_visible(store_config: StoreConfig) -> None:
    async def main() -> None:
        async with running(store_config) as (broker, service, producer, addr):
            offset, queue_offset, _ = await send_half(producer, addr, b"rolled back")
            await end_transaction(producer, addr, offset, queue_offset, rec.TRANSACTION_ROLLBACK_TYPE)
            await wait_until_async(
                lambda: broker.store is not None and broker.store.get_max_offset(TRANS_OP_HALF_TOPIC, 0) == 1,
                "op message",
                WAIT_S,
                0.005,
            )
            await passes(broker, service, 3)
            assert await pull(producer, addr, TOPIC, 1) == []
            assert producer.checks == []

    run(main())


def test_unknown_resolution_does_nothing(store_config: StoreConfig) -> None:
    async def main() -> None:
        async with running(store_config) as (broker, service, producer, addr):
            offset, queue_offset, _ = await send_half(producer, addr, b"unknown")
            await end_transaction(producer, addr, offset, queue_offset, rec.TRANSACTION_NOT_TYPE)
            await passes(broker, service, 2)
            assert broker.store is not None
            assert broker.store.get_max_offset(TRANS_OP_HALF_TOPIC, 0) == 0
            assert await pull(producer, addr, TOPIC, 1) == []

    run(main())


def test_unresolved_half_is_checked_and_committed_on_check(store_config: StoreConfig) -> None:
    async def main() -> None:
        async with running(store_config, transaction_timeout_ms=200) as (broker, service, producer, addr):
            offset, queue_offset, uniq = await send_half(producer, addr, b"checked")
            await wait_until_async(
                lambda: len(producer.checks) >= 1, "a CHECK_TRANSACTION_STATE request", WAIT_S, 0.005
            )
            check = producer.checks[0]
            ext = check.ext_fields
            assert ext["msgId"] == uniq and ext["transactionId"] == uniq and ext["topic"] == TOPIC
            view = rec.decode_record(check.body, 0, check_crc=True)
            assert view.kind is rec.RecordKind.MESSAGE and view.body == b"checked"
            assert view.physical_offset == int(ext["commitLogOffset"]) != offset
            assert view.queue_offset == int(ext["tranStateTableOffset"]) > queue_offset
            props = decode_properties(view.properties)
            assert props["TRANSACTION_CHECK_TIMES"] == "1" and props["PGROUP"] == GROUP
            assert props["REAL_TOPIC"] == TOPIC
            assert await pull(producer, addr, TOPIC, 1) == []

            await end_transaction(
                producer,
                addr,
                int(ext["commitLogOffset"]),
                int(ext["tranStateTableOffset"]),
                rec.TRANSACTION_COMMIT_TYPE,
                from_check=True,
            )
            await wait_until_async(
                lambda: broker.store is not None and broker.store.get_max_offset(TOPIC, 1) == 1,
                "commit",
                WAIT_S,
                0.005,
            )
            seen = len(producer.checks)
            await passes(broker, service, 4)
            assert len(producer.checks) == seen  # resolved: never checked again
            views = await pull(producer, addr, TOPIC, 1)
            assert [v.body for v in views] == [b"checked"]

    run(main())


def test_half_checked_too_often_is_discarded(store_config: StoreConfig) -> None:
    async def main() -> None:
        async with running(store_config, transaction_timeout_ms=0, transaction_check_max=2) as (
            broker,
            service,
            producer,
            addr,
        ):
            await send_half(producer, addr, b"abandoned")
            await wait_until_async(lambda: service.discarded == 1, "the half to be discarded", WAIT_S, 0.005)
            await passes(broker, service, 3)
            assert len(producer.checks) == 2
            assert service.discarded == 1
            assert broker.store is not None
            assert broker.store.get_max_offset(TRANS_CHECK_MAX_TIME_TOPIC, 0) == 1
            assert await pull(producer, addr, TOPIC, 1) == []

    run(main())
