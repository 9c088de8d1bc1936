"""The broker process: the store, the metadata tables, the request processors, the network.

Start (``await Broker.start()``)::

    bind the remoting server (listen_port, and listen_port - 2 for old Java producers' "VIP
      channel"); the real port is known from here on (listen_port 0 picks one)
    open the MessageStore in a worker thread (recovery), STOREHOST = broker_ip1:port; in DLedger
      mode its replicated log (Raft driver, peer server and clients, timers) starts on this loop
    load config/topics.json, subscriptionGroup.json, consumerOffset.json (tolerant, .bak fallback)
    hook long polling to the dispatcher (arrival listener) and start its periodic check
    load the pop state (pop/snapshot + pop/journal) and hook pop long polling to the dispatcher
    start the periodic tasks: stats sample (1 s), client channel expiry (10 s), consumer offset
      persist (flush_consumer_offset_interval_ms), name-server registration (30 s), transaction
      state check (transaction_check_interval_ms)
    accept requests, register with every name server

Until start finishes and from the moment shutdown begins, requests are answered with
SERVICE_NOT_AVAILABLE (14) rather than left waiting. A start that fails or is cancelled undoes
what it did; the steps in worker threads (store open, pop state load) run to their end even
when the start is cancelled, and what they opened is closed before the cancellation propagates.

Shutdown (``await Broker.shutdown()``): in DLedger mode a leader first hands its leadership to
a live, caught-up follower while it still serves other requests, sends refused meanwhile (at
most ``dLegerHandoverTimeoutMs``; ``dLegerHandoverOnShutdown``) → refuse new requests, stop the
periodic tasks →
unregister from the name servers (at most SHUTDOWN_UNREGISTER_TIMEOUT_S) → end every held pull
(each answers with what the store has) and every held pop receive (the pop state is made
durable) and wait for in-flight requests (and answers owed to deferred sends; a DLedger put
still awaiting its quorum after SHUTDOWN_QUORUM_WAIT_S is answered SYSTEM_ERROR, outcome
unknown) → close the servers → wait for worker-thread store calls (the requests, the answers and
these calls share one deadline, SHUTDOWN_DRAIN_TIMEOUT_S) → persist offsets, topics, groups →
shut the store down cleanly (flush, checkpoint, abort file removed) in a worker thread. The
``rocketq broker`` and ``rocketq serve`` processes add a watch over it all
(:mod:`rocketq.broker.shutdown_watch`): the stacks of their threads and tasks when it takes
long, and an exit when it takes too long.

Request dispatch is a table ``code → processor method``. Sends that need not wait (ASYNC_FLUSH)
are answered by a second table of plain functions right where the transport decodes them (no task
per message; on a DLedger leader taken there and answered when the quorum has the message,
``DEFERRED``); the others, and every request before start finishes, go through the first table.
With ``aclEnable=true`` every request is checked against the plain ACL rules
(:mod:`rocketq.acl`) before either table is consulted; a refusal answers NO_PERMISSION (16) with
a remark naming what was refused and logs a WARNING (at most one per reason every 10 s); the gRPC
endpoint checks the same accounts (proxy/auth.py). An unknown code answers 3 with the remark
``" request type <code> not supported"``. A processor error that is a
:class:`~rocketq.errors.RocketqError` becomes its wire code with the message as remark (the
transport does that); anything else becomes SYSTEM_ERROR (1).

One idea: the broker process's life cycle around its processors (start, request dispatch,
periodic tasks, shutdown); what each request does lives in the processor modules.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import functools
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from rocketq.acl.plain import PlainAclValidator, RateLimitedLog
from rocketq.acl.signature import AclClientRpcHook
from rocketq.broker.client_manager import Channel, ConsumerManager, ProducerManager
from rocketq.broker.config import BrokerConfig
from rocketq.broker.config_file import PersistScheduler
from rocketq.broker.consumer_offset import ConsumerOffsetManager
from rocketq.broker.context import BrokerContext
from rocketq.broker.dledger_role import attach_role_handler
from rocketq.broker.handlers import request_tables
from rocketq.broker.long_polling import (
    LONG_POLLING_CHECK_INTERVAL_S,
    SHORT_POLLING_CHECK_INTERVAL_S,
    PullRequestHoldService,
)
from rocketq.broker.loop_coalesce import LoopWakeup
from rocketq.broker.metrics import FOLD_INTERVAL_S
from rocketq.broker.pop.service import PopService
from rocketq.broker.registration import NameServerRegistrar
from rocketq.broker.send import SendMessageProcessor
from rocketq.broker.shutdown_watch import BACKSTOP_S, ShutdownWatch
from rocketq.broker.subscription_group import SubscriptionGroupManager
from rocketq.broker.topic_config import TopicConfigManager
from rocketq.broker.trace import start_tracer, stop_tracer
from rocketq.broker.transaction import TransactionService
from rocketq.config import FlushDiskType, StoreConfig
from rocketq.errors import ConnectionClosed, ResponseCode, RocketqError
from rocketq.protocol.topic import TopicConfig
from rocketq.remoting import eventloop
from rocketq.remoting.client import RemotingClient
from rocketq.remoting.codes import REQUEST_CODE_NOT_SUPPORTED_REMARK, RequestCode
from rocketq.remoting.command import RemotingCommand, create_request, create_response
from rocketq.remoting.connection import Connection, Deferred, DeferringHandler, RequestHandler
from rocketq.remoting.rpc_metrics import RpcLatency, TimedCall
from rocketq.remoting.server import RemotingServer
from rocketq.store.message_store import MessageStore, open_message_store
from rocketq.tasks import cancel_and_wait

if TYPE_CHECKING:
    from rocketq.metrics.exposition import Family
    from rocketq.metrics.http import MetricsServer

log = logging.getLogger(__name__)

_perf_ns = time.perf_counter_ns


async def _run_to_end(fn: Callable[[], None], done: Callable[[], None]) -> None:
    """Run ``fn`` (a start step that opens files or threads) in a worker thread, then ``done``
    on the loop. A thread cannot be stopped: when the calling task is cancelled meanwhile, wait
    for ``fn`` to finish all the same and call ``done`` if it succeeded before the cancellation
    propagates, so that the abandoned start (see :meth:`Broker.start`) closes what ``fn`` opened
    instead of leaving it open."""
    running = asyncio.ensure_future(asyncio.to_thread(fn))
    try:
        await asyncio.shield(running)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await running
            done()
        raise
    done()


#: How often client channels are checked for expiry (RocketMQ ``ClientHousekeepingService``).
CHANNEL_SCAN_INTERVAL_S = 10.0
STATS_SAMPLE_INTERVAL_S = 1.0
#: How long shutdown waits for in-flight requests, the answers owed to deferred sends and the
#: worker-thread store calls, all together (one deadline for the three waits).
SHUTDOWN_DRAIN_TIMEOUT_S = 10.0
#: Of that, how long a send awaiting its DLedger quorum is waited for: then every put still
#: waiting is answered SYSTEM_ERROR, outcome unknown (as a quorum timeout is: the entry may still
#: commit, the producer's retry may store it twice; nothing acknowledged is at stake).
SHUTDOWN_QUORUM_WAIT_S = 3.0
#: The most unregistering from the name servers takes at shutdown (each one asked at once).
SHUTDOWN_UNREGISTER_TIMEOUT_S = 3.0
#: The wait for worker-thread store calls when the drain's deadline has passed already.
SHUTDOWN_LAST_WAIT_S = 0.5
#: How long a queue read from a thread other than the loop waits for a pending dispatch window
#: (the dispatch thread, woken, takes it; it normally takes well under a millisecond).
DISPATCH_SETTLE_WAIT_S = 0.5
#: DLedger mode: the most a queue read on the loop dispatches there when it finds a window
#: waiting for the dispatch thread's interval (a window holds the records committed since the
#: thread's last wake-up; a larger backlog, a catch-up, is left to the thread, woken at once)
DLEDGER_SETTLE_MAX_BYTES = 1 << 20
#: ASYNC_FLUSH with dispatch windows (``inline_dispatch_interval_ms``): a window the loop
#: dispatches itself may hold ``inline_dispatch_max_bytes`` per put it covers (a lone record or a
#: whole batch), up to this many times the bound. A window gathers the puts of an interval, not of
#: one iteration: one send in flight at 13,000+ sends/s puts more than 4 KiB of small records in
#: 1 ms, which the bound alone sent to the thread (a wake-up per window); a batch of 32 still
#: goes to the thread, as does 64 in flight's iteration of 19 KB (docs/benchmarks.md, "The lone
#: send's windows at high rates")
INLINE_WINDOW_PUTS = 3


class Broker:
    """A RocketMQ-compatible broker (master) serving the remoting protocol."""

    def __init__(self, broker_config: BrokerConfig, store_config: StoreConfig) -> None:
        self.config = broker_config
        self.store_config = store_config
        self.store: MessageStore | None = None
        self.ctx: BrokerContext | None = None
        self.registrar: NameServerRegistrar | None = None
        #: END_TRANSACTION and the transaction check service (set by start).
        self.transactions: TransactionService | None = None
        self._server: RemotingServer | None = None
        self._fast_server: RemotingServer | None = None
        self._client: RemotingClient | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._handlers: dict[int, RequestHandler] = {}
        #: Requests answered inside data_received when they need not wait (sends under ASYNC_FLUSH).
        self._immediate_handlers: dict[int, DeferringHandler] = {}
        #: The send processor (set by start): its lone handler takes a read that is one plain send.
        self._send: SendMessageProcessor | None = None
        #: The request latencies (metrics on; None: nothing is timed), and its timed call of an
        #: immediate handler (RpcLatency.call), None exactly when it is.
        self._rpc: RpcLatency | None = None
        self._rpc_call: TimedCall | None = None
        #: The plain ACL rules when ``acl_enable`` (set at start, before the port opens).
        self.acl: PlainAclValidator | None = None
        self._acl_log = RateLimitedLog(log)
        self._periodic: list[asyncio.Task[None]] = []
        self._persisters: list[PersistScheduler] = []
        self._offsets_persister: PersistScheduler | None = None
        self._ready = False
        self._started = False
        self._stopping = False  # shutdown's first step (the DLedger hand-over) is running
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._metrics_server: MetricsServer | None = None
        #: More metric families for this broker's ``/metrics`` (``rocketq serve`` adds its name
        #: server's): coroutines called at every scrape, on the loop.
        self.extra_metrics: list[Callable[[], Awaitable[list[Family]]]] = []

    # -- properties -------------------------------------------------------------------------
    @property
    def port(self) -> int:
        """The remoting port (the real one once started, also with ``listen_port=0``)."""
        return self._server.port if self._server is not None else self.config.listen_port

    @property
    def broker_addr(self) -> str:
        """``broker_ip1:port``: the address registered with name servers."""
        return f"{self.config.broker_ip1}:{self.port}"

    @property
    def ready(self) -> bool:
        return self._ready

    def _require_ctx(self) -> BrokerContext:
        if self.ctx is None:
            raise RuntimeError("broker is not started")
        return self.ctx

    # -- lifecycle --------------------------------------------------------------------------
    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        began = time.monotonic()
        cfg = self.config
        try:
            await self._start(cfg)
        except BaseException:
            await self._abandon()
            raise
        self._ready = True
        if self._send is not None:
            self._send.lone_open = True
        log.info(
            "broker %s of cluster %s started at %s in %.0f ms",
            cfg.broker_name,
            cfg.broker_cluster_name,
            self.broker_addr,
            (time.monotonic() - began) * 1000,
        )
        if self.registrar is not None and self.registrar.addresses:
            results = await self.registrar.register_all()
            log.info("registered with name servers: %s", results)

    async def _start(self, cfg: BrokerConfig) -> None:
        if cfg.acl_enable:
            self.acl = await asyncio.to_thread(PlainAclValidator, cfg.acl_file_path())
            log.info("ACL enabled: %s (%d accounts)", self.acl.path, len(self.acl.config.accounts))
        tls = cfg.tls.server_context() if cfg.tls is not None else None
        permissive = cfg.tls is not None and cfg.tls.server_mode == "permissive"

        def server(port: int) -> RemotingServer:
            return RemotingServer(
                cfg.bind_address, port, self._handle, on_connection=self._on_connection,
                immediate=self._handle_now, ssl=tls, tls_permissive=permissive, limits=cfg.server_limits(),
            )  # fmt: skip

        self._server = server(cfg.listen_port)
        await self._server.start()
        if cfg.fast_listen_port_enable and cfg.listen_port > 2:
            fast = server(cfg.listen_port - 2)
            try:
                await fast.start()
                self._fast_server = fast
            except OSError as exc:
                log.warning("cannot listen on the VIP port %d: %s", cfg.listen_port - 2, exc)

        store_config = dataclasses.replace(self.store_config, store_host=self.broker_addr)
        self.store_config = store_config
        store = open_message_store(store_config)
        run_ledger_on = getattr(store, "run_ledger_on", None)
        if run_ledger_on is not None:  # DLedger mode: the replicated log lives on this loop
            run_ledger_on(asyncio.get_running_loop())

        def store_opened() -> None:
            self.store = store

        await _run_to_end(store.start, store_opened)

        config_dir = store.config_dir
        topics = TopicConfigManager(cfg, os.path.join(config_dir, "topics.json"))
        groups = SubscriptionGroupManager(
            os.path.join(config_dir, "subscriptionGroup.json"), auto_create=cfg.auto_create_subscription_group
        )
        offsets = ConsumerOffsetManager(os.path.join(config_dir, "consumerOffset.json"))
        await asyncio.to_thread(self._load_metadata, topics, groups, offsets)
        store.consumer_progress = offsets.persisted_min_offsets  # retention keeps the unconsumed

        hold = PullRequestHoldService(
            store.get_max_offset,
            check_interval_s=LONG_POLLING_CHECK_INTERVAL_S
            if cfg.long_polling_enable
            else SHORT_POLLING_CHECK_INTERVAL_S,
        )
        hold.start()
        assert store.reput is not None
        store.reput.arrival_listeners.append(hold.arrival_listener)
        if store.commitlog.append_listener == store.reput.wakeup:  # ASYNC_FLUSH: woken by appends
            # sends are put on the loop thread: a small window is dispatched there by the loop
            # itself, after the acknowledgements of its iteration are written, at most once per
            # inline_dispatch_interval_ms while puts keep coming (a window shares its fixed
            # cost among the sends of several iterations); a larger one wakes the dispatch
            # thread as often. DLedger mode wakes its thread at most once per
            # DISPATCH_WAKE_INTERVAL_S (FOLLOWER_DISPATCH_WAKE_INTERVAL_S while the member does
            # not lead); a read that finds a window waiting dispatches it on the
            # loop (up to DLEDGER_SETTLE_MAX_BYTES; with inline dispatch off it wakes the thread)
            thread_interval = getattr(store, "DISPATCH_WAKE_INTERVAL_S", 0.0)
            inline_bytes = store.config.inline_dispatch_max_bytes
            inline = inline_bytes > 0 and not thread_interval
            interval = store.config.inline_dispatch_interval_ms / 1000 if inline else thread_interval
            reput = store.reput
            on_loop: Callable[[], bool] | None = None
            if inline and interval:

                def window_on_loop() -> bool:  # the bound grows with the puts the window covers
                    scale = min(max(window.window_puts, 1), INLINE_WINDOW_PUTS)
                    return reput.dispatch_inline(inline_bytes * scale)

                on_loop = window_on_loop
            elif inline:
                on_loop = functools.partial(reput.dispatch_inline, inline_bytes)
            settle_on_loop = None
            if thread_interval and inline_bytes > 0:
                settle_on_loop = functools.partial(
                    reput.dispatch_inline, max(inline_bytes, DLEDGER_SETTLE_MAX_BYTES)
                )
            window = LoopWakeup(
                asyncio.get_running_loop(),
                reput.wakeup,
                interval,
                on_loop=on_loop,
                settle_elsewhere=functools.partial(reput.catch_up, DISPATCH_SETTLE_WAIT_S),
                settle_on_loop=settle_on_loop,
                # DLedger: the interval of the member's role (longer on a follower)
                interval_of=getattr(store, "dispatch_wake_interval_s", None) if thread_interval else None,
            )
            store.commitlog.append_listener = window
            if interval:
                # a read of the queues or the index first takes a window still waiting for its
                # time, so an answered send is visible to the offset query or pull after it
                store.dispatch_window = window
        elif (
            store.config.flush_disk_type is FlushDiskType.SYNC_FLUSH
            and store.config.inline_dispatch_max_bytes > 0
        ):
            # SYNC_FLUSH: records become dispatchable when a group-commit round makes them
            # durable, and the loop answers their sends when it learns of that round: the
            # round's call is carried to the loop, which dispatches a small window itself after
            # those answers instead of the round waking the dispatch thread
            reput = store.reput
            store.flushed_dispatch_wake = LoopWakeup(
                asyncio.get_running_loop(),
                reput.wakeup,
                on_loop=functools.partial(reput.dispatch_inline, store.config.inline_dispatch_max_bytes),
                hop_from_threads=True,
            )

        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=max(32, 4 * (os.cpu_count() or 1)), thread_name_prefix="rocketq-broker"
        )
        consumers = ConsumerManager(
            channel_expired_timeout_ms=cfg.channel_expired_timeout_ms,
            on_ids_changed=self._on_consumer_ids_changed,
        )
        producers = ProducerManager(channel_expired_timeout_ms=cfg.channel_expired_timeout_ms)
        ctx = self.ctx = BrokerContext(
            config=cfg,
            store=store,
            topics=topics,
            groups=groups,
            offsets=offsets,
            consumers=consumers,
            producers=producers,
            hold=hold,
            broker_addr=self.broker_addr,
            executor=self._executor,
        )

        hook = AclClientRpcHook(cfg.access_key, cfg.secret_key) if cfg.access_key and cfg.secret_key else None
        self._client = RemotingClient(rpc_hook=hook, ssl=cfg.tls.client_context() if cfg.tls else None)
        self.registrar = NameServerRegistrar(cfg, self._client, lambda: self.broker_addr, topics.wrapper)
        ctx.request_register = self.registrar.request

        topics_persister = PersistScheduler(topics.path or "", topics.encode)
        groups_persister = PersistScheduler(groups.path or "", groups.encode)
        self._offsets_persister = PersistScheduler(
            offsets.path or "", offsets.encode, on_written=offsets.mark_written
        )
        self._persisters = [topics_persister, groups_persister, self._offsets_persister]
        ctx.topics_persister = topics_persister
        ctx.groups_persister = groups_persister
        ctx.offsets_persister = self._offsets_persister

        def topics_changed(_changed: list[TopicConfig]) -> None:
            topics_persister.request()
            ctx.request_register()

        topics.on_change = topics_changed
        groups.on_change = groups_persister.request

        pop = PopService(ctx)

        def pop_loaded() -> None:
            ctx.pop = pop

        await _run_to_end(pop.start, pop_loaded)
        store.reput.arrival_listeners.append(pop.arrival_listener)

        if cfg.metrics_enabled:
            self._count_metrics(ctx)
        self._handlers, self._immediate_handlers, self.transactions, self._send = request_tables(ctx)
        start_tracer(ctx)
        self._periodic += attach_role_handler(self)  # DLedger mode: the group decides master or slave
        if ctx.metrics is not None:  # time every request (rocketmq_rpc_latency): _handle, _handle_now
            self._rpc, self._rpc_call = ctx.metrics.rpc, ctx.metrics.rpc.call
            ctx.deferred.rpc = ctx.metrics.rpc  # and the answers given later (DLedger sends)
        if self.acl is None and self._rpc_call is None and self._send.lone_possible:
            # a read that is one plain send goes straight to the send processor (opened once ready)
            for remoting in (self._server, self._fast_server):
                if remoting is not None:
                    remoting.lone = self._send.send_lone
        self._every(STATS_SAMPLE_INTERVAL_S, self._sample_stats, "broker-stats")
        self._every(CHANNEL_SCAN_INTERVAL_S, self._scan_channels, "broker-channel-expiry")
        self._every(cfg.flush_consumer_offset_interval_ms / 1000, self._persist_offsets, "broker-offsets")
        if cfg.namesrv_addrs:
            self._every(cfg.register_broker_interval_ms / 1000, self.registrar.request, "broker-register")
        assert self.transactions is not None
        self._every(
            cfg.transaction_check_interval_ms / 1000, self.transactions.check, "broker-transaction-check"
        )
        if ctx.metrics is not None:
            self._every(FOLD_INTERVAL_S, ctx.metrics.fold, "broker-metrics-fold")
            await self._serve_metrics(ctx)

    # -- metrics (docs/metrics.md) ----------------------------------------------------------
    def _count_metrics(self, ctx: BrokerContext) -> None:
        from rocketq.broker.metrics import BrokerMetrics  # noqa: PLC0415 - only with metrics on

        ctx.metrics = BrokerMetrics(ctx.config)
        ctx.store.put_latency = ctx.metrics.put_latency

    async def _serve_metrics(self, ctx: BrokerContext) -> None:
        from rocketq.broker.metrics import serve_metrics  # noqa: PLC0415 - only with metrics on

        self._metrics_server = await serve_metrics(ctx, self.extra_metrics)

    @property
    def metrics_url(self) -> str | None:
        """``http://host:port/metrics`` while metrics are served, else None."""
        return self._metrics_server.url if self._metrics_server is not None else None

    async def _stop_metrics(self) -> None:
        server, self._metrics_server = self._metrics_server, None
        if server is not None:
            await server.close()

    @staticmethod
    def _load_metadata(
        topics: TopicConfigManager, groups: SubscriptionGroupManager, offsets: ConsumerOffsetManager
    ) -> None:
        topics.load()
        groups.load()
        offsets.load()

    async def shutdown(self) -> None:
        """Stop serving and close the store cleanly (see the module docstring)."""
        if not self._started or self._stopping:
            return
        self._stopping = True
        try:
            await self._hand_over()
        finally:
            self._stopping = False
        self._started = False
        self._ready = False
        if self._send is not None:
            self._send.lone_open = False
        ctx = self.ctx
        log.info("broker %s shutting down", self.config.broker_name)
        await self._stop_metrics()
        await self._stop_periodic()
        if self.registrar is not None:
            await self.registrar.unregister_all(SHUTDOWN_UNREGISTER_TIMEOUT_S)
        if ctx is not None:
            await ctx.hold.stop()
            await stop_tracer(ctx)
            if ctx.pop is not None:
                try:
                    await ctx.pop.shutdown()
                except Exception as exc:  # a full disk must not turn a clean shutdown into a crash
                    log.error("shutting down without persisting the pop state: %s", exc)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SHUTDOWN_DRAIN_TIMEOUT_S
        if not await self._drained_by(loop.time() + SHUTDOWN_QUORUM_WAIT_S):
            self._fail_waiting_puts()
            if not await self._drained_by(deadline):
                log.warning(
                    "requests or deferred answers still pending after %.0f s; shutting down anyway",
                    SHUTDOWN_DRAIN_TIMEOUT_S,
                )
        for server in (self._fast_server, self._server):
            if server is not None:
                await server.close()
        left = max(deadline - loop.time(), SHUTDOWN_LAST_WAIT_S)
        if ctx is not None and not await ctx.drain_blocking(left):
            log.warning(
                "store calls still running %.0f s into the shutdown; closing the store anyway",
                SHUTDOWN_DRAIN_TIMEOUT_S,
            )
        if ctx is not None:
            ctx.offsets.begin_persist()
            if self._offsets_persister is not None:
                self._offsets_persister.request()
            for persister in self._persisters:
                try:
                    await persister.flush()
                except RocketqError as exc:
                    log.error("shutting down without persisting %s: %s", persister.path, exc)
        await self._release()
        log.info("broker %s shut down", self.config.broker_name)

    async def _hand_over(self) -> None:
        """DLedger mode, first step of the shutdown: a leader hands its leadership to a live,
        caught-up follower while it still serves (``dLegerHandoverOnShutdown``, bounded by
        ``dLegerHandoverTimeoutMs``; :meth:`DLedgerRoleHandler.hand_over`)."""
        role = None if self.ctx is None else self.ctx.dledger_role
        cfg = self.store_config
        if role is None or not cfg.d_leger_handover_on_shutdown:
            return
        try:
            await role.hand_over(cfg.d_leger_handover_timeout_ms / 1000)
        except Exception:  # never in the way of the shutdown
            log.exception("DLedger hand-over on shutdown failed; stopping without it")

    async def _drained(self) -> None:
        """Return once no request is running: no request task, no answer still to give."""
        await self._idle.wait()
        if self.ctx is not None:
            await self.ctx.deferred.drained()

    async def _drained_by(self, deadline: float) -> bool:
        """:meth:`_drained` until ``deadline`` (loop time); False when that came first."""
        try:
            await asyncio.wait_for(self._drained(), max(deadline - asyncio.get_running_loop().time(), 0))
        except TimeoutError:
            return False
        return True

    def _fail_waiting_puts(self) -> int:
        """DLedger mode: answer every send (and fail every store put) still awaiting its quorum
        with SYSTEM_ERROR, outcome unknown; logged. Returns how many."""
        fail = getattr(self.store, "fail_waiting_puts", None)
        if fail is None:
            return 0
        reason = f"broker shutting down; the quorum did not come within {SHUTDOWN_QUORUM_WAIT_S:g} s"
        failed = int(fail(reason))
        if failed:
            log.warning(
                "%d puts still awaiting their DLedger quorum %.0f s into the shutdown: answered "
                "SYSTEM_ERROR (outcome unknown; a retry may store a message twice)",
                failed,
                SHUTDOWN_QUORUM_WAIT_S,
            )
        return failed

    async def _abandon(self) -> None:
        """Undo a failed start."""
        self._ready = False
        self._started = False
        await self._stop_metrics()
        if self.ctx is not None:
            await self.ctx.hold.stop()
            if self.ctx.pop is not None:
                await self.ctx.pop.shutdown()  # closes the pop journal
        await self._stop_periodic()
        for server in (self._fast_server, self._server):
            if server is not None:
                await server.close()
        await self._release()

    async def _release(self) -> None:
        """The last step of shutdown (or of a failed start): the store, the worker threads and
        the outbound remoting client."""
        await self._close_store()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        if self._client is not None:
            await self._client.close()

    async def _close_store(self) -> None:
        store = self.store
        if store is None:
            return
        if store.reput is not None and isinstance(store.commitlog.append_listener, LoopWakeup):
            store.commitlog.append_listener = store.reput.wakeup  # the loop is about to go
        if store.dispatch_window is not None:
            store.dispatch_window.settle()  # the records of a window still waiting, on the loop
            store.dispatch_window = None
        store.flushed_dispatch_wake = None
        if store.reput is not None and self.ctx is not None:
            with contextlib.suppress(ValueError):
                store.reput.arrival_listeners.remove(self.ctx.hold.arrival_listener)
            if self.ctx.pop is not None:
                with contextlib.suppress(ValueError):
                    store.reput.arrival_listeners.remove(self.ctx.pop.arrival_listener)
        await asyncio.to_thread(store.shutdown)

    async def _stop_periodic(self) -> None:
        tasks, self._periodic = self._periodic, []
        await cancel_and_wait(*tasks)

    async def __aenter__(self) -> Broker:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    # -- requests ---------------------------------------------------------------------------
    async def _handle(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        if self.acl is not None:
            refused = self.acl.refusal(request, conn.remote_address, self._acl_log)
            if refused is not None:
                return refused
        handler = self._handlers.get(request.code)
        if handler is None:
            if not self._ready and not self._handlers:
                return create_response(
                    request, ResponseCode.SERVICE_NOT_AVAILABLE, "broker is starting; try again shortly"
                )
            return create_response(
                request,
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                REQUEST_CODE_NOT_SUPPORTED_REMARK.format(code=request.code),
            )
        if not self._ready:
            state = "shutting down" if self.ctx is not None else "starting"
            return create_response(request, ResponseCode.SERVICE_NOT_AVAILABLE, f"broker is {state}")
        self._in_flight += 1
        self._idle.clear()
        rpc = self._rpc
        try:
            if rpc is None:
                return await handler(conn, request)
            began = _perf_ns()  # rocketmq_rpc_latency, inline (RpcLatency.call_pure does the same)
            try:
                response = await handler(conn, request)
            except BaseException as exc:
                rpc.failed(request.code, exc, _perf_ns() - began)
                raise
            if response is not None:
                rpc.record(request.code, response.code, _perf_ns() - began)
            return response
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()

    def _handle_now(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand | bytes | Deferred | None:
        """The answer when ``request`` needs no waiting (see the transport's immediate handler);
        None sends it down :meth:`_handle`, which also answers every request while starting or
        shutting down."""
        if not self._ready:
            return None
        handler = self._immediate_handlers.get(request.code)
        if handler is None:
            return None
        if self.acl is not None:
            refused = self.acl.refusal(request, conn.remote_address, self._acl_log)
            if refused is not None:
                return refused
        timed = self._rpc_call
        if timed is None:
            return handler(conn, request)
        # rocketmq_rpc_latency: the handler called and timed in one call (compiled when the C
        # accelerator is in use: the clock reads and the count of a send's SUCCESS cost no
        # opcode); a DEFERRED answer is not counted here but when it is given (ctx.deferred)
        return timed(handler, conn, request)

    def _on_connection(self, conn: Connection) -> None:
        conn.add_close_callback(self._on_channel_close)

    def _on_channel_close(self, conn: Connection) -> None:
        ctx = self.ctx
        if ctx is None:
            return
        ctx.consumers.do_channel_close_event(conn)
        ctx.producers.do_channel_close_event(conn)

    def _on_consumer_ids_changed(self, group: str, channels: list[Channel]) -> None:
        ctx = self.ctx
        if ctx is not None:
            group_cfg = ctx.groups.get(group)
            if group_cfg is not None and not group_cfg.notify_consumer_ids_changed_enable:
                return
        for channel in channels:
            if channel.closed:
                continue
            notify = create_request(
                RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group}, oneway=True
            )
            try:
                channel.send_oneway(notify)
            except ConnectionClosed:
                pass

    # -- periodic work ----------------------------------------------------------------------
    def _every(self, interval_s: float, fn: Callable[[], object], name: str) -> None:
        async def run() -> None:
            while True:
                await asyncio.sleep(interval_s)
                try:
                    result = fn()
                    if isinstance(result, Awaitable):
                        await result
                except Exception:
                    log.exception("periodic task %s failed", name)

        self._periodic.append(asyncio.get_running_loop().create_task(run(), name=name))

    def _sample_stats(self) -> None:
        ctx = self._require_ctx()
        stats = ctx.store.stats
        ctx.tps.sample(time.monotonic(), stats.put_count, stats.get_found)

    def _scan_channels(self) -> None:
        ctx = self._require_ctx()
        ctx.consumers.scan_not_active_channels()
        ctx.producers.scan_not_active_channels()

    def _persist_offsets(self) -> None:
        ctx = self._require_ctx()
        if ctx.offsets.begin_persist() and self._offsets_persister is not None:
            self._offsets_persister.request()


async def serve_broker(
    broker_config: BrokerConfig, store_config: StoreConfig, stop: asyncio.Event, *, freeze_heap: bool = False
) -> None:
    """Run a broker until ``stop`` is set; ``freeze_heap``: a process of its own, whose start
    objects are then frozen (:func:`~rocketq.remoting.eventloop.freeze_start_heap`)."""
    broker = Broker(broker_config, store_config)
    await broker.start()
    if freeze_heap:
        eventloop.freeze_start_heap()
    try:
        await stop.wait()
    finally:
        await broker.shutdown()


def run_broker(broker_config: BrokerConfig, store_config: StoreConfig) -> None:
    """Run a broker in this process until SIGINT or SIGTERM."""

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        # the watch stays armed until the process is gone: what follows the shutdown (the
        # loop's close, the interpreter's exit) waits for worker threads too
        watch = ShutdownWatch(loop, backstop_s=BACKSTOP_S)

        def stopping() -> None:
            stop.set()
            watch.arm()

        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stopping)
        await serve_broker(broker_config, store_config, stop, freeze_heap=True)

    eventloop.run(main())


__all__ = ["Broker", "run_broker", "serve_broker"]
