"""SIGKILL crash loop of a SYNC_FLUSH store: the ConsumeQueues and the index.

A writer process (``sigkill_indexed_writer.py``) appends messages, each with a unique key and a
unique ``UNIQ_KEY``, to several topics and queues of a store whose CommitLog segments (64 KiB),
ConsumeQueue files (100 units) and index files (64 slots, 127 entries) are small, so all three
roll often. It reports every acknowledged put on a pipe. The test kills it with SIGKILL at a
random moment, opens the same directory itself (``start`` runs recovery), waits until dispatch
has caught up and checks, for every record the CommitLog holds (each acknowledged message of
every round, plus at most the one message per round whose put was in flight at the kill):

* the CommitLog holds exactly those records, in that order;
* ``get_message`` at its queue offset returns it (same body, CommitLog offset and keys);
* ``query_messages_by_key`` finds it by its key and by its ``UNIQ_KEY``;
* ``look_message_by_id`` finds it by its offset message id (for acknowledged messages, the id
  the put returned);
* per (topic, queue): the minimum offset is 0, the maximum offset is the number of records of
  that queue, every offset below it returns its record and the maximum reads as overflow by one.

Once, after a few rounds, the store is shut down cleanly, its ``consumequeue`` and ``index``
directories are copied away and deleted, and a restart rebuilds them from the CommitLog: every
ConsumeQueue file must be identical byte for byte to the one the crash rounds left, and the index
files must hold the same contents (their names are creation times and differ). Every record must
be reachable in the rebuilt store too. After every round the test also counts index entries that
repeat an earlier one (same key hash, same CommitLog offset): a restart must index each message
once. Both kinds of difference fail the test after the remaining crash rounds have run.

Two deterministic tests restart once from a state a kill can leave: right after a flush
(``test_unclean_restart_indexes_each_key_once``), and while the newest index file was being
created (``test_unclean_restart_after_a_kill_while_creating_an_index_file``).

Rounds run on the same directory, so data accumulates. The seed is printed; set
``ROCKETQ_CRASH_SEED`` to replay a run.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import random
import shutil
import struct
import time
from collections import Counter, defaultdict
from dataclasses import dataclass

import pytest
from kill_loop import crash_rounds, load_script, random_kill_point, run_and_kill

from rocketq.config import StoreConfig
from rocketq.message import (
    PROPERTY_KEYS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    create_offset_msg_id,
    decode_properties,
    pack_socket_addr,
)
from rocketq.store import MessageStore
from rocketq.store.store_queries import GetMessageStatus

HERE = pathlib.Path(__file__).resolve().parent
WRITER_PATH = HERE / "sigkill_indexed_writer.py"
ROUNDS = 22
#: The round after which the ConsumeQueues and the index are rebuilt and compared.
REBUILD_AFTER = (3, 6)
DISPATCH_DEADLINE_S = 30.0
GROUP = "crash-cq-group"
INDEX_HEADER = struct.Struct(">qqqqii")
INDEX_ENTRY = struct.Struct(">iqii")


writer = load_script(WRITER_PATH)


@dataclass(frozen=True)
class Rec:
    """One record the CommitLog must hold, in log order."""

    offset: int
    size: int
    topic: str
    queue_id: int
    queue_offset: int
    digest: str
    key: str
    uniq: str
    msg_id: str
    store_timestamp: int
    acked: bool


@dataclass(frozen=True)
class Ack:
    seq: int
    topic: str
    queue_id: int
    queue_offset: int
    offset: int
    size: int
    msg_id: str
    key: str
    digest: str


def _parse_ack(line: bytes) -> Ack:
    seq, topic, qid, qoff, off, size, msg_id, key, dig = line.decode("ascii").split()
    return Ack(int(seq), topic, int(qid), int(qoff), int(off), int(size), msg_id, key, dig)


def _run_and_kill(
    root: pathlib.Path, seed: int, round_no: int, rng: random.Random, stderr_path: pathlib.Path
) -> list[Ack]:
    held = writer.store_config(str(root))
    kill_at = random_kill_point(rng, few=15, many=180, most=400, few_share=0.25)
    lines = run_and_kill(WRITER_PATH, root, seed, round_no, kill_at, stderr_path, held)
    return [_parse_ack(line) for line in lines]


def _rec_from_ack(seed: int, round_no: int, ack: Ack, store_host: bytes) -> Rec:
    msg, queue_id = writer.make_message(seed, round_no, ack.seq)
    # What the writer reported must be the message it was asked to write.
    assert (ack.topic, ack.queue_id, ack.key, ack.digest) == (
        msg.topic,
        queue_id,
        writer.message_key(round_no, ack.seq),
        writer.digest(msg.body),
    ), f"round {round_no}: ack {ack} does not describe message {ack.seq}"
    assert ack.msg_id == create_offset_msg_id(store_host, ack.offset), f"round {round_no}: {ack}"
    return Rec(
        ack.offset,
        ack.size,
        ack.topic,
        ack.queue_id,
        ack.queue_offset,
        ack.digest,
        ack.key,
        writer.uniq_key(seed, round_no, ack.seq),
        ack.msg_id,
        0,  # taken from the log once the record is found there
        True,
    )


def _scan_log(store: MessageStore, store_host: bytes) -> list[Rec]:
    """Every record of the recovered CommitLog, CRC-checked, in log order."""
    out = []
    for off, view in store.commitlog.iter_records(store.get_min_phy_offset(), check_crc=True, read_body=True):
        props = decode_properties(view.properties)
        out.append(
            Rec(
                off,
                view.size,
                view.topic,
                view.queue_id,
                view.queue_offset,
                writer.digest(view.body or b""),
                props.get(PROPERTY_KEYS, ""),
                props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, ""),
                create_offset_msg_id(store_host, off),
                view.store_timestamp,
                False,
            )
        )
    return out


def _check_log(
    store: MessageStore, seed: int, round_no: int, known: list[Rec], acks: list[Ack], store_host: bytes
) -> list[Rec]:
    """The recovered CommitLog holds the known records, this round's acknowledged ones and at most
    the message in flight at the kill; returns them all (the new list of known records)."""
    found = _scan_log(store, store_host)
    last = found[-1] if found else None
    assert last is not None and last.offset + last.size == store.get_max_phy_offset(), (
        f"round {round_no}: the last record does not end at the max offset {store.get_max_phy_offset()}"
    )
    n_known = len(known)
    expected = [_rec_from_ack(seed, round_no, a, store_host) for a in acks]
    assert len(found) >= n_known + len(expected), (
        f"round {round_no}: the log has {len(found)} records, {n_known + len(expected)} must survive"
    )
    for want, got in zip([*known, *expected], found, strict=False):
        assert (want.offset, want.size, want.topic, want.queue_id, want.queue_offset) == (
            got.offset,
            got.size,
            got.topic,
            got.queue_id,
            got.queue_offset,
        ), f"round {round_no}: record {got} != {want}"
        assert (want.digest, want.key, want.uniq, want.msg_id) == (got.digest, got.key, got.uniq, got.msg_id)
    for want, got in zip(known, found, strict=False):
        assert want.store_timestamp == got.store_timestamp, f"round {round_no}: {got} != {want}"
    extra = found[n_known + len(expected) :]
    assert len(extra) <= 1, f"round {round_no}: unacknowledged records {extra}"
    if extra:
        msg, queue_id = writer.make_message(seed, round_no, len(acks))
        got = extra[0]
        assert (got.topic, got.queue_id, got.digest, got.key, got.uniq) == (
            msg.topic,
            queue_id,
            writer.digest(msg.body),
            writer.message_key(round_no, len(acks)),
            writer.uniq_key(seed, round_no, len(acks)),
        ), f"round {round_no}: unexpected unacknowledged record {got}"
    survivors = [dataclasses.replace(g, acked=True) for g in found[n_known : n_known + len(expected)]]
    return [*known, *survivors, *extra]


def _by_key(store: MessageStore, r: Rec, key: str, far_future_ms: int) -> bool:
    """``query_messages_by_key`` finds ``r`` under ``key``; True when only the unbounded window did.

    The index keeps times at second precision relative to a file's first entry, so an entry reads
    back in ``(store time - 1 s, store time]``, and a query in that window around the store time
    looks at the few index files of that moment only. A miss in the narrow window is retried from
    0 to far in the future, and the caller counts how often that was needed.
    """
    wide = False
    ts = r.store_timestamp
    res = store.query_messages_by_key(r.topic, key, begin_ms=ts - 1000, end_ms=ts + 1000)
    hits = [m for m in res.messages if m.commit_log_offset == r.offset]
    if not hits:
        wide = True
        res = store.query_messages_by_key(r.topic, key, begin_ms=0, end_ms=far_future_ms)
        hits = [m for m in res.messages if m.commit_log_offset == r.offset]
    assert len(hits) == 1, (
        f"{r.topic}#{key} ({r.offset}, stored at {ts}) not found by key: got offsets "
        f"{[m.commit_log_offset for m in res.messages]}"
    )
    m = hits[0]
    assert writer.digest(m.body) == r.digest and m.queue_offset == r.queue_offset, f"{key} changed"
    return wide


def _check_reachable(store: MessageStore, log: list[Rec]) -> tuple[int, int]:
    """Every record through its ConsumeQueue offset, its key, its UNIQ_KEY and its message id;
    dense queues whose max offset is the record count. Returns the number of queues with data and
    how many key lookups needed the unbounded time window."""
    per_queue: dict[tuple[str, int], list[Rec]] = defaultdict(list)
    for r in log:
        per_queue[(r.topic, r.queue_id)].append(r)
    far_future_ms = time.time_ns() // 1_000_000 + 24 * 3600 * 1000
    for topic in writer.TOPICS:
        for qid in range(writer.QUEUES):
            recs = per_queue.get((topic, qid), [])
            assert [r.queue_offset for r in recs] == list(range(len(recs))), (
                f"{topic}/{qid}: the log's queue offsets are not 0, 1, 2, ..."
            )
            assert store.get_max_offset(topic, qid) == len(recs), (
                f"{topic}/{qid}: max offset {store.get_max_offset(topic, qid)}, the log holds {len(recs)}"
            )
            if recs:
                assert store.get_min_offset(topic, qid) == 0, f"{topic}/{qid}: min offset"
                beyond = store.get_message(GROUP, topic, qid, len(recs), 1)
                assert beyond.status is GetMessageStatus.OFFSET_OVERFLOW_ONE, (
                    f"{topic}/{qid}: {beyond.status}"
                )
            for r in recs:
                got = store.get_message(GROUP, topic, qid, r.queue_offset, 1)
                assert got.status is GetMessageStatus.FOUND and got.queue_offsets == [r.queue_offset], (
                    f"{topic}/{qid} offset {r.queue_offset} ({r.key}): {got.status}, {got.queue_offsets}"
                )
                (m,) = got.messages
                assert (m.commit_log_offset, m.store_size, m.queue_offset) == (
                    r.offset,
                    r.size,
                    r.queue_offset,
                ), f"{topic}/{qid} offset {r.queue_offset} points at {m.commit_log_offset}, not {r.offset}"
                assert writer.digest(m.body) == r.digest and m.keys == [r.key] and m.uniq_key == r.uniq
    wide = 0
    for r in log:
        wide += _by_key(store, r, r.key, far_future_ms)
        wide += _by_key(store, r, r.uniq, far_future_ms)
        by_id = store.look_message_by_id(r.msg_id)
        assert by_id is not None, f"{r.msg_id} ({r.key}) not found by message id"
        assert (
            by_id.commit_log_offset,
            by_id.topic,
            by_id.queue_id,
            by_id.queue_offset,
            writer.digest(by_id.body),
            by_id.msg_id,
        ) == (r.offset, r.topic, r.queue_id, r.queue_offset, r.digest, r.msg_id), (
            f"{r.msg_id} ({r.key}) changed"
        )
    return len(per_queue), wide


def _wait_dispatched(store: MessageStore) -> None:
    assert store.wait_dispatched(DISPATCH_DEADLINE_S), (
        f"dispatch still {store.dispatch_behind_bytes()} B behind after {DISPATCH_DEADLINE_S} s"
    )


def _cq_files(root: pathlib.Path) -> dict[str, bytes]:
    base = root / "consumequeue"
    return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}


def _index_files(root: pathlib.Path) -> list[tuple[str, bytes]]:
    return [(p.name, p.read_bytes()) for p in sorted((root / "index").iterdir()) if p.is_file()]


def _describe_index(files: list[tuple[str, bytes]]) -> str:
    lines = []
    for name, data in files:
        begin_ts, end_ts, begin_phy, end_phy, slots, count = INDEX_HEADER.unpack_from(data, 0)
        lines.append(
            f"  {name}: time [{begin_ts}, {end_ts}] offsets [{begin_phy}, {end_phy}] "
            f"slots used {slots} indexCount {count}"
        )
    return "\n".join(lines)


def _first_cq_difference(a: bytes, b: bytes) -> str:
    if len(a) != len(b):
        return f"length {len(a)} != {len(b)}"
    for pos in range(0, len(a), 20):
        if a[pos : pos + 20] != b[pos : pos + 20]:
            return (
                f"unit {pos // 20}: {struct.unpack('>qiq', a[pos : pos + 20])} "
                f"!= rebuilt {struct.unpack('>qiq', b[pos : pos + 20])}"
            )
    return "identical"


def _index_entries(files: list[tuple[str, bytes]]) -> list[tuple[int, int]]:
    """(key hash, CommitLog offset) of every index entry, files in creation order."""
    base = INDEX_HEADER.size + writer.HASH_SLOTS * 4
    out = []
    for _, data in files:
        count = INDEX_HEADER.unpack_from(data, 0)[5]
        for n in range(1, count):
            key_hash, phy, _diff, _prev = INDEX_ENTRY.unpack_from(data, base + n * INDEX_ENTRY.size)
            out.append((key_hash, phy))
    return out


def _drop_extra_copies(seq: list[tuple[int, int]], other: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``seq`` without the later copies of entries it holds more often than ``other``."""
    allowed = Counter(other)
    seen: Counter[tuple[int, int]] = Counter()
    out = []
    for e in seq:
        seen[e] += 1
        if seen[e] > 1 and seen[e] > allowed[e]:
            continue
        out.append(e)
    return out


