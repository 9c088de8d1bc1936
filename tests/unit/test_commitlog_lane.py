"""The compiled single put (``PutLane``): it takes the usual put whole, and hands every other put
back (None) before it has read into or changed anything, so that the Python path runs as it
always did: an unknown topic or shape, a roll, a ConsumeQueue file to reserve, a store that does
not take writes, transaction bits, an IPv6 host, a queue id for a BrokerMessage, properties that
park, a held put lock, sampled latency, a lag check due, SYNC_FLUSH."""

from __future__ import annotations

import dataclasses
import itertools
import pathlib
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from _support.wait import wait_until
from rocketq.broker.metrics import PUT_SECONDS_BOUNDS
from rocketq.config import StoreConfig
from rocketq.message import BrokerMessage, Message
from rocketq.metrics.exposition import ThreadHistograms
from rocketq.protocol import record as rec
from rocketq.speedups import COMPILED
from rocketq.store import commitlog as commitlog_module
from rocketq.store.commitlog import CommitLog
from rocketq.store.commitlog_lifecycle import PutLane
from rocketq.store.dledger_commitlog import DLedgerCommitLog
from rocketq.store.message_store import MessageStore

pytestmark = pytest.mark.skipif(
    COMPILED is None or not hasattr(COMPILED, "put_lane"), reason="the compiled module is not in use"
)

BORN = b"\x7f\x00\x00\x01\x00\x00\x9c\x40"
PROPS = b"UNIQ_KEY\x010123456789ABCDEF\x02WAIT\x01true\x02"
UNITS = 30  # ConsumeQueue units per file


def config(root: pathlib.Path, **kw: object) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=16 * 1024,
        mapped_file_size_consume_queue=20 * UNITS,
        **kw,  # type: ignore[arg-type]
    )


@pytest.fixture
def store(tmp_path: pathlib.Path) -> Iterator[MessageStore]:
    s = MessageStore(config(tmp_path / "s"))
    s.start()
    yield s
    s.shutdown()


def bm(body: bytes = b"b" * 100, queue_id: int = 1, topic: str = "LaneT", **kw: object) -> BrokerMessage:
    fields: dict[str, object] = {"born_timestamp": 1_700_000_000_000, "born_host": BORN, **kw}
    return BrokerMessage(topic, body, PROPS, queue_id, **fields)  # type: ignore[arg-type]


def msg(body: bytes = b"b" * 100, topic: str = "LaneT", **kw: object) -> Message:
    return Message(topic, body, tags="TagA", properties={"UNIQ_KEY": "U1"}, **kw)  # type: ignore[arg-type]


def state(store: MessageStore) -> tuple[object, ...]:
    """Everything a put could change: the segments' bytes and positions, the queue offsets, the
    counters."""
    cl = store.commitlog
    segments = tuple(
        (mf.file_from_offset, mf.wrote_position, mf.store_timestamp, bytes(mf.write_target[:]))
        for mf in cl.queue.files
    )
    return (
        cl.max_offset,
        segments,
        dict(cl.topic_queue_table.items()),
        dataclasses.astuple(store.stats),
        store._lag_count.since,
    )


def lane_of(store: MessageStore) -> PutLane:
    lane = store._lane
    assert lane is not None and store.commitlog._lane is lane
    return lane


def warm(store: MessageStore, queue_id: int = 1) -> None:
    """Puts through the Python path that cache the topic and shapes of bm() and msg() and move
    queue ``queue_id`` past its first ConsumeQueue file opening."""
    assert store.put_message(bm(queue_id=queue_id)).ok
    assert store.put_message(msg(), queue_id).ok


def test_the_usual_puts_are_taken_whole_and_read_back(store: MessageStore) -> None:
    lane = lane_of(store)
    warm(store)
    before_ms = time.time_ns() // 1_000_000
    results = [lane.store_put(msg(b"m%03d" % i + b"b" * 96), 1) for i in range(5)]
    results += [lane.store_put(bm(b"n%03d" % i + b"b" * 96, queue_id=1), None) for i in range(5)]
    results += [store.commitlog.put_message(bm(b"d%03d" % i + b"b" * 96)) for i in range(2)]
    after_ms = time.time_ns() // 1_000_000
    assert all(r is not None for r in results)
    offsets = [r.physical_offset for r in results if r is not None]
    assert [r.queue_offset for r in results if r is not None] == list(range(2, 14))
    sizes = [r.size for r in results if r is not None]
    assert [b - a for a, b in itertools.pairwise(offsets)] == sizes[:-1]
    assert all(before_ms <= r.store_timestamp <= after_ms for r in results if r is not None)
    assert store.stats.put_count == 12  # the two warm-up puts and ten through store_put
    assert store.commitlog._cur is not None
    assert store.commitlog._cur.wrote_position == offsets[-1] + sizes[-1]
    assert store.wait_dispatched(10)
    got = store.get_message("G", "LaneT", 1, 0, 100).messages
    assert [m.body[:4] for m in got[2:]] == [b"m%03d" % i for i in range(5)] + [
        b"n%03d" % i for i in range(5)
    ] + [b"d%03d" % i for i in range(2)]
    assert got[2].properties == {"UNIQ_KEY": "U1", "TAGS": "TagA"}
    assert got[2].born_timestamp == got[2].store_timestamp  # one clock read for a Message
    view = store.commitlog.read_record(offsets[5], check_crc=True)
    assert (
        view is not None and view.kind is rec.RecordKind.MESSAGE and view.born_timestamp == 1_700_000_000_000
    )


