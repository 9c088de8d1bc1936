"""The broker's awaited put on a Raft group (``DLedgerMessageStore.quorum_put``): three
DLedger stores in this process, each member's log on its own loop thread, real sockets on
127.0.0.1 and real files. Puts awaited together on one event loop are proposed together (one
append message per follower for many entries), commit in order and reach the followers; on a
follower they are refused naming the leader; a group of one has no awaited put (its append never
waits, the writer's thread makes it)."""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from _support.dledger_stores import caught_up_leader, store_group
from _support.wait import wait_until
from rocketq.config import StoreConfig
from rocketq.errors import ServiceNotAvailable
from rocketq.ha.driver import RaftGroupLog
from rocketq.ha.raft_types import Append
from rocketq.ha.raft_types import Message as RaftMessage
from rocketq.message import BrokerMessage, Message
from rocketq.store import dledger_commitlog
from rocketq.store.dledger_store import DLedgerMessageStore
from rocketq.store.message_store import open_message_store

PUTS = 60


@pytest.fixture
def group(tmp_path: pathlib.Path, store_config: StoreConfig) -> Iterator[list[DLedgerMessageStore]]:
    with store_group(store_config, tmp_path) as stores:
        yield stores


_leader = caught_up_leader


def _leader_and_follower(
    stores: list[DLedgerMessageStore],
) -> tuple[DLedgerMessageStore, DLedgerMessageStore]:
    """The leader, and a follower once it knows that leader."""
    leader = wait_until(lambda: _leader(stores), "a leader", 30)
    assert leader.ledger is not None
    leader_id = leader.ledger.state.self_id
    follower = next(s for s in stores if s is not leader)
    wait_until(
        lambda: follower.ledger is not None and follower.ledger.state.leader_id == leader_id,
        "the follower knowing the leader",
        30,
    )
    return leader, follower


