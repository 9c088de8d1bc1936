"""The ``rocketq`` command line."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime
import errno
import json
import logging
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from rocketq.bench_cli import add_parser as add_bench_parser
from rocketq.broker import Broker, BrokerConfig, load_broker_conf, run_broker
from rocketq.config import StoreConfig
from rocketq.errors import ConfigError, RocketqError
from rocketq.message import Message
from rocketq.namesrv.server import NameServer, NamesrvConfig, run_namesrv
from rocketq.properties import parse_properties
from rocketq.proxy.server import DEFAULT_GRPC_PORT, GrpcConfig, GrpcEndpoint
from rocketq.remoting import eventloop
from rocketq.store import MessageStore

if TYPE_CHECKING:  # the client SDK is imported by the commands that use it, not by the servers
    from rocketq.client.admin import Admin, MessageView


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


def _port_taken(exc: OSError, what: str, host: str, port: int, change: str) -> ConfigError | None:
    """The one-line error for a listener whose port another process holds, naming the port and
    the flag (or config key) that changes it; None for any other ``OSError``."""
    if exc.errno != errno.EADDRINUSE:
        return None
    return ConfigError(
        f"cannot listen on {host}:{port} for the {what}: port {port} is already in use "
        f"(another process listens there); choose another with {change}"
    )


def _fail(command: str, exc: RocketqError) -> int:
    print(f"rocketq {command}: error: {exc}", file=sys.stderr, flush=True)
    return 1


def _run_server(
    command: str, what: str, host: str, port: int, change: str, run: Callable[[], int | None]
) -> int:
    """``run()`` a server until it stops; its exit status (0 when it gives none), or 1 after a
    one-line error for a RocketqError or a port in use (``_port_taken``)."""
    try:
        return run() or 0
    except RocketqError as exc:  # before OSError: DiskFull is both (segments larger than the disk)
        return _fail(command, exc)
    except OSError as exc:
        taken = _port_taken(exc, what, host, port, change)
        if taken is None:
            raise
        return _fail(command, taken)


def _metrics_port(args: argparse.Namespace) -> dict[str, object]:
    """``--metrics-port P``: metricsExporterType=PROM on port P (docs/metrics.md)."""
    if args.metrics_port is None:
        return {}
    return {"metrics_exporter_type": "PROM", "metrics_prom_exporter_port": args.metrics_port}


def _namesrv(args: argparse.Namespace) -> int:
    overrides: dict[str, object] = {"listen_port": args.port} if args.port is not None else {}
    overrides.update(_metrics_port(args))
    config = NamesrvConfig.from_rocketmq_properties(_read_properties(args.config), **overrides)
    where = (config.bind_address, config.listen_port, "--port (or listenPort in namesrv.conf)")
    return _run_server("namesrv", "name server", *where, lambda: run_namesrv(config))


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
    changes.update(_metrics_port(args))
    if changes:
        broker_cfg = dataclasses.replace(broker_cfg, **changes)  # type: ignore[arg-type]
    where = (broker_cfg.bind_address, broker_cfg.listen_port, "--port (or listenPort in broker.conf)")
    return _run_server("broker", "broker", *where, lambda: run_broker(broker_cfg, store_cfg))


async def _serve_async(args: argparse.Namespace) -> None:
    began = time.monotonic()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    namesrv = NameServer(NamesrvConfig(listen_port=args.namesrv_port, bind_address=args.host))
    try:
        await namesrv.start()
    except OSError as exc:
        taken = _port_taken(exc, "name server", args.host, args.namesrv_port, "--namesrv-port")
        if taken is None:
            raise
        raise taken from None
    namesrv_addr = f"{args.host}:{namesrv.port}"
    # a broker.conf (-c) gives the defaults; the serve flags below always win
    base_cfg, base_store = load_broker_conf(args.config) if args.config else (BrokerConfig(), StoreConfig())
    broker_cfg = dataclasses.replace(
        base_cfg,
        broker_name=args.broker_name,
        namesrv_addr=namesrv_addr,
        broker_ip1=args.host,
        bind_address=args.host,
        listen_port=args.broker_port,
        fast_listen_port_enable=False,
        **_metrics_port(args),  # type: ignore[arg-type]
    )
    store_cfg = dataclasses.replace(
        base_store,
        store_path_root_dir=os.path.join(args.data_dir, args.broker_name),
        flush_disk_type=args.flush,
    )
    broker = Broker(broker_cfg, store_cfg)
    if broker_cfg.metrics_enabled:  # one /metrics for both: the name server's families join
        namesrv.count_metrics()
        broker.extra_metrics.append(namesrv.metric_families)
    grpc_endpoint = None
    try:
        try:
            await broker.start()
        except OSError as exc:
            taken = _port_taken(exc, "broker", args.host, args.broker_port, "--broker-port")
            if taken is None:
                raise
            raise taken from None
        grpc_line = ""
        if args.grpc_port is None or args.grpc_port >= 0:
            port = DEFAULT_GRPC_PORT if args.grpc_port is None else args.grpc_port
            endpoint = GrpcEndpoint(
                broker, GrpcConfig(args.host, port, None, args.grpc_tls_cert, args.grpc_tls_key)
            )
            try:
                await endpoint.start()
                grpc_endpoint = endpoint
                grpc_line = f"\n  gRPC (v5)    {endpoint.address}"
            except RocketqError as exc:
                if args.grpc_port is not None or args.grpc_tls_cert or args.grpc_tls_key:
                    if not str(exc).startswith("cannot listen for gRPC"):
                        raise  # TLS files and the like: the error says what to change
                    raise ConfigError(f"{exc}; choose another port with --grpc-port (-1: no gRPC)") from None
                # the default port is taken (another broker): serve remoting only
                print(
                    f"gRPC endpoint not started: {exc} (--grpc-port chooses another port)",
                    file=sys.stderr,
                    flush=True,
                )
        print(
            f"rocketq ready in {time.monotonic() - began:.2f} s\n"
            f"  name server  {namesrv_addr}\n"
            f"  broker       {broker.broker_addr}  ({args.broker_name}, "
            f"data in {store_cfg.store_path_root_dir}, {store_cfg.flush_disk_type.value})"
            + grpc_line
            + (f"\n  metrics      {broker.metrics_url}" if broker.metrics_url else ""),
            flush=True,
        )
        await stop.wait()
    finally:
        if grpc_endpoint is not None:
            await grpc_endpoint.stop()
        await broker.shutdown()
        await namesrv.close()


def _serve(args: argparse.Namespace) -> int:
    try:
        eventloop.run(_serve_async(args))
    except RocketqError as exc:
        return _fail("serve", exc)
    return 0


# -- rocketq admin -----------------------------------------------------------------------------
DEFAULT_NAMESRV_ADDR = "127.0.0.1:9876"


def _ts(ms: int) -> str:
    if ms <= 0:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000).isoformat(sep=" ", timespec="milliseconds")


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)


def _print_messages(messages: Sequence[MessageView]) -> None:
    for n, m in enumerate(messages):
        if n:
            print()
        rows: list[tuple[str, object]] = [
            ("Topic", m.topic),
            ("OffsetID", m.msg_id),
            ("UniqKey", m.uniq_key or "-"),
            ("Tags", m.tags or "-"),
            ("Keys", " ".join(m.keys) or "-"),
            ("Queue ID", m.queue_id),
            ("Queue Offset", m.queue_offset),
            ("CommitLog Offset", m.commit_log_offset),
            ("Reconsume Times", m.reconsume_times),
            ("Born Timestamp", _ts(m.born_timestamp)),
            ("Store Timestamp", _ts(m.store_timestamp)),
            ("Born Host", m.born_host),
            ("Store Host", m.store_host),
            ("Properties", json.dumps(m.properties, ensure_ascii=False, sort_keys=True)),
            ("Body", m.body.decode("utf-8", "replace")),
        ]
        if m.undecodable:
            rows.append(("Undecodable", f"{m.undecodable} (body shown as stored)"))
        for name, value in rows:
            print(f"{name + ':':<18}{value}")


def _out(args: argparse.Namespace, doc: object, text: Callable[[], None]) -> None:
    if args.json:
        print(json.dumps(doc, ensure_ascii=False, indent=2, sort_keys=True))
    else:
        text()


def _admin_update_topic(admin: Admin, args: argparse.Namespace) -> None:
    addrs = admin.create_topic(
        args.topic,
        args.read_queue_nums,
        args.write_queue_nums,
        args.perm,
        cluster=args.cluster,
        broker_addr=args.broker_addr,
        attributes=args.attributes,
    )
    doc = {
        "topic": args.topic,
        "brokers": addrs,
        "readQueueNums": args.read_queue_nums,
        "writeQueueNums": args.write_queue_nums,
        "perm": args.perm,
    }
    _out(args, doc, lambda: print("\n".join(f"create topic {args.topic} to {a} success." for a in addrs)))


def _admin_delete_topic(admin: Admin, args: argparse.Namespace) -> None:
    addrs = admin.delete_topic(args.topic, args.cluster)
    _out(
        args,
        {"topic": args.topic, "cluster": args.cluster, "brokers": addrs},
        lambda: print(f"delete topic {args.topic} from cluster {args.cluster} ({', '.join(addrs)}) success."),
    )


_GROUP_SETTINGS = {  # updateSubGroup's flags: (argparse dest, SubscriptionGroupConfig JSON key)
    "consume_enable": "consumeEnable",
    "consume_from_min_enable": "consumeFromMinEnable",
    "consume_broadcast_enable": "consumeBroadcastEnable",
    "consume_message_orderly": "consumeMessageOrderly",
    "retry_queue_nums": "retryQueueNums",
    "retry_max_times": "retryMaxTimes",
    "broker_id": "brokerId",
    "which_broker_when_consume_slowly": "whichBrokerWhenConsumeSlowly",
    "notify_consumer_ids_changed_enable": "notifyConsumerIdsChangedEnable",
}


def _admin_update_sub_group(admin: Admin, args: argparse.Namespace) -> None:
    settings = {dest: getattr(args, dest) for dest in _GROUP_SETTINGS}
    addrs = admin.create_subscription_group(
        args.group, cluster=args.cluster, broker_addr=args.broker_addr, **settings
    )
    doc = {"groupName": args.group, "brokers": addrs} | {_GROUP_SETTINGS[k]: v for k, v in settings.items()}
    _out(
        args,
        doc,
        lambda: print(
            "\n".join(f"create subscription group to {a} success." for a in addrs)
            + "\n"
            + " ".join(f"{key}={doc[key]}" for key in ("groupName", *_GROUP_SETTINGS.values()))
        ),
    )


def _admin_delete_sub_group(admin: Admin, args: argparse.Namespace) -> None:
    addrs = admin.delete_subscription_group(
        args.group, cluster=args.cluster, broker_addr=args.broker_addr, clean_offset=args.remove_offset
    )
    _out(
        args,
        {"groupName": args.group, "brokers": addrs, "removeOffset": args.remove_offset},
        lambda: print("\n".join(f"delete subscription group {args.group} from {a} success." for a in addrs)),
    )


def _admin_topic_list(admin: Admin, args: argparse.Namespace) -> None:
    topics = admin.topic_list()
    _out(args, {"topicList": topics}, lambda: print("\n".join(topics)))


def _admin_topic_route(admin: Admin, args: argparse.Namespace) -> None:
    route = admin.topic_route(args.topic)

    def text() -> None:
        print(
            _table(
                ["#Cluster", "#Broker", "#BrokerId", "#Addr"],
                [
                    (bd.cluster, bd.broker_name, bid, addr)
                    for bd in route.broker_datas
                    for bid, addr in sorted(bd.broker_addrs.items())
                ],
            )
        )
        print()
        print(
            _table(
                ["#Broker", "#ReadQueues", "#WriteQueues", "#Perm"],
                [
                    (qd.broker_name, qd.read_queue_nums, qd.write_queue_nums, qd.perm)
                    for qd in route.queue_datas
                ],
            )
        )

    _out(args, route.to_json_obj(), text)


def _admin_topic_status(admin: Admin, args: argparse.Namespace) -> None:
    queues = admin.topic_status(args.topic)
    doc = [dataclasses.asdict(q) for q in queues]
    _out(
        args,
        doc,
        lambda: print(
            _table(
                ["#Broker Name", "#QID", "#Min Offset", "#Max Offset", "#Last Updated"],
                [
                    (q.broker_name, q.queue_id, q.min_offset, q.max_offset, _ts(q.last_update_timestamp))
                    for q in queues
                ],
            )
        ),
    )


def _admin_cluster_list(admin: Admin, args: argparse.Namespace) -> None:
    entries = admin.cluster_list()
    _out(
        args,
        [dataclasses.asdict(e) for e in entries],
        lambda: print(
            _table(
                ["#Cluster Name", "#Broker Name", "#BID", "#Addr"],
                [(e.cluster, e.broker_name, e.broker_id, e.addr) for e in entries],
            )
        ),
    )


def _admin_consumer_progress(admin: Admin, args: argparse.Namespace) -> None:
    p = admin.consumer_progress(args.group, args.topic)
    doc: dict[str, Any] = {
        "group": p.group,
        "consumeTps": p.consume_tps,
        "queues": [dict(dataclasses.asdict(q), lag=q.lag) for q in p.queues],
        "totalBrokerOffset": p.total_broker_offset,
        "totalConsumerOffset": p.total_consumer_offset,
        "diffTotal": p.total_lag,
    }

    def text() -> None:
        print(
            _table(
                [
                    "#Topic",
                    "#Broker Name",
                    "#QID",
                    "#Broker Offset",
                    "#Consumer Offset",
                    "#Diff",
                    "#LastTime",
                ],
                [
                    (
                        q.topic,
                        q.broker_name,
                        q.queue_id,
                        q.broker_offset,
                        q.consumer_offset,
                        q.lag,
                        _ts(q.last_timestamp),
                    )
                    for q in p.queues
                ],
            )
        )
        print()
        print(f"Consume TPS: {p.consume_tps:.2f}")
        print(f"Consume Diff Total: {p.total_lag}")

    _out(args, doc, text)


def _admin_query_msg_by_id(admin: Admin, args: argparse.Namespace) -> None:
    m = admin.query_msg_by_id(args.msg_id)
    _out(args, m.to_json(), lambda: _print_messages([m]))


def _admin_query_msg_by_key(admin: Admin, args: argparse.Namespace) -> None:
    found = admin.query_msg_by_key(args.topic, args.key, args.max_num)
    _out(
        args,
        [m.to_json() for m in found],
        lambda: print(
            _table(
                ["#Message ID", "#QID", "#Offset", "#Store Time"],
                [(m.msg_id, m.queue_id, m.queue_offset, _ts(m.store_timestamp)) for m in found],
            )
        ),
    )


def _admin_query_msg_by_offset(admin: Admin, args: argparse.Namespace) -> None:
    m = admin.query_msg_by_offset(args.topic, args.broker_name, args.queue_id, args.offset)
    _out(args, m.to_json(), lambda: _print_messages([m]))


def _admin_send_message(admin: Admin, args: argparse.Namespace) -> None:
    r = admin.send_message(args.topic, args.body, args.tags, args.keys)
    doc = {
        "status": r.status.value,
        "msgId": r.msg_id,
        "offsetMsgId": r.offset_msg_id,
        "brokerName": r.message_queue.broker_name,
        "queueId": r.message_queue.queue_id,
        "queueOffset": r.queue_offset,
    }
    _out(
        args,
        doc,
        lambda: print(
            _table(
                ["#Broker Name", "#QID", "#Send Result", "#MsgId", "#OffsetMsgId"],
                [
                    (
                        r.message_queue.broker_name,
                        r.message_queue.queue_id,
                        r.status.value,
                        r.msg_id,
                        r.offset_msg_id,
                    )
                ],
            )
        ),
    )


def _admin_consume_message(admin: Admin, args: argparse.Namespace) -> None:
    from rocketq.client.progress import Progress  # noqa: PLC0415 - loaded with the client by _admin

    with Progress(args.count, "messages read", enabled=not args.json) as progress:
        found = admin.consume_message(
            args.topic,
            args.queue_id,
            args.offset,
            args.count,
            broker_name=args.broker_name,
            progress=progress.update,
        )
    _out(args, [m.to_json() for m in found], lambda: _print_messages(found))


def _admin_get_consumer_status(admin: Admin, args: argparse.Namespace) -> None:
    status = admin.consumer_status(args.group, args.topic, args.client_id)
    rows = [
        (cid, mq.broker_name, mq.queue_id, offset)
        for cid, queues in status.items()
        for mq, offset in queues.items()
    ]
    doc = [{"clientId": c, "brokerName": b, "queueId": q, "offset": o} for c, b, q, o in rows]
    _out(args, doc, lambda: print(_table(["#clientId", "#brokerName", "#queueId", "#offset"], rows)))


def _admin_reset_offset_by_time(admin: Admin, args: argparse.Namespace) -> None:
    from rocketq.client.admin import parse_reset_timestamp  # noqa: PLC0415 - see _admin
    from rocketq.client.progress import Progress  # noqa: PLC0415

    timestamp = parse_reset_timestamp(args.timestamp)
    force = args.force.lower() != "false"
    with Progress(None, "brokers reset", enabled=not args.json) as progress:
        table = admin.reset_offset_by_time(
            args.group, args.topic, timestamp, force=force, progress=progress.update
        )
    doc = {
        "group": args.group,
        "topic": args.topic,
        "timestamp": timestamp,
        "force": force,
        "offsets": [
            {"brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": o} for mq, o in table.items()
        ],
    }
    _out(
        args,
        doc,
        lambda: print(
            _table(
                ["#brokerName", "#queueId", "#offset"],
                [(mq.broker_name, mq.queue_id, o) for mq, o in table.items()],
            )
        ),
    )


AdminCommand = Callable[["Admin", argparse.Namespace], None]


def _bool_arg(text: str) -> bool:
    """mqadmin's boolean flag values: ``true`` or ``false`` (any case)."""
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"{text!r} is not true or false")
    return value == "true"


