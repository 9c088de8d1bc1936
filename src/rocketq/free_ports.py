"""Free TCP ports for processes a caller starts itself (``rocketq serve --dledger``, ``rocketq
serve --brokers``, the chaos group, test fixtures).

Theory of operation. A port is chosen by binding a probe socket to it and closed again before the
child process binds it; anything that binds in between takes it and the child fails with
"address in use". ``bind(host, 0)`` hands out ports from the kernel's ephemeral range, which is
also where every outgoing connection and every other ``bind(0)`` (an in-process listener, a fault
proxy) draws its local port, so a port freed a moment ago is a likely next pick for any of them.

:func:`free_ports` therefore draws at random from *below* the ephemeral range
(``/proc/sys/net/ipv4/ip_local_port_range``; 10000 up to its low bound), where nothing takes a
port unless it asks for that number. Every probe stays bound until all ``count`` are chosen, so
the list holds distinct ports. Where the range cannot be read or leaves too little room below
it, the kernel's ``bind(0)`` choice is used.
"""

from __future__ import annotations

import errno
import random
import socket

#: the lowest port drawn from (well above the registered services most hosts run)
LOW_PORT = 10000
#: the ephemeral range when /proc does not say (Linux's default)
DEFAULT_EPHEMERAL = (32768, 60999)
#: attempts per port before falling back to the kernel's choice
ATTEMPTS = 64
_RANGE_PATH = "/proc/sys/net/ipv4/ip_local_port_range"


def ephemeral_range(path: str = _RANGE_PATH) -> tuple[int, int]:
    """The kernel's ephemeral port range (low, high); Linux's default where it cannot be read."""
    try:
        with open(path, encoding="ascii") as f:
            low, high = (int(x) for x in f.read().split()[:2])
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL
    return low, high


def free_ports(host: str, count: int, *, rng: random.Random | None = None) -> list[int]:
    """``count`` distinct ports free on ``host`` now, outside the ephemeral range where it can."""
    pick = rng or random.SystemRandom()
    top = ephemeral_range()[0] - 1
    probes: list[socket.socket] = []
    try:
        for _ in range(count):
            probes.append(_probe(host, pick, top))
        return [int(p.getsockname()[1]) for p in probes]
    finally:
        for probe in probes:
            probe.close()


def free_port(host: str = "127.0.0.1") -> int:
    """One port free on ``host`` now (see :func:`free_ports`)."""
    return free_ports(host, 1)[0]


def _probe(host: str, pick: random.Random, top: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        if top - LOW_PORT >= 1000:
            for _ in range(ATTEMPTS):
                try:
                    sock.bind((host, pick.randint(LOW_PORT, top)))
                    return sock
                except OSError as exc:
                    if exc.errno not in (errno.EADDRINUSE, errno.EACCES):
                        raise
        sock.bind((host, 0))
        return sock
    except BaseException:
        sock.close()
        raise


__all__ = ["ephemeral_range", "free_port", "free_ports"]
