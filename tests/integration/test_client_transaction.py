"""Transactional producers (sync facade and asyncio core) against in-process name server + broker.

The servers come from ``Cluster`` (test_client_producer), built with a 50 ms transaction check
interval and a per-test transaction timeout: long where the producer resolves every half itself
(no check may interfere), short where the broker's check must resolve it. Visibility is verified
with PULL_MESSAGE over the wire. Every wait is on a condition with a deadline.
"""

from __future__ import annotations

import asyncio
import functools
import pathlib
import threading
from collections.abc import Callable, Iterator

import pytest
import test_client_producer
from test_client_producer import Cluster

from _support.wait import wait_until_async
from rocketq.broker import BrokerConfig
from rocketq.broker.transaction import TransactionService
from rocketq.client import (
    AsyncTransactionProducer,
    LocalTransactionState,
    Message,
    SendStatus,
    TransactionProducer,
    TransactionSendResult,
)
from rocketq.errors import ClientStateError, MessageIllegal
from rocketq.message import MessageExt, decode_properties
from rocketq.protocol import record as rec
from rocketq.protocol.topic import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC

TOPIC = "TxT"
GROUP = "TxPG"
LONG_TIMEOUT_MS = 600_000
SHORT_TIMEOUT_MS = 200


@pytest.fixture
def make_cluster(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[int], Cluster]]:
    started: list[Cluster] = []

    def make(transaction_timeout_ms: int) -> Cluster:
        monkeypatch.setattr(
            test_client_producer,
            "BrokerConfig",
            functools.partial(
                BrokerConfig,
                transaction_check_interval_ms=50,
                transaction_timeout_ms=transaction_timeout_ms,
            ),
        )
        c = Cluster(tmp_path, ("broker-a",))
        c.start()
        started.append(c)
        c.create_topic(TOPIC, 4)
        return c

    try:
        yield make
    finally:
        for c in started:
            c.close()


def service(cluster: Cluster) -> TransactionService:
    transactions = cluster.brokers["broker-a"].transactions
    assert transactions is not None
    return transactions


def visible(cluster: Cluster, result: TransactionSendResult) -> list[rec.RecordView]:
    return cluster.pull_all("broker-a", TOPIC, result.message_queue.queue_id)


def wait_passes(cluster: Cluster, count: int) -> None:
    target = service(cluster).check_passes + count
    cluster.wait_for(f"{count} check passes", lambda: service(cluster).check_passes >= target)


class Checks:
    """A check listener that records what the broker asked about and answers ``state``."""

    def __init__(self, state: LocalTransactionState) -> None:
        self.state = state
        self.lock = threading.Lock()
        self.asked: list[MessageExt] = []

    def __call__(self, message: MessageExt) -> LocalTransactionState:
        with self.lock:
            self.asked.append(message)
        return self.state

    def bodies(self) -> set[bytes]:
        with self.lock:
            return {m.body for m in self.asked}


def test_commit_makes_the_message_visible(make_cluster: Callable[[int], Cluster]) -> None:
    cluster = make_cluster(LONG_TIMEOUT_MS)
    checks = Checks(LocalTransactionState.ROLLBACK_MESSAGE)
    seen: list[tuple[Message, object, str]] = []

    def local(msg: Message, arg: object) -> LocalTransactionState:
        seen.append((msg, arg, threading.current_thread().name))
        return LocalTransactionState.COMMIT_MESSAGE

    with TransactionProducer(GROUP, namesrv_addr=cluster.namesrv_addr, check_listener=checks) as p:
        result = p.send_message_in_transaction(Message(TOPIC, b"paid", tags="T"), local, arg=42)
        assert result.status is SendStatus.SEND_OK
        assert result.local_transaction_state is LocalTransactionState.COMMIT_MESSAGE
        assert result.transaction_id == result.msg_id and len(result.msg_id) == 32
        (half, arg, thread_name) = seen[0]
        assert arg == 42 and half.properties["UNIQ_KEY"] == result.msg_id
        assert half.properties["TRAN_MSG"] == "true" and half.properties["PGROUP"] == GROUP
        assert thread_name not in {threading.current_thread().name, f"rocketq-producer-{GROUP}"}
        cluster.wait_for("the committed message", lambda: len(visible(cluster, result)) == 1)
        # an ordinary send still works on the same producer
        assert p.send(Message(TOPIC, b"plain")).status is SendStatus.SEND_OK
    (view,) = visible(cluster, result)
    assert view.body == b"paid" and view.queue_offset == 0
    assert view.sys_flag & rec.TRANSACTION_MASK == rec.TRANSACTION_COMMIT_TYPE
    props = decode_properties(view.properties)
    assert props["UNIQ_KEY"] == result.msg_id and props["TAGS"] == "T" and "TRAN_MSG" not in props
    assert checks.asked == []
    with pytest.raises(ClientStateError):
        p.send_message_in_transaction(Message(TOPIC, b"late"), local)


