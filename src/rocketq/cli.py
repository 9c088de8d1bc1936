"""The ``rocketq`` command line."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import os
import shutil
import signal
import sys
import time
from collections.abc import Sequence

from rocketq.broker import Broker, BrokerConfig, load_broker_conf, run_broker
from rocketq.config import StoreConfig
from rocketq.message import Message
from rocketq.namesrv.server import NameServer, NamesrvConfig, run_namesrv
from rocketq.properties import parse_properties
from rocketq.store import MessageStore


def _demo(args: argparse.Namespace) -> int:
    root = args.data_dir
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    cfg = StoreConfig(
        store_path_root_dir=root,
        flush_disk_type=args.flush,
        mapped_file_size_commit_log=args.segment_mib << 20,
    )
    n = args.count
    print(f"rocketq demo: embedded store in {root!r}, {args.flush}, {args.segment_mib} MiB segments")
    offsets: list[tuple[int, int]] = []
    t0 = time.perf_counter()
    with MessageStore(cfg) as store:
        for i in range(n):
            msg = Message(
                "DemoTopic", f"message {i}".encode(), tags="TagA" if i % 2 else "TagB", keys=[f"k{i}"]
            )
            r = store.put_message(msg, queue_id=i % 4)
            offsets.append((r.physical_offset, r.size))
        first_id = store.put_message(Message("DemoTopic", b"last", keys=["last"])).msg_id
        written = store.get_max_phy_offset()
    t1 = time.perf_counter()
    print(
        f"  wrote {n + 1} messages ({written} bytes of CommitLog) in {(t1 - t0) * 1000:.0f} ms, "
        "then shut down"
    )
    with MessageStore(cfg) as store:
        ok = 0
        for i, (off, size) in enumerate(offsets):
            m = store.look_message_by_offset(off, size)
            if m is not None and m.body == f"message {i}".encode() and m.queue_id == i % 4:
                ok += 1
        segments = len(store.commitlog.queue.files)
        print(f"  reopened: recovered end offset {store.get_max_phy_offset()}, {segments} segment(s)")
        print(f"  read back {ok}/{n} messages intact by physical offset; last msg id {first_id}")
        per_queue = [store.get_max_offset("DemoTopic", q) for q in range(4)]
        page = store.get_message("demo-group", "DemoTopic", 1, 0, 3)
        first = [m.body for m in page.messages]
        print(f"  ConsumeQueue sizes per queue: {per_queue}; queue 1 starts with {first}")
        hits = store.query_messages_by_key("DemoTopic", f"k{n - 1}")
        print(f"  query by key k{n - 1}: {[m.body for m in hits.messages]}")
    return 0 if ok == n else 1


def _read_properties(path: str | None) -> dict[str, str]:
    """A RocketMQ properties file (``namesrv.conf``), parsed as Java does."""
    if path is None:
        return {}
    with open(path, encoding="utf-8") as f:
        return parse_properties(f.read())


def _namesrv(args: argparse.Namespace) -> int:
    overrides = {"listen_port": args.port} if args.port is not None else {}
    config = NamesrvConfig.from_rocketmq_properties(_read_properties(args.config), **overrides)
    return run_namesrv(config)


def _broker(args: argparse.Namespace) -> int:
    if args.config:
        broker_cfg, store_cfg = load_broker_conf(args.config)
    else:
        broker_cfg, store_cfg = BrokerConfig(), StoreConfig()
    changes: dict[str, object] = {}
    if args.port is not None:
        changes["listen_port"] = args.port
    if args.namesrv_addr is not None:
        changes["namesrv_addr"] = args.namesrv_addr
    if changes:
        broker_cfg = dataclasses.replace(broker_cfg, **changes)  # type: ignore[arg-type]
    run_broker(broker_cfg, store_cfg)
    return 0


async def _serve_async(args: argparse.Namespace) -> None:
    began = time.monotonic()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    namesrv = NameServer(NamesrvConfig(listen_port=args.namesrv_port, bind_address=args.host))
    await namesrv.start()
    namesrv_addr = f"{args.host}:{namesrv.port}"
    broker_cfg = BrokerConfig(
        broker_name=args.broker_name,
        namesrv_addr=namesrv_addr,
        broker_ip1=args.host,
        bind_address=args.host,
        listen_port=args.broker_port,
        fast_listen_port_enable=False,
    )
    store_cfg = StoreConfig(
        store_path_root_dir=os.path.join(args.data_dir, args.broker_name),
        flush_disk_type=args.flush,
    )
    broker = Broker(broker_cfg, store_cfg)
    try:
        await broker.start()
        print(
            f"rocketq ready in {time.monotonic() - began:.2f} s\n"
            f"  name server  {namesrv_addr}\n"
            f"  broker       {broker.broker_addr}  ({args.broker_name}, "
            f"data in {store_cfg.store_path_root_dir}, {store_cfg.flush_disk_type.value})",
            flush=True,
        )
        await stop.wait()
    finally:
        await broker.shutdown()
        await namesrv.close()


def _serve(args: argparse.Namespace) -> int:
    asyncio.run(_serve_async(args))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rocketq", description="RocketMQ-compatible broker and store")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="write, flush, reopen and read back an embedded store")
    demo.add_argument("--data-dir", default="demo-data")
    demo.add_argument("--count", type=int, default=10_000)
    demo.add_argument("--flush", default="SYNC_FLUSH", choices=["SYNC_FLUSH", "ASYNC_FLUSH"])
    demo.add_argument("--segment-mib", type=int, default=1)
    demo.add_argument("--keep", action="store_true", help="keep existing data in the directory")
    demo.set_defaults(func=_demo)
    namesrv = sub.add_parser("namesrv", help="run a name server (port 9876)")
    namesrv.add_argument("-c", "--config", help="namesrv.conf in RocketMQ's key=value format")
    namesrv.add_argument("--port", type=int, default=None, help="listen port (overrides listenPort)")
    namesrv.set_defaults(func=_namesrv)
    broker = sub.add_parser("broker", help="run a broker (port 10911)")
    broker.add_argument("-c", "--config", help="broker.conf in RocketMQ's key=value format")
    broker.add_argument("--port", type=int, default=None, help="listen port (overrides listenPort)")
    broker.add_argument("-n", "--namesrv-addr", default=None, help="name servers, host:port;host:port")
    broker.set_defaults(func=_broker)
    serve = sub.add_parser("serve", help="name server and broker in one process")
    serve.add_argument("--data-dir", default="rocketq-data")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on and to advertise")
    serve.add_argument("--namesrv-port", type=int, default=9876)
    serve.add_argument("--broker-port", type=int, default=10911)
    serve.add_argument("--broker-name", default="broker-a")
    serve.add_argument("--flush", default="ASYNC_FLUSH", choices=["SYNC_FLUSH", "ASYNC_FLUSH"])
    serve.set_defaults(func=_serve)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
