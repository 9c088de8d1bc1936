"""Writer process of the entry store's SIGKILL test.

Usage: ``python sigkill_entry_writer.py BASE_DIR``

Opens (recovering) the entry store of node ``n0`` under BASE_DIR and appends entries until it is
killed. Entry ``i`` has term ``1 + i // 50`` and body :func:`body_of` ``(i)``. Every 7 entries it
flushes and writes ``flushed <index>`` on stdout with one ``os.write``, after ``flush`` returned;
every 20 entries it also writes the checkpoint.
"""

from __future__ import annotations

import os
import sys

from rocketq.ha.entry_store import EntryStore

DATA_FILE_SIZE = 16 * 1024
INDEX_FILE_SIZE = 32 * 256


def body_of(i: int) -> bytes:
    return (b"%d:" % i) * (1 + i * 13 % 97)


def main() -> None:
    store = EntryStore.open(sys.argv[1], "n0", data_file_size=DATA_FILE_SIZE, index_file_size=INDEX_FILE_SIZE)
    os.write(1, b"start %d\n" % store.ledger_end_index)
    while True:
        i = store.ledger_end_index + 1
        store.append(1 + i // 50, body_of(i))
        if i % 7 == 0:
            os.write(1, b"flushed %d\n" % store.flush())
        if i % 20 == 0:
            store.persist_checkpoint()


if __name__ == "__main__":
    main()
