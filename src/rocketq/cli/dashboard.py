"""The ``dashboard`` command (the web console, :mod:`rocketq.dashboard`) and ``serve``'s
``--dashboard-port``, which starts the console in the serve process."""

from __future__ import annotations

import argparse
import errno
import sys
from typing import Any


def _dashboard(args: argparse.Namespace) -> int:
    from rocketq.dashboard import run_dashboard  # noqa: PLC0415 - loads the client SDK
    from rocketq.remoting import eventloop  # noqa: PLC0415

    if args.sample_interval <= 0:
        print("rocketq dashboard: error: --sample-interval must be > 0", file=sys.stderr)
        return 1
    try:
        eventloop.run(
            run_dashboard(args.namesrv, args.host, args.port, sample_interval_s=args.sample_interval)
        )
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        print(
            f"rocketq dashboard: error: cannot listen on {args.host}:{args.port}: port {args.port} is "
            "already in use (another process listens there); choose another with --port",
            file=sys.stderr,
        )
        return 1
    return 0


def add_parser(sub: Any) -> None:
    """The ``dashboard`` subcommand, and ``--dashboard-port`` on ``serve`` (added before it)."""
    p = sub.add_parser("dashboard", help="web console for a cluster (port 8080)")
    p.add_argument(
        "-n",
        "--namesrv",
        default="127.0.0.1:9876",
        help="name servers, host:port;host:port (default %(default)s)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default %(default)s)")
    p.add_argument("--port", type=int, default=8080, help="HTTP port, 0 = a free one (default %(default)s)")
    p.add_argument(
        "--sample-interval",
        type=float,
        default=10.0,
        help="seconds between samples of the topics' max offsets for the TPS charts (default %(default)s)",
    )
    p.set_defaults(func=_dashboard)
    serve = sub.choices.get("serve")
    if serve is not None:
        serve.add_argument(
            "--dashboard-port",
            type=int,
            default=None,
            help="also serve the web console on this port (0 = a free one; default: no console)",
        )
        serve.add_argument(
            "--dashboard-sample-interval",
            type=float,
            default=10.0,
            help="seconds between the console's TPS samples (default %(default)s)",
        )


async def start_alongside(args: argparse.Namespace, namesrv_addr: str) -> Any:
    """The console of ``serve --dashboard-port``, started (None without the flag)."""
    port = getattr(args, "dashboard_port", None)
    if port is None:
        return None
    from rocketq.dashboard import start_dashboard  # noqa: PLC0415

    app = await start_dashboard(
        namesrv_addr, args.host, port, sample_interval_s=getattr(args, "dashboard_sample_interval", 10.0)
    )
    print(f"  dashboard    http://{args.host}:{app.port}/", flush=True)
    return app
