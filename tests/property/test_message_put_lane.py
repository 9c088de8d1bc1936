"""The compiled single put (``PutLane``: ``CommitLog.put_message`` and ``MessageStore.put_message``
in one call) is the pure path: two stores, one with the lane and one without any compiled put,
fed the same single puts of ``Message`` and ``BrokerMessage`` objects (usual and unusual ones),
direct CommitLog puts, batches and writability changes with the clock fixed, write the same files
byte for byte and give the same results, errors and counts, across segment and ConsumeQueue file
boundaries."""

from __future__ import annotations

import pathlib
import tempfile
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _support.examples import examples
from _support.fixed_clock import NOW_NS, fix_store_clock
from rocketq.config import StoreConfig
from rocketq.message import BrokerMessage, Message
from rocketq.speedups import COMPILED
from rocketq.store import commitlog as commitlog_module
from rocketq.store import store_puts as store_module
from rocketq.store.message_store import MessageStore

pytestmark = pytest.mark.skipif(
    COMPILED is None or not hasattr(COMPILED, "put_lane"), reason="the compiled module is not in use"
)

BORN = b"\x7f\x00\x00\x01\x00\x00\x9c\x40"
BORN_V6 = bytes(16) + b"\x00\x00\x9c\x40"
TOPICS = ["LaneT", "LaneT", "LaneT", "LaneU", "%RETRY%G"]
#: Timer properties ask for a delivery that is due already (the message is stored as it is, by
#: the Python path): a parked timer message would be moved by the timer service's thread.
HOUR_MS = 3_600_000


@pytest.fixture
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    fix_store_clock(monkeypatch)
    yield


def open_pair(root: pathlib.Path) -> tuple[MessageStore, MessageStore]:
    """(with the lane, its clock fixed; without it)."""
    stores = []
    for name in ("lane", "pure"):
        cfg = StoreConfig(
            store_path_root_dir=str(root / name),
            mapped_file_size_commit_log=16 * 1024,
            mapped_file_size_consume_queue=20 * 30,
            flush_disk_type="ASYNC_FLUSH",
        )
        store = MessageStore(cfg)
        store.start()
        # Messages parked by a delay level stay parked: the schedule service's thread would
        # deliver them at a time of its own (a fixed store time in the past is due at once).
        assert store.schedule is not None
        store.schedule.shutdown()
        stores.append(store)
    lane = stores[0]._lane
    assert lane is not None and stores[0].commitlog._lane is lane
    lane.clock = lambda: NOW_NS
    stores[1]._lane = None
    stores[1].commitlog._lane = None
    return stores[0], stores[1]


bodies = st.one_of(st.sampled_from([b"", b"b" * 100, b"c" * 1500]), st.binary(max_size=300))


@st.composite
def messages(draw: st.DrawFn) -> Message:
    props: dict[str, str] = {"UNIQ_KEY": f"U{draw(st.integers(0, 9))}"}
    extra = draw(
        st.sampled_from([None, None, None, ("WAIT", "true"), ("DELAY", "17"), ("TIMER_DELAY_MS", "0")])
    )
    if extra is not None:
        props[extra[0]] = extra[1]
    return Message(
        draw(st.sampled_from(TOPICS)),
        draw(bodies),
        tags=draw(st.sampled_from([None, "TagA", "ключ"])),
        keys=draw(st.sampled_from([[], ["k1"], ["k1", "k 2"]])),
        properties=props,
        delay_level=draw(st.sampled_from([0, 0, 0, 0, 0, 17])),
        flag=draw(st.sampled_from([0, 0, 7, -1, 2**31])),
    )


