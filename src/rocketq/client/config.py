"""What every rocketq client shares: :class:`ClientConfig`, the client id and the consumer enums.

A :class:`ClientConfig` holds the settings of RocketMQ's ``ClientConfig`` that producers,
consumers and the admin client have in common (name servers, instance name, client IP, the
request timeout, the heartbeat, route-poll and offset-persist intervals). Every client takes one
as ``config=``; the keyword arguments a client also accepts (``namesrv_addr=``,
``heartbeat_interval_ms=``, …) override the matching field when given::

    cfg = ClientConfig(namesrv_addr="10.0.0.1:9876;10.0.0.2:9876", instance_name="billing")
    producer = Producer("PG", config=cfg)
    consumer = PushConsumer("CG", config=cfg, heartbeat_interval_ms=10_000)

The client id is ``<client_ip>@<instance_name>`` as in RocketMQ. An instance name left at
``"DEFAULT"`` becomes ``<pid>#<n>`` in producers and clustering consumers (RocketMQ's
``changeInstanceNameToPID``, whose RocketMQ 5 form is ``pid#nanoTime``; ``n`` counts the clients
of the process so that two of them never share an id). Broadcasting consumers keep
``"DEFAULT"``, so their local offset file (``<offset_store_dir>/<client id>/<group>/offsets.json``)
is found again after a restart.

ACL (a broker with ``aclEnable=true``): ``access_key``/``secret_key`` (default: the environment
variables ``ROCKETQ_ACCESS_KEY``/``ROCKETQ_SECRET_KEY``) sign every request the client sends,
as RocketMQ's ``AclClientRPCHook`` does::

    cfg = ClientConfig(namesrv_addr="127.0.0.1:9876", access_key="rocketmq2", secret_key="12345678")
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import os
import re
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rocketq.errors import ConfigError
from rocketq.message import local_ip

if TYPE_CHECKING:
    from rocketq.acl.signature import AclClientRpcHook

DEFAULT_INSTANCE_NAME = "DEFAULT"
DEFAULT_REQUEST_TIMEOUT_MS = 3_000
DEFAULT_HEARTBEAT_INTERVAL_MS = 30_000
DEFAULT_POLL_NAME_SERVER_INTERVAL_MS = 30_000
DEFAULT_PERSIST_CONSUMER_OFFSET_INTERVAL_MS = 5_000

_instance_ids = itertools.count(1)

ACCESS_KEY_ENV = "ROCKETQ_ACCESS_KEY"
SECRET_KEY_ENV = "ROCKETQ_SECRET_KEY"


def _access_key_from_env() -> str | None:
    return os.environ.get(ACCESS_KEY_ENV) or None


def _secret_key_from_env() -> str | None:
    return os.environ.get(SECRET_KEY_ENV) or None


class ConsumeFromWhere(enum.StrEnum):
    """Where a consumer group with no committed offset of a queue starts (RocketMQ's names)."""

    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


class MessageModel(enum.StrEnum):
    """Clustering: the group shares the queues. Broadcasting: every member reads every queue."""

    CLUSTERING = "CLUSTERING"
    BROADCASTING = "BROADCASTING"


def parse_enum(cls: type[enum.StrEnum], name: str, value: str) -> Any:
    """``value`` (a member or RocketMQ's string) as a member of ``cls``; ConfigError otherwise."""
    try:
        return cls(value)
    except ValueError:
        choices = ", ".join(m.value for m in cls)
        raise ConfigError(f"{name}={value!r} must be one of {choices}") from None


def parse_namesrv_addrs(namesrv_addr: str | Sequence[str]) -> list[str]:
    """``"a:9876;b:9876"`` (RocketMQ's separator), a comma list, or a sequence of addresses."""
    raw = re.split(r"[;,]", namesrv_addr) if isinstance(namesrv_addr, str) else list(namesrv_addr)
    addrs = [a.strip() for a in raw if a and a.strip()]
    if not addrs:
        raise ConfigError("namesrv_addr is empty: give at least one host:port")
    for addr in addrs:
        host, sep, port = addr.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"name server address {addr!r} is not host:port")
    return addrs


