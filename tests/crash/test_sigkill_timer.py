"""SIGKILL during timed delivery: every acknowledged timer is delivered, at least once, never early.

A writer process (``sigkill_timer_writer.py``) puts timer messages into a SYNC_FLUSH store and
acknowledges each flushed put on a pipe, while its timer service delivers those that come due and
writes snapshots every 300 ms. The test kills it with SIGKILL after a random number of
acknowledgements, opens the same directory itself and checks, after the timers have drained:

* every timer acknowledged in any round is in its real topic at least once;
* no copy was stored before its ``TIMER_DELIVER_MS`` (copies the writer delivered before it died
  and copies delivered again after recovery alike);
* nothing else is there: only acknowledged messages and the one put in flight at the kill.

Rounds run on the same directory. The seed is printed; set ``ROCKETQ_CRASH_SEED`` to replay.
"""

from __future__ import annotations

import os
import pathlib
import random
from collections import Counter

from kill_loop import load_script, run_and_kill

from _support.wait import wait_until
from rocketq.message import MessageExt
from rocketq.store import MessageStore
from rocketq.store.timer import TIMER_TOPIC, TimerMessageService

HERE = pathlib.Path(__file__).resolve().parent
WRITER_PATH = HERE / "sigkill_timer_writer.py"
ROUNDS = 3
DRAIN_DEADLINE_S = 30.0


writer = load_script(WRITER_PATH)


def _run_and_kill(
    root: pathlib.Path, seed: int, round_no: int, want: int, extra_s: float, err_path: pathlib.Path
) -> dict[str, int]:
    """Run the writer to ``want`` acks and ``extra_s`` on (deliveries under way), SIGKILL it;
    {key: deliver_ms} of acked puts."""
    lines = run_and_kill(WRITER_PATH, root, seed, round_no, (want, extra_s), err_path)
    acked: dict[str, int] = {}
    for line in lines:
        _seq, deliver_ms, key = line.decode("ascii").split()
        acked[key] = int(deliver_ms)
    return acked


def _delivered(store: MessageStore) -> list[MessageExt]:
    out: list[MessageExt] = []
    for queue_id in range(writer.QUEUES):
        offset = 0
        while offset < store.get_max_offset(writer.TOPIC, queue_id):
            got = store.get_message("G", writer.TOPIC, queue_id, offset, 64)
            out.extend(got.messages)
            offset = got.next_begin_offset
    return out


def test_sigkill_while_timers_are_pending_loses_none_and_delivers_none_early(tmp_path: pathlib.Path) -> None:
    seed = int(os.environ.get("ROCKETQ_CRASH_SEED", random.randrange(1 << 30)))
    print(f"ROCKETQ_CRASH_SEED={seed}")
    rng = random.Random(seed)
    root = tmp_path / "store"
    cfg = writer.store_config(str(root))
    acked: dict[str, int] = {}
    allowed_extra: set[str] = set()
    duplicates = 0
    for round_no in range(ROUNDS):
        want, extra_s = rng.randint(20, 200), rng.uniform(0.0, 0.8)
        got = _run_and_kill(root, seed, round_no, want, extra_s, tmp_path / f"writer-{round_no}.err")
        acked.update(got)
        allowed_extra.add(writer.message_key(round_no, len(got)))  # the put in flight at the kill
        with MessageStore(cfg) as store:
            assert store.timer is not None
            timer = store.timer

            def delivered_all(store: MessageStore = store, timer: TimerMessageService = timer) -> bool:
                # Cheap check first: the timer queue read to its end and nothing pending.
                drained = timer.pending == 0 and timer.cq_offset >= store.get_max_offset(TIMER_TOPIC, 0)
                return drained and {m.keys[0] for m in _delivered(store)} >= acked.keys()

            def report(
                store: MessageStore = store, timer: TimerMessageService = timer, round_no: int = round_no
            ) -> str:
                undelivered = acked.keys() - {m.keys[0] for m in _delivered(store)}
                return (
                    f"round {round_no}: {timer.pending} timers pending, "
                    f"{len(undelivered)} acknowledged not delivered"
                )

            wait_until(delivered_all, report, DRAIN_DEADLINE_S, 0.05)
            assert store.wait_dispatched()
            copies = _delivered(store)
            counts = Counter(m.keys[0] for m in copies)
            for m in copies:
                key = m.keys[0]
                assert key in acked or key in allowed_extra, f"{key} was never put"
                deliver_ms = int(m.properties["TIMER_DELIVER_MS"])
                assert key not in acked or deliver_ms == acked[key]
                assert m.store_timestamp >= deliver_ms, (
                    f"{key} delivered {deliver_ms - m.store_timestamp} ms early"
                )
            assert acked.keys() <= counts.keys()
            duplicates = sum(n - 1 for n in counts.values())
    print(f"{len(acked)} acknowledged timers over {ROUNDS} kills; {duplicates} delivered twice")
