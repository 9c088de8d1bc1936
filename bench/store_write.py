"""Store write benchmark: CommitLog put throughput against this machine's raw Python ceiling.

    python bench/store_write.py              # the full table (about a minute)
    python bench/store_write.py --quick      # fewer messages
    python bench/store_write.py --memory 2   # also write 2 GiB and report peak RssAnon
    python bench/store_write.py --public     # only MessageStore.put_message(Message), dispatch running

The ceiling is the least work any Python writer of these records must do per message: pack the
whole record (header, body, topic, properties) with one cached ``struct.Struct`` and CRC the body,
into an mmap of a preallocated file, with no lock, no queue offsets, no flush. Store figures are
reported as a fraction of the ceiling measured next to them (ceiling and store runs alternate; the
machine is noisy: compare ratios, not absolute numbers across runs), twice: by wall clock, and by
the CPU time of the writing thread (``time.thread_time``), which other processes on the machine
disturb much less. SYNC_FLUSH rows: one writer and eight writers, alternating, best of two each;
the last line gives their ratio and the messages each ``fdatasync`` carried.

A last table gives the single-writer cases by the least CPU time per message over ``--turns``
interleaved turns of 10,000 messages (ceiling, store, ceiling, store, ...): the minimum, as
``timeit`` takes it, is the figure least disturbed by the rest of the machine.

Messages reach the CommitLog as the broker hands them over (``BrokerMessage``: properties
already encoded, as they arrive on the wire).

The public path (``--public`` runs only that table): an embedded store user's
``MessageStore.put_message(Message)`` one by one and ``put_messages`` in batches of 32, with
dispatch (``ReputMessageService``: ConsumeQueues and the index) running and each turn counted
until everything it put is dispatched. Its figure is the CPU time of the whole process (every
thread: writer, dispatch, flush) per message, next to the ceiling and to ``CommitLog.put_message``
of the same records pre-encoded, in interleaved turns (ceiling, CommitLog, public, ...), least of
each; the ratio to the ceiling is printed. The ``Message`` objects carry the same properties as
the ``BrokerMessage`` objects (``UNIQ_KEY``, ``WAIT``, tags ``TagA``): every case writes records of the
same size.
"""

from __future__ import annotations

import argparse
import math
import mmap
import os
import shutil
import struct
import sys
import tempfile
import threading
import time
import zlib
from dataclasses import dataclass

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from rocketq.config import StoreConfig
from rocketq.message import BrokerMessage, Message, UniqueIdGenerator, encode_properties
from rocketq.protocol.record import MESSAGE_MAGIC_CODE, record_layout
from rocketq.store.commitlog import CommitLog
from rocketq.store.message_store import MessageStore

TOPIC = "BenchTopic"
MiB = 1 << 20


def make_messages(n: int, body_size: int, queues: int = 4) -> list[BrokerMessage]:
    ids = UniqueIdGenerator()
    body = os.urandom(body_size)
    out = []
    for i in range(n):
        props = encode_properties({"UNIQ_KEY": ids.next_id(), "WAIT": "true", "TAGS": "TagA"}).encode()
        out.append(BrokerMessage(TOPIC, body, props, queue_id=i % queues, born_timestamp=1_700_000_000_000))
    return out


def make_public_messages(n: int, body_size: int) -> list[Message]:
    """What an embedded store user puts: ``Message`` objects whose records are the same size as
    those of :func:`make_messages` (the same properties in the same order)."""
    ids = UniqueIdGenerator()
    body = os.urandom(body_size)
    return [
        Message(TOPIC, body, tags="TagA", properties={"UNIQ_KEY": ids.next_id(), "WAIT": "true"})
        for _ in range(n)
    ]


