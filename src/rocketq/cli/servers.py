"""The server commands: ``namesrv``, ``broker`` and ``serve`` (name server and broker, and the gRPC
endpoint, in one process).

Each runner builds its configuration from the RocketMQ properties file (``-c``) and the flags
(a flag wins), runs the server until it stops, and turns the two failures an operator can fix
into one line on stderr and exit status 1: a RocketqError (bad configuration and the like) and
a listen port another process holds (the line names the port and the flag that changes it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import errno
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from rocketq import speedups
from rocketq.broker import Broker, BrokerConfig, load_broker_conf, run_broker
from rocketq.broker.shutdown_watch import BACKSTOP_S, ShutdownWatch
from rocketq.cli.brokers_serve import serve_brokers
from rocketq.cli.dledger_serve import serve_dledger
from rocketq.config import StoreConfig
from rocketq.errors import ConfigError, RocketqError
from rocketq.namesrv.run import run_namesrv
from rocketq.namesrv.server import NameServer, NamesrvConfig
from rocketq.properties import parse_properties
from rocketq.proxy.server import DEFAULT_GRPC_PORT, GrpcConfig, GrpcEndpoint
from rocketq.remoting import eventloop

if TYPE_CHECKING:  # the client SDK is imported by the commands that use it, not by the servers
    pass


def _read_properties(path: str | None) -> dict[str, str]:
    """A RocketMQ properties file (``namesrv.conf``), parsed as Java does."""
    if path is None:
        return {}
    with open(path, encoding="utf-8") as f:
        return parse_properties(f.read())


def _port_taken(exc: OSError, what: str, host: str, port: int, change: str) -> ConfigError | None:
    """The one-line error for a listener whose port another process holds, naming the port and
    the flag (or config key) that changes it; None for any other ``OSError``."""
    if exc.errno != errno.EADDRINUSE:
        return None
    return ConfigError(
        f"cannot listen on {host}:{port} for the {what}: port {port} is already in use "
        f"(another process listens there); choose another with {change}"
    )


async def _start_listening(start: Awaitable[None], what: str, host: str, port: int, change: str) -> None:
    """Await a server's ``start()``; a port another process holds is the one-line ConfigError
    of :func:`_port_taken`."""
    try:
        await start
    except OSError as exc:
        taken = _port_taken(exc, what, host, port, change)
        if taken is None:
            raise
        raise taken from None


def _fail(command: str, exc: RocketqError) -> int:
    print(f"rocketq {command}: error: {exc}", file=sys.stderr, flush=True)
    return 1


def _run_server(
    command: str, what: str, host: str, port: int, change: str, run: Callable[[], int | None]
) -> int:
    """``run()`` a server until it stops; its exit status (0 when it gives none), or 1 after a
    one-line error for a RocketqError or a port in use (``_port_taken``)."""
    try:
        return run() or 0
    except RocketqError as exc:  # before OSError: DiskFull is both (segments larger than the disk)
        return _fail(command, exc)
    except OSError as exc:
        taken = _port_taken(exc, what, host, port, change)
        if taken is None:
            raise
        return _fail(command, taken)


_BIND_HELP = "listen address (overrides bindAddress; default 127.0.0.1, 0.0.0.0 = every interface)"


def _warn_listen(warnings: list[str]) -> None:
    for warning in warnings:
        logging.getLogger("rocketq.cli").warning("%s", warning)


def _metrics_port(args: argparse.Namespace) -> dict[str, object]:
    """``--metrics-port P``: metricsExporterType=PROM on port P (docs/metrics.md)."""
    if args.metrics_port is None:
        return {}
    return {"metrics_exporter_type": "PROM", "metrics_prom_exporter_port": args.metrics_port}


def _add_metrics_port(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus metrics at http://HOST:PORT/metrics (0 = a free port; default: off, "
        "or metricsExporterType=PROM in the .conf)",
    )


def _namesrv(args: argparse.Namespace) -> int:
    overrides: dict[str, object] = {"listen_port": args.port} if args.port is not None else {}
    overrides.update(_metrics_port(args))
    if args.bind is not None:
        overrides["bind_address"] = args.bind
    config = NamesrvConfig.from_rocketmq_properties(_read_properties(args.config), **overrides)
    _warn_listen(config.listen_warnings())
    where = (config.bind_address, config.listen_port, "--port (or listenPort in namesrv.conf)")
    return _run_server("namesrv", "name server", *where, lambda: run_namesrv(config))


def _broker(args: argparse.Namespace) -> int:
    bind = {"bind_address": args.bind} if args.bind is not None else {}
    if args.config:
        broker_cfg, store_cfg = load_broker_conf(args.config, **bind)
    else:
        broker_cfg, store_cfg = BrokerConfig(**bind), StoreConfig()
    changes: dict[str, object] = {}
    if args.port is not None:
        changes["listen_port"] = args.port
    if args.namesrv_addr is not None:
        changes["namesrv_addr"] = args.namesrv_addr
    changes.update(_metrics_port(args))
    if changes:
        broker_cfg = dataclasses.replace(broker_cfg, **changes)  # type: ignore[arg-type]
    _warn_listen(broker_cfg.listen_warnings())
    where = (broker_cfg.bind_address, broker_cfg.listen_port, "--port (or listenPort in broker.conf)")
    return _run_server("broker", "broker", *where, lambda: run_broker(broker_cfg, store_cfg))


async def _serve_async(args: argparse.Namespace) -> None:
    began = time.monotonic()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # the name server and broker in this process: their shutdown is watched (the brokers of
    # --brokers and --dledger are processes of their own, each with its own watch)
    watches: list[ShutdownWatch] = []

    def stopping() -> None:
        stop.set()
        for watch in watches:
            watch.arm()

    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stopping)
    if args.brokers is not None:
        await serve_brokers(args, stop)
        return
    if args.topic:
        raise ConfigError(
            "--topic creates topics on the brokers of --brokers N; without it use rocketq admin updateTopic"
        )
    if args.dledger is not None:
        await serve_dledger(args, stop)
        return
    watches.append(ShutdownWatch(loop, backstop_s=BACKSTOP_S))
    # a broker.conf (-c) gives the defaults; the serve flags below always win
    base_cfg, base_store = load_broker_conf(args.config) if args.config else (BrokerConfig(), StoreConfig())
    # the name server speaks the broker.conf's tls.server.* settings too
    namesrv = NameServer(
        NamesrvConfig(listen_port=args.namesrv_port, bind_address=args.host, tls=base_cfg.tls)
    )
    await _start_listening(namesrv.start(), "name server", args.host, args.namesrv_port, "--namesrv-port")
    namesrv_addr = f"{args.host}:{namesrv.port}"
    broker_cfg = dataclasses.replace(
        base_cfg,
        broker_name=args.broker_name,
        namesrv_addr=namesrv_addr,
        broker_ip1=args.host,
        bind_address=args.host,
        listen_port=args.broker_port,
        fast_listen_port_enable=False,
        **_metrics_port(args),  # type: ignore[arg-type]
    )
    _warn_listen(broker_cfg.listen_warnings())
    store_cfg = dataclasses.replace(
        base_store,
        store_path_root_dir=os.path.join(args.data_dir, args.broker_name),
        flush_disk_type=args.flush,
    )
    broker = Broker(broker_cfg, store_cfg)
    if broker_cfg.metrics_enabled:  # one /metrics for both: the name server's families join
        namesrv.count_metrics()
        broker.extra_metrics.append(namesrv.metric_families)
    grpc_endpoint = None
    dashboard = None
    try:
        await _start_listening(broker.start(), "broker", args.host, args.broker_port, "--broker-port")
        grpc_line = ""
        if args.grpc_port is None or args.grpc_port >= 0:  # with aclEnable, the same rules (proxy/auth.py)
            port = DEFAULT_GRPC_PORT if args.grpc_port is None else args.grpc_port
            endpoint = GrpcEndpoint(
                broker, GrpcConfig(args.host, port, None, args.grpc_tls_cert, args.grpc_tls_key)
            )
            try:
                await endpoint.start()
                grpc_endpoint = endpoint
                grpc_line = f"\n  gRPC (v5)    {endpoint.address}"
            except RocketqError as exc:
                if args.grpc_port is not None or args.grpc_tls_cert or args.grpc_tls_key:
                    if not str(exc).startswith("cannot listen for gRPC"):
                        raise  # TLS files and the like: the error says what to change
                    raise ConfigError(f"{exc}; choose another port with --grpc-port (-1: no gRPC)") from None
                # the default port is taken (another broker): serve remoting only
                print(
                    f"gRPC endpoint not started: {exc} (--grpc-port chooses another port)",
                    file=sys.stderr,
                    flush=True,
                )
        print(
            f"rocketq ready in {time.monotonic() - began:.2f} s\n"
            f"  name server  {namesrv_addr}\n"
            f"  broker       {broker.broker_addr}  ({args.broker_name}, "
            f"data in {store_cfg.store_path_root_dir}, {store_cfg.flush_disk_type.value})"
            + grpc_line
            + (f"\n  metrics      {broker.metrics_url}" if broker.metrics_url else ""),
            flush=True,
        )
        from rocketq.cli.dashboard import start_alongside  # noqa: PLC0415 - only with --dashboard-port

        dashboard = await start_alongside(args, namesrv_addr)
        eventloop.freeze_start_heap()
        await stop.wait()
    finally:
        if dashboard is not None:
            await dashboard.close()
        if grpc_endpoint is not None:
            await grpc_endpoint.stop()
        await broker.shutdown()
        await namesrv.close()


def _serve(args: argparse.Namespace) -> int:
    logging.getLogger("rocketq.cli").debug("%s", speedups.describe())
    try:
        eventloop.run(_serve_async(args))
    except RocketqError as exc:
        return _fail("serve", exc)
    return 0


def add_server_parsers(sub: Any) -> None:
    """The ``namesrv``, ``broker`` and ``serve`` subcommands."""
    namesrv = sub.add_parser("namesrv", help="run a name server (port 9876)")
    namesrv.add_argument("-c", "--config", help="namesrv.conf in RocketMQ's key=value format")
    namesrv.add_argument("--port", type=int, default=None, help="listen port (overrides listenPort)")
    namesrv.add_argument("--bind", default=None, help=_BIND_HELP)
    _add_metrics_port(namesrv)
    namesrv.set_defaults(func=_namesrv)
    broker = sub.add_parser("broker", help="run a broker (port 10911)")
    broker.add_argument("-c", "--config", help="broker.conf in RocketMQ's key=value format")
    broker.add_argument("--port", type=int, default=None, help="listen port (overrides listenPort)")
    broker.add_argument("-n", "--namesrv-addr", default=None, help="name servers, host:port;host:port")
    broker.add_argument("--bind", default=None, help=_BIND_HELP)
    _add_metrics_port(broker)
    broker.set_defaults(func=_broker)
    serve = sub.add_parser("serve", help="name server and broker in one process")
    serve.add_argument(
        "--data-dir",
        default="rocketq-data",
        help="data directory; the store is in DIR/<broker name> (default %(default)s)",
    )
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to listen on and to advertise (default %(default)s)"
    )
    serve.add_argument(
        "--namesrv-port",
        type=int,
        default=9876,
        help="name server port, 0 = a free one (default %(default)s)",
    )
    serve.add_argument(
        "--broker-port", type=int, default=10911, help="broker port, 0 = a free one (default %(default)s)"
    )
    serve.add_argument("--broker-name", default="broker-a", help="brokerName (default %(default)s)")
    serve.add_argument(
        "--flush",
        default="ASYNC_FLUSH",
        choices=["SYNC_FLUSH", "ASYNC_FLUSH"],
        help="flushDiskType of the store (default %(default)s)",
    )
    serve.add_argument("-c", "--config", help="broker.conf (key=value) for the broker's other settings")
    serve.add_argument(
        "--grpc-port", type=int, default=None, help="RocketMQ 5 gRPC port (default 8081; 0 free, -1 off)"
    )
    serve.add_argument("--grpc-tls-cert", default=None, help="PEM certificate: serve gRPC over TLS")
    serve.add_argument("--grpc-tls-key", default=None, help="PEM private key of --grpc-tls-cert")
    serve.add_argument(
        "--dledger",
        type=int,
        default=None,
        metavar="N",
        help="a DLedger group of N brokers, each its own process (confs written into --data-dir)",
    )
    serve.add_argument(
        "--brokers",
        type=int,
        default=None,
        metavar="N",
        help="N brokers of one cluster (broker-a, broker-b, ...), each its own process and store, "
        "to use N cores (confs written into --data-dir)",
    )
    serve.add_argument(
        "--topic",
        action="append",
        default=None,
        metavar="NAME",
        help="with --brokers: create topic NAME on every broker at start (repeatable)",
    )
    serve.add_argument(
        "--queues",
        type=int,
        default=8,
        help="with --topic: read and write queues of each topic on each broker (default %(default)s)",
    )
    _add_metrics_port(serve)
    serve.set_defaults(func=_serve)
