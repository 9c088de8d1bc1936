"""The broker's role in its DLedger group (RocketMQ's ``DLedgerRoleChangeHandler``).

The replicated log reports role changes (:meth:`ReplicatedLog.on_state_change`, on the log's
loop: the broker's own in a broker process, a loop thread of its own otherwise); the handler
applies the latest one on the broker's event loop, one at a time:

LEADER
    wait until the store has its queue-offset table rebuilt for this term (the store does that
    itself once the log is caught up, ``committed_pos`` equal to the ledger end when the log
    tells it, and dispatch has reached the committed position: :mod:`rocketq.store.dledger_lead`,
    which also refuses puts until then); accept writes; resume the master-only services
    (delay and timer delivery, transaction checks); register with the name servers as master
    (brokerId 0). Until then sends are refused. A broker that was master in an older term and
    leads again before its follower state was applied (a quick leader, follower, leader flip)
    is no master while it catches up in the new term: ``ctx.is_master`` goes False at once, so
    nothing it answers from its queues meanwhile counts as a master's word
    (:meth:`DLedgerRoleHandler.leads_current_term`, which the pull's offset rule asks).
FOLLOWER / CANDIDATE
    refuse sends at once (the store's writes are switched off from the log's loop, before
    anything else): SERVICE_NOT_AVAILABLE (14) with a remark naming the leader, a definite
    failure the producer retries on another broker; pause the master-only services; register as
    slave (brokerId = index of the self id in ``dLegerPeers`` + 1); copy topic configs,
    consumer offsets and subscription groups from the leader every few seconds
    (:class:`SlaveSynchronize`, RocketMQ's ``SlaveSynchronize.syncAll``).

A follower serves pulls of committed messages and accepts consumer offset commits (stored
locally, as a RocketMQ slave does); the next copy from the leader overwrites the groups the
leader knows (docs/replication.md §4).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rocketq.errors import ResponseCode, ServiceNotAvailable
from rocketq.ha.group_config import parse_peers, slave_broker_id
from rocketq.ha.raft_types import Role
from rocketq.ha.replicated_log import LogState, ReplicatedLog
from rocketq.protocol import fastjson
from rocketq.protocol.fastjson import loads_object_keys
from rocketq.protocol.route import ClusterInfo
from rocketq.remoting.codes import RequestCode
from rocketq.remoting.command import create_request, create_response
from rocketq.store.dledger_lead import catching_up
from rocketq.store.service import ServiceThread

if TYPE_CHECKING:
    from rocketq.broker.context import BrokerContext
    from rocketq.broker.registration import NameServerRegistrar
    from rocketq.broker.server import Broker
    from rocketq.remoting.client import RemotingClient
    from rocketq.remoting.command import RemotingCommand
    from rocketq.remoting.connection import Connection
    from rocketq.store.dledger_store import DLedgerMessageStore

log = logging.getLogger(__name__)

SYNC_INTERVAL_S = 3.0
CATCH_UP_POLL_S = 0.1
#: The hand-over's wait beyond ``dLegerHandoverTimeoutMs`` for the log's loop to answer (its
#: own bound is that timeout; this covers a loop thread that is late to run the call).
HANDOVER_ANSWER_SLACK_S = 0.25


class MasterGate:
    """Pauses master-only store services (delay and timer delivery) on a follower: installed
    as their per-instance step hook, it holds the service's next step while closed."""

    def __init__(self) -> None:
        self.open = threading.Event()

    def __call__(self, svc: ServiceThread) -> None:
        while not self.open.wait(0.2):
            if svc.stopped:
                return


