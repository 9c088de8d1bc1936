"""``rocketq serve --dledger N``: a name server (this process) and a DLedger group of N brokers,
each its own ``rocketq broker -c DIR/broker-nI.conf`` process.

The confs (``-c broker.conf`` gives the settings the group's keys leave open) are written into
``--data-dir`` first, so each broker can also be run on its own later
with the same command. Broker ``nI`` listens on ``--broker-port + 10 * I`` (a free port each with
``--broker-port 0``) and its peers replicate on ``40911 + I`` (free ports with 0). A group of one
runs on :class:`~rocketq.ha.local_log.SingleNodeLog`, a larger one on the Raft driver
(``rocketq.ha.driver.open_group_log``); its confs also carry ``dLegerBrokerAddresses`` and a
1000 / 200 ms election timeout / heartbeat (``dLegerElectionTimeoutMs``,
``dLegerHeartbeatIntervalMs``). The banner lists each broker with its brokerId, self id and pid
once all are registered and n0 (``preferredLeaderId``) is the master.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from rocketq.cli.broker_procs import base_conf, broker_conf, namesrv_and_brokers, write_conf
from rocketq.errors import ClusterStartError, ConfigError
from rocketq.free_ports import free_ports
from rocketq.properties import parse_properties

DLEDGER_BASE_PORT = 40911
READY_TIMEOUT_S = 60.0
#: Raft timing of the groups ``serve`` writes (DLedger's defaults, 6000 / 2000 ms, make a
#: fail-over take 6 to 12 s); a ``-c`` conf's ``dLegerElectionTimeoutMs`` etc. win
SERVE_ELECTION_TIMEOUT_MS = 1000
SERVE_HEARTBEAT_MS = 200


def broker_confs(args: argparse.Namespace, namesrv_addr: str, count: int) -> dict[str, str]:
    """Write ``broker-nI.conf`` for every peer into the data directory; self id → path."""
    host, group = args.host, args.broker_name
    ids = [f"n{i}" for i in range(count)]
    if args.broker_port:
        ports = [args.broker_port + 10 * i for i in range(count)]
        peer_ports = [DLEDGER_BASE_PORT + i for i in range(count)]
    else:
        free = free_ports(host, 2 * count)
        ports, peer_ports = free[:count], free[count:]
    peers = ";".join(f"{sid}-{host}:{port}" for sid, port in zip(ids, peer_ports, strict=True))
    brokers = ";".join(f"{sid}-{host}:{port}" for sid, port in zip(ids, ports, strict=True))
    os.makedirs(args.data_dir, exist_ok=True)
    base = base_conf(args)
    out: dict[str, str] = {}
    for sid, port in zip(ids, ports, strict=True):
        path = os.path.join(args.data_dir, f"broker-{sid}.conf")
        lines = broker_conf(
            base, args, name=group, namesrv_addr=namesrv_addr, port=port, store_dir=f"{group}-{sid}"
        )
        lines |= {
            "enableDLegerCommitLog": "true",
            "dLegerGroup": group,
            "dLegerPeers": peers,
            "dLegerSelfId": sid,
            "preferredLeaderId": "n0",
        }
        if count > 1:
            # each member's broker address (a follower names the leader's to clients and copies
            # its metadata from it), and Raft timing short enough to try fail-over by hand
            lines["dLegerBrokerAddresses"] = brokers
            lines.setdefault("dLegerElectionTimeoutMs", str(SERVE_ELECTION_TIMEOUT_MS))
            lines.setdefault("dLegerHeartbeatIntervalMs", str(SERVE_HEARTBEAT_MS))
        write_conf(path, lines)
        out[sid] = path
    return out


async def serve_dledger(args: argparse.Namespace, stop: asyncio.Event) -> None:
    count = args.dledger
    if count < 1:
        raise ConfigError(f"--dledger {count}: a group has at least one broker")
    began = time.monotonic()
    async with namesrv_and_brokers(
        args,
        lambda namesrv_addr: broker_confs(args, namesrv_addr, count),
        lambda name: os.path.join(args.data_dir, f"broker-{name}.log"),
    ) as (namesrv, namesrv_addr, confs, procs):
        by_port: dict[str, tuple[str, int]] = {}  # listen port -> (self id, pid)
        for (sid, conf), proc in zip(confs.items(), procs, strict=True):
            with open(conf, encoding="utf-8") as f:
                by_port[parse_properties(f.read()).get("listenPort", "")] = (sid, proc.pid)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            info = namesrv.routes.cluster_info()
            group = info.broker_addr_table.get(args.broker_name)
            # all registered, n0 (preferredLeaderId) as master: each registers as a slave first,
            # and whoever wins the first election hands leadership to n0 once it is caught up
            master = None if group is None else group.broker_addrs.get(0)
            master_id = None if master is None else by_port.get(master.rpartition(":")[2], ("?", 0))[0]
            if group is not None and len(group.broker_addrs) >= count and master_id == "n0":
                break
            dead = [p.args for p in procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                why = "exited" if dead else f"did not register within {READY_TIMEOUT_S:.0f} s"
                raise ClusterStartError(
                    f"a broker of the DLedger group {why}; see {args.data_dir}/broker-n*.log"
                )
            await asyncio.sleep(0.1)
        lines = [f"rocketq ready in {time.monotonic() - began:.2f} s", f"  name server  {namesrv_addr}"]
        for broker_id, addr in sorted(group.broker_addrs.items()):
            sid, pid = by_port.get(addr.rpartition(":")[2], ("?", 0))
            lines.append(
                f"  broker       {addr}  ({args.broker_name}, brokerId {broker_id}, {sid}, pid {pid})"
            )
        lines.append(f"  confs        {', '.join(confs.values())}")
        print("\n".join(lines), flush=True)
        await stop.wait()
