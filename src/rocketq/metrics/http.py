"""The ``/metrics`` HTTP endpoint: a small asyncio HTTP/1.1 server on the serving process's loop.

It answers ``GET /metrics`` (and ``HEAD``) with the text exposition that ``collect()`` renders,
``404`` for any other path and ``405`` for any other method; one request per connection
(``Connection: close``), a request head of at most 8 KiB read within 10 s. ``collect`` is a
coroutine: the broker's snapshots its loop-owned counters on the loop and reads the store in a
worker thread, so a scrape never blocks the loop on a disk. The HTTP server itself touches no
lock and no thread: a scrape costs the loop one accept, one read and one write.

Port 0 binds a free port; read it back from :attr:`MetricsServer.port` once started.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from rocketq.metrics.exposition import CONTENT_TYPE

log = logging.getLogger(__name__)

#: The path Prometheus scrapes (RocketMQ's exporter serves the same).
METRICS_PATH = "/metrics"
MAX_HEAD_BYTES = 8192
READ_TIMEOUT_S = 10.0

Collect = Callable[[], Awaitable[str]]


def _response(status: str, body: bytes, content_type: str, *, head_only: bool = False) -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode("ascii")
    return head if head_only else head + body


class MetricsServer:
    """Serves ``collect()`` at ``http://host:port/metrics``."""

    def __init__(self, host: str, port: int, collect: Collect) -> None:
        if not 0 <= port <= 65535:
            raise ValueError(f"metrics port {port} is outside 0..65535")
        self.host = host
        self._port = port
        self._collect = collect
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self._port}{METRICS_PATH}"

    async def start(self) -> None:
        if self._server is not None:
            return
        server = await asyncio.start_server(
            self._serve, self.host, self._port, reuse_address=True, start_serving=False
        )
        self._server = server
        if server.sockets:
            self._port = int(server.sockets[0].getsockname()[1])
        await server.start_serving()
        log.info("metrics served at %s", self.url)

    async def close(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await server.wait_closed()

    async def __aenter__(self) -> MetricsServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self._answer(reader, writer)
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            if task is not None:
                self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
        if len(head) > MAX_HEAD_BYTES:
            writer.write(_response("431 Request Header Fields Too Large", b"", "text/plain"))
            return
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            writer.write(_response("400 Bad Request", b"malformed request line\n", "text/plain"))
            return
        method, target, _ = parts
        path = target.split("?", 1)[0]
        if path != METRICS_PATH:
            body = f"no {path}; try {METRICS_PATH}\n".encode()
            writer.write(_response("404 Not Found", body, "text/plain"))
            return
        if method not in ("GET", "HEAD"):
            writer.write(_response("405 Method Not Allowed", b"use GET\n", "text/plain"))
            return
        try:
            text = await self._collect()
        except Exception:
            log.exception("collecting metrics failed")
            writer.write(_response("500 Internal Server Error", b"collecting metrics failed\n", "text/plain"))
            return
        writer.write(_response("200 OK", text.encode("utf-8"), CONTENT_TYPE, head_only=method == "HEAD"))
        await writer.drain()


__all__ = ["METRICS_PATH", "MetricsServer"]
