"""The client-session calls of ``apache.rocketmq.v2.MessagingService``, shared by both endpoints.

Heartbeat, NotifyClientTermination and Telemetry read no messages, so the broker's own endpoint
(:class:`~rocketq.proxy.servicer.MessagingServicer`) and the cluster proxy
(:class:`~rocketq.proxy.cluster.ClusterServicer`) answer them alike::

    call                      answer
    ------------------------  ------------------------------------------------------------------
    Heartbeat                 ``status OK`` (liveness is the Telemetry stream, not this call)
    NotifyClientTermination   the client id of ``x-mq-client-id`` is forgotten: its stream ends
                              and its sent-to topics are dropped; ``status OK``
    Telemetry                 one session per client id (:func:`~rocketq.proxy.telemetry.
                              telemetry_stream`); every Settings is answered with
                              ``{status OK, settings}`` from :meth:`telemetry_settings`

What differs per endpoint is only :meth:`ClientSessionServicer.telemetry_settings`: the settings
pushed back (retry policy, FIFO) and whatever the endpoint starts for a producer's topics, such as
the cluster proxy's orphaned-transaction checks.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import grpc

from rocketq.proxy import status
from rocketq.proxy.telemetry import (
    CLIENT_ID_HEADER,
    Session,
    SessionRegistry,
    metadata_value,
    telemetry_stream,
)
from rocketq.proxy.v2 import definition_pb2 as pb
from rocketq.proxy.v2 import service_pb2 as spb
from rocketq.proxy.v2 import service_pb2_grpc


class ClientSessionServicer(service_pb2_grpc.MessagingServiceServicer):
    """A MessagingService whose client sessions live in :attr:`sessions` (see the module
    docstring); subclasses give :meth:`telemetry_settings` and the message calls."""

    def __init__(self) -> None:
        self.sessions = SessionRegistry()

    async def Heartbeat(
        self, request: spb.HeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> spb.HeartbeatResponse:
        return spb.HeartbeatResponse(status=status.ok())

    async def NotifyClientTermination(
        self, request: spb.NotifyClientTerminationRequest, context: grpc.aio.ServicerContext
    ) -> spb.NotifyClientTerminationResponse:
        self.sessions.terminate(metadata_value(context, CLIENT_ID_HEADER))
        return spb.NotifyClientTerminationResponse(status=status.ok())

    async def Telemetry(
        self, request_iterator: AsyncIterator[spb.TelemetryCommand], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[spb.TelemetryCommand]:
        async for command in telemetry_stream(
            self.sessions, request_iterator, context, self.telemetry_settings
        ):
            yield command

    def telemetry_settings(self, session: Session, client: pb.Settings) -> pb.Settings:
        """The Settings answered to ``client``'s, called after ``session`` took them."""
        raise NotImplementedError


async def ack_entries(
    request: spb.AckMessageRequest,
    ack: Callable[[spb.AckMessageEntry], Awaitable[None]],
    error: Callable[[str, BaseException], pb.Status],
) -> spb.AckMessageResponse:
    """AckMessage of every entry of ``request`` by ``ack(entry)``, in order: each entry gets its
    own status (``error("AckMessage", exc)`` when ``ack`` raises), the response their summary."""
    results: list[spb.AckMessageResultEntry] = []
    for entry in request.entries:
        try:
            await ack(entry)
            st = status.ok()
        except Exception as exc:
            st = error("AckMessage", exc)
        results.append(
            spb.AckMessageResultEntry(
                message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=st
            )
        )
    top = status.of_entries([r.status for r in results], "entry to ack")
    return spb.AckMessageResponse(status=top, entries=results)


__all__ = ["ClientSessionServicer", "ack_entries"]
