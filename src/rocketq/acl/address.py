"""Remote address patterns of ``plain_acl.yml`` (``globalWhiteRemoteAddresses``,
``whiteRemoteAddress``), with the forms RocketMQ 4.x's ``RemoteAddressStrategyFactory`` accepts:

=========================  ===================================================
``*`` or ``*.*.*.*``       every address
empty / absent             no address (the account must sign)
``192.168.0.1``            that address (IPv6 too: compared fully expanded)
``192.168.0.{1,2,3}``      the listed last octets
``192.168.0.1,10.0.0.2``   the listed addresses
``192.168.0.*``            a wildcard octet (and every octet after it ``*``)
``192.168.1.1-100``        a range of one octet (``192.168.1-5.*`` too)
=========================  ===================================================

:func:`compile_address_pattern` raises :class:`~rocketq.errors.ConfigError` for anything else.
IPv6 ranges and wildcards are not supported (RocketMQ has them; rocketq accepts exact IPv6
addresses and ``*:*:*:*:*:*:*:*`` only).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

from rocketq.errors import ConfigError

AddressMatcher = Callable[[str], bool]


def _never(_host: str) -> bool:
    return False


def _always(_host: str) -> bool:
    return True


def _ipv4(text: str, pattern: str) -> str:
    try:
        return str(ipaddress.IPv4Address(text.strip()))
    except ValueError:
        raise ConfigError(f"address pattern {pattern!r}: {text.strip()!r} is not an IPv4 address") from None


def _normal(host: str) -> str:
    """``host`` in the form patterns are compared with (IPv6 expanded without its ``%scope``,
    IPv4-mapped unwrapped)."""
    try:
        addr = ipaddress.ip_address(host.strip().strip("[]").partition("%")[0])
    except ValueError:
        return host.strip()
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.ipv4_mapped is not None:
            return str(addr.ipv4_mapped)
        return addr.exploded
    return str(addr)


def _octet_range(part: str, pattern: str) -> tuple[int, int]:
    if part == "*":
        return 0, 255
    low_text, sep, high_text = part.partition("-")
    try:
        low = int(low_text)
        high = int(high_text) if sep else low
    except ValueError:
        raise ConfigError(f"address pattern {pattern!r}: {part!r} is not a number, '*' or 'a-b'") from None
    if not 0 <= low <= high <= 255:
        raise ConfigError(f"address pattern {pattern!r}: range {part!r} must satisfy 0 <= a <= b <= 255")
    return low, high


def compile_address_pattern(pattern: str | None) -> AddressMatcher:
    """A function of a remote host (no port) telling whether ``pattern`` admits it."""
    text = (pattern or "").strip()
    if not text:
        return _never
    if text in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*"):
        return _always
    if text.endswith("}"):
        head, brace, tail = text.partition("{")
        if not brace or not head.endswith(".") or head.count(".") != 3:
            raise ConfigError(f"address pattern {pattern!r}: expected a.b.c.{{x,y,z}}")
        allowed = {_ipv4(head + part, text) for part in tail[:-1].split(",") if part.strip()}
        return lambda host: _normal(host) in allowed
    if "," in text:
        members: set[str] = set()
        for part in text.split(","):
            try:
                members.add(_normal(str(ipaddress.ip_address(part.strip()))))
            except ValueError:
                raise ConfigError(
                    f"address pattern {pattern!r}: {part.strip()!r} is not an address"
                ) from None
        return lambda host: _normal(host) in members
    if ":" in text:
        try:
            exact6 = ipaddress.IPv6Address(text).exploded
        except ValueError:
            raise ConfigError(
                f"address pattern {pattern!r}: not an IPv6 address (IPv6 ranges are not supported)"
            ) from None
        return lambda host: _normal(host) == exact6
    parts = text.split(".")
    if len(parts) != 4:
        raise ConfigError(f"address pattern {pattern!r}: expected four dotted parts")
    if "*" not in text and "-" not in text:
        exact4 = _ipv4(text, text)
        return lambda host: _normal(host) == exact4
    ranges = [_octet_range(part.strip(), text) for part in parts]
    first_open = next(i for i, part in enumerate(parts) if part.strip() == "*" or "-" in part)
    if first_open == 0:
        raise ConfigError(f"address pattern {pattern!r}: the first octet cannot be a wildcard or range")
    if any(part.strip() != "*" for part in parts[first_open + 1 :]):
        raise ConfigError(f"address pattern {pattern!r}: every octet after a wildcard or range must be '*'")

    def match(host: str) -> bool:
        normal = _normal(host)
        try:
            octets = ipaddress.IPv4Address(normal).packed
        except ValueError:
            return False
        return all(low <= octet <= high for octet, (low, high) in zip(octets, ranges, strict=True))

    return match


def host_of(address: str) -> str:
    """The host part of ``host:port`` (``[v6]:port`` too)."""
    host = address.rpartition(":")[0] if ":" in address else address
    return host.strip("[]")


__all__ = [
    "AddressMatcher",
    "compile_address_pattern",
    "host_of",
]
