"""Broker settings (RocketMQ ``BrokerConfig`` / ``NettyServerConfig``) and ``broker.conf`` loading.

Field names are RocketMQ's keys in snake_case with the unit appended where RocketMQ's name has
none (``flushConsumerOffsetInterval`` → ``flush_consumer_offset_interval_ms``); RocketMQ's own
``…Mills`` names keep their spelling (``shortPollingTimeMills`` → ``short_polling_time_mills``).
A RocketMQ ``broker.conf`` therefore maps one to one: :func:`load_broker_conf` reads the Java
properties file once and builds both the :class:`BrokerConfig` and the store's
:class:`~rocketq.config.StoreConfig` from it (each takes the keys it knows, the rest is ignored).

``broker.conf`` syntax (``java.util.Properties``)::

    # comment            ! comment
    brokerClusterName = DefaultCluster
    brokerName=broker-a
    namesrvAddr=10.0.0.1:9876;10.0.0.2:9876
    listenPort: 10911
    storePathRootDir /data/rocketmq/store       (key and value separated by '=', ':' or blanks)
    longValue = first part \\
                second part                      (a trailing backslash continues the line)

Defaults equal RocketMQ's; ``broker_name`` and ``broker_ip1`` default to the host name and the
address of the interface that routes outwards, and ``namesrv_addr`` to ``$NAMESRV_ADDR``, as in
RocketMQ.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from dataclasses import dataclass, field
from typing import Any

from rocketq.acl.plain import resolve_acl_file
from rocketq.config import StoreConfig, from_rocketmq_properties, metrics_config_problems, not_positive
from rocketq.errors import ConfigError
from rocketq.message import local_ip
from rocketq.properties import parse_properties
from rocketq.remoting.limits import (
    DEFAULT_MAX_BUFFERED_BYTES,
    DEFAULT_MAX_CONNECTIONS_PER_HOST,
    DEFAULT_MAX_IN_FLIGHT_REQUESTS,
    DEFAULT_READ_MAX_BYTES,
    ServerLimits,
    limit_problems,
    limits_from,
)
from rocketq.remoting.server import exposure_warning, is_loopback_address, is_wildcard_address
from rocketq.remoting.tls import TlsSettings, tls_settings_from_properties

#: RocketMQ keys whose rocketq field name differs from the mechanical snake_case mapping.
KEY_ALIASES: dict[str, str] = {
    "registerNameServerPeriod": "register_broker_interval_ms",
    "brokerIP1": "broker_ip1",
    "brokerIP2": "broker_ip2",
    "transactionCheckInterval": "transaction_check_interval_ms",
    "transactionTimeOut": "transaction_timeout_ms",
}


def _namesrv_from_env() -> str | None:
    return os.environ.get("NAMESRV_ADDR") or None


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerConfig:
    """Settings of one broker process (RocketMQ ``BrokerConfig`` and its server settings)."""

    broker_cluster_name: str = "DefaultCluster"
    broker_name: str = field(default_factory=socket.gethostname)
    #: 0 = master (the only role rocketq's broker core serves so far).
    broker_id: int = 0
    #: Name servers, ``host:port`` separated by ``;``; None = do not register anywhere.
    namesrv_addr: str | None = field(default_factory=_namesrv_from_env)
    #: Address published to name servers and clients, and stored in every record's STOREHOST;
    #: empty = ``bind_address``, or the outward interface's address when that is a wildcard.
    broker_ip1: str = ""
    #: Address for HA (slaves); defaults to ``broker_ip1``.
    broker_ip2: str | None = None
    #: Listen address (rocketq default 127.0.0.1; RocketMQ listens on every interface).
    bind_address: str = "127.0.0.1"
    #: Remoting port; 0 picks a free one (read it back from ``Broker.port``).
    listen_port: int = 10911
    #: Also listen on ``listen_port - 2``, the "VIP channel" old Java producers use (rocketq name).
    fast_listen_port_enable: bool = True
    ha_listen_port: int = 10912
    #: PermName bits of the whole broker: READ=4, WRITE=2.
    broker_permission: int = 6

    auto_create_topic_enable: bool = True
    default_topic_queue_nums: int = 8
    cluster_topic_enable: bool = True
    broker_topic_enable: bool = True
    trace_topic_enable: bool = False
    msg_trace_topic_name: str = "RMQ_SYS_TRACE_TOPIC"
    #: The broker writes message traces to ``msg_trace_topic_name`` (rocketq key; broker/trace.py).
    broker_trace_enable: bool = False
    #: Topics traced, comma separated; empty = every non-system topic.
    broker_trace_topics: str = ""
    #: Buffered trace records are written this often, or once this many wait.
    broker_trace_flush_interval_ms: int = 100
    broker_trace_batch_size: int = 256
    auto_create_subscription_group: bool = True
    reject_transaction_message: bool = False
    #: How often unresolved half messages are checked (RocketMQ ``transactionCheckInterval``).
    transaction_check_interval_ms: int = 60_000
    #: A half message younger than this is not checked yet (``transactionTimeOut``).
    transaction_timeout_ms: int = 6000
    #: Checks of one half before it is discarded (``transactionCheckMax``).
    transaction_check_max: int = 15
    #: SQL92 subscriptions (``enablePropertyFilter``); on by default here, off in RocketMQ.
    enable_property_filter: bool = True

    long_polling_enable: bool = True
    #: Hold time of a suspended pull when long polling is off.
    short_polling_time_mills: int = 1000
    #: Upper bound on any hold, below the clients' 30 s pull timeout (rocketq addition).
    long_polling_max_hold_ms: int = 20_000
    max_transfer_count_on_message_in_memory: int = 32
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024

    #: A client channel without a heartbeat for this long is dropped.
    channel_expired_timeout_ms: int = 120_000
    flush_consumer_offset_interval_ms: int = 5000
    register_broker_interval_ms: int = 30_000
    register_broker_timeout_mills: int = 6000

    #: Pop consumption: the journal is compacted into a snapshot once it is this large.
    pop_journal_compact_bytes: int = 16 * 1024 * 1024
    #: Pop consumption: upper bound on a receive's long poll (rocketq addition).
    pop_long_polling_max_ms: int = 60_000

    region_id: str = "DefaultRegion"
    trace_on: bool = True

    #: Check every request against plain ACL rules (RocketMQ ``aclEnable``; docs/security.md).
    acl_enable: bool = False
    #: The rules file (rocketq key ``aclFile``); None = ``$ROCKETMQ_HOME/conf/plain_acl.yml``.
    acl_file: str | None = None
    #: The account this broker signs its requests to name servers with (``accessKey``/``secretKey``).
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    #: TLS of the broker's port and of its connections to name servers (RocketMQ's ``tls.*``
    #: keys, :mod:`rocketq.remoting.tls`); None = plaintext.
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

    #: ``PROM`` serves Prometheus metrics at ``/metrics`` (docs/metrics.md); ``DISABLE`` (the
    #: default) serves none. RocketMQ 5's ``MetricsExporterType``; its OTLP_GRPC and LOG
    #: exporters are not offered and are refused.
    metrics_exporter_type: str = "DISABLE"
    #: Port of the ``/metrics`` endpoint (RocketMQ 5's default); 0 picks a free one.
    metrics_prom_exporter_port: int = 5557
    #: Address the endpoint listens on; empty = ``broker_ip1``, as in RocketMQ.
    metrics_prom_exporter_host: str = ""

    def __post_init__(self) -> None:
        if not self.broker_ip1:
            ip1 = local_ip() if is_wildcard_address(self.bind_address) else self.bind_address.strip()
            object.__setattr__(self, "broker_ip1", ip1)
        problems: list[str] = []
        for name in ("broker_cluster_name", "broker_name"):
            if not getattr(self, name):
                problems.append(f"{name} is empty")
        if self.broker_id < 0:
            problems.append(f"broker_id={self.broker_id} is negative")
        if not 0 <= self.listen_port <= 65535:
            problems.append(f"listen_port={self.listen_port} is outside 0..65535")
        if not 0 <= self.broker_permission <= 15:
            problems.append(f"broker_permission={self.broker_permission} is outside 0..15")
        if not 1 <= self.default_topic_queue_nums <= 1024:
            problems.append(f"default_topic_queue_nums={self.default_topic_queue_nums} is outside 1..1024")
        problems += not_positive(
            self,
            "short_polling_time_mills",
            "long_polling_max_hold_ms",
            "max_transfer_count_on_message_in_memory",
            "max_transfer_bytes_on_message_in_memory",
            "channel_expired_timeout_ms",
            "flush_consumer_offset_interval_ms",
            "register_broker_interval_ms",
            "register_broker_timeout_mills",
            "transaction_check_interval_ms",
            "pop_journal_compact_bytes",
            "pop_long_polling_max_ms",
            "broker_trace_flush_interval_ms",
            "broker_trace_batch_size",
        )
        if self.transaction_timeout_ms < 0:
            problems.append(f"transaction_timeout_ms={self.transaction_timeout_ms} is negative")
        if self.transaction_check_max < 0:
            problems.append(f"transaction_check_max={self.transaction_check_max} is negative")
        problems += limit_problems(self)
        if bool(self.access_key) != bool(self.secret_key):
            problems.append("accessKey and secretKey must be given together")
        problems += metrics_config_problems(self.metrics_exporter_type, self.metrics_prom_exporter_port)
        if problems:
            raise ConfigError("invalid BrokerConfig: " + "; ".join(problems))

    # -- derived values -------------------------------------------------------------------
    def acl_file_path(self) -> str:
        """The plain ACL rules file: ``acl_file``, else ``$ROCKETMQ_HOME/conf/plain_acl.yml``;
        ConfigError when neither is set."""
        return resolve_acl_file(self.acl_file)

    def listen_warnings(self) -> list[str]:
        """What to warn about at start: listening on every interface without ACL, or
        advertising (``brokerIP1``) a non-loopback address while listening on loopback only."""
        out = []
        exposed = exposure_warning("broker", self.bind_address, self.listen_port, self.acl_enable)
        if exposed is not None:
            out.append(exposed)
        if is_loopback_address(self.bind_address) and not is_loopback_address(self.broker_ip1):
            out.append(
                f"brokerIP1={self.broker_ip1} is advertised to clients but the broker listens on "
                f"{self.bind_address} only (bindAddress): clients on other hosts cannot connect; "
                f"set bindAddress={self.broker_ip1} or bindAddress=0.0.0.0 (--bind)"
            )
        return out

    def server_limits(self) -> ServerLimits:
        """The remoting server's resource limits from the ``server_*`` fields."""
        return limits_from(self)

    @property
    def broker_addr(self) -> str:
        """``ip1:listen_port``: what name servers publish and what record STOREHOSTs hold."""
        return f"{self.broker_ip1}:{self.listen_port}"

    @property
    def ha_server_addr(self) -> str:
        return f"{self.broker_ip2 or self.broker_ip1}:{self.ha_listen_port}"

    @property
    def metrics_enabled(self) -> bool:
        """True when ``/metrics`` is served (``metricsExporterType=PROM``)."""
        return self.metrics_exporter_type.upper() == "PROM"

    @property
    def metrics_host(self) -> str:
        return self.metrics_prom_exporter_host or self.broker_ip1

    @property
    def namesrv_addrs(self) -> list[str]:
        """The name-server addresses (``;``-separated in ``namesrv_addr``)."""
        if not self.namesrv_addr:
            return []
        return [a.strip() for a in self.namesrv_addr.split(";") if a.strip()]


