"""MessageStore against an in-memory model, on real files with tiny segments.

The machine drives one store in a fresh directory: single and batch puts over a few topics and
queues, pulls from random offsets with and without tag filters, key queries, lookups by offset
and message id, clean restarts, crashes (optionally losing the ConsumeQueue or index directory)
and crashes that tear the last CommitLog record. The model is a list per (topic, queue) plus the
CommitLog order. CommitLog segments are 16 KiB, ConsumeQueue files 20 units and index files 31
entries, and each run starts from up to 80 random messages (half of them in one queue), so
segments, ConsumeQueue files and index files roll often.

After every step: each queue's max offset is its model length, the CommitLog ends exactly at the
end of the last modelled record, dispatch has not failed and the store has logged no error. After
every restart: every queue is read back in full and every key is queried.

What a torn tail may look like: the record format carries a CRC of the body only, so zeroing
bytes after the topic length field (topic text, properties) leaves a record that still decodes,
in RocketMQ as here. A crash that tears the last record is therefore modelled as zeroing it from
a point at or before its topic length byte: recovery must find and drop exactly that record.
A record is only torn when the checkpoint does not vouch for it, because records below the
checkpoint's offsets were synced before the checkpoint was written.
"""

from __future__ import annotations

import functools
import logging
import os
import pathlib
import random
import shutil
import tempfile
from dataclasses import dataclass

import pytest
from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from _support.examples import examples
from rocketq.config import StoreConfig
from rocketq.errors import MessageIllegal
from rocketq.message import Message, encode_properties, tags_code
from rocketq.protocol import record as rec
from rocketq.store import MessageStore
from rocketq.store.checkpoint import StoreCheckpoint
from rocketq.store.mapped_file import offset_to_file_name
from rocketq.store.store_queries import GetMessageStatus

SEGMENT = 16 * 1024
TOPICS = ("SfA", "SfB", "SfC")
QUEUES = 3
TAGS = ("TagA", "TagB", "TagC")
KEYS = ("k0", "k1", "k2", "k3", "k4")
#: Record layout with IPv4 born and store hosts: BODY LENGTH at 84, BODY at 88.
BODY_AT = 88

Queue = tuple[str, int]


@dataclass(frozen=True)
class Spec:
    """A message to put: body derived from (size, seed) so examples stay small and shrink well."""

    size: int
    seed: int
    tags: str | None
    keys: tuple[str, ...]

    @functools.cached_property
    def body(self) -> bytes:
        return random.Random(self.seed).randbytes(self.size)

    def message(self, topic: str) -> Message:
        return Message(topic, self.body, tags=self.tags, keys=self.keys)

    def record_size(self, topic: str) -> int:
        props = encode_properties(self.message(topic).all_properties()).encode()
        return rec.calc_msg_length(0, self.size, len(topic.encode()), len(props))


@dataclass(frozen=True)
class Stored:
    topic: str
    queue_id: int
    queue_offset: int
    spec: Spec
    phys: int
    size: int
    msg_id: str

    @property
    def end(self) -> int:
        return self.phys + self.size


specs = st.builds(
    Spec,
    size=st.one_of(st.integers(0, 64), st.integers(0, 3000)),
    seed=st.integers(0, 2**16),
    tags=st.none() | st.sampled_from(TAGS),
    # Distinct keys per message: a key repeated inside one message takes several index entries,
    # so a capped query can return fewer distinct messages than the cap (as in RocketMQ).
    keys=st.lists(st.sampled_from(KEYS), max_size=3, unique=True).map(tuple),
)
topics = st.sampled_from(TOPICS)
queue_ids = st.integers(0, QUEUES - 1)
lost_dirs = st.sampled_from(((), ("consumequeue",), ("index",), ("consumequeue", "index")))
#: Where a pull starts: before the queue, inside it (taken modulo its length), at its end, past it.
pull_offsets = st.one_of(st.integers(-3, -1), st.sampled_from(("max", "past")), st.integers(0, 10**4))
#: Which part of the last record a torn write starts in.
TEAR_REGIONS = ("whole", "header", "fields", "body", "topic_length")


def random_spec(rng: random.Random) -> Spec:
    size = rng.randint(0, 64) if rng.random() < 0.3 else rng.randint(0, 3000)
    tags = rng.choice((None, *TAGS))
    return Spec(size, rng.getrandbits(16), tags, tuple(rng.sample(KEYS, rng.randint(0, 3))))


