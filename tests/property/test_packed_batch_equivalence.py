"""A batch send packed by the compiled path (``batch_plan`` + ``batch_write``) is what the
general path makes of it: the same messages when it takes a batch, byte for byte the same
CommitLog records, results and ConsumeQueue file reservations; and it takes the usual batch of
a RocketMQ client."""

from __future__ import annotations

import dataclasses
import pathlib
import tempfile
import zlib
from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _support.examples import examples
from rocketq.broker.send_properties import cluster_property, properties_as_sent
from rocketq.config import StoreConfig
from rocketq.errors import MessageIllegal
from rocketq.message import BrokerMessage, decode_properties
from rocketq.protocol.batch import decode_batch_entries, encode_batch_entries
from rocketq.speedups import COMPILED
from rocketq.store import commitlog as commitlog_module
from rocketq.store.commitlog import PutMessageResult
from rocketq.store.message_store import MessageStore
from rocketq.store.packed_batch import PackedBatch, plan_batch

pytestmark = pytest.mark.skipif(
    COMPILED is None or not hasattr(COMPILED, "batch_plan"), reason="the compiled module is not in use"
)

SUFFIX = cluster_property("DefaultCluster")
assert SUFFIX is not None
BORN = b"\x7f\x00\x00\x01\x00\x00\x9c\x40"
TOPIC = "PackedT"

names = st.sampled_from(
    ["UNIQ_KEY", "TAGS", "KEYS", "WAIT", "CLUSTER", "POP_CK", "DELAY", "TIMER_DELAY_SEC", "x", "é", ""]
)
values = st.one_of(st.sampled_from(["", "v", "ID-1", "3", "true", "ключ"]), st.text(max_size=5))


@st.composite
def client_properties(draw: st.DrawFn) -> bytes:
    """As a client sends them (distinct names, a UNIQ_KEY), sometimes not (any of the pieces
    the compiled path must turn down: duplicates, empty parts, reserved names, non-ASCII)."""
    if draw(st.integers(0, 3)):
        props = {"UNIQ_KEY": draw(st.sampled_from(["7F000001ABCD", "ID"]))}
        for name in draw(st.lists(st.sampled_from(["TAGS", "KEYS", "WAIT", "x"]), unique=True, max_size=3)):
            props[name] = draw(st.sampled_from(["t", "k1 k2", "true", "1"]))
        pieces = list(props.items())
    else:
        pieces = draw(st.lists(st.tuples(names, values), max_size=5))
    text = "".join(f"{k}\x01{v}\x02" for k, v in pieces)
    return text.encode("utf-8", "surrogatepass")


@st.composite
def batches(draw: st.DrawFn) -> tuple[bytes, tuple[str, ...]]:
    entries = draw(
        st.lists(
            st.tuples(st.binary(max_size=300), client_properties(), st.integers(-(2**31), 2**31 - 1)),
            min_size=1,
            max_size=30,
        )
    )
    shared = tuple(draw(st.lists(st.sampled_from(["WAIT", "TAGS", "x"]), unique=True, max_size=2)))
    return encode_batch_entries(entries), shared


def reference(data: bytes, shared: tuple[str, ...]) -> list[BrokerMessage] | None:
    """What the broker's general loop builds, or None when a message is not taken as sent (its
    properties would be rebuilt, with new ids where it lacks a UNIQ_KEY)."""
    out = []
    shared_map = dict.fromkeys(shared, "s")
    for body, raw, flag in decode_batch_entries(data):
        text = raw.decode("utf-8", "replace")
        props = properties_as_sent(raw, text, decode_properties(text), shared_map, SUFFIX)
        if props is None:
            return None
        out.append(BrokerMessage(TOPIC, body, props, 2, flag, 0, 1234, BORN))
    return out


def packed(data: bytes, shared: tuple[str, ...]) -> PackedBatch | None:
    return plan_batch(
        data,
        SUFFIX,
        tuple(k.encode() for k in shared),
        topic=TOPIC,
        queue_id=2,
        sys_flag=0,
        born_timestamp=1234,
        born_host=BORN,
    )


@settings(max_examples=examples(400))
@given(batches())
def test_a_planned_batch_is_what_the_general_path_builds(batch: tuple[bytes, tuple[str, ...]]) -> None:
    data, shared = batch
    plan = packed(data, shared)
    ref = reference(data, shared)
    if plan is not None:
        assert ref is not None  # never taken where the general path would change a message
        assert len(plan) == len(ref)
        assert list(plan) == ref
        assert not any(b"TIMER_" in m.properties or b"DELAY\x01" in m.properties for m in plan)
    elif ref is not None:
        # turned down although taken as sent: only for what may park in a store or non-ASCII
        assert any(
            b"TIMER_" in m.properties
            or b"DELAY\x01" in m.properties
            or b"__STARTDELIVERTIME\x01" in m.properties
            or not m.properties.isascii()
            for m in ref
        )


