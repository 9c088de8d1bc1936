"""Resource limits of a remoting server: what one peer may hold of the server's memory and slots.

====================================  =========  ==============================================
limit (:class:`ServerLimits` field)   default    when it trips
====================================  =========  ==============================================
``idle_timeout_s``                    120 s      a connection that received nothing and has no
                                                 request or call in flight for this long is
                                                 closed (RocketMQ ``serverChannelMaxIdleTime
                                                 Seconds``)
``max_buffered_bytes``                256 MiB    the bytes of incomplete frames held for all
                                                 connections together would exceed it: the
                                                 connection whose bytes pushed it over is
                                                 closed
``partial_frame_timeout_s``           30 s       one frame stayed incomplete this long while
                                                 the server was reading (a peer trickling a
                                                 large frame): closed; time with reading paused
                                                 does not count
``max_connections_per_host``          1000       a new connection from a host that already has
                                                 this many open is closed at once
``max_in_flight_requests``            1024       requests of one connection received and not yet
                                                 answered; beyond it reading from that peer
                                                 pauses until half are answered (nothing is
                                                 dropped; see rocketq.remoting.connection)
``read_max_bytes``                    32 KiB     not a limit that closes anything: the most one
                                                 read takes from a connection per loop
                                                 iteration (asyncio's own is 256 KiB), so that
                                                 one peer's burst is handled in parts with the
                                                 other connections' reads between them; a frame
                                                 larger than it is read in steps of up to
                                                 256 KiB while it is incomplete
====================================  =========  ==============================================

Their keys in ``broker.conf`` and ``namesrv.conf`` are :data:`CONFIG_KEYS` (the ``server_*`` fields
of BrokerConfig and NamesrvConfig, read by :func:`limits_from`). 0 turns a limit off
(``max_in_flight_requests`` must stay at least 1; ``read_max_bytes`` 0 leaves the read size to
the event loop). The per-frame cap (16 MiB,
the frame decoder's ``max_frame_size``) is checked before a frame is buffered and is not repeated
here. A tripped limit closes only that connection and is logged at WARNING (idle closes at INFO),
at most once per limit every 10 s with a count of those suppressed.

Cost on the request path: one attribute store per ``data_received`` (activity for the idle
check) and, only when a chunk leaves an incomplete frame behind, an update of the buffered-bytes
total. Idle and partial-frame ages are checked by one periodic sweep per server (a quarter of the
shorter timeout, at most every 5 s), so a connection is closed between the timeout and the
timeout plus one sweep interval after it went quiet.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol

from rocketq.errors import ConfigError

if TYPE_CHECKING:
    from rocketq.remoting.connection import Connection

log = logging.getLogger(__name__)

MiB: Final = 1 << 20

DEFAULT_IDLE_TIMEOUT_S: Final = 120.0
DEFAULT_MAX_BUFFERED_BYTES: Final = 256 * MiB
DEFAULT_PARTIAL_FRAME_TIMEOUT_S: Final = 30.0
DEFAULT_MAX_CONNECTIONS_PER_HOST: Final = 1000
DEFAULT_MAX_IN_FLIGHT_REQUESTS: Final = 1024
DEFAULT_READ_MAX_BYTES: Final = 32 * 1024

#: Longest pause between two sweeps of the idle and partial-frame ages.
_MAX_SWEEP_INTERVAL_S: Final = 5.0
#: Shortest one (test-shortened timeouts).
_MIN_SWEEP_INTERVAL_S: Final = 0.02
#: A limit's WARNING is logged at most once per this many seconds.
LOG_INTERVAL_S: Final = 10.0

#: The broker.conf / namesrv.conf key of each limit, named in the log line when it trips.
CONFIG_KEYS: Final = {
    "idle_timeout_s": "serverChannelMaxIdleTimeSeconds",
    "max_buffered_bytes": "serverBufferedFramesMaxBytes",
    "partial_frame_timeout_s": "serverPartialFrameTimeout",
    "max_connections_per_host": "serverMaxConnectionsPerHost",
    "max_in_flight_requests": "serverMaxInFlightRequests",
    "read_max_bytes": "serverReadMaxBytes",
}


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """The limits of one :class:`~rocketq.remoting.server.RemotingServer` (see the module
    docstring; 0 disables a limit)."""

    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S
    max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES
    partial_frame_timeout_s: float = DEFAULT_PARTIAL_FRAME_TIMEOUT_S
    max_connections_per_host: int = DEFAULT_MAX_CONNECTIONS_PER_HOST
    max_in_flight_requests: int = DEFAULT_MAX_IN_FLIGHT_REQUESTS
    read_max_bytes: int = DEFAULT_READ_MAX_BYTES

    def __post_init__(self) -> None:
        problems = _problems(
            self,
            (
                "idle_timeout_s",
                "max_buffered_bytes",
                "partial_frame_timeout_s",
                "max_connections_per_host",
                "read_max_bytes",
            ),
            "max_in_flight_requests",
            "is negative",
        )
        if problems:
            raise ConfigError("invalid ServerLimits: " + "; ".join(problems))

    @property
    def sweep_interval_s(self) -> float | None:
        """How often ages are checked; None when neither age limit is on."""
        timeouts = [t for t in (self.idle_timeout_s, self.partial_frame_timeout_s) if t > 0]
        if not timeouts:
            return None
        return max(_MIN_SWEEP_INTERVAL_S, min(_MAX_SWEEP_INTERVAL_S, min(timeouts) / 4))


class LimitSettings(Protocol):
    """The fields of BrokerConfig and NamesrvConfig that configure a server's limits."""

    @property
    def server_channel_max_idle_time_seconds(self) -> int: ...
    @property
    def server_buffered_frames_max_bytes(self) -> int: ...
    @property
    def server_partial_frame_timeout_ms(self) -> int: ...
    @property
    def server_max_connections_per_host(self) -> int: ...
    @property
    def server_max_in_flight_requests(self) -> int: ...
    @property
    def server_read_max_bytes(self) -> int: ...


