"""rocketq.store.dledger_window: the records of a window of DLedger entries parsed together give
the dispatch requests of each entry's record parsed alone, compiled scan or pure."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from rocketq.config import StoreConfig
from rocketq.message import Message
from rocketq.store import record_scan
from rocketq.store.dledger_window import parse_entries
from rocketq.store.message_store import MessageStore, open_message_store
from rocketq.store.record_scan import DispatchRequest, parse_window

FIELDS = [f for f in DispatchRequest.__slots__ if f != "_properties"]


@pytest.fixture(params=["compiled", "pure"])
def scan(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "pure":
        monkeypatch.setattr(record_scan, "_scan_window", None)
    elif record_scan._scan_window is None:
        pytest.skip("the compiled module is not built")
    return str(request.param)


@pytest.fixture
def dl_store(store_config: StoreConfig) -> Iterator[MessageStore]:
    cfg = dataclasses.replace(store_config, enable_dleger_commit_log=True, d_leger_self_id="n0")
    with open_message_store(cfg) as s:
        yield s


def entries(store: MessageStore, n: int) -> tuple[list[bytes], list[int]]:
    for i in range(n):
        keys = [f"k{i}", f"j{i}"] if i % 3 else []
        store.put_message(Message("T" if i % 4 else "U", b"x" * (i % 50), tags=f"t{i % 5}", keys=keys), i % 3)
    ledger = store.commitlog.ledger  # type: ignore[attr-defined]
    got = [(pos, body) for pos, body in ledger.entries_from(0) if body]
    assert len(got) == n
    return [b for _, b in got], [pos + 48 for pos, _ in got]


def fields(reqs: list[DispatchRequest]) -> list[tuple[object, ...]]:
    return [tuple(getattr(r, f) for f in FIELDS) for r in reqs]


@pytest.mark.parametrize("n", [2, 40, 420])  # object windows, the columnar batch (pure, compiled)
def test_a_window_parsed_together_gives_each_entry_s_requests(
    dl_store: MessageStore, scan: str, n: int
) -> None:
    bodies, offsets = entries(dl_store, n)
    together = parse_entries(bodies, offsets, None)
    assert together is not None and len(together) == n
    alone = [r for body, offset in zip(bodies, offsets, strict=True) for r in parse_window(body, offset)[0]]
    assert fields(together) == fields(alone)
    assert [r.commit_log_offset for r in together] == offsets


def test_bodies_that_are_not_one_whole_record_each_are_left_to_the_caller(
    dl_store: MessageStore, scan: str
) -> None:
    bodies, offsets = entries(dl_store, 4)
    assert parse_entries([bodies[0] + bodies[1], bodies[2], bodies[3]], offsets[1:], None) is None
    assert parse_entries([bodies[0][:-1], bodies[1]], offsets[:2], None) is None
    assert parse_entries([bodies[0], bodies[1][:20]], offsets[:2], None) is None
