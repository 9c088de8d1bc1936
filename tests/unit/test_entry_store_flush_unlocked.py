"""EntryStore.flush_unlocked: the group-commit flush that holds no lock during its fsyncs."""

from __future__ import annotations

import pathlib
import threading

from rocketq.ha.entry_store import EntryStore


def test_flush_unlocked_raises_the_flushed_index_to_the_end(tmp_path: pathlib.Path) -> None:
    with EntryStore.open(str(tmp_path), "n0", data_file_size=4096, index_file_size=32 * 64) as store:
        assert store.flush_unlocked() == -1
        for k in range(100):  # several data files
            store.append(1, b"%03d" % k * 20)
        assert len(store.data.files) > 1
        assert store.flush_unlocked() == 99 == store.flushed_index
        assert all(mf.flushed_position == mf.read_position for mf in store.data.files)
        store.truncate(50)
        assert store.flushed_index == 49
        assert store.flush_unlocked() == 49


def test_appends_go_on_while_flush_unlocked_runs(tmp_path: pathlib.Path) -> None:
    with EntryStore.open(str(tmp_path), "n0", data_file_size=1 << 16, index_file_size=32 * 4096) as store:
        stop = threading.Event()
        results: list[int] = []

        def flusher() -> None:
            while not stop.is_set():
                results.append(store.flush_unlocked())

        t = threading.Thread(target=flusher)
        t.start()
        try:
            for _ in range(2000):
                store.append(1, b"x" * 40)
        finally:
            stop.set()
            t.join(30)
        assert results == sorted(results)  # never goes back
        assert store.flush_unlocked() == 1999
        store.close()
        reopened = EntryStore.open(str(tmp_path), "n0", data_file_size=1 << 16, index_file_size=32 * 4096)
        assert reopened.ledger_end_index == 1999
        reopened.close()
