"""One member of a DLedger group as a process, for tests and for trying replication by hand.

    python -m rocketq.ha.node --self n0 --peers 'n0-127.0.0.1:40911;n1-127.0.0.1:40912;...' \\
        --data-dir /tmp/g [--election-timeout-ms 300 --heartbeat-ms 50 --ack-policy fsync ...]
        [--event-log /tmp/g/events-{selfId}.jsonl]   # Raft events, rocketq.ha.event_log
        [--flush-file-interval-ms 500]               # fsync cadence under page-cache acks

The member listens on its own ``--peers`` address for the Raft codes and for a few control
request codes (remoting, private range; only what tests need):

======================  ====================================================================
code                    request / response
======================  ====================================================================
``CTL_APPEND`` 6120     body = payload; the record stored is ``be64(physical offset) +
                        payload``. Response ext: ``status``, ``index``, ``pos``, ``leader``
``CTL_STATUS`` 6121     ext: ``role``, ``term``, ``leader``, ``committedPos``, ``lastIndex``,
                        ``commitIndex``
``CTL_DIGEST`` 6122     ext ``upto`` (a position): ext ``sha256`` of the data bytes from the
                        first entry up to ``upto`` (``committedPos`` when absent) and ``upto``
``CTL_TRANSFER`` 6123   ext ``target``: ext ``ok`` (``true`` once ``target`` leads)
``CTL_READ`` 6124       ext ``pos``, ``size``: body = those data bytes
======================  ====================================================================

On start it prints ``READY <address>`` on stdout; SIGTERM / SIGINT stop it cleanly.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import logging
import signal
import struct
import sys
from typing import Final

from rocketq.ha.driver import RaftGroupLog
from rocketq.ha.driver_config import FLUSH_FILE_INTERVAL_MS, DLedgerConfig, parse_peers
from rocketq.ha.raft_types import AckPolicy
from rocketq.remoting.command import RemotingCommand
from rocketq.remoting.connection import Connection

CTL_APPEND: Final = 6120
CTL_STATUS: Final = 6121
CTL_DIGEST: Final = 6122
CTL_TRANSFER: Final = 6123
CTL_READ: Final = 6124
_OFFSET = struct.Struct(">q")


def record_for(payload: bytes, physical_offset: int) -> bytes:
    """What CTL_APPEND stores for ``payload`` at ``physical_offset``."""
    return _OFFSET.pack(physical_offset) + payload


class ControlServer:
    """Answers the control codes for one :class:`RaftGroupLog`."""

    def __init__(self) -> None:
        self.group: RaftGroupLog | None = None

    async def handle(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        group = self.group
        if group is None:
            return RemotingCommand.create_response(request, 1, "not started")
        if request.code == CTL_APPEND:
            payload = request.body
            result = await group.append(lambda off: record_for(payload, off))
            ext = {"status": result.status.value, "index": result.index, "pos": result.pos}
            if result.leader_id is not None:
                ext["leader"] = result.leader_id
            return RemotingCommand.create_response(request, 0, ext_fields=ext)
        if request.code == CTL_STATUS:
            st = group.state
            node = group.node
            ext2: dict[str, object] = {
                "role": st.role.value,
                "term": st.term,
                "committedPos": group.committed_pos,
                "lastIndex": node.log.last_index,
                "commitIndex": node.commit_index,
            }
            if st.leader_id is not None:
                ext2["leader"] = st.leader_id
            return RemotingCommand.create_response(request, 0, ext_fields=ext2)
        if request.code == CTL_DIGEST:
            upto = int(request.ext_fields.get("upto", group.committed_pos))
            return RemotingCommand.create_response(
                request, 0, ext_fields={"sha256": digest(group, upto), "upto": upto}
            )
        if request.code == CTL_READ:
            pos, size = int(request.ext_fields["pos"]), int(request.ext_fields["size"])
            return RemotingCommand.create_response(request, 0, body=group.read(pos, size))
        if request.code == CTL_TRANSFER:
            ok = await group.transfer_leadership(request.ext_fields["target"])
            return RemotingCommand.create_response(request, 0, ext_fields={"ok": ok})
        return RemotingCommand.create_response(request, 3, f"request code {request.code} not supported")


def digest(group: RaftGroupLog, upto: int) -> str:
    """sha256 of the data bytes from the store's first entry up to position ``upto``."""
    start = group.store.start_offset
    h = hashlib.sha256()
    pos = start
    while pos < upto:
        n = min(upto - pos, 1 << 20)
        h.update(group.read(pos, n))
        pos += n
    return h.hexdigest()


def parse_args(argv: list[str] | None = None) -> DLedgerConfig:
    p = argparse.ArgumentParser(prog="python -m rocketq.ha.node", description=__doc__.split("\n")[0])
    p.add_argument("--self", dest="self_id", required=True)
    p.add_argument("--peers", required=True, help="dLegerPeers: n0-host:port;n1-host:port;...")
    p.add_argument("--data-dir", required=True)
    p.add_argument("--group", default="default")
    p.add_argument("--election-timeout-ms", type=int, default=6000)
    p.add_argument("--heartbeat-ms", type=int, default=2000)
    p.add_argument("--ack-timeout-ms", type=int, default=2500)
    p.add_argument("--ack-policy", choices=[a.value for a in AckPolicy], default=AckPolicy.APPENDED.value)
    p.add_argument("--preferred-leader", default=None)
    p.add_argument("--batch-push", action="store_true")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--data-file-size", type=int, default=1 << 30)
    p.add_argument("--index-file-size", type=int, default=32 * 5 * 1024 * 1024)
    p.add_argument("--event-log", default=None, help="JSONL file of Raft events ({selfId}: the self id)")
    p.add_argument(
        "--flush-file-interval-ms",
        type=int,
        default=FLUSH_FILE_INTERVAL_MS,
        help="flushFileInterval: under page_cache acks, ms between the fsyncs of what was written",
    )
    a = p.parse_args(argv)
    return DLedgerConfig(
        self_id=a.self_id,
        peers=parse_peers(a.peers),
        data_dir=a.data_dir,
        group=a.group,
        election_timeout_ms=a.election_timeout_ms,
        heartbeat_interval_ms=a.heartbeat_ms,
        ack_timeout_ms=a.ack_timeout_ms,
        ack_policy=AckPolicy(a.ack_policy),
        preferred_leader_id=a.preferred_leader,
        enable_batch_push=a.batch_push,
        seed=a.seed,
        data_file_size=a.data_file_size,
        index_file_size=a.index_file_size,
        event_log_path=a.event_log,
        flush_file_interval_ms=a.flush_file_interval_ms,
    )


async def run(config: DLedgerConfig) -> None:
    control = ControlServer()
    group = RaftGroupLog(config, other_requests=control.handle)
    await group.start()
    control.group = group
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"READY {config.self_address}", flush=True)
    try:
        await stop.wait()
    finally:
        await group.stop()


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    asyncio.run(run(parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