class CeilingWriter:
    """The ceiling: the bare minimum per record, one struct pack of the whole record plus the
    body CRC, into an mmap of a preallocated file (rewritten from its start when full)."""

    def __init__(self, path: str, file_size: int) -> None:
        self._file = open(path, "w+b")  # noqa: SIM115 - closed by close()
        os.posix_fallocate(self._file.fileno(), 0, file_size)  # segments are created the same way
        self._mm = mmap.mmap(self._file.fileno(), file_size)
        self._size = file_size
        self._pos = 0
        self._cache: dict[tuple[int, int], struct.Struct] = {}

    def write(self, msgs: list[BrokerMessage]) -> tuple[float, float]:
        """Write ``msgs``; (wall seconds, CPU seconds of this thread)."""
        mm, file_size, cache = self._mm, self._size, self._cache
        host = b"\x7f\x00\x00\x01\x00\x00*\x9f"
        topic = TOPIC.encode()
        pos = self._pos
        t0 = time.perf_counter()
        c0 = time.thread_time()
        for i, m in enumerate(msgs):
            body = m.body
            props = m.properties
            bl = len(body)
            pl = len(props)
            st = cache.get((bl, pl))
            if st is None:
                st = cache[(bl, pl)] = record_layout(8, 8, False, bl, len(topic), pl)
            n = 91 + bl + len(topic) + pl
            if pos + n + 8 > file_size:
                pos = 0
            st.pack_into(
                mm, pos, n, MESSAGE_MAGIC_CODE, zlib.crc32(body) & 0x7FFFFFFF, m.queue_id, 0, i, pos, 0,
                m.born_timestamp, host, 1_700_000_000_001, host, 0, 0, bl, body, len(topic), topic, pl, props,
            )  # fmt: skip
            pos += n
        elapsed = time.perf_counter() - t0
        cpu = time.thread_time() - c0
        self._pos = pos
        return elapsed, cpu

    def close(self) -> None:
        self._mm.close()
        self._file.close()


def ceiling(msgs: list[BrokerMessage], path: str, file_size: int) -> tuple[float, float]:
    """(records/s by wall clock, by CPU time of this thread) of the ceiling on a fresh file."""
    writer = CeilingWriter(path, file_size)
    try:
        elapsed, cpu = writer.write(msgs)
    finally:
        writer.close()
    return len(msgs) / elapsed, len(msgs) / cpu


def put_all(log: CommitLog, msgs: list[BrokerMessage], batch: int) -> None:
    """Put ``msgs`` one by one (``batch`` 1) or in batches of ``batch``."""
    if batch == 1:
        put = log.put_message
        for m in msgs:
            put(m)
    else:
        put_batch = log.put_messages
        for i in range(0, len(msgs), batch):
            put_batch(msgs[i : i + batch])


def cpu_turns(
    base: str, cfg: StoreConfig, body: int, batch: int, turns: int, per_turn: int
) -> tuple[float, float]:
    """Least CPU time per message of the writing thread over ``turns`` interleaved turns (ceiling,
    store, ceiling, store, ...) of ``per_turn`` messages each, on one open ceiling file and one
    open CommitLog: (ceiling µs, store µs). The least of many short turns is the figure least
    disturbed by the rest of the machine (as ``timeit`` takes the minimum)."""
    msgs = make_messages(per_turn, body)
    shutil.rmtree(cfg.store_path_root_dir, ignore_errors=True)
    writer = CeilingWriter(os.path.join(base, "ceiling-turns"), cfg.mapped_file_size_commit_log)
    log = CommitLog(cfg)
    log.load()
    log.start()
    best_ceiling = best_store = math.inf
    try:
        for _ in range(turns):
            best_ceiling = min(best_ceiling, writer.write(msgs)[1])
            c0 = time.thread_time()
            put_all(log, msgs, batch)
            best_store = min(best_store, time.thread_time() - c0)
    finally:
        log.shutdown()
        writer.close()
        os.unlink(os.path.join(base, "ceiling-turns"))
        shutil.rmtree(cfg.store_path_root_dir, ignore_errors=True)
    return best_ceiling / per_turn * 1e6, best_store / per_turn * 1e6


def put_public(store: MessageStore, msgs: list[Message], batch: int, queues: int = 4) -> None:
    """``MessageStore.put_message`` one by one (``batch`` 1) or ``put_messages`` in batches."""
    if batch == 1:
        put = store.put_message
        for i, m in enumerate(msgs):
            put(m, i % queues)
    else:
        put_batch = store.put_messages
        for n, i in enumerate(range(0, len(msgs), batch)):
            put_batch(msgs[i : i + batch], n % queues)


