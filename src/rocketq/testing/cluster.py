"""An in-process rocketq cluster for tests: a name server and N brokers on one background loop.

Theory of operation::

    caller thread(s)                      "rocketq-test-cluster" thread
    ────────────────                      ─────────────────────────────
    start() ─ run_coroutine_threadsafe ─► NameServer.start()          (127.0.0.1:0)
            ◄─ result(start_timeout_s) ─  Broker.start() per broker   (127.0.0.1:0, registers)
                                          GrpcEndpoint.start()        (optional, port 0)
    create_topic() / restart_broker() ──► the same loop, bounded waits
    stop() ─────────────────────────────► GrpcEndpoint.stop, Broker.shutdown, NameServer.close
            ── loop.stop(); join thread ─ cancel leftovers, shut the default executor, close loop

The servers are the ones ``rocketq serve`` runs (:class:`~rocketq.namesrv.server.NameServer`,
:class:`~rocketq.broker.Broker`, :class:`~rocketq.proxy.server.GrpcEndpoint`), wired the same
way, so a test talks to the real protocol over real sockets. They run on a private event loop in
a thread of their own, so synchronous tests and asyncio tests (whose loop is a different one) can
both use the cluster.

Invariants:

* every wait on the loop thread is bounded (``start_timeout_s`` for start and restart,
  ``call_timeout_s`` for other calls); a start that does not finish in time, or fails, raises
  :class:`ClusterStartError` after everything already started was stopped again;
* :meth:`InProcessCluster.stop` is idempotent; when it returns, the loop thread has ended and
  the stores are shut down (files closed); the data directory is removed when the cluster
  created it (``data_dir=None``) and ``keep_data`` is false;
* each broker's data lives in ``<data_dir>/<broker name>``; ports are picked by the OS on
  127.0.0.1 and kept across :meth:`InProcessCluster.restart_broker`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Coroutine, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from rocketq.broker import Broker, BrokerConfig
from rocketq.config import FlushDiskType, StoreConfig
from rocketq.errors import ClusterStartError, RocketqError
from rocketq.message import validate_topic
from rocketq.namesrv.server import NameServer, NamesrvConfig
from rocketq.protocol.topic import TopicConfig
from rocketq.remoting import eventloop
from rocketq.store.message_store import MessageStore
from rocketq.testing.loop_thread import run_loop

if TYPE_CHECKING:  # grpcio is imported only when the gRPC endpoint is asked for
    from rocketq.proxy.server import GrpcEndpoint

log = logging.getLogger(__name__)

T = TypeVar("T")

HOST = "127.0.0.1"
#: Test-sized store (RocketMQ key → value): 16 MiB CommitLog segments (RocketMQ: 1 GiB) still
#: hold a maximum-size (4 MiB) message; smaller ConsumeQueue and index files.
TEST_STORE_SIZES: Mapping[str, int] = {
    "mapped_file_size_commit_log": 16 << 20,
    "mapped_file_size_consume_queue": 6000 * 20,
    "max_hash_slot_num": 5000,
    "max_index_num": 20000,
}
DEFAULT_START_TIMEOUT_S = 30.0
DEFAULT_CALL_TIMEOUT_S = 30.0
#: How long stop() waits for the loop thread once the servers are shut down.
THREAD_JOIN_TIMEOUT_S = 30.0


def broker_names(count: int) -> list[str]:
    """``broker-a``, ``broker-b``, … (then ``broker-26``, … past the alphabet)."""
    return [f"broker-{chr(ord('a') + i)}" if i < 26 else f"broker-{i}" for i in range(count)]


class InProcessCluster:
    """A name server and ``brokers`` brokers (one cluster) running inside this process.

    >>> with InProcessCluster() as cluster:          # doctest: +SKIP
    ...     cluster.create_topic("T", queues=4)
    ...     producer = Producer("PG", namesrv_addr=cluster.namesrv_addr)

    ``broker_options`` / ``store_options`` are extra :class:`~rocketq.broker.BrokerConfig` /
    :class:`~rocketq.config.StoreConfig` fields applied to every broker (they win over the test
    defaults, except the addresses, ports, names and data directory the cluster owns)."""

    def __init__(
        self,
        brokers: int = 1,
        *,
        cluster_name: str = "DefaultCluster",
        data_dir: str | os.PathLike[str] | None = None,
        keep_data: bool = False,
        grpc: bool = False,
        auto_create_topic: bool = True,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
        broker_options: Mapping[str, Any] | None = None,
        store_options: Mapping[str, Any] | None = None,
    ) -> None:
        if brokers < 1:
            raise ValueError(f"brokers={brokers} must be at least 1")
        if grpc and brokers != 1:
            raise ValueError(f"grpc=True serves one broker; brokers={brokers}")
        if start_timeout_s <= 0 or call_timeout_s <= 0:
            raise ValueError("start_timeout_s and call_timeout_s must be positive")
        self.cluster_name = cluster_name
        self.broker_names = broker_names(brokers)
        self.keep_data = keep_data
        self.grpc = grpc
        self.auto_create_topic = auto_create_topic
        self.start_timeout_s = start_timeout_s
        self.call_timeout_s = call_timeout_s
        self.broker_options = dict(broker_options or {})
        self.store_options = dict(store_options or {})
        self._given_data_dir = os.fspath(data_dir) if data_dir is not None else None
        self.data_dir: str | None = self._given_data_dir
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._namesrv: NameServer | None = None
        self._brokers: dict[str, Broker] = {}
        self._broker_ports: dict[str, int] = {}
        self._grpc: GrpcEndpoint | None = None
        self._start_task: asyncio.Task[None] | None = None  # the running start, for stop to await
        self._grpc_port = 0
        self._lock = threading.Lock()
        self._running = False

    # -- addresses ------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._running

    @property
    def namesrv_addr(self) -> str:
        """``127.0.0.1:PORT`` of the name server (clients' ``namesrv_addr``)."""
        if self._namesrv is None:
            raise RocketqError("the cluster is not started")
        return f"{HOST}:{self._namesrv.port}"

    @property
    def broker_addrs(self) -> dict[str, str]:
        """Broker name → ``127.0.0.1:PORT`` (remoting)."""
        return {name: f"{HOST}:{port}" for name, port in self._broker_ports.items()}

    @property
    def grpc_endpoint(self) -> str | None:
        """``127.0.0.1:PORT`` of the RocketMQ 5 gRPC endpoint, or None when it is off."""
        return self._grpc.address if self._grpc is not None else None

    def broker(self, name: str) -> Broker:
        """The running :class:`~rocketq.broker.Broker` ``name`` (its methods belong to the
        cluster's loop: call them through :meth:`call`)."""
        try:
            return self._brokers[name]
        except KeyError:
            raise RocketqError(
                f"no running broker {name!r} (brokers: {', '.join(self.broker_names)})"
            ) from None

    def store(self, name: str | None = None) -> MessageStore:
        """The :class:`~rocketq.store.MessageStore` of broker ``name`` (default: the first), for
        assertions; it is thread-safe, but leave writing to the clients."""
        broker = self.broker(name if name is not None else self.broker_names[0])
        if broker.store is None:
            raise RocketqError(f"broker {broker.config.broker_name!r} has no open store")
        return broker.store

    def wait_dispatched(self, timeout_s: float | None = None) -> None:
        """Block until every message stored so far on every broker is in its ConsumeQueue and
        the index (dispatch runs behind the append), so store offsets can be asserted on."""
        timeout_s = timeout_s if timeout_s is not None else self.call_timeout_s
        for name in self.broker_names:
            if not self.store(name).wait_dispatched(timeout_s):
                raise RocketqError(f"broker {name} did not dispatch its messages within {timeout_s:.1f} s")

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> InProcessCluster:
        """Start the name server and the brokers; returns once every broker is registered.
        Raises :class:`ClusterStartError` (everything stopped again) on failure or timeout."""
        with self._lock:
            if self._running:
                return self
            if self._given_data_dir is None:
                self.data_dir = tempfile.mkdtemp(prefix="rocketq-test-")
            loop = self._new_loop()
            self._loop = loop
            self._thread = threading.Thread(
                target=run_loop, args=(loop,), name="rocketq-test-cluster", daemon=True
            )
            self._thread.start()
            self._running = True
        try:
            self._call(self._start(), self.start_timeout_s, "start")
        except BaseException as exc:
            with contextlib.suppress(Exception):
                self.stop()
            if isinstance(exc, ClusterStartError):
                raise
            if isinstance(exc, Exception):
                raise ClusterStartError(f"in-process cluster did not start: {exc}") from exc
            raise
        log.info(
            "in-process cluster %s: name server %s, brokers %s",
            self.cluster_name,
            self.namesrv_addr,
            self.broker_addrs,
        )
        return self

    def stop(self) -> None:
        """Shut every server down cleanly, end the loop thread, remove a temporary data
        directory (unless ``keep_data``). Safe to call more than once."""
        with self._lock:
            if not self._running:
                return
            self._running = False
            loop, thread = self._loop, self._thread
        try:
            if loop is not None and not loop.is_closed():
                future = asyncio.run_coroutine_threadsafe(self._stop(), loop)
                try:
                    future.result(self.call_timeout_s + THREAD_JOIN_TIMEOUT_S)
                except Exception:  # a timeout included: stop anyway
                    log.exception("in-process cluster did not stop cleanly")
                    future.cancel()
                with contextlib.suppress(RuntimeError):  # the loop already closed
                    loop.call_soon_threadsafe(loop.stop)
            if thread is not None:
                thread.join(THREAD_JOIN_TIMEOUT_S)
                if thread.is_alive():
                    log.warning("in-process cluster loop thread still running after stop")
        finally:
            self._loop = None
            self._thread = None
            self._namesrv = None
            self._brokers.clear()
            self._broker_ports.clear()
            self._grpc = None
            if self._given_data_dir is None and self.data_dir is not None and not self.keep_data:
                shutil.rmtree(self.data_dir, ignore_errors=True)
                self.data_dir = None

    def __enter__(self) -> InProcessCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> InProcessCluster:
        """For ``async with``: starts on a worker thread, so the caller's loop keeps running."""
        return await asyncio.to_thread(self.start)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)

    # -- operations -----------------------------------------------------------------------------
    def call(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run ``coro`` on the cluster's loop and return its result (bounded by ``timeout_s``,
        default ``call_timeout_s``)."""
        return self._call(coro, timeout_s if timeout_s is not None else self.call_timeout_s, "call")

    def create_topic(self, topic: str, queues: int = 8, *, perm: int = 6) -> None:
        """Create (or update) ``topic`` with ``queues`` read and write queues on every broker;
        returns once every broker registered it with the name server (routes resolve)."""
        validate_topic(topic)
        if not 1 <= queues <= 1024:
            raise ValueError(f"queues={queues} is outside 1..1024")
        self.call(self._create_topic(topic, queues, perm))

    def restart_broker(self, name: str) -> None:
        """Shut broker ``name`` down cleanly and start it again on the same port and data."""
        self.broker(name)
        self._call(self._restart_broker(name), self.start_timeout_s + self.call_timeout_s, "restart")

    # -- loop side ------------------------------------------------------------------------------
    def _call(self, coro: Coroutine[Any, Any, T], timeout_s: float, what: str) -> T:
        loop = self._loop
        if loop is None or not self._running:
            coro.close()
            raise RocketqError("the cluster is not started")
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            if what in ("start", "restart"):
                raise ClusterStartError(
                    f"in-process cluster {what} did not finish within {timeout_s:.1f} s"
                ) from None
            raise RocketqError(f"in-process cluster call did not finish within {timeout_s:.1f} s") from None

    @staticmethod
    def _new_loop() -> asyncio.AbstractEventLoop:
        factory = eventloop.loop_factory()
        return factory() if factory is not None else asyncio.new_event_loop()

    def _configs(self, name: str, port: int) -> tuple[BrokerConfig, StoreConfig]:
        assert self.data_dir is not None and self._namesrv is not None
        store_fields: dict[str, Any] = {
            **TEST_STORE_SIZES,
            "flush_disk_type": FlushDiskType.ASYNC_FLUSH,
            **self.store_options,
            "store_path_root_dir": os.path.join(self.data_dir, name),
        }
        broker_fields: dict[str, Any] = {
            "auto_create_topic_enable": self.auto_create_topic,
            **self.broker_options,
            "broker_cluster_name": self.cluster_name,
            "broker_name": name,
            "broker_id": 0,
            "namesrv_addr": self.namesrv_addr,
            "broker_ip1": HOST,
            "bind_address": HOST,
            "listen_port": port,
            "fast_listen_port_enable": False,
        }
        return BrokerConfig(**broker_fields), StoreConfig(**store_fields)

    async def _start(self) -> None:
        self._start_task = asyncio.current_task()
        assert self.data_dir is not None
        if os.path.exists(self.data_dir) and not os.path.isdir(self.data_dir):
            raise ClusterStartError(f"data directory {self.data_dir} exists and is not a directory")
        namesrv = NameServer(NamesrvConfig(bind_address=HOST, listen_port=0))
        self._namesrv = namesrv  # before it starts: _stop closes it even after a cancelled start
        await namesrv.start()
        for name in self.broker_names:
            await self._start_broker(name, 0)
        if self.grpc:
            await self._start_grpc(self._brokers[self.broker_names[0]])

    async def _start_broker(self, name: str, port: int) -> None:
        broker_cfg, store_cfg = self._configs(name, port)
        broker = Broker(broker_cfg, store_cfg)
        # Known before it starts: a start given up on (start_timeout_s) may be cancelled after
        # the broker is up, while it registers, and _stop must then shut it down. (A broker whose
        # own start failed has undone it; its shutdown does nothing.)
        self._brokers[name] = broker
        try:
            await broker.start()
        except Exception as exc:
            del self._brokers[name]
            raise ClusterStartError(
                f"broker {name} (data in {store_cfg.store_path_root_dir}) did not start: {exc}"
            ) from exc
        self._broker_ports[name] = broker.port
        results = broker.registrar.last_results if broker.registrar is not None else {}
        if any(result != "ok" for result in results.values()):
            raise ClusterStartError(f"broker {name} could not register with the name server: {results}")

    async def _start_grpc(self, broker: Broker) -> None:
        from rocketq.proxy.server import GrpcConfig, GrpcEndpoint  # noqa: PLC0415 - optional grpcio

        endpoint = GrpcEndpoint(broker, GrpcConfig(host=HOST, port=self._grpc_port))
        await endpoint.start()
        self._grpc = endpoint
        self._grpc_port = endpoint.port

    async def _stop(self) -> None:
        # A start given up on (start_timeout_s) is cancelled, but a broker part-way through its
        # start first undoes what it opened: let that finish before the loop goes.
        starting, self._start_task = self._start_task, None
        if starting is not None and not starting.done():
            await asyncio.wait([starting], timeout=self.call_timeout_s)
        if self._grpc is not None:
            endpoint, self._grpc = self._grpc, None
            await endpoint.stop()
        for name in reversed(list(self._brokers)):
            await self._brokers.pop(name).shutdown()
        if self._namesrv is not None:
            await self._namesrv.close()

    async def _create_topic(self, topic: str, queues: int, perm: int) -> None:
        for broker in self._brokers.values():
            ctx, registrar = broker.ctx, broker.registrar
            if ctx is None or registrar is None:
                raise RocketqError(f"broker {broker.config.broker_name} is not running")
            ctx.topics.update(TopicConfig(topic, queues, queues, perm))
            await ctx.topics_durable()
            results = await registrar.register_all()
            if any(result != "ok" for result in results.values()):
                raise RocketqError(
                    f"broker {broker.config.broker_name} could not register topic {topic}: {results}"
                )

    async def _restart_broker(self, name: str) -> None:
        broker = self._brokers.pop(name)
        port = self._broker_ports[name]
        endpoint = self._grpc if self._grpc is not None and self._grpc.broker is broker else None
        if endpoint is not None:
            self._grpc = None
            await endpoint.stop()
        await broker.shutdown()
        await self._start_broker(name, port)
        if endpoint is not None:
            await self._start_grpc(self._brokers[name])


__all__ = [
    "DEFAULT_START_TIMEOUT_S",
    "TEST_STORE_SIZES",
    "ClusterStartError",
    "InProcessCluster",
    "broker_names",
]
