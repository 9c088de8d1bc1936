"""A DLedger group of three broker processes under network, process and disk faults.

The tests run on a :class:`rocketq.testing.chaos.cluster.ChaosGroup` (a name server and three
``rocketq broker -c`` processes, every peer link through its own FaultProxy; election timeout
1000 ms, heartbeats every 200 ms): one shared by the scenarios that end healed (``recover()``
before each), its own for the disk-full one (stores on tmpfs). A topic is created on every
member; a producer of the real client (SYNC sends, one at a time, a new body per send) runs
while the fault is injected; each scenario checks:

* no acknowledged message is lost: after the faults heal every acknowledged body is read back
  from the group; nothing with the scenario's prefix is stored that was not sent;
* at most one leader per term, in every sample of the members' own views taken meanwhile;
* the group becomes writable again (acknowledgements after the fault);
* every member ends with the same committed bytes (the entry store's data files compared up to
  the committed position all three report).
"""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import threading
import time
from collections import defaultdict
from collections.abc import Collection, Iterator
from typing import Any

import pytest

from _support.dledger_topic import stored_bodies, topic_group
from _support.raft_group import LocalGroup, record
from _support.requests import send_request
from _support.sync_writer import Writer as SyncWriter
from _support.tmpfs import fill, small_tmpfs
from _support.wait import wait_until
from rocketq.client import Message, Producer, SendStatus
from rocketq.errors import DiskFull, ResponseCode, RocketqError
from rocketq.ha.raft_types import Role
from rocketq.remoting import RemotingClient
from rocketq.testing.chaos.cluster import ChaosGroup, NodeState

TOPIC = "ChaosT"
QUEUES = 4
BROKER = "broker-a"
WAIT_S = 30.0
FINAL = b"final"  # the body of the sends that make every member learn the commit index

SLOW = pytest.mark.slow  # broker processes through faults: a few seconds to 30 s each


# -- helpers ----------------------------------------------------------------------------------------
def _call(addr: str, request: Any, timeout_s: float) -> Any:
    async def main() -> Any:
        client = RemotingClient()
        try:
            return await client.invoke(addr, request, timeout_s)
        finally:
            await client.close()

    return asyncio.run(asyncio.wait_for(main(), timeout_s + 2))


@contextlib.contextmanager
def chaos_group(tmp_path: pathlib.Path, **kwargs: Any) -> Iterator[ChaosGroup]:
    """A group with the topic on every member (a slave would copy it from the master within
    3 s anyway; any new master must hold it to route it)."""
    with topic_group(tmp_path / "group", TOPIC, QUEUES, **kwargs) as group:
        yield group


@pytest.fixture(scope="module")
def shared_group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChaosGroup]:
    """One group for the scenarios that leave it healed, with every member running."""
    with chaos_group(tmp_path_factory.mktemp("chaos")) as group:
        yield group


@pytest.fixture
def group(shared_group: ChaosGroup) -> Iterator[ChaosGroup]:
    """The shared group, healthy: links healed, every member running and following one leader
    (a scenario that failed half-way is repaired here, so the next one starts clean)."""
    g = shared_group
    g.recover(WAIT_S)
    try:
        yield g
    except BaseException:
        print(g.logs())
        raise


class Writer(SyncWriter):
    """A producer thread: SYNC sends one at a time, a new body each; what was acknowledged
    (body, when the send began, the acknowledging broker) and what failed (indeterminate)."""

    def __init__(self, namesrv: str, prefix: str, pad: int = 0) -> None:
        super().__init__(
            namesrv,
            prefix,
            TOPIC,
            stamp="began",
            pad=pad,
            send_timeout_ms=3000,
            route_refresh_interval_ms=300,
        )


