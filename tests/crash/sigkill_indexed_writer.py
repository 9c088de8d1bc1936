"""Writer process of the SIGKILL crash test of the ConsumeQueues and the index.

Usage: ``python sigkill_indexed_writer.py STORE_ROOT SEED ROUND``

Opens a SYNC_FLUSH store whose CommitLog segments, ConsumeQueue files and index files are all
small, so each of them rolls often, and appends messages until it is killed. Every message has a
unique key (``KEYS``) and a unique ``UNIQ_KEY``. After each ``put_message`` has returned PUT_OK it
writes one acknowledgement line to stdout with a single ``os.write`` (atomic on a pipe)::

    seq topic queue_id queue_offset physical_offset size msg_id key body_digest

The message for ``(seed, round, seq)`` is a pure function of those numbers (:func:`make_message`),
so the parent can rebuild any message the writer attempted, acknowledged or not.

The parent imports this module for :func:`make_message`, :func:`store_config` and :func:`digest`.
"""

from __future__ import annotations

import hashlib
import random
import sys

from ack_writer import write_until_killed

from rocketq.config import FlushDiskType, StoreConfig
from rocketq.message import PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, Message
from rocketq.store import PutMessageResult

SEGMENT_SIZE = 64 * 1024
#: 100 units of 20 bytes per ConsumeQueue file.
CQ_FILE_SIZE = 20 * 100
#: 127 entries per index file: about 63 messages with two keys each.
HASH_SLOTS = 64
INDEX_NUM = 128
TOPICS = ("IdxA", "IdxB", "%RETRY%idx|g")
QUEUES = 3


def store_config(root: str) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log=SEGMENT_SIZE,
        flush_disk_type=FlushDiskType.SYNC_FLUSH,
        mapped_file_size_consume_queue=CQ_FILE_SIZE,
        max_hash_slot_num=HASH_SLOTS,
        max_index_num=INDEX_NUM,
    )


def message_key(round_no: int, seq: int) -> str:
    return f"key-{round_no}-{seq}"


def uniq_key(seed: int, round_no: int, seq: int) -> str:
    """A client-id-shaped ``UNIQ_KEY`` (32 hex digits), unique per (seed, round, seq)."""
    return f"{seed & 0xFFFFFFFF:08X}{round_no & 0xFFFFFFFF:08X}{seq:016X}"


def make_message(seed: int, round_no: int, seq: int) -> tuple[Message, int]:
    """The ``seq``-th message of round ``round_no`` and the queue id it goes to."""
    rng = random.Random(f"idx/{seed}/{round_no}/{seq}")
    topic = rng.choice(TOPICS)
    queue_id = rng.randrange(QUEUES)
    pick = rng.random()
    if pick < 0.1:
        size = rng.randint(1, 8)
    elif pick < 0.85:
        size = rng.randint(9, 400)
    else:
        size = rng.randint(401, 2 * 1024)
    body = rng.randbytes(size)
    tags = rng.choice(("tagA", "tagB", None))
    props = {PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: uniq_key(seed, round_no, seq)}
    return Message(topic, body, tags=tags, keys=[message_key(round_no, seq)], properties=props), queue_id


def digest(body: bytes) -> str:
    return hashlib.blake2b(body, digest_size=16).hexdigest()


def ack_line(round_no: int, seq: int, msg: Message, queue_id: int, result: PutMessageResult) -> str:
    return (
        f"{seq} {msg.topic} {queue_id} {result.queue_offset} {result.physical_offset} "
        f"{result.size} {result.msg_id} {message_key(round_no, seq)} {digest(msg.body)}"
    )


if __name__ == "__main__":
    sys.exit(write_until_killed(sys.argv, store_config, make_message, ack_line))
