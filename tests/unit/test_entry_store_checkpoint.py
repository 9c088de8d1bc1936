"""EntryStore.persist_checkpoint: written and fsynced without the store's lock, so appends go on
meanwhile; a truncation waits for a checkpoint write in progress, so the file never names more
as fsynced than the log it describes holds."""

from __future__ import annotations

import pathlib
import threading
from collections.abc import Iterator

import pytest

from rocketq.ha import entry_store as entry_store_module
from rocketq.ha.entry_store import EntryStore


class SlowReplace:
    """Stands in for ``durable_replace`` in the entry store: the first checkpoint write waits
    until the test lets it go (a slow fsync of the file or of its directory), then writes as the
    real one; later writes go at once."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.go = threading.Event()
        self.real = entry_store_module.durable_replace

    def __call__(self, path: str, data: bytes) -> None:
        if path.endswith("checkpoint") and not self.entered.is_set():
            self.entered.set()
            assert self.go.wait(10), "the test never let the checkpoint write go"
        self.real(path, data)


@pytest.fixture
def slow(monkeypatch: pytest.MonkeyPatch) -> Iterator[SlowReplace]:
    stand_in = SlowReplace()
    monkeypatch.setattr(entry_store_module, "durable_replace", stand_in)
    yield stand_in
    stand_in.go.set()


def open_store(tmp_path: pathlib.Path) -> EntryStore:
    return EntryStore.open(str(tmp_path), "n0", data_file_size=1 << 16, index_file_size=32 * 4096)


def stalled_checkpoint(store: EntryStore, committed: int, slow: SlowReplace) -> threading.Thread:
    """Ten entries, ``committed`` of them committed, all fsynced; then a checkpoint write on a
    thread of its own, stalled in its fsync (``slow``) when this returns."""
    for _ in range(10):
        store.append(1, b"x" * 40)
    store.set_committed_index(committed)
    assert store.flush_unlocked() == 9
    writer = threading.Thread(target=store.persist_checkpoint)
    writer.start()
    assert slow.entered.wait(10)
    return writer


def test_appends_and_reads_go_on_while_a_checkpoint_is_written(
    tmp_path: pathlib.Path, slow: SlowReplace
) -> None:
    with open_store(tmp_path) as store:
        writer = stalled_checkpoint(store, 9, slow)
        try:
            for _ in range(5):  # the checkpoint write is stuck in its fsync: the lock is free
                store.append(1, b"y" * 40)
            assert store.end_index == 14 and store.get(12).body == b"y" * 40
        finally:
            slow.go.set()
            writer.join(10)
        assert not writer.is_alive()
        # what the file says is the log as it was when the write began
        assert store.load_checkpoint() == (9, 9, 9) and store.checkpoint_flushed == 9


def test_a_truncation_waits_for_a_checkpoint_write_in_progress(
    tmp_path: pathlib.Path, slow: SlowReplace
) -> None:
    with open_store(tmp_path) as store:
        writer = stalled_checkpoint(store, 4, slow)
        truncated = threading.Event()

        def truncate() -> None:
            store.truncate(6)  # entries 6..9, fsynced and about to be named by the checkpoint
            truncated.set()

        cutter = threading.Thread(target=truncate)
        cutter.start()
        try:
            # a truncation done now would be overwritten by the checkpoint naming index 9 as
            # fsynced after the entries are gone; it waits for the write instead (a bounded look:
            # without the checkpoint lock it is done well within it)
            assert not truncated.wait(0.2)
            assert store.end_index == 9
        finally:
            slow.go.set()
            writer.join(10)
            cutter.join(10)
        assert truncated.is_set() and store.end_index == 5
        # the truncation lowered the checkpoint after the write that named 9, not before it
        assert store.load_checkpoint()[2] == 5 == store.flushed_index
