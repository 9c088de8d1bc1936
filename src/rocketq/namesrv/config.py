"""The name server's settings: NamesrvConfig (RocketMQ ``NamesrvConfig`` + ``NettyServerConfig``).

Fields are RocketMQ's keys in snake_case with the unit appended (``scanNotActiveBrokerInterval``
→ ``scan_not_active_broker_interval_ms``); :func:`rocketmq_key` turns a field back into the key
GET_NAMESRV_CONFIG answers with, and :meth:`NamesrvConfig.from_rocketmq_properties` reads a
``namesrv.conf``. Invalid values fail at construction with one ConfigError naming every problem.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Final

from rocketq.config import from_rocketmq_properties, metrics_config_problems, not_positive
from rocketq.errors import ConfigError
from rocketq.namesrv.routes import DEFAULT_BROKER_HEARTBEAT_TIMEOUT_MS
from rocketq.remoting.codes import DEFAULT_MAX_FRAME_SIZE
from rocketq.remoting.limits import (
    CONFIG_KEYS,
    DEFAULT_MAX_BUFFERED_BYTES,
    DEFAULT_MAX_CONNECTIONS_PER_HOST,
    DEFAULT_MAX_IN_FLIGHT_REQUESTS,
    DEFAULT_READ_MAX_BYTES,
    ServerLimits,
    limit_problems,
    limits_from,
)
from rocketq.remoting.server import exposure_warning
from rocketq.remoting.tls import TlsSettings, tls_settings_from_properties

DEFAULT_NAMESRV_PORT: Final = 9876

_UNIT_SUFFIXES: Final = ("_ms", "_bytes", "_hours", "_percent", "_count", "_pages")


@dataclass(frozen=True, slots=True, kw_only=True)
class NamesrvConfig:
    """Settings of the name server (RocketMQ ``NamesrvConfig`` + ``NettyServerConfig``)."""

    listen_port: int = DEFAULT_NAMESRV_PORT
    #: Listen address (rocketq default 127.0.0.1; RocketMQ listens on every interface).
    bind_address: str = "127.0.0.1"
    #: How often silent brokers are looked for.
    scan_not_active_broker_interval_ms: int = 5000
    #: A broker's heartbeat timeout when its REGISTER_BROKER header does not carry one.
    broker_heartbeat_timeout_ms: int = DEFAULT_BROKER_HEARTBEAT_TIMEOUT_MS
    #: Put the ORDER_TOPIC_CONFIG KV entry into route data as ``orderTopicConf``.
    order_message_enable: bool = False
    #: Answer REGISTER_BROKER with the ORDER_TOPIC_CONFIG namespace as a KVTable body.
    return_order_topic_config_to_broker: bool = True
    enable_all_topic_list: bool = True
    enable_topic_list: bool = True
    #: Drop a broker's queue data of topics its re-registration no longer lists.
    delete_topic_with_broker_registration: bool = False
    #: KV config file (``{"configTable":{ns:{k:v}}}``); None keeps KV config in memory only.
    #: (RocketMQ's default is ``~/namesrv/kvConfig.json``.)
    kv_config_path: str | None = None
    #: Largest accepted frame, length field included.
    max_frame_size_bytes: int = DEFAULT_MAX_FRAME_SIZE
    #: Accept broker registrations and KV/config writes only when signed by an admin account of
    #: the plain ACL rules (rocketq addition; docs/security.md).
    acl_enable: bool = False
    #: The rules file (``aclFile``); None = ``$ROCKETMQ_HOME/conf/plain_acl.yml``.
    acl_file: str | None = None
    #: TLS of the name server's port (RocketMQ's ``tls.server.*`` keys,
    #: :mod:`rocketq.remoting.tls`); None = plaintext. Not part of GET/UPDATE_NAMESRV_CONFIG.
    tls: TlsSettings | None = None

    #: Remoting server limits (docs/security.md "Limits"; 0 disables one): close a connection
    #: idle this long (RocketMQ ``serverChannelMaxIdleTimeSeconds``) ...
    server_channel_max_idle_time_seconds: int = 120
    #: ... cap the bytes of incomplete frames held for all connections together ...
    server_buffered_frames_max_bytes: int = DEFAULT_MAX_BUFFERED_BYTES
    #: ... close a connection whose frame stays incomplete this long ...
    server_partial_frame_timeout_ms: int = 30_000
    #: ... refuse connections from a host beyond this many open ...
    server_max_connections_per_host: int = DEFAULT_MAX_CONNECTIONS_PER_HOST
    #: ... stop reading a connection with this many requests unanswered ...
    server_max_in_flight_requests: int = DEFAULT_MAX_IN_FLIGHT_REQUESTS
    #: ... and take at most this many bytes from a connection per read (0: the event loop's
    #: own size; rocketq key ``serverReadMaxBytes``).
    server_read_max_bytes: int = DEFAULT_READ_MAX_BYTES

    #: ``PROM`` serves Prometheus metrics at ``/metrics``; ``DISABLE`` (default) none. The
    #: broker's keys (RocketMQ 5's name server has no metrics; its controller uses these names).
    metrics_exporter_type: str = "DISABLE"
    metrics_prom_exporter_port: int = 5557
    #: Address of the metrics endpoint; empty = ``bind_address``.
    metrics_prom_exporter_host: str = ""

    def __post_init__(self) -> None:
        problems = []
        if not 0 <= self.listen_port <= 65535:
            problems.append(f"listen_port={self.listen_port} is not in 0..65535")
        problems += not_positive(
            self,
            "scan_not_active_broker_interval_ms",
            "broker_heartbeat_timeout_ms",
            "max_frame_size_bytes",
        )
        problems += limit_problems(self)
        problems += metrics_config_problems(self.metrics_exporter_type, self.metrics_prom_exporter_port)
        if problems:
            raise ConfigError("invalid NamesrvConfig: " + "; ".join(problems))

    @property
    def metrics_enabled(self) -> bool:
        return self.metrics_exporter_type.upper() == "PROM"

    def listen_warnings(self) -> list[str]:
        """What to warn about at start: listening on every interface without ACL."""
        exposed = exposure_warning("name server", self.bind_address, self.listen_port, self.acl_enable)
        return [] if exposed is None else [exposed]

    def server_limits(self) -> ServerLimits:
        """The remoting server's resource limits from the ``server_*`` fields."""
        return limits_from(self)

    @classmethod
    def from_rocketmq_properties(cls, props: dict[str, str], **overrides: Any) -> NamesrvConfig:
        """From RocketMQ ``namesrv.conf`` keys (``listenPort``, ``scanNotActiveBrokerInterval``, …)."""
        tls = tls_settings_from_properties(props)
        if tls is not None and "tls" not in overrides:
            overrides = {**overrides, "tls": tls}
        return from_rocketmq_properties(cls, props, **overrides)

    def to_rocketmq_properties(self) -> dict[str, str]:
        """The settings under RocketMQ-style keys (what GET_NAMESRV_CONFIG answers)."""
        out: dict[str, str] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None or f.name == "tls":
                continue
            out[rocketmq_key(f.name)] = str(value).lower() if isinstance(value, bool) else str(value)
        return out


def rocketmq_key(field_name: str) -> str:
    """``scan_not_active_broker_interval_ms`` → ``scanNotActiveBrokerInterval`` (unit dropped);
    the rocketq limits whose documented keys keep the unit (``server_read_max_bytes`` →
    ``serverReadMaxBytes``, :data:`rocketq.remoting.limits.CONFIG_KEYS`) keep it."""
    whole = _camel(field_name)
    if whole in _KEYS_WITH_UNIT:
        return whole
    for suffix in _UNIT_SUFFIXES:
        if field_name.endswith(suffix):
            field_name = field_name[: -len(suffix)]
            break
    return _camel(field_name)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


#: the limits' documented keys (a key naming its field in full keeps its unit)
_KEYS_WITH_UNIT: Final = frozenset(CONFIG_KEYS.values())


__all__ = ["DEFAULT_NAMESRV_PORT", "NamesrvConfig", "rocketmq_key"]