def _explain_index_difference(
    first: list[tuple[str, bytes]], second: list[tuple[str, bytes]], names: tuple[str, str]
) -> str:
    a, b = _index_entries(first), _index_entries(second)
    a_counts, b_counts = Counter(a), Counter(b)
    extra_a = sorted((e for e, n in a_counts.items() if n > max(b_counts[e], 1)), key=lambda e: e[1])
    extra_b = sorted((e for e, n in b_counts.items() if n > max(a_counts[e], 1)), key=lambda e: e[1])
    same = _drop_extra_copies(a, b) == _drop_extra_copies(b, a)
    return (
        f"{len(a)} entries {names[0]}, {len(b)} {names[1]}; entries (key hash, CommitLog offset) held "
        f"more than once and more often {names[0]}: {extra_a[:20]}, {names[1]}: {extra_b[:20]}; "
        f"without those extra copies the entry sequences are {'equal' if same else 'still different'}\n"
        f"{names[0]}:\n{_describe_index(first)}\n{names[1]}:\n{_describe_index(second)}"
    )


def _repeated_index_entries(root: pathlib.Path) -> int:
    """How many index entries are copies of an earlier entry (same key hash, same offset)."""
    entries = _index_entries(_index_files(root))
    return len(entries) - len(set(entries))