def public_turns(base: str, cfg: StoreConfig, body: int, turns: int, per_turn: int) -> dict[str, float]:
    """Least CPU µs per message over ``turns`` interleaved turns of ``per_turn`` messages: the
    ceiling (writing thread), ``CommitLog.put_message`` of pre-encoded records (writing thread, no
    dispatch), and the public path single and batched (whole process: every thread, until all is
    dispatched). Keys: ceiling, commitlog, public, public_batch (CPU) and the same with ``_wall``."""
    pre = make_messages(per_turn, body)
    public = make_public_messages(per_turn, body)
    root = cfg.store_path_root_dir
    log_cfg = StoreConfig(
        store_path_root_dir=root + "-log", mapped_file_size_commit_log=cfg.mapped_file_size_commit_log
    )
    for d in (root, log_cfg.store_path_root_dir):
        shutil.rmtree(d, ignore_errors=True)
    writer = CeilingWriter(os.path.join(base, "ceiling-public"), cfg.mapped_file_size_commit_log)
    log = CommitLog(log_cfg)
    log.load()
    log.start()
    store = MessageStore(cfg)
    store.start()
    best = dict.fromkeys(("ceiling", "commitlog", "public", "public_batch"), math.inf)
    wall = dict.fromkeys(best, math.inf)

    def note(key: str, cpu: float, elapsed: float) -> None:
        best[key] = min(best[key], cpu)
        wall[key] = min(wall[key], elapsed)

    try:
        for _ in range(turns):
            elapsed, cpu = writer.write(pre)
            note("ceiling", cpu, elapsed)
            t0, c0 = time.perf_counter(), time.thread_time()
            put_all(log, pre, 1)
            note("commitlog", time.thread_time() - c0, time.perf_counter() - t0)
            for key, batch in (("public", 1), ("public_batch", 32)):
                t0, c0 = time.perf_counter(), time.process_time()
                put_public(store, public, batch)
                if not store.wait_dispatched(30):
                    raise RuntimeError("dispatch did not catch up in 30 s")
                note(key, time.process_time() - c0, time.perf_counter() - t0)
    finally:
        store.shutdown()
        log.shutdown()
        writer.close()
        os.unlink(os.path.join(base, "ceiling-public"))
        for d in (root, log_cfg.store_path_root_dir):
            shutil.rmtree(d, ignore_errors=True)
    out = {k: v / per_turn * 1e6 for k, v in best.items()}
    out.update({f"{k}_wall": v / per_turn * 1e6 for k, v in wall.items()})
    return out