Attempt = Callable[[MessageStore], object]
#: (what to do first, through the Python path or the lane; the put the lane hands back)
Case = tuple[Callable[[MessageStore], None], Attempt]


def _nothing(s: MessageStore) -> None:
    pass


def _props_like(prefix: bytes) -> bytes:
    """Properties that begin with ``prefix``, as long as PROPS (a shape the cache knows)."""
    out = prefix + b"U\x01" + b"A" * (len(PROPS) - len(prefix) - 3) + b"\x02"
    assert len(out) == len(PROPS)
    return out


def _up_to_cq_file_opening(s: MessageStore) -> None:
    for _ in range(UNITS - 2):
        assert lane_of(s).store_put(bm(), None) is not None
    assert s.commitlog.topic_queue_table[("LaneT", 1)] == UNITS


BIG = b"c" * 1500


def _up_to_a_roll(s: MessageStore) -> None:
    cl = s.commitlog
    assert s.put_message(bm(BIG)).ok  # compiles the shape
    size = s.put_message(bm(BIG)).size
    while cl._cur is not None and cl.file_size - cl._cur.wrote_position >= size + 8:
        assert s.put_message(bm(BIG)).ok
    assert cl.topic_queue_table[("LaneT", 1)] % UNITS


def _writes_refused(s: MessageStore) -> None:
    s.commitlog.set_writable(False, "test")


def _latency_on(s: MessageStore) -> None:
    s.put_latency = ThreadHistograms(PUT_SECONDS_BOUNDS)


def _lag_due(s: MessageStore) -> None:
    lane_of(s).since = lane_of(s).every


def _locked(s: MessageStore) -> object:
    with s.commitlog._put_lock:
        return lane_of(s).store_put(bm(), None)


def _store_put(m: object, queue_id: int | None = None) -> Attempt:
    return lambda s: lane_of(s).store_put(m, queue_id)  # type: ignore[arg-type]


def _parking_message() -> Message:
    m = msg()
    m.properties["__STARTDELIVERTIME"] = "1"
    return m


