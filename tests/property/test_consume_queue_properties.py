"""ConsumeQueue against a list model: random puts (next offset, duplicates, holes, re-dispatches,
a first put at a non-zero offset), truncations, reloads, torn tails, min-offset corrections and
expiry. After every step the files on disk, byte for byte, and the reported offsets must match."""

from __future__ import annotations

import os
import shutil
import struct
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from _support.examples import examples
from rocketq.store.consume_queue import FILLER_SIZE, ConsumeQueue

U = 4  # units per file: files roll every four units
FILE_SIZE = U * 20
TOPIC = "PropTopic"

Unit = tuple[int, int, int]
FILLER: Unit = (0, FILLER_SIZE, 0)
_UNIT = struct.Struct(">qiq")


class QueueModel:
    """RocketMQ's ConsumeQueue rules (with rocketq's filler handling) over a plain list."""

    def __init__(self) -> None:
        self.start = 0  # queue offset of the first file's first slot
        self.units: list[Unit] = []  # slots start, start+1, ...
        self.files = 0  # number of files on disk (a trailing one may be empty)
        self.max_physic = -1
        self.min_logic = 0  # in units

    @property
    def end(self) -> int:
        return self.start + len(self.units) if self.files else 0

    def last_real_end(self, units: list[Unit]) -> int | None:
        for unit in reversed(units):
            if unit != FILLER:
                return unit[0] + unit[1]
        return None

    def put(self, offset: int, size: int, tags: int, cq: int) -> None:
        if offset + size <= self.max_physic:
            return
        if not self.files:
            self.start = cq - cq % U
            self.units = []
            self.files = 1
            if cq != 0:
                self.units = [FILLER] * (cq - self.start)
                self.min_logic = cq
        elif len(self.units) == self.files * U:
            self.files += 1
        if cq != 0 and cq < self.start + len(self.units):
            return
        self.max_physic = offset + size
        self.units.append((offset, size, tags))
        self.files = max(self.files, -(-len(self.units) // U))

    def reload(self) -> None:
        """A new instance: load, then recover (the last three files hold every torn byte)."""
        self.min_logic = self.start if self.files else 0
        end = self.last_real_end(self.units)
        self.max_physic = -1 if end is None else end
        self.min_logic = min(self.min_logic, self.end)

    def tear(self, k: int) -> None:
        """The last k units never reached the disk; then reload."""
        self.units = self.units[: len(self.units) - k]
        self.files = len(self.units) // U + 1
        self.reload()

    def truncate(self, phy: int) -> None:
        self.max_physic = phy
        while self.files:
            first = (self.files - 1) * U
            if first >= len(self.units) or self.units[first][0] >= phy:
                del self.units[first:]
                self.files -= 1
                continue
            kept = first
            while kept < len(self.units) and self.units[kept][0] < phy:
                kept += 1
            del self.units[kept:]
            end = self.last_real_end(self.units[first:])
            if end is not None:
                self.max_physic = end
            break
        self.min_logic = min(self.min_logic, self.end)

    def live(self, index: int, cm: int) -> bool:
        if not 0 <= index - self.start < len(self.units):
            return False
        unit = self.units[index - self.start]
        return unit != FILLER and unit[0] >= cm

    def correct_min(self, cm: int) -> None:
        if not self.files or self.min_logic >= self.end:
            return
        if not self.live(self.end - 1, cm):
            self.min_logic = self.end
            return
        low = max(self.min_logic, self.start)
        self.min_logic = next(i for i in range(low, self.end) if self.live(i, cm))

    def delete_expired(self, cm: int) -> int:
        count = 0
        while self.files > 1 and self.units[U - 1][0] < cm:
            del self.units[:U]
            self.start += U
            self.files -= 1
            count += 1
        self.correct_min(cm)
        return count


class ConsumeQueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="cq-prop-")
        self.cq = self._open()
        self.model = QueueModel()
        self.next_phys = 0  # CommitLog end: where the next record would start

    def _open(self) -> ConsumeQueue:
        cq = ConsumeQueue(TOPIC, 1, self.root, FILE_SIZE)
        cq.load()
        return cq

    def teardown(self) -> None:
        self.cq.shutdown()
        shutil.rmtree(self.root, ignore_errors=True)

    def _put(self, size: int, tags: int, cq: int) -> None:
        offset = self.next_phys
        self.next_phys += size
        assert self.cq.put_message_position_info(offset, size, tags, cq)
        self.model.put(offset, size, tags, cq)

    @precondition(lambda self: self.model.files == 0)
    @rule(
        first=st.one_of(st.just(0), st.integers(0, 3 * U + 2)),
        size=st.integers(1, 300),
        tags=st.integers(-(1 << 63), (1 << 63) - 1),
    )
    def put_first(self, first: int, size: int, tags: int) -> None:
        self._put(size, tags, first)

    @precondition(lambda self: self.model.files > 0)
    @rule(
        shift=st.one_of(st.just(0), st.just(0), st.just(0), st.integers(-3, -1), st.integers(1, 3)),
        size=st.integers(1, 300),
        tags=st.integers(-(1 << 31), (1 << 31) - 1),
    )
    def put_next(self, shift: int, size: int, tags: int) -> None:
        """The next queue offset, or a duplicate (shift < 0) or a hole (shift > 0)."""
        self._put(size, tags, max(0, self.model.end + shift))

    @precondition(lambda self: self.model.files > 0)
    @rule(data=st.data())
    def redispatch(self, data: st.DataObject) -> None:
        """A record already indexed is dispatched again (abnormal recovery): nothing changes."""
        real = [(i, u) for i, u in enumerate(self.model.units) if u != (0, FILLER_SIZE, 0)]
        if not real:
            return
        i, (offset, size, tags) = data.draw(st.sampled_from(real))
        if offset + size > self.model.max_physic:
            return
        assert self.cq.put_message_position_info(offset, size, tags, self.model.start + i)
        self.model.put(offset, size, tags, self.model.start + i)

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        """The CommitLog was cut at a record boundary (or anywhere): drop what points past it."""
        candidates = sorted({u[0] for u in self.model.units if u[1] != FILLER_SIZE} | {self.next_phys})
        phy = data.draw(st.one_of(st.sampled_from(candidates), st.integers(0, self.next_phys)))
        self.cq.truncate_dirty_logic_files(phy)
        self.model.truncate(phy)
        self.next_phys = phy

    @rule()
    def reload(self) -> None:
        self.cq.flush(0)
        self.cq.shutdown()
        self.cq = self._open()
        self.cq.recover()
        self.model.reload()

    @precondition(lambda self: len(self.model.units) > 0)
    @rule(data=st.data())
    def tear(self, data: st.DataObject) -> None:
        """Crash: the last k units are zeros on disk (k <= U, so within the last three files)."""
        k = data.draw(st.integers(1, min(U, len(self.model.units))))
        self.cq.shutdown()
        end = self.model.end
        for index in range(end - k, end):
            byte = index * 20
            start = byte - byte % FILE_SIZE
            with open(os.path.join(self.root, "consumequeue", TOPIC, "1", f"{start:020d}"), "r+b") as f:
                f.seek(byte - start)
                f.write(bytes(20))
        self.cq = self._open()
        self.cq.recover()
        self.model.tear(k)

    @rule(data=st.data())
    def correct_min(self, data: st.DataObject) -> None:
        cm = data.draw(st.integers(0, self.next_phys + 10))
        self.cq.correct_min_offset(cm)
        self.model.correct_min(cm)

    @rule(data=st.data())
    def delete_expired(self, data: st.DataObject) -> None:
        cm = data.draw(st.integers(0, self.next_phys + 10))
        assert self.cq.delete_expired_file(cm) == self.model.delete_expired(cm)

    @invariant()
    def offsets_match(self) -> None:
        m = self.model
        assert self.cq.max_offset_in_queue == m.end
        assert self.cq.min_offset_in_queue == m.min_logic
        assert self.cq.max_physic_offset == m.max_physic

    @invariant()
    def reads_match(self) -> None:
        m = self.model
        lo = m.min_logic
        expected = m.units[max(0, lo - m.start) :] if m.files else []
        got = self.cq.get_units(lo, len(expected) + 3)
        assert [tuple(int(x) for x in u) for u in got.tolist()] == expected
        if expected:
            assert self.cq.get_unit(lo) == expected[0]
            assert self.cq.get_unit(m.end - 1) == expected[-1]
        assert self.cq.get_unit(m.end) is None

    @invariant()
    def files_match(self) -> None:
        m = self.model
        directory = os.path.join(self.root, "consumequeue", TOPIC, "1")
        names = sorted(os.listdir(directory)) if os.path.isdir(directory) else []
        assert names == [f"{(m.start + j * U) * 20:020d}" for j in range(m.files)]
        for j, name in enumerate(names):
            with open(os.path.join(directory, name), "rb") as f:
                data = f.read()
            units = m.units[j * U : (j + 1) * U]
            body = b"".join(_UNIT.pack(*u) for u in units)
            assert data == body + bytes(FILE_SIZE - len(body))


ConsumeQueueMachine.TestCase.settings = settings(
    max_examples=examples(150),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestConsumeQueueModel = ConsumeQueueMachine.TestCase


@settings(max_examples=examples(200), deadline=None)
@given(
    gaps=st.lists(st.integers(0, 3), min_size=0, max_size=30),
    probes=st.lists(st.integers(-5, 200), min_size=1, max_size=10),
    expired=st.integers(0, 30),
)
def test_offset_by_time_is_the_first_at_or_after(gaps: list[int], probes: list[int], expired: int) -> None:
    """Non-decreasing store times; records below a CommitLog minimum count as earlier."""
    times: list[int] = []
    t = 0
    for gap in gaps:
        t += gap
        times.append(t)
    root = tempfile.mkdtemp(prefix="cq-time-")
    try:
        cq = ConsumeQueue("T", 0, root, FILE_SIZE)
        cq.load()
        for i in range(len(times)):
            assert cq.put_message_position_info(i * 10, 10, 0, i)

        def store_time_of(offset: int, size: int) -> int | None:
            index = offset // 10
            return None if index < expired else times[index]

        for ts in probes:
            got = cq.get_offset_in_queue_by_time(ts, store_time_of)
            expected = next((i for i, x in enumerate(times) if i >= expired and x >= ts), len(times))
            assert got == expected
        cq.shutdown()
    finally:
        shutil.rmtree(root, ignore_errors=True)


unit_sequences = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=3),  # step of the physical offset (0: a re-dispatch)
        st.integers(min_value=1, max_value=500),  # record size
        st.integers(min_value=-(2**63), max_value=2**63 - 1),  # tags code
        st.sampled_from([1, 1, 1, 1, 0, 2, -1]),  # step of the queue offset: next, dup, hole, back
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first_cq=st.integers(min_value=0, max_value=9), steps=unit_sequences, cut=st.integers(0, 40))
def test_batched_put_units_writes_what_one_by_one_puts_write(
    first_cq: int, steps: list[tuple[int, int, int, int]], cut: int
) -> None:
    """put_units (the dispatcher's batched path) must leave exactly the bytes and offsets that
    put_message_position_info leaves when called unit by unit, whatever the sequence."""
    units = []
    phys = 0
    cq = first_cq
    for dphys, size, tags, dcq in steps:
        phys += dphys * 300
        units.append((phys, size, tags, max(0, cq)))
        cq += dcq
    root = tempfile.mkdtemp(prefix="rocketq-cq-batch-")
    try:
        one = ConsumeQueue(TOPIC, 0, os.path.join(root, "one"), FILE_SIZE)
        many = ConsumeQueue(TOPIC, 0, os.path.join(root, "many"), FILE_SIZE)
        one.load()
        many.load()
        for u in units:
            one.put_message_position_info(*u)
        many.put_units(units[:cut])
        many.put_units(units[cut:])
        assert (one.min_offset_in_queue, one.max_offset_in_queue, one.max_physic_offset) == (
            many.min_offset_in_queue,
            many.max_offset_in_queue,
            many.max_physic_offset,
        )
        files_one = sorted(os.listdir(one.directory)) if os.path.isdir(one.directory) else []
        files_many = sorted(os.listdir(many.directory)) if os.path.isdir(many.directory) else []
        assert files_one == files_many
        for name in files_one:
            a = one.queue.find_by_offset(int(name))
            b = many.queue.find_by_offset(int(name))
            assert a is not None and b is not None
            assert a.wrote_position == b.wrote_position
            assert a.mm[: a.wrote_position] == b.mm[: b.wrote_position]
        one.shutdown()
        many.shutdown()
    finally:
        shutil.rmtree(root, ignore_errors=True)