def test_rollback_never_makes_the_message_visible(make_cluster: Callable[[int], Cluster]) -> None:
    cluster = make_cluster(LONG_TIMEOUT_MS)
    checks = Checks(LocalTransactionState.COMMIT_MESSAGE)
    with TransactionProducer(GROUP, namesrv_addr=cluster.namesrv_addr, check_listener=checks) as p:
        result = p.send_message_in_transaction(
            Message(TOPIC, b"cancelled"), lambda m, a: LocalTransactionState.ROLLBACK_MESSAGE
        )
        assert result.local_transaction_state is LocalTransactionState.ROLLBACK_MESSAGE
        cluster.wait_for(
            "the rollback", lambda: len(cluster.pull_all("broker-a", TRANS_OP_HALF_TOPIC, 0)) == 1
        )
        wait_passes(cluster, 3)
        assert visible(cluster, result) == []
        assert [v.body for v in cluster.pull_all("broker-a", TRANS_HALF_TOPIC, 0)] == [b"cancelled"]
        with pytest.raises(MessageIllegal, match="delay"):
            p.send_message_in_transaction(
                Message(TOPIC, b"x", delay_level=2), lambda m, a: LocalTransactionState.COMMIT_MESSAGE
            )
    assert checks.asked == []


def test_unknown_and_failing_local_transactions_are_resolved_by_the_check(
    make_cluster: Callable[[int], Cluster],
) -> None:
    cluster = make_cluster(SHORT_TIMEOUT_MS)
    checks = Checks(LocalTransactionState.COMMIT_MESSAGE)

    def failing(msg: Message, arg: object) -> LocalTransactionState:
        raise RuntimeError("database unavailable")

    with TransactionProducer(GROUP, namesrv_addr=cluster.namesrv_addr, check_listener=checks) as p:
        unknown = p.send_message_in_transaction(
            Message(TOPIC, b"unknown", tags="U"), lambda m, a: LocalTransactionState.UNKNOW
        )
        failed = p.send_message_in_transaction(Message(TOPIC, b"failed"), failing)
        assert unknown.local_transaction_state is LocalTransactionState.UNKNOW
        assert failed.local_transaction_state is LocalTransactionState.UNKNOW
        cluster.wait_for("both checks", lambda: checks.bodies() == {b"unknown", b"failed"})
        cluster.wait_for("the first commit on check", lambda: len(visible(cluster, unknown)) == 1)
        cluster.wait_for("the second commit on check", lambda: len(visible(cluster, failed)) == 1)
        wait_passes(cluster, 3)
        asked = len(checks.asked)
        wait_passes(cluster, 2)
        assert len(checks.asked) == asked  # resolved halves are not checked again
    first = next(m for m in checks.asked if m.body == b"unknown")
    assert first.topic == TOPIC and first.queue_id == unknown.message_queue.queue_id
    assert first.uniq_key == unknown.msg_id and first.tags == "U"
    assert [v.body for v in visible(cluster, unknown)] == [b"unknown"]
    assert [v.body for v in visible(cluster, failed)] == [b"failed"]


def test_async_core_with_coroutine_callbacks(make_cluster: Callable[[int], Cluster]) -> None:
    cluster = make_cluster(SHORT_TIMEOUT_MS)
    asked: list[MessageExt] = []

    async def check(message: MessageExt) -> LocalTransactionState:
        asked.append(message)
        return LocalTransactionState.ROLLBACK_MESSAGE

    async def commit(msg: Message, arg: object) -> LocalTransactionState:
        await asyncio.sleep(0)
        return LocalTransactionState.COMMIT_MESSAGE

    async def main() -> tuple[TransactionSendResult, TransactionSendResult]:
        async with AsyncTransactionProducer(
            GROUP, namesrv_addr=cluster.namesrv_addr, check_listener=check
        ) as p:
            committed = await p.send_message_in_transaction(Message(TOPIC, b"async commit"), commit)
            pending = await p.send_message_in_transaction(
                Message(TOPIC, b"async pending"), lambda m, a: LocalTransactionState.UNKNOW
            )
            await wait_until_async(lambda: asked, "the broker's check", test_client_producer.WAIT_S)
            # the check answered rollback: the half is resolved (its op message is stored)
            await asyncio.to_thread(
                cluster.wait_for,
                "the rollback answered to the check",
                lambda: len(cluster.pull_all("broker-a", TRANS_OP_HALF_TOPIC, 0)) == 2,
            )
            return committed, pending

    committed, pending = asyncio.run(main())
    assert {m.body for m in asked} == {b"async pending"}
    assert all(m.topic == TOPIC for m in asked)
    cluster.wait_for("the async commit", lambda: len(visible(cluster, committed)) == 1)
    assert b"async commit" in [v.body for v in visible(cluster, committed)]
    assert b"async pending" not in [v.body for v in visible(cluster, pending)]
