"""SingleNodeLog: a DLedger group of one on a real entry store."""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib
import threading

from _support.wait import wait_until
from rocketq.ha import entry_format as fmt
from rocketq.ha.group_config import LedgerSpec, open_ledger
from rocketq.ha.local_log import SingleNodeLog
from rocketq.ha.raft_types import Role
from rocketq.ha.replicated_log import AppendStatus, LogState

FILE = 4096


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def body_for(size: int, calls: list[int]):  # type: ignore[no-untyped-def]
    def encode(physical_offset: int) -> bytes:
        calls.append(physical_offset)
        return physical_offset.to_bytes(8, "big") + b"x" * (size - 8)

    return encode


def test_leader_at_once_and_appends_commit_when_written(tmp_path: pathlib.Path) -> None:
    log = SingleNodeLog.open(str(tmp_path), "n0", data_file_size=FILE)
    seen: list[LogState] = []
    log.on_state_change(seen.append)
    assert run(log.append(body_for(100, []))).status is AppendStatus.NOT_LEADER
    run(log.start())
    assert [s.role for s in seen] == [Role.LEADER] and log.state.term == 1 and log.state.leader_id == "n0"
    assert log.committed_pos == 0
    calls: list[int] = []
    r = run(log.append(body_for(100, calls)))
    assert (r.status, r.index, r.pos, r.physical_offset) == (AppendStatus.OK, 0, 0, 48)
    assert calls == [48]
    assert log.committed_pos == 148
    assert log.read(48, 8) == (48).to_bytes(8, "big")
    assert list(log.entries_from(0)) == [(0, (48).to_bytes(8, "big") + b"x" * 92)]
    run(log.stop())


def test_an_entry_pushed_to_the_next_file_is_encoded_again_for_its_offset(tmp_path: pathlib.Path) -> None:
    log = SingleNodeLog.open(str(tmp_path), "n0", data_file_size=FILE, fsync=True)
    run(log.start())
    first = run(log.append(body_for(FILE - 48 - 200, [])))
    assert first.pos == 0
    calls: list[int] = []
    r = run(log.append(body_for(300, calls)))  # does not fit the 200 B left: padding, next file
    assert calls == [FILE - 200 + 48, FILE + 48]
    assert r.pos == FILE and r.physical_offset == FILE + 48
    assert log.read(FILE + 48, 8) == (FILE + 48).to_bytes(8, "big")
    assert [pos for pos, _ in log.entries_from(1)] == [FILE]  # from any position: the next entry
    assert log.committed_pos == FILE + 48 + 300 and log.store.flushed_index == 1
    run(log.stop())


def test_restart_commits_what_recovery_kept_and_yields_noops_empty(tmp_path: pathlib.Path) -> None:
    log = SingleNodeLog.open(str(tmp_path), "n0", data_file_size=FILE)
    run(log.start())
    run(log.append(body_for(64, [])))
    log.store.append(1, b"", magic=fmt.MAGIC_NOOP)
    run(log.append(body_for(64, [])))
    log.store.flush()
    log.store.persist_checkpoint()  # the committed index in the checkpoint lags: recovery decides
    log.store.data.shutdown()
    log.store.index.shutdown()
    again = SingleNodeLog.open(str(tmp_path), "n0", data_file_size=FILE)
    run(again.start())
    assert again.state.term == 1
    entries = list(again.entries_from(0))
    assert [(pos, len(body)) for pos, body in entries] == [(0, 64), (112, 0), (112 + 48, 64)]
    assert again.committed_pos == 112 + 48 + 112
    run(again.stop())


def test_an_empty_store_at_a_divided_offset(tmp_path: pathlib.Path) -> None:
    log = SingleNodeLog.open(str(tmp_path), "n0", data_file_size=FILE, data_start_offset=3 * FILE)
    run(log.start())
    assert log.committed_pos == 3 * FILE
    assert run(log.append(body_for(64, []))).physical_offset == 3 * FILE + 48
    run(log.stop())


def test_concurrent_appends_from_threads_each_get_their_own_entry(tmp_path: pathlib.Path) -> None:
    log = SingleNodeLog.open(str(tmp_path), "n0", data_file_size=FILE * 16, fsync=True)
    run(log.start())
    assert log.append_completes_at_once
    results: list[int] = []
    lock = threading.Lock()

    def writer() -> None:
        for _ in range(25):
            coro = log.append(body_for(64, []))
            try:
                coro.send(None)
            except StopIteration as done:
                with lock:
                    results.append(done.value.physical_offset)

    threads = [threading.Thread(target=writer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 100
    entries = list(log.entries_from(0))
    assert len(entries) == 100
    # every record names the offset it was stored at
    assert all(int.from_bytes(body[:8], "big") == pos + 48 for pos, body in entries)
    assert log.committed_pos == log.ledger_end_pos
    run(log.stop())


def test_page_cache_acks_are_fsynced_and_checkpointed_in_the_background(tmp_path: pathlib.Path) -> None:
    """A group of one acknowledges at the write (``fsync=False``); a thread of its own fsyncs
    what was written every ``flush_interval_ms`` and writes ``checkpoint`` with the flushed
    index, then sleeps until the next append wakes it."""
    log = SingleNodeLog.open(str(tmp_path), "n0", data_file_size=FILE, flush_interval_ms=2)
    log.checkpoint_interval_ms = 5
    store = log.store
    run(log.start())
    try:
        for _ in range(5):
            assert run(log.append(body_for(100, []))).status is AppendStatus.OK
        assert store.end_index == 4
        wait_until(lambda: store.flushed_index == 4, "the paced fsync of the five entries", 5, 0.001)
        wait_until(lambda: store.load_checkpoint()[2] == 4, "a checkpoint with flushedIndex 4", 5, 0.001)
        wait_until(
            lambda: not log._flusher_wake.is_set(), "the flusher asleep with nothing written", 5, 0.001
        )
        assert run(log.append(body_for(100, []))).status is AppendStatus.OK  # wakes it
        wait_until(lambda: store.flushed_index == 5, "the fsync of the sixth entry", 5, 0.001)
        flusher = log._flusher
        assert flusher is not None and flusher.name == "dledger-flush-n0"
    finally:
        run(log.stop())
    assert not flusher.is_alive()


def test_fsync_acks_have_no_paced_flusher(tmp_path: pathlib.Path) -> None:
    log = SingleNodeLog.open(str(tmp_path), "n0", data_file_size=FILE, fsync=True)
    run(log.start())
    try:
        assert log._flusher is None
        run(log.append(body_for(100, [])))
        assert log.store.flushed_index == 0  # fsync'd before the answer
    finally:
        run(log.stop())


def test_open_ledger_gives_a_group_of_one_the_flush_file_interval(tmp_path: pathlib.Path) -> None:
    spec = LedgerSpec(
        base_dir=str(tmp_path),
        group="g",
        self_id="n0",
        peers={"n0": "127.0.0.1:40911"},
        data_file_size=FILE,
        data_start_offset=0,
        fsync=False,
        flush_file_interval_ms=500,
    )
    log = open_ledger(spec)
    assert isinstance(log, SingleNodeLog) and log.flush_interval_ms == 500
    log.store.close()
    default = open_ledger(dataclasses.replace(spec, flush_file_interval_ms=None))
    assert isinstance(default, SingleNodeLog) and default.flush_interval_ms == 10  # DLedger's
    default.store.close()