def print_public_table(base: str, cfg: StoreConfig, turns: int, bodies: tuple[int, ...]) -> None:
    print()
    print(
        f"Public path, least CPU per message over {turns} interleaved turns of 10,000 messages "
        "(ceiling and CommitLog: writing thread; public: whole process until dispatched):"
    )
    print()
    print(
        "| case | ceiling µs | CommitLog.put_message µs | public µs | of ceiling (CPU) | of ceiling (wall) |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for body in bodies:
        f = public_turns(base, cfg, body, turns, 10_000)
        cases = (("put_message(Message)", "public"), ("put_messages(32 × Message)", "public_batch"))
        for label, key in cases:
            print(
                f"| {label} {body} B | {f['ceiling']:.2f} | {f['commitlog']:.2f} | {f[key]:.2f} | "
                f"{f['ceiling'] / f[key]:.0%} | {f['ceiling_wall'] / f[key + '_wall']:.0%} |"
            )


@dataclass
class Result:
    name: str
    msgs: int
    seconds: float
    bytes_per_msg: int
    cpu_seconds: float = 0.0  # CPU time of the writing thread (single-writer cases)
    syncs: int = 0  # group-commit rounds (SYNC_FLUSH cases)

    @property
    def rate(self) -> float:
        return self.msgs / self.seconds

    @property
    def mb_s(self) -> float:
        return self.rate * self.bytes_per_msg / 1e6


def run_store(
    name: str,
    msgs: list[BrokerMessage],
    cfg: StoreConfig,
    *,
    batch: int = 1,
    threads: int = 1,
) -> Result:
    """Puts through the CommitLog write path alone (this benchmark's subject); the full store also
    dispatches to ConsumeQueues and the index, measured by bench/store_read.py."""
    shutil.rmtree(cfg.store_path_root_dir, ignore_errors=True)
    log = CommitLog(cfg)
    log.load()
    log.start()
    try:

        def work(chunk: list[BrokerMessage]) -> None:
            put_all(log, chunk, batch)

        chunks = [msgs[i::threads] for i in range(threads)]
        rounds0 = log.group_commit.rounds if log.group_commit is not None else 0
        t0 = time.perf_counter()
        c0 = time.thread_time()
        if threads == 1:
            work(chunks[0])
        else:
            ts = [threading.Thread(target=work, args=(c,)) for c in chunks]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
        elapsed = time.perf_counter() - t0
        cpu = time.thread_time() - c0
        size = log.max_offset // max(1, len(msgs))
        syncs = log.group_commit.rounds - rounds0 if log.group_commit is not None else 0
    finally:
        log.shutdown()
        shutil.rmtree(cfg.store_path_root_dir, ignore_errors=True)
    return Result(name, len(msgs), elapsed, size, cpu if threads == 1 else 0.0, syncs)


def rss_anon_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    return -1


def memory_run(base: str, gib: int) -> tuple[int, int, float]:
    """Write ``gib`` GiB of 1 KiB messages (pool off); returns (start, peak RssAnon kB, seconds)."""
    cfg = StoreConfig(store_path_root_dir=os.path.join(base, "mem"), mapped_file_size_commit_log=256 * MiB)
    msgs = make_messages(1024, 1024)
    start = rss_anon_kb()
    peak = start
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.wait(0.05):
            peak = max(peak, rss_anon_kb())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    with MessageStore(cfg) as store:
        target = gib << 30
        put_batch = store.put_messages
        while store.get_max_phy_offset() < target:
            for i in range(0, len(msgs), 32):
                put_batch(msgs[i : i + 32])
    elapsed = time.perf_counter() - t0
    stop.set()
    sampler.join()
    peak = max(peak, rss_anon_kb())
    shutil.rmtree(cfg.store_path_root_dir, ignore_errors=True)
    return start, peak, elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer messages per case")
    ap.add_argument(
        "--memory", type=int, default=0, metavar="GIB", help="also write GIB GiB and report RssAnon"
    )
    ap.add_argument("--dir", default=None, help="directory for the test stores (default: a temp dir)")
    ap.add_argument(
        "--turns",
        type=int,
        default=15,
        help="interleaved turns of 10,000 messages for the single-writer CPU table (0: skip it)",
    )
    ap.add_argument(
        "--public",
        action="store_true",
        help="only the public-path table (MessageStore.put_message(Message) with dispatch running)",
    )
    args = ap.parse_args()
    base = args.dir or tempfile.mkdtemp(prefix="rocketq-bench-")
    n_async = 60_000 if args.quick else 200_000
    n_sync = 4_000 if args.quick else 12_000
    seg = 256 * MiB

    def cfg(**kw: object) -> StoreConfig:
        root = os.path.join(base, "s")
        return StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=seg, **kw)  # type: ignore[arg-type]

    pool: dict[str, object] = {"transient_store_pool_enable": True, "transient_store_pool_size": 3}
    if args.public:
        print(f"# rocketq store write benchmark ({os.cpu_count()} CPUs, Python {sys.version.split()[0]})")
        print_public_table(base, cfg(), args.turns or 15, (128,))
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
        return 0
    rows: list[tuple[str, Result, float | None, float | None]] = []
    print(f"# rocketq store write benchmark ({os.cpu_count()} CPUs, Python {sys.version.split()[0]})")
    for body in (128, 1024):
        msgs = make_messages(n_async, body)
        ceiling_path = os.path.join(base, "ceiling")
        cases: list[tuple[str, dict[str, object], int]] = [
            (f"async put {body} B", {}, 1),
            (f"async batch32 {body} B", {}, 32),
            (f"async put {body} B, write-buffer pool", pool, 1),
            (f"async batch32 {body} B, write-buffer pool", pool, 32),
        ]
        case_rows = []
        all_ceilings: list[tuple[float, float]] = []
        for name, extra, batch in cases:
            # Best of two, each store run next to a ceiling run (ceiling, store, ceiling, store):
            # the load of the machine drifts, and a case is compared with the ceiling of the
            # same minutes.
            ceilings = []
            stores = []
            for _ in range(2):
                ceilings.append(ceiling(msgs, ceiling_path, seg))
                stores.append(run_store(name, msgs, cfg(**extra), batch=batch))
            all_ceilings += ceilings
            ceil = max(c[0] for c in ceilings)
            ceil_cpu = max(c[1] for c in ceilings)
            r = max(stores, key=lambda x: x.rate)
            cpu_rate = max(x.msgs / x.cpu_seconds for x in stores)
            case_rows.append((name, r, r.rate / ceil, cpu_rate / ceil_cpu))
        os.unlink(ceiling_path)
        best = max(c[0] for c in all_ceilings)
        rows.append((f"raw ceiling {body} B", Result("ceiling", len(msgs), len(msgs) / best, 0), None, None))
        rows += case_rows
    sync_msgs = make_messages(n_sync, 128)
    # Best of two as well, interleaved (1, 8, 1, 8) so that both see the same disk and load.
    singles: list[Result] = []
    eights: list[Result] = []
    for _ in range(2):
        singles.append(run_store("", sync_msgs, cfg(flush_disk_type="SYNC_FLUSH")))
        eights.append(run_store("", sync_msgs, cfg(flush_disk_type="SYNC_FLUSH"), threads=8))
    single = max(singles, key=lambda x: x.rate)
    eight = max(eights, key=lambda x: x.rate)
    rows.append(("sync put 128 B, 1 writer", single, None, None))
    rows.append(("sync put 128 B, 8 writers", eight, None, None))

    print()
    print("| case | msgs/s | MB/s | of ceiling (wall) | of ceiling (CPU time) |")
    print("|---|---:|---:|---:|---:|")
    for name, r, frac, cpu_frac in rows:
        mb = f"{r.mb_s:.1f}" if r.bytes_per_msg else ""
        wall = "" if frac is None else f"{frac:.0%}"
        cpu = "" if cpu_frac is None else f"{cpu_frac:.0%}"
        print(f"| {name} | {r.rate:,.0f} | {mb} | {wall} | {cpu} |")
    print()
    print(
        f"group commit: 8 writers / 1 writer (sync flush) = {eight.rate / single.rate:.1f}x; "
        f"messages per sync: {single.msgs / max(1, single.syncs):.1f} (1 writer), "
        f"{eight.msgs / max(1, eight.syncs):.1f} (8 writers)"
    )
    if args.turns:
        print()
        print(
            f"Single writer, least thread CPU per message over {args.turns} interleaved turns of "
            "10,000 messages (ceiling, store, ceiling, store, ...; one open file each):"
        )
        print()
        print("| case | ceiling µs | store µs | of ceiling |")
        print("|---|---:|---:|---:|")
        for body in (128, 1024):
            for label, extra, batch in (
                ("put", {}, 1),
                ("batch32", {}, 32),
                ("put, write-buffer pool", pool, 1),
                ("batch32, write-buffer pool", pool, 32),
            ):
                ceil_us, store_us = cpu_turns(base, cfg(**extra), body, batch, args.turns, 10_000)
                print(
                    f"| async {label} {body} B | {ceil_us:.2f} | {store_us:.2f} | {ceil_us / store_us:.0%} |"
                )
        print_public_table(base, cfg(), args.turns, (128, 1024))
    if args.memory:
        start, peak, secs = memory_run(base, args.memory)
        print(
            f"memory: wrote {args.memory} GiB in {secs:.1f} s (pool off); "
            f"RssAnon {start / 1024:.1f} MB at start, peak {peak / 1024:.1f} MB"
        )
    if not args.dir:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
