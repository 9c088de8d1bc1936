"""A chaos group whose broker finds its port taken between choosing it and binding it starts
again on fresh ports (``ChaosGroup.start``), instead of failing every test of the module: the
first start's confs are made to name a port a listener of this test holds."""

from __future__ import annotations

import pathlib
import socket

import pytest

import rocketq.cli.dledger_serve as dledger_serve
from rocketq.testing.chaos.cluster import ChaosGroup, ChaosUnsupported

HOST = "127.0.0.1"


@pytest.mark.slow  # three broker processes started twice
def test_a_taken_port_makes_the_group_start_again_on_fresh_ports(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = dledger_serve.free_ports
    calls: list[list[int]] = []
    with socket.socket() as held:
        held.bind((HOST, 0))
        held.listen()
        taken = int(held.getsockname()[1])

        def first_names_a_taken_port(host: str, count: int) -> list[int]:
            ports = real(host, count)
            if not calls:
                ports[0] = taken  # broker n0's listenPort
            calls.append(ports)
            return ports

        monkeypatch.setattr(dledger_serve, "free_ports", first_names_a_taken_port)
        group = ChaosGroup(tmp_path / "group", verbose=False)
        try:
            group.start()
        except ChaosUnsupported as exc:
            pytest.skip(str(exc))
        try:
            assert len(calls) == 2
            assert taken not in calls[1]
            assert group.broker_addr(0) == f"{HOST}:{calls[1][0]}"
            assert group.leader() is not None and group.master() == group.leader()
            log = (tmp_path / "group" / "broker-n0.log").read_text()
            assert "is already in use" in log and "start 1 of broker n0" in log
        finally:
            group.stop()
