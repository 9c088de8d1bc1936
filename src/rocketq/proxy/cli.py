"""``rocketq proxy``: the RocketMQ 5 gRPC endpoint as its own process in front of a cluster.

    rocketq proxy --namesrv 127.0.0.1:9876 [--grpc-port 8081] [--host 127.0.0.1]
                  [--grpc-tls-cert cert.pem --grpc-tls-key key.pem]
                  [--access-key AK --secret-key SK] [--acl-file plain_acl.yml]
                  [--tls [--tls-ca ca.pem] [--tls-cert client.pem --tls-key client.key]]

Serves :class:`~rocketq.proxy.cluster.ClusterServicer` until SIGINT/SIGTERM; prints
``gRPC (v5)  host:port`` once listening (``--grpc-port 0`` picks a free port).

``--access-key``/``--secret-key`` sign the proxy's own remoting requests to the brokers.
``--acl-file`` turns ACL on for the gRPC callers: every call is checked by
:class:`~rocketq.proxy.auth.GrpcAclInterceptor` against that ``plain_acl.yml`` (re-read when it
changes), with the rules of the in-broker endpoint. With keys but no ACL file the proxy warns at
start that its callers are not authenticated (they act with the proxy account's rights).
``--tls`` opens the connections to the name servers and brokers with TLS, verifying them
against ``--tls-ca`` (default: the system's CAs), presenting ``--tls-cert``/``--tls-key`` to
brokers that ask for a client certificate.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import ssl
import sys
from typing import Any

import grpc

from rocketq.acl.plain import PlainAclValidator
from rocketq.acl.signature import AclClientRpcHook
from rocketq.errors import ConfigError, RocketqError
from rocketq.proxy.auth import GrpcAclInterceptor
from rocketq.proxy.server import DEFAULT_GRPC_PORT, check_key_pair, check_port_free
from rocketq.proxy.v2 import service_pb2_grpc
from rocketq.remoting import RemotingClient
from rocketq.remoting.tls import client_context

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
SHUTDOWN_GRACE_S = 2.0


async def run_proxy(args: argparse.Namespace, ready: asyncio.Event | None = None) -> None:
    # the cluster servicer routes through the client SDK: imported here, not when ``rocketq``
    # builds its parser (the server commands do not load the client)
    from rocketq.client.aio import parse_namesrv_addrs  # noqa: PLC0415
    from rocketq.proxy.cluster import ClusterServicer  # noqa: PLC0415

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    namesrv_addrs = parse_namesrv_addrs(args.namesrv)
    if bool(args.access_key) != bool(args.secret_key):
        raise ConfigError("--access-key and --secret-key must be given together")
    ssl_context = _ssl_context(args)
    interceptors: list[grpc.aio.ServerInterceptor] = []
    if args.acl_file:
        interceptors.append(GrpcAclInterceptor(PlainAclValidator(args.acl_file)))
    elif args.access_key:
        msg = (
            "WARNING: gRPC callers are not authenticated: every call is forwarded with the rights of "
            f"accessKey {args.access_key}; give --acl-file plain_acl.yml to check the callers' signatures"
        )
        print(msg, file=sys.stderr, flush=True)
    port_box = [args.grpc_port]
    server = grpc.aio.server(
        interceptors=interceptors,
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 0),
        ],
    )
    target = f"{args.host}:{args.grpc_port}"
    change = "; choose another port with --grpc-port"
    if args.grpc_port != 0:
        # gRPC's core logs a bind failure on stderr by itself; find a taken port first
        try:
            check_port_free(args.host, args.grpc_port)
        except ConfigError as exc:
            raise ConfigError(f"{exc}{change}") from None
    try:
        port = _bind(server, target, args.grpc_tls_cert, args.grpc_tls_key)
    except RuntimeError as exc:
        raise ConfigError(f"cannot listen for gRPC on {target}: {exc}{change}") from None
    if port == 0:
        raise ConfigError(f"cannot listen for gRPC on {target}{change}")
    port_box[0] = port
    hook = AclClientRpcHook(args.access_key, args.secret_key) if args.access_key and args.secret_key else None
    async with RemotingClient(rpc_hook=hook, ssl=ssl_context) as remoting:
        servicer = ClusterServicer(
            remoting, namesrv_addrs, advertised_host=args.host, advertised_port=lambda: port_box[0]
        )
        service_pb2_grpc.add_MessagingServiceServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
        await server.start()
        try:
            checks = "ACL on gRPC calls" if args.acl_file else "no ACL on gRPC calls"
            remoting_tls = ", TLS to the cluster" if ssl_context is not None else ""
            print(
                f"rocketq proxy ready (cluster mode, name servers {';'.join(namesrv_addrs)}; "
                f"{checks}{remoting_tls})\n"
                f"  gRPC (v5)    {args.host}:{port}",
                flush=True,
            )
            if ready is not None:
                ready.set()
            await stop.wait()
        finally:
            servicer.sessions.close_all()
            await server.stop(SHUTDOWN_GRACE_S)
            await servicer.close()


def _ssl_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    """The client context of the remoting connections; None without ``--tls``."""
    if not args.tls:
        if args.tls_ca or args.tls_cert or args.tls_key:
            raise ConfigError("--tls-ca/--tls-cert/--tls-key need --tls")
        return None
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ConfigError("--tls-cert and --tls-key must be given together")
    return client_context(args.tls_ca, cert_path=args.tls_cert, key_path=args.tls_key)


def _bind(server: grpc.aio.Server, target: str, cert_path: str | None, key_path: str | None) -> int:
    if not (cert_path or key_path):
        return int(server.add_insecure_port(target))
    if not (cert_path and key_path):
        raise ConfigError("TLS needs both --grpc-tls-cert and --grpc-tls-key")
    check_key_pair(cert_path, key_path)
    with open(key_path, "rb") as f:
        key = f.read()
    with open(cert_path, "rb") as f:
        cert = f.read()
    return int(server.add_secure_port(target, grpc.ssl_server_credentials([(key, cert)])))


def _proxy(args: argparse.Namespace) -> int:
    try:
        asyncio.run(run_proxy(args))
    except RocketqError as exc:
        print(f"rocketq proxy: error: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


def add_parser(sub: Any) -> None:
    """Add the ``proxy`` subcommand to the ``rocketq`` argument parser's subparsers."""
    p = sub.add_parser("proxy", help="RocketMQ 5 gRPC endpoint in front of a cluster (port 8081)")
    p.add_argument("-n", "--namesrv", required=True, help="name servers, host:port;host:port")
    p.add_argument(
        "--host", default="127.0.0.1", help="address to listen on and to advertise (default %(default)s)"
    )
    p.add_argument(
        "--grpc-port",
        type=int,
        default=DEFAULT_GRPC_PORT,
        help="gRPC port, 0 = a free one (default %(default)s)",
    )
    p.add_argument("--grpc-tls-cert", default=None, help="PEM certificate: serve gRPC over TLS")
    p.add_argument("--grpc-tls-key", default=None, help="PEM private key of --grpc-tls-cert")
    p.add_argument(
        "--access-key",
        default=os.environ.get("ROCKETQ_ACCESS_KEY"),
        help="ACL account the proxy signs its remoting requests with (default $ROCKETQ_ACCESS_KEY)",
    )
    p.add_argument(
        "--secret-key",
        default=os.environ.get("ROCKETQ_SECRET_KEY"),
        help="its secret (default $ROCKETQ_SECRET_KEY)",
    )
    p.add_argument(
        "--acl-file",
        default=None,
        help="plain_acl.yml: check every gRPC caller's signature and permissions against it (ACL on)",
    )
    p.add_argument("--tls", action="store_true", help="connect to the name servers and brokers with TLS")
    p.add_argument("--tls-ca", default=None, help="PEM CA file that signed the servers' certificates")
    p.add_argument("--tls-cert", default=None, help="PEM client certificate, for brokers that ask for one")
    p.add_argument("--tls-key", default=None, help="PEM private key of --tls-cert")
    p.set_defaults(func=_proxy)


__all__ = ["add_parser", "run_proxy"]
