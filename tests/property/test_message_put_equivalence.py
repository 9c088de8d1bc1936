"""The embedded store's compiled conversion of ``Message`` objects (``message_inner`` for
``put_message``, ``plan_messages`` + ``batch_write`` for ``put_messages``) is the pure one:
the same BrokerMessages where it takes a message, nothing taken that the pure path would
refuse, park or change, and byte for byte the same CommitLog records, results and errors
through a store."""

from __future__ import annotations

import pathlib
import tempfile
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_packed_batch_equivalence import open_store

from _support.examples import examples
from _support.fixed_clock import NOW_NS, fix_store_clock
from rocketq.message import BrokerMessage, Message, encode_properties
from rocketq.speedups import COMPILED
from rocketq.store import store_puts as store_module
from rocketq.store.packed_batch import PackedBatch

pytestmark = pytest.mark.skipif(
    COMPILED is None or not hasattr(COMPILED, "plan_messages"), reason="the compiled module is not in use"
)

BORN = b"\x7f\x00\x00\x01\x00\x00\x9c\x40"

PARKING_NAMES = sorted(store_module._PARKING_KEYS)
names = st.sampled_from(
    ["UNIQ_KEY", "TAGS", "KEYS", "WAIT", "x", "é", "", "a\x01", "b\x02", "\udc80", *PARKING_NAMES]
)
texts = st.one_of(
    st.sampled_from(["", "v", "true", "3", "ключ", "a b", "x\x01", "y\x02", "\ud800"]), st.text(max_size=4)
)
key_lists = st.lists(st.one_of(st.sampled_from(["", "k1", "k 2", "ключ"]), texts), max_size=3)


@st.composite
def messages(draw: st.DrawFn, *, parking: bool = True, odd_types: bool = True) -> Message:
    """Mostly plain messages; sometimes one with a separator, a lone surrogate, a None value, a
    name that parks (when ``parking``), a delay level, keys as a str or a tuple, a value that is
    not a str, a flag out of the int32 range (when ``odd_types``)."""
    prop_names = names if parking else names.filter(lambda n: n not in store_module._PARKING_KEYS)
    values: st.SearchStrategy[object] = st.one_of(st.none(), texts)
    if odd_types:
        values = st.one_of(values, st.just(3))
    keys: st.SearchStrategy[object] = st.one_of(key_lists, key_lists.map(tuple))
    if odd_types:
        keys = st.one_of(keys, st.just("ab"))
    props = draw(st.dictionaries(prop_names, values, max_size=5))
    if draw(st.integers(0, 2)):  # the usual shape: a UNIQ_KEY and a plain value first
        props = {"UNIQ_KEY": f"ID{draw(st.integers(0, 99))}", "WAIT": "true", **props}
    flags = st.integers(-(2**31), 2**31 - 1)
    if odd_types:
        flags = st.one_of(flags, st.just(2**31))
    return Message(
        draw(st.sampled_from(["PubT", "PubT", "PubT", "PubU"])),
        draw(st.binary(max_size=200)),
        tags=draw(st.one_of(st.none(), st.sampled_from(["", "TagA"]), texts)),
        keys=draw(keys),  # type: ignore[arg-type]
        properties=props,  # type: ignore[arg-type]
        delay_level=draw(st.sampled_from([0, 0, 0, 0, -1] + ([1] if parking else []))),
        flag=draw(flags),
    )


def pure_inner(m: Message, qid: int, born: int) -> BrokerMessage | None:
    """put_message's pure conversion of a Message nothing parks (None: it may park)."""
    if not m.delay_level and store_module._PARKING_KEYS.isdisjoint(m.properties):
        props = encode_properties(m.all_properties()).encode()
        return BrokerMessage(m.topic, m.body, props, qid, m.flag, 0, born, BORN)
    return None


@settings(max_examples=examples(600))
@given(messages(), st.integers(0, 7))
def test_message_inner_is_the_pure_conversion(m: Message, qid: int) -> None:
    got = COMPILED.message_inner(m, qid, 1234, BORN)  # type: ignore[union-attr]
    try:
        want = pure_inner(m, qid, 1234)
    except Exception:
        assert got is None  # what the pure path refuses is handed back to it
        return
    if got is None:
        # handed back although the pure path converts it: only for what may park or an
        # unusual type (keys as a str: the pure path joins its characters)
        assert want is None or not isinstance(m.keys, (list, tuple))
    else:
        assert type(got) is BrokerMessage
        assert got == want
        assert type(got.properties) is bytes


@settings(max_examples=examples(300))
@given(st.lists(messages(), min_size=0, max_size=6), st.integers(0, 7))
def test_plan_messages_lays_out_the_pure_messages(msgs: list[Message], qid: int) -> None:
    planned = COMPILED.plan_messages(msgs)  # type: ignore[union-attr]
    try:
        want = [pure_inner(m, qid, 1234) for m in msgs]
    except Exception:
        assert planned is None
        return
    takes = (
        bool(msgs)
        and all(w is not None for w in want)
        and len({m.topic for m in msgs}) == 1
        and all(-(2**31) <= m.flag < 2**31 and isinstance(m.keys, (list, tuple)) for m in msgs)
    )
    if planned is None:
        assert not takes
        return
    assert takes
    data, plan = planned
    batch = PackedBatch(msgs[0].topic, qid, 0, 1234, BORN, data, b"", plan)
    assert len(batch) == len(msgs)
    assert list(batch) == want


