"""Listen addresses: ``rocketq namesrv`` and ``rocketq broker`` listen on 127.0.0.1 unless told
otherwise (``--bind`` / ``bindAddress``), the broker advertises what it listens on when
``brokerIP1`` is not given, and listening on every interface without ACL is warned about."""

from __future__ import annotations

import pathlib
import re

import pytest
from procs import RocketqProcess, free_port, wait_until, write_broker_conf

from rocketq.broker.config import BrokerConfig, broker_config_from_properties, local_ip
from rocketq.namesrv.config import NamesrvConfig

LISTENING = re.compile(r"remoting server listening on (\S+):(\d+)")
EXPOSED = "listens on all interfaces"


def test_defaults_listen_on_loopback_and_advertise_it() -> None:
    assert NamesrvConfig().bind_address == "127.0.0.1"
    broker = BrokerConfig(broker_name="b", namesrv_addr=None)
    assert (broker.bind_address, broker.broker_ip1) == ("127.0.0.1", "127.0.0.1")
    assert broker.listen_warnings() == []
    assert NamesrvConfig().listen_warnings() == []


def test_broker_ip1_follows_the_bind_address_unless_given() -> None:
    assert BrokerConfig(broker_name="b", bind_address="10.1.2.3").broker_ip1 == "10.1.2.3"
    assert BrokerConfig(broker_name="b", bind_address="0.0.0.0").broker_ip1 == local_ip()
    given = broker_config_from_properties(
        {"brokerIP1": "10.0.0.5", "bindAddress": "0.0.0.0"}, broker_name="b"
    )
    assert (given.bind_address, given.broker_ip1) == ("0.0.0.0", "10.0.0.5")


def test_wildcard_without_acl_and_unreachable_advertisement_are_warned_about() -> None:
    (exposed,) = NamesrvConfig(bind_address="0.0.0.0").listen_warnings()
    assert EXPOSED in exposed and "aclEnable" in exposed and "--bind" in exposed
    assert NamesrvConfig(bind_address="0.0.0.0", acl_enable=True).listen_warnings() == []
    (exposed,) = BrokerConfig(broker_name="b", bind_address="::").listen_warnings()
    assert "[::]:10911" in exposed
    (unreachable,) = BrokerConfig(broker_name="b", broker_ip1="10.0.0.5").listen_warnings()
    assert "brokerIP1=10.0.0.5" in unreachable and "bindAddress=10.0.0.5" in unreachable


@pytest.mark.parametrize(
    ("extra", "host", "warned"),
    [([], "127.0.0.1", False), (["--bind", "0.0.0.0"], "0.0.0.0", True)],
)
def test_namesrv_and_broker_processes_listen_where_told(
    extra: list[str], host: str, warned: bool, tmp_path: pathlib.Path
) -> None:
    namesrv_port = free_port()
    namesrv = RocketqProcess("namesrv", ["namesrv", "--port", str(namesrv_port), *extra], tmp_path / "logs")
    conf = write_broker_conf(
        tmp_path / "broker.conf",
        {"storePathRootDir": str(tmp_path / "store"), "listenPort": "0", "brokerName": "bind-test"},
    )
    broker = RocketqProcess(
        "broker", ["broker", "-c", str(conf), "-n", f"127.0.0.1:{namesrv_port}", *extra], tmp_path / "logs"
    )
    try:
        for proc in (namesrv, broker):
            wait_until(lambda p=proc: LISTENING.search(p.log_text(None)), f"{proc.name} to listen", 60, proc)
            found = LISTENING.search(proc.log_text(None))
            assert found is not None and found.group(1) == host, proc.log_text()
            assert (EXPOSED in proc.log_text(None)) is warned, proc.log_text()
        # the broker registered with the name server at the address it listens on (127.0.0.1 or
        # the outward interface's address)
        advertised = "127.0.0.1" if host == "127.0.0.1" else local_ip()
        wait_until(
            lambda: f"started at {advertised}:" in broker.log_text(None),
            "the broker's start line",
            60,
            broker,
        )
    finally:
        for proc in (broker, namesrv):
            if proc.running:
                proc.terminate()
