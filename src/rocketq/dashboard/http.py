"""A small HTTP/1.1 server for the console: one request per connection, a router of
``(method, regex)`` routes, JSON answers and static files.

A handler receives a :class:`Request` and returns a :class:`Response`; an :class:`HttpError`
it raises becomes a JSON ``{"error": ...}`` answer with its status. Request bodies are bounded
(1 MiB) and a client that does not send its request within 10 s is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

log = logging.getLogger(__name__)

MAX_BODY = 1 << 20
READ_TIMEOUT_S = 10.0

_REASONS = {
    200: "OK",
    201: "Created",
    204: "No Content",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    403: "Forbidden",
    413: "Payload Too Large",
    415: "Unsupported Media Type",
    500: "Internal Server Error",
    502: "Bad Gateway",
}


class HttpError(Exception):
    """An error answer: ``status`` and a message for ``{"error": ...}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    params: dict[str, str] = field(default_factory=dict)

    def json(self) -> dict[str, Any]:
        """The body as a JSON object; HttpError 400 when it is not one."""
        try:
            doc = json.loads(self.body or b"{}")
        except ValueError as exc:
            raise HttpError(400, f"request body is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise HttpError(400, "request body must be a JSON object")
        return doc

    def arg(self, name: str, default: str | None = None) -> str:
        """Query argument ``name``; HttpError 400 when missing and no default."""
        value = self.query.get(name, default)
        if value is None:
            raise HttpError(400, f"missing query argument {name!r}")
        return value

    def int_arg(self, name: str, default: int | None = None) -> int:
        raw = self.query.get(name)
        if raw is None or raw == "":
            if default is None:
                raise HttpError(400, f"missing query argument {name!r}")
            return default
        try:
            return int(raw)
        except ValueError:
            raise HttpError(400, f"query argument {name}={raw!r} is not an integer") from None


@dataclass
class Response:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def json(cls, doc: object, status: int = 200) -> Response:
        return cls(status, json.dumps(doc, separators=(",", ":")).encode())


Handler = Callable[[Request], Awaitable[Response]]


class Router:
    def __init__(self) -> None:
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = []

    def add(self, method: str, pattern: str, handler: Handler) -> None:
        """``pattern`` is a path with ``{name}`` segments (one path segment each)."""
        regex = re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", pattern)
        self._routes.append((method, re.compile(f"^{regex}$"), handler))

    def match(self, method: str, path: str) -> tuple[Handler, dict[str, str]]:
        allowed = False
        for m, regex, handler in self._routes:
            found = regex.match(path)
            if found is None:
                continue
            if m != method:
                allowed = True
                continue
            return handler, {k: unquote(v) for k, v in found.groupdict().items()}
        if allowed:
            raise HttpError(405, f"{method} is not allowed on {path}")
        raise HttpError(404, f"no such page: {path}")


async def _read_request(reader: asyncio.StreamReader) -> Request | None:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3:
        raise HttpError(400, "malformed request line")
    method, target, _ = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise HttpError(400, f"malformed header line {line!r}")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0") or "0")
    if length > MAX_BODY:
        raise HttpError(413, f"request body of {length} bytes is over {MAX_BODY}")
    body = await reader.readexactly(length) if length > 0 else b""
    url = urlsplit(target)
    query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
    return Request(method.upper(), url.path, query, headers, body)


def _check_same_origin(request: Request) -> None:
    """A change must come from the console's own pages: a JSON body (which a page of another
    site cannot send without a CORS preflight, never granted here) and, when the browser names
    the page's origin, the same host."""
    ctype = request.headers.get("content-type", "")
    if request.body and not ctype.lower().startswith("application/json"):
        raise HttpError(415, f"a request body must be application/json, not {ctype or 'untyped'}")
    origin = request.headers.get("origin")
    host = request.headers.get("host")
    if origin is not None and host is not None and urlsplit(origin).netloc != host:
        raise HttpError(403, f"changes are accepted from the console's own pages only, not from {origin}")


def _encode(response: Response) -> bytes:
    reason = _REASONS.get(response.status, "Unknown")
    head = [
        f"HTTP/1.1 {response.status} {reason}",
        f"Content-Type: {response.content_type}",
        f"Content-Length: {len(response.body)}",
        "Connection: close",
        "Cache-Control: no-store",
        "X-Content-Type-Options: nosniff",
    ]
    head += [f"{k}: {v}" for k, v in response.headers.items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + response.body


class HttpServer:
    """Serves ``router`` on ``host:port`` (0: a free port, see :attr:`port`)."""

    def __init__(self, router: Router, host: str, port: int) -> None:
        self.router = router
        self.host = host
        self._port = port
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        if self._server is None or not self._server.sockets:
            return self._port
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self._port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                request = await asyncio.wait_for(_read_request(reader), READ_TIMEOUT_S)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
                return
            except (ValueError, HttpError) as exc:
                status = exc.status if isinstance(exc, HttpError) else 400
                writer.write(_encode(Response.json({"error": str(exc)}, status)))
                await writer.drain()
                return
            if request is None:
                return
            response = await self.dispatch(request)
            writer.write(_encode(response))
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def dispatch(self, request: Request) -> Response:
        """The answer to one request (also used by the tests without a socket)."""
        try:
            handler, params = self.router.match(request.method, request.path)
            request.params = params
            if request.method not in ("GET", "HEAD"):
                _check_same_origin(request)
            return await handler(request)
        except HttpError as exc:
            return Response.json({"error": exc.message}, exc.status)
        except Exception as exc:
            log.exception("dashboard: %s %s failed", request.method, request.path)
            return Response.json({"error": f"{type(exc).__name__}: {exc}"}, 500)