def _add_bool(p: argparse.ArgumentParser, short: str, long: str, default: bool, help_text: str) -> None:
    """An mqadmin true/false option (``-s false``), its default shown after ``help_text``."""
    p.add_argument(
        short,
        long,
        type=_bool_arg,
        default=default,
        metavar="BOOL",
        help=f"{help_text} (default %(default)s)",
    )


def _add_group_target(p: argparse.ArgumentParser, verb: str) -> None:
    """-g GROUP, and where to change it: -c CLUSTER (its masters) or -b BROKER_ADDR."""
    where = p.add_mutually_exclusive_group()
    only = "(default: the only cluster)"
    where.add_argument("-c", "--cluster", help=f"{verb} every master of this cluster {only}")
    where.add_argument("-b", "--broker-addr", help=f"{verb} this broker (host:port)")
    p.add_argument("-g", "--group", required=True, help="consumer group")


def _admin(args: argparse.Namespace) -> int:
    from rocketq.client.admin import Admin  # noqa: PLC0415 - the client SDK, on demand

    command: AdminCommand = args.admin_func
    try:
        with Admin(args.namesrv_addr, timeout_ms=args.timeout_ms) as admin:
            command(admin, args)
    except RocketqError as exc:
        print(f"rocketq admin {args.admin_command}: error: {exc}", file=sys.stderr)
        return 1
    return 0