def _count_appends(leader: DLedgerMessageStore, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that gets the number of entries of each append message the leader sends."""
    ledger = leader.ledger
    assert isinstance(ledger, RaftGroupLog)
    transport = ledger.transport
    appends: list[int] = []
    send = transport.send

    def counting(message: RaftMessage) -> bool:
        if isinstance(message, Append) and message.entries:
            appends.append(len(message.entries))
        return send(message)

    monkeypatch.setattr(transport, "send", counting)
    return appends


def _msg(body: bytes) -> BrokerMessage:
    return BrokerMessage.from_message(Message("T", body), 0)


def test_puts_awaited_together_are_proposed_together_and_commit_in_order(
    group: list[DLedgerMessageStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    leader = wait_until(lambda: _leader(group), "a leader", 30)
    put = leader.quorum_put()
    assert put is not None
    appends = _count_appends(leader, monkeypatch)  # entries per append message the leader sends

    async def put_all() -> list[tuple[int, int]]:
        results = await asyncio.gather(*(put([_msg(f"m{i}".encode())]) for i in range(PUTS)))
        return [(r.queue_offset, r.physical_offset) for r in results]

    placed = asyncio.run(put_all())
    # one queue offset each, in the order of the log
    assert sorted(q for q, _ in placed) == list(range(PUTS))
    assert [q for q, _ in sorted(placed, key=lambda x: x[1])] == list(range(PUTS))
    bodies = {q: f"m{i}".encode() for i, (q, _) in enumerate(placed)}
    for store in group:
        for q, off in placed:
            m = wait_until(lambda s=store, o=off: s.look_message_by_offset(o), f"record {q} on a member", 30)
            assert m.queue_offset == q and m.body == bodies[q]
    # proposed in one go: each follower got them in a few messages, not one per entry
    assert sum(appends) >= 2 * PUTS and len(appends) <= PUTS // 2, appends


def test_an_awaited_put_on_a_follower_is_refused_naming_the_leader(group: list[DLedgerMessageStore]) -> None:
    leader, follower = _leader_and_follower(group)
    assert leader.ledger is not None
    put = follower.quorum_put()
    assert put is not None

    async def put_one() -> None:
        await put([_msg(b"no")])

    with pytest.raises(ServiceNotAvailable, match=f"the leader is {leader.ledger.state.self_id}"):
        asyncio.run(put_one())


def test_a_group_of_one_has_no_awaited_put(store_config: StoreConfig) -> None:
    cfg = dataclasses.replace(store_config, enable_dleger_commit_log=True, d_leger_self_id="n0")
    with open_message_store(cfg) as store:
        assert isinstance(store, DLedgerMessageStore)
        assert store.quorum_put() is None
        assert store.put_message(Message("T", b"x"), queue_id=0).queue_offset == 0


def _batch(tag: str, n: int) -> list[BrokerMessage]:
    return [_msg(f"{tag}-{i}".encode()) for i in range(n)]


def _placed(store: DLedgerMessageStore, offsets: list[int]) -> list[tuple[int, bytes]]:
    """(queue offset, body) of the records at ``offsets`` on ``store``, once it has them all."""
    out = []
    for off in offsets:
        m = wait_until(lambda o=off: store.look_message_by_offset(o), f"the record at {off}", 30)
        out.append((m.queue_offset, m.body))
    return out


def test_a_batch_is_one_run_of_entries_with_consecutive_queue_offsets_amid_other_puts(
    group: list[DLedgerMessageStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches and single puts to one queue awaited together: each batch's messages are
    appended as one run (consecutive entries and queue offsets, nothing of another put in
    between), and each follower gets a batch's entries in one append message, not one message
    per entry as when a batch's appends went one after the other."""
    leader = wait_until(lambda: _leader(group), "a leader", 30)
    put = leader.quorum_put()
    assert put is not None
    appends = _count_appends(leader, monkeypatch)
    batches = [_batch(f"b{k}", 10) for k in range(6)]

    async def put_all() -> tuple[list[Any], list[Any]]:
        singles = [put([_msg(f"s{i}".encode())]) for i in range(12)]
        grouped = [put(b) for b in batches]
        done = await asyncio.gather(*singles, *grouped)
        return done[:12], done[12:]

    singles, results = asyncio.run(put_all())
    assert sorted(r.queue_offset for r in singles + results) == sorted(
        [r.queue_offset for r in singles] + [r.queue_offset for r in results]
    )
    taken: set[int] = {r.queue_offset for r in singles}
    for batch, r in zip(batches, results, strict=True):
        assert r.msg_num == 10 and len(r.physical_offsets) == 10
        for store in group:
            placed = _placed(store, r.physical_offsets)
            assert placed == [(r.queue_offset + i, m.body) for i, m in enumerate(batch)]
        taken.update(range(r.queue_offset, r.queue_offset + 10))
    assert taken == set(range(12 + 60))  # every queue offset once, no hole
    # the 72 entries reached each follower in a few messages (batch push), not one per entry
    assert sum(appends) >= 2 * 72 and len(appends) <= 12, appends


def test_a_writer_thread_batch_on_a_group_commits_as_one_run(group: list[DLedgerMessageStore]) -> None:
    leader = wait_until(lambda: _leader(group), "a leader", 30)
    batch = _batch("t", 25)
    r = leader.put_messages(batch)  # this thread is not the log's loop: it waits here
    assert r.status.name == "PUT_OK" and r.msg_num == 25 and r.queue_offset == 0
    for store in group:
        assert _placed(store, r.physical_offsets) == [(i, m.body) for i, m in enumerate(batch)]


def test_a_batch_on_a_follower_is_refused_naming_the_leader(group: list[DLedgerMessageStore]) -> None:
    leader, follower = _leader_and_follower(group)
    assert leader.ledger is not None
    with pytest.raises(ServiceNotAvailable, match=f"the leader is {leader.ledger.state.self_id}"):
        follower.put_messages(_batch("no", 5))


def test_a_batch_whose_message_cannot_be_encoded_stores_the_messages_before_it_and_no_later_one(
    group: list[DLedgerMessageStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What is appended of a batch is a prefix: the message that fails and every later one are
    not appended, the put fails, and the next put takes the next queue offset (no hole)."""
    leader = wait_until(lambda: _leader(group), "a leader", 30)
    put = leader.quorum_put()
    assert put is not None
    encode = dledger_commitlog._OneAppend.encode

    def failing(self: Any, physical_offset: int) -> bytes:
        if self.e[0].body == b"boom":
            raise OSError("cannot encode this one")
        return encode(self, physical_offset)

    monkeypatch.setattr(dledger_commitlog._OneAppend, "encode", failing)
    batch = [_msg(b"p0"), _msg(b"p1"), _msg(b"boom"), _msg(b"p3")]

    async def put_batch() -> Any:
        return await put(batch)

    with pytest.raises(OSError, match="cannot encode this one"):
        asyncio.run(put_batch())
    after = asyncio.run(_put_one(put, b"after"))
    assert after.queue_offset == 2
    cq = wait_until(
        lambda: (q := leader.find_consume_queue("T", 0)) is not None and q.max_offset_in_queue == 3 and q,
        "three units in the queue",
        30,
    )
    units = [cq.get_unit(i) for i in range(3)]
    bodies = [leader.look_message_by_offset(u.offset).body for u in units if u is not None]
    assert bodies == [b"p0", b"p1", b"after"]


async def _put_one(put: Any, body: bytes) -> Any:
    return await put([_msg(body)])
