"""Queue offsets on a Raft group: three DLedger stores in this process (each member's log on a
loop thread of its own, real sockets on 127.0.0.1, real files). The puts of one caller-loop
iteration are proposed together; a put of the proposal that is not appended (its record cannot
be packed, the leader refuses part of the proposal) takes no queue offset, so the messages of a
queue carry consecutive queue offsets with no hole and no repeat on every member (issue 17)."""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib
import struct
from collections.abc import Iterator

import pytest

from _support.dledger_stores import store_group
from _support.wait import wait_until
from rocketq.config import StoreConfig
from rocketq.errors import ServiceNotAvailable, SystemBusy
from rocketq.ha.driver import RaftGroupLog, config_of
from rocketq.ha.group_config import LedgerSpec
from rocketq.ha.raft_types import Role
from rocketq.ha.replicated_log import ReplicatedLog
from rocketq.message import BrokerMessage, Message
from rocketq.store.commitlog import PutMessageResult
from rocketq.store.dledger_appends import ReplicationError
from rocketq.store.dledger_store import DLedgerMessageStore
from rocketq.store.store_queries import GetMessageStatus

#: appends the leader keeps waiting for their quorum: a proposal of more is refused in part (BUSY)
MAX_PENDING = 2


def _ledger(spec: LedgerSpec) -> ReplicatedLog:
    return RaftGroupLog(dataclasses.replace(config_of(spec), max_pending_appends=MAX_PENDING))


@pytest.fixture
def group(tmp_path: pathlib.Path, store_config: StoreConfig) -> Iterator[list[DLedgerMessageStore]]:
    with store_group(
        store_config, tmp_path, open_store=lambda cfg: DLedgerMessageStore(cfg, ledger_factory=_ledger)
    ) as stores:
        yield stores


def _leader(stores: list[DLedgerMessageStore], *, taking_puts: bool = True) -> DLedgerMessageStore:
    """The one leader among ``stores``; with ``taking_puts``, once it takes puts (its log caught
    up and dispatched, its queue-offset table rebuilt for its term: until then it refuses them)."""

    def find() -> DLedgerMessageStore | None:
        leaders = [s for s in stores if s.ledger is not None and s.ledger.state.role is Role.LEADER]
        if len(leaders) != 1 or (taking_puts and not leaders[0].leads_caught_up()):
            return None
        return leaders[0]

    return wait_until(find, "a leader", 30)


def _msg(body: bytes, flag: int = 0) -> BrokerMessage:
    return BrokerMessage.from_message(Message("T", body, flag=flag), 0)


Outcome = PutMessageResult | Exception


def _put_together(store: DLedgerMessageStore, puts: list[list[BrokerMessage]]) -> list[Outcome]:
    """The outcomes of ``puts`` made in one iteration of the caller's loop (one proposal)."""

    async def main() -> list[Outcome]:
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[Outcome]] = []
        for msgs in puts:
            fut: asyncio.Future[Outcome] = loop.create_future()
            store.put_messages_then(msgs, fut.set_result)
            futures.append(fut)
        return list(await asyncio.wait_for(asyncio.gather(*futures), 30))

    return asyncio.run(main())


def _queue_on_every_member(stores: list[DLedgerMessageStore], count: int) -> list[tuple[int, bytes]]:
    """(queue offset in the record, body) of queue 0 of T, the same on every member."""
    seen = []
    for store in stores:

        def full(s: DLedgerMessageStore = store) -> list[tuple[int, bytes]] | None:
            g = s.get_message("G", "T", 0, 0, 100)
            if g.status is not GetMessageStatus.FOUND or len(g.messages) < count:
                return None
            return [(m.queue_offset, m.body) for m in g.messages]

        seen.append(wait_until(full, f"{count} messages in the queue of a member", 30))
    assert all(s == seen[0] for s in seen), seen
    return seen[0]


def test_a_put_whose_record_cannot_be_packed_leaves_no_hole_in_its_proposal(
    group: list[DLedgerMessageStore],
) -> None:
    """A single put and a batch message whose flag does not fit the record fail when their
    records are packed, which is after the queue offset is known; the puts proposed with them
    go on. The puts after them take the offsets they would have had (a hole used to stay: the
    next units one place early on every member)."""
    leader = _leader(group)
    first = _put_together(leader, [[_msg(b"m0")]])
    assert isinstance(first[0], PutMessageResult) and first[0].queue_offset == 0
    bad = 1 << 31  # FLAG is a 32-bit field
    batch = [_msg(b"m2"), _msg(b"y", bad), _msg(b"z")]
    outcomes = _put_together(leader, [[_msg(b"x", bad)], [_msg(b"m1")], batch])
    assert isinstance(outcomes[0], struct.error) and isinstance(outcomes[2], struct.error), outcomes
    assert isinstance(outcomes[1], PutMessageResult) and outcomes[1].queue_offset == 1, outcomes
    last = _put_together(leader, [[_msg(b"m3")], [_msg(b"m4")]])
    assert [r.queue_offset for r in last if isinstance(r, PutMessageResult)] == [3, 4], last
    # m2, the batch's message before the one that failed, is stored (a prefix of the batch)
    expected = [(0, b"m0"), (1, b"m1"), (2, b"m2"), (3, b"m3"), (4, b"m4")]
    assert _queue_on_every_member(group, 5) == expected


