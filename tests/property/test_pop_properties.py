"""PopService against a model: random receives (plain or FIFO), acks, changes of the invisible
time, clock steps, new messages, dead-letter sweeps and restarts (clean, crash-like and with a
torn journal tail).

Checked on every step: an acked message is never delivered again; a message is delivered again
only after its invisible time passed, with attempt + 1 (first deliveries have attempt 1, fresh
messages come in queue order without gaps); FIFO never delivers from a queue that has an invisible
in-flight message, and otherwise redelivers the expired ones first, in order; an ack succeeds
exactly when the handle is the message's current one and not expired; a message goes to the DLQ
only at the last attempt, and a sweep moves every expired message at its last attempt; the
group's consumer offset is the lowest offset not done. At the end, with the clock far ahead,
draining the queues accounts for every message: acked or in the DLQ.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from _support.examples import examples
from _support.wait import wait_until
from rocketq.broker.config import BrokerConfig
from rocketq.broker.pop import service as pop_service
from rocketq.broker.pop.service import PoppedMessage, PopService
from rocketq.broker.pop.standalone import standalone_context
from rocketq.broker.subscription_group import SubscriptionGroupConfig
from rocketq.config import StoreConfig
from rocketq.errors import InvalidReceiptHandle
from rocketq.message import Message
from rocketq.store import MessageStore

G = "PG"
TOPIC = "PT"
QUEUES = 2
MAX_ATTEMPTS = 3  # retry_max_times 2


@dataclass
class Held:
    queue_id: int
    offset: int
    handle: str
    attempt: int
    until_ms: int


class PopMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="rocketq-pop-prop-")
        # The dead-letter sweep is a rule of the model (``sweep``), not a background task: a task's
        # pass runs whenever the loop next runs and can straddle two rules (begun in a receive,
        # finished in the next ack), moving messages the model still counted in flight.
        self._sweep_interval_ms = pop_service.DLQ_SWEEP_INTERVAL_MS
        pop_service.DLQ_SWEEP_INTERVAL_MS = 0
        self.store = MessageStore(
            StoreConfig(
                store_path_root_dir=self.root,
                mapped_file_size_commit_log=64 * 1024,
                mapped_file_size_consume_queue=20 * 100,
                max_hash_slot_num=64,
                max_index_num=256,
            )
        )
        self.store.start()
        cfg = BrokerConfig(
            broker_name="p",
            broker_ip1="127.0.0.1",
            bind_address="127.0.0.1",
            namesrv_addr=None,
            pop_journal_compact_bytes=1500,
        )
        self.ctx = standalone_context(self.store, topics={TOPIC: QUEUES}, broker_config=cfg)
        self.ctx.groups.update(SubscriptionGroupConfig(G, retry_max_times=MAX_ATTEMPTS - 1))
        self.loop = asyncio.new_event_loop()
        self.now_ms = 1_800_000_000_000
        self.pop = self._new_pop()
        self.fifo = False
        # model
        self.stored = [0] * QUEUES  # messages put per queue
        self.next_fresh = [0] * QUEUES
        self.in_flight: dict[tuple[int, int], Held] = {}
        self.acked: set[tuple[int, int]] = set()
        self.dlq: set[tuple[int, int]] = set()
        self.handles: list[Held] = []  # every handle ever handed out (stale ones too)

    # -- plumbing ---------------------------------------------------------------------------
    def _clock(self) -> int:
        return self.now_ms

    def _new_pop(self) -> PopService:
        pop = PopService(self.ctx, clock_ms=self._clock)
        pop.start()
        return pop

    def _crash(self) -> None:
        """The old service's tasks die with it, as in a crash: its dead-letter sweeper must not
        go on committing its table's offsets beside the new service (it did, between rules,
        and made the consumer offset disagree with the new table now and then)."""
        tasks = asyncio.all_tasks(self.loop)
        for task in tasks:
            task.cancel()
        if tasks:
            self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))

    def _run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(asyncio.wait_for(coro, 60))

    def _put(self, queue_id: int, n: int) -> None:
        for _ in range(n):
            body = f"{queue_id}:{self.stored[queue_id]}".encode()
            self.store.put_message(Message(TOPIC, body), queue_id)
            self.stored[queue_id] += 1
        wait_until(
            lambda: self.store.get_max_offset(TOPIC, queue_id) >= self.stored[queue_id],
            "dispatch to catch up",
            30,
            0.001,
        )

    def teardown(self) -> None:
        try:
            self._drain_and_account()
        finally:
            pop_service.DLQ_SWEEP_INTERVAL_MS = self._sweep_interval_ms
            self.loop.close()
            self.store.shutdown()
            shutil.rmtree(self.root, ignore_errors=True)

    # -- rules ------------------------------------------------------------------------------
    @initialize(fifo=st.booleans(), counts=st.lists(st.integers(0, 6), min_size=QUEUES, max_size=QUEUES))
    def setup(self, fifo: bool, counts: list[int]) -> None:
        self.fifo = fifo
        for q, n in enumerate(counts):
            self._put(q, n)

    @rule(queue_id=st.integers(0, QUEUES - 1), n=st.integers(1, 3))
    def put(self, queue_id: int, n: int) -> None:
        self._put(queue_id, n)

    @rule(
        queue=st.one_of(st.none(), st.integers(0, QUEUES - 1)),
        max_messages=st.integers(1, 4),
        invisible_ms=st.sampled_from([1, 5, 20]),
    )
    def receive(self, queue: int | None, max_messages: int, invisible_ms: int) -> None:
        now = self.now_ms
        got: list[PoppedMessage] = self._run(
            self.pop.receive(
                group=G,
                topic=TOPIC,
                queue_id=queue,
                max_messages=max_messages,
                invisible_ms=invisible_ms,
                long_poll_ms=0,
                fifo=self.fifo,
            )
        )
        assert len(got) <= max_messages
        if queue is not None:
            assert all(m.queue_id == queue for m in got)
        by_queue: dict[int, list[PoppedMessage]] = {}
        for m in got:
            by_queue.setdefault(m.queue_id, []).append(m)
        self._account_dead_letters(now)
        for q, msgs in by_queue.items():
            mine = sorted(o for (qq, o) in self.in_flight if qq == q)
            if self.fifo:
                assert all(self.in_flight[(q, o)].until_ms <= now for o in mine), "FIFO queue was blocked"
            expired = [o for o in mine if self.in_flight[(q, o)].until_ms <= now]
            expected = expired + list(range(self.next_fresh[q], self.stored[q]))
            offsets = [m.queue_offset for m in msgs]
            assert offsets == expected[: len(offsets)], (offsets, expected)
            for m in msgs:
                key = (q, m.queue_offset)
                assert key not in self.acked and key not in self.dlq
                prev = self.in_flight.get(key)
                if prev is None:
                    assert m.queue_offset == self.next_fresh[q] and m.delivery_attempt == 1
                    self.next_fresh[q] += 1
                else:
                    assert prev.until_ms <= now and m.delivery_attempt == prev.attempt + 1
                assert m.delivery_attempt <= MAX_ATTEMPTS
                assert m.message.body == f"{q}:{m.queue_offset}".encode()
                assert m.invisible_until_ms == now + invisible_ms
                held = Held(q, m.queue_offset, m.receipt_handle, m.delivery_attempt, m.invisible_until_ms)
                self.in_flight[key] = held
                self.handles.append(held)

    def _account_dead_letters(self, now: int) -> None:
        """Messages that went to the DLQ in the last call: at their last attempt, expired, now
        done for the group."""
        for key, held in list(self.in_flight.items()):
            state = self.pop.table.states.get((G, TOPIC, key[0]))
            if state is not None and state.done(key[1]):
                assert held.until_ms <= now and held.attempt == MAX_ATTEMPTS, f"{key} vanished: {held}"
                del self.in_flight[key]
                self.dlq.add(key)

    @rule()
    def sweep(self) -> None:
        now = self.now_ms
        last = {k for k, h in self.in_flight.items() if h.until_ms <= now and h.attempt == MAX_ATTEMPTS}
        moved = self._run(self.pop.sweep_dead_letters())
        self._account_dead_letters(now)
        assert last <= self.dlq, f"expired at the last attempt but not swept: {last - self.dlq}"
        assert moved == len(last), (moved, last)

    def _valid(self, held: Held) -> bool:
        cur = self.in_flight.get((held.queue_id, held.offset))
        return cur is not None and cur.handle == held.handle and cur.until_ms > self.now_ms

    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        if not self.handles:
            return
        held = data.draw(st.sampled_from(self.handles))
        valid = self._valid(held)
        try:
            self._run(self.pop.ack(group=G, topic=TOPIC, receipt_handle=held.handle))
        except InvalidReceiptHandle:
            assert not valid, f"valid handle refused: {held}"
            return
        assert valid, f"invalid handle accepted: {held}"
        key = (held.queue_id, held.offset)
        del self.in_flight[key]
        self.acked.add(key)

    @rule(data=st.data(), invisible_ms=st.sampled_from([0, 3, 30]))
    def change_invisible(self, data: st.DataObject, invisible_ms: int) -> None:
        if not self.handles:
            return
        held = data.draw(st.sampled_from(self.handles))
        valid = self._valid(held)
        try:
            new = self._run(
                self.pop.change_invisible(
                    group=G, topic=TOPIC, receipt_handle=held.handle, invisible_ms=invisible_ms
                )
            )
        except InvalidReceiptHandle:
            assert not valid
            return
        assert valid
        fresh = Held(held.queue_id, held.offset, new, held.attempt, self.now_ms + invisible_ms)
        self.in_flight[(held.queue_id, held.offset)] = fresh
        self.handles.append(fresh)

    @rule(ms=st.sampled_from([1, 4, 10, 25]))
    def tick(self, ms: int) -> None:
        self.now_ms += ms

    @rule(how=st.sampled_from(["clean", "crash", "torn"]), junk=st.binary(min_size=1, max_size=40))
    def restart(self, how: str, junk: bytes) -> None:
        if how == "clean":
            self._run(self.pop.shutdown())
        else:
            self._crash()
        if how == "torn":
            with open(os.path.join(self.root, "pop", "journal"), "ab") as f:
                f.write(len(junk).to_bytes(4, "big") + junk)
        self.pop = self._new_pop()

    @invariant()
    def consumer_offset_is_lowest_not_done(self) -> None:
        for q in range(QUEUES):
            state = self.pop.table.states.get((G, TOPIC, q))
            if state is None:
                continue
            pending = [o for (qq, o) in self.in_flight if qq == q]
            expected = min(pending) if pending else self.next_fresh[q]
            assert state.committed == expected
            assert self.ctx.offsets.query_offset(G, TOPIC, q) == expected

    # -- the end ----------------------------------------------------------------------------
    def _drain_and_account(self) -> None:
        for _ in range(4 * MAX_ATTEMPTS + 4):
            self.now_ms += 1_000_000
            got = self._run(
                self.pop.receive(
                    group=G,
                    topic=TOPIC,
                    queue_id=None,
                    max_messages=64,
                    invisible_ms=1000,
                    long_poll_ms=0,
                    fifo=self.fifo,
                )
            )
            if not got:
                break
            for m in got:
                key = (m.queue_id, m.queue_offset)
                assert key not in self.acked and key not in self.dlq
                self._run(self.pop.ack(group=G, topic=TOPIC, receipt_handle=m.receipt_handle))
                self.acked.add(key)
                self.in_flight.pop(key, None)
        for key in list(self.in_flight):
            state = self.pop.table.states[(G, TOPIC, key[0])]
            assert state.done(key[1]), f"{key} still in flight after draining"
            self.dlq.add(key)
        everything = {(q, o) for q in range(QUEUES) for o in range(self.stored[q])}
        assert self.acked | self.dlq == everything, "a message was lost"
        assert not self.acked & self.dlq
        # the DLQ copies are in the CommitLog; their ConsumeQueue entries follow with dispatch
        assert self.store.wait_dispatched(30), "dispatch did not catch up"
        dead = self.store.get_message("check", f"%DLQ%{G}", 0, 0, 1000).messages if self.dlq else []
        dead_keys = set()
        for m in dead:
            q, o = m.body.decode().split(":")
            dead_keys.add((int(q), int(o)))
        assert self.dlq <= dead_keys
        self._run(self.pop.shutdown())


PopMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("ROCKETQ_POP_EXAMPLES", str(examples(25)))),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_pop_state_machine = pytest.mark.filterwarnings("ignore::ResourceWarning")(PopMachine.TestCase)
