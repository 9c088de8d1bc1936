"""SIGKILL crash loop of pop consumption.

The parent fills a SYNC_FLUSH store with messages ``id-0 … id-N-1``; then, round after round, a
child process (``sigkill_pop_consumer.py``) pops, acks some messages, leaves others to come back
after their invisible time, and is killed with SIGKILL at a random moment. A last child drains
everything without being killed. Checked over all rounds:

* a message whose ack returned is never delivered again;
* delivery attempts of a message grow by exactly one per delivery within a run and keep growing
  across crashes (a receive that was durable when the child died may have gone unreported);
* every message is delivered and ends acked: by a reported ack, or by the single ack that was
  in progress when a round was killed (then it is never delivered again);
* the pop state on disk, loaded after the last round, has nothing in flight or unread.

The seed is printed; set ``ROCKETQ_CRASH_SEED`` to replay a run.
"""

from __future__ import annotations

import os
import pathlib
import random
import signal
import subprocess
import sys
import time

import pytest
from kill_loop import LineReader, load_script

from _support.procs import child_env
from rocketq.broker.pop.journal import PopJournal
from rocketq.message import Message
from rocketq.store import MessageStore

HERE = pathlib.Path(__file__).resolve().parent
CHILD_PATH = HERE / "sigkill_pop_consumer.py"
MESSAGES = 240
ROUNDS = 5
LINE_DEADLINE_S = 60.0
EXIT_DEADLINE_S = 20.0


child = load_script(CHILD_PATH)


def _is_ack(line: bytes) -> bool:
    return line.startswith(b"A ")


def _run_child(root: pathlib.Path, seed: int, round_no: int, mode: str, rng: random.Random) -> list[str]:
    err_path = root.parent / f"child-{round_no}.err"
    cmd = [sys.executable, str(CHILD_PATH), str(root), str(seed), str(round_no), mode]
    with (
        open(err_path, "wb") as err,
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, env=child_env()) as proc,
    ):
        assert proc.stdout is not None
        reader = LineReader(proc.stdout, "pop-line-reader")
        try:
            if mode == "kill":
                want = rng.randint(5, 60)
                if reader.wait_for(want, LINE_DEADLINE_S, _is_ack):
                    time.sleep(rng.uniform(0.0, 0.05))  # a random kill moment, not a synchronisation
                    os.kill(proc.pid, signal.SIGKILL)
                elif not reader.eof:
                    pytest.fail(
                        f"round {round_no}: {reader.count(_is_ack)} of {want} acks; "
                        f"stderr:\n{err_path.read_text()}"
                    )
            proc.wait(LINE_DEADLINE_S if mode == "drain" else EXIT_DEADLINE_S)
        finally:
            if proc.returncode is None:
                proc.kill()
                proc.wait(EXIT_DEADLINE_S)
            reader.join(EXIT_DEADLINE_S)
    lines = [raw.decode().rstrip("\n") for raw in reader.lines]
    # a kill-mode child that ran out of work before the kill finishes like a drain
    done = lines[-1:] == ["DONE"]
    expected = {0, -signal.SIGKILL} if done else {-signal.SIGKILL if mode == "kill" else 0}
    assert proc.returncode in expected, (
        f"round {round_no}: exit {proc.returncode}; stderr:\n{err_path.read_text()}"
    )
    return lines


@pytest.mark.slow
def test_sigkill_pop(tmp_path: pathlib.Path) -> None:
    seed = int(os.environ.get("ROCKETQ_CRASH_SEED", random.randrange(1 << 30)))
    print(f"ROCKETQ_CRASH_SEED={seed}")
    rng = random.Random(seed)
    root = tmp_path / "store"
    with MessageStore(child.store_config(str(root))) as store:
        for i in range(MESSAGES):
            store.put_message(Message(child.TOPIC, f"id-{i}".encode()), i % child.QUEUES)

    acked: set[str] = set()  # reported acks
    in_doubt: set[str] = set()  # an ack was in progress when a round was killed
    attempts: dict[str, int] = {}
    seen_in_round: dict[str, int] = {}
    delivered: set[str] = set()
    for round_no in range(ROUNDS + 1):
        mode = "drain" if round_no == ROUNDS else "kill"
        lines = _run_child(root, seed, round_no, mode, rng)
        pending_ack: str | None = None
        for line in lines:
            kind, _, rest = line.partition(" ")
            if kind == "D":
                ident, attempt_text = rest.split()
                attempt = int(attempt_text)
                assert ident not in acked, f"round {round_no}: {ident} delivered again after its ack returned"
                prev = attempts.get(ident, 0)
                if seen_in_round.get(ident) == round_no:
                    assert attempt == prev + 1, f"round {round_no}: {ident} attempt {attempt} after {prev}"
                else:
                    # a receive made durable by a round killed before it reported counts too
                    assert attempt > prev, f"round {round_no}: {ident} attempt {attempt} after {prev}"
                seen_in_round[ident] = round_no
                attempts[ident] = attempt
                delivered.add(ident)
                in_doubt.discard(ident)  # it came back, so that ack did not take effect
            elif kind == "a":
                pending_ack = rest
            elif kind == "A":
                assert rest == pending_ack
                acked.add(rest)
                pending_ack = None
        if mode == "kill" and pending_ack is not None:
            in_doubt.add(pending_ack)
        if mode == "drain" or lines[-1:] == ["DONE"]:
            assert lines[-1] == "DONE" and pending_ack is None

    everything = {f"id-{i}" for i in range(MESSAGES)}
    assert delivered == everything, f"never delivered: {sorted(everything - delivered)[:10]}"
    assert acked | in_doubt == everything, f"lost: {sorted(everything - acked - in_doubt)[:10]}"
    assert len(in_doubt - acked) <= ROUNDS
    assert max(attempts.values()) >= 2, "no redelivery happened; the test exercised nothing"

    journal = PopJournal(str(root / "pop"))
    table = journal.load()
    journal.close()
    with MessageStore(child.store_config(str(root))) as store:
        for q in range(child.QUEUES):
            state = table.states[(child.GROUP, child.TOPIC, q)]
            assert not state.in_flight
            assert state.next_offset == store.get_max_offset(child.TOPIC, q)
