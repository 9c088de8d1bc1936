"""The broker processes of ``rocketq serve --dledger N`` and ``rocketq serve --brokers N``.

:func:`namesrv_and_brokers` starts an in-process name server on ``--namesrv-port``, writes the
broker confs (the caller's writer, given the name server's address) and starts one process per
broker, ``python -m rocketq.cli broker -c <conf>``, its output appended to the log file the
caller names; on exit it ends them together (:func:`stop_brokers`: SIGTERM to every one still
running, then up to 30 s each to exit, SIGKILL for one that does not) and closes the name server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import NamedTuple

from rocketq.namesrv.server import NameServer, NamesrvConfig
from rocketq.properties import parse_properties


def base_conf(args: argparse.Namespace) -> dict[str, str]:
    """The settings of ``-c broker.conf`` (empty without one); the written keys win over them."""
    if not args.config:
        return {}
    with open(args.config, encoding="utf-8") as f:
        return parse_properties(f.read())


def broker_conf(
    base: Mapping[str, str],
    args: argparse.Namespace,
    *,
    name: str,
    namesrv_addr: str,
    port: int,
    store_dir: str,
) -> dict[str, str]:
    """The keys every served broker's conf has (the caller adds its own after them)."""
    return {
        **base,
        "brokerClusterName": base.get("brokerClusterName", "DefaultCluster"),
        "brokerName": name,
        "brokerId": "0",
        "namesrvAddr": namesrv_addr,
        "brokerIP1": args.host,
        "bindAddress": args.host,
        "listenPort": str(port),
        "fastListenPortEnable": "false",
        "storePathRootDir": os.path.abspath(os.path.join(args.data_dir, store_dir)),
        "flushDiskType": args.flush,
    }


def write_conf(path: str, lines: Mapping[str, str]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(f"{k}={v}\n" for k, v in lines.items()))


#: How long a broker may take to exit after SIGTERM before it is killed.
STOP_TIMEOUT_S = 30.0


def spawn_brokers(confs: Mapping[str, str], log_paths: Mapping[str, str]) -> list[subprocess.Popen[bytes]]:
    """Start one broker per ``name → conf``, output to ``log_paths[name]``; in ``confs`` order."""
    procs = []
    for name, conf in confs.items():
        with open(log_paths[name], "ab") as log_file:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "rocketq.cli", "broker", "-c", conf],
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                )
            )
    return procs


async def stop_brokers(procs: Iterable[subprocess.Popen[bytes]]) -> None:
    procs = list(procs)
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            await asyncio.to_thread(p.wait, STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            p.kill()


class Started(NamedTuple):
    namesrv: NameServer
    namesrv_addr: str
    #: broker name (or DLedger self id) → its conf file, in start order
    confs: Mapping[str, str]
    procs: list[subprocess.Popen[bytes]]


@contextlib.asynccontextmanager
async def namesrv_and_brokers(
    args: argparse.Namespace,
    write_confs: Callable[[str], Mapping[str, str]],
    log_path: Callable[[str], str],
) -> AsyncIterator[Started]:
    """The name server and the broker processes (module docstring); ``write_confs(namesrv_addr)``
    returns ``name → conf path``, ``log_path(name)`` where that broker's output goes."""
    namesrv = NameServer(NamesrvConfig(listen_port=args.namesrv_port, bind_address=args.host))
    await namesrv.start()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        namesrv_addr = f"{args.host}:{namesrv.port}"
        confs = write_confs(namesrv_addr)
        procs += spawn_brokers(confs, {name: log_path(name) for name in confs})
        yield Started(namesrv, namesrv_addr, confs, procs)
    finally:
        await stop_brokers(procs)
        await namesrv.close()
