"""Sends on a DLedger leader answered without a task per request: the immediate handler takes
the send inside ``data_received`` (``DEFERRED``) and the put's completion answers it.

A broker in DLedger mode whose log is a group of one behind a test double that can hold appends
and then give each the outcome the test picks (a quorum reached, leadership lost, a full disk,
no outcome at all). Every case runs twice: through the deferred answer and through the task
path it replaced (``quorum_put_then`` switched off), and must answer the same: codes, remarks,
response fields, and at shutdown an answer for a send still waiting for its quorum."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from _support.requests import send_request
from _support.wait import wait_until
from rocketq.broker.send import SendMessageProcessor, _PlainReplicatedSend
from rocketq.broker.server import SHUTDOWN_DRAIN_TIMEOUT_S, SHUTDOWN_QUORUM_WAIT_S
from rocketq.errors import DiskFull, ResponseCode
from rocketq.ha import driver
from rocketq.ha.group_config import LedgerSpec, open_ledger
from rocketq.ha.replicated_log import AppendResult, AppendStatus, LogState, RecordEncoder
from rocketq.message import decode_offset_msg_id, encode_properties
from rocketq.protocol import record as rec
from rocketq.protocol.batch import BatchEntry, encode_batch
from rocketq.remoting import RemotingClient, RemotingCommand, RequestCode, create_request
from rocketq.remoting.codec import FrameDecoder, encode
from rocketq.remoting.codes import FLAG_RESPONSE
from rocketq.remoting.connection import Connection
from rocketq.store.commitlog import PutMessageResult
from rocketq.store.dledger_store import DLedgerMessageStore
from rocketq.store.put_latency import PUT_LATENCY_SAMPLE
from rocketq.testing import InProcessCluster

TOPIC = "DeferT"
SEND_CODES = {RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE}
#: what a held append is given: an outcome, an exception, or None to append for real
Outcome = AppendResult | BaseException | None


class HoldingLog:
    """A group of one (the real log underneath) whose appends wait, while ``holding``, for the
    outcome :meth:`release` gives them. Not ``append_completes_at_once``: the broker awaits its
    puts as on a Raft group."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.holding = False
        self.held: list[asyncio.Future[Outcome]] = []  # on the log's loop
        self.ledger_end_pos: int | None = None

    @property
    def state(self) -> LogState:
        return self.inner.state  # type: ignore[attr-defined,no-any-return]

    @property
    def committed_pos(self) -> int:
        return self.inner.committed_pos  # type: ignore[attr-defined,no-any-return]

    async def start(self) -> None:
        await self.inner.start()  # type: ignore[attr-defined]

    async def stop(self) -> None:
        await self.inner.stop()  # type: ignore[attr-defined]

    async def append(self, encode: RecordEncoder) -> AppendResult:
        if self.holding:
            waiter: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
            self.held.append(waiter)
            outcome = await waiter
            if isinstance(outcome, BaseException):
                raise outcome
            if outcome is not None:
                return outcome
        return await self.inner.append(encode)  # type: ignore[attr-defined,no-any-return]

    def release(self, outcome: Outcome) -> None:
        """On the log's loop: every held append gets ``outcome``; appends are no longer held."""
        self.holding = False
        held, self.held = self.held, []
        for waiter in held:
            waiter.set_result(outcome)

    def read(self, pos: int, size: int) -> bytes:
        return self.inner.read(pos, size)  # type: ignore[attr-defined,no-any-return]

    def entries_from(self, pos: int):  # type: ignore[no-untyped-def]
        return self.inner.entries_from(pos)  # type: ignore[attr-defined]

    def on_state_change(self, callback: Callable[[LogState], None]) -> None:
        self.inner.on_state_change(callback)  # type: ignore[attr-defined]

    async def transfer_leadership(self, target: str) -> bool:
        return False