CASES: dict[str, Case] = {
    "unknown topic": (_nothing, _store_put(bm(topic="Other"))),
    "unknown shape": (_nothing, _store_put(bm(b"x" * 101))),
    "first put of a queue": (_nothing, _store_put(bm(queue_id=2))),
    "ConsumeQueue file opening": (_up_to_cq_file_opening, _store_put(bm())),
    "roll": (_up_to_a_roll, _store_put(bm(BIG))),
    "not writable": (_writes_refused, _store_put(bm())),
    "transaction bits": (_nothing, _store_put(bm(sys_flag=rec.TRANSACTION_PREPARED_TYPE))),
    "IPv6 born host": (_nothing, _store_put(bm(born_host=bytes(16) + BORN[4:]))),
    "BrokerMessage with a queue id": (_nothing, _store_put(bm(), 1)),
    "DELAY property": (
        _nothing,
        _store_put(dataclasses.replace(bm(), properties=_props_like(b"DELAY\x013\x02"))),
    ),
    "TIMER_ property": (
        _nothing,
        _store_put(dataclasses.replace(bm(), properties=_props_like(b"TIMER_X\x019\x02"))),
    ),
    "start-deliver-time property": (
        _nothing,
        _store_put(dataclasses.replace(bm(), properties=_props_like(b"__STARTDELIVERTIME\x019\x02"))),
    ),
    "delay level": (_nothing, _store_put(msg(delay_level=3), 1)),
    "parking property name": (_nothing, _store_put(_parking_message(), 1)),
    "flag beyond int32": (_nothing, lambda s: lane_of(s).put(bm(flag=2**31))),
    "queue id not an int": (_nothing, _store_put(msg(), True)),
    "put lock held": (_nothing, _locked),
    "latency sampled": (_latency_on, _store_put(bm())),
    "lag check due": (_lag_due, _store_put(bm())),
    "not a message": (_nothing, _store_put(("LaneT", b"b" * 100))),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_the_lane_hands_back_what_is_not_usual_with_nothing_done(store: MessageStore, case: Case) -> None:
    prepare, attempt = case
    warm(store)
    prepare(store)
    before = state(store)
    assert attempt(store) is None
    assert state(store) == before


def test_what_the_lane_hands_back_the_python_path_stores(store: MessageStore) -> None:
    warm(store)
    lane = lane_of(store)
    assert lane.store_put(bm(topic="Other"), None) is None
    r = store.put_message(bm(topic="Other"))  # caches the topic and shape
    assert r.ok and r.queue_offset == 0
    again = lane.store_put(bm(topic="Other"), None)
    assert again is not None and again.queue_offset == 1 and again.physical_offset == r.next_offset


def test_a_held_lock_leaves_the_put_to_the_python_path_which_waits(store: MessageStore) -> None:
    warm(store)
    lane = lane_of(store)
    lock = store.commitlog._put_lock
    results: list[object] = []
    done = threading.Event()

    def writer() -> None:
        results.append(store.put_message(bm()))
        done.set()

    lock.acquire()
    try:
        assert lane.put(bm()) is None
        thread = threading.Thread(target=writer)
        thread.start()
        assert not done.wait(0.2)  # handed back by the lane, waiting for the lock in Python
        assert store.commitlog.topic_queue_table[("LaneT", 1)] == 2
    finally:
        lock.release()
    assert done.wait(10)
    thread.join(10)
    assert [r.queue_offset for r in results] == [2]  # type: ignore[attr-defined]
    r = lane.put(bm())
    assert r is not None and r.queue_offset == 3


def test_a_lag_check_due_runs_in_python_and_the_lane_takes_the_next_put(store: MessageStore) -> None:
    warm(store)
    lane = lane_of(store)
    lane.since = lane.every
    assert lane.store_put(bm(), None) is None
    r = store.put_message(bm())  # _put_begin looks at the lag and restarts the count
    assert r.ok and lane.since == r.size
    assert lane.store_put(bm(), None) is not None
    assert lane.since == 2 * r.size


def test_latency_sampling_turns_the_store_side_off_and_on(store: MessageStore) -> None:
    warm(store)
    lane = lane_of(store)
    store.put_latency = ThreadHistograms(PUT_SECONDS_BOUNDS)
    assert lane.timed
    assert lane.store_put(bm(), None) is None
    assert lane.put(bm()) is not None  # the CommitLog's part is not timed
    store.put_latency = None
    assert not lane.timed
    assert lane.store_put(bm(), None) is not None


def test_an_after_put_error_is_raised_and_counted_as_the_python_path_does(tmp_path: pathlib.Path) -> None:
    outcomes = []
    for name in ("lane", "pure"):
        s = MessageStore(config(tmp_path / name))
        s.start()
        try:
            if name == "pure":
                s._lane = None
                s.commitlog._lane = None
            warm(s)

            def boom() -> None:
                raise RuntimeError("listener failed")

            s.commitlog.append_listener = boom
            with pytest.raises(RuntimeError, match="listener failed"):
                s.put_message(bm(b"c" * 100))
            s.commitlog.append_listener = None
            outcomes.append((s.commitlog.max_offset, dataclasses.astuple(s.stats), s._lag_count.since))
        finally:
            s.shutdown()
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][1][2] == 1  # put_failures


def test_sync_flush_puts_go_the_python_way(tmp_path: pathlib.Path) -> None:
    s = MessageStore(config(tmp_path / "sync", flush_disk_type="SYNC_FLUSH"))
    s.start()
    try:
        warm(s)
        lane = lane_of(s)
        assert lane.put(bm()) is None
        assert lane.store_put(bm(), None) is None
        assert s.put_message(bm()).ok
    finally:
        s.shutdown()


def test_with_the_write_buffer_pool_the_lane_writes_into_the_buffer(tmp_path: pathlib.Path) -> None:
    s = MessageStore(config(tmp_path / "pool", transient_store_pool_enable=True, transient_store_pool_size=3))
    s.start()
    try:
        warm(s)
        lane = lane_of(s)
        cur = s.commitlog._cur
        assert cur is not None and cur.write_buffer is not None and lane.target is cur.write_buffer
        taken = 0
        for i in range(80):
            m = msg(b"p%03d" % i + b"b" * 96)
            if lane.store_put(m, 1) is not None:
                taken += 1
            else:  # a ConsumeQueue file opening or a roll
                assert s.put_message(m, 1).ok
        assert taken >= 70

        def all_readable() -> list[bytes]:  # once the commit service has copied the buffer
            s.wait_dispatched(1)
            return [m.body[:4] for m in s.get_message("G", "LaneT", 1, 0, 200).messages[2:]]

        want = [b"p%03d" % i for i in range(80)]
        assert wait_until(lambda: all_readable() == want, "the puts readable")
    finally:
        s.shutdown()