def _rebuild_and_compare(config: StoreConfig, root: pathlib.Path, log: list[Rec]) -> list[str]:
    """Delete the ConsumeQueues and the index of a cleanly shut down store; a restart must rebuild
    them so that every record is reachable again, into files identical to the ones the crash rounds
    left. Returns the differences found in the files."""
    saved = root.parent / f"{root.name}-before-rebuild"
    shutil.copytree(root / "consumequeue", saved / "consumequeue")
    shutil.copytree(root / "index", saved / "index")
    cq_before = _cq_files(saved)
    index_before = _index_files(saved)
    assert cq_before and index_before
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index")
    store = MessageStore(config)
    store.start()
    try:
        _wait_dispatched(store)
        assert store.last_exit_ok
        _check_reachable(store, log)
    finally:
        store.shutdown()
    cq_after = _cq_files(root)
    index_after = _index_files(root)
    problems = []
    if sorted(cq_before) != sorted(cq_after):
        problems.append(f"ConsumeQueue files {sorted(cq_before)} before, {sorted(cq_after)} rebuilt")
    differing = [
        f"{name}: {_first_cq_difference(data, cq_after[name])}"
        for name, data in cq_before.items()
        if name in cq_after and data != cq_after[name]
    ]
    if differing:
        problems.append("rebuilt ConsumeQueue files differ:\n" + "\n".join(differing))
    if sorted(data for _, data in index_before) != sorted(data for _, data in index_after):
        problems.append(
            f"rebuilt index files differ ({len(index_before)} files before, {len(index_after)} rebuilt): "
            + _explain_index_difference(index_before, index_after, ("before", "rebuilt"))
        )
    return problems