@dataclass
class Harness:
    cluster: InProcessCluster
    log: HoldingLog
    deferred: bool
    #: request tasks the broker's connections started for sends
    send_tasks: list[int] = field(default_factory=list)

    @property
    def addr(self) -> str:
        return self.cluster.broker_addrs[self.cluster.broker_names[0]]

    @property
    def store(self) -> DLedgerMessageStore:
        store = self.cluster.store()
        assert isinstance(store, DLedgerMessageStore)
        return store

    def on_log_loop(self, fn: Callable[[], None]) -> None:
        loop = self.store.ledger_loop
        assert loop is not None
        loop.loop.call_soon_threadsafe(fn)

    def release(self, outcome: Outcome) -> None:
        self.on_log_loop(lambda: self.log.release(outcome))

    def invoke(self, request: RemotingCommand, timeout_s: float = 10) -> RemotingCommand:
        async def call() -> RemotingCommand:
            client = RemotingClient()
            try:
                return await client.invoke(self.addr, request, timeout_s)
            finally:
                await client.close()

        return asyncio.run(call())


@contextlib.contextmanager
def running(
    tmp_path: object,
    monkeypatch: pytest.MonkeyPatch,
    deferred: bool,
    put_message_timeout_ms: int = 1,
    store_extra: dict[str, object] | None = None,
    **broker_options: object,
) -> Iterator[Harness]:
    """A one-broker cluster in DLedger mode on a :class:`HoldingLog`, its sends answered through
    the deferred answer or (``deferred=False``) through the task path; an append without an
    outcome fails after max(1 s, ``put_message_timeout_ms`` + 1 s)."""
    logs: list[HoldingLog] = []

    def factory(spec: LedgerSpec) -> HoldingLog:
        logs.append(HoldingLog(open_ledger(spec)))
        return logs[-1]

    monkeypatch.setattr("rocketq.store.dledger_store.open_ledger", factory)
    if not deferred:  # the task path: the send awaits quorum_put in a request task
        monkeypatch.setattr(DLedgerMessageStore, "quorum_put_then", lambda self: None)
    send_tasks: list[int] = []
    start = Connection._start

    def counting_start(self: Connection, handler: object, cmd: RemotingCommand) -> None:
        if cmd.code in SEND_CODES:
            send_tasks.append(cmd.code)
        start(self, handler, cmd)  # type: ignore[arg-type]

    monkeypatch.setattr(Connection, "_start", counting_start)
    with InProcessCluster(
        1,
        data_dir=str(tmp_path),
        store_options={
            "enable_dleger_commit_log": True,
            "d_leger_self_id": "n0",
            "put_message_timeout_ms": put_message_timeout_ms,
            **(store_extra or {}),
        },
        broker_options=broker_options,
    ) as c:
        c.create_topic(TOPIC, 2)
        h = Harness(c, logs[0], deferred, send_tasks)
        wait_until(lambda: h.store.commitlog.writable, "the leader accepts writes")
        yield h


@pytest.fixture(params=["deferred", "task"])
def harness(
    request: pytest.FixtureRequest, tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Harness]:
    with running(tmp_path, monkeypatch, request.param == "deferred") as h:
        yield h


def held_send(h: Harness, request: RemotingCommand) -> concurrent.futures.Future[RemotingCommand]:
    """Send ``request`` from a thread while appends are held; returns once its append waits."""
    h.log.holding = True
    pool = concurrent.futures.ThreadPoolExecutor(1)
    answer = pool.submit(h.invoke, request)
    pool.shutdown(wait=False)
    wait_until(lambda: h.log.held, "the send's append waiting for its outcome")
    return answer