class Monitor:
    """Samples every member's own view while a scenario runs: leaders by term."""

    def __init__(self, group: ChaosGroup) -> None:
        self.group = group
        self.leaders: dict[int, set[int]] = defaultdict(set)
        self.terms: dict[int, list[int]] = defaultdict(list)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="raft-monitor")

    def __enter__(self) -> Monitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            for node, st in self.group.states().items():
                self.terms[node].append(st.term)
                if st.role == "LEADER":
                    self.leaders[st.term].add(node)

    def assert_one_leader_per_term(self) -> None:
        two = {term: nodes for term, nodes in self.leaders.items() if len(nodes) > 1}
        assert not two, f"two leaders in one term: {two}"


def _stored(namesrv: str) -> list[bytes]:
    return stored_bodies(namesrv, TOPIC, QUEUES, BROKER)


def assert_nothing_acknowledged_lost(
    group: ChaosGroup, *writers: Writer, acked: Collection[bytes] = (), sent: Collection[bytes] = ()
) -> list[bytes]:
    """Every body acknowledged to a writer (or in ``acked``) is stored; of the bodies stored with
    a prefix of these writers (or in ``sent``), none was not sent. Returns those bodies."""
    acked = set(acked).union(*(w.bodies for w in writers))
    sent = acked | set(sent) | set().union(*(w.failed for w in writers))
    prefixes = tuple(f"{w.prefix}-".encode() for w in writers)
    group.wait_leader(WAIT_S)
    stored = wait_until(
        lambda: (s := _stored(group.namesrv_addr)) and acked <= set(s) and s,
        "every acknowledged message readable",
        WAIT_S,
    )
    mine = [b for b in stored if b.startswith(prefixes) or b in sent]
    assert set(mine) <= sent, sorted(set(mine) - sent)[:5]
    return mine


def _converged(group: ChaosGroup) -> int | None:
    states = group.states()
    positions = {st.committed_pos for st in states.values()}
    if len(states) < group.size or len(positions) != 1:
        return None
    return positions.pop()


def assert_same_committed_bytes(group: ChaosGroup) -> int:
    """Every member reports the same committed position (a last send carries the commit index
    to followers that learned it on no heartbeat yet) and holds the same bytes up to it."""
    with Producer("FinalPG", namesrv_addr=group.namesrv_addr) as producer:
        for _ in range(2):
            assert producer.send(Message(TOPIC, FINAL)).status is SendStatus.SEND_OK
    end = wait_until(lambda: _converged(group), "every member at the same committed position", WAIT_S)
    logs = [group.read_log(node, end) for node in group.node_ids]
    assert len(logs[0]) > 0 and all(len(x) == len(logs[0]) for x in logs)
    for node in group.node_ids[1:]:
        assert logs[node] == logs[0], f"node {node}'s committed bytes differ from node 0's"
    return end


def _followers(group: ChaosGroup, leader: int) -> list[int]:
    return [n for n in group.node_ids if n != leader]


def _state(group: ChaosGroup, node: int) -> NodeState:
    return wait_until(lambda: group.state(node), f"node {node} answering", WAIT_S)


# -- scenarios --------------------------------------------------------------------------------------
@SLOW
def test_isolated_leader_acknowledges_nothing_steps_down_and_truncates_its_uncommitted_tail(
    group: ChaosGroup,
) -> None:
    with (
        Monitor(group) as monitor,
        Writer(group.namesrv_addr, "iso") as writer,
    ):
        writer.wait_acked(30, "before the fault")
        old = group.wait_leader()
        old_addr = group.broker_addr(old)
        old_term = _state(group, old).term
        group.isolate(old)
        isolated_at = time.monotonic()

        # sends straight to the old leader append to its log but can never commit there
        direct = [f"iso-direct-{i}".encode() for i in range(3)]
        for body in direct:
            try:
                response = _call(old_addr, send_request(TOPIC, body, queue_id=0), 3)
            except (RocketqError, TimeoutError):
                continue  # no answer: indeterminate, fine
            print(f"the isolated leader answered {body!r}: {response.code} {response.remark}")
            assert response.code != ResponseCode.SUCCESS, f"the isolated leader acknowledged {body!r}"

        new = group.wait_leader(WAIT_S, among=_followers(group, old))
        assert _state(group, new).term > old_term
        writer.wait_acked(30, "from the new leader")
        late = [(b, addr) for b, began, addr in writer.acked if began > isolated_at and addr == old_addr]
        assert not late, f"the isolated leader acknowledged {late[:3]}"

        group.heal()
        rejoined = wait_until(
            lambda: (st := group.state(old)) and st.role == "FOLLOWER" and st.term > old_term and st,
            "the old leader following a newer term",
            WAIT_S,
        )
        assert rejoined.leader_id in (group.self_id(n) for n in _followers(group, old))
        writer.wait_acked(20, "after the heal")
        writer.stop()
        assert_same_committed_bytes(group)  # the old leader's uncommitted entries are gone
        assert_nothing_acknowledged_lost(group, writer)
        assert not set(direct) & set(_stored(group.namesrv_addr))  # never committed: truncated
        monitor.assert_one_leader_per_term()


