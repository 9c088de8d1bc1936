"""ChaosGroup: a name server and a DLedger group of brokers as real processes, with faults.

One idea: a DLedger group as processes and every fault injected into it; the processes, the
proxies of its peer links and its disks share one node table, and each operation returns once
its fault is in effect.

Theory of operation::

    rocketq namesrv --port P                          (a process; never faulted)
    rocketq broker -c <root>/broker-nI.conf           (one process per member, I = 0 .. size-1)

    member i ──► P[i→j] (FaultProxy, 127.0.0.1:x) ──► member j's real dLegerPeers address

The confs are the ones ``rocketq serve --dledger N`` writes (:func:`rocketq.cli.dledger_serve.
broker_confs`, same keys, same ``<root>/broker-nI.conf`` and ``<root>/<brokerName>-nI`` store
roots); then ``dLegerPeers`` of member i is rewritten so that its own entry keeps its real
address (the peer transport listens there) and every other member j is named by the proxy
P[i→j]. Nothing else reads ``dLegerPeers`` for addresses: clients and slaves find brokers by
``dLegerBrokerAddresses`` (the brokers' remoting ports, not proxied) and the name server, and
the broker id of a slave is its self id's position in the list, which stays the same.

The Raft transport sends every message one way on the sender's own outbound connections
(``rocketq.ha.peer_transport``: requests are oneway, nothing is answered on them), so P[i→j]'s
client → upstream direction carries everything i says to j, and its other direction carries
nothing. A fault on the directed pair (src, dst) is therefore set on P[src→dst] upstream and, for
any traffic the other way round a connection, P[dst→src] downstream:

======================  ======================================================================
``block(src, dst)``     src's messages do not reach dst: those directions discard their bytes
                        (:meth:`FaultProxy.block`); dst → src still flows
``partition(*sides)``   ``block`` both ways between every two nodes of different sides; nodes
                        named in no side form one more side
``isolate(node)``       ``partition([node])``: the node against the rest
``heal()``              every block lifted (links that lost bytes are reset, as a long
                        partition leaves TCP connections; the transport reconnects), delays and
                        loss back to 0. Processes and disks are left as they are
``slow(src, dst, ms)``  P[src→dst] holds each chunk ``ms`` ms (order kept)
``lossy(src, dst, p)``  P[src→dst] resets its link on a chunk with probability ``p``
                        (:attr:`FaultProxy.loss_rate`: TCP loses connections, not bytes)
``kill(node, sig)``     the signal (SIGKILL by default); returns once the process exited
``restart(node)``       start the broker again on its conf and store (killing it first if it
                        runs); returns once it answers requests
``pause`` / ``resume``  SIGSTOP / SIGCONT; ``pause`` returns once the process is stopped
``lose_unsynced(node)`` a power loss: SIGKILL, then what was not known to be fsynced is lost
                        (below)
``disk_full(node)``     fill the node's tmpfs (``tmpfs_nodes`` at construction);
                        ``disk_full(node, False)`` gives the space back
``recover()``           all of it undone: healed, disks freed, paused nodes continued, dead
                        ones restarted; returns the leader once all follow it
======================  ======================================================================

Every operation is bounded (``OP_TIMEOUT_S``) and returns once the fault is in effect: a
proxy's state is changed on its loop before the call returns, a signalled process has exited
or is stopped.

Queries: ``state(node)`` / ``states()`` ask the brokers themselves (GET_BROKER_RUNTIME_INFO:
role, term, leader, committed position; a paused or dead node gives None); ``leader()`` is the
node that says it leads in the highest term reported; ``master()`` the node the name server
lists as brokerId 0; ``wait_leader()`` waits until the two agree (producers then reach it);
``read_log(node, end)`` reads a node's replicated CommitLog bytes for comparison. Timing:
election timeout 1000 ms (randomized up to 2000), heartbeats every 200 ms, as ``serve`` writes;
small store segments (``STORE_DEFAULTS``); the brokers log at INFO (``-v``; with
``verbose=False`` at WARNING, and at INFO for ``DIAGNOSTIC_LOGGERS``) into
``<root>/broker-nI.log``, appended to across restarts, each start marked by a line of its own.

**What ``lose_unsynced`` models**: :mod:`rocketq.testing.chaos.power_loss`.

Ports are picked free up front (the name server's up to three times if another process takes
it first). Nothing here needs root except ``tmpfs_nodes`` (mount), which raises
:class:`ChaosUnsupported` where mounting is not permitted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import errno
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from types import TracebackType
from typing import TypeVar

from rocketq.cli import LOG_INFO_ENV
from rocketq.cli.dledger_serve import broker_confs
from rocketq.errors import RocketqError
from rocketq.free_ports import free_port
from rocketq.ha import entry_format as fmt
from rocketq.ha.group_config import parse_peers
from rocketq.properties import parse_properties
from rocketq.protocol import fastjson
from rocketq.protocol.route import ClusterInfo
from rocketq.remoting.client import RemotingClient
from rocketq.remoting.codes import RequestCode
from rocketq.remoting.command import create_request
from rocketq.testing.chaos.power_loss import LostTail, cut_unsynced, segments
from rocketq.testing.fault_proxy import FaultProxy

T = TypeVar("T")

HOST = "127.0.0.1"
#: Bound on each operation (a process exiting or stopping, a restarted broker answering).
OP_TIMEOUT_S = 30.0
#: A restarted broker answers once its store is open. Opening it used to re-dispatch the whole
#: replicated part of the log (seen taking over 30 s in a campaign on a loaded machine); it now
#: resumes at the checkpoint (docs/replication.md, "Recovery"), but after a crash the index's
#: last file is still dispatched again, and without a usable checkpoint everything is: a
#: restart keeps a longer bound than the other operations.
RESTART_TIMEOUT_S = 90.0
#: starts of the whole group, when a broker finds one of its ports taken by another process in
#: the moment between choosing it and binding it (``rocketq.free_ports`` makes that rare)
START_ATTEMPTS = 3
#: what a broker's log says when its port was taken
PORT_TAKEN = "is already in use"
#: Loggers a broker writes at INFO also without ``verbose`` (``ROCKETQ_LOG_INFO``): the pull's
#: PULL_OFFSET_MOVED answers (queue bounds, requested and new offset) and the DLedger role
#: changes, so a consumer moved back after a fail-over can be explained from the kept logs.
DIAGNOSTIC_LOGGERS = ("rocketq.broker.pull", "rocketq.broker.dledger_role")
#: How much of a node's log an error about a process that did not exit carries (its stacks).
STUCK_LOG_TAIL_BYTES = 12000
#: Bound on the start of the group (every broker registered, a master elected).
START_TIMEOUT_S = 90.0
#: One request to a broker (its role); a paused broker counts as not answering.
QUERY_TIMEOUT_S = 1.0
#: Small segments, so a small tmpfs holds a store: CommitLog (DLedger data) files,
#: ConsumeQueue files, index files; no retention; disk usage checked every 500 ms (a full disk refuses writes,
#: and accepts them again, that soon). The entry store's index file is 160 MiB, allocated whole
#: (not configurable from broker.conf), and a broker refuses writes above 90 % disk use, hence
#: the default ``tmpfs_size`` of 1 GiB: with 200 MiB a run's own data reached the 90 % within a
#: minute (20 MiB past the index file) and the group refused every send as "disk full" until
#: the end of the run (seeds 120 and 125 of the first campaign, and a CI run).
STORE_DEFAULTS = {
    "mappedFileSizeCommitLog": str(4 << 20),
    "mappedFileSizeConsumeQueue": str(1000 * 20),
    "maxHashSlotNum": "64",
    "maxIndexNum": "256",
    "cleanResourceInterval": "500",
    # Retention deletes nothing in a run: the checker counts every acknowledged message in the
    # final drain from offset 0, and under the disk-full nemesis (a tmpfs filled to ENOSPC) the
    # usual ratios would have the members delete data files whose messages the consumers had
    # taken (a deletion by design, not a loss). A full disk still refuses writes (the warning
    # level, 90 %).
    "diskMaxUsedSpaceRatio": "100",
    "diskSpaceCleanForciblyRatio": "100",
}


class ChaosError(RocketqError):
    """A chaos operation could not be carried out (a process did not exit, start, stop...)."""


class ChaosUnsupported(ChaosError):
    """This machine cannot inject the fault (mounting a tmpfs needs root, for one)."""


@dataclasses.dataclass(frozen=True, slots=True)
class NodeState:
    """A broker's own view, from its runtime info."""

    role: str  # LEADER, FOLLOWER, CANDIDATE
    term: int
    leader_id: str  # "" when it knows none
    committed_pos: int