@pytest.mark.slow
def test_sigkill_consume_queue_and_index(tmp_path: pathlib.Path) -> None:
    seed = int(os.environ.get("ROCKETQ_CRASH_SEED") or random.randrange(1 << 32))
    print(f"crash test seed: {seed} (set ROCKETQ_CRASH_SEED={seed} to replay)")
    rng = random.Random(seed)
    rebuild_round = rng.randint(*REBUILD_AFTER)
    root = tmp_path / "store"
    config = writer.store_config(str(root))
    store_host = pack_socket_addr(config.store_host)
    log: list[Rec] = []
    started = time.monotonic()
    queues = wide_lookups = 0
    # Differences between the files the crash rounds left and rebuilt ones, and index entries
    # written twice, are reported at the end, so that the remaining crash rounds still run.
    rebuild_problems: list[str] | None = None
    repeated_before = 0
    repeated_by_round: dict[int, int] = {}

    def check(store: MessageStore, round_no: int, acks: list[Ack]) -> None:
        nonlocal log, queues, wide_lookups
        log = _check_log(store, seed, round_no, log, acks, store_host)
        queues, wide = _check_reachable(store, log)
        wide_lookups += wide

    def after(round_no: int) -> None:
        nonlocal repeated_before, rebuild_problems
        repeated = _repeated_index_entries(root)
        if repeated > repeated_before:
            repeated_by_round[round_no] = repeated - repeated_before
        repeated_before = repeated
        if round_no == rebuild_round:
            try:
                rebuild_problems = _rebuild_and_compare(config, root, log)
            except AssertionError as exc:
                raise AssertionError(f"seed {seed}, rebuild after round {round_no}: {exc}") from exc
            repeated_before = _repeated_index_entries(root)

    stats = crash_rounds(
        rounds=ROUNDS,
        seed=seed,
        config=config,
        run_round=lambda n: _run_and_kill(root, seed, n, rng, tmp_path / f"writer-{n}.stderr"),
        settle=_wait_dispatched,
        check=check,
        after=after,
    )
    with MessageStore(config) as store:
        assert store.last_exit_ok
        _wait_dispatched(store)
        _check_reachable(store, log)
    cq_files = len(_cq_files(root))
    index_files = len(_index_files(root))
    elapsed = time.monotonic() - started
    print(
        f"{ROUNDS} rounds, {stats.acks} acks, {len(log)} records in {queues} queues, "
        f"{cq_files} ConsumeQueue files, {index_files} index files, rebuild after round {rebuild_round}, "
        f"{wide_lookups} key lookups needed the unbounded window, "
        f"{elapsed:.1f} s (writers {stats.writers_s:.1f} s, restarts {stats.restarts_s:.1f} s, "
        f"checks {stats.checks_s:.1f} s)"
    )
    # The rounds must have rolled ConsumeQueue and index files, not just filled one of each.
    assert cq_files > 2 * queues
    assert index_files >= 5
    # Every entry, including the first one of each rolled index file, reads back at its store
    # time (to the second), so the narrow window around it always finds it.
    assert wide_lookups == 0
    assert rebuild_problems is not None, "the rebuild did not run"
    problems = [f"rebuild after round {rebuild_round}: {p}" for p in rebuild_problems]
    if repeated_by_round:
        problems.append(
            "the restart after a kill wrote index entries (key hash, CommitLog offset) the index "
            f"already held; extra copies per round: {repeated_by_round}"
        )
    assert not problems, f"seed {seed}: " + "\n".join(problems)


