"""Running a name server as a process: until a stop event, or SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal

from rocketq.namesrv.config import NamesrvConfig
from rocketq.namesrv.server import NameServer
from rocketq.remoting import eventloop

log = logging.getLogger("rocketq.namesrv.server")


async def serve_namesrv(
    config: NamesrvConfig, stop: asyncio.Event | None = None, *, freeze_heap: bool = False
) -> None:
    """Run a name server until ``stop`` is set, or SIGINT/SIGTERM when no event is given;
    ``freeze_heap``: a process of its own (:func:`~rocketq.remoting.eventloop.freeze_start_heap`)."""
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    if stop is None:
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, stop.set)
                installed.append(sig)
            except (NotImplementedError, RuntimeError, ValueError):  # not the main thread / no support
                pass
    server = NameServer(config)
    await server.start()
    if freeze_heap:
        eventloop.freeze_start_heap()
    try:
        await stop.wait()
        log.info("name server on %s shutting down", server.address)
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        await server.close()


def run_namesrv(config: NamesrvConfig | None = None) -> int:
    """Run a name server in this process until SIGINT or SIGTERM; returns the exit status (0)."""
    eventloop.run(serve_namesrv(config or NamesrvConfig(), freeze_heap=True))
    return 0