def pid_instance_name() -> str:
    """``<pid>#<n>``: a new instance name, unique among the clients of this process."""
    return f"{os.getpid()}#{next(_instance_ids)}"


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """Settings shared by every client. Times are milliseconds, as the names say.

    ``namesrv_addr``: ``"host:port"``, several joined by ``;``, or a sequence of them (kept as a
    tuple). ``client_ip``: the address in the client id (default: detected). ``instance_name``:
    the part after ``@`` of the client id (see the module doc for ``"DEFAULT"``).
    ``request_timeout_ms``: timeout of one request to a broker or name server
    (RocketMQ ``mqClientApiTimeout``). ``heartbeat_interval_ms``: HEART_BEAT period
    (``heartbeatBrokerInterval``). ``poll_name_server_interval_ms``: period of the producer's
    route refresh (``pollNameServerInterval``). ``persist_consumer_offset_interval_ms``: period
    of a consumer's offset commits (``persistConsumerOffsetInterval``). ``access_key`` and
    ``secret_key``: the ACL account every request is signed with (both or neither; default
    ``$ROCKETQ_ACCESS_KEY``/``$ROCKETQ_SECRET_KEY``). ``tls``: open every connection with TLS
    (RocketMQ ``tls.enable``), verifying the servers' certificates against ``tls_ca_path`` (PEM;
    default: the system's CAs; host names are not checked, as in RocketMQ); ``tls_cert_path`` and
    ``tls_key_path``: this client's certificate, for servers that ask for one."""

    namesrv_addr: str | tuple[str, ...] = ()
    instance_name: str = DEFAULT_INSTANCE_NAME
    client_ip: str | None = None
    request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS
    heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS
    poll_name_server_interval_ms: int = DEFAULT_POLL_NAME_SERVER_INTERVAL_MS
    persist_consumer_offset_interval_ms: int = DEFAULT_PERSIST_CONSUMER_OFFSET_INTERVAL_MS
    access_key: str | None = dataclasses.field(default_factory=_access_key_from_env)
    secret_key: str | None = dataclasses.field(default_factory=_secret_key_from_env, repr=False)
    tls: bool = False
    tls_ca_path: str | None = None
    tls_cert_path: str | None = None
    tls_key_path: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.namesrv_addr, str):
            object.__setattr__(self, "namesrv_addr", tuple(self.namesrv_addr))
        problems = []
        for field in (
            "request_timeout_ms",
            "heartbeat_interval_ms",
            "poll_name_server_interval_ms",
            "persist_consumer_offset_interval_ms",
        ):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                problems.append(f"{field}={value!r} must be an int > 0")
        if not self.instance_name or "@" in self.instance_name:
            problems.append(f"instance_name={self.instance_name!r} must be non-empty, without '@'")
        if self.client_ip is not None and (not self.client_ip or "@" in self.client_ip):
            problems.append(f"client_ip={self.client_ip!r} must be non-empty, without '@'")
        if bool(self.access_key) != bool(self.secret_key):
            problems.append("access_key and secret_key must be given together")
        if bool(self.tls_cert_path) != bool(self.tls_key_path):
            problems.append("tls_cert_path and tls_key_path must be given together")
        if not self.tls and (self.tls_ca_path or self.tls_cert_path):
            problems.append("tls_ca_path/tls_cert_path are given but tls is False")
        if problems:
            raise ConfigError("invalid client config: " + "; ".join(problems))

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context of the client's connections; None unless ``tls``."""
        if not self.tls:
            return None
        from rocketq.remoting.tls import client_context  # noqa: PLC0415 - only with TLS

        return client_context(self.tls_ca_path, cert_path=self.tls_cert_path, key_path=self.tls_key_path)

    def rpc_hook(self) -> AclClientRpcHook | None:
        """The hook that signs requests with ``access_key``/``secret_key``; None without them."""
        if not self.access_key or not self.secret_key:
            return None
        from rocketq.acl.signature import AclClientRpcHook  # noqa: PLC0415 - only with ACL keys

        return AclClientRpcHook(self.access_key, self.secret_key)

    def namesrv_addrs(self) -> list[str]:
        """The name server addresses, checked (ConfigError when none or one is not host:port)."""
        return parse_namesrv_addrs(self.namesrv_addr)

    def ip(self) -> str:
        """``client_ip``, or this host's address when it is not set."""
        return self.client_ip if self.client_ip is not None else local_ip()

    def client_id(self, *, pid_name: bool = True) -> str:
        """A new client id ``<ip>@<instance_name>``; with ``pid_name`` an instance name left at
        ``"DEFAULT"`` becomes ``<pid>#<n>`` (a different ``n`` on every call)."""
        name = self.instance_name
        if pid_name and name == DEFAULT_INSTANCE_NAME:
            name = pid_instance_name()
        return f"{self.ip()}@{name}"

    def merged(self, **overrides: object) -> ClientConfig:
        """This config with the fields of ``overrides`` that are not None replaced."""
        given = {k: v for k, v in overrides.items() if v is not None}
        return dataclasses.replace(self, **given) if given else self  # type: ignore[arg-type]


def resolve_config(config: ClientConfig | None, **overrides: object) -> ClientConfig:
    """``config`` (default: ``ClientConfig()``) with the given keyword arguments applied; the
    name servers are checked (a client cannot start without them)."""
    if config is not None and not isinstance(config, ClientConfig):
        raise TypeError(f"config must be a ClientConfig, not {type(config).__name__}")
    cfg = (config or ClientConfig()).merged(**overrides)
    cfg.namesrv_addrs()
    return cfg


__all__ = [
    "DEFAULT_HEARTBEAT_INTERVAL_MS",
    "DEFAULT_INSTANCE_NAME",
    "DEFAULT_PERSIST_CONSUMER_OFFSET_INTERVAL_MS",
    "DEFAULT_POLL_NAME_SERVER_INTERVAL_MS",
    "DEFAULT_REQUEST_TIMEOUT_MS",
    "ClientConfig",
    "ConsumeFromWhere",
    "MessageModel",
    "local_ip",
    "parse_enum",
    "parse_namesrv_addrs",
    "pid_instance_name",
    "resolve_config",
]
