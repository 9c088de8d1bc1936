"""Consumer process of the pop SIGKILL crash test.

Usage: ``python sigkill_pop_consumer.py STORE_ROOT SEED ROUND {kill|drain}``

Opens the SYNC_FLUSH store the parent filled (:func:`store_config`, topic :data:`TOPIC`), starts a
:class:`~rocketq.broker.pop.service.PopService` on it and consumes in a loop, reporting each step
on stdout with one ``os.write`` per line (atomic on a pipe)::

    D <id> <attempt>    received (after ``receive`` returned)
    a <id>              about to ack
    A <id>              ack returned: durable
    C <id>              invisible time changed (the message will come back)

In ``kill`` mode some messages are left unacked or get a short invisible time, so redeliveries
happen; the parent SIGKILLs the process at a random moment. In ``drain`` mode every message is
acked. In both modes the process prints ``DONE`` and exits once nothing is left in flight or
unread.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys

from rocketq.broker.pop.service import PopService
from rocketq.broker.pop.standalone import hook_arrivals, standalone_context
from rocketq.config import StoreConfig
from rocketq.store import MessageStore

TOPIC = "PopCrash"
QUEUES = 2
GROUP = "PopCrashGroup"
INVISIBLE_MS = 300


def store_config(root: str) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log=256 * 1024,
        mapped_file_size_consume_queue=20 * 1000,
        flush_disk_type="SYNC_FLUSH",
        max_hash_slot_num=64,
        max_index_num=256,
    )


def say(line: str) -> None:
    os.write(1, (line + "\n").encode())


def finished(pop: PopService, store: MessageStore) -> bool:
    for q in range(QUEUES):
        state = pop.table.states.get((GROUP, TOPIC, q))
        if state is None or state.in_flight or state.next_offset < store.get_max_offset(TOPIC, q):
            return False
    return True


async def consume(store: MessageStore, rng: random.Random, drain: bool) -> None:
    ctx = standalone_context(store, topics={TOPIC: QUEUES})
    pop = PopService(ctx)
    pop.start()
    hook_arrivals(store, pop)
    while not finished(pop, store):
        got = await pop.receive(
            group=GROUP,
            topic=TOPIC,
            queue_id=None,
            max_messages=rng.randint(1, 8),
            invisible_ms=INVISIBLE_MS,
            long_poll_ms=INVISIBLE_MS,
        )
        for m in got:
            say(f"D {m.message.body.decode()} {m.delivery_attempt}")
        for m in got:
            ident = m.message.body.decode()
            pick = rng.random()
            if drain or pick < 0.7:
                say(f"a {ident}")
                await pop.ack(group=GROUP, topic=TOPIC, receipt_handle=m.receipt_handle)
                say(f"A {ident}")
            elif pick < 0.85:
                await pop.change_invisible(
                    group=GROUP, topic=TOPIC, receipt_handle=m.receipt_handle, invisible_ms=50
                )
                say(f"C {ident}")
    await pop.shutdown()
    say("DONE")


def main() -> None:
    root, seed, round_no, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    rng = random.Random(seed * 1000 + round_no)
    store = MessageStore(store_config(root))
    store.start()
    try:
        asyncio.run(consume(store, rng, drain=mode == "drain"))
    finally:
        store.shutdown()


if __name__ == "__main__":
    main()