class SlaveSynchronize:
    """Copies the leader's topic configs, consumer offsets and subscription groups."""

    def __init__(self, ctx: BrokerContext, client: RemotingClient) -> None:
        self.ctx = ctx
        self.client = client
        self.rounds = 0

    async def _fetch(self, addr: str, code: int) -> dict[str, Any]:
        response = await self.client.invoke(addr, create_request(code), 5.0)
        if response.code != ResponseCode.SUCCESS or not response.body:
            raise ServiceNotAvailable(f"{addr} answered code {response.code} {response.remark or ''}")
        obj = loads_object_keys(response.body)  # fastjson: consumer offsets have unquoted queue ids
        if not isinstance(obj, dict):
            raise ServiceNotAvailable(f"{addr} answered no JSON object for code {code}")
        return obj

    async def sync_all(self, master: str) -> None:
        ctx = self.ctx
        topics = await self._fetch(master, RequestCode.GET_ALL_TOPIC_CONFIG)
        offsets = await self._fetch(master, RequestCode.GET_ALL_CONSUMER_OFFSET)
        groups = await self._fetch(master, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        before = ctx.topics.data_version.to_json()
        ctx.topics.decode(topics)
        if ctx.topics.data_version.to_json() != before:
            ctx.request_register()  # the slave's registration carries the topics it now has
        ctx.offsets.decode(offsets)
        ctx.groups.decode(groups)
        for persister in (ctx.topics_persister, ctx.groups_persister):
            if persister is not None:
                persister.request()
        if ctx.offsets_persister is not None and ctx.offsets.begin_persist():
            ctx.offsets_persister.request()
        schedule = ctx.store.schedule
        if schedule is not None:  # RocketMQ's syncDelayOffset: the leader's delay progress wins
            delay = await self._fetch(master, RequestCode.GET_ALL_DELAY_OFFSET)
            table = delay.get("offsetTable")
            if isinstance(table, dict):
                schedule.adopt_offsets({int(k): int(v) for k, v in table.items() if str(k).isdigit()})
        self.rounds += 1


class DLedgerRoleHandler:
    """See the module docstring. :meth:`install` once the broker's context exists."""

    def __init__(
        self,
        ctx: BrokerContext,
        store: DLedgerMessageStore,
        ledger: ReplicatedLog,
        *,
        registrar: NameServerRegistrar | None,
        client: RemotingClient | None,
        register_now: Callable[[], object] | None = None,
    ) -> None:
        self.ctx = ctx
        self.store = store
        self.ledger = ledger
        self.registrar = registrar
        self.sync = SlaveSynchronize(ctx, client) if client is not None else None
        self.gate = MasterGate()
        cfg = store.config
        self_id = ledger.state.self_id
        peers = parse_peers(cfg.d_leger_peers) if cfg.d_leger_peers else {self_id: ""}
        self.slave_id = slave_broker_id(peers, self_id) if self_id in peers else 1
        self.master = False
        self.role = ledger.state
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._sync_task: asyncio.Task[None] | None = None
        self._register_now = register_now or (registrar.request if registrar is not None else None)
        #: every state applied, in order (role name, term): for tests and the log
        self.history: list[tuple[str, int]] = []

    def install(self) -> None:
        self._loop = asyncio.get_running_loop()
        for svc in (self.store.schedule, self.store.timer):
            if svc is not None:
                svc.fault_hook = self.gate
        self._refuse(self.ledger.state)
        # a slave until the role is applied (RocketMQ starts DLedger brokers without a master id)
        self.ctx.is_master = False
        self._set_broker_id(self.slave_id, register=False)
        self.ledger.on_state_change(self._on_state)
        self._changed.set()
        self._task = self._loop.create_task(self._run(), name="dledger-role")
        if self.sync is not None:
            self._sync_task = self._loop.create_task(self._sync_loop(), name="dledger-slave-sync")

    # -- state changes ----------------------------------------------------------------------
    def leads_current_term(self) -> bool:
        """Whether this broker is the master of the log's current term: the LEADER role applied
        (caught up, queue-offset table rebuilt) in the term the log is in now. False while a
        new term's leader catches up, and from the moment the log leaves the role, before the
        handler has applied the change."""
        state = self.ledger.state
        return self.master and state.role is Role.LEADER and state.term == self.role.term

    def _on_state(self, state: LogState) -> None:
        """On the log's loop: refuse writes at once unless this is the leader already taking
        them in this term (a new leader is refused until caught up), then wake the handler."""
        if state.role is not Role.LEADER or not self.master or state.term != self.role.term:
            self._refuse(state)
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._changed.set)

    def _refuse(self, state: LogState) -> None:
        if state.role is Role.LEADER:
            reason = catching_up(state.term)  # the store's own refusal says the same
        else:
            if not state.leader_id:
                where = "not known yet"
            elif state.leader_address:
                where = f"{state.leader_id} at {state.leader_address}"
            else:  # dLegerBrokerAddresses does not name it: the name servers list the master
                where = f"{state.leader_id} (its broker registers as brokerId 0)"
            reason = f"this broker is a DLedger {state.role.value.lower()}; the leader is {where}"
        self.store.commitlog.set_writable(False, reason, error=ServiceNotAvailable, cause="role")

    async def _run(self) -> None:
        while True:
            await self._changed.wait()
            self._changed.clear()
            state = self.ledger.state
            try:
                if state.role is Role.LEADER:
                    await self._become_leader(state)
                else:
                    await self._become_follower(state)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("applying DLedger role %s failed", state.role.value)

    async def _become_leader(self, state: LogState) -> None:
        store, ledger = self.store, self.ledger
        if self.master and state.term != self.role.term:
            # master of an older term, leader again before the follower state was applied:
            # not the master until caught up in this term (its queues may lack what another
            # leader committed in between)
            self.master = False
            self.ctx.is_master = False
            self._refuse(state)
            self.gate.open.clear()
            log.info(
                "DLedger leader of term %d after term %d: not master until caught up",
                state.term,
                self.role.term,
            )
        # the store refuses puts itself until its log is caught up and dispatched, then has its
        # queue-offset table rebuilt for this term in its dispatch thread (store/dledger_lead.py)
        while True:
            if self._changed.is_set() or ledger.state.role is not Role.LEADER:
                return  # a newer state: applied next
            if store.queue_table_term == state.term:
                break
            if store.reput is not None:
                store.reput.wakeup()  # the catch-up is looked at by the dispatch thread
            await asyncio.sleep(CATCH_UP_POLL_S)
        store.commitlog.set_writable(True, cause="role")
        self.gate.open.set()
        self.master = True
        self.ctx.is_master = True
        self._set_broker_id(0, term=state.term)
        self.role = state
        self.history.append((state.role.value, state.term))
        log.info("DLedger leader of term %d: accepting writes as master", state.term)

    async def _become_follower(self, state: LogState) -> None:
        self._refuse(state)
        self.gate.open.clear()
        self.master = False
        self.ctx.is_master = False
        self._set_broker_id(self.slave_id, term=state.term)
        self.role = state
        self.history.append((state.role.value, state.term))
        log.info(
            "DLedger %s of term %d: refusing writes (leader %s)",
            state.role.value,
            state.term,
            state.leader_id,
        )

    # -- hand-over on shutdown --------------------------------------------------------------
    async def hand_over(self, timeout_s: float) -> str | None:
        """At the start of the broker's shutdown: if this broker leads, hand its leadership to
        a live, caught-up follower (:mod:`rocketq.ha.handover`) and wait for it to lead, at
        most ``timeout_s`` (and a little for the log's loop to answer, when it runs in a thread
        of its own). Sends are refused from the start, as a follower refuses them
        (SERVICE_NOT_AVAILABLE, a definite failure); puts already waiting for their quorum end
        as they do in the core: committed (the target is brought up to date before it is told
        to campaign, which completes the quorum of what was appended before), or
        TERM_CHANGED once this member steps down. Returns the new leader, or None when no
        hand-over happened (no leader here, no candidate, refused, failed or timed out)."""
        from rocketq.ha.driver import RaftGroupLog  # noqa: PLC0415 - a group of one has none

        ledger, ledger_loop = self.ledger, self.store.ledger_loop
        if not isinstance(ledger, RaftGroupLog) or ledger_loop is None:
            return None
        state = ledger.state
        if state.role is not Role.LEADER:
            return None
        began = time.monotonic()
        loop = asyncio.get_running_loop()
        # the log's loop is this one in a broker process; a thread of its own otherwise
        same_loop = ledger_loop.loop is loop

        async def run() -> tuple[str | None, bool]:
            moving = ledger.hand_over(timeout_s)
            if same_loop:
                return await moving
            return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(moving, ledger_loop.loop))

        self.store.commitlog.set_writable(
            False,
            f"this broker is shutting down and hands its DLedger leadership over (term {state.term})",
            error=ServiceNotAvailable,
            cause="role",
        )
        try:
            target, moved = await asyncio.wait_for(run(), timeout_s + HANDOVER_ANSWER_SLACK_S)
        except TimeoutError:
            log.warning(
                "DLedger hand-over did not finish within %.0f ms; stopping without it", timeout_s * 1000
            )
            return None
        except Exception:
            log.exception("DLedger hand-over on shutdown failed; stopping without it")
            return None
        took_ms = (time.monotonic() - began) * 1000
        if target is None:
            log.info("DLedger leader of term %d stopping: no follower live and caught up", state.term)
        elif moved:
            log.info("DLedger leadership handed over to %s in %.0f ms before stopping", target, took_ms)
        else:
            log.warning(
                "DLedger hand-over to %s did not finish within %.0f ms; stopping without it", target, took_ms
            )
        return target if moved else None

    def _set_broker_id(self, broker_id: int, *, register: bool = True, term: int | None = None) -> None:
        ctx = self.ctx
        if ctx.config.broker_id != broker_id:
            ctx.config = dataclasses.replace(ctx.config, broker_id=broker_id)
        if self.registrar is not None:
            self.registrar.cfg = dataclasses.replace(self.registrar.cfg, broker_id=broker_id)
            if term is not None:
                self.registrar.dledger_term = term
        if register and self._register_now is not None:
            self._register_now()

    # -- slave sync -------------------------------------------------------------------------
    async def _master_from_namesrv(self) -> str | None:
        """The group's master (brokerId 0) as the name servers list it: the leader's broker address
        when ``dLegerBrokerAddresses`` does not give it (RocketMQ's slaves learn it the same way,
        from their registration)."""
        sync, cfg = self.sync, self.ctx.config
        if sync is None:
            return None
        for addr in cfg.namesrv_addrs:
            try:
                response = await sync.client.invoke(
                    addr, create_request(RequestCode.GET_BROKER_CLUSTER_INFO), 3.0
                )
            except Exception:  # that name server is down: ask the next
                continue
            if response.code != ResponseCode.SUCCESS or not response.body:
                continue
            group = ClusterInfo.decode(response.body).broker_addr_table.get(cfg.broker_name)
            master = None if group is None else group.broker_addrs.get(0)
            if master and master != cfg.broker_addr:
                return master
        return None

    async def _sync_loop(self) -> None:
        assert self.sync is not None
        last_error = 0.0
        while True:
            state = self.ledger.state
            master = state.leader_address
            if master is None and state.leader_id not in (None, state.self_id) and not self.master:
                master = await self._master_from_namesrv()
            if master and state.leader_id != state.self_id and not self.master:
                try:
                    await self.sync.sync_all(master)
                except Exception as exc:  # the leader may be gone: keep trying
                    if time.monotonic() - last_error > 30:
                        last_error = time.monotonic()
                        log.warning("copying metadata from the leader %s failed: %s", master, exc)
            await asyncio.sleep(SYNC_INTERVAL_S)


