"""What the request processors share: settings, the store, the metadata tables, the registries.

:class:`BrokerContext` is built by :class:`~rocketq.broker.server.Broker` and handed to every
processor; processors keep no state of their own beyond it.

Blocking store work (reads that may touch the disk, puts that wait for a SYNC_FLUSH group commit,
lookups by key or time) goes through :meth:`BrokerContext.blocking`, which runs it in a worker
thread and counts it, so shutdown can wait for those calls to return before the store's files
are closed (:meth:`drain_blocking`). Everything else runs on the event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from rocketq.broker.client_manager import ConsumerManager, ProducerManager
from rocketq.broker.config import BrokerConfig
from rocketq.broker.config_file import PersistScheduler
from rocketq.broker.consumer_offset import ConsumerOffsetManager
from rocketq.broker.deferred import DeferredAnswers
from rocketq.broker.long_polling import PullRequestHoldService
from rocketq.broker.rebalance_lock import RebalanceLockManager
from rocketq.broker.stats import TpsSampler
from rocketq.broker.subscription_group import SubscriptionGroupManager
from rocketq.broker.topic_config import TopicConfigManager
from rocketq.errors import ServiceNotAvailable, StoreError
from rocketq.store.message_store import MessageStore

if TYPE_CHECKING:
    from rocketq.broker.dledger_role import DLedgerRoleHandler
    from rocketq.broker.metrics import BrokerMetrics
    from rocketq.broker.pop.service import PopService
    from rocketq.broker.trace import BrokerTracer

P = ParamSpec("P")
T = TypeVar("T")


@dataclass(eq=False)
class BrokerContext:
    config: BrokerConfig
    store: MessageStore
    topics: TopicConfigManager
    groups: SubscriptionGroupManager
    offsets: ConsumerOffsetManager
    consumers: ConsumerManager
    producers: ProducerManager
    hold: PullRequestHoldService
    #: ``ip:port`` of this broker (record STOREHOST, name-server registration).
    broker_addr: str
    #: Asks for a (debounced) re-registration with the name servers after a topic change.
    request_register: Callable[[], None] = lambda: None
    #: Writes ``topics.json`` after topic changes (set by the broker; None: nothing to wait for).
    topics_persister: PersistScheduler | None = None
    #: Writes ``subscriptionGroup.json`` and ``consumerOffset.json`` (set by the broker).
    groups_persister: PersistScheduler | None = None
    offsets_persister: PersistScheduler | None = None
    #: Threads for blocking store calls (SYNC_FLUSH puts wait here for their group commit).
    executor: concurrent.futures.ThreadPoolExecutor | None = None
    #: Pop consumption engine (gRPC SimpleConsumer / PushConsumer), set by the broker at start.
    pop: PopService | None = None
    #: Message trace recorder (``brokerTraceEnable``), set by the broker at start; None = off.
    trace: BrokerTracer | None = None
    #: The counters of ``/metrics`` (set by the broker when it serves metrics; None: count nothing).
    metrics: BrokerMetrics | None = None
    locks: RebalanceLockManager = field(default_factory=RebalanceLockManager)
    tps: TpsSampler = field(default_factory=TpsSampler)
    boot_timestamp_ms: int = field(default_factory=lambda: time.time_ns() // 1_000_000)
    accepting: bool = True
    #: False while this broker is a DLedger follower: master-only work (transaction checks) pauses
    is_master: bool = True
    #: The DLedger role handler (DLedger mode only; broker/dledger_role.py).
    dledger_role: DLedgerRoleHandler | None = None
    #: Requests taken in ``data_received`` and answered later (a DLedger leader's sends).
    deferred: DeferredAnswers = field(default_factory=DeferredAnswers)
    _in_flight: int = field(default=0, init=False)
    _idle: asyncio.Event = field(default_factory=asyncio.Event, init=False)

    def __post_init__(self) -> None:
        self._idle.set()

    async def blocking(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn`` in a worker thread (the event loop never waits on the disk). A caller
        that is cancelled stops waiting; the call itself still counts until it returns."""
        if not self.accepting:
            raise ServiceNotAvailable("broker is shutting down")
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self.executor, lambda: fn(*args, **kwargs))
        self._in_flight += 1
        self._idle.clear()
        future.add_done_callback(self._call_done)
        return await asyncio.shield(future)

    def _call_done(self, _future: asyncio.Future[T]) -> None:
        self._in_flight -= 1
        if self._in_flight == 0:
            self._idle.set()

    async def topics_durable(self) -> None:
        """Return once every topic change made so far is in ``topics.json``. A send that
        created its topic (or found it just created) is answered only after that, as RocketMQ
        persists a new topic before storing the message: otherwise an acknowledged message
        could sit in a topic that a crash forgets.

        When ``topics.json`` cannot be written (DiskFull) the topics sends created since the
        last successful write are dropped again and the error propagates: the send fails
        (SERVICE_NOT_AVAILABLE) rather than store a message in a topic a restart forgets."""
        persister = self.topics_persister
        if persister is not None and persister.pending:
            try:
                await persister.flush()
            except (ServiceNotAvailable, StoreError):
                for topic in sorted(self.topics.unsaved_created):
                    self.topics.forget_unsaved(topic)
                raise
            self.topics.unsaved_created.clear()

    async def groups_durable(self) -> None:
        """Return once every subscription-group change made so far is in its file."""
        persister = self.groups_persister
        if persister is not None and persister.pending:
            await persister.flush()

    async def offsets_durable(self) -> None:
        """Write the consumer offsets now if they changed, and return once written."""
        persister = self.offsets_persister
        if persister is None:
            return
        if self.offsets.begin_persist():
            persister.request()
        if persister.pending:
            await persister.flush()

    @property
    def blocking_in_flight(self) -> int:
        return self._in_flight

    async def drain_blocking(self, timeout_s: float) -> bool:
        """Stop accepting blocking calls and wait for the running ones; False on timeout."""
        self.accepting = False
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        except TimeoutError:
            return False
        return True
