"""The gRPC endpoint's server: a ``grpc.aio`` server on the broker's event loop.

``GrpcEndpoint(broker, GrpcConfig(...))`` serves :class:`~rocketq.proxy.servicer.MessagingServicer`
on ``host:port`` (port 0 picks a free one; :attr:`GrpcEndpoint.port` is the real one once
started), plaintext or TLS when ``tls_cert_path``/``tls_key_path`` are given. Stop it before the
broker (open Telemetry streams are ended; held receives end with the grace period). When the
broker checks ACL (``aclEnable=true``), every call is checked against the same rules
(:class:`~rocketq.proxy.auth.GrpcAclInterceptor`: the SDKs' ``MQv2-HMAC-SHA1`` signature).
"""

from __future__ import annotations

import logging
import socket
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING

import grpc

from rocketq.errors import ConfigError
from rocketq.proxy.auth import GrpcAclInterceptor
from rocketq.proxy.servicer import MessagingServicer
from rocketq.proxy.v2 import service_pb2_grpc

if TYPE_CHECKING:
    from rocketq.broker.server import Broker

log = logging.getLogger(__name__)

#: Default gRPC port of RocketMQ 5 (the proxy's ``grpcServerPort``).
DEFAULT_GRPC_PORT = 8081


def check_port_free(host: str, port: int) -> None:
    """Raise ConfigError when ``host:port`` cannot be bound now (as gRPC binds: SO_REUSEADDR)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise ConfigError(f"cannot listen for gRPC on {host}:{port}: {exc}") from None
    family, _, _, _, sockaddr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(sockaddr)
        except OSError as exc:
            raise ConfigError(f"cannot listen for gRPC on {host}:{port}: {exc.strerror}") from None


@dataclass(frozen=True, slots=True)
class GrpcConfig:
    host: str = "127.0.0.1"
    port: int = DEFAULT_GRPC_PORT
    #: Address put in QueryRoute answers when the client's request names none (default: host).
    advertised_host: str | None = None
    tls_cert_path: str | None = None
    tls_key_path: str | None = None
    max_message_bytes: int = 64 * 1024 * 1024
    shutdown_grace_s: float = 2.0


def check_key_pair(cert_path: str, key_path: str) -> None:
    """ConfigError unless ``cert_path`` is a PEM certificate (chain) and ``key_path`` its PEM
    private key (gRPC itself would only fail later, at the first handshake)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert_path, key_path)
    except ssl.SSLError:
        raise ConfigError(
            f"TLS certificate {cert_path} and key {key_path} are not a PEM certificate and its private key"
        ) from None
    except OSError as exc:
        raise ConfigError(f"cannot read the TLS certificate or key: {exc}") from None


class GrpcEndpoint:
    """``apache.rocketmq.v2.MessagingService`` for one broker."""

    def __init__(self, broker: Broker, config: GrpcConfig) -> None:
        self.broker = broker
        self.config = config
        self.servicer: MessagingServicer | None = None
        self._server: grpc.aio.Server | None = None
        self._port = config.port

    @property
    def port(self) -> int:
        return self._port

    @property
    def address(self) -> str:
        return f"{self.config.host}:{self._port}"

    async def start(self) -> None:
        cfg = self.config
        ctx = self.broker.ctx
        if ctx is None:
            raise RuntimeError("start the broker before its gRPC endpoint")
        self.servicer = MessagingServicer(
            ctx,
            self.broker.transactions,
            advertised_host=cfg.advertised_host or cfg.host,
            advertised_port=lambda: self._port,
        )
        interceptors = [GrpcAclInterceptor(self.broker.acl)] if self.broker.acl is not None else []
        server = grpc.aio.server(
            interceptors=interceptors,
            options=[
                ("grpc.max_receive_message_length", cfg.max_message_bytes),
                ("grpc.max_send_message_length", cfg.max_message_bytes),
                ("grpc.so_reuseport", 0),
            ],
        )
        service_pb2_grpc.add_MessagingServiceServicer_to_server(self.servicer, server)  # type: ignore[no-untyped-call]
        target = f"{cfg.host}:{cfg.port}"
        if cfg.port != 0:
            # gRPC's core logs a bind failure on stderr by itself; find a taken port first
            check_port_free(cfg.host, cfg.port)
        try:
            port = self._bind(server, target)
        except RuntimeError as exc:
            raise ConfigError(f"cannot listen for gRPC on {target}: {exc}") from None
        if port == 0:
            raise ConfigError(f"cannot listen for gRPC on {target}")
        self._port = port
        await server.start()
        self._server = server
        log.info("gRPC endpoint (RocketMQ 5 protocol) listening on %s:%d", cfg.host, port)

    def _bind(self, server: grpc.aio.Server, target: str) -> int:
        cfg = self.config
        if cfg.tls_cert_path or cfg.tls_key_path:
            if not (cfg.tls_cert_path and cfg.tls_key_path):
                raise ConfigError("TLS needs both a certificate and a private key file")
            try:
                with open(cfg.tls_key_path, "rb") as f:
                    key = f.read()
                with open(cfg.tls_cert_path, "rb") as f:
                    cert = f.read()
            except OSError as exc:
                raise ConfigError(f"cannot read the TLS certificate or key: {exc}") from None
            check_key_pair(cfg.tls_cert_path, cfg.tls_key_path)
            return int(server.add_secure_port(target, grpc.ssl_server_credentials([(key, cert)])))
        return int(server.add_insecure_port(target))

    async def stop(self) -> None:
        server, self._server = self._server, None
        if self.servicer is not None:
            self.servicer.sessions.close_all()
            if self.broker.transactions is not None:
                self.broker.transactions.external_checker = None
        if server is not None:
            await server.stop(self.config.shutdown_grace_s)


__all__ = ["DEFAULT_GRPC_PORT", "GrpcConfig", "GrpcEndpoint", "check_key_pair", "check_port_free"]
