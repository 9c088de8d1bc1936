"""Retention in DLedger mode on a real Raft group: three DLedger stores in this process, each
member's log on its own loop thread, real sockets on 127.0.0.1 and real files, 64 KiB data
files and no reserved time. A retention run deletes the expired data files on every member,
moves the CommitLog's and the queues' minimum offsets, keeps what a stopped follower has not
got until it caught up, and a member restarted after deleting recovers from its first data
file with consistent dispatch."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import pathlib
import shutil
from collections.abc import Iterator

import pytest

from _support.procs import free_port
from _support.requests import pull_request
from _support.wait import wait_until
from rocketq.client import Admin, LitePullConsumer, Producer, SendStatus
from rocketq.client import Message as ClientMessage
from rocketq.config import StoreConfig
from rocketq.errors import ResponseCode
from rocketq.ha.driver import RaftGroupLog
from rocketq.ha.raft_types import Role
from rocketq.message import Message
from rocketq.remoting import RemotingClient, RemotingCommand
from rocketq.store.dledger_store import DLedgerMessageStore
from rocketq.store.message_store import open_message_store
from rocketq.store.store_queries import GetMessageStatus
from rocketq.testing import InProcessCluster

IDS = ("n0", "n1", "n2")
TOPIC = "T"
BODY = 1000  # about 60 records per 64 KiB data file


class Group:
    def __init__(self, tmp_path: pathlib.Path, base: StoreConfig) -> None:
        peers = ";".join(f"{i}-127.0.0.1:{free_port()}" for i in IDS)
        self.configs = {
            i: dataclasses.replace(
                base,
                store_path_root_dir=str(tmp_path / i),
                mapped_file_size_commit_log=64 * 1024,
                mapped_file_size_consume_queue=20 * 50,
                enable_dleger_commit_log=True,
                d_leger_group="g",
                d_leger_peers=peers,
                d_leger_self_id=i,
                enable_batch_push=True,
                d_leger_election_timeout_ms=1000,  # no spurious elections on a loaded machine
                d_leger_heartbeat_interval_ms=100,
                file_reserved_time_hours=0,
                clean_resource_interval_ms=3_600_000,  # runs only when the test asks
            )
            for i in IDS
        }
        self.stores: dict[str, DLedgerMessageStore] = {}
        self.sent = 0

    def start(self, i: str) -> DLedgerMessageStore:
        store = open_message_store(self.configs[i])
        assert isinstance(store, DLedgerMessageStore)
        store.start()
        self.stores[i] = store
        return store

    def stop(self, i: str) -> None:
        self.stores.pop(i).shutdown()

    def leader(self) -> DLedgerMessageStore:
        def one() -> DLedgerMessageStore | None:
            leaders = [s for s in self.stores.values() if s.ledger is not None and s.leads_caught_up()]
            return leaders[0] if len(leaders) == 1 else None

        return wait_until(one, "one leader", 30)

    def put(self, n: int) -> None:
        leader = self.leader()
        for _ in range(n):
            leader.put_message(Message(TOPIC, self.sent.to_bytes(4, "big") + bytes(BODY)), queue_id=0)
            self.sent += 1

    def settled(self) -> None:
        """Every running member committed and dispatched everything; the leader knows each
        running follower has it."""
        leader = self.leader()
        end = leader.commitlog.max_offset
        for s in self.stores.values():
            # at least: a leader elected meanwhile (a member starved past its election timeout on
            # a loaded machine) commits its no-op entry past ``end``
            wait_until(lambda s=s: s.commitlog.max_offset >= end, "the member committed everything", 30)
            assert s.wait_dispatched(30)
            wait_until(lambda s=s: s.get_max_offset(TOPIC, 0) == self.sent, "every message in the queue", 30)
        ledger = leader.ledger
        assert isinstance(ledger, RaftGroupLog)
        running = {ledger.config.self_id for ledger in self._ledgers()} - {ledger.config.self_id}
        last = ledger.store.ledger_end_index
        wait_until(
            lambda: all((ledger.follower_match_indexes() or {}).get(f, -1) >= last for f in running),
            "the leader knowing its followers have everything",
            30,
        )

    def _ledgers(self) -> list[RaftGroupLog]:
        out = []
        for s in self.stores.values():
            assert isinstance(s.ledger, RaftGroupLog)
            out.append(s.ledger)
        return out


def data_files(store: DLedgerMessageStore) -> list[int]:
    ledger = store.ledger
    assert isinstance(ledger, RaftGroupLog)
    return sorted(int(n) for n in os.listdir(ledger.store.data_dir))


def readable_from(store: DLedgerMessageStore) -> int:
    """Checks every message from the queue's minimum offset on is readable with its body; returns
    that minimum."""
    low = store.get_min_offset(TOPIC, 0)
    offset = low
    while offset < store.get_max_offset(TOPIC, 0):
        r = store.get_message("g", TOPIC, 0, offset, 32)
        assert r.status is GetMessageStatus.FOUND, (offset, r.status)
        for m in r.messages:
            assert int.from_bytes(m.body[:4], "big") == m.queue_offset
        offset = r.next_begin_offset
    return low


@pytest.fixture
def group(tmp_path: pathlib.Path, store_config: StoreConfig) -> Iterator[Group]:
    g = Group(tmp_path, store_config)
    try:
        for i in IDS:
            g.start(i)
        yield g
    finally:
        for i in list(g.stores):
            g.stop(i)


def test_retention_deletes_on_every_member_and_holds_for_a_stopped_follower(
    group: Group, caplog: pytest.LogCaptureFixture
) -> None:
    group.put(400)
    group.settled()
    before = {i: data_files(s) for i, s in group.stores.items()}
    assert all(len(f) >= 6 for f in before.values()), before

    for s in group.stores.values():
        s.run_retention_now()
    for i, s in group.stores.items():
        left = data_files(s)
        assert len(left) <= 2 and left[0] > 0, (i, left)  # the last file or two stay
        assert s.commitlog.min_offset == left[0]
        assert s.runtime_info()["commitLogMinOffset"] == str(left[0])
        assert s.commitlog.get_message(before[i][0] + 48) is None  # the first record is gone
        low = readable_from(s)
        assert 0 < low < group.sent
        below = s.get_message("g", TOPIC, 0, 0, 32)
        assert below.status is GetMessageStatus.OFFSET_TOO_SMALL and below.next_begin_offset == low
        # the ConsumeQueue files wholly below the new minimum went too (50 units a file)
        cq_dir = pathlib.Path(s.config.store_path_root_dir) / "consumequeue" / TOPIC / "0"
        assert min(int(n) for n in os.listdir(cq_dir)) > 0

    # a stopped follower holds back the files it has not got
    leader = group.leader()
    assert isinstance(leader.ledger, RaftGroupLog)
    stopped = next(i for i in IDS if i != leader.ledger.config.self_id)
    group.stop(stopped)
    group.put(300)
    group.settled()
    kept = data_files(leader)
    with caplog.at_level(logging.WARNING, logger="rocketq.store.dledger_retention"):
        leader.run_retention_now()
    assert data_files(leader) == kept  # everything written since it stopped stays
    assert any(f"follower {stopped} holds back" in r.getMessage() for r in caplog.records)

    # back, it catches up from the leader; then the files go, on each member by its own
    # positions (a follower does not know the others': were it to lead now, a member behind
    # its first file would need a rebuild, so the running follower deletes only afterwards)
    group.start(stopped)
    group.settled()
    leader = group.leader()
    leader.run_retention_now()
    assert len(data_files(leader)) < len(kept)
    readable_from(leader)
    for s in group.stores.values():
        s.run_retention_now()
        assert len(data_files(s)) <= 2
        readable_from(s)


def test_a_member_restarted_after_deletion_recovers_from_its_first_data_file(group: Group) -> None:
    group.put(300)
    group.settled()
    for s in group.stores.values():
        s.run_retention_now()
    leader = group.leader()
    assert isinstance(leader.ledger, RaftGroupLog)
    lid = leader.ledger.config.self_id
    for i in [*(i for i in IDS if i != lid), lid]:  # the followers, then the leader
        begin = group.stores[i].ledger.store.ledger_begin_index  # type: ignore[union-attr]
        first = data_files(group.stores[i])[0]
        low = group.stores[i].get_min_offset(TOPIC, 0)
        assert begin > 0
        group.stop(i)
        s = group.start(i)
        assert isinstance(s.ledger, RaftGroupLog)
        assert s.ledger.store.ledger_begin_index == begin and data_files(s)[0] == first
        assert s.commitlog.min_offset == first
        assert s.get_max_offset(TOPIC, 0) == group.sent and readable_from(s) == low
    # the group still takes writes and every member gets them
    group.put(100)
    group.settled()
    for s in group.stores.values():
        readable_from(s)


def test_a_follower_whose_entries_were_deleted_is_refused_and_rebuilt_from_a_copy(
    group: Group, caplog: pytest.LogCaptureFixture
) -> None:
    group.put(200)
    group.settled()
    leader = group.leader()
    assert isinstance(leader.ledger, RaftGroupLog)
    lid = leader.ledger.config.self_id
    lagging, healthy = (i for i in IDS if i != lid)
    group.stop(lagging)
    group.put(300)
    group.settled()
    # above the forcibly ratio with the switch on, the leader deletes what the stopped one lacks
    forced = dataclasses.replace(
        leader.config, d_leger_retention_ignore_lagging_member=True, delete_when=";".join(map(str, range(24)))
    )
    with caplog.at_level(logging.WARNING):
        leader.retention_service(usage=lambda: 0.87, config=forced).run_once()
    assert any(f"follower {lagging} has not got" in r.getMessage() for r in caplog.records)
    assert leader.ledger.store.ledger_begin_index > 0

    # back, it needs entries the leader no longer has: refused once, logged, nothing else stops
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="rocketq.ha.raft"):
        back = group.start(lagging)
        wait_until(lambda: lagging in leader.ledger.node.unservable, "the leader refusing the follower", 30)  # type: ignore[union-attr]
        group.put(50)
        wait_until(
            lambda: group.stores[healthy].get_max_offset(TOPIC, 0) == group.sent, "the healthy follower", 30
        )
    refusals = [r.getMessage() for r in caplog.records if "needs entries from index" in r.getMessage()]
    assert len(refusals) == 1 and f"follower {lagging}" in refusals[0]
    assert back.get_max_offset(TOPIC, 0) < group.sent and leader.ledger.state.role is Role.LEADER

    # the operator's rebuild (docs/replication.md): both stopped, the healthy follower's entry
    # store copied in, the lagging one's own currterm kept, its ConsumeQueues and index rebuilt
    group.stop(lagging)
    group.stop(healthy)
    src = pathlib.Path(group.configs[healthy].store_path_root_dir)
    dst = pathlib.Path(group.configs[lagging].store_path_root_dir)
    mine = dst / f"dledger-{lagging}"
    for name in ("data", "index", "checkpoint"):
        target = mine / name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
        copy = shutil.copytree if (src / f"dledger-{healthy}" / name).is_dir() else shutil.copy2
        copy(src / f"dledger-{healthy}" / name, target)
    for name in ("consumequeue", "index"):
        shutil.rmtree(dst / name, ignore_errors=True)
    for name in ("checkpoint", "abort"):
        (dst / name).unlink(missing_ok=True)
    group.start(healthy)
    group.start(lagging)
    group.settled()  # the rebuilt member has every message again and follows the leader
    rebuilt = group.stores[lagging]
    assert rebuilt.get_max_offset(TOPIC, 0) == group.sent
    assert readable_from(rebuilt) == readable_from(group.stores[healthy])
    group.put(20)
    group.settled()


# -- a broker in DLedger mode: the admin command, the runtime info and a real consumer ---------


def test_delete_expired_commitlog_on_a_dledger_broker_and_a_consumer_moves_to_the_new_minimum(
    tmp_path: pathlib.Path,
) -> None:
    options = {
        "enable_dleger_commit_log": True,
        "d_leger_self_id": "n0",
        "mapped_file_size_commit_log": 64 * 1024,
        "mapped_file_size_consume_queue": 20 * 50,
        "file_reserved_time_hours": 0,
        "clean_resource_interval_ms": 3_600_000,
    }
    with InProcessCluster(1, data_dir=str(tmp_path), store_options=options) as c:
        c.create_topic(TOPIC, 1)
        with Producer("RetPG", namesrv_addr=c.namesrv_addr) as p:
            for n in range(300):
                assert (
                    p.send(ClientMessage(TOPIC, n.to_bytes(4, "big") + bytes(BODY))).status
                    is SendStatus.SEND_OK
                )
        c.wait_dispatched()
        addr = next(iter(c.broker_addrs.values()))
        with Admin(c.namesrv_addr) as admin:
            remarks = admin.delete_expired_commitlog(broker_addr=addr)
            info = admin.broker_runtime_info(addr)
        assert list(remarks) == [addr] and "CommitLog min offset 0 ->" in remarks[addr]
        low_phy = int(info["commitLogMinOffset"])
        assert (
            low_phy > 0 and int(info["dledgerDeletedDataFiles"]) >= 4 and int(info["dledgerBeginIndex"]) > 0
        )
        store = c.store()
        low = store.get_min_offset(TOPIC, 0)
        assert 0 < low < 300

        # a pull below the minimum is told where the queue begins now
        async def pull_zero() -> RemotingCommand:
            client = RemotingClient()
            try:
                return await client.invoke(addr, pull_request(TOPIC, 0, group="RetCG"), 5)
            finally:
                await client.close()

        r = asyncio.run(pull_zero())
        assert r.code == ResponseCode.PULL_OFFSET_MOVED and int(r.ext_fields["nextBeginOffset"]) == low

        # a consumer from the first offset gets exactly what is left, in order
        got: list[int] = []
        consumer = LitePullConsumer(
            "RetLite", namesrv_addr=c.namesrv_addr, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
        )
        consumer.subscribe(TOPIC, "*")
        with consumer:
            wait_until(
                lambda: (
                    len(got) >= 300 - low
                    or bool(got.extend(int.from_bytes(m.body[:4], "big") for m in consumer.poll(200)))
                ),
                "the messages left",
                30,
            )
        assert got == list(range(low, 300))
