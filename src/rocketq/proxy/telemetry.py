"""Telemetry sessions: one bidirectional stream per client, keyed by ``x-mq-client-id``.

A session holds the client's last Settings and an outbound queue. The stream handler answers
every Settings the client sends (through :func:`rocketq.proxy.settings.reply_settings`) and
forwards whatever the server queues, such as ``recover_orphaned_transaction_command`` for a
transaction half nobody resolved::

    client                                  server
    TelemetryCommand{settings}      ──►     session.settings = ...; reply queued
                                    ◄──     TelemetryCommand{status OK, settings}
                                    ◄──     TelemetryCommand{recover_orphaned_transaction_command}
    EndTransaction(SOURCE_SERVER_CHECK)──►  (unary call)

Producers are found by topic: gRPC producers have no group, so (as in the RocketMQ 5 proxy) a
transaction's producer group is its topic, and a producer "belongs" to every topic it lists in
``publishing.topics`` or has sent to. A new stream from the same client id replaces the old one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import grpc

from rocketq.proxy import status
from rocketq.proxy.v2 import definition_pb2 as pb
from rocketq.proxy.v2 import service_pb2 as spb

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Session:
    client_id: str
    settings: pb.Settings = field(default_factory=pb.Settings)
    topics: set[str] = field(default_factory=set)
    outbound: asyncio.Queue[spb.TelemetryCommand | None] = field(default_factory=asyncio.Queue)
    opened_monotonic: float = field(default_factory=time.monotonic)

    @property
    def is_producer(self) -> bool:
        return self.settings.client_type == pb.PRODUCER or self.settings.HasField("publishing")

    def close(self) -> None:
        self.outbound.put_nowait(None)


class SessionRegistry:
    """The open Telemetry streams and what each client publishes to."""

    def __init__(self) -> None:
        self._sessions: dict[str, Session] = {}
        #: Topics a client id sent to before (or without) opening a stream.
        self._sent_topics: dict[str, set[str]] = {}
        self.pushed = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def open(self, client_id: str) -> Session:
        old = self._sessions.pop(client_id, None)
        if old is not None:
            old.close()
        session = Session(client_id)
        session.topics |= self._sent_topics.get(client_id, set())
        self._sessions[client_id] = session
        return session

    def close(self, session: Session) -> None:
        if self._sessions.get(session.client_id) is session:
            del self._sessions[session.client_id]
        session.close()

    def terminate(self, client_id: str) -> None:
        """NotifyClientTermination: forget the client."""
        self._sent_topics.pop(client_id, None)
        session = self._sessions.pop(client_id, None)
        if session is not None:
            session.close()

    def update_settings(self, session: Session, settings: pb.Settings) -> None:
        session.settings.CopyFrom(settings)
        if settings.HasField("publishing"):
            session.topics |= {t.name for t in settings.publishing.topics}

    def note_send(self, client_id: str, topic: str) -> None:
        if not client_id:
            return
        known = self._sent_topics.setdefault(client_id, set())
        if topic not in known:
            known.add(topic)
            session = self._sessions.get(client_id)
            if session is not None:
                session.topics.add(topic)

    def producers_of(self, topic: str) -> list[Session]:
        return [s for s in self._sessions.values() if s.is_producer and topic in s.topics]

    def push_to_producer(self, topic: str, command: spb.TelemetryCommand) -> bool:
        """Queue ``command`` on the stream of one live producer of ``topic`` (the one that
        connected most recently); False when there is none."""
        producers = self.producers_of(topic)
        if not producers:
            return False
        target = max(producers, key=lambda s: s.opened_monotonic)
        target.outbound.put_nowait(command)
        self.pushed += 1
        log.info("asked gRPC producer %s about an orphaned transaction of %s", target.client_id, topic)
        return True

    def close_all(self) -> None:
        for session in list(self._sessions.values()):
            session.close()
        self._sessions.clear()


__all__ = ["Session", "SessionRegistry"]


#: The metadata key that names a client session (every SDK sends it).
CLIENT_ID_HEADER = "x-mq-client-id"


def metadata_value(context: grpc.aio.ServicerContext, key: str) -> str:
    """The value of invocation metadata ``key``, or ``""``."""
    for k, v in context.invocation_metadata() or ():
        if k == key:
            return str(v)
    return ""


async def telemetry_stream(
    sessions: SessionRegistry,
    request_iterator: AsyncIterator[spb.TelemetryCommand],
    context: grpc.aio.ServicerContext,
    on_settings: Callable[[Session, pb.Settings], pb.Settings],
) -> AsyncIterator[spb.TelemetryCommand]:
    """One Telemetry stream: a reader task answers every Settings with ``{status OK,
    settings=on_settings(...)}`` (called after the session took the client's settings); the
    stream yields whatever the session's outbound queue holds until the session ends."""
    session = sessions.open(metadata_value(context, CLIENT_ID_HEADER))

    async def read() -> None:
        try:
            async for command in request_iterator:
                if command.HasField("settings"):
                    sessions.update_settings(session, command.settings)
                    reply = on_settings(session, command.settings)
                    session.outbound.put_nowait(spb.TelemetryCommand(status=status.ok(), settings=reply))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.info("telemetry stream of %s ended: %s", session.client_id, exc)
        session.close()

    reader = asyncio.get_running_loop().create_task(read())
    try:
        while True:
            command = await session.outbound.get()
            if command is None:
                return
            yield command
    finally:
        reader.cancel()
        sessions.close(session)
