"""Writer process of the timer SIGKILL test.

Usage: ``python sigkill_timer_writer.py STORE_ROOT SEED ROUND``

Opens a SYNC_FLUSH store and puts timer messages (``TIMER_DELIVER_MS`` 0.2–1.5 s ahead) until it
is killed, while its own timer service delivers the ones that come due. After each put has
returned PUT_OK (flushed) it writes one acknowledgement line with a single ``os.write``::

    seq deliver_ms key

The parent imports this module for :func:`store_config` and :func:`make_message`.
"""

from __future__ import annotations

import os
import random
import sys
import time

from rocketq.config import StoreConfig
from rocketq.message import Message
from rocketq.store import MessageStore

TOPIC = "TimerCrash"
QUEUES = 2
MAX_MESSAGES_PER_RUN = 100_000


def store_config(root: str) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log=256 * 1024,
        flush_disk_type="SYNC_FLUSH",
        mapped_file_size_consume_queue=20 * 1000,
        max_hash_slot_num=4096,
        max_index_num=16384,
        timer_precision_ms=100,
        # Snapshots while the writer runs, so a kill lands between snapshots.
        timer_snapshot_interval_ms=300,
    )


def message_key(round_no: int, seq: int) -> str:
    return f"t{round_no}-{seq}"


def make_message(seed: int, round_no: int, seq: int, now_ms: int) -> tuple[Message, int, int]:
    """The ``seq``-th message of a round, its queue id and its delivery time."""
    rng = random.Random(f"{seed}/{round_no}/{seq}")
    deliver_ms = now_ms + rng.randint(200, 1500)
    key = message_key(round_no, seq)
    body = f"{key}:".encode() + rng.randbytes(rng.randint(1, 300))
    msg = Message(TOPIC, body, keys=[key], properties={"TIMER_DELIVER_MS": str(deliver_ms)})
    return msg, rng.randrange(QUEUES), deliver_ms


def main(argv: list[str]) -> int:
    root, seed, round_no = argv[1], int(argv[2]), int(argv[3])
    with MessageStore(store_config(root)) as store:
        for seq in range(MAX_MESSAGES_PER_RUN):
            msg, queue_id, deliver_ms = make_message(seed, round_no, seq, time.time_ns() // 1_000_000)
            store.put_message(msg, queue_id=queue_id)
            os.write(1, f"{seq} {deliver_ms} {message_key(round_no, seq)}\n".encode("ascii"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