@st.composite
def broker_messages(draw: st.DrawFn) -> BrokerMessage:
    props = draw(
        st.sampled_from(
            [
                b"UNIQ_KEY\x01A1\x02WAIT\x01true\x02",
                b"UNIQ_KEY\x01A2\x02TAGS\x01TagA\x02",
                b"",
                b"DELAY\x0117\x02",
                b"TIMER_DELAY_MS\x010\x02",
                b"__STARTDELIVERTIME\x01%d\x02" % (NOW_NS // 1_000_000 - HOUR_MS),
            ]
        )
    )
    return BrokerMessage(
        draw(st.sampled_from(TOPICS)),
        draw(bodies),
        props,
        draw(st.sampled_from([0, 1, 2, 3, 3])),
        draw(st.sampled_from([0, 0, 5])),
        draw(st.sampled_from([0, 0, 0, 0x4, 0x8, 0xC, 0x1, 0x10])),
        draw(st.sampled_from([1_700_000_000_000, 0, -5])),
        draw(st.sampled_from([BORN, BORN, BORN, BORN_V6, b"\x01\x02"])),
        draw(st.sampled_from([0, 0, 3])),
        draw(st.sampled_from([0, 0, 77])),
    )


steps = st.lists(
    st.one_of(
        st.tuples(
            st.just("single"), st.lists(messages(), min_size=1, max_size=30), st.sampled_from([None, 0, 1, 3])
        ),
        st.tuples(st.just("broker"), st.lists(broker_messages(), min_size=1, max_size=30), st.none()),
        st.tuples(st.just("direct"), st.lists(broker_messages(), min_size=1, max_size=10), st.none()),
        st.tuples(st.just("broker_qid"), st.lists(broker_messages(), min_size=1, max_size=5), st.just(2)),
        st.tuples(st.just("batch"), st.lists(messages(), min_size=1, max_size=8), st.sampled_from([None, 2])),
        st.tuples(st.just("writable"), st.just([]), st.sampled_from([0, 1])),
    ),
    min_size=1,
    max_size=10,
)


def _put(store: MessageStore, kind: str, msgs: list[object], qid: int | None) -> list[object]:
    out: list[object] = []
    if kind == "writable":
        store.commitlog.set_writable(bool(qid), "lane test")
        return out
    if kind == "batch":
        return [tuple(store.put_messages(msgs, qid))]  # type: ignore[arg-type]
    for m in msgs:
        try:
            if kind == "direct":
                assert isinstance(m, BrokerMessage)
                # a copy each: a put that refuses may have changed nothing, but both stores get equals
                r = store.commitlog.put_message(BrokerMessage(**{f: getattr(m, f) for f in m.__slots__}))
            else:
                r = store.put_message(m, qid)  # type: ignore[arg-type]
            out.append(tuple(r))
        except Exception as exc:  # the errors are compared
            out.append((type(exc), str(exc)))
    return out


@settings(
    max_examples=examples(60), suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None
)
@given(steps)
def test_the_lane_is_the_pure_put_byte_for_byte(
    fixed_clock: None, monkeypatch: pytest.MonkeyPatch, plan: list[tuple[str, list[object], int | None]]
) -> None:
    compiled = (store_module._message_inner, store_module._plan_messages, commitlog_module._put_record)
    # Batches of Messages take the compiled plan_messages in both stores: it packs a batch
    # without caching the shapes the pure batch path caches, so a later single put of such a
    # shape would go the general path in one store and the fast path in the other (the same
    # record, a result whose physical_offsets is [offset] instead of None).
    pure = (None, compiled[1], None)
    with tempfile.TemporaryDirectory() as tmp:
        lane_store, pure_store = open_pair(pathlib.Path(tmp))
        try:
            for kind, msgs, qid in plan:
                outcomes = []
                for store, fns in ((lane_store, compiled), (pure_store, pure)):
                    monkeypatch.setattr(store_module, "_message_inner", fns[0])
                    monkeypatch.setattr(commitlog_module, "_put_record", fns[2])
                    store._plan_messages = fns[1]
                    try:
                        outcomes.append(_put(store, kind, msgs, qid))
                    except Exception as exc:
                        outcomes.append([type(exc), str(exc)])
                assert outcomes[0] == outcomes[1], kind
            for store in (lane_store, pure_store):
                store.commitlog.set_writable(True)
                assert store.wait_dispatched(10)
            a, b = lane_store.commitlog, pure_store.commitlog
            assert a.max_offset == b.max_offset
            assert [mf.wrote_position for mf in a.queue.files] == [mf.wrote_position for mf in b.queue.files]
            assert [mf.store_timestamp for mf in a.queue.files] == [
                mf.store_timestamp for mf in b.queue.files
            ]
            for off in range(0, a.max_offset, a.file_size):
                size = min(a.file_size, a.max_offset - off)
                assert a.read(off, size) == b.read(off, size)
            assert dict(a.topic_queue_table.items()) == dict(b.topic_queue_table.items())
            assert lane_store.stats == pure_store.stats
            assert lane_store._lag_count.since == pure_store._lag_count.since
            for topic in sorted(set(TOPICS)):
                for q in range(4):
                    got = [s.get_message("G", topic, q, 0, 4000) for s in (lane_store, pure_store)]
                    assert [m.msg_id for m in got[0].messages] == [m.msg_id for m in got[1].messages]
        finally:
            for store in (lane_store, pure_store):
                store.shutdown()
