"""TLS on the remoting protocol, with RocketMQ's ``TlsSystemConfig`` settings.

Server side (a broker's or a name server's port), ``tls.server.mode``:

* ``disabled`` — plaintext only (the default; a TLS client's ClientHello is not a frame and the
  connection is closed);
* ``permissive`` — TLS and plaintext on the same port: the first byte a client sends decides
  (0x16, a TLS handshake record, starts TLS; anything else is a remoting frame). Remoting clients
  always speak first, so the server waits for that byte (:data:`SNIFF_TIMEOUT_S` at most);
* ``enforcing`` — TLS only.

``tls.server.certPath``/``tls.server.keyPath`` are the PEM certificate (chain) and key;
``tls.server.need.client.auth`` (``none``/``optional``/``require``) asks clients for a certificate
that ``tls.server.trustCertPath`` (PEM CA bundle) must have signed.

Client side: ``tls.enable=true`` turns TLS on for every connection the process opens (a broker to
its name servers, a client to both). ``tls.client.trustCertPath`` is the CA that signed the
servers' certificates (without it the system's default CAs); ``tls.client.authServer=false``
skips verifying the server (RocketMQ's default, not rocketq's). Host names are not checked, as in
RocketMQ: brokers are reached by the IP address in their routes. ``tls.client.certPath`` and
``tls.client.keyPath`` are the client's own certificate for ``need.client.auth``.

The keys are read from the same ``broker.conf``/``namesrv.conf`` as every other setting
(:func:`tls_settings_from_properties`); ``tls.config.file`` names a properties file of them
instead, as RocketMQ's ``-Dtls.config.file``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from rocketq.errors import ConfigError
from rocketq.properties import parse_properties

log = logging.getLogger(__name__)

#: How long a permissive server waits for a new connection's first byte.
SNIFF_TIMEOUT_S: Final = 30.0
#: How long a TLS handshake may take (server and client).
HANDSHAKE_TIMEOUT_S: Final = 10.0
TLS_HANDSHAKE_RECORD: Final = 0x16

MODES: Final = ("disabled", "permissive", "enforcing")
CLIENT_AUTH: Final = ("none", "optional", "require")


@dataclass(frozen=True, slots=True, kw_only=True)
class TlsSettings:
    """RocketMQ's ``TlsSystemConfig`` keys, server and client side (see the module doc)."""

    server_mode: str = "disabled"
    server_cert_path: str | None = None
    server_key_path: str | None = field(default=None, repr=False)
    server_trust_cert_path: str | None = None
    server_need_client_auth: str = "none"
    client_enable: bool = False
    client_trust_cert_path: str | None = None
    client_auth_server: bool = True
    client_cert_path: str | None = None
    client_key_path: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        problems = []
        if self.server_mode not in MODES:
            problems.append(f"tls.server.mode={self.server_mode!r}: expected one of {', '.join(MODES)}")
        elif self.server_mode != "disabled" and not (self.server_cert_path and self.server_key_path):
            problems.append(
                f"tls.server.mode={self.server_mode} needs tls.server.certPath and tls.server.keyPath"
            )
        if self.server_need_client_auth not in CLIENT_AUTH:
            problems.append(
                f"tls.server.need.client.auth={self.server_need_client_auth!r}: expected one of "
                + ", ".join(CLIENT_AUTH)
            )
        elif self.server_need_client_auth != "none" and not self.server_trust_cert_path:
            problems.append("tls.server.need.client.auth needs tls.server.trustCertPath")
        if bool(self.client_cert_path) != bool(self.client_key_path):
            problems.append("tls.client.certPath and tls.client.keyPath must be given together")
        if problems:
            raise ConfigError("invalid TLS settings: " + "; ".join(problems))

    def server_context(self) -> ssl.SSLContext | None:
        """The server's context; None when ``server_mode`` is ``disabled``."""
        if self.server_mode == "disabled":
            return None
        assert self.server_cert_path and self.server_key_path  # __post_init__
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        _load_pair(ctx, self.server_cert_path, self.server_key_path, "tls.server")
        if self.server_need_client_auth != "none":
            assert self.server_trust_cert_path
            _load_ca(ctx, self.server_trust_cert_path, "tls.server.trustCertPath")
            ctx.verify_mode = (
                ssl.CERT_REQUIRED if self.server_need_client_auth == "require" else ssl.CERT_OPTIONAL
            )
        return ctx

    def client_context(self) -> ssl.SSLContext | None:
        """The context of outgoing connections; None unless ``client_enable``."""
        if not self.client_enable:
            return None
        return client_context(
            self.client_trust_cert_path,
            verify=self.client_auth_server,
            cert_path=self.client_cert_path,
            key_path=self.client_key_path,
        )