def test_only_a_plain_commitlog_has_a_lane(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = config(tmp_path / "x")
    assert CommitLog(cfg)._lane is not None
    assert DLedgerCommitLog(config(tmp_path / "y"))._lane is None
    monkeypatch.setattr(commitlog_module, "_new_lane", None)  # the pure path
    assert CommitLog(config(tmp_path / "z"))._lane is None


def test_put_lane_refuses_bad_arguments() -> None:
    new = COMPILED.put_lane  # type: ignore[union-attr]

    with pytest.raises(TypeError):
        new(threading.Lock(), [], b"h" * 8, 0, 1024, 10, False)
    with pytest.raises(TypeError):
        new(threading.Lock(), {}, b"h" * 8, 0, 0, 10, False)
    with pytest.raises(TypeError):
        new(threading.Lock(), {}, b"h" * 8, 0, 1024, 0, False)
    with pytest.raises(AttributeError):
        new(object(), {}, b"h" * 8, 0, 1024, 10, False)


def test_after_put_is_not_called_while_the_dispatch_wake_event_is_set(store: MessageStore) -> None:
    warm(store)
    lane = lane_of(store)
    assert store.reput is not None and lane.wake_event is store.reput._wakeup
    assert lane.after_put == store.reput.wakeup
    calls: list[int] = []
    event = threading.Event()
    lane.after_put = lambda: calls.append(1)
    lane.wake_event = event
    try:
        assert lane.put(bm()) is not None
        assert calls == [1]  # clear: what wakeup would do is done
        event.set()
        assert lane.put(bm()) is not None
        assert calls == [1]  # set: wakeup would do nothing, so it is not called
        lane.wake_event = None
        assert lane.put(bm()) is not None
        assert calls == [1, 1]
    finally:
        store.commitlog.append_listener = store.commitlog.append_listener  # restores the lane's copy
    assert lane.wake_event is store.reput._wakeup


def test_no_wake_event_beside_the_commit_waker_or_another_listener(tmp_path: pathlib.Path) -> None:
    s = MessageStore(config(tmp_path / "pool", transient_store_pool_enable=True, transient_store_pool_size=2))
    s.start()
    try:
        lane = lane_of(s)
        assert lane.after_put is s.commitlog._after_put and lane.wake_event is None  # wakes both
        s.commitlog.append_listener = lambda: None
        assert lane.wake_event is None
    finally:
        s.shutdown()


def test_threads_putting_at_once_through_the_lane_and_python_paths_lose_nothing(store: MessageStore) -> None:
    """Single puts (mostly the lane's), batches and rolls (the Python path's, under the put lock)
    from four threads at once, the GIL switched as often as it goes: every record whole, every
    queue offset given once and in order, every put readable."""
    warm(store)
    warm(store, queue_id=2)
    per_thread = 1000
    errors: list[BaseException] = []

    def writer(t: int) -> None:
        try:
            for i in range(per_thread):
                body = b"%d-%03d" % (t, i) + b"b" * 95
                if i % 10 == 9:
                    assert store.put_messages([msg(body), msg(body)], 1 + t % 2).ok
                elif t % 2:
                    assert store.put_message(msg(body), 1 + t % 2).ok
                else:
                    assert store.put_message(bm(body, queue_id=1 + t % 2)).ok
        except BaseException as exc:  # reported below
            errors.append(exc)

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        sys.setswitchinterval(switch)
    assert not errors
    assert store.wait_dispatched(10)
    cl = store.commitlog
    scanned = list(cl.iter_records(0, check_crc=True))
    records = [view for _, view in scanned]
    assert sum(1 for v in records if v.topic == "LaneT") == 2 * 2 + 4 * (per_thread + per_thread // 10)
    ends = [off + v.size for off, v in scanned]
    for end, (nxt, _) in zip(ends, scanned[1:], strict=False):  # contiguous, or the next segment
        assert nxt == end or (nxt % cl.file_size == 0 and nxt - end < 2 * 1024)
    assert ends[-1] == cl.max_offset
    for queue_id in (1, 2):
        offsets = [v.queue_offset for v in records if v.topic == "LaneT" and v.queue_id == queue_id]
        assert offsets == list(range(len(offsets)))
        read: list[int] = []
        while len(read) < len(offsets):  # a pull answers a bounded number of bytes
            got = store.get_message("G", "LaneT", queue_id, len(read), 2000).messages
            assert got
            read += [m.queue_offset for m in got]
        assert read == offsets
