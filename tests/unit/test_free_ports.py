"""rocketq.free_ports: distinct ports that are free, drawn from below the kernel's ephemeral range
(where outgoing connections and ``bind(0)`` never land), with the kernel's choice as fallback."""

from __future__ import annotations

import errno
import pathlib
import random
import socket

import pytest

from rocketq import free_ports as fp

HOST = "127.0.0.1"


def test_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    low, _high = fp.ephemeral_range()
    ports = fp.free_ports(HOST, 40)
    assert len(set(ports)) == 40
    for port in ports:
        assert fp.LOW_PORT <= port < low
        with socket.socket() as s:
            s.bind((HOST, port))  # free once returned


def test_a_port_in_use_is_never_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as held:
        held.bind((HOST, 0))
        taken = held.getsockname()[1]
        held.listen()
        real = random.Random(7)
        draws = iter([taken, taken])

        class FirstTaken(random.Random):
            def randint(self, a: int, b: int) -> int:
                return next(draws, None) or real.randint(a, b)

        monkeypatch.setattr(fp, "ephemeral_range", lambda: (taken + 2000, taken + 3000))
        monkeypatch.setattr(fp, "LOW_PORT", taken - 10)
        [port] = fp.free_ports(HOST, 1, rng=FirstTaken())
        assert port != taken


def test_the_range_is_read_from_the_kernel_file_and_defaults_when_unreadable(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "range"
    path.write_text("20000\t30000\n")
    assert fp.ephemeral_range(str(path)) == (20000, 30000)
    path.write_text("garbage\n")
    assert fp.ephemeral_range(str(path)) == fp.DEFAULT_EPHEMERAL
    assert fp.ephemeral_range(str(tmp_path / "absent")) == fp.DEFAULT_EPHEMERAL


def test_too_little_room_below_the_range_falls_back_to_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fp, "ephemeral_range", lambda: (fp.LOW_PORT + 10, 60999))
    ports = fp.free_ports(HOST, 5)
    assert len(set(ports)) == 5
    assert all(p > fp.LOW_PORT + 10 for p in ports)


def test_an_address_that_cannot_be_bound_is_an_error_not_a_loop() -> None:
    with pytest.raises(OSError) as info:
        fp.free_ports("192.0.2.1", 1)  # TEST-NET-1: not an address of this host
    assert info.value.errno == errno.EADDRNOTAVAIL
