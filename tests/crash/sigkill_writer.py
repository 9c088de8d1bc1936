"""Writer process of the SIGKILL crash test.

Usage: ``python sigkill_writer.py STORE_ROOT SEED ROUND``

Opens a SYNC_FLUSH store with small segments and appends messages until it is killed. After each
``put_message`` has returned PUT_OK it writes one acknowledgement line to stdout with a single
``os.write`` (atomic on a pipe)::

    seq physical_offset size topic queue_id queue_offset body_digest

The message for ``(seed, round, seq)`` is a pure function of those numbers (:func:`make_message`),
so the parent can rebuild any message the writer attempted, acknowledged or not.

The parent imports this module for :func:`make_message`, :func:`store_config` and :func:`digest`.
"""

from __future__ import annotations

import hashlib
import random
import sys

from ack_writer import write_until_killed

from rocketq.config import StoreConfig
from rocketq.message import Message
from rocketq.store import PutMessageResult

SEGMENT_SIZE = 64 * 1024
TOPICS = ("CrashA", "CrashB", "crash_c-1", "%RETRY%crash|x")
QUEUES = 4


def store_config(root: str) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log=SEGMENT_SIZE,
        flush_disk_type="SYNC_FLUSH",
        # Small consume-queue and index files: the CommitLog is under test, and full-size ones
        # would make every start of the store slow.
        mapped_file_size_consume_queue=20 * 1000,
        max_hash_slot_num=4096,
        max_index_num=16384,
    )


def message_key(round_no: int, seq: int) -> str:
    return f"r{round_no}-m{seq}"


def make_message(seed: int, round_no: int, seq: int) -> tuple[Message, int]:
    """The ``seq``-th message of round ``round_no`` and the queue id it goes to."""
    rng = random.Random(f"{seed}/{round_no}/{seq}")
    topic = rng.choice(TOPICS)
    queue_id = rng.randrange(QUEUES)
    pick = rng.random()
    if pick < 0.1:
        size = rng.randint(1, 8)
    elif pick < 0.8:
        size = rng.randint(9, 600)
    else:
        size = rng.randint(601, 3 * 1024)
    body = rng.randbytes(size)
    keys = [message_key(round_no, seq)]
    if rng.random() < 0.3:
        keys.append(f"extra{rng.randrange(1000)}")
    tags = rng.choice(("tagA", "tagB", None))
    return Message(topic, body, tags=tags, keys=keys), queue_id


def digest(body: bytes) -> str:
    return hashlib.blake2b(body, digest_size=16).hexdigest()


def ack_line(round_no: int, seq: int, msg: Message, queue_id: int, result: PutMessageResult) -> str:
    return (
        f"{seq} {result.physical_offset} {result.size} {msg.topic} {queue_id} "
        f"{result.queue_offset} {digest(msg.body)}"
    )


if __name__ == "__main__":
    sys.exit(write_until_killed(sys.argv, store_config, make_message, ack_line))