def tear_point(region: str, pick: int, body_size: int) -> int:
    """Offset inside a record from which zeroing its tail is detectable on recovery."""
    if region == "whole":
        return 0
    if region == "header":  # inside TOTALSIZE or MAGICCODE
        return 1 + pick % 7
    if region == "fields":  # from BODYCRC to BODY LENGTH
        return 8 + pick % (BODY_AT - 8)
    if region == "body" and body_size:
        return BODY_AT + pick % body_size
    return BODY_AT + body_size  # the topic length byte


def placed_at(end: int, size: int) -> int:
    """Where the CommitLog puts ``size`` bytes (one record or a whole batch) after ``end``."""
    used = end % SEGMENT
    if used + size + rec.END_FILE_MIN_BLANK_LENGTH > SEGMENT:
        return end - used + SEGMENT
    return end


def expected_pull(
    entries: list[Stored], offset: int, max_count: int, codes: set[int] | None
) -> tuple[GetMessageStatus, int, list[Stored]]:
    """RocketMQ's getMessage over a model queue whose minimum offset is 0."""
    n = len(entries)
    if offset < 0:
        return GetMessageStatus.OFFSET_TOO_SMALL, 0, []
    if offset == n:
        return GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, []
    if offset > n:
        return GetMessageStatus.OFFSET_OVERFLOW_BADLY, 0, []  # min 0: corrected to the minimum
    window = entries[offset : offset + (max_count * 4 if codes else max_count)]
    found: list[Stored] = []
    scanned = 0
    for e in window:
        if len(found) >= max_count:
            break
        scanned += 1
        if codes is None or tags_code(e.spec.tags) in codes:
            found.append(e)
    status = GetMessageStatus.FOUND if found else GetMessageStatus.NO_MATCHED_MESSAGE
    return status, offset + scanned, found


def checkpoint_covers(root: str) -> int:
    """The CommitLog offset below which the on-disk checkpoint says data was synced and dispatched."""
    cp = StoreCheckpoint(os.path.join(root, "checkpoint"))
    try:
        marks = [o for o in (cp.dispatched_phy_offset, cp.master_flushed_offset) if o >= 0]
    finally:
        cp.shutdown()
    return min(marks) if marks else -1


def simulate_crash(s: MessageStore) -> None:
    """Stop every service without the clean-shutdown steps: dispatch is not drained, nothing is
    checkpointed and the abort file stays, as if the process had died here."""
    s._stopping.set()
    if s._logics_flusher is not None:
        s._logics_flusher.join(10)
    for svc in (s.schedule, s.retention):
        assert svc is not None
        svc.shutdown()
    reput = s.reput
    assert reput is not None
    reput._stopped.set()
    reput._wakeup.set()
    reput._thread.join(10)
    assert not reput._thread.is_alive()
    s.commitlog.shutdown()
    s.consume_queues.shutdown()
    assert s.index_service is not None
    s.index_service.shutdown()
    assert s.checkpoint is not None
    s.checkpoint.shutdown()
    s._unlock_dir()
    assert os.path.exists(s.abort_file)


def zero_record_tail(config: StoreConfig, phys: int, size: int, cut: int) -> None:
    """Zero bytes ``[cut, size)`` of the record at ``phys`` in its segment file."""
    seg = os.path.join(config.commit_log_dir, offset_to_file_name(phys - phys % SEGMENT))
    with open(seg, "r+b") as f:
        f.seek(phys % SEGMENT + cut)
        f.write(bytes(size - cut))


