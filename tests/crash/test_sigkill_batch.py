"""SIGKILL during batch puts: a batch is recovered whole or not at all.

A writer process (``sigkill_batch_writer.py``) appends batches of 8-64 messages to one store and
is killed with SIGKILL at a random moment, several rounds in a row on the same store. A put
writes its first record's TOTALSIZE last, after every other byte of the batch, so a kill in the
middle of a batch leaves a zero TOTALSIZE where the batch starts. After each kill the store is
opened again (recovery) and the whole log is read back:

* every batch the writer acknowledged is there, complete, in order (a kill loses no page cache);
* any other batch found is the one in flight at the kill, and it is complete too;
* no batch is ever found in part.
"""

from __future__ import annotations

import pathlib
import random

from kill_loop import load_script, random_kill_point, run_and_kill

from rocketq.store import MessageStore

HERE = pathlib.Path(__file__).resolve().parent
WRITER_PATH = HERE / "sigkill_batch_writer.py"
ROUNDS = 8

writer = load_script(WRITER_PATH)


def _read_batches(store: MessageStore) -> list[tuple[int, int, list[int], int]]:
    """(round, batch, indexes found, declared size) of every run of records in log order."""
    runs: list[tuple[int, int, list[int], int]] = []
    start = max(0, store.commitlog.min_offset)
    for _, view in store.commitlog.iter_records(start, read_body=True, check_crc=True):
        assert view.body is not None
        round_no, batch, index, count = writer.HEAD.unpack_from(view.body)
        if runs and runs[-1][:2] == (round_no, batch):
            runs[-1][2].append(index)
        else:
            runs.append((round_no, batch, [index], count))
    return runs


def test_killed_batches_are_recovered_whole_or_not_at_all(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "store"
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    acked: list[tuple[int, int]] = []  # (round, batch) acknowledged so far, in log order
    for round_no in range(ROUNDS):
        kill_at = random_kill_point(rng, few=5, many=150, most=400, few_share=0.3)
        lines = run_and_kill(
            WRITER_PATH, root, seed, round_no, kill_at, tmp_path / f"writer-{round_no}.stderr"
        )
        acked += [(round_no, int(line.split()[0])) for line in lines]
        with MessageStore(writer.store_config(str(root))) as store:
            runs = _read_batches(store)
            for round_found, batch, indexes, count in runs:
                msgs, _ = writer.make_batch(seed, round_found, batch)
                assert count == len(msgs), f"seed {seed}: batch {round_found}/{batch} mislabelled"
                assert indexes == list(range(count)), (
                    f"seed {seed}: batch {round_found}/{batch} recovered in part: {len(indexes)} of {count}"
                )
            found = [(r, b) for r, b, _, _ in runs]
            # Acknowledged batches all survive; the only other one is the batch in flight.
            acked_set = set(acked)
            assert [k for k in found if k in acked_set] == acked, f"seed {seed}: acknowledged batch lost"
            extra = [k for k in found if k not in acked_set]
            assert extra in ([], [(round_no, len(lines))]), f"seed {seed}: unexpected batches {extra}"
            acked += extra
