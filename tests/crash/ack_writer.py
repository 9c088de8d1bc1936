"""The main loop of the crash tests' writer processes (``sigkill_writer.py``,
``sigkill_indexed_writer.py``, ``sigkill_batch_writer.py``), run as
``python <script> STORE_ROOT SEED ROUND``.

It opens the store, puts message (or batch) ``seq`` = 0, 1, 2, ... (a pure function of seed,
round and seq, so the parent can rebuild anything that was attempted) and, after each put returned
PUT_OK, writes that put's acknowledgement line with a single ``os.write`` (atomic on a pipe, so
a line is never torn by the kill). It runs until it is killed. Exit codes when it is not: 2 a put
failed, 3 the parent closed the pipe, 4 the safety stop was reached.

Imported by the child scripts only (the parent's side is ``kill_loop.py``), so it needs nothing
but rocketq.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from rocketq.config import StoreConfig
from rocketq.store import MessageStore, PutMessageResult

#: Safety stop, far above what a round writes before it is killed.
MAX_MESSAGES_PER_RUN = 200_000


def write_until_killed(
    argv: Sequence[str],
    store_config: Callable[[str], StoreConfig],
    make_message: Callable[[int, int, int], tuple[Any, int]],
    ack_line: Callable[[int, int, Any, int, PutMessageResult], str],
    *,
    batches: bool = False,
) -> int:
    """``argv`` = [script, STORE_ROOT, SEED, ROUND]; ``make_message(seed, round_no, seq)`` gives
    a message (a list of messages with ``batches``, stored by ``put_messages``) and its queue id,
    ``ack_line(round_no, seq, msg, queue_id, result)`` the line to report (without its newline)."""
    root, seed, round_no = argv[1], int(argv[2]), int(argv[3])
    with MessageStore(store_config(root)) as store:
        put: Callable[[Any, int], PutMessageResult] = store.put_messages if batches else store.put_message
        for seq in range(MAX_MESSAGES_PER_RUN):
            msg, queue_id = make_message(seed, round_no, seq)
            result = put(msg, queue_id)
            if not result.ok:
                sys.stderr.write(f"put {seq} returned {result!r}\n")
                return 2
            try:
                os.write(1, (ack_line(round_no, seq, msg, queue_id, result) + "\n").encode("ascii"))
            except BrokenPipeError:
                return 3  # the parent is gone: stop writing
    sys.stderr.write(f"reached {MAX_MESSAGES_PER_RUN} messages without being killed\n")
    return 4