class ErrorRecords(logging.Handler):
    """Collects what the store logs at ERROR and above."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.errors = ErrorRecords()
        logging.getLogger("rocketq").addHandler(self.errors)
        self.root = tempfile.mkdtemp(prefix="rocketq-stateful-")
        self.config = StoreConfig(
            store_path_root_dir=os.path.join(self.root, "store"),
            mapped_file_size_commit_log=SEGMENT,
            mapped_file_size_consume_queue=20 * 20,
            max_hash_slot_num=16,
            max_index_num=32,
        )
        self.store: MessageStore | None = MessageStore(self.config)
        self.store.start()
        self.queues: dict[Queue, list[Stored]] = {}
        self.log: list[Stored] = []
        self.ever_written: set[Queue] = set()

    def teardown(self) -> None:
        try:
            if self.store is not None:
                self.store.shutdown()
        finally:
            logging.getLogger("rocketq").removeHandler(self.errors)
            shutil.rmtree(self.root, ignore_errors=True)

    # -- helpers ----------------------------------------------------------------------------
    @property
    def s(self) -> MessageStore:
        assert self.store is not None
        return self.store

    @property
    def cl_end(self) -> int:
        return self.log[-1].end if self.log else 0

    def _put(self, topic: str, queue_id: int, spec: Spec) -> None:
        entries = self.queues.setdefault((topic, queue_id), [])
        size = spec.record_size(topic)
        expect_at = placed_at(self.cl_end, size)
        r = self.s.put_message(spec.message(topic), queue_id)
        assert r.ok, r
        assert (r.physical_offset, r.size, r.queue_offset) == (expect_at, size, len(entries)), r
        stored = Stored(topic, queue_id, len(entries), spec, r.physical_offset, r.size, r.msg_id)
        entries.append(stored)
        self.log.append(stored)
        self.ever_written.add((topic, queue_id))

    def _start(self, *, clean: bool) -> None:
        self.store = MessageStore(self.config)
        self.store.start()
        assert self.store.last_exit_ok is clean
        self._verify_everything()

    def _lose(self, dirs: tuple[str, ...]) -> None:
        for name in dirs:
            shutil.rmtree(os.path.join(self.config.store_path_root_dir, name), ignore_errors=True)

    def _verify_everything(self) -> None:
        """Read every queue from start to end and query every key (after each restart)."""
        for (topic, queue_id), entries in self.queues.items():
            offset = 0
            while offset < len(entries):
                got = self.s.get_message("G", topic, queue_id, offset, 32)
                assert got.status is GetMessageStatus.FOUND, (topic, queue_id, offset, got)
                want = entries[offset : offset + 32]
                assert got.queue_offsets == [e.queue_offset for e in want]
                assert [(m.commit_log_offset, m.body) for m in got.messages] == [
                    (e.phys, e.spec.body) for e in want
                ]
                offset = got.next_begin_offset
            assert offset == len(entries)
        for topic in TOPICS:
            for key in KEYS:
                self._check_query(topic, key, 64)
                self._check_query(topic, key, 1)

    def _check_query(self, topic: str, key: str, max_count: int) -> None:
        expected = [(e.phys, e.spec.body) for e in self.log if e.topic == topic and key in e.spec.keys]
        got = self.s.query_messages_by_key(topic, key, max_count)
        # Oldest first; with more matches than the cap, the newest ``max_count`` of them.
        assert [(m.commit_log_offset, m.body) for m in got.messages] == expected[-max_count:], (topic, key)

    # -- writes -----------------------------------------------------------------------------
    @initialize(count=st.integers(0, 80), seed=st.integers(0, 2**32))
    def prefill(self, count: int, seed: int) -> None:
        """Start from a store that already spans a few segments, CQ files and index files; half
        of the messages go to one queue so that its ConsumeQueue rolls."""
        rng = random.Random(seed)
        for _ in range(count):
            if rng.random() < 0.5:
                topic, queue_id = TOPICS[0], 0
            else:
                topic, queue_id = rng.choice(TOPICS), rng.randrange(QUEUES)
            self._put(topic, queue_id, random_spec(rng))
        assert self.s.wait_dispatched()

    @rule(topic=topics, queue_id=queue_ids, spec=specs)
    def put_one(self, topic: str, queue_id: int, spec: Spec) -> None:
        self._put(topic, queue_id, spec)
        assert self.s.wait_dispatched()

    @rule(topic=topics, queue_id=queue_ids, batch=st.lists(specs, min_size=1, max_size=8))
    def put_batch(self, topic: str, queue_id: int, batch: list[Spec]) -> None:
        entries = self.queues.setdefault((topic, queue_id), [])
        sizes = [spec.record_size(topic) for spec in batch]
        total = sum(sizes)
        msgs = [spec.message(topic) for spec in batch]
        if total + rec.END_FILE_MIN_BLANK_LENGTH > SEGMENT:
            before = self.s.get_max_phy_offset()
            try:
                self.s.put_messages(msgs, queue_id)
            except MessageIllegal:
                pass
            else:
                raise AssertionError(f"a batch of {total} B was accepted into {SEGMENT} B segments")
            assert self.s.get_max_phy_offset() == before
            return
        expect_at = placed_at(self.cl_end, total)
        r = self.s.put_messages(msgs, queue_id)
        assert r.ok, r
        assert (r.physical_offset, r.size, r.msg_num, r.queue_offset) == (
            expect_at,
            total,
            len(batch),
            len(entries),
        ), r
        assert r.physical_offsets is not None
        ids = r.msg_ids
        phys = expect_at
        for i, (spec, size) in enumerate(zip(batch, sizes, strict=True)):
            assert r.physical_offsets[i] == phys
            stored = Stored(topic, queue_id, len(entries), spec, phys, size, ids[i])
            entries.append(stored)
            self.log.append(stored)
            phys += size
        self.ever_written.add((topic, queue_id))
        assert self.s.wait_dispatched()

    # -- reads ------------------------------------------------------------------------------
    @rule(
        topic=topics,
        queue_id=queue_ids,
        where=pull_offsets,
        max_count=st.integers(1, 32),
        tag_filter=st.none() | st.lists(st.sampled_from((*TAGS, "TagZ")), min_size=1, max_size=2),
    )
    def pull(
        self, topic: str, queue_id: int, where: int | str, max_count: int, tag_filter: list[str] | None
    ) -> None:
        entries = self.queues.get((topic, queue_id), [])
        n = len(entries)
        if isinstance(where, str):
            offset = n if where == "max" else n + 1 + n // 2
        else:
            offset = where if where < 0 or n == 0 else where % n
        codes = None if tag_filter is None else {tags_code(t) for t in tag_filter}
        got = self.s.get_message("G", topic, queue_id, offset, max_count, codes)
        if not entries:
            # A queue emptied by a torn tail may keep an empty ConsumeQueue.
            allowed = {GetMessageStatus.NO_MATCHED_LOGIC_QUEUE}
            if (topic, queue_id) in self.ever_written:
                allowed.add(GetMessageStatus.NO_MESSAGE_IN_QUEUE)
            assert got.status in allowed, got
            assert (got.next_begin_offset, got.max_offset, got.buffers) == (0, 0, []), got
            return
        status, nxt, found = expected_pull(entries, offset, max_count, codes)
        assert (got.status, got.next_begin_offset) == (status, nxt), (got, offset, len(entries))
        assert (got.min_offset, got.max_offset) == (0, len(entries))
        assert got.queue_offsets == [e.queue_offset for e in found]
        msgs = got.messages
        assert [(m.topic, m.queue_id, m.queue_offset) for m in msgs] == [
            (e.topic, e.queue_id, e.queue_offset) for e in found
        ]
        assert [(m.commit_log_offset, m.store_size) for m in msgs] == [(e.phys, e.size) for e in found]
        assert [m.body for m in msgs] == [e.spec.body for e in found]
        assert [(m.tags, tuple(m.keys)) for m in msgs] == [(e.spec.tags, e.spec.keys) for e in found]

    @rule(topic=topics, key=st.sampled_from(KEYS), max_count=st.sampled_from((1, 2, 3, 64)))
    def query_by_key(self, topic: str, key: str, max_count: int) -> None:
        self._check_query(topic, key, max_count)

    @precondition(lambda self: self.log)
    @rule(pick=st.integers(0, 10**6))
    def look_up(self, pick: int) -> None:
        e = self.log[pick % len(self.log)]
        for m in (self.s.look_message_by_offset(e.phys), self.s.look_message_by_id(e.msg_id)):
            assert m is not None
            assert (m.topic, m.queue_id, m.queue_offset, m.commit_log_offset, m.body) == (
                e.topic,
                e.queue_id,
                e.queue_offset,
                e.phys,
                e.spec.body,
            )

    # -- restarts ---------------------------------------------------------------------------
    @rule()
    def clean_restart(self) -> None:
        self.s.shutdown()
        assert not os.path.exists(self.s.abort_file)
        self._start(clean=True)

    @rule(
        unsynced=st.lists(st.tuples(topics, queue_ids, specs), max_size=3),
        lost=lost_dirs,
    )
    def crash_restart(self, unsynced: list[tuple[str, int, Spec]], lost: tuple[str, ...]) -> None:
        for topic, queue_id, spec in unsynced:
            self._put(topic, queue_id, spec)  # not waited for: dispatch may lag at the crash
        simulate_crash(self.s)
        self.store = None
        self._lose(lost)
        self._start(clean=False)

    @precondition(lambda self: self.log)
    @rule(
        unsynced=st.lists(st.tuples(topics, queue_ids, specs), max_size=2),
        region=st.sampled_from(TEAR_REGIONS),
        pick=st.integers(0, 10**6),
        lost=lost_dirs,
    )
    def crash_tearing_last_record(
        self, unsynced: list[tuple[str, int, Spec]], region: str, pick: int, lost: tuple[str, ...]
    ) -> None:
        for topic, queue_id, spec in unsynced:
            self._put(topic, queue_id, spec)
        simulate_crash(self.s)
        self.store = None
        last = self.log[-1]
        # A record the checkpoint vouches for was synced: then this is a plain crash.
        if last.end > checkpoint_covers(self.config.store_path_root_dir):
            cut = tear_point(region, pick, last.spec.size)
            zero_record_tail(self.config, last.phys, last.size, cut)
            self.log.pop()
            entries = self.queues[(last.topic, last.queue_id)]
            assert entries.pop() is last
        self._lose(lost)
        self._start(clean=False)

    # -- invariants -------------------------------------------------------------------------
    @invariant()
    def queue_lengths_match(self) -> None:
        if self.store is None:
            return
        for topic in TOPICS:
            for queue_id in range(QUEUES):
                n = len(self.queues.get((topic, queue_id), []))
                assert self.s.get_max_offset(topic, queue_id) == n, (topic, queue_id)

    @invariant()
    def commitlog_ends_at_last_record(self) -> None:
        if self.store is None:
            return
        assert self.s.get_max_phy_offset() == self.cl_end
        if self.log:
            assert self.s.get_min_phy_offset() == 0

    @invariant()
    def nothing_went_wrong_inside(self) -> None:
        assert self.errors.messages == []
        if self.store is not None:
            assert self.s.reput is not None and self.s.reput.error is None


StoreMachine.TestCase.settings = settings(
    max_examples=examples(35),
    stateful_step_count=30,
    deadline=None,
    # Without the explain phase: it replays a failing case hundreds of times more on real files.
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
)
# the whole store against a model, on real files: the longest property test, outside `make fast`
TestStoreAgainstModel = pytest.mark.slow(StoreMachine.TestCase)


# -- defects the machine found ---------------------------------------------------------------------
# Regression (found by the machine, since fixed): recovery cut the CommitLog but not the index.
# When the torn record had been indexed in a file that survived the abnormal restart, (1) its
# entries stayed and took places under a query's cap although no message was behind them, and
# (2) that file's endPhyOffset lay beyond the recovered CommitLog end, so the index skipped every
# later record stored below it: those messages were never found by key.


def test_index_covers_messages_written_over_a_torn_tail(tmp_path: pathlib.Path) -> None:
    config = StoreConfig(
        store_path_root_dir=str(tmp_path / "store"),
        mapped_file_size_commit_log=SEGMENT,
        max_hash_slot_num=16,
        max_index_num=32,  # 31 entries per index file
    )
    store = MessageStore(config)
    store.start()
    # 30 records of 499 B end at 14970; the index file holds 30 of its 31 entries.
    for i in range(30):
        assert store.put_message(Message("T", bytes([i + 1]) * 400, keys=["k"])).next_offset == 499 * (i + 1)
    # 2000 B do not fit the first segment: this record starts the second one, at 16384. Its first
    # key fills the index file, its second rolls to a new one; both end at its store timestamp,
    # which the roll writes as the checkpoint's index time, so both pass the check at an abnormal load.
    torn = store.put_message(Message("T", b"\x01" * 2000, keys=["k", "other"]))
    assert torn.physical_offset == SEGMENT
    assert store.wait_dispatched()
    simulate_crash(store)
    assert checkpoint_covers(config.store_path_root_dir) < torn.next_offset  # never synced
    zero_record_tail(config, torn.physical_offset, torn.size, 0)

    with MessageStore(config) as again:
        assert again.get_max_phy_offset() == 14970  # the torn record is gone
        assert again.get_max_offset("T", 0) == 30
        newest = [m.commit_log_offset for m in again.query_messages_by_key("T", "k", 1).messages]
        new = again.put_message(Message("T", b"new", keys=["k"]))
        assert new.physical_offset == 14970
        assert again.wait_dispatched()
        found = [m.commit_log_offset for m in again.query_messages_by_key("T", "k", 64).messages]
        assert (newest, found[-2:]) == ([14471], [14471, 14970])


# Regression (found by the machine, since fixed): after an abnormal restart the last indexed message
# was dispatched to the index again and got two entries per key; both counted against a query's
# cap, so a query for n messages returned n - 1.


def test_capped_key_query_is_full_after_a_crash(tmp_path: pathlib.Path) -> None:
    config = StoreConfig(
        store_path_root_dir=str(tmp_path / "store"),
        mapped_file_size_commit_log=SEGMENT,
        max_hash_slot_num=16,
        max_index_num=32,  # 31 entries per index file
    )
    with MessageStore(config) as store:
        # 31 keys fill the index file; the clean shutdown records it in the checkpoint, so the
        # file survives the crash below.
        offsets = [store.put_message(Message("T", b"m%d" % i, keys=["k"])).physical_offset for i in range(31)]
    store = MessageStore(config)
    store.start()
    simulate_crash(store)
    with MessageStore(config) as again:
        assert not again.last_exit_ok
        for cap in (1, 2, 3, 64):
            got = [m.commit_log_offset for m in again.query_messages_by_key("T", "k", cap).messages]
            assert got == offsets[-cap:], cap