def _apply_aliases(cls: type[Any], props: dict[str, str]) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {
        field_name: props[key]
        for key, field_name in KEY_ALIASES.items()
        if key in props and field_name in names
    }


def broker_config_from_properties(props: dict[str, str], **overrides: Any) -> BrokerConfig:
    """A BrokerConfig from RocketMQ ``broker.conf`` properties (unknown keys are ignored)."""
    aliased = _apply_aliases(BrokerConfig, props)
    plain = {k: v for k, v in props.items() if k not in KEY_ALIASES}
    problems: list[str] = []
    defaults = BrokerConfig()
    coerced: dict[str, Any] = {}
    for name, raw in aliased.items():
        current = getattr(defaults, name)
        try:
            coerced[name] = int(raw.strip()) if isinstance(current, int) else raw.strip()
        except ValueError:
            key = next(k for k, v in KEY_ALIASES.items() if v == name)
            problems.append(f"{key}={raw!r}: expected an integer")
    try:
        tls = tls_settings_from_properties(props)
        if tls is not None:
            coerced["tls"] = tls
        config = from_rocketmq_properties(BrokerConfig, plain, **{**coerced, **overrides})
    except ConfigError as exc:
        problems.append(str(exc).removeprefix("invalid configuration: "))
    if problems:
        raise ConfigError("invalid configuration: " + "; ".join(problems))
    return config


def load_broker_conf(path: str | os.PathLike[str], **overrides: Any) -> tuple[BrokerConfig, StoreConfig]:
    """Read a RocketMQ ``broker.conf`` and build the broker's and the store's settings
    (``overrides``: BrokerConfig fields that win over the file).

    Raises :class:`~rocketq.errors.ConfigError` naming every bad value, or OSError when the
    file cannot be read."""
    with open(path, encoding="utf-8") as f:
        props = parse_properties(f.read())
    return broker_config_from_properties(props, **overrides), from_rocketmq_properties(StoreConfig, props)


__all__ = [
    "KEY_ALIASES",
    "BrokerConfig",
    "broker_config_from_properties",
    "load_broker_conf",
    "local_ip",
    "parse_properties",
]