def test_puts_the_leader_refuses_in_part_of_a_proposal_leave_no_hole(
    group: list[DLedgerMessageStore],
) -> None:
    """The leader takes no more than MAX_PENDING appends waiting for their quorum: of four puts
    proposed together the last two are refused (SYSTEM_BUSY) after their records were encoded
    with queue offsets 2 and 3. Both offsets are free again for the next puts (their refusals,
    given back in the order they were taken, left offset 2 taken: a hole)."""
    leader = _leader(group)
    outcomes = _put_together(leader, [[_msg(f"p{i}".encode())] for i in range(4)])
    assert [r.queue_offset for r in outcomes[:2] if isinstance(r, PutMessageResult)] == [0, 1], outcomes
    assert all(isinstance(r, SystemBusy) for r in outcomes[2:]), outcomes
    # a batch refused in part: its first message appended, the second refused
    batch = _put_together(leader, [[_msg(b"q0")], [_msg(b"b0"), _msg(b"b1")]])
    assert isinstance(batch[0], PutMessageResult) and batch[0].queue_offset == 2, batch
    assert isinstance(batch[1], SystemBusy), batch
    after = _put_together(leader, [[_msg(b"after")]])
    assert isinstance(after[0], PutMessageResult) and after[0].queue_offset == 4, after
    expected = [(0, b"p0"), (1, b"p1"), (2, b"q0"), (3, b"b0"), (4, b"after")]
    assert _queue_on_every_member(group, 5) == expected


def test_a_new_leader_numbers_a_queue_after_its_committed_messages_and_the_old_one_follows(
    group: list[DLedgerMessageStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A leader whose messages stop reaching the others appends two puts that never commit:
    their queue offsets (2 and 3) were handed out, and the puts fail (outcome unknown) once it
    learns of a newer term. The new leader, caught up and its table rebuilt from its queues by
    the store itself, numbers the queue after the committed messages (2 and 3
    again, for its own); the old leader drops its uncommitted entries for the new leader's
    and its queue, built from committed entries only, is the same as everyone's."""
    old = _leader(group)
    first = _put_together(old, [[_msg(b"m0")], [_msg(b"m1")]])
    assert [r.queue_offset for r in first if isinstance(r, PutMessageResult)] == [0, 1], first
    _queue_on_every_member(group, 2)
    ledger = old.ledger
    assert isinstance(ledger, RaftGroupLog)
    transport = ledger.transport
    monkeypatch.setattr(transport, "send", lambda message: True)  # nothing leaves it
    lost = _put_together(old, [[_msg(b"lost2")], [_msg(b"lost3")]])
    assert all(isinstance(r, ReplicationError) for r in lost), lost
    wait_until(lambda: ledger.state.role is not Role.LEADER, "the old leader stepping down", 30)
    assert old.next_queue_offset("T", 0) == 4  # handed out, appended here, never committed
    others = [s for s in group if s is not old]
    new = _leader(others)  # caught up: its table rebuilt from its queues by the store itself
    assert new.next_queue_offset("T", 0) == 2
    mine = _put_together(new, [[_msg(b"n2")], [_msg(b"n3")]])
    assert [r.queue_offset for r in mine if isinstance(r, PutMessageResult)] == [2, 3], mine
    monkeypatch.undo()  # the old leader's messages get through again: it follows and catches up
    expected = [(0, b"m0"), (1, b"m1"), (2, b"n2"), (3, b"n3")]
    assert _queue_on_every_member(group, 4) == expected


def _put_when_taken(store: DLedgerMessageStore, body: bytes) -> PutMessageResult:
    """A put of ``body`` to queue 0 of T, made again while ``store``, a new leader, refuses it
    as catching up (the definite refusal, SERVICE_NOT_AVAILABLE: nothing was appended); any
    other outcome is the put's."""

    def attempt() -> PutMessageResult | None:
        try:
            outcome = _put_together(store, [[_msg(body)]])[0]
        except ServiceNotAvailable as exc:  # refused before anything was appended
            assert "catching up" in str(exc), exc
            return None
        assert isinstance(outcome, PutMessageResult), outcome
        return outcome

    return wait_until(attempt, f"the new leader taking the put of {body!r}", 30)


@pytest.mark.parametrize("change", ["transfer", "stop"])
def test_an_embedded_new_leader_numbers_its_queues_after_the_committed_messages_by_itself(
    group: list[DLedgerMessageStore], change: str
) -> None:
    """No broker, no role handler, nobody calling ``recover_topic_queue_table``: after a
    leadership transfer, or the leader's stop, the new leader's puts continue each queue after
    the messages the old leader committed (it handed out offset 0 again, from the table it
    opened with), and every running member's ConsumeQueue holds the same messages at the same
    offsets. Puts made as soon as it leads are refused as catching up, or numbered right."""
    old = _leader(group)
    first = _put_together(old, [[_msg(b"m0")], [_msg(b"m1")]])
    assert [r.queue_offset for r in first if isinstance(r, PutMessageResult)] == [0, 1], first
    _queue_on_every_member(group, 2)
    others = [s for s in group if s is not old]
    if change == "transfer":
        target = others[0]
        assert old.ledger is not None and old.ledger_loop is not None and target.ledger is not None
        assert old.ledger_loop.run(old.ledger.transfer_leadership(target.ledger.state.self_id), 30)
        assert _leader(group, taking_puts=False) is target
        running = group
    else:
        old.shutdown()
        target = _leader(others, taking_puts=False)
        running = others
    mine = [_put_when_taken(target, body) for body in (b"n2", b"n3")]
    assert [r.queue_offset for r in mine] == [2, 3], mine
    expected = [(0, b"m0"), (1, b"m1"), (2, b"n2"), (3, b"n3")]
    assert _queue_on_every_member(running, 4) == expected