def _add_admin_parser(sub: Any) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-n",
        "--namesrv-addr",
        default=os.environ.get("NAMESRV_ADDR") or DEFAULT_NAMESRV_ADDR,
        help="name servers, host:port;host:port (default $NAMESRV_ADDR or 127.0.0.1:9876)",
    )
    common.add_argument("--json", action="store_true", help="print JSON instead of tables")
    common.add_argument(
        "--timeout-ms", type=int, default=5000, help="timeout of each request (default %(default)s)"
    )
    admin = sub.add_parser("admin", help="administer a cluster (mqadmin's commands)")
    cmds = admin.add_subparsers(dest="admin_command", required=True, metavar="COMMAND")

    def cmd(name: str, func: AdminCommand, help_text: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = cmds.add_parser(name, parents=[common], help=help_text)
        p.set_defaults(func=_admin, admin_func=func)
        return p

    p = cmd("updateTopic", _admin_update_topic, "create or update a topic")
    p.add_argument("-t", "--topic", required=True, help="topic")
    where = p.add_mutually_exclusive_group()
    where.add_argument("-c", "--cluster", help="create on every broker of this cluster")
    where.add_argument("-b", "--broker-addr", help="create on this broker (host:port)")
    p.add_argument("-r", "--read-queue-nums", type=int, default=8, help="read queues (default %(default)s)")
    p.add_argument("-w", "--write-queue-nums", type=int, default=8, help="write queues (default %(default)s)")
    p.add_argument(
        "-p", "--perm", type=int, default=6, help="permission: 2 write, 4 read, 6 both (default %(default)s)"
    )
    p.add_argument("-a", "--attributes", help="topic attributes, e.g. +message.type=FIFO")
    p = cmd("deleteTopic", _admin_delete_topic, "delete a topic from a cluster and the name servers")
    p.add_argument("-t", "--topic", required=True, help="topic")
    p.add_argument("-c", "--cluster", required=True, help="cluster to delete it from")
    p = cmd("updateSubGroup", _admin_update_sub_group, "create or update a subscription (consumer) group")
    _add_group_target(p, "create on")
    _add_bool(p, "-s", "--consume-enable", True, "consumeEnable")
    _add_bool(p, "-m", "--consume-from-min-enable", False, "consumeFromMinEnable")
    _add_bool(p, "-d", "--consume-broadcast-enable", False, "consumeBroadcastEnable")
    _add_bool(
        p,
        "-o",
        "--consume-message-orderly",
        False,
        "consumeMessageOrderly; true for a RocketMQ 5 FIFO consumer group",
    )
    p.add_argument(
        "-q", "--retry-queue-nums", type=int, default=1, help="retryQueueNums (default %(default)s)"
    )
    p.add_argument(
        "-r", "--retry-max-times", type=int, default=16, help="retryMaxTimes (default %(default)s)"
    )
    p.add_argument(
        "-i", "--broker-id", type=int, default=0, help="brokerId to consume from (default %(default)s)"
    )
    p.add_argument(
        "-w",
        "--which-broker-when-consume-slowly",
        type=int,
        default=1,
        help="whichBrokerWhenConsumeSlowly (default %(default)s)",
    )
    _add_bool(p, "-a", "--notify-consumer-ids-changed-enable", True, "notifyConsumerIdsChangedEnable")
    p = cmd("deleteSubGroup", _admin_delete_sub_group, "delete a subscription (consumer) group")
    _add_group_target(p, "delete from")
    _add_bool(p, "-r", "--remove-offset", False, "also remove the group's committed offsets")
    cmd("topicList", _admin_topic_list, "list every topic")
    p = cmd("topicRoute", _admin_topic_route, "show a topic's route")
    p.add_argument("-t", "--topic", required=True, help="topic")
    p = cmd("topicStatus", _admin_topic_status, "show a topic's queue offsets")
    p.add_argument("-t", "--topic", required=True, help="topic")
    cmd("clusterList", _admin_cluster_list, "list the clusters and brokers")
    p = cmd("consumerProgress", _admin_consumer_progress, "show a group's offsets and lag")
    p.add_argument("-g", "--group", required=True, help="consumer group")
    p.add_argument("-t", "--topic", help="only this topic (default: every topic of the group)")
    p = cmd("queryMsgById", _admin_query_msg_by_id, "show a message by offset message id")
    p.add_argument("-i", "--msg-id", required=True, help="offset message id (OffsetID)")
    p = cmd("queryMsgByKey", _admin_query_msg_by_key, "find messages by key")
    p.add_argument("-t", "--topic", required=True, help="topic")
    p.add_argument("-k", "--key", required=True, help="message key")
    p.add_argument(
        "-m", "--max-num", type=int, default=32, help="at most this many messages (default %(default)s)"
    )
    p = cmd("queryMsgByOffset", _admin_query_msg_by_offset, "show the message at a queue offset")
    p.add_argument("-t", "--topic", required=True, help="topic")
    p.add_argument("-b", "--broker-name", required=True, help="broker name")
    p.add_argument("-i", "--queue-id", type=int, required=True, help="queue id")
    p.add_argument("-o", "--offset", type=int, required=True, help="queue offset")
    p = cmd("sendMessage", _admin_send_message, "send one message")
    p.add_argument("-t", "--topic", required=True, help="topic")
    p.add_argument("-p", "--body", required=True, help="message body (UTF-8)")
    p.add_argument("--tags", help="message tag")
    p.add_argument("--keys", help="space-separated keys")
    p = cmd("consumeMessage", _admin_consume_message, "read messages of one queue from an offset")
    p.add_argument("-t", "--topic", required=True, help="topic")
    p.add_argument("-b", "--broker-name", help="broker of the queue (default: the first broker of the topic)")
    p.add_argument("-i", "--queue-id", type=int, required=True, help="queue id")
    p.add_argument("-o", "--offset", type=int, default=0, help="first queue offset (default %(default)s)")
    p.add_argument("-c", "--count", type=int, default=32, help="messages to read (default %(default)s)")
    p = cmd("getConsumerStatus", _admin_get_consumer_status, "ask a group's online members for their offsets")
    p.add_argument("-g", "--group", required=True, help="consumer group")
    p.add_argument("-t", "--topic", required=True, help="topic")
    p.add_argument("-i", "--client-id", default=None, help="only this member (client id)")
    p = cmd("resetOffsetByTime", _admin_reset_offset_by_time, "reset a group's offsets on a topic to a time")
    p.add_argument("-g", "--group", required=True, help="consumer group")
    p.add_argument("-t", "--topic", required=True, help="topic")
    p.add_argument("-s", "--timestamp", required=True, help="now | epoch ms | yyyy-MM-dd#HH:mm:ss:SSS")
    p.add_argument(
        "-f", "--force", default="true", help="true: also move forward (default); false: only rewind"
    )


def _add_metrics_port(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus metrics at http://HOST:PORT/metrics (0 = a free port; default: off, "
        "or metricsExporterType=PROM in the .conf)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``rocketq`` argument parser with every subcommand."""
    parser = argparse.ArgumentParser(prog="rocketq", description="RocketMQ-compatible broker and store")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="write, flush, reopen and read back an embedded store")
    demo.add_argument("--data-dir", default="demo-data", help="store directory (default %(default)s)")
    demo.add_argument("--count", type=int, default=10_000, help="messages to write (default %(default)s)")
    demo.add_argument(
        "--flush",
        default="SYNC_FLUSH",
        choices=["SYNC_FLUSH", "ASYNC_FLUSH"],
        help="flushDiskType (default %(default)s)",
    )
    demo.add_argument(
        "--segment-mib", type=int, default=1, help="CommitLog segment size in MiB (default %(default)s)"
    )
    demo.add_argument("--keep", action="store_true", help="keep existing data in the directory")
    demo.set_defaults(func=_demo)
    namesrv = sub.add_parser("namesrv", help="run a name server (port 9876)")
    namesrv.add_argument("-c", "--config", help="namesrv.conf in RocketMQ's key=value format")
    namesrv.add_argument("--port", type=int, default=None, help="listen port (overrides listenPort)")
    _add_metrics_port(namesrv)
    namesrv.set_defaults(func=_namesrv)
    broker = sub.add_parser("broker", help="run a broker (port 10911)")
    broker.add_argument("-c", "--config", help="broker.conf in RocketMQ's key=value format")
    broker.add_argument("--port", type=int, default=None, help="listen port (overrides listenPort)")
    broker.add_argument("-n", "--namesrv-addr", default=None, help="name servers, host:port;host:port")
    _add_metrics_port(broker)
    broker.set_defaults(func=_broker)
    serve = sub.add_parser("serve", help="name server and broker in one process")
    serve.add_argument(
        "--data-dir",
        default="rocketq-data",
        help="data directory; the store is in DIR/<broker name> (default %(default)s)",
    )
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to listen on and to advertise (default %(default)s)"
    )
    serve.add_argument(
        "--namesrv-port",
        type=int,
        default=9876,
        help="name server port, 0 = a free one (default %(default)s)",
    )
    serve.add_argument(
        "--broker-port", type=int, default=10911, help="broker port, 0 = a free one (default %(default)s)"
    )
    serve.add_argument("--broker-name", default="broker-a", help="brokerName (default %(default)s)")
    serve.add_argument(
        "--flush",
        default="ASYNC_FLUSH",
        choices=["SYNC_FLUSH", "ASYNC_FLUSH"],
        help="flushDiskType of the store (default %(default)s)",
    )
    serve.add_argument("-c", "--config", help="broker.conf (key=value) for the broker's other settings")
    serve.add_argument(
        "--grpc-port", type=int, default=None, help="RocketMQ 5 gRPC port (default 8081; 0 free, -1 off)"
    )
    serve.add_argument("--grpc-tls-cert", default=None, help="PEM certificate: serve gRPC over TLS")
    serve.add_argument("--grpc-tls-key", default=None, help="PEM private key of --grpc-tls-cert")
    _add_metrics_port(serve)
    serve.set_defaults(func=_serve)
    _add_admin_parser(sub)
    add_bench_parser(sub)
    from rocketq.spark.jobs.cli import add_parser as add_spark_parser  # noqa: PLC0415 - lazy: no PySpark

    add_spark_parser(sub)
    from rocketq.proxy.cli import add_parser as add_proxy_parser  # noqa: PLC0415

    add_proxy_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