def limits_from(settings: LimitSettings) -> ServerLimits:
    """The :class:`ServerLimits` of a broker's or name server's configuration."""
    return ServerLimits(
        idle_timeout_s=float(settings.server_channel_max_idle_time_seconds),
        max_buffered_bytes=settings.server_buffered_frames_max_bytes,
        partial_frame_timeout_s=settings.server_partial_frame_timeout_ms / 1000,
        max_connections_per_host=settings.server_max_connections_per_host,
        max_in_flight_requests=settings.server_max_in_flight_requests,
        read_max_bytes=settings.server_read_max_bytes,
    )


def limit_problems(settings: LimitSettings) -> list[str]:
    """What is wrong with a configuration's limit fields (for its ``__post_init__``)."""
    return _problems(
        settings,
        (
            "server_channel_max_idle_time_seconds",
            "server_buffered_frames_max_bytes",
            "server_partial_frame_timeout_ms",
            "server_max_connections_per_host",
            "server_read_max_bytes",
        ),
        "server_max_in_flight_requests",
        "is negative (0 disables the limit)",
    )


def _problems(obj: object, limits: tuple[str, ...], in_flight: str, negative: str) -> list[str]:
    """The checks of a set of limits (0 turns each off, a negative one is wrong) and of the
    in-flight request cap (at least 1), by the fields' names in ``obj``."""
    problems = [f"{name}={getattr(obj, name)} {negative}" for name in limits if getattr(obj, name) < 0]
    cap = getattr(obj, in_flight)
    if cap < 1:
        problems.append(f"{in_flight}={cap} is below 1")
    return problems