class _Node:
    def __init__(self, index: int, sid: str, conf: str, props: dict[str, str], root: str) -> None:
        self.index = index
        self.sid = sid
        self.conf = conf
        self.props = props
        self.broker_addr = f"{props['bindAddress']}:{props['listenPort']}"
        self.peer_addr = parse_peers(props["dLegerPeers"])[sid]
        self.store_root = props["storePathRootDir"]
        self.log_path = os.path.join(root, f"broker-{sid}.log")
        self.proc: subprocess.Popen[bytes] | None = None
        #: how many times the broker was started (each start marked in its log)
        self.starts = 0
        self.paused = False
        self.tmpfs = False
        self.filler: str | None = None


def _wait(check: Callable[[], T | None], what: str, timeout_s: float) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got is not None and got is not False:
            return got
        if time.monotonic() > deadline:
            raise ChaosError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.05)


def _ask(addr: str, code: int, timeout_s: float) -> bytes | None:
    """The body of a successful answer to a request without fields; None: no answer in time, an
    error code, or an empty body."""

    async def call() -> bytes | None:
        client = RemotingClient()
        try:
            response = await client.invoke(addr, create_request(code), timeout_s)
        except (RocketqError, OSError):
            return None
        finally:
            await client.close()
        return response.body if response.code == 0 and response.body else None

    try:
        return asyncio.run(asyncio.wait_for(call(), timeout_s + 1))
    except TimeoutError:
        return None