@settings(max_examples=examples(100))
@given(
    st.lists(
        st.tuples(st.binary(max_size=200), st.sampled_from(["t", "k1 k2", "ID"]), st.integers(0, 9)),
        min_size=1,
        max_size=40,
    )
)
def test_the_usual_client_batch_is_taken(entries: list[tuple[bytes, str, int]]) -> None:
    data = encode_batch_entries(
        [(body, f"WAIT\x01true\x02TAGS\x01{tag}\x02UNIQ_KEY\x01ID{i}\x02".encode(), flag)
         for i, (body, tag, flag) in enumerate(entries)]
    )  # fmt: skip
    plan = packed(data, ("WAIT",))
    assert plan is not None and len(plan) == len(entries)


@st.composite
def puts(draw: st.DrawFn) -> list[list[tuple[bytes, bytes, int]]]:
    """Batches of usual messages, large enough together to cross segment and ConsumeQueue file
    boundaries of the small test store."""
    out = []
    for b in range(draw(st.integers(1, 6))):
        n = draw(st.integers(1, 60))
        out.append(
            [
                (
                    draw(st.binary(min_size=0, max_size=400)),
                    f"UNIQ_KEY\x01B{b}M{i}\x02TAGS\x01t\x02".encode(),
                    i,
                )
                for i in range(n)
            ]
        )
    return out


@pytest.fixture
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(commitlog_module, "_time_ns", lambda: 1_700_000_000_000 * 1_000_000)
    yield


def open_store(root: pathlib.Path) -> MessageStore:
    cfg = StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=32 * 1024,
        mapped_file_size_consume_queue=20 * 50,
        flush_disk_type="ASYNC_FLUSH",
    )
    store = MessageStore(cfg)
    store.start()
    return store


@settings(
    max_examples=examples(40), suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None
)
@given(puts())
def test_packed_records_are_the_general_paths_byte_for_byte(
    fixed_clock: None, batches_put: list[list[tuple[bytes, bytes, int]]]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        stores = [open_store(pathlib.Path(tmp) / "packed"), open_store(pathlib.Path(tmp) / "general")]
        reserved: list[list[tuple[str, int, int]]] = [[], []]
        try:
            for store, seen in zip(stores, reserved, strict=True):
                store.put_message(BrokerMessage(TOPIC, b"first", b"UNIQ_KEY\x01F\x02", 2, born_host=BORN))
                inner = store.commitlog.reserve_queue_file
                assert inner is not None

                def spy(
                    topic: str,
                    qid: int,
                    qoff: int,
                    seen: list[tuple[str, int, int]] = seen,
                    inner: Callable[[str, int, int], None] = inner,
                ) -> None:
                    seen.append((topic, qid, qoff))
                    inner(topic, qid, qoff)

                store.commitlog.reserve_queue_file = spy
            packed_puts = []
            original = stores[0].commitlog._put_packed

            def counted(batch: PackedBatch) -> PutMessageResult | None:
                r = original(batch)
                packed_puts.append(r is not None)
                return r

            stores[0].commitlog._put_packed = counted  # type: ignore[method-assign]
            for entries in batches_put:
                data = encode_batch_entries(entries)
                plan = packed(data, ())
                assert plan is not None
                general = list(plan)  # built: a plain list goes the general way
                r1 = stores[0].put_messages(plan)
                r2 = stores[1].put_messages(general)
                assert tuple(r1) == tuple(r2)  # status, offsets, sizes, queue offset, time, count
            assert packed_puts == [True] * len(batches_put)  # every batch took the packed path
            assert reserved[0] == reserved[1]
            for store in stores:
                assert store.wait_dispatched(10)
            a, b = (s.commitlog for s in stores)
            assert a.max_offset == b.max_offset
            assert a.read(a.min_offset, 1) is not None
            for off in range(0, a.max_offset, a.file_size):
                size = min(a.file_size, a.max_offset - off)
                assert a.read(off, size) == b.read(off, size)
            got = stores[0].get_message("G", TOPIC, 2, 1, 4000)
            want = [m.body for entries in batches_put for m in [BrokerMessage(TOPIC, e[0]) for e in entries]]
            assert [m.body for m in got.messages] == want[: len(got.messages)]
            for m in got.messages:
                assert m.body_crc == zlib.crc32(m.body) & 0x7FFFFFFF
                assert m.properties["CLUSTER"] == "DefaultCluster"
        finally:
            for store in stores:
                store.shutdown()


def test_a_batch_past_a_limit_or_on_a_new_topic_goes_the_general_way(
    store_config: StoreConfig,
) -> None:
    """The packed path hands back what it does not take: the general path then writes it or
    raises its error (here a body over the size limit)."""
    cfg = dataclasses.replace(store_config, max_message_size=100)
    store = MessageStore(cfg)
    store.start()
    try:
        data = encode_batch_entries([(b"x" * 50, b"UNIQ_KEY\x01A\x02", 0)])
        plan = packed(data, ())
        assert plan is not None
        r = store.put_messages(plan)  # a topic the CommitLog has not seen: built and written
        assert r.msg_num == 1
        big = packed(encode_batch_entries([(b"y" * 101, b"UNIQ_KEY\x01B\x02", 0)]), ())
        assert big is not None
        with pytest.raises(MessageIllegal, match="exceeds max 100"):
            store.put_messages(big)
    finally:
        store.shutdown()
