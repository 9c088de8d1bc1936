"""Random sequences of append / follower append / truncate / flush / commit / reopen keep the
entry store equal to a model list of (term, body)."""

from __future__ import annotations

import tempfile

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from _support.examples import examples
from rocketq.ha.entry_format import TruncateBelowFloor
from rocketq.ha.entry_store import EntryStore

DATA = 1024
INDEX = 32 * 8


class EntryStoreModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.TemporaryDirectory()
        self.store = self._open(verify_all=False)
        self.model: list[tuple[int, bytes]] = []
        self.committed = -1
        self.term = 1

    def _open(self, verify_all: bool) -> EntryStore:
        return EntryStore.open(
            self.dir.name, "p", data_file_size=DATA, index_file_size=INDEX, verify_all=verify_all
        )

    @rule(body=st.binary(max_size=400), bump=st.booleans())
    def append(self, body: bytes, bump: bool) -> None:
        self.term += bump
        index, pos = self.store.append(self.term, body)
        assert index == len(self.model)
        assert pos + 48 + len(body) + 8 <= (pos // DATA + 1) * DATA
        self.model.append((self.term, body))

    @rule(body=st.binary(max_size=400))
    def append_at(self, body: bytes) -> None:
        self.store.append_at(len(self.model), self.term, body)
        self.model.append((self.term, body))

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        at = data.draw(st.integers(0, len(self.model) - 1))
        if at <= self.committed:
            try:
                self.store.truncate(at)
            except TruncateBelowFloor:
                return
            raise AssertionError("truncate below the committed index was accepted")
        self.store.truncate(at)
        del self.model[at:]

    @rule(data=st.data())
    def commit(self, data: st.DataObject) -> None:
        target = data.draw(st.integers(-1, len(self.model)))
        self.committed = max(self.committed, min(target, len(self.model) - 1))
        assert self.store.set_committed_index(target) == self.committed

    @rule()
    def flush(self) -> None:
        assert self.store.flush() == len(self.model) - 1

    @rule(verify_all=st.booleans(), checkpoint=st.booleans())
    def reopen(self, verify_all: bool, checkpoint: bool) -> None:
        if checkpoint:
            self.store.close()
        else:  # no checkpoint write: flushed or not, page cache survives
            self.store.flush()
            self.store.data.shutdown()
            self.store.index.shutdown()
        self.store = self._open(verify_all)
        if not checkpoint:
            self.committed = min(self.committed, self.store.committed_index)
        assert self.store.committed_index == self.committed

    @precondition(lambda self: self.model and self.store.checkpoint_flushed < len(self.model) - 1)
    @rule(data=st.data())
    def kill_mid_append(self, data: st.DataObject) -> None:
        """A kill while the last entry was being written: a suffix of its bytes and its index
        record missing. Recovery drops it, or keeps it when the missing bytes were zeros anyway."""
        s = self.store
        last = len(self.model) - 1
        e = s.get(last)
        cut = data.draw(st.integers(0, e.size - 1))
        mf = s.data.find_by_offset(e.pos)
        imf = s.index.find_by_offset(last * 32)
        assert mf is not None and imf is not None
        rel = e.pos - mf.file_from_offset
        mf.mm[rel + cut : rel + e.size] = bytes(e.size - cut)
        irel = last * 32 - imf.file_from_offset
        imf.mm[irel : irel + 32] = bytes(32)
        _, persisted_committed, _ = s.load_checkpoint()
        s.data.shutdown()
        s.index.shutdown()
        self.store = self._open(verify_all=data.draw(st.booleans()))
        if self.store.ledger_end_index == last - 1:
            self.model.pop()
        else:
            assert self.store.get(last).body == self.model[-1][1]
        end = len(self.model) - 1
        self.committed = -1 if persisted_committed is None else min(persisted_committed, end)

    @invariant()
    def equal_to_model(self) -> None:
        s = self.store
        assert s.ledger_end_index == len(self.model) - 1
        assert s.ledger_begin_index == (0 if self.model else -1)
        if self.model:
            assert s.ledger_end_term == self.model[-1][0]
            got = [(e.term, e.body) for e in s.read_range(0, len(self.model))]
            assert got == self.model
            assert s.committed_index == self.committed

    def teardown(self) -> None:
        self.store.close()
        self.dir.cleanup()


EntryStoreModel.TestCase.settings = settings(
    max_examples=examples(40),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestEntryStoreModel = EntryStoreModel.TestCase
