"""Retention of a DLedger store (a group of one): an adopted store's old CommitLog segments go
first, the last one too (the entries follow it), then the entry store's data files; the
minimum offsets move and a restart finds the same state."""

from __future__ import annotations

import dataclasses
import os

from rocketq.config import StoreConfig
from rocketq.message import Message
from rocketq.store.dledger_store import DLedgerMessageStore
from rocketq.store.message_store import MessageStore, open_message_store
from rocketq.store.store_queries import GetMessageStatus

BODY = bytes(1000)


def put(store: MessageStore, first: int, n: int) -> None:
    for i in range(first, first + n):
        store.put_message(Message("T", i.to_bytes(4, "big") + BODY), queue_id=0)


def numbers_from_min(store: MessageStore) -> list[int]:
    assert store.wait_dispatched(10)
    offset, out = store.get_min_offset("T", 0), []
    while offset < store.get_max_offset("T", 0):
        r = store.get_message("G", "T", 0, offset, 64)
        assert r.status is GetMessageStatus.FOUND, (offset, r.status)
        out += [int.from_bytes(m.body[:4], "big") for m in r.messages]
        offset = r.next_begin_offset
    return out


def test_old_segments_then_entry_files_go_and_a_restart_agrees(store_config: StoreConfig) -> None:
    cfg = dataclasses.replace(store_config, file_reserved_time_hours=0, clean_resource_interval_ms=3_600_000)
    with MessageStore(cfg) as plain:
        put(plain, 0, 200)  # about three old segments
        assert len(plain.commitlog.queue.files) >= 3
    dl = dataclasses.replace(cfg, enable_dleger_commit_log=True, d_leger_self_id="n0")
    data_dir = os.path.join(dl.store_path_root_dir, "dledger-n0", "data")
    with open_message_store(dl) as s:
        assert isinstance(s, DLedgerMessageStore)
        put(s, 200, 300)
        assert s.wait_dispatched(10)
        before = sorted(int(n) for n in os.listdir(data_dir))
        assert len(before) >= 4
        s.run_retention_now()
        assert s.commitlog.queue.first() is None  # every old segment went, the last one too
        left = sorted(int(n) for n in os.listdir(data_dir))
        assert len(left) == 1 and left[0] == before[-1]
        assert s.commitlog.min_offset == left[0]
        assert s.get_message("G", "T", 0, 0, 8).status is GetMessageStatus.OFFSET_TOO_SMALL
        kept = numbers_from_min(s)
        assert kept and kept == list(range(kept[0], 500)) and kept[0] > 200
    with open_message_store(dl) as s:
        assert s.commitlog.min_offset == left[0]
        assert numbers_from_min(s) == kept
        put(s, 500, 5)
        assert numbers_from_min(s) == [*kept, *range(500, 505)]
