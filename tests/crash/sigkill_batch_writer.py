"""Writer process of the batch crash test.

Usage: ``python sigkill_batch_writer.py STORE_ROOT SEED ROUND``

Opens an ASYNC_FLUSH store with small segments and appends batches (``put_messages``) until it
is killed. Batch ``b`` of a round is a pure function of ``(seed, round, b)``
(:func:`make_batch`): one topic, one queue, 8 to 64 messages whose bodies start with
``round ‖ batch ‖ index ‖ count`` (four big-endian i32). After each batch is stored the writer
writes ``b`` and the physical offset of its first record as one line, with a single
``os.write``.

The parent imports this module for :func:`make_batch`, :func:`store_config` and :data:`HEAD`.
"""

from __future__ import annotations

import random
import struct
import sys

from ack_writer import write_until_killed

from rocketq.config import StoreConfig
from rocketq.message import Message
from rocketq.store import PutMessageResult

SEGMENT_SIZE = 256 * 1024
TOPIC = "BatchCrash"
QUEUES = 4
HEAD = struct.Struct(">iiii")  # round, batch, index in batch, batch size


def store_config(root: str) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log=SEGMENT_SIZE,
        mapped_file_size_consume_queue=20 * 1000,
        max_hash_slot_num=4096,
        max_index_num=16384,
    )


def make_batch(seed: int, round_no: int, batch: int) -> tuple[list[Message], int]:
    """The messages of batch ``batch`` of round ``round_no`` and the queue id they go to."""
    rng = random.Random(f"{seed}/{round_no}/{batch}")
    count = rng.randint(8, 64)
    size = rng.randint(0, 1500)  # one size per batch: the common, fast batch shape
    msgs = [
        Message(TOPIC, HEAD.pack(round_no, batch, i, count) + rng.randbytes(size), tags="b")
        for i in range(count)
    ]
    return msgs, batch % QUEUES


def ack_line(round_no: int, b: int, msgs: list[Message], queue_id: int, result: PutMessageResult) -> str:
    return f"{b} {result.physical_offset}"


def main(argv: list[str]) -> int:
    return write_until_killed(argv, store_config, make_batch, ack_line, batches=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