@SLOW
def test_asymmetric_links_a_deaf_and_then_a_mute_leader_leave_the_group_safe_and_writable(
    group: ChaosGroup,
) -> None:
    with (
        Monitor(group) as monitor,
        Writer(group.namesrv_addr, "asym") as writer,
    ):
        writer.wait_acked(20, "before the faults")
        # the leader's messages go out, but nothing comes back: it must give up (check-quorum)
        deaf = group.wait_leader()
        for follower in _followers(group, deaf):
            group.block(follower, deaf)
        group.wait_leader(WAIT_S, among=_followers(group, deaf))
        writer.wait_acked(20, "with the old leader deaf")
        group.heal()
        writer.wait_acked(10, "after the first heal")

        # the leader hears everything but cannot send: the others elect a leader of their own
        mute = group.wait_leader()
        for follower in _followers(group, mute):
            group.block(mute, follower)
        group.wait_leader(WAIT_S, among=_followers(group, mute))
        writer.wait_acked(20, "with the old leader mute")
        group.heal()
        writer.wait_acked(10, "after the second heal")
        writer.stop()
        assert_same_committed_bytes(group)
        assert_nothing_acknowledged_lost(group, writer)
        monitor.assert_one_leader_per_term()


@SLOW
def test_a_slow_follower_does_not_hold_commits_back_and_catches_up_while_still_slow(
    group: ChaosGroup,
) -> None:
    delay_ms = 300
    with Writer(group.namesrv_addr, "slow") as writer:
        writer.wait_acked(20, "before the fault")
        leader = group.wait_leader()
        slow, _other = _followers(group, leader)
        group.slow(leader, slow, delay_ms)
        group.slow(slow, leader, delay_ms)
        term = _state(group, leader).term
        before = len(writer.latencies)
        writer.wait_acked(100, "with one follower slow")
        during = sorted(writer.latencies[before:])
        median = during[len(during) // 2]
        # a commit waiting on the slow follower would take a round trip of 2 * delay_ms
        assert median < delay_ms / 1000, f"median send {median * 1000:.0f} ms with the slow follower"
        writer.stop()
        assert_same_committed_bytes(group)  # caught up through the delay
        assert group.leader() == leader and _state(group, leader).term == term  # no election
        group.heal()
        assert_nothing_acknowledged_lost(group, writer)


@SLOW
def test_a_leader_losing_its_unsynced_tail_recovers_and_catches_up(group: ChaosGroup) -> None:
    with (
        Monitor(group) as monitor,
        Writer(group.namesrv_addr, "lost") as writer,
    ):
        writer.wait_acked(50, "before the fault")
        old = group.wait_leader()
        lost = group.lose_unsynced(old, seed=11)
        print(f"power loss on node {old}: {lost}")
        assert lost.written_end > lost.durable_end  # something was at risk
        assert not group.alive(old)
        group.wait_leader(WAIT_S, among=_followers(group, old))
        writer.wait_acked(30, "with the old leader down")
        group.restart(old)
        writer.wait_acked(20, "after the restart")
        writer.stop()
        assert_same_committed_bytes(group)
        assert_nothing_acknowledged_lost(group, writer)
        monitor.assert_one_leader_per_term()
        log = pathlib.Path(group.log_path(old)).read_text(errors="replace")
        assert "Traceback" not in log


@SLOW
def test_a_partitioned_follower_campaigns_without_raising_its_term_and_rejoins_without_disruption(
    group: ChaosGroup,
) -> None:
    """Spec §3.3 scenario 12: a node that was cut off must not come back with an inflated term
    and depose a healthy leader (pre-vote: its campaigns fail without a term change)."""
    with (
        Monitor(group) as monitor,
        Writer(group.namesrv_addr, "stale") as writer,
    ):
        writer.wait_acked(20, "before the fault")
        leader = group.wait_leader()
        term = _state(group, leader).term
        cut_off = _followers(group, leader)[0]
        group.isolate(cut_off)
        wait_until(
            lambda: (st := group.state(cut_off)) and st.role in ("PRE_CANDIDATE", "CANDIDATE"),
            "the cut-off follower campaigning",
            WAIT_S,
        )
        # the partition lasts four election timeouts (1000 ms each, randomized up to 2000 ms):
        # at least two campaigns; its log falls behind meanwhile
        until = time.monotonic() + 4.0
        wait_until(lambda: time.monotonic() >= until, "the partition to last 4 s", 10)
        writer.wait_acked(20, "during the partition")
        assert set(monitor.terms[cut_off]) == {term}, (
            f"the cut-off follower's terms: {set(monitor.terms[cut_off])}"
        )
        group.heal()
        wait_until(
            lambda: (
                (st := group.state(cut_off))
                and st.role == "FOLLOWER"
                and st.leader_id == group.self_id(leader)
            ),
            "the follower following the same leader again",
            WAIT_S,
        )
        writer.wait_acked(20, "after the heal")
        writer.stop()
        assert_same_committed_bytes(group)
        assert group.leader() == leader
        assert {st.term for st in group.states().values()} == {term}  # nobody's term moved
        assert set(monitor.leaders) == {term}
        assert_nothing_acknowledged_lost(group, writer)


@SLOW
def test_a_full_disk_on_a_follower_and_then_on_the_leader(tmp_path: pathlib.Path) -> None:
    """A follower whose disk fills stops replicating without failing for good (its Raft member
    used to stop on the first DiskFull until the broker restarted:
    test_regression_a_follower_out_of_disk_catches_up_once_there_is_room); the leader and
    the other follower commit on. A leader whose disk fills refuses sends with a clear status
    (SERVICE_NOT_AVAILABLE, "disk full"). Space back: writes resume, everyone catches up."""
    conf = {"mappedFileSizeCommitLog": str(128 << 10)}  # a new data file every ~100 sends
    with chaos_group(tmp_path, preferred_leader=0, tmpfs_nodes=(0, 2), conf=conf) as group:
        leader, full = 0, 2
        assert group.wait_leader() == leader
        with Writer(group.namesrv_addr, "df", pad=1000) as writer:
            writer.wait_acked(20, "before the fault")
            group.disk_full(full)
            behind_at = wait_until(
                lambda: (st := group.state(full)) and st.committed_pos,
                "the full follower's committed position",
                WAIT_S,
            )
            writer.wait_acked(300, "with a follower's disk full")  # past two data files
            assert _state(group, full).committed_pos < _state(group, leader).committed_pos
            assert "Traceback" not in pathlib.Path(group.log_path(full)).read_text(errors="replace")
            group.disk_full(full, False)
            writer.wait_acked(20, "after the follower's disk has room")
            print(f"the full follower stayed at or below {behind_at} meanwhile")
        assert_same_committed_bytes(group)

        group.disk_full(leader)
        answers: list[str] = []
        direct: dict[bytes, bool] = {}  # body -> acknowledged

        def refused() -> bool:
            body = f"direct-{len(direct)}".encode()
            direct[body] = False
            try:
                response = _call(group.broker_addr(leader), send_request(TOPIC, body, queue_id=0), 5)
            except (RocketqError, TimeoutError) as exc:
                answers.append(repr(exc))
                return False
            answers.append(f"{response.code} {response.remark}")
            direct[body] = response.code == ResponseCode.SUCCESS  # room left in reserved files
            return response.code == ResponseCode.SERVICE_NOT_AVAILABLE and "disk full" in (
                response.remark or ""
            )

        wait_until(refused, "the full leader refusing with 'disk full'", WAIT_S)
        group.disk_full(leader, False)
        with Writer(group.namesrv_addr, "df2") as writer2:
            writer2.wait_acked(20, "after the leader's disk has room")
        assert_same_committed_bytes(group)
        acked = {b for b, ok in direct.items() if ok}
        assert_nothing_acknowledged_lost(group, writer, writer2, acked=acked, sent=set(direct))
        print(f"the full leader answered: {answers[-3:]} ({len(acked)} of {len(direct)} stored)")


def test_regression_a_follower_out_of_disk_catches_up_once_there_is_room(tmp_path: pathlib.Path) -> None:
    """In process: a follower's entry store on a small tmpfs fills up. Its Raft member used to
    stop for good on the first DiskFull (the broker stayed up, a follower that never replicated
    again); now it rebuilds its core from the store, stays out of the way while the disk is full
    (the other two commit), and catches up once the space is back."""
    data = tmp_path / "group"

    async def main() -> None:
        group = LocalGroup(str(data))
        await group.start()
        try:
            leader = await group.leader()
            follower = next(i for i, m in group.members.items() if m is not leader)
            filler = fill(data / f"dledger-{follower}")
            for k in range(60):  # 60 * 40 KiB: the 1 MiB data files roll over twice
                result = await group.append(b"%05d" % k + b"x" * (40 << 10))
                assert result.status.value == "OK", result
            stuck = group.members[follower]
            assert stuck._failed is None and stuck.state.role is Role.FOLLOWER
            assert stuck.committed_pos < leader.committed_pos
            filler.unlink()
            assert (await group.append(b"after")).status.value == "OK"
            await group.wait_committed(leader.committed_pos, 20)
            upto = leader.committed_pos
            assert len({group.digest(i, upto) for i in group.members}) == 1
        finally:
            await group.stop()

    with contextlib.ExitStack() as mounts:
        for i in range(3):  # whoever follows: each member's store on its own 4 MiB tmpfs
            mounts.enter_context(small_tmpfs(data / f"dledger-n{i}", "4m"))
        asyncio.run(asyncio.wait_for(main(), 60))


@SLOW
def test_commits_go_on_through_a_lossy_link_while_the_other_follower_is_paused(group: ChaosGroup) -> None:
    """One follower SIGSTOPped: every commit needs the other one, whose link from the leader
    resets a connection on 5 % of its chunks. Sends still succeed (the transport reconnects,
    the leader resends); the paused one catches up after SIGCONT."""
    with Monitor(group) as monitor, Writer(group.namesrv_addr, "lossy") as writer:
        writer.wait_acked(20, "before the faults")
        leader = group.wait_leader()
        paused, lossy = _followers(group, leader)
        group.pause(paused)
        assert group.state(paused) is None
        group.lossy(leader, lossy, 0.05)
        # a reset comes with one chunk in twenty; with batched appends 60 acknowledgements can
        # take few enough chunks that none was lost: wait for a reset, then for sends after it
        proxy = group.proxy(leader, lossy)
        wait_until(lambda: proxy.loss_resets > 0, "a connection reset by the lossy link", WAIT_S)
        writer.wait_acked(60, "through the lossy link, after a reset")
        group.heal()
        group.resume(paused)
        writer.wait_acked(20, "after the heal")
        writer.stop()
        assert_same_committed_bytes(group)
        assert_nothing_acknowledged_lost(group, writer)
        monitor.assert_one_leader_per_term()


@SLOW
def test_block_and_partition_set_the_proxy_directions_that_carry_each_pair(group: ChaosGroup) -> None:
    """P[i→j] carries i's messages to j upstream; block(src, dst) must close exactly P[src→dst]
    upstream and P[dst→src] downstream; partition both ways between sides."""
    try:
        group.block(0, 1)
        assert group.blocked() == {(0, 1)}
        assert group.proxy(0, 1).blocking == {True: True, False: False}
        assert group.proxy(1, 0).blocking == {True: False, False: True}
        assert all(not any(group.proxy(a, b).blocking.values()) for a, b in [(0, 2), (2, 0), (1, 2), (2, 1)])
        group.heal()
        group.partition([0], [1])  # node 2 forms a third side
        assert group.blocked() == {(a, b) for a in range(3) for b in range(3) if a != b}
        group.heal()
        group.isolate(2)
        assert group.blocked() == {(0, 2), (2, 0), (1, 2), (2, 1)}
        with pytest.raises(ValueError, match="two sides"):
            group.partition([0, 1], [1])
        with pytest.raises(ValueError, match="itself"):
            group.block(1, 1)
    finally:
        group.heal()
    assert group.blocked() == set()
    assert all(not any(group.proxy(a, b).blocking.values()) for a in range(3) for b in range(3) if a != b)


@SLOW
def test_recover_undoes_every_fault_at_once(group: ChaosGroup) -> None:
    leader = group.wait_leader()
    a, b = _followers(group, leader)
    group.pause(a)
    group.kill(b)
    group.slow(leader, a, 50)
    group.block(leader, b)
    assert group.state(a) is None and not group.alive(b)
    back = group.recover(WAIT_S)
    assert group.blocked() == set() and group.proxy(leader, a).delay_ms == 0
    assert all(group.alive(n) for n in group.node_ids)
    states = group.states()
    assert len(states) == 3 and {st.leader_id for st in states.values()} == {group.self_id(back)}
    with Producer("RecoverPG", namesrv_addr=group.namesrv_addr) as producer:
        assert producer.send(Message(TOPIC, b"recovered")).status is SendStatus.SEND_OK


def test_a_leader_out_of_disk_fails_the_append_with_disk_full_and_steps_down(tmp_path: pathlib.Path) -> None:
    """In process, the other half of the full-disk fix: the leader's own write fails, so the
    proposal ends with DiskFull (definite: the entry was neither written nor sent), the member
    becomes a follower, the other two elect a leader and commit; with space back it catches up."""
    data = tmp_path / "group"

    async def main() -> None:
        group = LocalGroup(str(data))
        await group.start()
        try:
            old = await group.leader()
            old_id = old.config.self_id
            filler = fill(data / f"dledger-{old_id}")
            with pytest.raises(DiskFull):
                for k in range(60):  # the current 1 MiB data file fills within ~25 of these
                    result = await old.append(record(b"%05d" % k + b"y" * (40 << 10)))
                    assert result.status.value == "OK", result
            assert old._failed is None and old.state.role is Role.FOLLOWER
            new = await group.leader(10, not_in=(old_id,))
            assert (await new.append(record(b"on the others"))).status.value == "OK"
            filler.unlink()
            assert (await group.append(b"after")).status.value == "OK"
            await group.wait_committed(new.committed_pos, 20)
            upto = new.committed_pos
            assert len({group.digest(i, upto) for i in group.members}) == 1
        finally:
            await group.stop()

    with contextlib.ExitStack() as mounts:
        for i in range(3):
            mounts.enter_context(small_tmpfs(data / f"dledger-n{i}", "4m"))
        asyncio.run(asyncio.wait_for(main(), 60))
