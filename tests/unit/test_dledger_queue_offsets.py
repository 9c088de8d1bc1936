"""Queue offsets of a DLedger store on a group of one (real entry store files): an offset is
taken only by a message that is appended, so a queue's messages carry consecutive queue offsets
with no hole and no repeat (issue 17), a queue-offset table rebuilt from queues that hold a
hole (from before this rule) never hands out an offset a message already has, and a member that
leads a new term has its table rebuilt by the store itself before it takes a put."""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterator

import pytest

from _support.steered_log import SteeredLog
from _support.wait import wait_until
from rocketq.config import StoreConfig
from rocketq.errors import DiskFull, ServiceNotAvailable
from rocketq.ha.entry_store import EntryStore
from rocketq.ha.group_config import LedgerSpec, open_ledger
from rocketq.ha.raft_types import Role
from rocketq.ha.replicated_log import LogState, ReplicatedLog
from rocketq.message import Message
from rocketq.store.dledger_store import DLedgerMessageStore
from rocketq.store.message_store import open_message_store
from rocketq.store.store_queries import GetMessageStatus


@pytest.fixture
def store(store_config: StoreConfig) -> Iterator[DLedgerMessageStore]:
    cfg = dataclasses.replace(store_config, enable_dleger_commit_log=True, d_leger_self_id="n0")
    with open_message_store(cfg) as s:
        assert isinstance(s, DLedgerMessageStore)
        yield s


def _queue(store: DLedgerMessageStore, qid: int = 0) -> list[tuple[int, bytes]]:
    """(queue offset in the record, body) of every message of queue ``qid`` of T, in the
    queue's order, once dispatch has reached the committed end."""
    assert store.wait_dispatched(10)
    g = store.get_message("G", "T", qid, 0, 1000)
    assert g.status is GetMessageStatus.FOUND, g.status
    return [(m.queue_offset, m.body) for m in g.messages]


def test_a_put_whose_record_cannot_be_packed_takes_no_queue_offset(store: DLedgerMessageStore) -> None:
    """The record is packed after the queue offset is known; a value the record's layout cannot
    hold (a flag past 32 bits) fails the pack. Nothing is appended then, and the next message
    of the queue takes the offset that one would have had (it used to skip it: a hole, the
    queue's next units one place early)."""
    assert store.put_message(Message("T", b"a"), queue_id=0).queue_offset == 0
    with pytest.raises(struct.error):
        store.put_message(Message("T", b"bad", flag=1 << 31), queue_id=0)
    assert store.put_message(Message("T", b"b"), queue_id=0).queue_offset == 1
    assert _queue(store) == [(0, b"a"), (1, b"b")]


