"""DLedger dispatch of committed entries through a real store: a window's bodies are parsed as
one joined window and dispatched as one batch, each record at its entry's position plus the
header, with the same requests as entries dispatched one at a time; a window that is not one
whole record per body falls back to that path, which logs the bad entry and dispatches the rest
(``rocketq.store.dledger_window``; its own unit tests are tests/unit/test_dledger_window.py)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator

import pytest

from rocketq.config import StoreConfig
from rocketq.ha.entry_format import BODY_OFFSET
from rocketq.message import Message
from rocketq.store.dledger_reput import DLedgerReputService
from rocketq.store.dledger_store import DLedgerMessageStore
from rocketq.store.message_store import open_message_store
from rocketq.store.record_scan import DispatchRequest
from rocketq.store.store_queries import GetMessageStatus

FIELDS = (
    "topic",
    "queue_id",
    "commit_log_offset",
    "msg_size",
    "tags_code",
    "store_timestamp",
    "consume_queue_offset",
    "keys",
    "uniq_key",
    "sys_flag",
)


class Recorder:
    """A dispatcher keeping what it was given: (batch type, requests as field tuples)."""

    def __init__(self) -> None:
        self.windows: list[tuple[str, list[tuple[object, ...]]]] = []

    def __call__(self, reqs: list[DispatchRequest]) -> None:
        if len(reqs):
            rows = [tuple(getattr(r, f) for f in FIELDS) for r in reqs]
            self.windows.append((type(reqs).__name__, rows))

    def rows(self) -> list[tuple[object, ...]]:
        return [row for _, batch in self.windows for row in batch]


@pytest.fixture
def dl_store(store_config: StoreConfig) -> Iterator[DLedgerMessageStore]:
    cfg = dataclasses.replace(store_config, enable_dleger_commit_log=True, d_leger_self_id="n0")
    with open_message_store(cfg) as store:
        assert isinstance(store, DLedgerMessageStore)
        yield store


def mixed(n: int) -> list[Message]:
    """Messages with tags, one or several keys, non-ASCII keys, a delay level now and then."""
    out = []
    for i in range(n):
        keys = [f"k{i}"] if i % 3 else [f"k{i}", f"ключ{i}"]
        out.append(
            Message("DT", b"body-%d" % i, tags=f"t{i % 4}", keys=keys, delay_level=3 if i % 17 == 0 else 0)
        )
    return out


def reput_of(store: DLedgerMessageStore) -> DLedgerReputService:
    reput = store.reput
    assert isinstance(reput, DLedgerReputService)
    return reput


def window_of(store: DLedgerMessageStore) -> list[tuple[int, bytes]]:
    return list(reput_of(store)._ledger.entries_from(0))


def test_a_batch_of_entries_is_dispatched_as_one_window_at_the_entry_positions(
    dl_store: DLedgerMessageStore,
) -> None:
    reput = reput_of(dl_store)
    recorder = Recorder()
    reput.dispatchers.append(recorder)
    plain = [Message("DT", b"m%d" % i, tags="a", keys=[f"key{i}"]) for i in range(300)]
    dl_store.put_messages(plain, queue_id=1)
    assert dl_store.wait_dispatched(10)
    # one window of all 300 (as objects or columns, by size and codec implementation)
    assert [len(rows) for _, rows in recorder.windows] == [300]
    offsets = [row[2] for row in recorder.rows() if row[0] == "DT"]
    assert offsets == sorted(set(offsets)) and len(offsets) == 300
    got = dl_store.get_message("G", "DT", 1, 0, 300)
    assert got.status is GetMessageStatus.FOUND
    assert [m.body for m in got.messages] == [m.body for m in plain]
    # every unit names its record where the entry holds it: entry position + the 48-byte header
    positions = {pos + BODY_OFFSET for pos, body in window_of(dl_store) if body}
    assert {m.commit_log_offset for m in got.messages} <= positions
    assert len({m.commit_log_offset for m in got.messages}) == 300
    found = dl_store.query_messages_by_key("DT", "key123")
    assert [m.body for m in found.messages] == [b"m123"]


@pytest.mark.parametrize("batches", [3, 15])  # windows below and above the columnar sizes
def test_the_joined_window_gives_the_requests_of_the_entry_by_entry_path(
    dl_store: DLedgerMessageStore, batches: int
) -> None:
    for i in range(batches):  # batches of 40 and singles
        dl_store.put_messages(mixed(40), queue_id=i % 4)
        dl_store.put_message(Message("DT", b"single", keys=["s"]), queue_id=0)
    assert dl_store.wait_dispatched(10)
    window = window_of(dl_store)
    reput = reput_of(dl_store)
    saved = reput.dispatchers
    try:
        joined, each = Recorder(), Recorder()
        positions = [pos for pos, body in window if body]
        bodies = [body for _, body in window if body]
        offsets = [pos + BODY_OFFSET for pos in positions]
        reput.dispatchers = [joined]
        count = reput._dispatch_entries(bodies, offsets)
        reput.dispatchers = [each]  # the reference: one entry at a time
        singles = sum(reput._dispatch_entries([b], [o]) for b, o in zip(bodies, offsets, strict=True))
        assert singles == count == len(bodies) == batches * 41
    finally:
        reput.dispatchers = saved
    assert len(joined.windows) == 1  # one window: columns or objects, by size and implementation
    assert len(each.windows) == len(bodies)
    assert joined.rows() == each.rows()
    assert [row[2] for row in joined.rows()] == [pos + BODY_OFFSET for pos in positions]


def test_a_body_that_is_not_one_record_falls_back_and_the_rest_is_dispatched(
    dl_store: DLedgerMessageStore, caplog: pytest.LogCaptureFixture
) -> None:
    dl_store.put_messages([Message("DT", b"x%d" % i) for i in range(20)], queue_id=2)
    assert dl_store.wait_dispatched(10)
    good = [(pos, body) for pos, body in window_of(dl_store) if body]
    # two records in one body (the joined parse finds one record too many), then garbage
    doubled = [*good[:5], (good[5][0], good[5][1] + good[6][1]), *good[7:]]
    garbage = [*good[:5], (good[5][0], b"\x00\x00\x00\x10not a record"), *good[6:]]
    reput = reput_of(dl_store)
    saved = reput.dispatchers
    try:
        for window, expected in ((doubled, 20), (garbage, 19)):
            recorder = Recorder()
            reput.dispatchers = [recorder]
            caplog.clear()
            with caplog.at_level(logging.ERROR, "rocketq.store.dledger_reput"):
                reput._dispatch_entries([b for _, b in window], [pos + BODY_OFFSET for pos, _ in window])
            rows = recorder.rows()
            assert len(rows) == expected
            assert [row[2] for row in rows[:5]] == [pos + BODY_OFFSET for pos, _ in good[:5]]
            if window is garbage:
                assert "holds no whole CommitLog record" in caplog.text
    finally:
        reput.dispatchers = saved
