"""Orphaned-transaction checks of a ``rocketq proxy`` (cluster mode) for its gRPC producers.

A broker asks about a half nobody resolved by sending CHECK_TRANSACTION_STATE (39) on a remoting
channel of the half's producer group, which it learns from HEART_BEAT. A gRPC producer's group is
its topic, so the proxy stands in for its gRPC producers on the remoting side::

    proxy                                        master broker
    HEART_BEAT{clientID, producerDataSet:  ──►   channel registered for each group
      [{groupName: <topic>}, ...]}
                                           ◄──   CHECK_TRANSACTION_STATE (oneway, body = half)
    TelemetryCommand{recover_orphaned_transaction_command{message, transaction_id}}
      pushed on the stream of one live producer of the topic (``SessionRegistry.push_to_producer``)
    EndTransaction(SOURCE_SERVER_CHECK)    ──►   END_TRANSACTION, fromTransactionCheck=true
      (ClusterServicer.EndTransaction)

Invariants:

* groups heartbeated = topics some live Telemetry stream with publishing settings names; each
  master broker of such a topic's route gets one HEART_BEAT listing all of its groups every
  ``interval_s`` and at once when a topic or broker is new to it;
* the heartbeats (and so the checks) use a remoting client of their own whose request handler
  answers code 39; other requests get REQUEST_CODE_NOT_SUPPORTED (oneway ones nothing);
* the pushed transaction id is the proxy's ``<offsets>@<broker name>`` form, built from the
  check's ``commitLogOffset`` / ``tranStateTableOffset``, so EndTransaction finds the broker;
* a check with no live producer of its topic is dropped (the broker asks again later).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os

from rocketq.client._routes import RouteCache
from rocketq.client.lite_pull import decode_messages
from rocketq.errors import ResponseCode, RocketqError
from rocketq.message import PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC
from rocketq.protocol.heartbeat import encode_producer_heartbeat
from rocketq.protocol.route import MASTER_ID
from rocketq.proxy import convert
from rocketq.proxy.telemetry import SessionRegistry
from rocketq.proxy.v2 import service_pb2 as spb
from rocketq.remoting import (
    Connection,
    RemotingClient,
    RemotingCommand,
    RequestCode,
    create_request,
)
from rocketq.remoting.command import not_supported_response
from rocketq.tasks import cancel_and_wait

log = logging.getLogger(__name__)

#: How often every broker is told again which producer groups the proxy stands for.
DEFAULT_HEARTBEAT_INTERVAL_S = 30.0


def encode_transaction_id(commit_log_offset: int, queue_offset: int, broker_name: str) -> str:
    """The gRPC transaction id of a half: ``<commit-log offset:016X><half queue offset:016X>@<broker>``."""
    return f"{commit_log_offset:016X}{queue_offset:016X}@{broker_name}"


def check_command(request: RemotingCommand, broker_name: str) -> tuple[str, spb.TelemetryCommand]:
    """(topic, Telemetry command) of a CHECK_TRANSACTION_STATE request; RocketqError/ValueError/
    KeyError when it is malformed."""
    ext = request.ext_fields
    tran_state_offset = int(ext["tranStateTableOffset"])
    commit_log_offset = int(ext["commitLogOffset"])
    broker_name = ext.get("brokerName") or broker_name
    if not broker_name:
        raise ValueError("the check names no broker")
    messages = decode_messages(request.body or b"")
    if not messages:
        raise ValueError("the check carries no message")
    half = messages[0]
    topic = half.properties.get(PROPERTY_REAL_TOPIC) or ext.get("topic") or half.topic
    real_queue = half.properties.get(PROPERTY_REAL_QUEUE_ID, "")
    half.topic = topic
    if real_queue.isdigit():
        half.queue_id = int(real_queue)
    command = spb.TelemetryCommand(
        recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
            message=convert.to_grpc_message(half, topic=topic),
            transaction_id=encode_transaction_id(commit_log_offset, tran_state_offset, broker_name),
        )
    )
    return topic, command


class OrphanChecks:
    """Heartbeats the producer groups of live gRPC producers and relays the brokers' checks."""

    def __init__(
        self,
        routes: RouteCache,
        sessions: SessionRegistry,
        *,
        client_id: str | None = None,
        interval_s: float = DEFAULT_HEARTBEAT_INTERVAL_S,
        timeout_s: float = 5.0,
    ) -> None:
        self.routes = routes
        self.sessions = sessions
        self.client_id = client_id or f"rocketq-proxy@{os.getpid()}"
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.remoting = RemotingClient(self.on_request)
        #: Topics some producer stream named (filtered by liveness at each pass).
        self._topics: set[str] = set()
        #: Broker address → groups its last successful heartbeat listed.
        self._beaten: dict[str, frozenset[str]] = {}
        #: Broker address → broker name (from the routes), for checks that name no broker.
        self._names: dict[str, str] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.checks_pushed = 0

    def watch(self, topics: set[str]) -> None:
        """A producer stream publishes ``topics``: heartbeat their groups (at once if new)."""
        new = topics - self._topics
        if not new and self._task is not None:
            return
        self._topics |= topics
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop(), name="rocketq-proxy-heartbeat")
        self._wake.set()

    async def close(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        await self.remoting.close()

    async def _loop(self) -> None:
        try:
            while True:
                self._wake.clear()
                await self.heartbeat_once()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.interval_s)
                    continue  # woken: only new topics / brokers
                self._beaten.clear()  # periodic: every broker again
        finally:
            await self.remoting.close()

    async def heartbeat_once(self) -> None:
        """Heartbeat every master whose group set is not yet what the live producers need."""
        live = sorted(t for t in self._topics if self.sessions.producers_of(t))
        wanted: dict[str, set[str]] = {}
        for topic in live:
            try:
                route_data = await self.routes.fetch_route(topic)
            except RocketqError as exc:
                log.info("route of %s unavailable for the producer heartbeat: %s", topic, exc)
                continue
            for bd in route_data.broker_datas:
                addr = bd.broker_addrs.get(MASTER_ID)
                if addr:
                    self._names[addr] = bd.broker_name
                    wanted.setdefault(addr, set()).add(topic)
        for addr, groups in sorted(wanted.items()):
            if self._beaten.get(addr) == frozenset(groups):
                continue
            request = create_request(
                RequestCode.HEART_BEAT, {}, encode_producer_heartbeat(self.client_id, sorted(groups))
            )
            try:
                response = await self.remoting.invoke(addr, request, self.timeout_s)
            except RocketqError as exc:
                log.warning("producer heartbeat to %s failed: %s", addr, exc)
                continue
            if response.code != ResponseCode.SUCCESS:
                log.warning("broker %s refused the heartbeat: %s %s", addr, response.code, response.remark)
                continue
            self._beaten[addr] = frozenset(groups)

    async def on_request(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        if request.code != RequestCode.CHECK_TRANSACTION_STATE:
            return not_supported_response(request, f"request code {request.code} not supported")
        try:
            topic, command = check_command(request, self._names.get(conn.remote_address, ""))
        except (RocketqError, KeyError, ValueError) as exc:
            log.warning("malformed CHECK_TRANSACTION_STATE from %s: %s", conn.remote_address, exc)
            return None
        if self.sessions.push_to_producer(topic, command):
            self.checks_pushed += 1
        else:
            log.info("no live gRPC producer of %s for an orphaned transaction check", topic)
        return None


__all__ = [
    "DEFAULT_HEARTBEAT_INTERVAL_S",
    "OrphanChecks",
    "check_command",
    "encode_transaction_id",
]