def client_context(
    ca_path: str | None = None,
    *,
    verify: bool = True,
    cert_path: str | None = None,
    key_path: str | None = None,
) -> ssl.SSLContext:
    """A client context: verifies the server's chain against ``ca_path`` (PEM), or the system's
    CAs without one, unless ``verify`` is False; host names are not checked (module doc)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    if not verify:
        ctx.verify_mode = ssl.CERT_NONE
    elif ca_path:
        _load_ca(ctx, ca_path, "TLS CA file")
    else:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if cert_path or key_path:
        if not (cert_path and key_path):
            raise ConfigError("a TLS client certificate needs both the certificate and the key file")
        _load_pair(ctx, cert_path, key_path, "tls.client")
    return ctx


def _load_pair(ctx: ssl.SSLContext, cert_path: str, key_path: str, what: str) -> None:
    try:
        ctx.load_cert_chain(cert_path, key_path)
    except ssl.SSLError as exc:
        raise ConfigError(
            f"{what}: {cert_path} and {key_path} are not a PEM certificate and its private key ({exc.reason})"
        ) from None
    except OSError as exc:
        raise ConfigError(f"{what}: cannot read the certificate or key: {exc}") from None


def _load_ca(ctx: ssl.SSLContext, ca_path: str, what: str) -> None:
    try:
        ctx.load_verify_locations(cafile=ca_path)
    except ssl.SSLError as exc:
        raise ConfigError(f"{what} {ca_path} is not a PEM certificate bundle ({exc.reason})") from None
    except OSError as exc:
        raise ConfigError(f"{what}: cannot read {ca_path}: {exc}") from None


_KEYS: Final = {
    "tls.server.mode": "server_mode",
    "tls.server.certPath": "server_cert_path",
    "tls.server.keyPath": "server_key_path",
    "tls.server.trustCertPath": "server_trust_cert_path",
    "tls.server.need.client.auth": "server_need_client_auth",
    "tls.enable": "client_enable",
    "tls.client.trustCertPath": "client_trust_cert_path",
    "tls.client.authServer": "client_auth_server",
    "tls.client.certPath": "client_cert_path",
    "tls.client.keyPath": "client_key_path",
}
TLS_CONFIG_FILE_KEY: Final = "tls.config.file"


def tls_settings_from_properties(props: dict[str, str]) -> TlsSettings | None:
    """The ``tls.*`` keys of ``props`` (and of the file ``tls.config.file`` names, whose keys
    win); None when there are none."""
    found = {k: v.strip() for k, v in props.items() if k in _KEYS}
    file_path = props.get(TLS_CONFIG_FILE_KEY, "").strip()
    if file_path:
        try:
            with open(file_path, encoding="utf-8") as f:
                extra = parse_properties(f.read())
        except OSError as exc:
            raise ConfigError(f"tls.config.file: cannot read {file_path}: {exc}") from None
        found.update({k: v.strip() for k, v in extra.items() if k in _KEYS})
    if not found:
        return None
    kwargs: dict[str, str | bool | None] = {}
    for key, raw in found.items():
        name = _KEYS[key]
        if name in ("client_enable", "client_auth_server"):
            if raw.lower() not in ("true", "false"):
                raise ConfigError(f"invalid TLS settings: {key}={raw!r}: expected true or false")
            kwargs[name] = raw.lower() == "true"
        else:
            kwargs[name] = raw or None
    return TlsSettings(**kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# permissive mode: one port, TLS or plaintext by the first byte


class PermissiveServer(asyncio.AbstractServer):
    """A listening socket whose connections are TLS when their first byte is 0x16 and plaintext
    otherwise; each becomes a ``protocol_factory()`` protocol. The close/wait_closed/sockets
    surface of :class:`asyncio.Server` that :class:`~rocketq.remoting.server.RemotingServer` uses."""

    def __init__(
        self,
        sock: socket.socket,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        context: ssl.SSLContext,
    ) -> None:
        self._sock = sock
        self._factory = protocol_factory
        self._context = context
        self._loop = asyncio.get_running_loop()
        self._accepting: asyncio.Task[None] | None = None
        self._sniffing: set[asyncio.Task[None]] = set()
        self._closed = asyncio.Event()

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return () if self._closed.is_set() else (self._sock,)

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def is_serving(self) -> bool:
        return self._accepting is not None and not self._closed.is_set()

    async def start_serving(self) -> None:
        if self._accepting is None and not self._closed.is_set():
            self._accepting = self._loop.create_task(self._accept_loop())

    async def serve_forever(self) -> None:
        await self.start_serving()
        await self._closed.wait()

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        if self._accepting is not None:
            self._accepting.cancel()
        for task in list(self._sniffing):
            task.cancel()
        self._sock.close()

    async def wait_closed(self) -> None:
        await self._closed.wait()
        tasks = [t for t in (self._accepting, *self._sniffing) if t is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _accept_loop(self) -> None:
        while True:
            try:
                conn, _ = await self._loop.sock_accept(self._sock)
            except asyncio.CancelledError:
                raise
            except OSError as exc:
                if self._closed.is_set():
                    return
                log.warning("accept failed on %s: %s", self._sock.getsockname(), exc)
                await asyncio.sleep(0.1)  # EMFILE and the like: do not spin
                continue
            task = self._loop.create_task(self._sniff(conn))
            self._sniffing.add(task)
            task.add_done_callback(self._sniffing.discard)

    async def _sniff(self, conn: socket.socket) -> None:
        conn.setblocking(False)
        try:
            first = await asyncio.wait_for(self._first_byte(conn), SNIFF_TIMEOUT_S)
            if not first:
                conn.close()  # closed before saying anything
                return
            tls = first[0] == TLS_HANDSHAKE_RECORD
            with contextlib.suppress(OSError):
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await self._loop.connect_accepted_socket(
                self._factory,
                conn,
                ssl=self._context if tls else None,
                ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S if tls else None,
            )
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            log.debug("connection dropped before it started: %s", exc)
            conn.close()
        except asyncio.CancelledError:
            conn.close()
            raise

    async def _first_byte(self, conn: socket.socket) -> bytes:
        """The connection's first byte, left in the socket (MSG_PEEK)."""
        fd = conn.fileno()
        while True:
            try:
                return conn.recv(1, socket.MSG_PEEK)
            except (BlockingIOError, InterruptedError):
                pass
            readable = self._loop.create_future()

            def ready(fut: asyncio.Future[None] = readable) -> None:
                if not fut.done():
                    fut.set_result(None)

            self._loop.add_reader(fd, ready)
            try:
                await readable
            finally:
                self._loop.remove_reader(fd)


async def create_permissive_server(
    protocol_factory: Callable[[], asyncio.BaseProtocol],
    host: str,
    port: int,
    context: ssl.SSLContext,
    *,
    backlog: int,
) -> PermissiveServer:
    """Bind ``host:port`` (not yet serving: call ``start_serving``)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    if not infos:
        raise OSError(f"cannot resolve {host!r}")
    family, type_, proto, _, addr = infos[0]
    sock = socket.socket(family, type_, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return PermissiveServer(sock, protocol_factory, context)


__all__ = [
    "HANDSHAKE_TIMEOUT_S",
    "SNIFF_TIMEOUT_S",
    "PermissiveServer",
    "TlsSettings",
    "client_context",
    "create_permissive_server",
    "tls_settings_from_properties",
]