class _LimitLog:
    """WARNING (or INFO) per limit at most once per :data:`LOG_INTERVAL_S`, counting the rest."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last: dict[str, tuple[float, int]] = {}

    def log(self, limit: str, remote: str, detail: str, level: int = logging.WARNING) -> None:
        now = self._clock()
        last = self._last.get(limit)
        if last is not None and now - last[0] < LOG_INTERVAL_S:
            self._last[limit] = (last[0], last[1] + 1)
            return
        suppressed = last[1] if last is not None else 0
        self._last[limit] = (now, 0)
        extra = f" ({suppressed} more closed by this limit since the last report)" if suppressed else ""
        log.log(level, "closing connection from %s: %s (%s)%s", remote, detail, limit, extra)


class LimitGuard:
    """Applies one server's :class:`ServerLimits` to its connections.

    :attr:`buffered` is the total of incomplete-frame bytes the connections hold (each
    :class:`~rocketq.remoting.connection.Connection` reports its own through :meth:`account`)."""

    def __init__(self, limits: ServerLimits) -> None:
        self.limits = limits
        self.buffered = 0
        #: Connections closed by each limit (field name → count), for tests and operators.
        self.tripped: dict[str, int] = {}
        self._per_host: dict[str, int] = {}
        self._log = _LimitLog()
        self._timer: asyncio.TimerHandle | None = None
        self._running = False
        #: Sweeps done so far (tests wait for them instead of sleeping).
        self.sweeps = 0
        self._connections: Collection[Connection] = ()

    # -- connections --------------------------------------------------------------------------

    def admit(self, conn: Connection) -> bool:
        """Count a new connection against its host's cap; False (and the connection aborted)
        when the host is at the cap."""
        host = conn.remote_host
        count = self._per_host.get(host, 0)
        cap = self.limits.max_connections_per_host
        if cap and count >= cap:
            self._trip(conn, "max_connections_per_host", f"{count} connections from {host} already open")
            conn.abort()
            return False
        self._per_host[host] = count + 1
        conn.add_close_callback(self._release)
        return True

    def _release(self, conn: Connection) -> None:
        host = conn.remote_host
        count = self._per_host.get(host, 0) - 1
        if count > 0:
            self._per_host[host] = count
        else:
            self._per_host.pop(host, None)

    def connections_from(self, host: str) -> int:
        """Open connections counted for ``host``."""
        return self._per_host.get(host, 0)

    def account(self, conn: Connection, held: int, completed: bool) -> bool:
        """A connection now holds ``held`` bytes of an incomplete frame (``completed``: a frame
        was completed in the same chunk, so the incomplete one is new). True when that crossed
        the cap on all connections' incomplete frames and ``conn`` was aborted."""
        grew = held > conn.held_bytes
        self.buffered += held - conn.held_bytes
        conn.held_bytes = held
        if not held:
            conn.partial_since = None
            return False
        if completed or conn.partial_since is None:
            conn.partial_since = asyncio.get_running_loop().time()
        cap = self.limits.max_buffered_bytes
        if grew and cap and self.buffered > cap:
            self._trip(
                conn,
                "max_buffered_bytes",
                f"incomplete frames of all connections hold {self.buffered} B, over the cap of {cap} B",
            )
            self.account(conn, 0, False)
            conn.abort()
            return True
        return False

    # -- the sweep ----------------------------------------------------------------------------

    def start(self, connections: Collection[Connection]) -> None:
        """Check ages of ``connections`` (a live view) periodically until :meth:`stop`."""
        self._connections = connections
        self._running = True
        self._arm()

    def stop(self) -> None:
        self._running = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def update(self, limits: ServerLimits) -> None:
        """Apply new limits from now on (a configuration update): the caps at once, the ages
        from the next sweep, the in-flight cap to connections accepted from now on."""
        self.limits = limits
        if self._running:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._arm()

    def _arm(self) -> None:
        interval = self.limits.sweep_interval_s
        if interval is not None and self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(interval, self._sweep, loop, interval)

    def _sweep(self, loop: asyncio.AbstractEventLoop, interval: float) -> None:
        self._timer = loop.call_later(interval, self._sweep, loop, interval)
        self.sweeps += 1
        now = loop.time()
        idle_s = self.limits.idle_timeout_s
        partial_s = self.limits.partial_frame_timeout_s
        for conn in list(self._connections):
            if conn.closed:
                continue
            since = conn.partial_since
            if partial_s and since is not None and now - since >= partial_s and not conn.reading_paused:
                self._trip(
                    conn,
                    "partial_frame_timeout_s",
                    f"a frame stayed incomplete for {now - since:.1f} s ({conn.buffered} B received of it)",
                )
                conn.abort()
                continue
            if conn.seen_activity():
                conn.quiet_since = now
            elif idle_s and now - conn.quiet_since >= idle_s:
                self._trip(conn, "idle_timeout_s", f"idle for {now - conn.quiet_since:.1f} s", logging.INFO)
                conn.close()

    def _trip(self, conn: Connection, limit: str, detail: str, level: int = logging.WARNING) -> None:
        self.tripped[limit] = self.tripped.get(limit, 0) + 1
        self._log.log(CONFIG_KEYS.get(limit, limit), conn.remote_address, detail, level)


__all__ = [
    "CONFIG_KEYS",
    "DEFAULT_IDLE_TIMEOUT_S",
    "DEFAULT_MAX_BUFFERED_BYTES",
    "DEFAULT_MAX_CONNECTIONS_PER_HOST",
    "DEFAULT_MAX_IN_FLIGHT_REQUESTS",
    "DEFAULT_PARTIAL_FRAME_TIMEOUT_S",
    "LimitGuard",
    "LimitSettings",
    "ServerLimits",
    "limit_problems",
    "limits_from",
]
