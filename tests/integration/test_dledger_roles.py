"""The DLedger role handler of a running broker, driven by a log whose role the test sets: a
follower refuses sends at once with SERVICE_NOT_AVAILABLE naming the leader (the producer
retries on another broker), registers as a slave, and takes writes again once leader."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from _support.requests import pull_request, pulled_records, send_request
from _support.steered_log import SteeredLog
from _support.wait import wait_until
from rocketq.client import Admin, Message, Producer, SendStatus
from rocketq.errors import ResponseCode
from rocketq.ha.group_config import LedgerSpec, open_ledger
from rocketq.ha.raft_types import Role
from rocketq.ha.replicated_log import LogState
from rocketq.remoting import RemotingClient, RemotingCommand
from rocketq.store.dledger_store import DLedgerMessageStore
from rocketq.testing import InProcessCluster

TOPIC = "RoleT"


async def raw_send(addr: str, request: RemotingCommand | None = None) -> RemotingCommand:
    client = RemotingClient()
    try:
        return await client.invoke(addr, request or send_request(TOPIC, b"direct"), 5)
    finally:
        await client.close()


@pytest.fixture
def cluster(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[InProcessCluster, dict[str, SteeredLog]]]:
    logs: dict[str, SteeredLog] = {}

    def factory(spec: LedgerSpec) -> SteeredLog:
        log = SteeredLog(open_ledger(spec))
        logs[spec.base_dir] = log
        return log

    monkeypatch.setattr("rocketq.store.dledger_store.open_ledger", factory)
    with InProcessCluster(
        2,
        data_dir=str(tmp_path),
        store_options={"enable_dleger_commit_log": True, "d_leger_self_id": "n0"},
        broker_options={"register_broker_interval_ms": 1000},
    ) as c:
        c.create_topic(TOPIC, 2)
        yield c, {name: logs[c.store(name).root] for name in c.broker_names}


def test_follower_refuses_sends_and_the_producer_retries_elsewhere(
    cluster: tuple[InProcessCluster, dict[str, SteeredLog]],
) -> None:
    c, logs = cluster
    a, b = c.broker_names
    store = c.store(a)
    assert isinstance(store, DLedgerMessageStore) and store.ledger_loop is not None
    with Producer("RolePG", namesrv_addr=c.namesrv_addr) as p:
        assert p.send(Message(TOPIC, b"warm")).status is SendStatus.SEND_OK  # routes cached: a is master
        follower = LogState(Role.FOLLOWER, 2, "n0", "n1", c.broker_addrs[b])  # b plays the leader
        store.ledger_loop.loop.call_soon_threadsafe(logs[a].force, follower)
        wait_until(lambda: not store.commitlog.writable, "the follower refuses writes")
        refusal = asyncio.run(raw_send(c.broker_addrs[a]))
        assert refusal.code == ResponseCode.SERVICE_NOT_AVAILABLE
        assert f"leader is n1 at {c.broker_addrs[b]}" in (refusal.remark or "")
        # the cached route still names a as master: sends that pick its queues are retried on b
        results = [p.send(Message(TOPIC, f"m{i}".encode())) for i in range(20)]
    assert all(r.status is SendStatus.SEND_OK and r.message_queue.broker_name == b for r in results)

    def registered_as(broker_id: int) -> bool:
        with Admin(c.namesrv_addr) as admin:
            return broker_id in admin.cluster_info().broker_addr_table[a].broker_addrs

    wait_until(lambda: registered_as(1), "the follower registered as brokerId 1")

    # the follower copies the leader's topics and consumer offsets (SlaveSynchronize)
    with Admin(c.namesrv_addr) as admin:
        admin.create_topic("OnlyOnLeader", 1, 1, broker_addr=c.broker_addrs[b])
    leader_ctx, follower_ctx = c.broker(b).ctx, c.broker(a).ctx
    assert leader_ctx is not None and follower_ctx is not None

    leader_schedule, follower_schedule = c.store(b).schedule, store.schedule
    assert leader_schedule is not None and follower_schedule is not None

    async def commit() -> None:
        leader_ctx.offsets.commit_offset("test", "SyncedCG", TOPIC, 1, 7)
        leader_schedule.adopt_offsets({**leader_schedule.offset_table, 18: 9})  # delay level 18 progress

    c.call(commit())
    # a pull's piggybacked offset counts on a master only (RocketMQ's rule for slaves)
    pulled = asyncio.run(
        raw_send(c.broker_addrs[a], pull_request(TOPIC, 0, group="PiggyCG", commit_offset=5))
    )
    assert pulled.code in (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND)
    assert follower_ctx.offsets.query_offset("PiggyCG", TOPIC, 0) == -1
    wait_until(
        lambda: (
            "OnlyOnLeader" in follower_ctx.topics
            and follower_ctx.offsets.query_offset("SyncedCG", TOPIC, 1) == 7
            and follower_schedule.offset_table.get(18) == 9
        ),
        "the follower copied the leader's topic, consumer offset and delay progress",
    )

    store.ledger_loop.loop.call_soon_threadsafe(logs[a].force, None)  # leader again (term 1)
    wait_until(lambda: store.commitlog.writable, "the leader accepts writes")
    back = asyncio.run(raw_send(c.broker_addrs[a]))
    assert back.code == ResponseCode.SUCCESS, back.remark
    handler = c.broker(a).ctx.dledger_role  # type: ignore[union-attr]
    assert handler is not None
    assert [role for role, _ in handler.history] == ["LEADER", "FOLLOWER", "LEADER"]
    wait_until(lambda: registered_as(0), "the leader registered as brokerId 0")


def test_a_new_leader_takes_writes_only_once_caught_up(
    cluster: tuple[InProcessCluster, dict[str, SteeredLog]],
) -> None:
    c, logs = cluster
    a = c.broker_names[0]
    store = c.store(a)
    assert isinstance(store, DLedgerMessageStore) and store.ledger_loop is not None
    log = logs[a]
    loop = store.ledger_loop.loop
    loop.call_soon_threadsafe(log.force, LogState(Role.FOLLOWER, 2, "n0", None, None))
    wait_until(lambda: not store.commitlog.writable, "the follower refuses writes")
    log.ledger_end_pos = log.committed_pos + 100  # entries this leader still has to commit
    loop.call_soon_threadsafe(log.force, LogState(Role.LEADER, 3, "n0", "n0", c.broker_addrs[a]))
    refused = wait_until(
        lambda: (r := asyncio.run(raw_send(c.broker_addrs[a]))).remark and "catching up" in r.remark and r,
        "the new leader's refusal while catching up",
    )
    assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE
    assert not store.commitlog.writable
    log.ledger_end_pos = log.committed_pos  # everything committed (and dispatched): master now
    wait_until(lambda: store.commitlog.writable, "the caught-up leader accepts writes")
    assert asyncio.run(raw_send(c.broker_addrs[a])).code == ResponseCode.SUCCESS


def test_regression_a_master_whose_queue_is_behind_never_moves_a_consumer_back(
    cluster: tuple[InProcessCluster, dict[str, SteeredLog]],
) -> None:
    """Issue 17 (a chaos run: a new leader answered PULL_OFFSET_MOVED to offset 0 for an offset the
    consumer had read on the old leader): a DLedger master whose ConsumeQueue is behind the
    messages it holds answers a pull past the queue's end with PULL_RETRY_IMMEDIATELY at the
    requested offset; only an offset beyond the queue's next offset in the queue-offset table
    (no message there, committed or not) is moved."""
    c, _logs = cluster
    a = c.broker_names[0]
    store = c.store(a)
    assert isinstance(store, DLedgerMessageStore)
    addr = c.broker_addrs[a]
    for i in range(6):
        sent = asyncio.run(raw_send(addr, send_request(TOPIC, f"q{i}".encode(), queue_id=0)))
        assert sent.code == ResponseCode.SUCCESS, sent.remark
    wait_until(lambda: store.get_max_offset(TOPIC, 0) == 6, "six messages dispatched")
    handler = c.broker(a).ctx.dledger_role  # type: ignore[union-attr]
    assert handler is not None and handler.leads_current_term()
    # the state the fail-over left: the queue two units long while the member holds six messages
    with store.consume_queues.repair_lock:
        cq = store.consume_queues.find(TOPIC, 0)
        assert cq is not None
        unit = cq.get_unit(2)
        assert unit is not None
        cq.truncate_dirty_logic_files(unit.offset)
    assert store.get_max_offset(TOPIC, 0) == 2 and store.next_queue_offset(TOPIC, 0) == 6
    for offset in (3, 5, 6):  # read on the old leader, or the next to come: kept
        kept = asyncio.run(raw_send(addr, pull_request(TOPIC, offset)))
        assert kept.code == ResponseCode.PULL_RETRY_IMMEDIATELY, kept
        assert kept.ext_fields["nextBeginOffset"] == str(offset)
        assert kept.ext_fields["maxOffset"] == "2"
    beyond = asyncio.run(raw_send(addr, pull_request(TOPIC, 7)))  # no message can be there
    assert beyond.code == ResponseCode.PULL_OFFSET_MOVED, beyond
    assert beyond.ext_fields["nextBeginOffset"] == "0"  # RocketMQ's correction: the minimum is 0
    found = asyncio.run(raw_send(addr, pull_request(TOPIC, 0)))
    assert found.code == ResponseCode.SUCCESS


def test_regression_a_leader_again_in_a_newer_term_is_no_master_while_it_catches_up(
    cluster: tuple[InProcessCluster, dict[str, SteeredLog]],
) -> None:
    """A master that loses the leadership and wins it back before its follower state is applied
    (leader, follower, leader in one turn of the loop) is no master while it catches up in the
    new term: another leader may have committed entries in between that its queues lack, so
    nothing it answers meanwhile may move a consumer's offset."""
    c, logs = cluster
    a = c.broker_names[0]
    store = c.store(a)
    assert isinstance(store, DLedgerMessageStore) and store.ledger_loop is not None
    ctx = c.broker(a).ctx
    assert ctx is not None and ctx.dledger_role is not None
    handler = ctx.dledger_role
    log = logs[a]
    addr = c.broker_addrs[a]
    log.ledger_end_pos = log.committed_pos
    store.ledger_loop.loop.call_soon_threadsafe(log.force, LogState(Role.LEADER, 3, "n0", "n0", addr))
    wait_until(lambda: handler.history[-1] == ("LEADER", 3) and ctx.is_master, "master in term 3")
    assert handler.leads_current_term()

    def flip() -> None:  # one callback on the log's loop (the broker's): the handler sees term 5 only
        log.force(LogState(Role.FOLLOWER, 4, "n0", "n1", None))
        log.ledger_end_pos = log.committed_pos + 100  # entries this leader still has to commit
        log.force(LogState(Role.LEADER, 5, "n0", "n0", addr))

    store.ledger_loop.loop.call_soon_threadsafe(flip)
    wait_until(
        lambda: not ctx.is_master, "the term-5 leader gives up the master role while it catches up", 10
    )
    assert not handler.leads_current_term() and not store.commitlog.writable
    past = asyncio.run(raw_send(addr, pull_request(TOPIC, 50)))
    assert past.code == ResponseCode.PULL_RETRY_IMMEDIATELY and past.ext_fields["nextBeginOffset"] == "50"
    log.ledger_end_pos = log.committed_pos
    wait_until(lambda: handler.history[-1] == ("LEADER", 5) and ctx.is_master, "master in term 5")
    assert handler.leads_current_term() and store.commitlog.writable
    moved = asyncio.run(raw_send(addr, pull_request(TOPIC, 50)))
    assert moved.code == ResponseCode.PULL_OFFSET_MOVED, moved


