"""Retention of the DLedger entry store's data files: the pure rule (:func:`plan_entry_deletion`)
over time, disk pressure, the committed index, this member's dispatch position and the
followers' match indexes; then the service over a real entry store."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import pathlib

import pytest

from rocketq.config import StoreConfig
from rocketq.ha import entry_format as fmt
from rocketq.ha.entry_store import EntryStore
from rocketq.store.dledger_retention import (
    DataFile,
    EntryPlan,
    EntryRetentionService,
    Holds,
    plan_entry_deletion,
)
from rocketq.store.retention import NOTHING_NEEDED, DeleteReason, decide

HOUR_MS = 3_600_000
NOW_MS = 1_000 * HOUR_MS
RESERVED_MS = 72 * HOUR_MS
SIZE = 1000
PER_FILE = 10  # entries per data file in these plans


def files(*ages_h: float) -> list[DataFile]:
    """Data files of SIZE bytes with PER_FILE entries each, oldest first."""
    return [DataFile(i * SIZE, i * PER_FILE, NOW_MS - int(age * HOUR_MS)) for i, age in enumerate(ages_h)]


ALL = Holds(committed=1 << 40, dispatched_pos=1 << 40)


def plan(
    fs: list[DataFile],
    usage: float = 0.5,
    holds: Holds = ALL,
    *,
    hour: bool = True,
    min_needed: int = NOTHING_NEEDED,
    force: bool = False,
    ignore: bool = False,
) -> list[tuple[int, DeleteReason]]:
    return [(f.start // SIZE, r) for f, r in run(fs, usage, holds, hour=hour, min_needed=min_needed,
                                                 force=force, ignore=ignore).delete]  # fmt: skip


def run(
    fs: list[DataFile],
    usage: float = 0.5,
    holds: Holds = ALL,
    *,
    hour: bool = True,
    min_needed: int = NOTHING_NEEDED,
    force: bool = False,
    ignore: bool = False,
) -> EntryPlan:
    return plan_entry_deletion(
        fs,
        decide(StoreConfig(), usage, hour),
        holds,
        now_ms=NOW_MS,
        reserved_ms=RESERVED_MS,
        min_needed=min_needed,
        force_unconsumed=force,
        ignore_lagging_member=ignore,
    )


def test_expired_files_go_at_the_delete_hour_never_the_last() -> None:
    assert plan(files(100, 100, 100)) == [(0, DeleteReason.EXPIRED), (1, DeleteReason.EXPIRED)]
    assert run(files(100, 100, 100)).limit == 2 * PER_FILE
    assert plan(files(100, 100, 100), hour=False) == []
    assert plan(files(100)) == []


def test_young_files_stay_and_stop_the_run() -> None:
    assert plan(files(100, 1, 100, 1)) == [(0, DeleteReason.EXPIRED)]


def test_disk_pressure_deletes_expired_files_outside_the_hour() -> None:
    assert plan(files(100, 100, 1), usage=0.8, hour=False) == [
        (0, DeleteReason.EXPIRED),
        (1, DeleteReason.EXPIRED),
    ]


def test_above_the_forcibly_ratio_consumed_files_go_young() -> None:
    # records of file 0 lie below 1000, of file 1 below 2000
    assert plan(files(1, 1, 1), usage=0.87, hour=False, min_needed=1000) == [(0, DeleteReason.CONSUMED)]
    assert plan(files(1, 1, 1), usage=0.87, hour=False, min_needed=0) == []
    assert plan(files(1, 1, 1), usage=0.87, hour=False, min_needed=0, force=True) == [
        (0, DeleteReason.FORCED),
        (1, DeleteReason.FORCED),
    ]


def test_the_committed_index_limits_deletion() -> None:
    # file 1's entries are 10..19: all committed only once the committed index is 19
    assert plan(files(100, 100, 100), holds=Holds(committed=18, dispatched_pos=1 << 40)) == [
        (0, DeleteReason.EXPIRED)
    ]
    p = run(files(100, 100, 100), holds=Holds(committed=5, dispatched_pos=1 << 40))
    assert p.delete == () and p.limit == -1 and "not committed" in p.blocked
    # not even forced cleaning deletes uncommitted entries
    assert (
        plan(files(1, 1, 1), usage=0.95, holds=Holds(5, 1 << 40), min_needed=0, force=True, ignore=True) == []
    )


def test_the_dispatch_position_holds_files_back() -> None:
    p = run(files(100, 100, 100), holds=Holds(committed=1 << 40, dispatched_pos=1999))
    assert [f.start for f, _ in p.delete] == [0] and "not dispatched" in p.blocked
    assert plan(files(100, 100, 100), holds=Holds(1 << 40, 2000)) == [
        (0, DeleteReason.EXPIRED),
        (1, DeleteReason.EXPIRED),
    ]
    assert plan(files(1, 1, 1), usage=0.95, holds=Holds(1 << 40, 0), force=True, ignore=True) == []


def test_a_lagging_follower_holds_back_what_it_has_not_got() -> None:
    holds = Holds(committed=100, dispatched_pos=1 << 40, members={"n1": 100, "n2": 12})
    p = run(files(100, 100, 100, 100), holds=holds)
    # n2 has entries up to 12: file 0 (0..9) goes, file 1 (10..19) stays
    assert [f.start for f, _ in p.delete] == [0] and p.limit == PER_FILE
    assert [(h.member, h.match_index, h.files, h.entries_behind) for h in p.held_back] == [("n2", 12, 2, 88)]
    assert "n2" in p.blocked
    # a follower that has nothing keeps everything, even above the forcibly ratio
    down = Holds(committed=100, dispatched_pos=1 << 40, members={"n1": 100, "n2": -1})
    assert plan(files(100, 100, 100), holds=down) == []
    assert plan(files(100, 100, 100), usage=0.95, holds=down, min_needed=1 << 40, force=True) == []


def test_the_switch_ignores_a_lagging_follower_only_above_the_forcibly_ratio() -> None:
    down = Holds(committed=100, dispatched_pos=1 << 40, members={"n1": 100, "n2": -1})
    assert plan(files(100, 100, 100), usage=0.8, holds=down, ignore=True) == []
    p = run(files(100, 100, 100), usage=0.87, holds=down, ignore=True)
    assert [r for _, r in p.delete] == [DeleteReason.EXPIRED, DeleteReason.EXPIRED]
    assert [h.member for h in p.ignored] == ["n2"] and p.held_back == ()


def test_a_follower_exactly_at_the_next_files_first_entry_lets_the_file_go() -> None:
    # entries of file 0 are 0..9; a follower with 10 has them all (entries below its match go)
    assert plan(files(100, 100), holds=Holds(100, 1 << 40, {"n1": 10})) == [(0, DeleteReason.EXPIRED)]
    assert plan(files(100, 100), holds=Holds(100, 1 << 40, {"n1": 9})) == []


# -- the service over a real entry store --------------------------------------------------------

DATA = 4096


def test_service_deletes_entry_files_and_reports_a_lagging_follower(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = EntryStore.open(str(tmp_path), "n0", data_file_size=DATA, index_file_size=32 * 64)
    try:
        for i in range(200):
            store.append(1, b"x" * 100 + i.to_bytes(4, "big"))
        store.set_committed_index(199)
        members = {"n1": 199, "n2": 60}

        def data_files() -> list[DataFile]:
            return [
                DataFile(mf.file_from_offset, fmt.decode_header(mf.mm, 0).index, 0) for mf in store.data.files
            ]

        logics: list[int] = []
        cfg = dataclasses.replace(StoreConfig(), file_reserved_time_hours=1)
        svc = EntryRetentionService(
            cfg,
            data_files=data_files,
            holds=lambda: Holds(store.committed_index, 1 << 40, dict(members)),
            delete_entries=store.delete_before,
            old_segments_left=lambda: False,
            segments=list,
            min_needed=lambda: NOTHING_NEEDED,
            delete_segments=lambda n: 0,
            delete_logics=lambda: logics.append(1) or 0,
            set_disk_full=lambda full, why: None,
            usage=lambda: 0.5,
            now=lambda: dt.datetime(2026, 11, 26, 4, 0),
        )
        before = len(store.data.files)
        with caplog.at_level(logging.WARNING):
            svc.run_once()
        begin = store.ledger_begin_index
        assert 0 < begin <= 60 and len(store.data.files) < before and logics == [1]
        assert any("follower n2 holds back" in r.getMessage() for r in caplog.records)
        # the same lag is not reported again; once n2 caught up, the rest goes
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            svc.run_once()
        assert not any("holds back" in r.getMessage() for r in caplog.records)
        members["n2"] = 199
        svc.run_once()
        assert len(store.data.files) == 1 and store.get(199).index == 199
    finally:
        store.close()


def test_a_full_disk_with_a_lagging_follower_refuses_writes_instead_of_deleting(
    tmp_path: pathlib.Path,
) -> None:
    store = EntryStore.open(str(tmp_path), "n0", data_file_size=DATA, index_file_size=32 * 64)
    try:
        for i in range(100):
            store.append(1, b"y" * 100 + i.to_bytes(4, "big"))
        store.set_committed_index(99)
        files_before = len(store.data.files)
        flags: list[tuple[bool, str]] = []
        svc = EntryRetentionService(
            StoreConfig(),
            data_files=lambda: [
                DataFile(mf.file_from_offset, fmt.decode_header(mf.mm, 0).index, 0) for mf in store.data.files
            ],
            holds=lambda: Holds(99, 1 << 40, {"n1": 99, "n2": -1}),
            delete_entries=store.delete_before,
            old_segments_left=lambda: False,
            segments=list,
            min_needed=lambda: NOTHING_NEEDED,
            delete_segments=lambda n: 0,
            delete_logics=lambda: 0,
            set_disk_full=lambda full, why: flags.append((full, why)),
            usage=lambda: 0.95,
            now=lambda: dt.datetime(2026, 11, 26, 12, 0),
        )
        d = svc.run_once()
        assert d.disk_full and len(store.data.files) == files_before
        assert flags and flags[0][0] and "n2" in flags[0][1]
    finally:
        store.close()