def _proc_state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "?"


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("NAMESRV_ADDR", None)
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


class ChaosGroup:
    """A name server and a DLedger group of ``size`` brokers on 127.0.0.1, every peer link
    through a :class:`FaultProxy`. Nodes are numbered ``0 .. size-1`` (self ids ``n0`` ...).

    >>> with ChaosGroup("/tmp/chaos") as group:                      # doctest: +SKIP
    ...     old = group.wait_leader()
    ...     group.isolate(old); ...; group.heal()
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        size: int = 3,
        broker_name: str = "broker-a",
        election_timeout_ms: int = 1000,
        heartbeat_interval_ms: int = 200,
        flush: str = "ASYNC_FLUSH",
        preferred_leader: int | None = None,
        tmpfs_nodes: Collection[int] = (),
        tmpfs_size: str = "1g",
        conf: Mapping[str, str] | None = None,
        seed: int | None = None,
        verbose: bool = True,
        node_env: Mapping[int, Mapping[str, str]] | None = None,
    ) -> None:
        if size < 1:
            raise ValueError(f"size={size}: a group has at least one broker")
        if flush not in ("ASYNC_FLUSH", "SYNC_FLUSH"):
            raise ValueError(f"flush={flush!r} is neither ASYNC_FLUSH nor SYNC_FLUSH")
        bad = [
            n
            for n in (*tmpfs_nodes, *([] if preferred_leader is None else [preferred_leader]))
            if not 0 <= n < size
        ]
        if bad:
            raise ValueError(f"nodes {bad} are not in 0 .. {size - 1}")
        self.root = os.path.abspath(os.fspath(root))
        self.size = size
        self.broker_name = broker_name
        self.election_timeout_ms = election_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.flush = flush
        self.preferred_leader = preferred_leader
        self.tmpfs_nodes = frozenset(tmpfs_nodes)
        self.tmpfs_size = tmpfs_size
        self.conf = dict(conf or {})
        self.rng = random.Random(seed)
        self.verbose = verbose
        #: extra environment of a node's broker process (the clock-jump shim, for one)
        self.node_env = {n: dict(env) for n, env in (node_env or {}).items()}
        self.namesrv_addr = ""
        self._nodes: list[_Node] = []
        self._namesrv: subprocess.Popen[bytes] | None = None
        self._proxies: dict[tuple[int, int], FaultProxy] = {}
        self._blocked: set[tuple[int, int]] = set()
        self._mounts: list[str] = []

    # -- life cycle -----------------------------------------------------------------------------
    def start(self, timeout_s: float = START_TIMEOUT_S) -> ChaosGroup:
        """Start the name server, the proxies and the brokers; return once every broker is
        registered and one is master (``preferred_leader`` given: that one)."""
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                os.makedirs(self.root, exist_ok=True)
                self._start_namesrv()
                self._write_confs()
                for node in self._nodes:
                    self._spawn(node)
                self._wait_started(timeout_s)
                return self
            except ChaosError as exc:
                self.stop()
                if attempt == START_ATTEMPTS or PORT_TAKEN not in str(exc):
                    raise
                self._forget_first_start()
            except BaseException:
                self.stop()
                raise
        raise AssertionError("unreachable")

    def _forget_first_start(self) -> None:
        """After a start that lost a port to another process: drop the nodes, their stores and
        the proxies, so the next attempt draws new ports into fresh confs."""
        for node in self._nodes:
            shutil.rmtree(node.store_root, ignore_errors=True)
        self._nodes.clear()
        self._proxies.clear()
        self._blocked.clear()
        self._namesrv = None

    def stop(self) -> None:
        """Stop every process (SIGCONT, SIGTERM, SIGKILL after 15 s), the proxies, unmount the
        tmpfs. Safe to call more than once."""
        for node in self._nodes:
            if node.proc is not None and node.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(node.proc.pid, signal.SIGCONT)
                node.proc.terminate()
        procs = [n.proc for n in self._nodes] + [self._namesrv]
        if self._namesrv is not None and self._namesrv.poll() is None:
            self._namesrv.terminate()
        for proc in procs:
            if proc is None:
                continue
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        for proxy in self._proxies.values():
            proxy.stop()
        for path in reversed(self._mounts):
            subprocess.run(["umount", "-l", path], check=False, capture_output=True)
        self._mounts.clear()

    def __enter__(self) -> ChaosGroup:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- what there is ----------------------------------------------------------------------------
    @property
    def node_ids(self) -> list[int]:
        return list(range(self.size))

    def self_id(self, node: int) -> str:
        return self._node(node).sid

    def node_of(self, addr_or_self_id: str) -> int:
        """The node with this broker address or self id."""
        for n in self._nodes:
            if addr_or_self_id in (n.broker_addr, n.sid):
                return n.index
        raise KeyError(f"no node {addr_or_self_id!r} in the group")

    def broker_addr(self, node: int) -> str:
        return self._node(node).broker_addr

    def conf_path(self, node: int) -> str:
        return self._node(node).conf

    def data_dir(self, node: int) -> str:
        """The broker's store root (``storePathRootDir``)."""
        return self._node(node).store_root

    def store_dir(self, node: int) -> str:
        """The node's DLedger entry store (``<store root>/dledger-nI``: data, index, checkpoint)."""
        n = self._node(node)
        return os.path.join(n.store_root, f"dledger-{n.sid}")

    def log_path(self, node: int) -> str:
        return self._node(node).log_path

    def pid(self, node: int) -> int | None:
        proc = self._node(node).proc
        return None if proc is None or proc.poll() is not None else proc.pid

    def alive(self, node: int) -> bool:
        return self.pid(node) is not None

    def proxy(self, src: int, dst: int) -> FaultProxy:
        """P[src→dst]: what ``src`` sends to ``dst`` passes it."""
        pair = (self._node(src).index, self._node(dst).index)
        if pair[0] == pair[1]:
            raise ValueError(f"no proxy from node {src} to itself")
        return self._proxies[pair]

    def logs(self, tail_chars: int = 6000) -> str:
        """The end of every log, for a failing test to print."""
        out = []
        for path in [os.path.join(self.root, "namesrv.log")] + [n.log_path for n in self._nodes]:
            with contextlib.suppress(OSError), open(path, encoding="utf-8", errors="replace") as f:
                out.append(f"--- {path} ---\n{f.read()[-tail_chars:]}")
        return "\n".join(out)

    # -- who leads --------------------------------------------------------------------------------
    def state(self, node: int, timeout_s: float = QUERY_TIMEOUT_S) -> NodeState | None:
        """The node's role and term as it reports them (None: dead, paused or not answering)."""
        n = self._node(node)
        if n.paused or not self.alive(node):
            return None
        body = _ask(n.broker_addr, RequestCode.GET_BROKER_RUNTIME_INFO, timeout_s)
        try:
            table = None if body is None else fastjson.loads(body.decode("utf-8")).get("table")
        except ValueError:
            return None
        if not isinstance(table, dict) or "dledgerRole" not in table:
            return None
        return NodeState(
            str(table["dledgerRole"]),
            int(table.get("dledgerTerm", 0)),
            str(table.get("dledgerLeaderId", "")),
            int(table.get("dledgerCommittedPos", -1)),
        )

    def states(self) -> dict[int, NodeState]:
        """Every answering node's view."""
        out = {}
        for node in self.node_ids:
            st = self.state(node)
            if st is not None:
                out[node] = st
        return out

    def leader(self) -> int | None:
        """The node that says it leads, in the highest term any answering node reports a leader
        in (an isolated old leader may still say so in its older term); None: none."""
        leaders = [(st.term, node) for node, st in self.states().items() if st.role == "LEADER"]
        return max(leaders)[1] if leaders else None

    def master(self) -> int | None:
        """The node the name server lists as master (brokerId 0) of the group, if any."""

        body = _ask(self.namesrv_addr, RequestCode.GET_BROKER_CLUSTER_INFO, QUERY_TIMEOUT_S)
        if body is None:
            return None
        try:
            group = ClusterInfo.decode(body).broker_addr_table.get(self.broker_name)
            addr = None if group is None else group.broker_addrs.get(0)
            return None if addr is None else self.node_of(addr)
        except (ValueError, KeyError):
            return None

    def wait_leader(self, timeout_s: float = OP_TIMEOUT_S, among: Iterable[int] | None = None) -> int:
        """Wait until a node (one of ``among``) leads and the name server lists it as master:
        producers reach it from then on. Returns the node."""
        allowed = set(self.node_ids if among is None else among)

        def ready() -> int | None:
            node = self.leader()
            return node if node is not None and node in allowed and self.master() == node else None

        return _wait(ready, f"a leader among {sorted(allowed)} listed as master", timeout_s)

    # -- processes --------------------------------------------------------------------------------
    def kill(self, node: int, sig: int = signal.SIGKILL) -> int:
        """Send ``sig`` and return the exit status once the process exited (a paused process is
        continued for any signal but SIGKILL, so it can act on it)."""
        n = self._node(node)
        proc = n.proc
        if proc is None or proc.poll() is not None:
            raise ChaosError(f"node {node} is not running")
        os.kill(proc.pid, sig)
        if sig != signal.SIGKILL and n.paused:
            os.kill(proc.pid, signal.SIGCONT)
        try:
            code = proc.wait(OP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            # a broker reports a shutdown that takes long in its log (the stacks of its threads
            # and tasks: rocketq.broker.shutdown_watch); the error carries the log's end
            raise ChaosError(
                f"node {node} did not exit within {OP_TIMEOUT_S:g} s of signal {sig}; see {n.log_path}; "
                f"it ends:\n{_log_tail(n.log_path, STUCK_LOG_TAIL_BYTES)}"
            ) from None
        n.paused = False
        return code

    def restart(self, node: int, timeout_s: float = RESTART_TIMEOUT_S) -> None:
        """Start the node's broker again (SIGKILL first if it runs); return once it answers."""
        n = self._node(node)
        if self.alive(node):
            self.kill(node)
        self._spawn(n)
        _wait(
            lambda: self._check_alive(n) and self.state(node) is not None, f"node {node} to answer", timeout_s
        )

    def pause(self, node: int) -> None:
        """SIGSTOP; returns once the process is stopped."""
        n = self._node(node)
        pid = self.pid(node)
        if pid is None:
            raise ChaosError(f"node {node} is not running")
        os.kill(pid, signal.SIGSTOP)
        n.paused = True
        _wait(lambda: _proc_state(pid) in ("T", "t"), f"node {node} to stop", OP_TIMEOUT_S)

    def resume(self, node: int) -> None:
        """SIGCONT."""
        n = self._node(node)
        pid = self.pid(node)
        if pid is None:
            raise ChaosError(f"node {node} is not running")
        os.kill(pid, signal.SIGCONT)
        n.paused = False
        _wait(lambda: _proc_state(pid) not in ("T", "t"), f"node {node} to continue", OP_TIMEOUT_S)

    # -- network ----------------------------------------------------------------------------------
    def block(self, src: int, dst: int) -> None:
        """One-way: what ``src`` sends does not reach ``dst`` (``dst`` → ``src`` flows)."""
        pair = (self._node(src).index, self._node(dst).index)
        if pair[0] == pair[1]:
            raise ValueError(f"block({src}, {dst}): a node always reaches itself")
        self._blocked.add(pair)
        self._apply_blocks()

    def partition(self, *sides: Iterable[int]) -> None:
        """Cut the group into ``sides`` (nodes in no side form one more); both ways between sides.
        Blocks set earlier stay."""
        groups = [{self._node(n).index for n in side} for side in sides]
        rest = set(self.node_ids) - set().union(*groups)
        if rest:
            groups.append(rest)
        if sum(len(g) for g in groups) != len(set().union(*groups)):
            raise ValueError(f"partition{tuple(sorted(g) for g in groups)}: a node is on two sides")
        side_of = {n: k for k, g in enumerate(groups) for n in g}
        for a in self.node_ids:
            for b in self.node_ids:
                if a != b and side_of[a] != side_of[b]:
                    self._blocked.add((a, b))
        self._apply_blocks()

    def isolate(self, node: int) -> None:
        """The node against the rest, both ways."""
        self.partition([node])

    def heal(self) -> None:
        """Lift every block, delay and loss (links that lost bytes are reset and reconnect)."""
        self._blocked.clear()
        self._apply_blocks()
        for proxy in self._proxies.values():
            proxy.delay_ms = 0
            proxy.loss_rate = 0

    def blocked(self) -> set[tuple[int, int]]:
        """The directed pairs (src, dst) blocked now."""
        return set(self._blocked)

    def slow(self, src: int, dst: int, delay_ms: float) -> None:
        """Hold what ``src`` sends to ``dst`` ``delay_ms`` ms (0: no delay)."""
        self.proxy(src, dst).delay_ms = delay_ms

    def lossy(self, src: int, dst: int, p: float) -> None:
        """Reset the link ``src`` → ``dst`` on a chunk with probability ``p`` (0: lossless)."""
        self.proxy(src, dst).loss_rate = p

    def recover(self, timeout_s: float = RESTART_TIMEOUT_S) -> int:
        """Undo every fault: heal the network, give disks their space back, continue paused
        brokers, restart dead ones; return the leader once every member follows it in one term
        and the name server lists it as master."""
        self.heal()
        for n in self._nodes:
            if n.filler is not None:
                self.disk_full(n.index, False)
            if not self.alive(n.index):
                self.restart(n.index, timeout_s)
            elif n.paused:
                self.resume(n.index)

        def agreed() -> bool:
            states = self.states()
            return len(states) == self.size and len({(st.term, st.leader_id) for st in states.values()}) == 1

        try:
            _wait(agreed, "every member following one leader in one term", timeout_s)
        except ChaosError as exc:
            raise ChaosError(f"{exc}; the members say: {self.describe()}") from None
        return self.wait_leader(timeout_s)

    def describe(self) -> str:
        """Each member's view in one line (what a timeout quotes): role, term, leader and committed
        position, or why it does not answer."""
        parts = []
        for node in self.node_ids:
            n = self._node(node)
            if not self.alive(node):
                parts.append(f"n{node} dead")
            elif n.paused:
                parts.append(f"n{node} paused")
            else:
                st = self.state(node)
                if st is None:
                    parts.append(f"n{node} not answering")
                else:
                    leader = st.leader_id or "-"
                    pos = st.committed_pos
                    parts.append(f"n{node} {st.role} term {st.term} leader {leader} committed {pos}")
        return "; ".join(parts)

    def _apply_blocks(self) -> None:
        for (a, b), proxy in self._proxies.items():
            proxy.block(to_upstream=True, on=(a, b) in self._blocked)
            proxy.block(to_upstream=False, on=(b, a) in self._blocked)

    # -- disks ------------------------------------------------------------------------------------
    def lose_unsynced(self, node: int, seed: int | None = None) -> LostTail:
        """A power loss of the node (see the module comment); the broker stays down."""
        n = self._node(node)
        if self.alive(node):
            self.kill(node)
        rng = self.rng if seed is None else random.Random(seed)
        return cut_unsynced(self.store_dir(node), n.props, rng)

    def read_log(self, node: int, end: int) -> bytes:
        """The node's entry store data (the replicated CommitLog) from its first data file up to
        position ``end``, read from the files (the page cache: a running broker's writes show).
        Members hold the leader's bytes verbatim, so committed prefixes compare equal."""
        n = self._node(node)
        size = int(n.props.get("mappedFileSizeCommitLog", fmt.DEFAULT_DATA_FILE_SIZE))
        out = bytearray()
        files = segments(os.path.join(self.store_dir(node), "data"))
        first = files[0][0] if files else 0
        for start, path in files:
            if start >= end:
                break
            if start != first + len(out):
                raise ChaosError(f"node {node}: data file {path} does not follow the one before")
            with open(path, "rb") as f:
                out += f.read(min(size, end - start))
        return bytes(out)

    def disk_full(self, node: int, full: bool = True) -> None:
        """Fill the node's tmpfs (a filler file up to ENOSPC), or give the space back."""
        n = self._node(node)
        if not n.tmpfs:
            raise ChaosError(f"node {node} has no tmpfs; name it in tmpfs_nodes")
        if not full:
            if n.filler is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(n.filler)
                n.filler = None
            return
        path = os.path.join(n.store_root, "chaos-filler")
        with open(path, "ab", buffering=0) as f:
            while True:
                try:
                    f.write(b"\0" * (64 << 10))
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
        for size in (4096, 512, 1):  # the last partial chunk's room
            with contextlib.suppress(OSError), open(path, "ab", buffering=0) as f:
                while True:
                    f.write(b"\0" * size)
        n.filler = path

    # -- internals --------------------------------------------------------------------------------
    def _node(self, node: int) -> _Node:
        if not isinstance(node, int) or not 0 <= node < len(self._nodes):
            raise ValueError(f"node {node!r} is not one of 0 .. {self.size - 1}")
        return self._nodes[node]

    def _start_namesrv(self) -> None:
        log_path = os.path.join(self.root, "namesrv.log")
        for _attempt in range(3):
            port = free_port(HOST)
            with open(log_path, "ab") as out:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "rocketq.cli", "namesrv", "--port", str(port)],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=_child_env(),
                )
            self._namesrv = proc

            def listening(port: int = port, proc: subprocess.Popen[bytes] = proc) -> bool | None:
                if proc.poll() is not None:
                    return True
                with socket.socket() as s:
                    s.settimeout(0.5)
                    return s.connect_ex((HOST, port)) == 0 or None

            _wait(listening, "the name server to listen", OP_TIMEOUT_S)
            if proc.poll() is None:
                self.namesrv_addr = f"{HOST}:{port}"
                return
        raise ChaosError(f"the name server did not start; see {log_path}")

    def _write_confs(self) -> None:
        base = {
            **STORE_DEFAULTS,
            "dLegerElectionTimeoutMs": str(self.election_timeout_ms),
            "dLegerHeartbeatIntervalMs": str(self.heartbeat_interval_ms),
            **self.conf,
        }
        base_path = os.path.join(self.root, "chaos-base.conf")
        with open(base_path, "w", encoding="utf-8") as f:
            f.write("".join(f"{k}={v}\n" for k, v in base.items()))
        args = argparse.Namespace(
            host=HOST,
            broker_name=self.broker_name,
            broker_port=0,
            data_dir=self.root,
            config=base_path,
            flush=self.flush,
        )
        confs = broker_confs(args, self.namesrv_addr, self.size)
        for index, (sid, path) in enumerate(confs.items()):
            with open(path, encoding="utf-8") as f:
                props = parse_properties(f.read())
            self._nodes.append(_Node(index, sid, path, props, self.root))
        for node in self._nodes:
            if node.index in self.tmpfs_nodes:
                self._mount(node)
        real = {n.sid: n.peer_addr for n in self._nodes}
        for a in self._nodes:
            for b in self._nodes:
                if a is not b:
                    self._proxies[(a.index, b.index)] = FaultProxy(real[b.sid]).start()
        for node in self._nodes:
            peers = ";".join(
                f"{m.sid}-{m.peer_addr if m is node else self._proxies[(node.index, m.index)].listen_addr}"
                for m in self._nodes
            )
            node.props["dLegerPeers"] = peers
            if self.preferred_leader is None:
                node.props.pop("preferredLeaderId", None)
            else:
                node.props["preferredLeaderId"] = self._nodes[self.preferred_leader].sid
            with open(node.conf, "w", encoding="utf-8") as f:
                f.write("".join(f"{k}={v}\n" for k, v in node.props.items()))

    def _mount(self, node: _Node) -> None:
        os.makedirs(node.store_root, exist_ok=True)
        if os.geteuid() != 0 or shutil.which("mount") is None:
            raise ChaosUnsupported("mounting a tmpfs for a full disk needs root and mount(8)")
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.tmpfs_size}", "tmpfs", node.store_root],
            check=False,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise ChaosUnsupported(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
        self._mounts.append(node.store_root)
        node.tmpfs = True

    def _spawn(self, node: _Node) -> None:
        node.starts += 1
        env = {
            **_child_env(),
            LOG_INFO_ENV: ",".join(DIAGNOSTIC_LOGGERS),
            **self.node_env.get(node.index, {}),
        }
        with open(node.log_path, "ab") as out:  # appended to: the logs of earlier starts stay
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
            out.write(f"--- chaos: start {node.starts} of broker {node.sid} at {stamp} UTC ---\n".encode())
            out.flush()
            node.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "rocketq.cli",
                    *(["-v"] if self.verbose else []),
                    "broker",
                    "-c",
                    node.conf,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )
        node.paused = False

    def _check_alive(self, node: _Node) -> bool:
        if node.proc is None or node.proc.poll() is not None:
            code = None if node.proc is None else node.proc.returncode
            raise ChaosError(
                f"node {node.index} ({node.sid}) exited with {code}; see {node.log_path}; it ends:\n"
                + _log_tail(node.log_path)
            )
        return True

    def _wait_started(self, timeout_s: float) -> None:
        want = None if self.preferred_leader is None else self.preferred_leader

        def ready() -> bool:
            for n in self._nodes:
                self._check_alive(n)
            states = self.states()
            if len(states) < self.size or len({(st.term, st.leader_id) for st in states.values()}) != 1:
                return False  # every member follows the same leader in the same term
            master = self.master()
            return master is not None and (want is None or master == want) and self.leader() == master

        _wait(ready, "every broker answering, one leader known to all, registered as master", timeout_s)


def _log_tail(path: str | os.PathLike[str], size: int = 2000) -> str:
    """The last ``size`` bytes of a node's log, for an error that names it (the log may be gone
    by the time someone reads the error: test directories are rotated)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - size))
            return f.read().decode("utf-8", "replace")
    except OSError as exc:
        return f"(unreadable: {exc})"


__all__ = ["DIAGNOSTIC_LOGGERS", "ChaosError", "ChaosGroup", "ChaosUnsupported", "LostTail", "NodeState"]