def test_regression_a_master_reading_across_a_queue_offset_hole_keeps_its_consumer_in_place(
    cluster: tuple[InProcessCluster, dict[str, SteeredLog]],
) -> None:
    """Issue 17 end to end: a queue offset given out and never appended leaves the next units one
    place early; the first pull across them finds a unit disagreeing with its record and the
    queue is rebuilt. The rebuild read no entries in DLedger mode, so the queue came out empty
    and the master answered PULL_OFFSET_MOVED to offset 0; now the pull gets its messages."""
    c, _logs = cluster
    a = c.broker_names[0]
    store = c.store(a)
    assert isinstance(store, DLedgerMessageStore)
    addr = c.broker_addrs[a]

    def send(body: bytes) -> int:
        sent = asyncio.run(raw_send(addr, send_request(TOPIC, body, queue_id=0)))
        assert sent.code == ResponseCode.SUCCESS, sent.remark
        return int(sent.ext_fields["queueOffset"])

    assert [send(f"a{i}".encode()) for i in range(3)] == [0, 1, 2]
    with store.commitlog._put_lock:
        store.commitlog.topic_queue_table[(TOPIC, 0)] += 1  # offset 3 given out, never appended
    assert [send(f"b{i}".encode()) for i in range(3)] == [4, 5, 6]
    wait_until(lambda: store.get_max_offset(TOPIC, 0) == 6, "six units dispatched")
    pulled = asyncio.run(raw_send(addr, pull_request(TOPIC, 5)))
    assert pulled.code == ResponseCode.SUCCESS, pulled
    assert [r.body for r in pulled_records(pulled.body)] == [b"b1", b"b2"]
    assert pulled.ext_fields["nextBeginOffset"] == "7" and store.stats.queues_rebuilt == 1
    from_start = asyncio.run(raw_send(addr, pull_request(TOPIC, 0)))
    assert [r.body for r in pulled_records(from_start.body)] == [b"a0", b"a1", b"a2"]