def test_sends_are_answered_without_a_request_task_and_with_the_same_fields(harness: Harness) -> None:
    h = harness
    ctx = h.cluster.broker(h.cluster.broker_names[0]).ctx
    assert ctx is not None
    answer = held_send(h, send_request(TOPIC, b"held", queue_id=1))
    # while the quorum is awaited the send is counted as taken (deferred path) or is a task
    assert ctx.deferred.pending == (1 if h.deferred else 0)
    h.release(None)
    r = answer.result(10)
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert set(r.ext_fields) == {"msgId", "queueId", "queueOffset", "transactionId", "MSG_REGION", "TRACE_ON"}
    assert (r.ext_fields["queueId"], r.ext_fields["queueOffset"]) == ("1", "0")
    assert r.ext_fields["TRACE_ON"] == "true" and r.ext_fields["MSG_REGION"] == "DefaultRegion"
    for i in range(1, 6):
        again = h.invoke(send_request(TOPIC, f"m{i}".encode(), queue_id=1))
        assert again.code == ResponseCode.SUCCESS and again.ext_fields["queueOffset"] == str(i)
    entries = [
        BatchEntry(f"b{i}".encode(), encode_properties({"UNIQ_KEY": f"ID{i:030d}"}).encode())
        for i in range(3)
    ]
    batch = h.invoke(
        send_request(TOPIC, encode_batch(entries), queue_id=0, code=RequestCode.SEND_BATCH_MESSAGE)
    )
    assert batch.code == ResponseCode.SUCCESS, batch.remark
    assert len(batch.ext_fields["msgId"].split(",")) == 3 and batch.ext_fields["queueOffset"] == "0"
    wait_until(lambda: ctx.deferred.pending == 0, "no answer owed")  # counted down after the write
    # the deferred path starts no task for a send; the task path one per send
    assert (len(h.send_tasks) == 0) if h.deferred else (len(h.send_tasks) == 7)
    stored = [h.store.look_message_by_offset(int(r.ext_fields["msgId"][16:32], 16))]
    assert stored[0] is not None and stored[0].body == b"held"


def test_leadership_lost_while_the_quorum_is_awaited(harness: Harness) -> None:
    h = harness
    answer = held_send(h, send_request(TOPIC, b"lost"))
    h.release(AppendResult(AppendStatus.NOT_LEADER, leader_id="n1"))
    r = answer.result(10)
    assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE
    assert (r.remark or "").startswith("this broker is not the leader of its DLedger group; the leader is n1")


def test_a_full_disk_fails_the_send_with_service_not_available(harness: Harness) -> None:
    h = harness
    answer = held_send(h, send_request(TOPIC, b"full"))
    h.release(DiskFull("no space left for the entry"))
    r = answer.result(10)
    assert (r.code, r.remark) == (ResponseCode.SERVICE_NOT_AVAILABLE, "no space left for the entry")


def test_an_append_without_an_outcome_times_out_as_system_error(harness: Harness) -> None:
    h = harness
    answer = held_send(h, send_request(TOPIC, b"late"))
    r = answer.result(10)  # the expiry: about 1 s
    assert (r.code, r.remark) == (
        ResponseCode.SYSTEM_ERROR,
        "DLedger append did not finish in time; outcome unknown",
    )
    h.release(None)  # it commits after all; the send was already answered
    ok = h.invoke(send_request(TOPIC, b"after"))
    assert ok.code == ResponseCode.SUCCESS, ok.remark


def test_bad_input_is_refused_before_anything_is_appended(harness: Harness) -> None:
    h = harness
    r = h.invoke(send_request("bad topic!", b"x"))
    assert r.code == ResponseCode.INVALID_PARAMETER and "topic" in (r.remark or "")
    r = h.invoke(send_request(TOPIC, b"x", queue_id=99))
    assert r.code == ResponseCode.INVALID_PARAMETER and "queueId[99] is illegal" in (r.remark or "")
    assert not h.log.held and h.store.stats.put_count == 0


def test_shutdown_answers_a_send_still_awaiting_its_quorum(harness: Harness) -> None:
    h = harness
    broker = h.cluster.broker(h.cluster.broker_names[0])
    answer = held_send(h, send_request(TOPIC, b"at shutdown"))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        stopping = pool.submit(h.cluster.call, broker.shutdown(), 30)
        wait_until(lambda: not broker.ready, "the broker shutting down")
        assert not answer.done()  # shutdown waits for the send's answer before closing the port
        h.release(None)
        r = answer.result(10)
        assert r.code == ResponseCode.SUCCESS, r.remark
        stopping.result(30)