def test_plan_messages_turns_down_what_is_not_a_list_of_messages() -> None:
    m = Message("PubT", b"b", tags="t", properties={"UNIQ_KEY": "A"})
    plan = COMPILED.plan_messages  # type: ignore[union-attr]
    assert plan([]) is None
    assert plan((m,)) is None  # a tuple: the pure loop takes it
    assert plan([m, BrokerMessage("PubT", b"b")]) is None
    assert plan([m, Message("PubT", bytearray(b"b"))]) is None  # type: ignore[arg-type]
    assert plan([m, Message("Other", b"b")]) is None
    assert plan([m, m]) is not None


@pytest.fixture
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    fix_store_clock(monkeypatch)
    yield


ops = st.lists(
    st.tuples(
        st.sampled_from(["single", "batch"]),
        st.lists(messages(parking=False), min_size=1, max_size=40),
        st.one_of(st.none(), st.integers(0, 3)),
    ),
    min_size=1,
    max_size=8,
)


@settings(
    max_examples=examples(40), suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None
)
@given(ops)
def test_public_puts_are_the_pure_paths_byte_for_byte(
    fixed_clock: None, monkeypatch: pytest.MonkeyPatch, steps: list[tuple[str, list[Message], int | None]]
) -> None:
    """Single and batched puts of Messages through the compiled conversion and through the pure
    one (the compiled functions unbound) write the same records and give the same results and
    errors, segment and ConsumeQueue file boundaries crossed."""
    compiled = (store_module._message_inner, store_module._plan_messages)
    with tempfile.TemporaryDirectory() as tmp:
        stores = [open_store(pathlib.Path(tmp) / "compiled"), open_store(pathlib.Path(tmp) / "pure")]
        lane = stores[0]._lane
        if lane is not None:  # the compiled single put reads its own clock
            lane.clock = lambda: NOW_NS
        stores[1]._lane = stores[1].commitlog._lane = None  # the pure one puts in Python only
        try:
            for kind, msgs, qid in steps:
                outcomes: list[list[object]] = []
                for store, fns in zip(stores, (compiled, (None, None)), strict=True):
                    monkeypatch.setattr(store_module, "_message_inner", fns[0])
                    store._plan_messages = fns[1]
                    try:
                        if kind == "single":
                            outcomes.append([tuple(store.put_message(m, qid)) for m in msgs])
                        else:
                            outcomes.append([tuple(store.put_messages(msgs, qid))])
                    except Exception as exc:  # the errors are compared
                        outcomes.append([type(exc), str(exc)])
                assert outcomes[0] == outcomes[1]
            for store in stores:
                assert store.wait_dispatched(10)
            a, b = (s.commitlog for s in stores)
            assert a.max_offset == b.max_offset
            for off in range(max(a.min_offset, 0), a.max_offset, a.file_size):
                size = min(a.file_size, a.max_offset - off)
                assert a.read(off, size) == b.read(off, size)
            for topic in ("PubT", "PubU"):
                for q in range(4):
                    got = [stores[i].get_message("G", topic, q, 0, 4000) for i in (0, 1)]
                    assert [m.properties for m in got[0].messages] == [m.properties for m in got[1].messages]
        finally:
            for store in stores:
                store.shutdown()


def test_a_plain_batch_is_packed_and_reads_back(tmp_path: pathlib.Path) -> None:
    store = open_store(tmp_path / "s")
    packed: list[bool] = []
    original = store.commitlog._put_packed

    def counted(batch: PackedBatch) -> object:
        r = original(batch)
        packed.append(r is not None)
        return r

    store.commitlog._put_packed = counted  # type: ignore[assignment,method-assign]
    try:
        first = Message("PubT", b"first", tags="T0", properties={"UNIQ_KEY": "F"})
        store.put_message(first, 1)  # the topic seen: a batch of it takes the packed path
        msgs = [
            Message(
                "PubT",
                b"b%d" % i,
                tags="TagA",
                keys=["k1", "", "k2"],
                properties={"UNIQ_KEY": f"U{i}"},
                flag=i,
            )
            for i in range(5)
        ]
        r = store.put_messages(msgs, 1)
        assert packed == [True]
        assert (r.msg_num, r.queue_offset) == (5, 1)
        assert store.wait_dispatched(10)
        got = store.get_message("G", "PubT", 1, 0, 10).messages
        assert [m.body for m in got] == [b"first"] + [b"b%d" % i for i in range(5)]
        assert [m.flag for m in got[1:]] == list(range(5))
        assert got[1].properties == {"UNIQ_KEY": "U0", "TAGS": "TagA", "KEYS": "k1 k2"}
        assert got[0].tags == "T0"
    finally:
        store.shutdown()
