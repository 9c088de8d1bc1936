"""``rocketq serve --brokers N``: a name server (this process) and N brokers of one cluster on this
host, each its own ``rocketq broker -c DIR/broker-X.conf`` process with its own store.

A Python broker runs on one core at most (one interpreter, one event loop); a host with more
cores runs several brokers, as RocketMQ deployments do, and clients spread their sends over the
queues of all of them. The brokers are named ``broker-a``, ``broker-b``, ... (``--broker-name``
names the first; later ones take the following letters) in the cluster ``DefaultCluster`` (or the
``-c`` conf's ``brokerClusterName``), each with its store in ``DIR/<brokerName>``. Broker I
listens on ``--broker-port + 10 * I`` (a free port each with ``--broker-port 0``);
``--metrics-port P`` gives broker I ``P + I`` (a free one each with 0).

The confs (``-c broker.conf`` gives the settings these keys leave open) are written into
``--data-dir`` first, so each broker can also be run on its own later with the same command; its
output goes to ``DIR/broker-X.log``. Once every broker is registered with the name server, each
``--topic`` is created on every broker (``--queues`` read and write queues each, as
``rocketq admin updateTopic`` without ``-b`` does), and the banner lists the brokers with their
pids. A topic created later with ``rocketq admin updateTopic -t T`` (no ``-b``) gets queues on
every broker too; one auto-created by a send gets them on the brokers sends reach.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import string
import time

from rocketq.cli.broker_procs import base_conf, broker_conf, namesrv_and_brokers, write_conf
from rocketq.errors import ClusterStartError, ConfigError, ResponseCode
from rocketq.free_ports import free_ports
from rocketq.remoting import RemotingClient
from rocketq.remoting.codes import RequestCode
from rocketq.remoting.command import create_request

READY_TIMEOUT_S = 60.0
#: Broker I listens on ``--broker-port + PORT_STEP * I``.
PORT_STEP = 10


def broker_names(first: str, count: int) -> list[str]:
    """``broker-a``, ``broker-b``, ...: ``first`` and the names whose last letter follows its last
    letter; a first name that does not end in a letter gets ``-1``, ``-2``, ... after it."""
    if count < 1:
        raise ConfigError(f"--brokers {count}: at least one broker")
    stem, last = first[:-1], first[-1:]
    letters = string.ascii_lowercase
    if last in letters and letters.index(last) + count <= len(letters):
        start = letters.index(last)
        return [stem + letters[start + i] for i in range(count)]
    return [first] + [f"{first}-{i}" for i in range(1, count)]


def broker_confs(args: argparse.Namespace, namesrv_addr: str, count: int) -> dict[str, str]:
    """Write ``broker-X.conf`` for every broker into the data directory; brokerName → path."""
    host = args.host
    names = broker_names(args.broker_name, count)
    if args.broker_port:
        ports = [args.broker_port + PORT_STEP * i for i in range(count)]
    else:
        ports = free_ports(host, count)
    os.makedirs(args.data_dir, exist_ok=True)
    base = base_conf(args)
    out: dict[str, str] = {}
    for i, (name, port) in enumerate(zip(names, ports, strict=True)):
        lines = broker_conf(base, args, name=name, namesrv_addr=namesrv_addr, port=port, store_dir=name)
        if args.metrics_port is not None:
            lines["metricsExporterType"] = "PROM"
            lines["metricsPromExporterPort"] = str(args.metrics_port + i if args.metrics_port else 0)
        path = os.path.join(args.data_dir, f"{name}.conf")
        write_conf(path, lines)
        out[name] = path
    return out


async def create_topic_everywhere(addrs: list[str], topic: str, queues: int) -> None:
    """UPDATE_AND_CREATE_TOPIC of ``topic`` with ``queues`` read and write queues on every broker."""
    fields: dict[str, object] = {
        "topic": topic,
        "defaultTopic": "TBW102",
        "readQueueNums": queues,
        "writeQueueNums": queues,
        "perm": 6,
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": 0,
        "order": False,
    }
    client = RemotingClient()
    try:
        for addr in addrs:
            response = await client.invoke(
                addr, create_request(RequestCode.UPDATE_AND_CREATE_TOPIC, fields), 10
            )
            if response.code != ResponseCode.SUCCESS:
                raise ClusterStartError(
                    f"creating topic {topic!r} on {addr} failed: code {response.code}, {response.remark}"
                )
    finally:
        await client.close()


async def serve_brokers(args: argparse.Namespace, stop: asyncio.Event) -> None:
    count = args.brokers
    if args.dledger is not None:
        raise ConfigError("--brokers and --dledger do not go together: choose one")
    if args.queues < 1:
        raise ConfigError(f"--queues {args.queues}: a topic has at least one queue")
    names = broker_names(args.broker_name, count)
    began = time.monotonic()
    async with namesrv_and_brokers(
        args,
        lambda namesrv_addr: broker_confs(args, namesrv_addr, count),
        lambda name: os.path.join(args.data_dir, f"{name}.log"),
    ) as (namesrv, namesrv_addr, confs, procs):
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            table = namesrv.routes.cluster_info().broker_addr_table
            addrs = {n: table[n].broker_addrs.get(0) for n in names if n in table}
            if all(addrs.get(n) for n in names):
                break
            dead = [name for name, p in zip(names, procs, strict=True) if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                why = (
                    f"{', '.join(dead)} exited"
                    if dead
                    else f"not all registered within {READY_TIMEOUT_S:.0f} s"
                )
                raise ClusterStartError(
                    f"brokers of rocketq serve --brokers {count}: {why}; see {args.data_dir}/*.log"
                )
            await asyncio.sleep(0.1)
        ordered = [str(addrs[n]) for n in names]
        for topic in args.topic or ():
            await create_topic_everywhere(ordered, topic, args.queues)
        lines = [f"rocketq ready in {time.monotonic() - began:.2f} s", f"  name server  {namesrv_addr}"]
        for name, addr, proc in zip(names, ordered, procs, strict=True):
            data = os.path.abspath(os.path.join(args.data_dir, name))
            lines.append(f"  broker       {addr}  ({name}, pid {proc.pid}, data in {data})")
        if args.topic:
            lines.append(f"  topics       {', '.join(args.topic)} ({args.queues} queues on each broker)")
        lines.append(f"  confs        {', '.join(confs.values())}")
        print("\n".join(lines), flush=True)
        await stop.wait()