def test_unclean_restart_indexes_each_key_once(tmp_path: pathlib.Path) -> None:
    """The state a SIGKILL leaves right after the ConsumeQueues and the index were flushed (the
    ``abort`` file present, nothing lost): a restart must not change the index. With the newest
    index file full and a second one begun, it is the case every crash round above meets."""
    root = tmp_path / "store"
    config = writer.store_config(str(root))
    with MessageStore(config) as store:
        for seq in range(100):  # 200 keys: one full index file (127 entries) and a second one
            msg, queue_id = writer.make_message(7, 0, seq)
            assert store.put_message(msg, queue_id).ok
        assert store.wait_dispatched(DISPATCH_DEADLINE_S)
    before = _index_files(root)
    assert len(before) == 2
    (root / "abort").write_text("killed")
    with MessageStore(config) as store:
        assert not store.last_exit_ok
        _wait_dispatched(store)
    after = _index_files(root)
    explanation = _explain_index_difference(before, after, ("before the restart", "after it"))
    assert sorted(data for _, data in before) == sorted(data for _, data in after), explanation


@pytest.mark.parametrize("length", ["empty", "zeroed"])
def test_unclean_restart_after_a_kill_while_creating_an_index_file(
    tmp_path: pathlib.Path, length: str
) -> None:
    """A kill between creating the newest index file and writing its header (``IndexFile`` opens
    it with O_CREAT, then sizes it, maps it and writes the header) leaves it empty or all zeros.
    Recovery must index each message once: exactly the entries the index held before."""
    root = tmp_path / "store"
    config = writer.store_config(str(root))
    with MessageStore(config) as store:
        for seq in range(200):  # 400 keys: three full index files and a fourth one begun
            msg, queue_id = writer.make_message(11, 0, seq)
            assert store.put_message(msg, queue_id).ok
        assert store.wait_dispatched(DISPATCH_DEADLINE_S)
    before = _index_files(root)
    assert len(before) == 4
    newest = root / "index" / before[-1][0]
    with open(newest, "r+b") as f:
        f.truncate(0)
        if length == "zeroed":
            f.truncate(len(before[-1][1]))
    (root / "abort").write_text("killed")
    with MessageStore(config) as store:
        assert not store.last_exit_ok
        _wait_dispatched(store)
    after = _index_files(root)
    explanation = _explain_index_difference(before, after, ("before the kill", "after the restart"))
    assert Counter(_index_entries(after)) == Counter(_index_entries(before)), explanation
