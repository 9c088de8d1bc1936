"""The compiled codecs (``rocketq._speedups``) against the pure-Python ones, on public paths.

    python bench/codecs.py            # 3 rounds of every case (about two minutes)
    python bench/codecs.py --rounds 5 --cases decode,lookup

Every measurement runs in a child process of its own, once with ``ROCKETQ_PURE=1`` and once
without, the two interleaved round by round (the order alternates), and is the CPU time of
that process per message (``time.process_time``: all its threads, user + system), which a busy
shared machine disturbs much less than wall-clock time. Cases:

* ``decode``: the consumer's decoding of pull answers, ``rocketq.client.pull_decode.
  decode_pull_body`` over bodies of 32 stored records (128 B and 1 KiB bodies, the properties a
  Java producer sends: UNIQ_KEY, WAIT, TAGS, KEYS);
* ``lookup``: ``MessageStore.look_message_by_offset`` of every message of a store of 20,000
  (VIEW_MESSAGE_BY_ID, queries by key and time, the console's message views read this way);
* ``put``: ``MessageStore.put_message(Message)`` of 20,000 messages of 128 B with the same
  properties, dispatch included (no compiled function is on this path: the check that it
  stays as it was);
* ``consume``: the client SDK end to end: ``rocketq bench consume`` (push consumer, 4 consume
  threads, batches of 32) reading 20,000 messages of 128 B that ``rocketq bench produce`` stored
  in a ``rocketq serve`` child before the rounds; the consumer's CPU from its start to the last
  message, after a first read of 200 messages in another group has loaded every module (the
  server runs the compiled codecs throughout).

The ratio column is pure / compiled CPU per message (medians of the rounds).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the other bench scripts

from rocketq.message import encode_properties

CASES = ("decode", "lookup", "put", "consume")
PROPS = {
    "UNIQ_KEY": "7F0000010A2B18B4AAC2123456780001",
    "WAIT": "true",
    "TAGS": "TagA",
    "KEYS": "order-12345",
}


def child_decode(size: int) -> dict[str, float]:
    from rocketq.client.pull_decode import decode_pull_body  # noqa: PLC0415
    from rocketq.protocol import record as rec  # noqa: PLC0415

    props = encode_properties(PROPS).encode()
    body = b"".join(
        rec.encode_record(
            topic="BenchTopic", body=bytes(size), properties=props, queue_offset=i, physical_offset=i * 400,
            born_timestamp=1_700_000_000_000, store_timestamp=1_700_000_000_001,
        )
        for i in range(32)
    )  # fmt: skip
    rounds = 3000
    decode_pull_body(body)
    t0 = time.process_time()
    for _ in range(rounds):
        decode_pull_body(body)
    return {"cpu_us_per_msg": (time.process_time() - t0) / (rounds * 32) * 1e6}


def child_lookup(root: str) -> dict[str, float]:
    from rocketq.config import StoreConfig  # noqa: PLC0415
    from rocketq.store import MessageStore  # noqa: PLC0415

    with open(os.path.join(root, "offsets.json")) as f:
        offsets: list[list[int]] = json.load(f)
    cfg = StoreConfig(store_path_root_dir=os.path.join(root, "store"))
    with MessageStore(cfg) as store:
        for off, size in offsets[:100]:
            store.look_message_by_offset(off, size)
        t0 = time.process_time()
        found = 0
        for off, size in offsets:
            found += store.look_message_by_offset(off, size) is not None
        cpu = time.process_time() - t0
    assert found == len(offsets), found
    return {"cpu_us_per_msg": cpu / len(offsets) * 1e6}


def child_put(root: str, count: int) -> dict[str, float]:
    from rocketq.config import StoreConfig  # noqa: PLC0415
    from rocketq.message import Message  # noqa: PLC0415
    from rocketq.store import MessageStore  # noqa: PLC0415

    msgs = [
        Message("BenchTopic", bytes(128), tags="TagA", keys=[f"order-{i}"], properties=dict(PROPS))
        for i in range(count)
    ]
    cfg = StoreConfig(store_path_root_dir=tempfile.mkdtemp(prefix="put-", dir=root))
    with MessageStore(cfg) as store:
        store.put_message(Message("BenchTopic", bytes(128), tags="TagA"))
        t0 = time.process_time()
        for i, msg in enumerate(msgs):
            store.put_message(msg, queue_id=i % 4)
        store.wait_dispatched()
        cpu = time.process_time() - t0
    shutil.rmtree(cfg.store_path_root_dir, ignore_errors=True)
    return {"cpu_us_per_msg": cpu / count * 1e6}


def make_store(root: str, count: int) -> None:
    from rocketq.config import StoreConfig  # noqa: PLC0415
    from rocketq.message import Message  # noqa: PLC0415
    from rocketq.store import MessageStore  # noqa: PLC0415

    cfg = StoreConfig(store_path_root_dir=os.path.join(root, "store"))
    offsets = []
    with MessageStore(cfg) as store:
        for i in range(count):
            msg = Message("BenchTopic", bytes(128), tags="TagA", keys=[f"order-{i}"], properties=dict(PROPS))
            r = store.put_message(msg, queue_id=i % 4)
            offsets.append([r.physical_offset, r.size])
    with open(os.path.join(root, "offsets.json"), "w") as f:
        json.dump(offsets, f)


def child_consume(namesrv: str, group: str, count: int) -> dict[str, float]:
    from rocketq.client.bench import BenchConfig, run_consume  # noqa: PLC0415

    cfg = BenchConfig(
        namesrv_addr=namesrv, topic="CodecBench", group=group, count=count, concurrency=4,
        create_topic=False, duration_s=120,
    )  # fmt: skip
    # a first small read in another group loads every module the consumer needs: not measured
    asyncio.run(run_consume(dataclasses.replace(cfg, group=group + "-warm-up", count=200), None))
    t0 = time.process_time()
    summary = asyncio.run(run_consume(cfg, None))
    cpu = time.process_time() - t0
    assert summary.messages >= count, summary
    return {"cpu_us_per_msg": cpu / summary.messages * 1e6}


def run_child(case: str, pure: bool, *args: str) -> float:
    env = {k: v for k, v in os.environ.items() if k != "ROCKETQ_PURE"}
    if pure:
        env["ROCKETQ_PURE"] = "1"
    done = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child", case, *args],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    if done.returncode:
        raise SystemExit(f"child {case} failed:\n{done.stdout}\n{done.stderr}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    expected = "pure" if pure else "compiled"
    if out["active"] != expected:
        raise SystemExit(f"child {case} ran {out['active']} codecs, expected {expected}")
    return float(out["cpu_us_per_msg"])


def main() -> int:
    if len(sys.argv) >= 3 and sys.argv[1] == "--child":
        from rocketq import speedups  # noqa: PLC0415

        case, rest = sys.argv[2], sys.argv[3:]
        if case == "decode":
            result = child_decode(int(rest[0]))
        elif case == "lookup":
            result = child_lookup(rest[0])
        elif case == "put":
            result = child_put(rest[0], int(rest[1]))
        else:
            result = child_consume(rest[0], rest[1], int(rest[2]))
        print(json.dumps({**result, "active": speedups.ACTIVE}))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    ap.add_argument("--count", type=int, default=20_000, help="messages of the lookup, put and consume cases")
    args = ap.parse_args()
    cases = [c for c in args.cases.split(",") if c]
    unknown = set(cases) - set(CASES)
    if unknown:
        ap.error(f"unknown cases {sorted(unknown)}")
    from rocketq import speedups  # noqa: PLC0415

    if speedups.COMPILED is None:
        raise SystemExit(f"the compiled codecs are not in use here: {speedups.REASON}")
    root = tempfile.mkdtemp(prefix="rocketq-bench-codecs-")
    proc = None
    try:
        runs: dict[str, tuple[str, list[str]]] = {}
        if "decode" in cases:
            runs["decode_pull_body, 128 B bodies"] = ("decode", ["128"])
            runs["decode_pull_body, 1 KiB bodies"] = ("decode", ["1024"])
        if "lookup" in cases:
            make_store(root, args.count)
            runs["MessageStore.look_message_by_offset"] = ("lookup", [root])
        if "put" in cases:
            runs["MessageStore.put_message(Message), dispatch included"] = ("put", [root, str(args.count)])
        if "consume" in cases:
            from client import start_serve  # bench/client.py  # noqa: PLC0415
            from rocketq.client.bench import BenchConfig, run_produce  # noqa: PLC0415

            proc, namesrv = start_serve(os.path.join(root, "serve"))
            produce = BenchConfig(
                namesrv_addr=namesrv, topic="CodecBench", count=args.count, mode="batch", concurrency=4
            )
            asyncio.run(run_produce(produce, None))
            runs["push consumer (rocketq bench consume)"] = ("consume", [namesrv, "", str(args.count)])
        results: dict[str, dict[bool, list[float]]] = {name: {False: [], True: []} for name in runs}
        for r in range(args.rounds):
            for name, (case, extra) in runs.items():
                for pure in (r % 2 == 0, r % 2 != 0):
                    argv = extra
                    if case == "consume":  # a new consumer group each time: it reads everything
                        argv = [extra[0], f"codec-bench-{r}-{'pure' if pure else 'c'}", extra[2]]
                    results[name][pure].append(run_child(case, pure, *argv))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
        print(f"\n{args.rounds} rounds, interleaved; CPU µs per message, median (all rounds)\n")
        print("| case | compiled | pure Python | pure / compiled |")
        print("|---|---:|---:|---:|")
        for name, by in results.items():
            c, p = statistics.median(by[False]), statistics.median(by[True])
            rounds_c = " ".join(f"{v:.2f}" for v in by[False])
            rounds_p = " ".join(f"{v:.2f}" for v in by[True])
            print(f"| {name} | {c:.2f} ({rounds_c}) | {p:.2f} ({rounds_p}) | {p / c:.2f}× |")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
