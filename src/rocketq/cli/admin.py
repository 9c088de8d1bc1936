"""``rocketq admin``: mqadmin's commands over the client SDK's :class:`~rocketq.client.admin.Admin`.

:func:`add_parser` adds one subcommand per mqadmin command, each with the common ``-n``
(name servers), ``--json`` and ``--timeout-ms`` options; the parsed command runs in
:func:`_admin`, which opens an ``Admin`` (imported there, so that building the parser loads no
client module), calls the command's function and prints a RocketqError as one line (exit 1).
Each command prints a table, or with ``--json`` the same facts as a JSON document.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from rocketq.errors import RocketqError

if TYPE_CHECKING:  # the client SDK is imported by the commands that use it, not by the servers
    from rocketq.client.admin import Admin, MessageView


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
    dledger = any(e.dledger_role for e in entries)  # the role columns only when some broker has one
    docs = [dataclasses.asdict(e) for e in entries]
    if not dledger:
        for d in docs:
            del d["dledger_role"], d["dledger_term"]
    head = ["#Cluster Name", "#Broker Name", "#BID", "#Addr"]
    rows: list[tuple[object, ...]] = [(e.cluster, e.broker_name, e.broker_id, e.addr) for e in entries]
    if dledger:
        head += ["#DLedger Role", "#Term"]
        rows = [
            (*r, e.dledger_role or "-", e.dledger_term or "-") for r, e in zip(rows, entries, strict=True)
        ]
    _out(args, docs, lambda: print(_table(head, rows)))


def _admin_dledger_transfer(admin: Admin, args: argparse.Namespace) -> None:
    remark = admin.dledger_leadership_transfer(args.broker, args.target)
    _out(args, {"broker": args.broker, "target": args.target, "result": remark}, lambda: print(remark))


def _admin_broker_status(admin: Admin, args: argparse.Namespace) -> None:
    """mqadmin's ``brokerStatus``: every runtime figure of a broker (``-b``), or of every broker."""
    addrs = [args.broker_addr] if args.broker_addr else [e.addr for e in admin.cluster_list()]
    tables = {addr: admin.broker_runtime_info(addr) for addr in addrs}

    def text() -> None:
        for addr, table in tables.items():
            if len(tables) > 1:
                print(f"# {addr}")
            width = max((len(k) for k in table), default=0)
            for key in sorted(table):
                print(f"{key:<{width}} : {table[key]}")

    _out(args, tables if len(tables) > 1 else next(iter(tables.values()), {}), text)


def _admin_delete_expired_commitlog(admin: Admin, args: argparse.Namespace) -> None:
    """mqadmin's ``deleteExpiredCommitLog``: one retention run now (``-b`` one broker, else every
    broker of ``-c`` or of the only cluster)."""
    remarks = admin.delete_expired_commitlog(broker_addr=args.broker_addr, cluster=args.cluster)

    def text() -> None:
        for addr, remark in remarks.items():
            print(f"{addr}: {remark}")

    _out(args, remarks, text)


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


def _admin_query_msg_trace_by_id(admin: Admin, args: argparse.Namespace) -> None:
    events = admin.query_msg_trace_by_id(args.msg_id, args.trace_topic, args.max_num)
    from rocketq.client.trace import print_trace  # noqa: PLC0415 - see _admin

    _out(args, [dataclasses.asdict(e) for e in events], lambda: print_trace(events))


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
    from rocketq.client.config import ClientConfig  # noqa: PLC0415

    command: AdminCommand = args.admin_func
    try:
        # ACL keys: the flags, else $ROCKETQ_ACCESS_KEY/$ROCKETQ_SECRET_KEY (ClientConfig's default)
        keys = {"access_key": args.access_key, "secret_key": args.secret_key}
        tls = {"tls": True, "tls_ca_path": args.tls_ca} if args.tls or args.tls_ca else {}
        config = ClientConfig(**keys, **tls) if args.access_key or args.secret_key or tls else None
        with Admin(args.namesrv_addr, config=config, timeout_ms=args.timeout_ms) as admin:
            command(admin, args)
    except RocketqError as exc:
        print(f"rocketq admin {args.admin_command}: error: {exc}", file=sys.stderr)
        return 1
    return 0


def add_parser(sub: Any) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-n",
        "--namesrv-addr",
        default=os.environ.get("NAMESRV_ADDR") or DEFAULT_NAMESRV_ADDR,
        help="name servers, host:port;host:port (default $NAMESRV_ADDR or 127.0.0.1:9876)",
    )
    common.add_argument("--json", action="store_true", help="print JSON instead of tables")
    common.add_argument("--access-key", help="ACL access key (default $ROCKETQ_ACCESS_KEY)")
    common.add_argument("--secret-key", help="ACL secret key (default $ROCKETQ_SECRET_KEY)")
    common.add_argument("--tls", action="store_true", help="connect with TLS (tls.enable)")
    common.add_argument("--tls-ca", default=None, help="PEM CA file that signed the servers' certificates")
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
    p = cmd("brokerStatus", _admin_broker_status, "show a broker's runtime figures (all brokers without -b)")
    p.add_argument("-b", "--broker-addr", help="broker address host:port")
    p = cmd(
        "deleteExpiredCommitLog",
        _admin_delete_expired_commitlog,
        "run retention now, as at a deleteWhen hour (one broker with -b, else every broker of the cluster)",
    )
    p.add_argument("-b", "--broker-addr", help="broker address host:port")
    p.add_argument("-c", "--cluster", help="cluster name")
    p = cmd(
        "dledgerLeadershipTransfer",
        _admin_dledger_transfer,
        "hand the leadership of a DLedger group to another peer",
    )
    p.add_argument("-b", "--broker", required=True, help="broker name (the DLedger group)")
    p.add_argument("-t", "--target", required=True, help="dLegerSelfId of the new leader, e.g. n1")
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
    p = cmd("queryMsgTraceById", _admin_query_msg_trace_by_id, "show a message's trace, oldest event first")
    p.add_argument("-i", "--msg-id", required=True, help="message id (UNIQ_KEY)")
    p.add_argument(
        "-t", "--trace-topic", default="RMQ_SYS_TRACE_TOPIC", help="trace topic (default %(default)s)"
    )
    p.add_argument(
        "-c", "--max-num", type=int, default=64, help="at most this many trace messages (default %(default)s)"
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