@pytest.mark.parametrize("path", ["deferred", "task"])
def test_shutdown_stops_waiting_for_a_quorum_that_does_not_come_and_answers_outcome_unknown(
    path: str, tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A send whose quorum never comes (its put would time out only after a minute) is answered
    SYSTEM_ERROR, outcome unknown, SHUTDOWN_QUORUM_WAIT_S into the shutdown; before, the
    shutdown waited out its whole drain and closed the connection without an answer."""
    with running(tmp_path, monkeypatch, path == "deferred", put_message_timeout_ms=60_000) as h:
        broker = h.cluster.broker(h.cluster.broker_names[0])
        answer = held_send(h, send_request(TOPIC, b"never committed"))
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            began = time.monotonic()
            stopping = pool.submit(h.cluster.call, broker.shutdown(), 30)
            r = answer.result(SHUTDOWN_DRAIN_TIMEOUT_S)
            took = time.monotonic() - began
            assert r.code == ResponseCode.SYSTEM_ERROR, r.remark
            assert "broker shutting down" in (r.remark or "") and "outcome unknown" in (r.remark or "")
            assert SHUTDOWN_QUORUM_WAIT_S - 0.5 <= took < SHUTDOWN_DRAIN_TIMEOUT_S, took
            stopping.result(30)
        assert time.monotonic() - began < SHUTDOWN_DRAIN_TIMEOUT_S


@pytest.mark.parametrize("path", ["deferred", "task"])
def test_request_latency_counts_each_send_once_with_its_answer(
    path: str, tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = {"metrics_exporter_type": "PROM", "metrics_prom_exporter_port": 0}
    with running(tmp_path, monkeypatch, path == "deferred", **options) as h:
        ctx = h.cluster.broker(h.cluster.broker_names[0]).ctx
        assert ctx is not None and ctx.metrics is not None
        rpc = ctx.metrics.rpc
        for i in range(5):
            assert h.invoke(send_request(TOPIC, f"m{i}".encode())).code == ResponseCode.SUCCESS
        answer = held_send(h, send_request(TOPIC, b"lost"))
        h.release(AppendResult(AppendStatus.NOT_LEADER, leader_id="n1"))
        assert answer.result(10).code == ResponseCode.SERVICE_NOT_AVAILABLE
        refused = h.invoke(send_request(TOPIC, b"x", queue_id=99))
        assert refused.code == ResponseCode.INVALID_PARAMETER

        def counts() -> dict[int, int]:
            async def read() -> dict[int, int]:
                rpc.fold()
                return {
                    response: sum(hist.counts)
                    for (code, response), hist in rpc.table.items()
                    if code == RequestCode.SEND_MESSAGE_V2
                }

            return h.cluster.call(read())

        wait_until(lambda: sum(counts().values()) >= 7, "seven sends timed")
        assert counts() == {
            ResponseCode.SUCCESS: 5,
            ResponseCode.SERVICE_NOT_AVAILABLE: 1,
            ResponseCode.INVALID_PARAMETER: 1,
        }


@pytest.mark.parametrize("path", ["deferred", "task"])
def test_the_store_times_one_replicated_put_in_sixteen(
    path: str, tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = {"metrics_exporter_type": "PROM", "metrics_prom_exporter_port": 0}
    with running(tmp_path, monkeypatch, path == "deferred", **options) as h:
        broker = h.cluster.broker(h.cluster.broker_names[0])
        store = broker.store
        assert store is not None and store.put_latency is not None
        for i in range(2 * PUT_LATENCY_SAMPLE):
            assert h.invoke(send_request(TOPIC, f"m{i}".encode())).code == ResponseCode.SUCCESS
        # the sixteenth and the thirty-second put are timed (rocketmq_store_put_latency_seconds)
        assert sum(store.put_latency.merged().counts) == 2


def test_a_transaction_commit_on_the_shared_loop_is_put_from_a_worker_thread(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log runs on the broker's loop, where a synchronous put raises (it would wait for
    itself): END_TRANSACTION's put of the committed message and its op record, a synchronous
    put, must go to a worker thread and commit."""
    with running(tmp_path, monkeypatch, True) as h:
        store = h.store
        assert store.ledger_loop is not None and not store.ledger_loop.owns_thread
        half = h.invoke(
            send_request(
                TOPIC,
                b"tx",
                queue_id=1,
                sys_flag=rec.TRANSACTION_PREPARED_TYPE,
                properties={"TRAN_MSG": "true", "PGROUP": "PG"},
            )
        )
        assert half.code == ResponseCode.SUCCESS, half.remark
        fields = {
            "producerGroup": "PG",
            "tranStateTableOffset": half.ext_fields["queueOffset"],
            "commitLogOffset": str(decode_offset_msg_id(half.ext_fields["msgId"]).offset),
            "commitOrRollback": str(rec.TRANSACTION_COMMIT_TYPE),
            "fromTransactionCheck": "false",
            "msgId": half.ext_fields["msgId"],
        }
        done = h.invoke(create_request(RequestCode.END_TRANSACTION, fields))
        assert done.code == ResponseCode.SUCCESS, done.remark
        wait_until(lambda: store.get_max_offset(TOPIC, 1) == 1, "the committed message in its queue")
        committed = store.get_message("G", TOPIC, 1, 0, 1)
        assert [m.body for m in committed.messages] == [b"tx"]


def test_sends_committed_together_by_a_raft_leader_are_answered_with_the_usual_bytes(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Raft group of one (the driver, not the group-of-one log: its sends wait for their
    commit as on a real group, and commits come back as runs of several appends): sends written
    in one read are answered SUCCESS, each with the bytes the generic encoding of the task
    path's response command gives, naming the record the send stored."""
    monkeypatch.setattr("rocketq.store.dledger_store.open_ledger", driver.open_group_log)
    runs: list[int] = []  # the appends of each commit handed over together
    committed = driver.RaftGroupLog._committed

    def counting(done: driver.BatchDone, run: list[tuple[int, int, int]], leader: str | None) -> None:
        runs.append(len(run))
        committed(done, run, leader)

    monkeypatch.setattr(driver.RaftGroupLog, "_committed", staticmethod(counting))
    grouped: list[int] = []  # the plain sends answered together (their frames in one call)
    answer_all = _PlainReplicatedSend.answer_all

    def counting_answers(results: list[tuple[Any, PutMessageResult]]) -> None:
        grouped.append(len(results))
        answer_all(results)

    monkeypatch.setattr(_PlainReplicatedSend, "answer_all", staticmethod(counting_answers))
    sends = 6
    with InProcessCluster(
        1,
        data_dir=str(tmp_path),
        store_options={
            "enable_dleger_commit_log": True,
            "d_leger_self_id": "n0",
            "d_leger_election_timeout_ms": 300,
            "d_leger_heartbeat_interval_ms": 50,
        },
    ) as c:
        c.create_topic(TOPIC, 2)
        store = c.store()
        assert isinstance(store, DLedgerMessageStore) and isinstance(store.ledger, driver.RaftGroupLog)
        wait_until(lambda: store.commitlog.writable, "the leader accepts writes")
        addr = c.broker_addrs[c.broker_names[0]]
        host, port = addr.rsplit(":", 1)
        requests = [send_request(TOPIC, f"run{i}".encode(), queue_id=i % 2) for i in range(sends)]
        for i, request in enumerate(requests):
            request.opaque = 1000 + i

        async def exchange() -> list[bytes]:
            reader, writer = await asyncio.open_connection(host, int(port))
            try:
                writer.write(b"".join(encode(r) for r in requests))  # one read: one proposal
                frames: list[bytes] = []
                while len(frames) < sends:
                    head = await asyncio.wait_for(reader.readexactly(4), 10)
                    frames.append(head + await reader.readexactly(int.from_bytes(head, "big")))
                return frames
            finally:
                writer.close()

        frames = asyncio.run(exchange())
        decoder = FrameDecoder()
        answers = {cmd.opaque: (cmd, frame) for frame in frames for cmd in decoder.feed(frame)}
        assert sorted(answers) == [r.opaque for r in requests]
        for i, request in enumerate(requests):
            cmd, frame = answers[request.opaque]
            assert cmd.code == ResponseCode.SUCCESS, cmd.remark
            fields = cmd.ext_fields
            assert (fields["queueId"], fields["queueOffset"]) == (str(i % 2), str(i // 2))
            expected = RemotingCommand(
                ResponseCode.SUCCESS,
                opaque=request.opaque,
                flag=FLAG_RESPONSE,
                ext_fields={
                    "msgId": fields["msgId"],
                    "queueId": str(i % 2),
                    "queueOffset": str(i // 2),
                    "MSG_REGION": "DefaultRegion",
                    "TRACE_ON": "true",
                    "transactionId": fields["transactionId"],
                },
            )
            assert frame == encode(expected)
            stored = store.look_message_by_offset(decode_offset_msg_id(fields["msgId"]).offset)
            assert stored is not None and stored.body == f"run{i}".encode()
            assert stored.queue_offset == i // 2
        assert sum(runs) == sends and max(runs) > 1, runs
        # the first send checks the topic name (the general steps); the others are plain sends
        # of one connection, answered together run by run
        assert sum(grouped) == sends - 1 and max(grouped) > 1, grouped


def test_a_plain_send_takes_the_lean_path_and_stores_and_answers_what_the_general_path_does(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The usual send on a leader (a topic checked before, a queue id, no transaction, no retry
    topic) is taken by ``_replicated_plain``; the same send through the general steps stores
    the same record (but for its unique key, offsets and store time) and answers the same
    fields; the other kinds are left to the general steps."""
    taken: list[bool] = []
    lean = SendMessageProcessor._replicated_plain

    def counting(
        self: SendMessageProcessor,
        conn: Connection,
        request: RemotingCommand,
        header: object,
        put_then: object,
    ) -> object:
        out = lean(self, conn, request, header, put_then)  # type: ignore[arg-type]
        taken.append(out is not None)
        return out

    monkeypatch.setattr(SendMessageProcessor, "_replicated_plain", counting)
    props = {"KEYS": "k1 k2", "TAGS": "tg", "a": "b"}
    with running(tmp_path, monkeypatch, True) as h:
        ctx = h.cluster.broker(h.cluster.broker_names[0]).ctx
        assert ctx is not None
        first = h.invoke(send_request(TOPIC, b"same", queue_id=1, properties=props))  # checks the name
        lean_answer = h.invoke(send_request(TOPIC, b"same", queue_id=1, properties=props))
        assert taken == [False, True]  # a topic name not checked yet goes the general way once

        def general_only(*args: object) -> None:
            return None

        monkeypatch.setattr(SendMessageProcessor, "_replicated_plain", general_only)
        general_answer = h.invoke(send_request(TOPIC, b"same", queue_id=1, properties=props))
        monkeypatch.setattr(SendMessageProcessor, "_replicated_plain", counting)
        answers = [first, lean_answer, general_answer]
        assert [a.code for a in answers] == [ResponseCode.SUCCESS] * 3
        assert [a.ext_fields["queueOffset"] for a in answers] == ["0", "1", "2"]
        assert set(lean_answer.ext_fields) == set(general_answer.ext_fields)
        for key in ("queueId", "MSG_REGION", "TRACE_ON"):
            assert lean_answer.ext_fields[key] == general_answer.ext_fields[key]
        stored = [
            h.store.look_message_by_offset(decode_offset_msg_id(a.ext_fields["msgId"]).offset)
            for a in (lean_answer, general_answer)
        ]
        assert stored[0] is not None and stored[1] is not None
        shown = [
            (m.topic, m.body, m.queue_id, m.flag, m.sys_flag, m.store_host, m.reconsume_times)
            for m in stored  # type: ignore[union-attr]
        ]
        assert shown[0] == shown[1]
        # each send came on a connection of its own: the same host, another port
        assert [m.born_host.rsplit(":", 1)[0] for m in stored] == ["127.0.0.1"] * 2  # type: ignore[union-attr]
        assert [m.queue_offset for m in stored] == [1, 2]  # type: ignore[union-attr]
        lean_props = {k: v for k, v in stored[0].properties.items() if k != "UNIQ_KEY"}
        general_props = {k: v for k, v in stored[1].properties.items() if k != "UNIQ_KEY"}
        assert lean_props == general_props and lean_props["KEYS"] == "k1 k2"
        assert stored[0].properties["UNIQ_KEY"] == lean_answer.ext_fields["transactionId"]
        # a queue picked by the broker, a transaction half message, a retry topic: general steps
        taken.clear()
        picked = h.invoke(send_request(TOPIC, b"any", queue_id=-1))
        half = h.invoke(
            send_request(TOPIC, b"half", queue_id=0, properties={"TRAN_MSG": "true", "PGROUP": "PG"})
        )
        assert picked.code == ResponseCode.SUCCESS and half.code == ResponseCode.SUCCESS
        assert taken == [False, False]
        wait_until(lambda: ctx.deferred.pending == 0, "no answer owed")


def test_a_leader_looks_at_the_dispatch_lag_once_so_many_bytes_committed_and_diverts_while_behind(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sends a leader answers from their completions look at the dispatch lag once a
    sixteenth of ``max_dispatch_lag_bytes`` (here 4 KiB) of entries committed since the last
    look, not per send; once a look finds dispatch more than half the limit behind, every send
    looks again and takes the task path (whose put may wait in a thread) until it has caught up."""
    with running(
        tmp_path,
        monkeypatch,
        True,
        store_extra={"max_dispatch_lag_bytes": 64 * 1024, "dispatch_yield_lag_bytes": 0},
    ) as h:
        looks: list[int] = []
        behind = [0]

        def dispatch_behind_bytes() -> int:
            looks.append(behind[0])
            return behind[0]

        monkeypatch.setattr(h.store, "dispatch_behind_bytes", dispatch_behind_bytes)
        body = b"x" * 1000  # an entry of about 1.2 KB: a look every fourth send or so
        h.invoke(send_request(TOPIC, body, queue_id=1))  # the topic name checked once
        looks.clear()
        sends = 16
        for _ in range(sends):
            assert h.invoke(send_request(TOPIC, body, queue_id=1)).code == ResponseCode.SUCCESS
        assert 2 <= len(looks) <= sends // 3, looks
        assert h.send_tasks == []
        # far behind: from the next look on, each send looks and goes to the task path
        behind[0] = 40 * 1024
        looks.clear()
        for _ in range(8):
            assert h.invoke(send_request(TOPIC, body, queue_id=1)).code == ResponseCode.SUCCESS
        assert len(h.send_tasks) >= 1 and len(looks) >= len(h.send_tasks)
        diverted = len(h.send_tasks)
        assert diverted >= 8 - 4  # at most the sends before the first look went the deferred way
        # caught up: the next look lets sends through and counts afresh
        behind[0] = 0
        looks.clear()
        for _ in range(6):
            assert h.invoke(send_request(TOPIC, body, queue_id=1)).code == ResponseCode.SUCCESS
        assert len(h.send_tasks) == diverted
        assert 1 <= len(looks) <= 3, looks
