"""The blocking producer's ids without a lock: UNIQ_KEYs taken by threads at once through
``next_id``, a batch's ``next_ids`` and the compiled plain send never repeat, and a batch's stay
consecutive."""

from __future__ import annotations

import sys
import threading

from rocketq.client.send_plain import plain_send_frame
from rocketq.message import Message, UniqueIdGenerator

THREADS = 6
ROUNDS = 1_500


def test_ids_taken_by_threads_at_once_never_repeat_and_batches_stay_consecutive() -> None:
    gen = UniqueIdGenerator(bytes([10, 0, 0, 1]))
    gen._seq = [0]
    singles: list[list[str]] = [[] for _ in range(THREADS)]
    batches: list[list[list[str]]] = [[] for _ in range(THREADS)]
    start = threading.Barrier(THREADS)
    msg = Message("T", b"x")

    def work(i: int) -> None:
        start.wait(10)
        for _ in range(ROUNDS):
            if i % 3 == 0:
                batches[i].append(gen.next_ids(5))
            elif i % 3 == 1 or plain_send_frame is None:
                singles[i].append(gen.next_id())
            else:
                made = plain_send_frame(
                    msg, "PG", 0, "b", 1024, 1024, gen._prefix, gen.offset_ms(), gen._seq, 0
                )
                assert made is not None
                singles[i].append(made[2])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch as often as they can: a step that is not atomic shows
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        sys.setswitchinterval(interval)
    ids = [uid for slot in singles for uid in slot] + [uid for slot in batches for b in slot for uid in b]
    # 16 bits of sequence: fewer ids than that, so none may repeat
    assert len(ids) == THREADS * ROUNDS // 3 * (2 + 5) < 0x10000
    assert len({uid[-4:] for uid in ids}) == len(ids)
    for slot in batches:
        for batch in slot:
            seqs = [int(uid[-4:], 16) for uid in batch]
            assert seqs == [(seqs[0] + k) & 0xFFFF for k in range(5)]
