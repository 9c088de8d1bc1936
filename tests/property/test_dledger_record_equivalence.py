"""A DLedger entry's record compiled (``rocketq._speedups.dledger_record``) against its pure
reference (:func:`rocketq.store.dledger_commitlog.pure_dledger_record`) on the same inputs: the
same bytes, or None from the compiled one for a shape it leaves to the layout (skipped, saying
why, when the compiled module is not in use); and a store's entry files written both ways are
the same bytes."""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _support.examples import examples
from _support.fixed_clock import FixedTime, fix_store_clock
from _support.record_cases import CRCS, I64, STORE_HOSTS, TOPICS, broker_message, mostly
from rocketq import speedups
from rocketq.config import StoreConfig
from rocketq.message import BrokerMessage, Message
from rocketq.protocol.record import MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2
from rocketq.store import dledger_commitlog
from rocketq.store.message_store import open_message_store

pytestmark = pytest.mark.skipif(
    speedups.COMPILED is None, reason=f"compiled codecs not in use: {speedups.REASON}"
)


@st.composite
def record_cases(draw: st.DrawFn) -> tuple[Any, ...]:
    msg = broker_message(draw, draw(st.sampled_from([0, 1, 0x100])))
    topic = draw(TOPICS)
    store_host = draw(STORE_HOSTS)
    v2 = draw(st.integers(0, 9)) == 0
    length = (
        64
        + len(msg.born_host)
        - 8
        + len(store_host)
        + 16
        + len(msg.body)
        + (2 if v2 else 1)
        + len(topic)
        + 2
        + len(msg.properties)
    )
    length += draw(st.sampled_from([0, 0, 0, 1, -1]))
    crc = draw(CRCS)
    sys_flag = mostly(draw, st.sampled_from([0, 0x20, 0x4, 0x7FFFFFFF, -1]))
    magic = MESSAGE_MAGIC_CODE_V2 if v2 else MESSAGE_MAGIC_CODE
    qoff, physical, store_ts = (mostly(draw, I64) for _ in range(3))
    return length, msg, crc, sys_flag, qoff, physical, store_ts, store_host, topic, magic


@settings(max_examples=examples(1000), deadline=None)
@given(record_cases())
def test_the_compiled_record_is_the_pure_ones_bytes_or_none(case: tuple[Any, ...]) -> None:
    compiled = dledger_commitlog._dledger_record
    assert compiled is not None
    made = compiled(*case)
    try:
        expected: bytes | None = dledger_commitlog.pure_dledger_record(*case)
    except (struct.error, TypeError):
        expected = None
    if made is not None:
        assert made == expected
        return
    length, msg, _crc, sys_flag, qoff, physical, now, _store_host, topic, magic = case
    ints = (msg.queue_id, msg.flag, msg.born_timestamp, msg.reconsume_times, msg.prepared_transaction_offset)
    usual = (
        expected is not None
        and len(expected) == length
        and magic == MESSAGE_MAGIC_CODE
        and len(msg.born_host) == 8
        and len(topic) <= 127
        and all(type(v) is int for v in (*ints, sys_flag, qoff, physical, now))
    )
    assert not usual  # the usual shape is always taken


def test_the_usual_send_is_taken() -> None:
    msg = BrokerMessage("TopicA", b"payload", b"UNIQ_KEY\x01AB\x02", 2, 7, 0, 1700000000000, bytes(range(8)))
    store_host = bytes([10, 0, 0, 1, 0, 0, 0x2A, 0x9F])
    length = 64 + 8 + 16 + len(msg.body) + 1 + len(b"TopicA") + 2 + len(msg.properties)
    args = (length, msg, 77, 0, 5, 4096, 1_700_000_000_123, store_host, b"TopicA", MESSAGE_MAGIC_CODE)
    compiled = dledger_commitlog._dledger_record
    assert compiled is not None
    assert compiled(*args) == dledger_commitlog.pure_dledger_record(*args)


def test_a_dledger_stores_entry_files_are_the_same_bytes_both_ways(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same puts through a DLedger store (a group of one) with the record compiled and pure,
    the clock fixed: entry files byte for byte the same (and the compiled record was used)."""
    fix_store_clock(monkeypatch)
    monkeypatch.setattr(dledger_commitlog, "time", FixedTime())
    compiled = dledger_commitlog._dledger_record
    assert compiled is not None
    calls: list[int] = []

    def counting(*args: Any) -> bytes | None:
        calls.append(1)
        return compiled(*args)

    files: dict[str, list[bytes]] = {}
    for name, record in (("compiled", counting), ("pure", None)):
        monkeypatch.setattr(dledger_commitlog, "_dledger_record", record)
        cfg = StoreConfig(
            store_path_root_dir=str(tmp_path / name),
            mapped_file_size_commit_log=64 * 1024,
            enable_dleger_commit_log=True,
            d_leger_self_id="n0",
        )
        with open_message_store(cfg) as store:
            for i in range(40):
                props = {"KEYS": f"k{i}"} if i % 3 else {}
                store.put_message(
                    Message("TopicA", f"body-{i}".encode() * (i % 5 + 1), properties=props),
                    queue_id=i % 3,
                )
        data_dir = os.path.join(cfg.store_path_root_dir, "dledger-n0", "data")
        files[name] = [Path(data_dir, n).read_bytes() for n in sorted(os.listdir(data_dir))]
    assert len(calls) >= 40
    assert files["compiled"] == files["pure"]