def test_a_put_the_entry_store_cannot_write_takes_no_queue_offset(
    store: DLedgerMessageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk when the entry is written (after its record was encoded for its offset):
    nothing is appended and the queue offset stays free for the next message."""
    assert store.put_message(Message("T", b"a"), queue_id=0).queue_offset == 0
    append = EntryStore.append

    def full(self: EntryStore, *args: object, **kwargs: object) -> tuple[int, int]:
        raise DiskFull("disk full: cannot write the entry")

    monkeypatch.setattr(EntryStore, "append", full)
    with pytest.raises(DiskFull):
        store.put_message(Message("T", b"lost"), queue_id=0)
    with pytest.raises(DiskFull):
        store.put_messages([Message("T", b"x"), Message("T", b"y")], queue_id=0)
    monkeypatch.setattr(EntryStore, "append", append)
    assert store.put_message(Message("T", b"b"), queue_id=0).queue_offset == 1
    assert _queue(store) == [(0, b"a"), (1, b"b")]


def test_a_queue_offset_table_rebuilt_over_a_hole_hands_out_no_offset_twice(
    store: DLedgerMessageStore,
) -> None:
    """A queue whose messages skip a queue offset (given out and never appended, by a store
    from before the rule above) has one unit fewer than its last message's offset + 1. The
    table a new leader rebuilds (``recover_topic_queue_table``) counted units and handed out
    the last message's offset again; the rebuilt queue then kept one of the two and the other
    was lost to consumers. The table continues after the queue's last message instead."""
    for body in (b"a", b"b"):
        store.put_message(Message("T", body), queue_id=0)
    cl = store.commitlog
    with cl._put_lock:  # an offset given out and never appended
        cl.topic_queue_table[("T", 0)] += 1
    for body in (b"c", b"d"):
        store.put_message(Message("T", body), queue_id=0)
    assert store.wait_dispatched(10)
    cq = store.find_consume_queue("T", 0)
    assert cq is not None and cq.max_offset_in_queue == 4  # one unit fewer than the offsets
    last = cq.get_unit(3)
    assert last is not None and store.look_message_by_offset(last.offset).queue_offset == 4
    store.recover_topic_queue_table()
    assert store.next_queue_offset("T", 0) == 5
    assert store.put_message(Message("T", b"e"), queue_id=0).queue_offset == 5
    assert store.next_queue_offset("T", 1) == 0  # a queue with no message: none


def test_a_last_unit_that_names_another_queues_record_leaves_the_unit_count(
    store: DLedgerMessageStore,
) -> None:
    """The table reads the record the queue's last unit names only when it is that queue's
    (its size, a message's magic code, its queue id): a unit naming another record's bytes does
    not move the queue's next offset to that record's queue offset."""
    store.put_message(Message("T", b"a"), queue_id=0)
    other = [store.put_message(Message("T", b"q1-%d" % i), queue_id=1) for i in range(5)]
    assert store.wait_dispatched(10)
    cq = store.find_consume_queue("T", 0)
    assert cq is not None
    last = other[-1]
    assert cq.put_message_position_info(last.physical_offset, last.size, 0, 1)  # names queue 1's
    assert cq.max_offset_in_queue == 2
    store.recover_topic_queue_table()
    assert store.next_queue_offset("T", 0) == 2 and store.next_queue_offset("T", 1) == 5


@pytest.fixture
def steered(store_config: StoreConfig) -> Iterator[tuple[DLedgerMessageStore, SteeredLog]]:
    logs: list[SteeredLog] = []

    def factory(spec: LedgerSpec) -> ReplicatedLog:
        logs.append(SteeredLog(open_ledger(spec)))
        return logs[-1]

    cfg = dataclasses.replace(store_config, enable_dleger_commit_log=True, d_leger_self_id="n0")
    with DLedgerMessageStore(cfg, ledger_factory=factory) as s:
        yield s, logs[0]


def test_a_leader_of_a_new_term_refuses_puts_until_its_table_is_rebuilt_once_for_that_term(
    steered: tuple[DLedgerMessageStore, SteeredLog],
) -> None:
    """With no broker and nobody calling ``recover_topic_queue_table``: a member that leads a
    new term refuses puts with the definite SERVICE_NOT_AVAILABLE of a leader catching up
    (nothing appended) while its log is not caught up, then the store rebuilds its table from
    its queues, once for the term, and its puts continue the queue. A follower is refused by
    its log as before (NOT_LEADER, naming no catch-up)."""
    store, log = steered
    assert store.leader_table is not None and store.ledger_loop is not None
    assert store.leads_caught_up() and store.queue_table_term == 1  # a group of one: at open
    assert store.leader_table.rebuilds == 1
    for body in (b"a", b"b"):
        store.put_message(Message("T", body), queue_id=0)
    loop = store.ledger_loop

    def force(state: LogState) -> None:  # on the log's loop, as a Raft member's changes come
        async def on_loop() -> None:
            log.force(state)

        loop.run(on_loop(), 5)

    force(LogState(Role.FOLLOWER, 2, "n0", "n1", None))
    assert not store.leads_caught_up()
    with pytest.raises(ServiceNotAvailable, match="not the leader of its DLedger group"):
        store.put_message(Message("T", b"x"), queue_id=0)
    cl = store.commitlog
    with cl._put_lock:  # a table from before: another leader numbered the queue meanwhile
        cl.topic_queue_table[("T", 0)] = 0
    log.ledger_end_pos = cl.max_offset + 100  # entries this leader still has to commit
    force(LogState(Role.LEADER, 3, "n0", "n0", None))
    committed = cl.max_offset
    with pytest.raises(ServiceNotAvailable, match="DLedger leader of term 3 is catching up"):
        store.put_message(Message("T", b"y"), queue_id=0)
    with pytest.raises(ServiceNotAvailable, match="catching up"):
        store.put_messages([Message("T", b"y"), Message("T", b"z")], queue_id=0)
    assert cl.max_offset == committed and store.next_queue_offset("T", 0) == 0  # nothing taken
    log.ledger_end_pos = None  # all committed (and dispatched): the store rebuilds by itself
    wait_until(store.leads_caught_up, "the leader's table rebuilt for term 3", 10)
    assert store.queue_table_term == 3 and store.next_queue_offset("T", 0) == 2
    assert store.put_message(Message("T", b"c"), queue_id=0).queue_offset == 2
    assert store.reput is not None
    for _ in range(3):  # more steps of dispatch, each followed by the check: no second rebuild
        store.reput.step()
    assert store.leader_table.rebuilds == 2
    assert _queue(store) == [(0, b"a"), (1, b"b"), (2, b"c")]