#: rocketq's request code for ``admin dledgerLeadershipTransfer`` (RocketMQ has none; DLedger's
#: own CLI sends LEADERSHIP_TRANSFER on the peer port). Ext field ``target``: the self id.
DLEDGER_LEADERSHIP_TRANSFER = 9801  # = rocketq.client.admin_requests.DLEDGER_LEADERSHIP_TRANSFER


def attach_role_handler(broker: Broker) -> list[asyncio.Task[None]]:
    """In DLedger mode: install the role handler and the leadership-transfer request on a
    starting broker; returns the tasks the broker cancels at shutdown (none in plain mode)."""
    from rocketq.store.dledger_store import DLedgerMessageStore  # noqa: PLC0415 - plain mode never needs it

    ctx, store = broker.ctx, broker.store
    if not isinstance(store, DLedgerMessageStore) or store.ledger is None or ctx is None:
        return []
    handler = DLedgerRoleHandler(ctx, store, store.ledger, registrar=broker.registrar, client=broker._client)
    handler.install()
    ledger_loop = store.ledger_loop
    assert ledger_loop is not None

    async def transfer(_conn: Connection, request: RemotingCommand) -> RemotingCommand:
        target = (request.ext_fields or {}).get("target", "")
        if not target:
            return create_response(
                request, ResponseCode.INVALID_PARAMETER, "target (a dLegerSelfId) is required"
            )
        moving = handler.ledger.transfer_leadership(target)
        if ledger_loop.loop is asyncio.get_running_loop():  # the log lives on the broker's loop
            ok = await moving
        else:
            ok = await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(moving, ledger_loop.loop))
        if not ok:
            state = handler.ledger.state
            return create_response(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"leadership transfer to {target} refused or failed (role {state.role.value}, "
                f"leader {state.leader_id}, term {state.term})",
            )
        return create_response(request, ResponseCode.SUCCESS, f"leadership transferred to {target}")

    async def delay_offsets(_conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """GET_ALL_DELAY_OFFSET (45): the delay levels' progress, for the followers' copy."""
        schedule = store.schedule
        table = {} if schedule is None else dict(sorted(schedule.offset_table.items()))
        body = fastjson.dumps({"offsetTable": table}).encode()
        return create_response(request, ResponseCode.SUCCESS, body=body)

    broker._handlers[DLEDGER_LEADERSHIP_TRANSFER] = transfer
    broker._handlers.setdefault(RequestCode.GET_ALL_DELAY_OFFSET, delay_offsets)
    ctx.dledger_role = handler
    return [t for t in (handler._task, handler._sync_task) if t is not None]
