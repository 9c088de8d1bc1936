"""The Settings a server answers on the Telemetry stream (server half of the settings exchange).

Every ``TelemetryCommand{settings}`` a client sends is answered with
``TelemetryCommand{status OK, settings}``: the client's own settings with the server's fields
filled in. Without ``status`` the Python SDK ignores the reply; without ``max_body_size`` every
send fails; the Node SDK asserts an exponential backoff for producers::

    client type        fields set by the server
    -----------------  ----------------------------------------------------------------------
    PRODUCER           publishing.max_body_size, publishing.validate_message_type=true,
                       backoff_policy{max_attempts 3, exponential 10 ms .. 1 s, x2}
    PUSH/SIMPLE        subscription{fifo (group's consumeMessageOrderly), receive_batch_size 32,
                       long_polling_timeout (client's, else 20 s)},
                       backoff_policy{max_attempts = max delivery attempts,
                       customized 1s 5s 10s 30s 1m 2m .. 10m 20m 30m 1h 2h}
    all                metric{on false} (no OTLP exporter is started by the SDK)
"""

from __future__ import annotations

from dataclasses import dataclass

from rocketq.proxy.convert import ms_duration
from rocketq.proxy.v2 import definition_pb2 as pb

#: RocketMQ's message delay levels 1s .. 2h, the consumer retry back-off of RocketMQ 5.
CONSUMER_BACKOFF_MS = (
    1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000,
    420_000, 480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class ServerSettings:
    max_body_size_bytes: int = 4 * 1024 * 1024
    producer_max_attempts: int = 3
    producer_backoff_initial_ms: int = 10
    producer_backoff_max_ms: int = 1_000
    producer_backoff_multiplier: float = 2.0
    receive_batch_size: int = 32
    long_polling_timeout_ms: int = 20_000


def reply_settings(
    client: pb.Settings, server: ServerSettings, *, fifo: bool = False, max_delivery_attempts: int = 17
) -> pb.Settings:
    """The Settings to answer ``client`` with (see the module table)."""
    out = pb.Settings()
    out.CopyFrom(client)
    out.metric.CopyFrom(pb.Metric(on=False))
    if client.client_type == pb.PRODUCER or client.HasField("publishing"):
        out.publishing.max_body_size = server.max_body_size_bytes
        out.publishing.validate_message_type = True
        out.backoff_policy.CopyFrom(
            pb.RetryPolicy(
                max_attempts=server.producer_max_attempts,
                exponential_backoff=pb.ExponentialBackoff(
                    initial=ms_duration(server.producer_backoff_initial_ms),
                    max=ms_duration(server.producer_backoff_max_ms),
                    multiplier=server.producer_backoff_multiplier,
                ),
            )
        )
        return out
    if client.HasField("subscription"):
        sub = out.subscription
        sub.fifo = fifo
        sub.receive_batch_size = server.receive_batch_size
        if not client.subscription.HasField("long_polling_timeout"):
            sub.long_polling_timeout.CopyFrom(ms_duration(server.long_polling_timeout_ms))
        out.backoff_policy.CopyFrom(
            pb.RetryPolicy(
                max_attempts=max_delivery_attempts,
                customized_backoff=pb.CustomizedBackoff(next=[ms_duration(ms) for ms in CONSUMER_BACKOFF_MS]),
            )
        )
    return out


__all__ = ["CONSUMER_BACKOFF_MS", "ServerSettings", "reply_settings"]
