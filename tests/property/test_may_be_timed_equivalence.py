"""The store's pre-check for a timer or a delay level compiled (``rocketq._speedups.may_be_timed``)
against its pure reference (:func:`rocketq.store.store_puts.pure_may_be_timed`): the same answer
for any bytes, drawn from the three names, pieces and near misses of them and other bytes
(skipped, saying why, when the compiled module is not in use); and a store's put of a message
with one of the names parks it, with none stores it as it is."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _support.examples import examples
from rocketq import speedups
from rocketq.config import StoreConfig
from rocketq.message import BrokerMessage, Message
from rocketq.store import store_puts
from rocketq.store.message_store import open_message_store

pytestmark = pytest.mark.skipif(
    speedups.COMPILED is None, reason=f"compiled codecs not in use: {speedups.REASON}"
)

NAMES = (b"TIMER_", b"__STARTDELIVERTIME\x01", b"DELAY\x01")
#: the names, their prefixes and suffixes (near misses), and the bytes around them
pieces = st.one_of(
    st.sampled_from(NAMES),
    st.sampled_from(NAMES).flatmap(lambda n: st.integers(0, len(n) - 1).map(lambda k: n[:k])),
    st.sampled_from(NAMES).flatmap(lambda n: st.integers(1, len(n)).map(lambda k: n[k:])),
    st.sampled_from([b"\x01", b"\x02", b"_", b"T", b"D", b"KEYS", b"TIMER", b"DELAY", b"DELAY\x02"]),
    st.binary(max_size=12),
)


@settings(max_examples=examples(2000), deadline=None)
@given(st.lists(pieces, max_size=12).map(b"".join))
def test_compiled_answers_as_the_pure_one(props: bytes) -> None:
    compiled = speedups.COMPILED.may_be_timed  # type: ignore[union-attr]
    expected = store_puts.pure_may_be_timed(props)
    assert compiled(props) is expected
    assert compiled(bytearray(props)) is expected
    assert compiled(memoryview(props)) is expected


def test_compiled_is_the_one_the_store_uses() -> None:
    assert store_puts._may_be_timed is speedups.COMPILED.may_be_timed  # type: ignore[union-attr]


def test_a_name_at_either_end_and_a_cut_name() -> None:
    compiled = speedups.COMPILED.may_be_timed  # type: ignore[union-attr]
    for name in NAMES:
        assert compiled(name) and compiled(b"K\x01v\x02" + name) and compiled(name + b"1\x02")
        assert not compiled(name[:-1]) and not compiled(b"K\x01v\x02" + name[:-1])
    assert not compiled(b"") and not compiled(b"KEYS\x01a\x02TAGS\x01b\x02")
    with pytest.raises(TypeError):
        compiled("TIMER_")


def test_the_store_parks_what_names_a_delay_level_and_keeps_the_rest(tmp_path: Path) -> None:
    cfg = StoreConfig(store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commit_log=64 * 1024)
    cfg = dataclasses.replace(cfg, enable_dleger_commit_log=True, d_leger_self_id="n0")
    born = b"\x7f\x00\x00\x01\x00\x00\x30\x39"
    with open_message_store(cfg) as store:
        plain = BrokerMessage.from_message(
            Message(topic="T", body=b"a", properties={"KEYS": "k"}), 0, born_host=born
        )
        delayed = BrokerMessage.from_message(
            Message(topic="T", body=b"b", properties={"DELAY": "2"}), 0, born_host=born
        )
        assert store._inner(plain, None) is plain
        parked = store._inner(delayed, None)
        assert parked.topic == "SCHEDULE_TOPIC_XXXX" and parked is not delayed
