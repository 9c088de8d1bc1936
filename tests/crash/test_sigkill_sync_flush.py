"""SIGKILL crash loop of a SYNC_FLUSH store.

A writer process (``sigkill_writer.py``) appends messages to a store with 64 KiB segments and
reports every acknowledged put on a pipe. The test kills it with SIGKILL at a random moment,
opens the same directory itself (``start`` runs recovery) and checks:

* every message acknowledged in any round reads back unchanged at its acknowledged offset;
* the log holds exactly the acknowledged records plus, per round, at most the one record whose
  put was in flight when the writer died (and then it is exactly the message that was being put);
* records are contiguous (a gap only where a segment ends) and pass the CRC check, the last one
  ends at ``get_max_phy_offset()``, nothing can be read at or after it, the bytes after it are
  zero and no segment file lies beyond it;
* queue offsets of every (topic, queue) are 0, 1, 2, ... over the whole log, the rebuilt queue
  table continues right after the last surviving record and a new put gets that offset.

Rounds run on the same directory, so data accumulates. The seed is printed; set
``ROCKETQ_CRASH_SEED`` to replay a run.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import random
import time
from dataclasses import dataclass

import pytest
from kill_loop import crash_rounds, load_script, random_kill_point, run_and_kill

from rocketq.message import Message
from rocketq.store import MessageStore
from rocketq.store.mapped_file import offset_to_file_name

HERE = pathlib.Path(__file__).resolve().parent
WRITER_PATH = HERE / "sigkill_writer.py"
ROUNDS = 24


writer = load_script(WRITER_PATH)
SEG: int = writer.SEGMENT_SIZE


@dataclass(frozen=True)
class Rec:
    """One record the log must hold, in log order."""

    offset: int
    size: int
    topic: str
    queue_id: int
    queue_offset: int
    digest: str
    key: str
    acked: bool


@dataclass(frozen=True)
class Ack:
    seq: int
    offset: int
    size: int
    topic: str
    queue_id: int
    queue_offset: int
    digest: str


def _parse_ack(line: bytes) -> Ack:
    seq, off, size, topic, qid, qoff, dig = line.decode("ascii").split()
    return Ack(int(seq), int(off), int(size), topic, int(qid), int(qoff), dig)


def _run_and_kill(
    root: pathlib.Path, seed: int, round_no: int, rng: random.Random, stderr_path: pathlib.Path
) -> list[Ack]:
    held = writer.store_config(str(root))
    kill_at = random_kill_point(rng, few=10, many=250, most=600, few_share=0.3)
    lines = run_and_kill(WRITER_PATH, root, seed, round_no, kill_at, stderr_path, held)
    return [_parse_ack(line) for line in lines]


def _expected_from_ack(seed: int, round_no: int, ack: Ack) -> Rec:
    msg, queue_id = writer.make_message(seed, round_no, ack.seq)
    # What the writer reported must be the message it was asked to write.
    assert (ack.topic, ack.queue_id, ack.digest) == (msg.topic, queue_id, writer.digest(msg.body))
    return Rec(
        ack.offset,
        ack.size,
        ack.topic,
        ack.queue_id,
        ack.queue_offset,
        ack.digest,
        writer.message_key(round_no, ack.seq),
        True,
    )


def _key_of(properties: str) -> str:
    for piece in properties.split("\x02"):
        name, _, value = piece.partition("\x01")
        if name == "KEYS":
            return value.split(" ")[0]
    return ""


def _check_log(store: MessageStore, seed: int, round_no: int, known: list[Rec], acks: list[Ack]) -> list[Rec]:
    """Compare the recovered log with what it must hold; returns the log as a list of Rec."""
    records = list(store.commitlog.iter_records(store.get_min_phy_offset(), check_crc=True, read_body=True))
    assert records, f"round {round_no}: the recovered log is empty"
    end = store.get_max_phy_offset()
    last_off, last_view = records[-1]
    assert last_off + last_view.size == end, (
        f"round {round_no}: last valid record ends at {last_off + last_view.size}, max offset is {end}"
    )
    assert store.recovery is not None and store.recovery.process_offset == end

    # Contiguity: each record starts where the previous ended, or at the next segment's start.
    prev_end = store.get_min_phy_offset()
    for off, view in records:
        assert off == view.physical_offset, f"round {round_no}: record at {off} says {view.physical_offset}"
        if off != prev_end:
            assert off % SEG == 0 and off == prev_end + SEG - prev_end % SEG, (
                f"round {round_no}: gap between {prev_end} and record at {off}"
            )
        prev_end = off + view.size

    found = [
        Rec(
            off,
            v.size,
            v.topic,
            v.queue_id,
            v.queue_offset,
            writer.digest(v.body or b""),
            _key_of(v.properties),
            False,
        )
        for off, v in records
    ]
    n_known = len(known)
    assert len(found) >= n_known + len(acks), (
        f"round {round_no}: log has {len(found)} records, at least {n_known + len(acks)} were acknowledged"
    )
    for want, got in zip(known, found, strict=False):
        assert (want.offset, want.size, want.digest, want.key) == (got.offset, got.size, got.digest, got.key)
    expected = [_expected_from_ack(seed, round_no, a) for a in acks]
    for want, got in zip(expected, found[n_known:], strict=False):
        assert got == dataclasses.replace(want, acked=False), f"round {round_no}: {got} != {want}"
    extra = found[n_known + len(acks) :]
    # Only the put in flight at the kill may have reached the log without an ack.
    assert len(extra) <= 1, f"round {round_no}: unacknowledged records {extra}"
    if extra:
        msg, queue_id = writer.make_message(seed, round_no, len(acks))
        got = extra[0]
        assert (got.topic, got.queue_id, got.digest, got.key) == (
            msg.topic,
            queue_id,
            writer.digest(msg.body),
            writer.message_key(round_no, len(acks)),
        ), f"round {round_no}: unexpected unacknowledged record {got}"
    return [*known, *expected, *extra]


def _check_nothing_past_end(store: MessageStore, round_no: int) -> None:
    end = store.get_max_phy_offset()
    assert store.commitlog.read_record(end, check_crc=False) is None
    assert store.look_message_by_offset(end) is None
    assert store.look_message_by_offset(end, 100) is None
    files = store.commitlog.queue.files
    on_disk = sorted(n for n in os.listdir(store.config.commit_log_dir) if n.isdigit())
    assert on_disk == [os.path.basename(mf.file_name) for mf in files], (
        f"round {round_no}: segment files {on_disk} do not match the loaded ones"
    )
    last = files[-1]
    assert last.file_from_offset <= end < last.file_from_offset + SEG
    assert os.path.basename(last.file_name) == offset_to_file_name(end - end % SEG)
    with open(last.file_name, "rb") as f:
        f.seek(end - last.file_from_offset)
        tail = f.read()
    assert len(tail) == SEG - (end - last.file_from_offset)
    assert tail.count(0) == len(tail), f"round {round_no}: non-zero bytes after the recovered end {end}"


def _check_acked_readable(store: MessageStore, log: list[Rec]) -> None:
    for r in log:
        if not r.acked:
            continue
        got = store.look_message_by_offset(r.offset, r.size)
        assert got is not None, f"acknowledged message at {r.offset} ({r.key}) is gone"
        assert (got.topic, got.queue_id, got.queue_offset, writer.digest(got.body)) == (
            r.topic,
            r.queue_id,
            r.queue_offset,
            r.digest,
        ), f"acknowledged message at {r.offset} ({r.key}) changed"
        assert got.commit_log_offset == r.offset and got.store_size == r.size
        assert got.keys[0] == r.key


def _check_queue_offsets(store: MessageStore, round_no: int, log: list[Rec]) -> dict[tuple[str, int], int]:
    next_offsets: dict[tuple[str, int], int] = {}
    for r in log:
        key = (r.topic, r.queue_id)
        assert r.queue_offset == next_offsets.get(key, 0), (
            f"round {round_no}: {r.key} at {r.offset} has queue offset {r.queue_offset} in {key}, "
            f"expected {next_offsets.get(key, 0)}"
        )
        next_offsets[key] = r.queue_offset + 1
    assert store.commitlog.topic_queue_table == next_offsets
    return next_offsets


def _parent_put(
    store: MessageStore,
    rng: random.Random,
    round_no: int,
    log: list[Rec],
    next_offsets: dict[tuple[str, int], int],
) -> Rec:
    """A put after recovery continues the queue and the log right after the surviving data."""
    topic = rng.choice(writer.TOPICS)
    queue_id = rng.randrange(writer.QUEUES)
    key = f"parent-r{round_no}"
    body = rng.randbytes(rng.randint(1, 3 * 1024))
    end = store.get_max_phy_offset()
    max_acked = max(
        (r.queue_offset for r in log if r.acked and (r.topic, r.queue_id) == (topic, queue_id)), default=-1
    )
    result = store.put_message(Message(topic, body, keys=[key]), queue_id)
    assert result.ok
    assert result.queue_offset == next_offsets.get((topic, queue_id), 0)
    assert result.queue_offset >= max_acked + 1
    if result.physical_offset != end:
        assert end % SEG + result.size + 8 > SEG and result.physical_offset == end - end % SEG + SEG
    got = store.look_message_by_offset(result.physical_offset, result.size)
    assert got is not None and got.body == body and got.queue_offset == result.queue_offset
    return Rec(
        result.physical_offset,
        result.size,
        topic,
        queue_id,
        result.queue_offset,
        writer.digest(body),
        key,
        True,
    )


@pytest.mark.slow
def test_sigkill_sync_flush(tmp_path: pathlib.Path) -> None:
    seed = int(os.environ.get("ROCKETQ_CRASH_SEED") or random.randrange(1 << 32))
    print(f"crash test seed: {seed} (set ROCKETQ_CRASH_SEED={seed} to replay)")
    rng = random.Random(seed)
    root = tmp_path / "store"
    config = writer.store_config(str(root))
    log: list[Rec] = []
    started = time.monotonic()
    segments_seen = 0

    def check(store: MessageStore, round_no: int, acks: list[Ack]) -> None:
        nonlocal log, segments_seen
        log = _check_log(store, seed, round_no, log, acks)
        _check_nothing_past_end(store, round_no)
        _check_acked_readable(store, log)
        next_offsets = _check_queue_offsets(store, round_no, log)
        log.append(_parent_put(store, rng, round_no, log, next_offsets))
        segments_seen = len(store.commitlog.queue.files)

    stats = crash_rounds(
        rounds=ROUNDS,
        seed=seed,
        config=config,
        run_round=lambda n: _run_and_kill(root, seed, n, rng, tmp_path / f"writer-{n}.stderr"),
        check=check,
    )
    with MessageStore(config) as store:
        assert store.last_exit_ok
        assert store.recovery is not None and store.recovery.process_offset == log[-1].offset + log[-1].size
        _check_acked_readable(store, log)
    elapsed = time.monotonic() - started
    print(
        f"{ROUNDS} rounds, {stats.acks} acks, {len(log)} records, {segments_seen} segments, {elapsed:.1f} s "
        f"(writers {stats.writers_s:.1f} s, restarts {stats.restarts_s:.1f} s, checks {stats.checks_s:.1f} s)"
    )
    # The rounds must have exercised segment rolls, not just one segment.
    assert segments_seen >= 5
